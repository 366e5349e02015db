"""The linker's public functions: one rank in memory, one rank on disk, a folder of ranks.

``link_traces`` runs the passes in order (window -> matching -> GPU attachment
-> collectives -> dependencies) and assembles the ET+ document described in
docs/formats.md, "ET+"; ``link_files`` adds loading and an atomic write; ``chakra.pipeline.link.link_folder``
links every rank of a folder in parallel processes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple

import orjson
from orjson import Fragment

from chakra.device.loader import load_kineto
from chakra.device.model import KERNEL, MEMCPY, MEMSET, KinetoEvent, KinetoTrace
from chakra.errors import TraceFormatError, UsageError
from chakra.formats import GROUP_NAME, GROUP_SIZE
from chakra.host import keys as hk
from chakra.host.collective_names import CPU_RECORD_PREFIXES
from chakra.host.loader import load_host_et, self_parent_message
from chakra.host.model import OP, PROCESS_ROOT, HostOp, HostTrace, IOInfo
from chakra.io import gc_paused
from chakra.io.atomic import check_output_path
from chakra.io.forkmap import fork_map, parts, split
from chakra.io.gcpause import release
from chakra.io.jsonio import dump_json_ranges
from chakra.link.comm import CommResolver, count_collectives, gloo_fields, is_comm_kernel, process_groups
from chakra.link.deps import (
    inter_thread_deps,
    order_keys,
    sync_deps,
    unwaited_time,
)
from chakra.link.etplus import FLAT, add_io, host_node, host_text, io_text, json_string
from chakra.link.gpu import PRE_TRACE, GpuAttachment, attach_gpu_ops, window_bounds
from chakra.link.kineto_only import KinetoHost, build_host, missing_note
from chakra.link.match import match_ops
from chakra.link.provenance import clock_mismatch, run_mismatches
from chakra.link.report import LinkReport, kept_counts, link_stats, log_summary, report_of, warn_unlinked
from chakra.link.stretch import find_stretch
from chakra.link.window import (
    Window,
    check_step,
    measured,
    ops_outside_steps,
    select_window,
    step_annotation,
    step_ops,
    steps_kineto_holds,
)
from chakra.tunables import (
    ETPLUS_WRITE_FORKED_MAX_NODES,
    ETPLUS_WRITE_PIECE_COST,
    INTER_THREAD_GAP_US,
)

log = logging.getLogger(__name__)

_GPU_CAT = {KERNEL: "kernel", MEMCPY: "gpu_memcpy", MEMSET: "gpu_memset"}


def link_traces(
    host: HostTrace,
    kineto: KinetoTrace,
    *,
    rank: int | None = None,
    annotation: str | None = None,
    inter_thread_gap_us: float = INTER_THREAD_GAP_US,
    fallback_rank: int | None = None,
    step: int | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Link a loaded host ET with its Kineto trace; return the ET+ document.

    The rank written is the trace's own (Kineto ``distributedInfo.rank``, else the host file's ``rank``):
    it is what the collectives' peers and groups were recorded with.  ``rank`` (the user's ``--rank``)
    is used when the trace has none; one that disagrees with the trace's is logged as a warning and
    ignored (:func:`link_files` refuses it with ``strict``).  ``fallback_rank`` is used when the trace
    has none, silently (a rank guessed from a file name).  ``annotation`` selects the windows of
    that annotation instead of ``ProfilerStep#N``; ``inter_thread_gap_us`` is the idle gap that
    starts a new group of ops on a thread (see ``chakra.link.deps``).  ``step`` keeps the nodes of
    ``ProfilerStep#<step>`` only (:func:`chakra.link.window.step_ops`).  Without a ProfilerStep, the link
    keeps to the stretch of the Kineto trace that the host ET recorded (:mod:`chakra.link.stretch`), and a
    TraceFormatError says when no stretch aligns, unless ``force``.
    """
    mismatch = rank_mismatch(rank, host, kineto)
    if mismatch:
        log.warning("%s: %s: writing rank %s, the rank its collectives were recorded with",
                    kineto.path or host.path, mismatch, trace_rank(host, kineto))
    # Millions of new acyclic dicts: the cyclic GC would rescan all of them again and again.
    with gc_paused():
        return _link(host, kineto, resolve_rank(rank, host, kineto, fallback_rank), annotation,
                     inter_thread_gap_us, step, force)


