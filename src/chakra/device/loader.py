"""Load a Kineto (PyTorch profiler, Chrome-trace JSON) file into a :class:`KinetoTrace`.

One path for every size: the file's bytes are decoded by msgspec (:mod:`chakra.device.decode`: typed
Structs declaring only the fields the stages read), one event at a time in one pass that builds the
records (:class:`~chakra.device.model.KinetoEvent`) and the correlation tables; one sorted stack sweep
per CPU thread fills exclusive durations and parents.  Nothing scans all events per kernel.

Decisions, so that the linker and the converter can rely on them:

- Only ``ph == "X"`` events are kept in ``events`` (file order).  Flow events (``s``/``f``) are counted in
  ``flow_count``; ``ac2g`` flow ids are used only to count how many GPU correlations they confirm
  (``stats["ac2g_confirmed"]``): the ``correlation`` args are authoritative.
- Positions: ``KinetoEvent.parent``, ``launch_by_correlation`` and ``gpu_by_correlation`` hold positions in
  ``trace.events``; ``KinetoTrace.file_index`` the position in the file's ``traceEvents`` (for messages).
- Bad times: an X event without a usable ``ts`` (missing, not a number, NaN, infinite) cannot be placed on a
  timeline: TraceFormatError naming the event index.  A missing, NaN, infinite, negative or huge
  (> 1e12 µs) ``dur`` is clamped to 0 and reported once in ``warnings`` (count + first event indices): one
  broken CUPTI record should not make a whole trace unusable.
- Launch classification: by name (``kinds.py``), plus any runtime/driver call whose correlation matches a GPU
  event.  A launch-named call whose GPU work is outside the trace stays LAUNCH (counted in
  ``stats["launch_without_gpu"]``); GPU events without a launcher are counted in
  ``stats["gpu_without_launch"]`` (ranks 1 and 3 of the DLRM traces have 64 each: kernels that were launched
  before the profiler started).
- Duplicate correlation ids between two launching calls: the first in file order wins, a warning is recorded.
  Several GPU events per correlation are normal (graphs) and all are kept, in file order.
- Exclusive duration of a CPU event = its duration minus the time covered by its direct children, each child
  clipped to its parent's end; never negative.  GPU events: ``excl_dur = dur``.  OTHER events
  (python_function, Trace, gpu_user_annotation, ...) are not part of the CPU stacks: ``excl_dur = dur``,
  ``parent = None``.
- A GPU op's stream is its ``args.stream``, else (missing, or not an integer) its ``tid``; its device
  ``args.device``, else its ``pid``.
- ``args``: the ids and placement (External id, Record function id, correlation, stream, device) are read
  from every event into typed fields; the whole ``args`` object only where a stage reads more (see
  :class:`~chakra.device.model.KinetoEvent`).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson

from chakra.device.decode import (
    INTERPRETED_TOP,
    UNSET,
    Event,
    EventArgs,
    args_text,
    decode_document,
    event_args,
    event_decoder,
    lenient_event,
)
from chakra.device.kinds import runtime_kind
from chakra.device.model import (
    ANNOTATION,
    CATEGORY_KIND,
    DRIVER,
    HOST_OP,
    KERNEL,
    LAUNCH,
    MEMCPY,
    MEMSET,
    NO_ARGS,
    NOT_MODELLED_WHY,
    NOTHING_TO_MODEL,
    OTHER,
    RUNTIME,
    SYNC,
    KinetoEvent,
    KinetoTrace,
    StepWindow,
)
from chakra.errors import TraceFormatError
from chakra.io import gc_paused, read_bytes
from chakra.tunables import CORRUPT_DUR_US, IDS_LISTED_MAX, NEST_REL_EPS

log = logging.getLogger(__name__)

KIND_NAMES = {
    HOST_OP: "host_op",
    ANNOTATION: "annotation",
    RUNTIME: "runtime",
    LAUNCH: "launch",
    SYNC: "sync",
    DRIVER: "driver",
    KERNEL: "kernel",
    MEMCPY: "memcpy",
    MEMSET: "memset",
    OTHER: "other",
}

PROFILER_STEP_RE = re.compile(r"ProfilerStep#\d+\Z")

_INF = math.inf
_NAN = math.nan


def _as_int(value: Any) -> int | None:
    """An id field as int: ints pass, integral floats and digit strings convert, anything else is None."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _key(value: Any) -> Any:
    """A pid/tid as a dict key: ints and strings pass; a list or object (a broken writer) becomes its text."""
    if type(value) is int or type(value) is str or value is None:
        return value
    return value if isinstance(value, (int, float, str)) else str(value)


