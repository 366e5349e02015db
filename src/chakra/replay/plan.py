"""How the lanes of one rank run: the replay's lane and wait rules, computed once per rank, as data.

Both schedulers of :mod:`chakra.replay.engine` (the in-order pass of a rank on its own and the event loop
of a whole job) read a :class:`Plan`; neither has rules of its own.  The rules themselves (segments and
gaps, thread timing, finish waits, what-if) are described in the engine's module docstring.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_left
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import Any

from chakra import formats as wire
from chakra.replay.graph import COMM_TYPES, RankGraph, positions
from chakra.schema import METADATA_NODE


@dataclass(slots=True)
class Plan:
    """Everything that bounds when a node of one rank starts and ends (local indices).

    A node starts at the latest of: ``first`` (its lane's first node: its offset from the window
    start), the end of each of ``deps``, its lane predecessor freeing the lane plus ``gap``, and
    ``end(u) + delay`` for each ``after`` pair; a finish wait ``(u, tail, offset)`` adds
    ``start(u) + offset`` to those and makes it end no earlier than ``end(u) + tail``.  It then lasts
    ``rd`` (or ``ff_min`` when it waits for an end).  A lane predecessor in ``release`` frees the lane
    that long after its start instead of at its end.
    """

    rd: MutableSequence[float]          # replayed duration (what-if applied; a CPU parent's lead; METADATA 0)
    rd_rec: MutableSequence[float]      # the same without the what-if (what the recording shows)
    deps: list[tuple[int, ...]]         # dependencies whose end the node waits for
    lane_prev: MutableSequence[int]     # lane predecessor (-1: first of its lane, or no lane)
    gap: list[float]                    # delay after the lane predecessor frees the lane
    first: dict[int, float]             # a lane's first node: its offset from the window start
    release: dict[int, float]           # node -> time after its start at which its lane is free
    after: dict[int, list[tuple[int, float]]] = field(default_factory=dict)   # node -> [(u, delay)]
    waits: dict[int, list[tuple[int, float | None, float]]] = field(default_factory=dict)  # finish waits
    ff_min: dict[int, float] = field(default_factory=dict)   # node -> its own time after what it waits for
    close: dict[int, tuple[int, float]] = field(default_factory=dict)   # parent -> (last descendant, tails)
    transfer: dict[int, tuple[int, float]] = field(default_factory=dict)   # record -> (child after, piece)


# One bound on a node's start, as data (:func:`start_bounds`): the node ``u`` it names, whether at its end
# (else its start), ``lead`` and ``delay``: start >= (time of u + lead) + delay, summed in that order; how u
# releases the node (``link``: "dep" its end, "start" its start, "lane" it frees the lane) and what the
# ``delay`` is (``between``: "thread" a lane's gap, "latency" a wait's recorded latency, "slack" nothing).
Bound = tuple[int, bool, float, float, str, str]


def start_bounds(plan: Plan, i: int, gap: Sequence[float] | None = None) -> list[Bound]:
    """Every bound on the start of node ``i`` besides its earliest start (its lane's offset ``first``),
    in this order: its dependencies' ends; each wait's end plus its latency; each finish wait's start plus
    its offset; its lane predecessor freeing the lane (its end, or its start plus its release) plus the
    gap (``gap``: the gaps the replay read, the plan's unless a whole job changed some)."""
    out = [(u, True, 0.0, 0.0, "dep", "slack") for u in plan.deps[i]]
    after = plan.after.get(i)
    if after:
        out += [(u, True, 0.0, delay, "dep", "latency") for u, delay in after]
    waits = plan.waits.get(i)
    if waits:
        out += [(u, False, offset, 0.0, "start", "slack") for u, _tail, offset in waits]
    p = plan.lane_prev[i]
    if p >= 0:
        rel = plan.release.get(p)
        out.append((p, rel is None, 0.0 if rel is None else rel, (plan.gap if gap is None else gap)[i],
                    "lane", "thread"))
    return out


def end_bounds(plan: Plan, i: int) -> list[tuple[int, float]]:
    """Every bound on the end of node ``i`` besides its own time: ``(u, tail)``, end >= end(u) + tail (a
    finish wait: it was recorded blocked on ``u``)."""
    return [(u, tail) for u, tail, _offset in plan.waits.get(i, ()) if tail is not None]


def rank_plan(g: RankGraph, deps: list[tuple[int, ...]], order: Sequence[int], use_gaps: bool) -> Plan:
    """The plan of one rank: its lanes in lane order ``order`` (a topological order of ``deps``, the
    resolved dependencies; the finish waits are taken out of that list, which is the plan's)."""
    if g.thread_timing:
        plan = _pieces_plan(g, order, use_gaps)
        plan.deps = deps
    else:
        plan = _segments_plan(g, order, use_gaps, deps)
    _add_finish_waits(g, plan)
    if METADATA_NODE in g.types:          # a METADATA node ends when it starts
        rd = plan.rd
        for i in positions(g.types, METADATA_NODE):
            rd[i] = 0.0
    return plan


def lane_sequences(lanes: Sequence[Any], order: Sequence[int]) -> dict[Any, list[int]]:
    """Each lane's nodes in lane order (METADATA nodes, lane None, have none)."""
    by_order = list(map(lanes.__getitem__, order))
    seqs: dict[Any, list[int]] = {lane: [] for lane in dict.fromkeys(by_order)}
    any(map(list.append, map(seqs.__getitem__, by_order), order))    # seqs[lanes[i]].append(i), in C
    seqs.pop(None, None)
    return seqs


def _segments_plan(g: RankGraph, order: Sequence[int], use_gaps: bool, deps: list[tuple[int, ...]]) -> Plan:
    """Lanes from the recorded start times: each lane in lane order; on CPU lanes (with gaps) segments
    and gaps (the engine's "Segments and gaps").

    A non-CPU node on a host thread (a gloo record) overlapping the ops after it is not a parent: the
    thread went on while it ran.  It keeps its whole duration and releases its thread after its segment.
    """
    n = len(g.ids)
    starts, is_cpu = g.starts, g.is_cpu
    timed = g.timed
    rd: MutableSequence[float] = array("d", g.durations)   # (8 bytes a node; a list of floats: 32)
    lane_prev = array("l", (-1,)) * n
    gap = [0.0] * n
    first: dict[int, float] = {}
    release: dict[int, float] = {}
    for lane, seq in lane_sequences(g.lanes, order).items():
        if lane[0] != "cpu" or not (timed or use_gaps):
            any(map(lane_prev.__setitem__, islice(seq, 1, None), seq))   # lane_prev[b] = a, in C
            continue
        # a parent op runs its leading segment (up to the next op of the thread, its first child); the
        # rest of its exclusive time shows up as gaps between and after its children
        cur = 0.0
        a = -1
        sa = 0.0
        for b in seq:
            sb = starts[b]
            if a >= 0:
                lane_prev[b] = a
                adv = rd[a]
                if timed and sb >= sa and sb - sa < adv:
                    if is_cpu[a]:
                        if use_gaps:    # without gaps a parent runs its whole exclusive time at once
                            rd[a] = adv = sb - sa
                    else:
                        release[a] = adv = sb - sa
                if use_gaps:
                    cur += adv
                    if sb > cur:
                        gap[b] = sb - cur
                        cur = sb
            elif use_gaps and sb > cur:
                first[b] = sb - cur
                cur = sb
            a, sa = b, sb
    rd_rec = rd
    factor, delay = g.factor, g.delay
    if factor is not None or delay is not None:
        rd = array("d", map(operator.mul, rd, factor)) if factor is not None else array("d", rd)
        if delay is not None:
            rd = array("d", map(operator.add, rd, delay))
    return Plan(rd=rd, rd_rec=rd_rec, deps=deps, lane_prev=lane_prev, gap=gap, first=first, release=release)


def _pieces_plan(g: RankGraph, order: Sequence[int], use_gaps: bool) -> Plan:
    """Lanes of a rank whose nodes carry their thread timing (``g.thread_timing``, chakra.convert.threads).

    Each host thread is walked in lane order with a stack of open nodes rebuilt from ``thread_depth``.
    A node starts after its lane predecessor frees the lane plus its gap: the tails of the nodes that
    closed in between, and its enclosing node's ``work_before_us`` (each piece times its owner's
    what-if factor), or, outside any node, its ``idle_before_us`` (dropped with ``use_gaps`` off).  A
    node with children occupies the lane for its lead, ``duration - tail - work_before of its
    children`` (an edited duration below those pieces shrinks them proportionally).  A record marked
    ``frees_thread`` (an isend) frees its lane at once and keeps its duration.  ``wait_on`` adds
    ``start >= end(waited) + wait_post_us (+ idle_before_us with gaps)``, where the end of a node with
    children is when its tail ends (its last descendant's end plus the tails up to its own).  GPU
    streams have no gaps.  (The plan's ``deps`` are set by :func:`rank_plan`.)
    """
    n = len(g.ids)
    lane_prev = array("l", (-1,)) * n
    th = _walk_threads(g, order, lane_prev)
    rd_rec, rd, scale = _leads(g, th.cwb)
    plan = Plan(rd=rd, rd_rec=rd_rec, deps=[], gap=[0.0] * n, first={}, release={}, lane_prev=lane_prev)
    for i in g.extra.get(wire.ATTR_FREES_THREAD, {}):
        if i not in th.cwb:
            plan.release[i] = 0.0     # a record that does not hold its thread (an isend)
    _piece_gaps(g, plan, th, scale, use_gaps)
    _wait_bounds(g, plan, use_gaps)
    # a communication record with children on its thread (gloo allocating, transferring, copying out):
    # its longest piece of own time, before one of its children, is the transfer (a whole-job replay
    # couples that piece with the peers, see the engine)
    wb = g.extra.get(wire.ATTR_WORK_BEFORE_US, {})
    for j in th.record_kids:
        p = th.parent[j]
        if not g.is_cpu[p]:
            w = wb.get(j, 0) * scale.get(p, 1.0)
            if w > 0 and (p not in plan.transfer or w > plan.transfer[p][1]):
                plan.transfer[p] = (j, w)
    return plan


@dataclass(slots=True)
class _Threads:
    """What the walk of the host threads finds (:func:`_walk_threads`)."""

    parent: list[int]                     # enclosing node on its thread (-1: none)
    cwb: dict[int, float]                 # a node with children -> its children's work_before, summed
    closed_before: dict[int, list[int]]   # node -> the nodes that closed just before it, innermost first
    timed_lanes: list[list[int]]          # the lanes with thread timing, each in lane order
    record_kids: list[int]                # children of a communication record on its thread


def _walk_threads(g: RankGraph, order: Sequence[int], lane_prev: MutableSequence[int]) -> _Threads:
    """Each lane in lane order (its lane predecessors set in ``lane_prev``); on a lane with thread timing,
    which node encloses which (the stack of open nodes rebuilt from ``thread_depth``).  The nodes still
    open after the last node of the k-th timed lane are under ``closed_before[-2 - k]``."""
    n = len(g.ids)
    ex, types = g.extra, g.types
    depth = ex.get(wire.ATTR_THREAD_DEPTH, {})
    idle = ex.get(wire.ATTR_IDLE_BEFORE_US, {})
    wget = ex.get(wire.ATTR_WORK_BEFORE_US, {}).get
    th = _Threads(parent=[-1] * n, cwb={}, closed_before={}, timed_lanes=[], record_kids=[])
    parent, cwb, closed_before = th.parent, th.cwb, th.closed_before
    for lane, seq in lane_sequences(g.lanes, order).items():
        any(map(lane_prev.__setitem__, islice(seq, 1, None), seq))   # lane_prev[b] = a, in C
        if lane[0] != "cpu" and not any(map(depth.__contains__, seq)) \
                and not any(map(idle.__contains__, seq)):
            continue      # a GPU stream (a host record's own lane, e.g. a gloo worker, has the timing)
        th.timed_lanes.append(seq)
        stack: list[int] = [-1]           # (a bottom that never closes)
        depths: list[float] = [-math.inf]
        for j, d in zip(seq, map(depth.get, seq, repeat(0))):
            if depths[-1] >= d:
                closed = closed_before[j] = []
                while depths[-1] >= d:
                    closed.append(stack.pop())
                    depths.pop()
            p = stack[-1]
            if p >= 0:
                parent[j] = p
                w = wget(j)
                if w:
                    cwb[p] = cwb.get(p, 0.0) + w
                    if types[p] in COMM_TYPES:
                        th.record_kids.append(j)
            stack.append(j)
            depths.append(d)
        if len(stack) > 1:
            closed_before.setdefault(-1 - len(th.timed_lanes), []).extend(reversed(stack[1:]))
    for p in set(parent):                  # every node with children (with or without work before them)
        if p >= 0 and p not in cwb:
            cwb[p] = 0.0
    return th


def _leads(g: RankGraph, cwb: dict[int, float]) -> tuple[list[float], list[float], dict[int, float]]:
    """Recorded and replayed durations (a parent: its lead; what-if applied), and each parent's scale: how
    its pieces scale with it (an edited duration below its pieces, its what-if factor)."""
    tail = g.extra.get(wire.ATTR_TAIL_US, {})
    factor, delay = g.factor, g.delay
    rd_rec = [0.0 if t == METADATA_NODE else float(d) for d, t in zip(g.durations, g.types)]
    scale: dict[int, float] = {}
    rd = list(rd_rec)
    for i, w in cwb.items():
        pieces = tail.get(i, 0) + w
        d = rd_rec[i]
        if d < pieces:
            r = d / pieces if pieces else 1.0
            lead = 0.0
        else:
            r = 1.0
            lead = d - pieces
        rd_rec[i] = lead
        f = factor[i] if factor is not None else 1.0
        rd[i] = lead * f
        scale[i] = r * f
    if factor is not None:
        for i in range(len(rd)):
            if i not in cwb:
                rd[i] *= factor[i]
    if delay is not None:
        for i in range(len(rd)):
            if delay[i]:
                rd[i] += delay[i]
    return rd_rec, rd, scale


def _piece_gaps(g: RankGraph, plan: Plan, th: _Threads, scale: dict[int, float], use_gaps: bool) -> None:
    """Each node's gap on a timed lane (the tails closed before it, its enclosing node's work before it,
    its idle time with gaps), a lane's first offset, and each parent's close: (its last descendant, the
    tails up to its own)."""
    n = len(g.ids)
    ex = g.extra
    tail, wb = ex.get(wire.ATTR_TAIL_US, {}), ex.get(wire.ATTR_WORK_BEFORE_US, {})
    idle = ex.get(wire.ATTR_IDLE_BEFORE_US, {})
    gap, first, close, lane_prev, cwb, parent = plan.gap, plan.first, plan.close, plan.lane_prev, th.cwb, \
        th.parent
    cget, tget, wget, iget, sget = th.closed_before.get, tail.get, wb.get, idle.get, scale.get
    # a node's gap depends on its own pieces only: computed for the nodes that have some
    in_timed = bytearray(n)
    for seq in th.timed_lanes:
        any(map(in_timed.__setitem__, seq, repeat(1)))
    todo = set(wb)
    todo.update(k for k in th.closed_before if k >= 0)
    if use_gaps:
        todo.update(idle)
    for j in todo:
        if not in_timed[j]:
            continue
        t = 0.0
        closed_j = cget(j)
        if closed_j:
            last = lane_prev[j]
            for o in closed_j:
                tl = tget(o)
                if tl:
                    t += tl * sget(o, 1.0)
                if o in cwb:
                    close[o] = (last, t)
        w = wget(j)
        if w:
            t += w * sget(parent[j], 1.0)
        if use_gaps:
            x = iget(j)
            if x:
                t += x
        if t:
            gap[j] = t
    for li, seq in enumerate(th.timed_lanes):
        if gap[seq[0]]:
            first[seq[0]] = gap[seq[0]]
            gap[seq[0]] = 0.0
        t = 0.0
        for o in cget(-2 - li, ()):       # still open after the lane's last node
            tl = tget(o)
            if tl:
                t += tl * sget(o, 1.0)
            if o in cwb:
                close[o] = (seq[-1], t)


def _wait_bounds(g: RankGraph, plan: Plan, use_gaps: bool) -> None:
    """``wait_on``: start no earlier than the waited node's end (a parent's: when its tail ends) plus the
    recorded latency (and the idle time with gaps)."""
    ex = g.extra
    wait_on, wait_post = ex.get(wire.ATTR_WAIT_ON, {}), ex.get(wire.ATTR_WAIT_POST_US, {})
    idle = ex.get(wire.ATTR_IDLE_BEFORE_US, {})
    ids = g.ids
    for j, uid in wait_on.items():
        u = _find_id(ids, uid)          # (ids increase: a bisection, no id -> index table)
        if u is None or uid not in g.deps[j]:
            continue
        post = float(wait_post.get(j, 0)) + (idle.get(j, 0) if use_gaps else 0.0)
        c = plan.close.get(u)
        if c is not None and c[0] >= 0 and c[0] not in plan.release:
            u, post = c[0], post + c[1]
        plan.after.setdefault(j, []).append((u, post))


def _find_id(ids: Sequence[int], nid: int) -> int | None:
    k = bisect_left(ids, nid)
    return k if k < len(ids) and ids[k] == nid else None


def _add_finish_waits(g: RankGraph, plan: Plan) -> None:
    """Nodes that were recorded already running while a dependency on another lane finished.

    A node ``v`` depending on ``u`` that was recorded starting before ``u`` ended did
    not wait for ``u`` to finish before starting: it was blocked in it (a synchronize,
    a ``wait()``, a collective queued behind the previous one of its group on another
    worker thread, a kernel starting before its launch call returned), and its duration
    already contains that wait.  Such a dependency constrains the *end* of ``v``::

        end(v)   >= end(u) + max(0, recorded end of v - recorded end of u)
        start(v) >= start(u) + max(0, recorded start of v - recorded start of u)

    instead of its start, so the wait is not counted twice and shrinks when ``u``
    ends earlier.  When the recording even has ``v`` ending before ``u`` (two
    collectives of one group overlapping on two gloo worker threads; an op chained
    after an asynchronous gloo record of its thread), the recording contradicts the
    dependency: only the start bound is kept.  This applies across lanes, and on the
    same thread after a non-CPU record (which the thread does not wait for).  When
    ``u`` has children (the ``ctrl_deps`` target of a CPU op: a CPU op, or, for the nodes of its
    own thread, a communication record whose thread works inside it, as gloo allocates and copies
    inside its record) its recorded end is not known (its ``duration_micros`` is exclusive), so
    those stay start dependencies.  A METADATA node takes no time: it keeps the start bound only.
    The what-if scales and delays the tail (it is the node's own time): ``tail * factor + delay``.
    In a whole-job replay a coupled node's transfer ends at the common end, or later when such a
    recorded wait says so.
    """
    if not g.timed:
        return
    deps, rd = plan.deps, plan.rd_rec
    lanes, starts, durs, is_cpu, ids, types = g.lanes, g.starts, g.durations, g.is_cpu, g.ids, g.types
    parents = g.parents
    factor, delay = g.factor, g.delay
    waits, ff_min = plan.waits, plan.ff_min
    for i, d in enumerate(deps):
        if not d:
            continue
        lane = lanes[i]
        if lane is None:
            continue
        s = starts[i]
        e = s + rd[i]
        pairs = None
        for j in d:
            f = starts[j] + durs[j]
            if not s < f:      # (most dependencies: ended before the node started)
                continue
            lj = lanes[j]
            if lj is None:
                continue
            if is_cpu[j]:
                if lj == lane or ids[j] in parents:
                    continue
            elif ids[j] in parents and lj == lane:    # a communication record its thread works inside
                continue
            if pairs is None:
                pairs = []
            tail = e - f if f <= e + 1.0 else None
            pairs.append((j, None if tail is None else max(0.0, tail), max(0.0, s - starts[j])))
        if not pairs:
            continue
        skip = {j for j, _, _ in pairs}
        deps[i] = tuple(j for j in d if j not in skip)
        if types[i] == METADATA_NODE:      # (a METADATA node with a lane: built by hand)
            pairs = [(j, None, offset) for j, _, offset in pairs]
        elif factor is not None or delay is not None:
            fi = factor[i] if factor is not None else 1.0
            di = delay[i] if delay is not None else 0.0
            pairs = [(j, None if t is None else t * fi + di, offset) for j, t, offset in pairs]
        waits[i] = pairs
        tails = [t for _, t, _ in pairs if t is not None]
        if tails:
            ff_min[i] = min(tails)