def trace_rank(host: HostTrace, kineto: KinetoTrace) -> int | None:
    """The rank the traces record: Kineto ``distributedInfo.rank``, else the host file's ``rank``."""
    return kineto.rank if kineto.rank is not None else host.rank


def rank_mismatch(rank: int | None, host: HostTrace, kineto: KinetoTrace) -> str | None:
    """Why an explicit ``rank`` cannot be used (it contradicts the trace's own rank), or None."""
    own = trace_rank(host, kineto)
    if rank is None or own is None or rank == own:
        return None
    where = "Kineto distributedInfo.rank" if kineto.rank is not None else "the host ET's rank"
    return f"--rank {rank} disagrees with {where} {own}"


def resolve_rank(rank: int | None, host: HostTrace, kineto: KinetoTrace,
                 fallback_rank: int | None = None) -> int | None:
    """The rank written into ET+: the trace's own, else ``rank``, else ``fallback_rank``."""
    own = trace_rank(host, kineto)
    if own is not None:
        return own
    return rank if rank is not None else fallback_rank


def _link(
    host: HostTrace, kineto: KinetoTrace, rank_out: int | None, annotation: str | None,
    inter_thread_gap_us: float, step: int | None = None, force: bool = False
) -> dict[str, Any]:
    doc, nodes = _prepare(host, kineto, rank_out, annotation, inter_thread_gap_us, step=step, force=force)
    doc["nodes"] = parse_nodes(nodes.all())
    return doc


def parse_nodes(nodes: Iterator[Any]) -> list[dict[str, Any]]:
    """The nodes :func:`_prepare` makes for the writer (text and dicts holding text) as plain JSON values:
    the document of :func:`link_traces` / :func:`link_kineto` is what the file would read back as."""
    return orjson.loads(orjson.dumps(list(nodes)))


