"""Which part of the Kineto trace the host ET recorded, and the measured window.

A Kineto trace may cover several iterations (``ProfilerStep#N`` windows) while
the host ET recorded one of them.  Before aligning operator names we restrict
the Kineto host events to the iteration the host ET saw, otherwise the same
operator sequence could be matched to the wrong iteration.  The choice, in order:

1. ``annotation`` given: the windows of the Kineto events with that exact name
   (when the host ET holds k of them and Kineto more, the run of k consecutive
   windows whose operator names overlap the host ET most);
2. the host ET holds ``ProfilerStep#N`` nodes: those Kineto steps; when Kineto has none of them, or the
   host ET also holds ops under no step node (an observer started by hand after a ``prof.step()`` records
   the rest of that step without its node), with the steps holding the events whose Record function ids
   identify the host ops; no step node in the host ET but steps in Kineto: the steps holding those events,
   if any (an observer over one iteration, started right after a ``prof.step()``), the last of them
   measured to the end of the host ET's last recorded op when the Kineto trace holds operators after it
   that the host ET lacks (the observer stopped inside that step);
3. Kineto has several steps: the single step (or the whole trace) whose
   operator-name multiset overlaps the host ET best (Dice score; the events are
   bucketed by step with one bisect each, so O(n log steps) in all);
4. otherwise the whole trace.

The selected windows also define ET+ ``measured``: their start and the length
of their union (the gaps between steps are not measured time), or the span of
all CPU and GPU events when there is no step at all.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field

from chakra.device.loader import union_length
from chakra.device.model import ANNOTATION, HOST_OP, KinetoTrace, StepWindow
from chakra.errors import TraceFormatError, UsageError
from chakra.host.model import OP, HostOp, HostTrace
from chakra.tunables import PARTIAL_STEP_SHARE

log = logging.getLogger(__name__)

_PROFILER_STEP = "ProfilerStep#"


@dataclass(slots=True)
class Window:
    """The selected part of the Kineto trace."""

    name: str  # "ProfilerStep#3", "ProfilerStep#1+ProfilerStep#2", "kineto_span", ...
    steps: list[StepWindow] = field(default_factory=list)
    lo: float = -math.inf  # Kineto host events with lo <= ts < hi are alignment candidates
    hi: float = math.inf
    reason: str = ""  # how it was chosen (for the log and link_stats)

    def contains(self, ts: float) -> bool:
        return self.lo <= ts < self.hi


def _host_names(host: HostTrace) -> Counter[str]:
    return Counter(op.name for op in host.ops if op.kind == OP)


def _dice(host_names: Counter[str], host_total: int, window: Counter[str]) -> float:
    """Overlap of two name multisets, 0..1."""
    total = sum(window.values())
    if not total or not host_total:
        return 0.0
    common = sum(min(c, host_names.get(n, 0)) for n, c in window.items())
    return 2.0 * common / (total + host_total)


def _name_of(steps: list[StepWindow]) -> str:
    names = list(dict.fromkeys(s.name for s in steps))
    return "+".join(names) if len(names) <= 4 else f"{names[0]}..{names[-1]} ({len(names)} windows)"


def _bounded(chosen: list[StepWindow], all_steps: list[StepWindow]) -> tuple[float, float]:
    """From the end of the last unchosen step before the chosen ones to the start of the next unchosen."""
    first, last = chosen[0].ts, chosen[-1].ts
    lo, hi = -math.inf, math.inf
    chosen_ids = {id(s) for s in chosen}
    for s in all_steps:
        if id(s) in chosen_ids:
            continue
        if s.ts < first:
            lo = max(lo, s.ts + s.dur)
        elif s.ts > last:
            hi = min(hi, s.ts)
    return lo, hi


def annotation_windows(kineto: KinetoTrace, annotation: str) -> list[StepWindow]:
    wins = [
        StepWindow(ev.name, ev.ts, ev.dur)
        for ev in kineto.events
        if (ev.kind == ANNOTATION or ev.kind == HOST_OP) and ev.name == annotation
    ]
    wins.sort(key=lambda s: (s.ts, -s.dur))
    return wins


def select_window(host: HostTrace, kineto: KinetoTrace, annotation: str | None = None) -> Window:
    """Choose the Kineto window the host ET recorded (see module doc)."""
    host_names = _host_names(host)
    host_total = sum(host_names.values())
    if annotation is not None:
        wins = annotation_windows(kineto, annotation)
        if not wins:
            raise UsageError(
                f"--annotation {annotation!r}: no CPU op or annotation of that name in {kineto.path}"
            )
        k = host_names.get(annotation, 0)
        chosen = wins
        if 0 < k < len(wins):
            chosen = _best_run(kineto, wins, k, host_names, host_total)
        lo, hi = chosen[0].ts, max(s.ts + s.dur for s in chosen)
        return Window(_name_of(chosen), chosen, lo, hi, f"annotation {annotation!r}")

    steps = sorted(kineto.steps, key=lambda s: (s.ts, -s.dur))
    host_steps = {n for n in host_names if n.startswith(_PROFILER_STEP)}
    chosen = []
    if host_steps:
        chosen = [s for s in steps if s.name in host_steps]
        # ops under none of the host ET's step nodes (an observer started by hand after a prof.step() records
        # the rest of that step without its node): the steps holding the host ops' Record function ids too
        by_rf = _steps_holding(kineto, _rf_matched(host, kineto), steps) \
            if not chosen or _unmarked_ops(host) else []
        if chosen and not set(by_rf) - set(chosen):
            lo, hi = _bounded(chosen, steps)
            return Window(_name_of(chosen), chosen, lo, hi, "ProfilerStep recorded in the host ET")
        chosen = [s for s in steps if s in chosen or s in by_rf]
    elif steps:   # no step node: an observer started right after a prof.step() and stopped in a later step
        matched = _rf_matched(host, kineto)
        chosen = _cut_at_recorded_end(host, kineto, matched, _steps_holding(kineto, matched, steps))
    if chosen:
        lo, hi = _bounded(chosen, steps)
        return Window(_name_of(chosen), chosen, lo, hi, "steps holding the host ops' Record function ids")
    if len(steps) >= 2:
        buckets = _bucket_names(kineto, steps)
        best = (_dice(host_names, host_total, sum(buckets, Counter())), -1)
        for i, bucket in enumerate(buckets):
            score = _dice(host_names, host_total, bucket)
            if score > best[0]:
                best = (score, i)
        if best[1] >= 0:
            i = best[1]
            s = steps[i]
            lo = -math.inf if i == 0 else s.ts
            hi = math.inf if i == len(steps) - 1 else steps[i + 1].ts
            return Window(s.name, [s], lo, hi, f"best name overlap among {len(steps)} steps ({best[0]:.3f})")
        return Window(_name_of(steps), steps, reason="whole trace (best name overlap)")
    if steps:
        return Window(_name_of(steps), steps, reason="the only ProfilerStep")
    return Window("kineto_span", [], reason="no ProfilerStep in the Kineto trace")


def rf_identifies(ops: int, hits: int, same: int) -> bool:
    """Whether Record function ids identify the host ops (see the module doc): at least half of ``ops`` (the
    host operators, or the Kineto trace's distinct Record function ids when fewer) found an event with their
    rf_id, and nine in ten of those ``hits`` have its name.

    Counted against the host ops alone, a host ET whose observer ran over more steps than the profiler's
    window (1,564 host ops, 474 events, every event's id a host op's of the same name) fell back to aligning
    names, which gave two gloo:all_reduce events to ops of steps the Kineto trace lacks."""
    return hits * 2 >= ops and same * 10 >= hits * 9


def rf_hits(ops: list[HostOp], kineto: KinetoTrace, by_rf: dict[int, int]
            ) -> tuple[list[tuple[int, int, bool]], int, int]:
    """The host ops whose ``rf_id`` an event carries (``by_rf``: Record function id -> position of its
    first event): ``(op id, position, same name)`` in op order, the number of hits, and of hits with the
    same name."""
    events = kineto.events
    hits = same = 0
    found: list[tuple[int, int, bool]] = []
    for op in ops:
        rf = op.rf_id
        if rf is None:
            continue
        p = by_rf.get(rf)
        if p is not None:
            hits += 1
            equal = events[p].name == op.name
            same += equal
            found.append((op.id, p, equal))
    return found, hits, same


def rf_index(kineto: KinetoTrace) -> dict[int, int]:
    """Record function id -> position of the first host event (op or annotation) that carries it."""
    events = kineto.events
    by_rf: dict[int, int] = {}
    for p in kineto.op_positions:
        rf = events[p].rf_id
        if rf is not None:
            by_rf.setdefault(rf, p)
    return by_rf


def _rf_matched(host: HostTrace, kineto: KinetoTrace) -> list[int]:
    """Positions of the Kineto events whose Record function id is a host operator's of the same name, when
    those ids identify the host ops (:func:`rf_identifies`, as the matcher decides); else []."""
    by_rf = rf_index(kineto)
    if not by_rf:
        return []
    ops = [op for op in host.ops if op.kind == OP]
    found, hits, same = rf_hits(ops, kineto, by_rf)
    if not rf_identifies(min(len(ops), len(by_rf)), hits, same):
        return []
    return [p for _, p, equal in found if equal]


def _steps_holding(kineto: KinetoTrace, matched: list[int], steps: list[StepWindow]) -> list[StepWindow]:
    """The steps holding an event of ``matched`` (positions, :func:`_rf_matched`)."""
    events = kineto.events
    times = sorted(events[p].ts for p in matched)
    held = []
    for s in steps:      # a step holds a hit when the first hit at or after its start is before its end
        i = bisect_left(times, s.ts)
        if i < len(times) and times[i] < s.ts + s.dur:
            held.append(s)
    return held


def _cut_at_recorded_end(host: HostTrace, kineto: KinetoTrace, matched: list[int], chosen: list[StepWindow],
                         share: float = PARTIAL_STEP_SHARE) -> list[StepWindow]:
    """``chosen`` (the steps holding the host ops' events ``matched``, for a host ET with no step node), its
    last step cut where the host ET's recorded ops end when the observer stopped inside it: the Kineto trace
    holds operators after the last of the host ops' events, none of them a host op, spanning more than
    ``share`` of the step.  Measured whole, the step held work the host ET never recorded (an observer
    stopped after the forward: replayed -92% against the step)."""
    if not chosen:
        return chosen
    last = chosen[-1]
    end = last.ts + last.dur
    hosts = set(matched)
    events = kineto.events
    recorded = -math.inf
    unrecorded: list[tuple[float, float]] = []
    for p in kineto.op_positions:
        ev = events[p]
        if not last.ts <= ev.ts < end or ev.name.startswith(_PROFILER_STEP):
            continue
        if p in hosts:
            recorded = max(recorded, ev.ts + ev.dur)
        else:
            unrecorded.append((ev.ts, min(ev.ts + ev.dur, end)))
    if recorded == -math.inf:
        return chosen
    after = [(a, b) for a, b in unrecorded if a >= recorded]
    if not after or max(b for _, b in after) - min(a for a, _ in after) <= share * last.dur:
        return chosen
    log.warning("%s: its ops end %.1f us into %s (of %.1f us) and %s holds %d operator(s) after them that it "
                "did not record (the observer stopped inside the step?): measured up to the end of the last "
                "recorded op", host.path, recorded - last.ts, last.name, last.dur, kineto.path, len(after))
    return [*chosen[:-1], StepWindow(last.name, last.ts, recorded - last.ts)]


def _step_threads(host: HostTrace) -> set[int]:
    """The threads of the host ET that hold ProfilerStep nodes."""
    return {op.tid for op in host.ops if op.kind == OP and op.name.startswith(_PROFILER_STEP)}


def _unmarked_ops(host: HostTrace) -> bool:
    """Whether an operator that is a child of a thread root, on a thread that holds ProfilerStep nodes, is
    not itself one: the rest of a step whose record began before the observer started.  (An op whose
    parent is missing is the start of a step whose record had not ended when the observer stopped.)"""
    by_id = host.by_id
    tids = _step_threads(host)
    for op in host.ops:
        parent = by_id.get(op.parent)
        if op.kind == OP and op.tid in tids and parent is not None and parent is not op \
                and parent.kind != OP and not op.name.startswith(_PROFILER_STEP):
            return True
    return False


def _best_run(
    kineto: KinetoTrace, wins: list[StepWindow], k: int, host_names: Counter[str], host_total: int
) -> list[StepWindow]:
    buckets = _bucket_names(kineto, wins, extend_first=False)
    best_score, best_i = -1.0, 0
    for i in range(len(wins) - k + 1):
        score = _dice(host_names, host_total, sum(buckets[i : i + k], Counter()))
        if score > best_score:
            best_score, best_i = score, i
    return wins[best_i : best_i + k]


def _bucket_names(
    kineto: KinetoTrace, wins: list[StepWindow], extend_first: bool = True
) -> list[Counter[str]]:
    """Host-event names per window, window i covering [start_i, start_i+1) (the first from -inf
    when ``extend_first``, else events before the first window are not counted).

    One bisect per event: O(n log w), not a scan of all events per window.
    """
    starts = [w.ts for w in wins]
    buckets: list[Counter[str]] = [Counter() for _ in wins]
    for ev in kineto.events:
        if ev.kind == HOST_OP or ev.kind == ANNOTATION:
            i = bisect_right(starts, ev.ts) - 1
            if i >= 0 or extend_first:
                buckets[i if i > 0 else 0][ev.name] += 1
    return buckets


def measured(kineto: KinetoTrace, window: Window) -> dict[str, object]:
    """ET+ ``measured``: the profiled window (its start and the length of the union of its steps)."""
    steps = sorted(window.steps, key=lambda s: s.ts)
    if not steps:
        lo, hi = kineto.span
        return {"window": "kineto_span", "start_us": lo, "dur_us": hi - lo, "steps": []}
    return {
        "window": window.name,
        "start_us": steps[0].ts,
        "dur_us": union_length(steps),
        "steps": [{"name": s.name, "ts": s.ts, "dur": s.dur} for s in steps],
    }


# ---- one chosen step: which host ops belong to ProfilerStep#N -------------------------------------------


def step_annotation(step: int) -> str:
    return f"{_PROFILER_STEP}{step}"


def check_step(kineto: KinetoTrace, step: int) -> StepWindow:
    """The Kineto window of ``ProfilerStep#<step>``; a usage error naming the steps there are otherwise."""
    if step < 0:
        raise UsageError(f"--step {step}: a step number is 0 or more")
    name = step_annotation(step)
    wins = annotation_windows(kineto, name)
    if not wins:
        there = sorted({s.name for s in kineto.steps}, key=lambda n: (len(n), n))
        raise UsageError(f"--step {step}: no {name} in {kineto.path} (its steps: "
                         f"{', '.join(there) if there else 'none'})")
    return max(wins, key=lambda w: w.dur)


def _check_steps_not_nested(host: HostTrace, name: str, together: frozenset[str] = frozenset()) -> None:
    """A TraceFormatError when the host ET nests ``name`` inside another ProfilerStep, or another one
    inside it: the steps' ops are then not told apart by the tree (cpu_gloo/ddp_mlp_4r rank 3 records
    ProfilerStep#2 as a child of ProfilerStep#1), and ``--step`` would keep both steps or none.  ``together``:
    steps kept with ``name``, whose nesting with it does not matter."""
    by_id = host.by_id
    for op in host.ops:
        if op.kind != OP or not op.name.startswith(_PROFILER_STEP):
            continue
        parent = by_id.get(op.parent)
        seen = 0
        while parent is not None and parent is not op and seen <= len(by_id):
            if parent.kind == OP and parent.name.startswith(_PROFILER_STEP) \
                    and name in (op.name, parent.name) and not {op.name, parent.name} <= together | {name}:
                raise TraceFormatError(f"{op.name} is recorded inside {parent.name} (thread {op.tid}): the "
                                       f"host ET does not tell the two steps' ops apart, so {name} cannot be "
                                       "kept alone; link without --step", host.path)
            nxt = by_id.get(parent.parent)
            parent = None if nxt is parent else nxt
            seen += 1


def step_ops(host: HostTrace, kineto: KinetoTrace, host_to_event: dict[int, int], step: int,
             together: frozenset[str] = frozenset()) -> set[int]:
    """Ids of the host nodes of one step: what ``--step N`` keeps.

    Roots and metadata nodes (``## process_group:init ##``) are always kept: the kept ops hang from them
    and the process groups are needed.  An op is kept with its whole subtree, decided at the top level of
    its thread (a child of a thread root):

    * the host ET holds a ``ProfilerStep#N`` node: that node (all of the step on its thread; other
      top-level ops of that thread, such as the other steps, go); on the other threads, a top-level op
      whose Kineto event starts inside the step's window, or, not matched, that was recorded between
      ``ProfilerStep#N`` and the next step (the host ET numbers nodes in the order they start);
    * no ``ProfilerStep`` in the host ET: the top-level ops whose Kineto event starts inside the window,
      and the unmatched ones recorded between the first and the last of those.

    A dependency on a node that is not kept is dropped by the caller: it was met before the step began.
    """
    window = check_step(kineto, step)
    lo, hi = window.ts, window.ts + window.dur
    events = kineto.events
    by_id = host.by_id
    name = step_annotation(step)

    def top_level(op: HostOp) -> bool:
        parent = by_id.get(op.parent)
        return op.kind == OP and (parent is None or parent is op or parent.kind != OP)

    def in_window(op: HostOp) -> bool | None:
        pos = host_to_event.get(op.id)
        return None if pos is None else lo <= events[pos].ts < hi

    _check_steps_not_nested(host, name, together)
    tops = [op for op in host.ops if top_level(op)]
    marker = next((op for op in tops if op.name == name), None)
    keep_top: set[int] = set()
    if marker is not None:
        later = [op.id for op in tops if op.name.startswith(_PROFILER_STEP) and op.id > marker.id]
        first, last = marker.id, min(later, default=math.inf)
        for op in tops:
            if op is marker:
                keep_top.add(op.id)
            elif op.tid != marker.tid and not op.name.startswith(_PROFILER_STEP):
                inside = in_window(op)
                if inside or (inside is None and first < op.id < last):
                    keep_top.add(op.id)
    else:
        timed = [op.id for op in tops if in_window(op)]
        first, last = min(timed, default=0), max(timed, default=-1)
        for op in tops:
            inside = in_window(op)
            if inside or (inside is None and first < op.id < last):
                keep_top.add(op.id)
    # every op inherits the decision of its top-level ancestor (iterative walk with memo: no recursion)
    keep: set[int] = {op.id for op in host.ops if op.kind != OP}
    decided: dict[int, bool] = {}
    for op in host.ops:
        if op.kind != OP:
            continue
        path: list[int] = []
        cur: HostOp | None = op
        verdict = False
        while cur is not None:
            known = decided.get(cur.id)
            if known is not None:
                verdict = known
                break
            path.append(cur.id)
            if top_level(cur):
                verdict = cur.id in keep_top
                break
            nxt = by_id.get(cur.parent)
            cur = None if nxt is None or nxt is cur or len(path) > len(by_id) else nxt
        for oid in path:
            decided[oid] = verdict
        if verdict:
            keep.add(op.id)
    return keep


def steps_kineto_holds(host: HostTrace, kineto: KinetoTrace, window: Window, host_to_event: dict[int, int]
                       ) -> tuple[set[int], list[str]] | None:
    """When the host ET holds ``ProfilerStep#N`` nodes the Kineto trace lacks, beside those of ``window``:
    the ids of the host nodes of the steps both hold (:func:`step_ops` of each) and the names of the steps
    left out; else None.

    A profiler schedule with ``repeat`` records every cycle's active steps in the one host ET (the
    observer starts and stops with each cycle) but writes one Kineto trace per cycle: linked whole, the
    other cycles' ops stayed in the ET+ without a time (a real 2-cycle run replayed +67% alone).  A step
    left out nested in one kept, or the other way round (:func:`_check_steps_not_nested`), is not told
    apart: None."""
    held = [s.name for s in window.steps]
    if not held:
        return None
    host_steps = {op.name for op in host.ops if op.kind == OP and op.name.startswith(_PROFILER_STEP)}
    if not set(held) <= host_steps:
        return None
    extra = sorted(host_steps - set(held), key=lambda n: (len(n), n))
    numbers = [n[len(_PROFILER_STEP):] for n in dict.fromkeys(held)]
    if not extra or not all(x.isdigit() for x in numbers):
        return None
    keep = _ops_of_steps(host, kineto, host_to_event, held)
    return None if keep is None else (keep, extra)


def _ops_of_steps(host: HostTrace, kineto: KinetoTrace, host_to_event: dict[int, int], held: list[str]
                  ) -> set[int] | None:
    """The union of :func:`step_ops` over the steps ``held`` (``ProfilerStep#N`` names), or None when the
    host ET does not tell them apart."""
    keep: set[int] = set()
    try:
        for name in dict.fromkeys(held):
            keep |= step_ops(host, kineto, host_to_event, int(name[len(_PROFILER_STEP):]), frozenset(held))
    except TraceFormatError:
        return None
    return keep


def ops_outside_steps(host: HostTrace, kineto: KinetoTrace, window: Window, host_to_event: dict[int, int]
                      ) -> tuple[set[int], int] | None:
    """When the window is ProfilerSteps and the host ET also holds operators outside all of them that match
    no Kineto event inside the window: the ids of the steps' nodes (:func:`step_ops`) and how many operators
    are left out; else None.

    An ExecutionTraceObserver started by hand after a ``prof.step()`` records the rest of that step without
    its ProfilerStep node (the record began before the observer), and, when the profiler was not yet
    active, without Kineto events: linked whole, those ops (collectives among them) stayed in the ET+
    without a time and ASTRA-sim ran them too (collect.py --et-steps 1:3: rank 0 +4.54% simulated).  One
    stopped inside a step records the ops that ended before it, under a step node it never writes: their
    events lie after the window, and the replay ran them past its end.  When any op outside the steps has
    an event inside the window, nothing is left out (None)."""
    held = [s.name for s in window.steps]
    if not held or not all(n.startswith(_PROFILER_STEP) and n[len(_PROFILER_STEP):].isdigit() for n in held):
        return None
    by_id = host.by_id
    step_tids = _step_threads(host)
    if not step_tids:
        return None
    for op in host.ops:      # cheap test first: an operator at the top of a step's thread, not a kept step
        parent = by_id.get(op.parent)
        if op.kind == OP and op.tid in step_tids and (parent is None or parent is op or parent.kind != OP) \
                and op.name not in held:
            break
    else:
        return None
    keep = _ops_of_steps(host, kineto, host_to_event, held)
    if keep is None:
        return None
    dropped = [op.id for op in host.ops if op.kind == OP and op.id not in keep]
    events = kineto.events
    spans = [(s.ts, s.ts + s.dur) for s in window.steps]
    for i in dropped:
        pos = host_to_event.get(i)
        if pos is not None and any(lo <= events[pos].ts < hi for lo, hi in spans):
            return None
    return (keep, len(dropped)) if dropped else None