def _as_float(value: Any) -> float | None:
    """A time field as a finite float, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def load_kineto(path: str | os.PathLike[str], annotation: str | None = None, *,
                op_args: bool = False) -> KinetoTrace:
    """Read a Kineto trace (``.json`` or gzip JSON, detected by magic bytes).

    ``annotation``: name of the annotation whose windows define ``steps`` instead of ``ProfilerStep#N``
    (exact name match; TraceFormatError when no such event exists).  ``op_args``: keep the ``args`` of
    host ops and annotations too (their input shapes and types, collective fields): what a host ET
    would otherwise tell, needed when the Kineto trace is linked alone (``chakra.link.kineto_only``).
    """
    with gc_paused():
        return _build(read_bytes(path), str(path), annotation, op_args)


def build_kineto_trace(data: Any, path: str | os.PathLike[str] = "<memory>",
                       annotation: str | None = None, *, op_args: bool = False) -> KinetoTrace:
    """Build the model from an already parsed Kineto document (``path`` only names it in errors): it is
    encoded once and read as a file would be, by the one decoder."""
    try:
        raw = orjson.dumps(data)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise TraceFormatError(f"not a JSON document ({exc})", path) from None
    with gc_paused():
        return _build(raw, str(path), annotation, op_args)


def _build(data: bytes, spath: str, annotation: str | None, op_args: bool) -> KinetoTrace:
    top, raws = decode_document(data, spath)
    del data  # the events' bytes (``raws``) keep the buffer alive until they are read
    trace = KinetoTrace(path=spath)
    _read_top_level(trace, top)
    calls, kinds = _read_events(trace, raws, op_args)
    del raws
    _classify_launches(trace, calls, kinds)
    _sweep_threads(trace)
    trace.steps = _find_steps(trace, annotation)
    for w in trace.warnings:
        log.warning("%s: %s", spath, w)
    return trace


def _read_top_level(trace: KinetoTrace, top: dict[str, Any]) -> None:
    info = top.get("distributedInfo")
    if isinstance(info, dict):
        trace.distributed_info = info
        trace.rank = _as_int(info.get("rank"))
        trace.world_size = _as_int(info.get("world_size"))
        backend = info.get("backend")
        trace.backend = str(backend) if backend is not None else None
        pgs = info.get("pg_config")
        if isinstance(pgs, list):
            trace.pg_config = [pg for pg in pgs if isinstance(pg, dict)]
            if len(trace.pg_config) != len(pgs):
                trace.warnings.append("distributedInfo.pg_config: ignored entries that are not objects")
        elif pgs is not None:
            trace.warnings.append("distributedInfo.pg_config is not a list: ignored")
    elif info is not None:
        trace.warnings.append("distributedInfo is not an object: ignored")

    props = top.get("deviceProperties")
    if isinstance(props, list):
        trace.device_properties = [p for p in props if isinstance(p, dict)]
    elif props is not None:
        trace.warnings.append("deviceProperties is not a list: ignored")

    name = top.get("traceName")
    trace.trace_name = str(name) if name is not None else None
    trace.extra = {k: v for k, v in top.items() if k not in INTERPRETED_TOP}


def _read_events(trace: KinetoTrace, raws: list[msgspec.Raw], op_args: bool = False
                 ) -> tuple[list[int], list[int]]:
    """The single pass over the complete events (:func:`_complete_events` decodes them and counts the
    others): build their records, the GPU correlation table and the positions by role.  Returns the
    positions of the runtime/driver calls that carry a correlation id (the launches, and the calls that
    may turn out to be launches) and the count of events per kind (as read: promotions move some later).

    ``op_args``: host ops and annotations keep their ``args`` too (see :func:`load_kineto`)."""
    path = trace.path
    events = trace.events
    append = events.append
    gpu_by_corr = trace.gpu_by_correlation
    op_positions = trace.op_positions
    gpu_positions = trace.gpu_positions
    sync_positions = trace.sync_positions
    calls: list[int] = []
    kinds = [0] * (max(KIND_NAMES) + 1)
    others = _Others()
    bad_dur: list[int] = []
    # what a (category, name) pair decides, once per distinct pair: one shared str object per name and
    # category (instead of one per event), the kind, whether the call synchronizes
    by_cat: dict[str, dict[str, tuple[str, str, int, bool, bool]]] = {}
    not_modelled = trace.not_modelled
    rt_cache: dict[tuple[int, str], tuple[int, bool]] = {}
    record = KinetoEvent
    no_args = NO_ARGS
    unset = UNSET
    whole_args = (HOST_OP, ANNOTATION) if op_args else ()
    add_index = trace.file_index.append
    for i, raw, e in _complete_events(raws, path, others):
        by_name = by_cat.get(e.cat)
        if by_name is None:
            by_name = by_cat[e.cat] = {}
        hit = by_name.get(e.name)
        if hit is None:
            hit = by_name[e.name] = _classify(e.cat, e.name, rt_cache)
        cat, name, kind, is_sync, unmodelled = hit
        ts = e.ts
        if not (-_INF < ts < _INF):  # only NaN gets here: no ts at all
            raise _no_ts(i, e.name, None, path)
        dur = e.dur
        if not (0.0 <= dur <= CORRUPT_DUR_US):
            bad_dur.append(i)
            dur = 0.0
        a = e.args
        if a is None:
            ext = rf = corr = stream = device = None
        else:
            corr = a.correlation
            ext = a.external_id
            if ext is None:
                ext = a.external_id_lc
            rf = a.rf_id
            stream = a.stream
            device = a.device
        pos = len(events)
        kinds[kind] += 1
        if kind >= KERNEL:
            if kind != OTHER:  # KERNEL, MEMCPY, MEMSET: a GPU op, with its whole args (written into ET+)
                append(record(
                    kind, name, cat, e.pid, e.tid, ts, dur, ext, rf, corr,
                    stream if stream is not None else _as_int(e.tid),
                    device if device is not None else _as_int(e.pid),
                    args_text(raw, i, path) if a is not None else no_args, dur, None, is_sync,
                    a is not None and a.collective is not unset,
                ))
                add_index(i)
                gpu_positions.append(pos)
                if corr is not None:
                    lst = gpu_by_corr.get(corr)
                    if lst is None:
                        gpu_by_corr[corr] = [pos]
                    else:
                        lst.append(pos)
            else:
                append(record(kind, name, cat, e.pid, e.tid, ts, dur, ext, rf, corr, stream, device,
                              no_args, dur, None, False, a is not None and a.collective is not unset))
                add_index(i)
                if unmodelled:
                    not_modelled[cat] = not_modelled.get(cat, 0) + 1
            continue
        # a CPU event
        args = None
        if is_sync:
            sync_positions.append(pos)
            if a is not None:
                args = event_args(raw, i, path)  # which stream it waits on (chakra.link.deps)
        elif kind in whole_args and a is not None:
            args = event_args(raw, i, path)
        append(record(kind, name, cat, e.pid, e.tid, ts, dur, ext, rf, corr, stream, device,
                      args if args is not None else no_args, dur, None, is_sync,
                      a is not None and a.collective is not unset))
        add_index(i)
        if kind <= ANNOTATION:
            op_positions.append(pos)
        elif corr is not None:
            calls.append(pos)
    _count_events(trace, others, bad_dur)
    return calls, kinds


class _Others:
    """How many events ``traceEvents`` has; those that are not complete (``ph: X``) events, counted by
    phase; the flows among them, and the ids of the ``ac2g`` flows (a launch's arrow to its GPU op)."""

    __slots__ = ("total", "by_phase", "flows", "ac2g_ids")

    def __init__(self) -> None:
        self.total = 0
        self.by_phase: dict[str, int] = {}
        self.flows = 0
        self.ac2g_ids: set[Any] = set()


def _complete_events(raws: list[msgspec.Raw], path: str, others: _Others) -> Iterator[tuple[int, Any, Any]]:
    """``(index in traceEvents, bytes, decoded event)`` of each complete event of ``raws``; the others are
    counted in ``others``.  The events' bytes are dropped as they are read: the last one releases the
    document's buffer."""
    decode = event_decoder.decode
    decode_error = msgspec.DecodeError
    by_phase = others.by_phase
    ac2g_ids = others.ac2g_ids
    total = others.total = len(raws)
    raws.reverse()
    pop = raws.pop
    for i in range(total):
        raw = pop()
        try:
            e = decode(raw)
        except decode_error:  # a value of an unusual type (or no object at all): judged by _lenient
            e = _lenient(raw, i, path)
        if e.ph != "X":
            ph = e.ph
            key = ph if isinstance(ph, str) else "?"
            by_phase[key] = by_phase.get(key, 0) + 1
            if ph == "s" or ph == "f":
                others.flows += 1
                if ph == "s" and e.cat == "ac2g":
                    ac2g_ids.add(_as_int(e.flow_id))
            continue
        yield i, raw, e


def _count_events(trace: KinetoTrace, others: _Others, bad_dur: list[int]) -> None:
    """The counts of what was read (``trace.stats``, ``trace.flow_count``) and the warnings about it."""
    non_x, flows = others.by_phase, others.flows
    trace.flow_count = flows
    stats = trace.stats
    stats["events_total"] = others.total
    stats["x_events"] = len(trace.events)
    stats["flows"] = flows
    for ph, n in sorted(non_x.items()):
        stats[f"ph_{ph}"] = n
    others.ac2g_ids.discard(None)
    stats["ac2g_confirmed"] = sum(1 for c in trace.gpu_by_correlation if c in others.ac2g_ids)
    stats["clamped_durations"] = len(bad_dur)
    if bad_dur:
        trace.warnings.append(
            f"{len(bad_dur)} X event(s) with a missing, NaN, infinite, negative or huge (> 1e12 us) 'dur' "
            f"clamped to 0 (traceEvents[{_listed(bad_dur)}])"
        )
    if trace.not_modelled:
        trace.warnings.append(not_modelled_note(trace.not_modelled))
    ignored = {ph: n for ph, n in non_x.items() if ph not in ("s", "f", "i", "I", "M", "t")}
    if ignored:
        trace.warnings.append(
            "ignored events of unsupported phases: "
            + ", ".join(f"{n} ph={ph!r}" for ph, n in sorted(ignored.items()))
        )


def _no_ts(index: int, name: Any, ts: Any, path: str) -> TraceFormatError:
    return TraceFormatError(
        f"traceEvents[{index}] ({name!r}): 'ts' is missing or not a finite number ({ts!r})", path)


def _lenient(raw: msgspec.Raw, index: int, path: str) -> Any:
    """An event with a value of an unusual type, its values made what :func:`_read_events` expects (the
    types of :data:`chakra.device.decode.EVENT_FIELDS`): a ts that is an int or a number in a string is a
    float, one that is no finite number an error; a dur that is not a usable number is NaN (clamped, with
    a warning); a missing or non-string name or category is text; a pid/tid that is a list or an object is
    its text; ids are ints (digit strings and integral floats convert) or None; ``args`` that is not an
    object counts as no args."""
    e = lenient_event(raw, index, path)
    if e.ph != "X":
        return e
    ts = e.ts
    if type(ts) is int:
        ts = float(ts)
    else:
        ts = _as_float(ts)
        if ts is None:
            raise _no_ts(index, e.name, e.ts, path)
    dur = e.dur
    dur = float(dur) if type(dur) is int else _as_float(dur)
    cat, name = e.cat, e.name
    args = e.args
    if type(args) is dict:
        ext = args.get("External id")
        a = EventArgs(
            _as_int(ext if ext is not None else args.get("external id")), None,
            _as_int(args.get("Record function id")), _as_int(args.get("correlation")),
            _as_int(args.get("stream")), _as_int(args.get("device")), args.get("Collective name", UNSET))
    else:
        a = None
    return Event(
        "X", cat if type(cat) is str else ("" if cat is None else str(cat)),
        name if type(name) is str else ("" if name is None else str(name)),
        _key(e.pid), _key(e.tid), ts, _NAN if dur is None else dur, None, a)


def _listed(items: list[int]) -> str:
    """The first few of ``items`` for a warning, `` ...`` when there are more."""
    return ", ".join(str(k) for k in items[:IDS_LISTED_MAX]) + (" ..." if len(items) > IDS_LISTED_MAX else "")


def _classify(cat: str, name: str, rt_cache: dict[tuple[int, str], tuple[int, bool]]
              ) -> tuple[str, str, int, bool, bool]:
    """``(cat, name, kind, is_sync, not modelled)`` of an event by its category and name."""
    kind = CATEGORY_KIND.get(cat)
    if kind is None:
        kind = CATEGORY_KIND.get(cat.lower(), OTHER)
    is_sync = False
    if kind == RUNTIME or kind == DRIVER:
        rk = rt_cache.get((kind, name))
        if rk is None:
            rk = rt_cache[(kind, name)] = runtime_kind(kind, name)
        kind, is_sync = rk
    return cat, name, kind, is_sync, kind == OTHER and cat.lower() not in NOTHING_TO_MODEL


def not_modelled_note(counts: dict[str, int]) -> str:
    """One line naming the event categories of a trace that nothing models (``KinetoTrace.not_modelled``),
    with what the known ones are."""
    parts = []
    for cat, n in counts.items():
        why = NOT_MODELLED_WHY.get(cat.lower())
        parts.append(f"{n} {cat!r}" + (f" ({why})" if why else ""))
    return ("events of categories the toolkit does not model (neither host ops, runtime calls nor GPU work; "
            "their time is not in the graph): " + "; ".join(parts))


def _classify_launches(trace: KinetoTrace, calls: list[int], kinds: list[int]) -> None:
    """Promote runtime/driver calls that start a GPU op; build ``launch_by_correlation`` (file order: the
    first launch of a correlation id wins).  ``calls``: the positions of the calls with a correlation id;
    ``kinds``: the count of events per kind, before promotions."""
    events = trace.events
    gpu_by_corr = trace.gpu_by_correlation
    launch_by_corr = trace.launch_by_correlation
    duplicates: list[int] = []
    promoted = 0
    for pos in calls:
        ev = events[pos]
        corr = ev.correlation
        assert corr is not None   # (calls: the events with a correlation id)
        if ev.kind != LAUNCH:
            if corr not in gpu_by_corr:
                continue
            # an unusually named call (or a sync call) that demonstrably started GPU work
            kinds[ev.kind] -= 1
            kinds[LAUNCH] += 1
            ev.kind = LAUNCH
            promoted += 1
        if corr in launch_by_corr:
            duplicates.append(corr)
        else:
            launch_by_corr[corr] = pos

    stats = trace.stats
    stats["promoted_launches"] = promoted
    stats["gpu_without_launch"] = sum(len(v) for c, v in gpu_by_corr.items() if c not in launch_by_corr)
    stats["launch_without_gpu"] = sum(1 for c in launch_by_corr if c not in gpu_by_corr)
    stats["duplicate_launch_correlations"] = len(duplicates)
    stats.update({name: kinds[kind] for kind, name in KIND_NAMES.items()})
    if duplicates:
        trace.warnings.append(
            f"{len(duplicates)} launching call(s) reuse a correlation id already taken by an earlier launch "
            f"(first in file order kept; correlation {_listed(duplicates)})"
        )
    n_orphan = stats["gpu_without_launch"]
    if n_orphan:
        trace.warnings.append(
            f"{n_orphan} GPU event(s) have no launching call in the trace (launched before profiling began?)"
        )


def _sweep_threads(trace: KinetoTrace) -> None:
    """Exclusive durations and parents: one sorted stack sweep per (pid, tid).

    Every CPU event comes from the loader with ``excl_dur = dur``.  Each stack entry is ``[event, position,
    effective end, covered-by-children]``.  A child that runs past its parent's end is clipped to it (and
    counted in ``stats["overrun_children"]``), so siblings never overlap and the union of the direct
    children is simply the sum of their clipped lengths.  Intervals are
    half-open: an event starting exactly where the top of the stack ends is not its child, which also
    means a zero-length event never has children.  Ties (same ts and dur) keep file order: the earlier one
    is the parent.

    What is subtracted from a parent's exclusive time: operator children (host ops, annotations), which
    become nodes of their own, and synchronizing calls (``kind == SYNC`` or ``is_sync``), whose time is
    waiting for the GPU that the linker models as a dependency on the GPU ops waited for (in DLRM rank 0
    a 1096 µs ``aten::copy_`` is 1078 µs of ``cudaStreamSynchronize``: 18 µs of work plus a wait).  A
    launch, runtime or driver call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) is CPU work of the op
    that made it and stays in its exclusive time: no node stands for the call, so subtracting it would
    drop that time from the graph.  Every call still gets its enclosing op as ``parent``: that is how a
    kernel finds the op that launched it.

    Absolute times are large (5e12 µs with ns decimals, or 1.7e15 µs) so ``ts + dur`` carries a rounding
    error of about one unit in the last place (~0.001 µs at 5e12).  Comparisons of ends and starts
    therefore allow ``|ts| * 5e-16`` (about two ulps): a child that ends "after" its parent only by
    rounding is not an overrun, and an event starting where the previous one ends is its sibling.
    """
    # per thread, (ts, -dur, position, event, is_op): made once the document's buffer is released (this
    # is a hundred bytes per event)
    threads: dict[tuple[Any, Any], list[tuple[Any, ...]]] = {}
    thread: list[tuple[Any, ...]] = []
    last_pid: Any = _NAN  # equal to no pid
    last_tid: Any = _NAN
    for pos, ev in enumerate(trace.events):
        kind = ev.kind
        if kind >= KERNEL:  # GPU events and OTHER
            continue
        pid = ev.pid
        tid = ev.tid
        if pid != last_pid or tid != last_tid:  # runs of events of one thread are the usual case
            last_pid = pid
            last_tid = tid
            known = threads.get((pid, tid))
            if known is None:
                known = threads[(pid, tid)] = []
            thread = known
        ts = ev.ts
        thread.append((ts, -ev.dur, pos, ev, kind <= ANNOTATION or ev.is_sync))

    overrun = 0
    rel_eps = NEST_REL_EPS
    for items in threads.values():
        # (ts, -dur, position): start order, longer first, then file order (positions are unique: the
        # event itself is never compared)
        items.sort()
        stack: list[list[Any]] = []
        push = stack.append
        pop = stack.pop
        top: list[Any] | None = None  # stack[-1]
        for ts, neg_dur, pos, ev, is_op in items:
            tol = (ts if ts >= 0.0 else -ts) * rel_eps
            lim = ts + tol
            while top is not None and top[2] <= lim:
                pop()
                covered = top[3]
                if covered:  # else excl_dur stays dur, as the loader made it
                    top_ev = top[0]
                    excl = top_ev.dur - covered
                    top_ev.excl_dur = excl if excl > 0.0 else 0.0
                top = stack[-1] if stack else None
            end = ts - neg_dur
            if top is not None:
                ev.parent = top[1]
                if end > top[2] + tol:
                    end = top[2]
                    overrun += 1
                    if is_op:
                        top[3] += end - ts
                else:
                    if end > top[2]:
                        end = top[2]  # rounding noise only: keep the ends nested
                    if is_op:
                        top[3] -= neg_dur  # exact: no float round trip through absolute times
            top = [ev, pos, end, 0.0]
            push(top)
        for top_ev, _, _, covered in stack:
            if covered:
                excl = top_ev.dur - covered
                top_ev.excl_dur = excl if excl > 0.0 else 0.0
    trace.stats["overrun_children"] = overrun
    trace.stats["cpu_threads"] = len(threads)
    if overrun:
        trace.warnings.append(
            f"{overrun} CPU event(s) end after their enclosing event: clipped to the parent's end"
        )


def _find_steps(trace: KinetoTrace, annotation: str | None) -> list[StepWindow]:
    steps: list[StepWindow] = []
    events = trace.events
    for pos in trace.op_positions:
        ev = events[pos]
        if annotation is None:
            if ev.name.startswith("ProfilerStep#") and PROFILER_STEP_RE.match(ev.name):
                steps.append(StepWindow(ev.name, ev.ts, ev.dur))
        elif ev.name == annotation:
            steps.append(StepWindow(ev.name, ev.ts, ev.dur))
    if annotation is not None and not steps:
        raise TraceFormatError(f"no CPU annotation or op named {annotation!r} to use as step window",
                               trace.path)
    steps.sort(key=lambda s: (s.ts, -s.dur))
    return steps


def measured_window(trace: KinetoTrace) -> tuple[str, float, float]:
    """The profiled window: ``(name, start_us, dur_us)``.

    With step windows: start = first step start, dur = length of the union of the windows (disjoint steps:
    the sum of their durations; the gaps between steps are not measured time), name = the step names
    joined by ``+`` (``first..last (N windows)`` beyond four names).  Without steps: the span of all X
    events, named ``"kineto_span"``.
    """
    if not trace.steps:
        start, end = trace.span
        return ("kineto_span", start, end - start)
    windows = sorted(trace.steps, key=lambda s: s.ts)
    unique = list(dict.fromkeys(w.name for w in windows))
    names = "+".join(unique) if len(unique) <= 4 else f"{unique[0]}..{unique[-1]} ({len(unique)} windows)"
    return (names, windows[0].ts, union_length(windows))


def union_length(windows: list[StepWindow]) -> float:
    """Length of the union of step windows sorted by start: disjoint steps add up exactly (the gaps
    between them are not measured time), overlapping ones merge; a group of one window contributes its
    exact duration from the file."""
    if not windows:
        return 0.0
    total = 0.0
    cur_start = windows[0].ts
    cur_end = cur_start + windows[0].dur
    cur_len = windows[0].dur
    for w in windows[1:]:
        w_end = w.ts + w.dur
        if w.ts >= cur_end - abs(cur_end) * NEST_REL_EPS:
            total += cur_len
            cur_start, cur_end, cur_len = w.ts, w_end, w.dur
        elif w_end > cur_end:
            cur_end = w_end
            cur_len = cur_end - cur_start
    return total + cur_len