def _prepare(
    host: HostTrace, kineto: KinetoTrace, rank_out: int | None, annotation: str | None,
    inter_thread_gap_us: float, prematched: KinetoHost | None = None, step: int | None = None,
    force: bool = False, node_text: bool = True
) -> tuple[dict[str, Any], NodeRanges]:
    """The ET+ document with ``"nodes"`` holding None (in its place among the keys), and its nodes
    (:class:`NodeRanges`): host nodes in file order, then GPU nodes.

    Everything the document says about the nodes (deps, counts) is worked out before the first node
    is made, so a writer can stream the nodes and never hold a million node dicts at once: each is its
    JSON text (an ``orjson.Fragment``, :func:`chakra.link.etplus.host_text`) or a dict holding the
    text of its launcher's inputs/outputs (GPU nodes).  ``prematched``: a host ET made from the
    Kineto trace itself, with its window and matching (:mod:`chakra.link.kineto_only`); ``host`` is its
    ``host``.  ``node_text`` False: every node is made as a dict (see :func:`link_files`)."""
    if step is not None:
        if annotation is not None:
            raise UsageError("--step and --annotation both choose the window: give one")
        check_step(kineto, step)
        annotation = step_annotation(step)
    self_parents = sum(1 for op in host.ops if op.parent == op.id and op.kind != PROCESS_ROOT)
    if self_parents:
        log.warning("%s", self_parent_message(host.path, self_parents, len(host.ops)))
    if prematched is None:
        window = select_window(host, kineto, annotation)
        if annotation is None and not window.steps:   # no ProfilerStep: the stretch the host ET recorded
            window = find_stretch(host, kineto, window, force)
        match = match_ops(host, kineto, window)
    else:
        window, match = prematched.window, prematched.match
    gpu = attach_gpu_ops(kineto, match.event_to_host, window)
    keep: set[int] | None = None
    step_stats: dict[str, Any] | None = None
    if step is not None:
        # one step only: its host ops, the GPU ops they launched; deps on anything else are dropped below
        keep = step_ops(host, kineto, match.host_to_event, step)
        kept_gpu = [g for g in gpu.ops if g.launcher in keep or g.launcher == PRE_TRACE]
        step_stats = {"step": step_annotation(step), "host_nodes_kept": len(keep),
                      "host_nodes_dropped": len(host.ops) - len(keep),
                      "gpu_ops_dropped": len(gpu.ops) - len(kept_gpu)}
        gpu = replace(gpu, ops=kept_gpu)
    elif prematched is None and annotation is None:
        keep = _left_out(host, kineto, window, match.host_to_event)
    if prematched is None:
        warn_unlinked(host, kineto, window, match, keep)
    resolver = CommResolver(host)
    collectives = count_collectives(host, kineto, gpu.ops)
    first_gpu_id = max(host.by_id, default=0) + 1

    keys = order_keys(host, kineto, match.host_to_event)
    it_deps, it_skipped = inter_thread_deps(kineto, match.host_to_event, inter_thread_gap_us, keys)
    gpu_ids = range(first_gpu_id, first_gpu_id + len(gpu.ops))
    s_deps, s_stats = sync_deps(kineto, match.host_to_event, match.event_to_host, gpu, gpu_ids, keys)
    del keys
    given_back = unwaited_time(kineto, s_stats.unwaited)
    if keep is not None:  # a dependency on a node outside the step was met before the step began
        it_deps = {k: v for k, v in it_deps.items() if k in keep and v in keep}
        s_deps = {k: v for k, v in s_deps.items() if k in keep}

    world = kineto.world_size if kineto.world_size is not None else host.world_size
    pgs = process_groups(host, kineto.distributed_info, world)
    if world is None:
        world = next((g[GROUP_SIZE] for g in pgs if g[GROUP_NAME] == "0" and g[GROUP_SIZE]), None)
    kept = None if keep is None else kept_counts(host, match, keep)
    stats = link_stats(kineto, window, match, gpu, collectives, it_deps, it_skipped, inter_thread_gap_us,
                       s_deps, s_stats, kept)

    doc: dict[str, Any] = {"schema": host.schema}
    for key in ("pid", "time", "start_ts", "finish_ts"):
        value = getattr(host, key)
        if value is not None:
            doc[key] = value
    for key, value in host.extra.items():
        if key not in _OUR_TOP_KEYS:
            doc[key] = value
    doc["nodes"] = None
    doc[hk.RANK] = rank_out
    doc[hk.WORLD_SIZE] = world
    doc[hk.PROCESS_GROUPS] = pgs
    doc["measured"] = measured(kineto, window)
    if step_stats is not None:
        stats["step"] = step_stats
        log.info("%s: %s: %d host nodes kept, %d dropped (other steps); %d GPU ops dropped", host.path,
                 step_stats["step"], step_stats["host_nodes_kept"], step_stats["host_nodes_dropped"],
                 step_stats["gpu_ops_dropped"])
    doc["link_stats"] = stats
    log_summary(f"rank {rank_out}" if rank_out is not None else os.path.basename(host.path), stats)
    hpos = range(len(host.ops)) if keep is None else [k for k, op in enumerate(host.ops) if op.id in keep]
    return doc, NodeRanges(len(hpos), len(gpu.ops), partial(
        _nodes_of, hpos, partial(_host_nodes, host, kineto, match.host_to_event, resolver, it_deps, s_deps,
                                 given_back, text=node_text),
        partial(_gpu_nodes, host, kineto, gpu, resolver, first_gpu_id, window_bounds(window)[0],
                text=node_text)))


class NodeRanges(NamedTuple):
    """The ET+ nodes of a link by position: ``hosts`` host nodes in file order, then ``gpus`` GPU nodes;
    ``make(r)`` yields those of positions ``r``, made as they are asked for (the writer makes ranges of
    them in several processes: :meth:`pieces`, ``chakra.io.jsonio.dump_json_ranges``)."""

    hosts: int
    gpus: int
    make: Callable[[range], Iterator[Any]]

    def all(self) -> Iterator[Any]:
        return self.make(range(self.hosts + self.gpus))

    def pieces(self, piece_cost: int = ETPLUS_WRITE_PIECE_COST,
               forked_max: int = ETPLUS_WRITE_FORKED_MAX_NODES) -> list[range]:
        """Ranges of positions of about the same cost (at least ``piece_cost``), one per part, when there
        are at most ``forked_max`` nodes; a GPU node costs about twice a host node (5.9 against 3.2 us at
        100k)."""
        n = self.hosts + self.gpus
        cost = self.hosts + 2 * self.gpus
        k = min(parts(), cost // piece_cost) if n <= forked_max else 1
        if k <= 1:
            return [range(n)]
        cuts = [0]
        for q in range(1, k):
            c = cost * q // k                  # the cost before the cut: host nodes 1, GPU nodes 2
            cuts.append(c if c <= self.hosts else self.hosts + (c - self.hosts + 1) // 2)
        cuts.append(n)
        return [range(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _left_out(host: HostTrace, kineto: KinetoTrace, window: Window, host_to_event: dict[int, int]
              ) -> set[int] | None:
    """The host nodes kept when the host ET recorded steps (or ops outside its steps) that the Kineto trace
    lacks, with a warning saying what is left out; else None (every node is kept)."""
    other = steps_kineto_holds(host, kineto, window, host_to_event)
    if other is not None:
        log.warning("%s: holds %s, which %s does not: their %d host node(s) are left out (a profiler "
                    "schedule that repeats writes one Kineto trace per cycle); linked %s", host.path,
                    ", ".join(other[1]), kineto.path, len(host.ops) - len(other[0]), window.name)
        return other[0]
    outside = ops_outside_steps(host, kineto, window, host_to_event)
    if outside is None:
        return None
    log.warning("%s: %d host op(s) lie outside its ProfilerStep nodes and match no event of %s inside the "
                "window (the observer started or stopped mid-step: before the profiler's window, or inside "
                "a step it did not finish); left out, linked %s", host.path, outside[1], kineto.path,
                window.name)
    return outside[0]


def _nodes_of(hpos: Sequence[int], host_nodes: Callable[[Sequence[int]], Iterator[Any]],
              gpu_nodes: Callable[[range], Iterator[Any]], r: range) -> Iterator[Any]:
    """The nodes of positions ``r``: host ops ``hpos[...]`` first, then GPU ops."""
    h = len(hpos)
    if r.start < h:
        yield from host_nodes(hpos[r.start:min(r.stop, h)])
    if r.stop > h:
        yield from gpu_nodes(range(max(r.start, h) - h, r.stop - h))


_OUR_TOP_KEYS = frozenset((hk.RANK, hk.WORLD_SIZE, hk.PROCESS_GROUPS, "measured", "link_stats"))


def _host_nodes(
    host: HostTrace, kineto: KinetoTrace, host_to_event: dict[int, int], resolver: CommResolver,
    it_deps: dict[int, int], s_deps: dict[int, list[int]], given_back: dict[int, float],
    positions: Sequence[int], *, text: bool = True
) -> Iterator[Fragment]:
    """The host nodes of ``host.ops[k]`` for k in ``positions`` (in that order), in the trace's layout, with
    the timing of their matched event and their deps, as their JSON text.  ``given_back``: time of
    synchronising calls that no dependency stands for, back in their op's exclusive time
    (:func:`chakra.link.deps.unwaited_time`).  ``text`` False: the text of the node's dict instead."""
    events = kineto.events
    layout = host.layout
    dumps = orjson.dumps
    ops = host.ops
    for op in map(ops.__getitem__, positions):
        oid = op.id
        pos = host_to_event.get(oid)
        if pos is not None:
            ev = events[pos]
            dur = ev.dur
            # the keys after the op's own (a dict of five encodes faster than four numbers cut apart)
            excl = ev.excl_dur
            if given_back:
                back = given_back.get(pos)
                if back is not None:
                    excl = min(dur, excl + back)
            tail = b"," + dumps({"ts": ev.ts, "dur": dur, "inclusive_dur": dur, "exclusive_dur": excl,
                                 "kineto_tid": ev.tid})[1:-1]
        else:
            tail = b""
        if op.name.startswith(CPU_RECORD_PREFIXES):   # gloo:*, mpi:*, ucc:* (link.comm.gloo_fields)
            tail += b"," + dumps(gloo_fields(resolver, op))[1:-1]
        dep = it_deps.get(oid)
        if dep is not None:
            tail += b',"inter_thread_dep":%b' % dumps(dep)
        deps = s_deps.get(oid)
        if deps is not None:
            tail += b',"sync_dep":%b' % dumps(deps)
        yield Fragment(host_text(op, layout, tail + b"}") if text
                       else dumps(host_node(op, layout))[:-1] + tail + b"}")


def _gpu_nodes(
    host: HostTrace, kineto: KinetoTrace, gpu: GpuAttachment, resolver: CommResolver, first_id: int,
    window_start: float, which: range, *, text: bool = True
) -> Iterator[Fragment | dict[str, Any]]:
    """The nodes of the attached GPU ops ``gpu.ops[which]`` (GPU start order), op k's id ``first_id + k``
    (the ids after the largest host id).  Each copies its launcher's inputs/outputs.  Written as text
    (:data:`_GPU_TEXT`) when its numbers are plain and its launcher has its inputs/outputs as text, else as
    the node dict (the same JSON).  A GPU op launched before the trace began has no launcher
    (:func:`_pre_trace_node`).  ``text`` False: every node as its dict."""
    events = kineto.events
    layout = host.layout
    by_id = host.by_id
    gpu_cat = _GPU_CAT
    cat_text = _GPU_CAT_TEXT
    parent_key = "parent" if layout == FLAT else "ctrl_deps"
    dumps = orjson.dumps
    plain = _PLAIN if text else ()
    string = json_string
    next_id = first_id + which.start
    for g in gpu.ops[which.start:which.stop]:
        ev = events[g.pos]
        launcher = g.launcher
        if is_comm_kernel(ev):
            pg_name, coll, size = resolver.gpu_fields(ev, launcher)
        else:
            pg_name, coll, size = "", "", 0
        if launcher == PRE_TRACE:
            yield _pre_trace_node(ev, next_id, window_start, gpu_cat[ev.kind], pg_name, coll, size, layout)
            next_id += 1
            continue
        dur = ev.dur
        stream = ev.stream
        device = ev.device
        io = by_id[launcher].io
        if (io is not None and type(stream) in plain and type(device) in plain and type(size) is int
                and type(next_id) is type(launcher) is int):
            # (numbers have no commas)
            ts, dur_t, stream_t, device_t = dumps((ev.ts, dur, stream, device))[1:-1].split(b",")
            yield Fragment(_GPU_TEXT % (
                next_id, string(ev.name), cat_text[ev.kind], ts, dur_t, dur_t, dur_t, stream_t, device_t,
                stream_t, args if type(args := ev.args_source) is bytes else dumps(args), string(pg_name),
                string(coll), size,
                b"parent" if layout == FLAT else b"ctrl_deps", launcher, io_text(io, layout)))
        else:
            node = {
                "id": next_id,
                "name": ev.name,
                "cat": gpu_cat[ev.kind],
                "ph": "X",
                "ts": ev.ts,
                "dur": dur,
                "inclusive_dur": dur,
                "exclusive_dur": dur,
                "stream": stream,
                "device": device,
                hk.TID: stream,
                "args": ev.args,
                hk.PG_NAME: pg_name,
                hk.COLLECTIVE_NAME: coll,
                hk.COMM_SIZE: size,
                parent_key: launcher,
            }
            add_io(node, by_id[launcher], layout)
            yield node
        next_id += 1


def _pre_trace_node(ev: KinetoEvent, nid: int, window_start: float, cat: str, pg_name: str, coll: str,
                    size: int, layout: str) -> dict[str, Any]:
    """The node of a GPU op launched before the trace began (:data:`chakra.link.gpu.PRE_TRACE`): no
    launcher (parent 0) and no inputs, the part of it in the window (``ts``, ``dur``: from the window's
    start when it began before it)."""
    ts, dur = ev.ts, ev.dur
    if ts < window_start:
        ts, dur = window_start, max(0.0, ts + dur - window_start)
    node = {
        "id": nid,
        "name": ev.name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "inclusive_dur": dur,
        "exclusive_dur": dur,
        "stream": ev.stream,
        "device": ev.device,
        hk.TID: ev.stream,
        "args": ev.args,
        hk.PG_NAME: pg_name,
        hk.COLLECTIVE_NAME: coll,
        hk.COMM_SIZE: size,
        "parent" if layout == FLAT else "ctrl_deps": 0,
    }
    add_io(node, _NO_LAUNCHER, layout)
    return node


_NO_LAUNCHER = HostOp(0, "", 0, OP, inputs=IOInfo(), outputs=IOInfo())


# a GPU node as orjson writes _gpu_nodes' dict (keys in its order)
_GPU_TEXT = (b'{"id":%d,"name":%b,"cat":%b,"ph":"X","ts":%b,"dur":%b,"inclusive_dur":%b,"exclusive_dur":%b,'
             b'"stream":%b,"device":%b,"tid":%b,"args":%b,"pg_name":%b,"collective_name":%b,"comm_size":%d,'
             b'"%b":%d,"inputs":%b}')
_GPU_CAT_TEXT = {k: orjson.dumps(v) for k, v in _GPU_CAT.items()}
_PLAIN = (int, type(None))


def link_kineto(
    kineto: KinetoTrace,
    *,
    rank: int | None = None,
    annotation: str | None = None,
    inter_thread_gap_us: float = INTER_THREAD_GAP_US,
    fallback_rank: int | None = None,
) -> dict[str, Any]:
    """Link a Kineto trace alone (no host ET); return the ET+ document.

    The host nodes are made from the trace's own ops (:mod:`chakra.link.kineto_only`); load it with
    ``load_kineto(path, op_args=True)`` so that they get their input shapes and collective fields.
    ``rank``, ``fallback_rank``, ``annotation`` and ``inter_thread_gap_us`` as in :func:`link_traces`,
    except that every window of the annotation (default: every ``ProfilerStep#N``) is kept.
    """
    with gc_paused():
        doc, nodes = _prepare_kineto(kineto, rank, annotation, inter_thread_gap_us, fallback_rank)
        doc["nodes"] = parse_nodes(nodes.all())
        return doc


def _prepare_kineto(kineto: KinetoTrace, rank: int | None, annotation: str | None, gap_us: float,
                    fallback_rank: int | None, step: int | None = None, node_text: bool = True
                    ) -> tuple[dict[str, Any], NodeRanges]:
    window = annotation
    if step is not None:   # the synthetic host ET holds that step's ops, its window is the measured one
        if annotation is not None:
            raise UsageError("--step and --annotation both choose the window: give one")
        check_step(kineto, step)
        window = step_annotation(step)
    kh = build_host(kineto, window)
    host = kh.host
    host.extra = {"kineto_only": kh.summary()}
    log.info("%s: %s", kineto.path, missing_note(kh))
    mismatch = rank_mismatch(rank, host, kineto)
    if mismatch:
        log.warning("%s: %s: writing rank %s, the rank its collectives were recorded with",
                    kineto.path, mismatch, trace_rank(host, kineto))
    return _prepare(host, kineto, resolve_rank(rank, host, kineto, fallback_rank), annotation, gap_us,
                    prematched=kh, step=step, node_text=node_text)


def _check_paths(inputs: Sequence[str | os.PathLike[str]], output_path: str | os.PathLike[str]) -> str:
    """Before the work, not after it: every input exists and the output's directory does; the output path."""
    for p in inputs:
        if not os.path.exists(p):
            raise TraceFormatError("file not found", p)
    return check_output_path(output_path)


def link_files(
    host_path: str | os.PathLike[str] | None,
    kineto_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    rank: int | None = None,
    annotation: str | None = None,
    strict: bool = False,
    fallback_rank: int | None = None,
    step: int | None = None,
    force: bool = False,
    node_text: bool = True,
) -> LinkReport:
    """Load, link and write ET+ atomically (``.gz`` output when the name ends in ``.gz``).

    ``host_path`` None: the Kineto trace is linked alone (:func:`link_kineto`, loaded with its ops' args).
    With two cores the two traces load at the same time (:func:`load_pair`); the ET+ bytes do not depend
    on it.

    Files whose start times are days apart (see :mod:`chakra.link.provenance`) and, without a ProfilerStep,
    files of which no stretch aligns (:mod:`chakra.link.stretch`) are refused, unless ``force``.  Files of
    different pids and a ``rank`` that contradicts the trace's own rank (see :func:`link_traces`: the
    trace's wins) are linked with a warning, or refused with ``strict``.  ``fallback_rank`` is the rank to
    write when the traces have none (the pipeline passes the rank of the file names).  ``step``: the nodes
    of ``ProfilerStep#<step>`` only.  ``node_text`` False: every node is made as a dict and encoded by
    orjson, the plain route that the text written by default (templates filled in) must equal byte for
    byte; slower.
    """
    if strict and force:
        raise UsageError("--strict refuses what --force links anyway: give one")
    t0 = time.perf_counter()
    out = _check_paths((kineto_path,) if host_path is None else (host_path, kineto_path), output_path)
    # The cyclic GC stays off for the whole load -> link -> write: re-enabled between stages it would walk
    # the tens of millions of (acyclic) objects of the loaded traces several times (15 s of 58 s at 1M ops).
    # Everything big is released before it is switched back on.
    with gc_paused():
        load = _load_kineto_only if host_path is None else partial(_load_linked, host_path, force=force)
        doc, nodes, warnings = load(kineto_path, rank, annotation, strict, fallback_rank, step, node_text)
        # the nodes are made while they are written (never a million node dicts at once), over the cores
        dump_json_ranges(out, doc, "nodes", nodes.pieces(), nodes.make)
        release(nodes)   # (the loaded traces: kept to the end of a command's process, not freed)
        del nodes
        report = report_of(doc, None if host_path is None else os.fspath(host_path), os.fspath(kineto_path),
                         out)
        del doc
    report.warnings = warnings
    report.seconds = time.perf_counter() - t0
    log.info("wrote %s in %.2f s", out, report.seconds)
    return report


def _load_kineto_only(kineto_path: str | os.PathLike[str], rank: int | None, annotation: str | None,
                      strict: bool, fallback_rank: int | None, step: int | None, node_text: bool = True
                      ) -> tuple[dict[str, Any], NodeRanges, list[str]]:
    """:func:`link_files` of a Kineto trace alone, up to the writing: (ET+ document, nodes, warnings)."""
    kineto = load_kineto(kineto_path, op_args=True)
    own = kineto.rank
    warnings = list(kineto.warnings)
    if rank is not None and own is not None and rank != own:
        what = f"--rank {rank} disagrees with Kineto distributedInfo.rank {own}"
        if strict:
            raise TraceFormatError(what + " (refused: --strict)", os.fspath(kineto_path))
        warnings.append(f"{what} (wrote rank {own}; --strict refuses)")
    doc, nodes = _prepare_kineto(kineto, rank, annotation, INTER_THREAD_GAP_US, fallback_rank, step,
                                 node_text)
    return doc, nodes, warnings


def _load_linked(host_path: str | os.PathLike[str], kineto_path: str | os.PathLike[str], rank: int | None,
                 annotation: str | None, strict: bool, fallback_rank: int | None, step: int | None,
                 node_text: bool = True, force: bool = False) -> tuple[dict[str, Any], NodeRanges, list[str]]:
    """:func:`link_files` of a host ET and its Kineto trace, up to the writing: (ET+ document, nodes,
    warnings)."""
    host, kineto = load_pair(host_path, kineto_path)
    mismatches = run_mismatches(host, kineto)
    if mismatches:
        what = f"not the same run as {os.fspath(host_path)}? " + "; ".join(mismatches)
        if strict:
            raise TraceFormatError(what + " (refused: --strict)", os.fspath(kineto_path))
        if clock_mismatch(host, kineto) is None:
            log.warning("%s: %s (linked anyway; --strict refuses)", os.fspath(kineto_path), what)
        elif force:
            log.warning("%s: %s (linked anyway: --force)", os.fspath(kineto_path), what)
        else:
            raise TraceFormatError(what + " (--force links anyway)", os.fspath(kineto_path))
    bad_rank = rank_mismatch(rank, host, kineto)
    if bad_rank:
        if strict:
            raise TraceFormatError(bad_rank + " (refused: --strict)", os.fspath(kineto_path))
        mismatches.append(f"{bad_rank} (wrote rank {trace_rank(host, kineto)}; --strict refuses)")
        # as link_traces says it
        log.warning("%s: %s: writing rank %s, the rank its collectives were recorded with",
                    kineto.path or host.path, bad_rank, trace_rank(host, kineto))
    doc, nodes = _prepare(host, kineto, resolve_rank(rank, host, kineto, fallback_rank), annotation,
                          INTER_THREAD_GAP_US, step=step, force=force, node_text=node_text)
    return doc, nodes, list(host.warnings) + list(kineto.warnings) + mismatches


def load_pair(host_path: str | os.PathLike[str], kineto_path: str | os.PathLike[str]
              ) -> tuple[HostTrace, KinetoTrace]:
    """Load a host ET and its Kineto trace, at the same time when this process has two parts
    (:mod:`chakra.io.forkmap`): the host ET here, the Kineto trace in a child.

    That way round because the Kineto model pickles back cheaply (msgspec records without GC tracking:
    0.3 s to pickle in the child and 0.13 s to unpickle here at 100k host nodes / 168k events, against
    0.8 s to load it), while the host ET takes the longer (1.85 s there) and its model is the heavier.
    The host ET's errors come first, as in one part: piece 0 runs here before a child's result is read.
    A child's log records (the Kineto loader's warnings) are logged again here, after the host ET's.
    The child also finds the Kineto trace's CPU clock (``KinetoTrace.cpu_clock``: one more pass over its
    events, which it has the time for)."""
    loads = (partial(load_host_et, host_path), partial(_load_kineto_clocked, kineto_path))
    here = os.getpid()

    def run(which: range) -> list[tuple[Any, list[tuple[str, int, str]]]]:
        return [_logged(loads[i], here) for i in which]

    got = [x for piece in fork_map(run, split(len(loads), 1), f"loading {os.fspath(kineto_path)}")
           for x in piece]
    for _, records in got:
        for name, level, message in records:
            logging.getLogger(name).log(level, "%s", message)
    return got[0][0], got[1][0]


def _load_kineto_clocked(path: str | os.PathLike[str]) -> KinetoTrace:
    kineto = load_kineto(path)
    kineto.cpu_clock()
    return kineto


class _Records(logging.Handler):
    """The log records of a forked child, kept for its parent to log (``_logged``)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def _logged(fn: Callable[[], Any], parent: int) -> tuple[Any, list[tuple[str, int, str]]]:
    """``fn()`` and, in a forked child of ``parent``, the log records it made (instead of logging them
    there: the parent's handlers, a test's log capture, are the parent's); in ``parent`` itself it logs
    as usual and the list is empty."""
    if os.getpid() == parent:
        return fn(), []
    root = logging.getLogger()
    keep = _Records()
    root.handlers = [keep]   # the child's copy of the logging set-up: it exits after this piece
    return fn(), keep.records
