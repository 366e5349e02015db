"""The event-driven replay: one heap of completion events, O(N log N), deterministic.

Semantics (the numbers a user gets depend on these, so they are spelled out):

Dependencies
    A node can start once every ``ctrl_deps`` and ``data_deps`` node has finished.
    An id that is not in the file is an error (``missing="error"``), or is dropped
    with a warning (``missing="ignore"``, for old files such as the 2023 converter's,
    which point at dropped thread roots).  A cycle is an error naming its nodes.

Lane order (mode ``"lanes"``)
    Each CPU thread and each GPU stream is an in-order lane: its nodes run one at a
    time, in the order of a topological sort of the rank's graph that prefers the
    smallest recorded ``start_time_micros`` and then the smallest id.  With timestamps
    that agree with the dependencies this is exactly the recorded order; with
    timestamps that do not (or all zero) it is still a valid order, so a lane can
    never deadlock the replay.  The lane order is a dependency with a delay: a node
    starts no earlier than the end of its lane predecessor plus its gap.

Segments and gaps (CPU lanes of a rank with recorded start times)
    Idle time on a thread (Python, framework overhead between recorded ops) is real
    time the replay keeps.  CPU ops nest: a parent's ``duration_micros`` is its
    *exclusive* time, spread before, between and after its children, which follow it
    in pre-order -- so "the previous op's end" is not the previous op's ``start +
    duration``.  On a timed rank (any ``start_time_micros`` > 0) each thread is
    walked in lane order:

    * segment: a node occupies its thread for its *leading* exclusive segment,
      ``min(duration, start(next op of the thread) - start)``; for a leaf that is its
      duration, for a parent the time up to its first child.  The rest of its
      exclusive time falls between and after its children.  A non-CPU record on a
      host thread (a gloo ``gloo:*`` record) that overlaps the next ops is not a
      parent but asynchronous work: it keeps its whole duration and frees the
      thread after its segment;
    * gap (``gaps=True``): a recorded-time cursor (starting at 0, the measured window start) gives
      ``gap(n) = max(0, start(n) - cursor)``, then ``cursor = max(cursor, start(n)) +
      segment(n)``; a node starts no earlier than the replayed end of its thread
      predecessor plus its gap.  The gaps hold both the idle time and the parents'
      non-leading exclusive time, and the first op of a thread keeps its offset from
      the window start.

    Replayed without delays, a thread reproduces its recorded timeline exactly; a
    delay (a slower dependency, a peer in a whole-job replay) shifts the rest of the
    thread and keeps its gaps.  GPU streams get no gaps: their idle time is waiting
    for launches, which the dependencies reproduce.  Dependencies recorded as waits
    (see :func:`_finish_waits`) bound a node's end instead of its start, so a
    synchronize or a ``wait()`` does not count its waiting twice.
    ``gaps=False`` drops the gaps (what-if: "the ops alone", no Python or framework
    time between them): each CPU op runs its whole exclusive duration at once (a
    parent before its children) and each thread runs its ops back to back, so a
    thread's time is the sum of its ops' exclusive times.

Thread timing as data (files whose GlobalMetadata says ``thread_timing``)
    The converter writes how each host thread spent its recorded time (see
    :mod:`chakra.convert.threads`): the pieces of an op's exclusive time before, between and
    after its children, the idle time outside any op, and the blocking waits it found, as
    ``wait_on`` dependencies.  Such a rank takes its lanes from those attributes instead of
    the segments and gaps above (:func:`_pieces_plan`): a node waits for its lane predecessor,
    the pieces in between (each times its owner's what-if factor) and its idle time (dropped
    with ``gaps=False``); a wait starts a node at the waited node's end plus the recorded
    latency.  A parent op ends, for the completion log and the replayed time, when its tail
    after its children does.  A what-if (``RankGraph.factor`` / ``delay``, see
    :mod:`chakra.replay.whatif`) then moves everything that depends on a change, both ways.

ASTRA-sim rule (mode ``"astrasim"``)
    Per rank at most one CPU op, one GPU compute op and one GPU communication op run
    at once; among ready nodes of one kind the lowest id goes first.  No lanes and no
    gaps (``gaps`` is ignored), so the result is what that simulator would compute
    with recorded durations.

METADATA nodes take no time and no resource: they finish when their dependencies do.

Whole-job coupling (``replay_job``)
    A COMM_COLL node arrives when it is ready (lanes) or gets its resource (astrasim).
    Collectives are matched across ranks by :func:`chakra.job.match.match_job`: by the
    recorded sequence number (``comm_seq``), else by their order in each rank (lane
    order) placed where types, sizes and end times agree, keeping those every member
    rank's window holds; ``pg_name`` ``""`` or ``"0"`` is the world (``unknown_group``:
    a group no rank lists is an error, or with ``"world"`` the whole job).  A node
    without a counterpart (profiler windows cut at different collectives) runs alone for
    its recorded duration, with a warning.  The collective starts when the last
    participant arrives.  With ``collective="net"`` (the default) each participant
    then lasts its own recording minus the time it was recorded waiting for the last
    arrival: ring collectives do not end together on all ranks, and the threads that
    wait for them (``wait_on``) need each rank's own end; this needs the clock
    alignment below to be meaningful.  ``collective="min"`` instead gives every
    participant the *shortest recorded duration among the participants* (every
    recorded duration is communication plus waiting for the peers, and the
    participant that arrived last waited least, so the minimum is the best estimate
    of the communication alone) and ends them together.  Every participant's node
    spans from its own arrival to its end (its wait is kept separately).  A record
    with children on its thread (a gloo collective allocating, transferring and
    copying out on its worker thread) couples its longest piece of own time, the
    transfer, instead of its lead (see :func:`_couple_transfers`).
    COMM_SEND / COMM_RECV are matched per (src, dst, tag) channel, in order.  A
    send is eager: it never waits for its receiver and takes its recorded duration
    (blocking both sides would deadlock the common "everyone sends, then everyone
    receives" exchange that isend/irecv make legal).  A recv waits for its send to
    start, then lasts the shorter of the two recorded durations.

Clock alignment (whole job, lanes mode)
    Each rank's recorded times count from its own measured window start.  Ranks of
    one job rarely enter the profiled step together (in the corpus their steps end
    within ~1 ms of each other but start up to 7.5 ms apart: the early ranks wait for
    the late ones inside the step).  With ``align=True`` (default) a rank whose window
    started later begins its replay later by the difference of the recorded
    ``measured_start_us`` (one clock per host: Kineto timestamps), so collectives meet
    as they did; each rank's times are then reported from its own window start.

Ties: events at equal times are processed in (rank, node id) order; the result does
not depend on that order in lanes mode and is fixed by "lowest id first" in astrasim.

One rank on its own in lanes mode (``replay_file``, ``replay_rank``) with whole-µs times (what a
protobuf ET holds) takes :func:`_simulate_one`: every constraint then points to a node earlier in
the lane order, so one pass in that order gives the event loop's times bit for bit, without it.
"""

from __future__ import annotations

import heapq
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, count, islice, repeat
from typing import Any

from chakra.errors import ChakraError
from chakra.job.match import Comm, JobMatchError, RankComms, match_job
from chakra.replay.graph import RankGraph
from chakra.schema import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, METADATA_NODE

log = logging.getLogger(__name__)

MODES = ("lanes", "astrasim")
_COMM_NODE_TYPES = frozenset((COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE))
COLLECTIVE_DURATIONS = ("min", "net")
_CPU, _GPU_COMP, _GPU_COMM = 0, 1, 2
_MAX_LISTED = 5


class ReplayError(ChakraError):
    """The graph cannot be replayed (cycle, missing dependency, unmatched collective)."""


@dataclass(slots=True)
class SimOutput:
    """Global per-node results (index = rank offset + position in that rank's id order)."""

    starts: list[float]
    ends: list[float]
    offsets: list[int]
    comm_start: dict[int, float] = field(default_factory=dict)  # coupled node -> start of the transfer
    lane_order: list[list[int]] = field(default_factory=list)   # per rank: local indices in lane order
    groups: int = 0                                             # coupled groups (collectives + p2p pairs)
    base: list[float] = field(default_factory=list)             # per rank: its time 0 on the common clock
    closes: dict[int, float] = field(default_factory=dict)      # parent node -> when its tail ends


def _fmt_ids(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:_MAX_LISTED])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > _MAX_LISTED else "")


def _resolve_deps(g: RankGraph, missing: str) -> list[tuple[int, ...]]:
    """Dependency ids -> local indices, de-duplicated; unknown ids per ``missing``."""
    index = {nid: i for i, nid in enumerate(g.ids)}
    out: list[tuple[int, ...]] = []
    unknown: dict[int, list[int]] = {}
    for i, deps in enumerate(g.deps):
        if not deps:
            out.append(())
            continue
        res = []
        for d in deps:
            j = index.get(d)
            if j is None:
                unknown.setdefault(d, []).append(g.ids[i])
            else:
                res.append(j)
        if len(res) > 1:
            res = list(dict.fromkeys(res))
        out.append(tuple(res))
    if unknown:
        n_edges = sum(len(v) for v in unknown.values())
        first = min(unknown)
        msg = (f"{n_edges} dependencies point to {len(unknown)} node id(s) not in the file: "
               f"{_fmt_ids(sorted(unknown))}; e.g. node {unknown[first][0]} depends on missing node {first}")
        if missing == "error":
            raise ReplayError(msg + " (use missing='ignore' / --ignore-missing-deps to drop them)", g.path)
        log.warning("%s: %s; dropped", g.path or f"rank {g.rank}", msg)
    return out


def _priority_topo_order(g: RankGraph, deps: list[tuple[int, ...]]) -> list[int]:
    """Topological order preferring (recorded start, id); a cycle raises ReplayError."""
    n = len(g.ids)
    starts = g.starts
    # Fast path: when every dependency sorts before its node, sorting is the answer (and proves
    # there is no cycle).  Index order is id order, so (start, index) is (start, id).
    if all(starts[j] < starts[i] or (starts[j] == starts[i] and j < i)
           for i, d in enumerate(deps) for j in d):
        return sorted(range(n), key=starts.__getitem__)
    indeg = [len(d) for d in deps]
    succ: list[list[int] | None] = [None] * n
    for i, d in enumerate(deps):
        for j in d:
            s = succ[j]
            if s is None:
                succ[j] = [i]
            else:
                s.append(i)
    heap = [(starts[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    push, pop, append = heapq.heappush, heapq.heappop, order.append
    while heap:
        _, i = pop(heap)
        append(i)
        s = succ[i]
        if s is not None:
            for j in s:
                indeg[j] -= 1
                if indeg[j] == 0:
                    push(heap, (starts[j], j))
    if len(order) != n:
        raise ReplayError(_cycle_message(g, deps, indeg), g.path)
    return order


def _cycle_message(g: RankGraph, deps: list[tuple[int, ...]], indeg: list[int]) -> str:
    """Walk 'waits for' edges among never-ready nodes until one repeats: that is a cycle."""
    stuck = [i for i, k in enumerate(indeg) if k > 0]
    v = stuck[0]
    pos: dict[int, int] = {}
    path: list[int] = []
    while v not in pos:
        pos[v] = len(path)
        path.append(v)
        v = next(j for j in deps[v] if indeg[j] > 0)
    cycle = path[pos[v]:] + [v]
    chain = " -> ".join(str(g.ids[i]) for i in cycle)
    return (f"dependency cycle: node {chain} (each waits for the next); "
            f"{len(stuck)} node(s) can never start: {_fmt_ids([g.ids[i] for i in stuck])}")


def _lane_plan(g: RankGraph, order: list[int], off: int, use_gaps: bool, lane_next: list[int],
               rem: list[int], gap: list[float], ready_at: list[float], release: dict[int, float]
               ) -> list[float]:
    """Chain each lane in lane order; on CPU lanes (with gaps) compute segments and gaps.

    Returns the replayed duration of every node of the rank.  A non-CPU node on a
    host thread (a gloo record) overlapping the ops after it is not a parent: the
    thread went on while it ran.  It keeps its whole duration and releases its
    thread after its segment (``release``: global index -> segment).
    """
    rd = list(g.durations)
    lanes, starts, is_cpu = g.lanes, g.starts, g.is_cpu
    timed = g.timed
    seqs: dict = {}
    for i in order:
        lane = lanes[i]
        if lane is not None:
            seqs.setdefault(lane, []).append(i)
    for lane, seq in seqs.items():
        for a, b in zip(seq, seq[1:]):
            lane_next[off + a] = off + b
            rem[off + b] += 1
        if lane[0] != "cpu":
            continue
        # A parent op runs its leading segment (up to the next op of the thread, its first child);
        # the rest of its exclusive time shows up as gaps between and after its children.
        seg = {}
        if timed:
            for a, b in zip(seq, seq[1:]):
                sa, sb = starts[a], starts[b]
                if sb >= sa and sb - sa < rd[a]:
                    if is_cpu[a]:
                        if use_gaps:  # without gaps a parent runs its whole exclusive time at once
                            rd[a] = sb - sa
                    else:
                        seg[a] = release[off + a] = sb - sa
        if not use_gaps:
            continue
        cur = 0.0
        for k, i in enumerate(seq):
            s = starts[i]
            if s > cur:
                if k == 0:
                    ready_at[off + i] += s - cur
                else:
                    gap[off + i] = s - cur
                cur = s
            cur += seg.get(i, rd[i])
    return rd


@dataclass(slots=True)
class _Plan:
    """How the lanes of one rank run (local indices); see :func:`_pieces_plan`."""

    rd: list[float]                     # replayed duration (a CPU parent: its lead)
    rd_rec: list[float]                 # the same without the what-if (what the recording shows)
    gap: list[float]                    # delay after the lane predecessor frees the lane
    first: dict[int, float]             # a lane's first node: its offset from the window start
    release: dict[int, float]           # node -> time after its start at which its lane is free
    after: dict[int, list[tuple[int, float]]]   # node -> [(u, delay)]: starts >= end(u) + delay
    lane_prev: list[int]                # lane predecessor (-1: first of its lane, or no lane)
    close: dict[int, tuple[int, float]] = field(default_factory=dict)   # parent -> (last descendant, tails)
    transfer: dict[int, tuple[int, float]] = field(default_factory=dict)   # record -> (child after, piece)


def _pieces_plan(g: RankGraph, order: Sequence[int], use_gaps: bool) -> _Plan:
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
    streams have no gaps.
    """
    n = len(g.ids)
    durs, lanes, types = g.durations, g.lanes, g.types
    ex = g.extra
    depth = ex.get("thread_depth", {})
    wb = ex.get("work_before_us", {})
    tail = ex.get("tail_us", {})
    idle = ex.get("idle_before_us", {})
    wait_on = ex.get("wait_on", {})
    wait_post = ex.get("wait_post_us", {})
    frees = ex.get("frees_thread", {})
    factor = g.factor
    delay = g.delay
    rd_rec = [0.0 if t == METADATA_NODE else float(d) for d, t in zip(durs, types)]
    lane_prev = [-1] * n
    gap = [0.0] * n
    first: dict[int, float] = {}
    release: dict[int, float] = {}
    after: dict[int, list[tuple[int, float]]] = {}
    seqs: dict[Any, list[int]] = {}
    for i in order:
        lane = lanes[i]
        if lane is not None:
            seqs.setdefault(lane, []).append(i)
    parent = [-1] * n
    cwb: dict[int, float] = {}          # a node's children's work_before, summed
    closed_before: dict[int, list[int]] = {}   # node -> the nodes that closed just before it, innermost first
    timed_lanes = []
    record_kids: list[int] = []         # children of a communication record on its thread
    for lane, seq in seqs.items():
        for a, b in zip(seq, seq[1:]):
            lane_prev[b] = a
        if lane[0] != "cpu" and not any(map(depth.__contains__, seq)) \
                and not any(map(idle.__contains__, seq)):
            continue      # a GPU stream (a host record's own lane, e.g. a gloo worker, has the timing)
        timed_lanes.append(seq)
        stack: list[int] = []
        depths: list[int] = []
        dget, wget = depth.get, wb.get
        for j in seq:
            d = dget(j, 0)
            if depths and depths[-1] >= d:
                closed = closed_before[j] = []
                while depths and depths[-1] >= d:
                    closed.append(stack.pop())
                    depths.pop()
            if stack:
                p = stack[-1]
                parent[j] = p
                w = wget(j)
                cwb[p] = cwb.get(p, 0.0) + (w or 0.0)
                if types[p] in _COMM_NODE_TYPES and w:
                    record_kids.append(j)
            stack.append(j)
            depths.append(d)
        if stack:
            closed_before.setdefault(-1 - len(timed_lanes), []).extend(reversed(stack))
    # a parent occupies its lane for its lead; its pieces scale with it
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
    for i in frees:
        if i not in cwb:
            release[i] = 0.0     # a record that does not hold its thread (an isend)
    if factor is not None:
        for i in range(n):
            if i not in cwb:
                rd[i] *= factor[i]
    if delay is not None:
        for i in range(n):
            if delay[i]:
                rd[i] += delay[i]
    close: dict[int, tuple[int, float]] = {}   # parent -> (its last descendant, tails up to its own)
    cget, tget, wget, iget, sget = closed_before.get, tail.get, wb.get, idle.get, scale.get
    for li, seq in enumerate(timed_lanes):
        for j in seq:
            t = 0.0
            closed = cget(j)
            if closed:
                last = lane_prev[j]
                for o in closed:
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
        if gap[seq[0]]:
            first[seq[0]] = gap[seq[0]]
            gap[seq[0]] = 0.0
        t = 0.0
        for o in closed_before.get(-2 - li, ()):       # still open after the lane's last node
            tl = tail.get(o)
            if tl:
                t += tl * scale.get(o, 1.0)
            if o in cwb:
                close[o] = (seq[-1], t)
    if wait_on:
        index = {nid: i for i, nid in enumerate(g.ids)} if len(wait_on) > 8 else None
        for j, uid in wait_on.items():
            u = index.get(uid) if index is not None else _find_id(g.ids, uid)
            if u is None or uid not in g.deps[j]:
                continue
            post = float(wait_post.get(j, 0)) + (idle.get(j, 0) if use_gaps else 0.0)
            c = close.get(u)
            if c is not None and c[0] >= 0 and c[0] not in release:
                u, post = c[0], post + c[1]
            after.setdefault(j, []).append((u, post))
    # a communication record with children on its thread (gloo allocating, transferring, copying out):
    # its longest piece of own time, before one of its children, is the transfer (a whole-job replay
    # couples that piece with the peers, see simulate)
    transfer: dict[int, tuple[int, float]] = {}
    for j in record_kids:
        p = parent[j]
        if not g.is_cpu[p]:
            w = wb.get(j, 0) * scale.get(p, 1.0)
            if w > 0 and (p not in transfer or w > transfer[p][1]):
                transfer[p] = (j, w)
    return _Plan(rd=rd, rd_rec=rd_rec, gap=gap, first=first, release=release, after=after,
                 lane_prev=lane_prev, close=close, transfer=transfer)


def _find_id(ids: Sequence[int], nid: int) -> int | None:
    from bisect import bisect_left

    k = bisect_left(ids, nid)
    return k if k < len(ids) and ids[k] == nid else None


def _finish_waits(g: RankGraph, deps: list[tuple[int, ...]], rd: list[float]
                  ) -> dict[int, list[tuple[int, float | None, float]]]:
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
    ``u`` is a CPU op with children (the ``ctrl_deps`` target of a CPU op) its
    recorded end is not known (``duration_micros`` of a CPU op is exclusive), so
    those stay start dependencies.  In a whole-job replay a coupled node's transfer
    ends at the common end, or later when such a recorded wait says so.
    """
    out: dict[int, list[tuple[int, float | None, float]]] = {}
    if not g.timed:
        return out
    lanes, starts, durs, is_cpu, ids = g.lanes, g.starts, g.durations, g.is_cpu, g.ids
    parents = g.parents
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
            lj = lanes[j]
            if lj is None or (is_cpu[j] and (lj == lane or ids[j] in parents)):
                continue
            f = starts[j] + durs[j]
            if s < f:
                if pairs is None:
                    pairs = []
                tail = e - f if f <= e + 1.0 else None
                pairs.append((j, None if tail is None else max(0.0, tail), max(0.0, s - starts[j])))
        if pairs:
            out[i] = pairs
    return out

def _resource_kind(ntype: int, is_cpu: bool) -> int:
    if is_cpu:
        return _CPU
    if ntype in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
        return _GPU_COMM
    return _GPU_COMP


class _Coupling:
    """Groups of nodes (one per participating rank) that start and end together."""

    __slots__ = ("members", "dur", "label", "eager", "member_dur")

    def __init__(self) -> None:
        self.members: list[list[int]] = []
        self.dur: list[float] = []
        self.member_dur: list[list[float]] | None = None   # collective="net": one duration per member
        self.label: list[str] = []
        self.eager: list[int] = []   # the member that does not wait (a send), or -1


def _build_coupling(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: Sequence[int],
                    orders: Sequence[list[int]], durations: list[float], unknown_group: str = "error"
                    ) -> tuple[_Coupling, list[int]]:
    """Match collectives and send/recv pairs across ranks (:func:`chakra.job.match.match_job`: by recorded
    sequence number, else by order with trimming at the window edges); return groups and node -> group.

    A communication node with no counterpart in another rank's trace (its window started later or ended
    earlier) runs alone for its recorded duration, with a warning saying what was left out."""
    total = offsets[-1]
    couple = [-1] * total
    job: list[RankComms] = []
    for r, g, off, order in zip(ranks, graphs, offsets, orders):
        comms = []
        base = g.measured_start_us
        ctypes, csizes = g.extra.get("comm_type", {}), g.extra.get("comm_size", {})
        for i in order:
            info = g.comm.get(i)
            if info is None:
                continue
            ntype = g.types[i]
            if ntype == COMM_SEND_NODE and info.dst is None:
                raise ReplayError(f"send node {g.ids[i]} has no comm_dst", g.path)
            if ntype == COMM_RECV_NODE and info.src is None:
                raise ReplayError(f"recv node {g.ids[i]} has no comm_src", g.path)
            end = None if base is None or not g.starts[i] else base + g.starts[i] + g.durations[i]
            ctype = ctypes.get(i)
            comms.append(Comm(pos=off + i, node_id=g.ids[i], kind=ntype,
                              comm_type=int(ctype) if isinstance(ctype, (int, float)) else None,
                              size=int(csizes.get(i) or 0), pg=info.pg_name,
                              peer=info.dst if ntype == COMM_SEND_NODE else info.src, tag=info.tag,
                              seq=info.seq, end=end, name=g.names[i]))
        job.append(RankComms(r, comms, dict(g.process_groups), g.path))
    try:
        match = match_job(job, unknown_group=unknown_group)
    except JobMatchError as exc:
        raise ReplayError(exc.message, exc.path) from None
    for note in match.notes:
        if "outside the window" in note or "kept the" in note:
            log.warning("%s", note)
    left = match.left_out_by_rank()
    for r, xs in sorted(left.items()):
        first = xs[0]
        log.warning("rank %d: %d communication node(s) replayed alone (no counterpart on a peer), "
                    "e.g. %s: %s", r, len(xs), first.comm.describe(), first.reason)
    c = _Coupling()
    for inst in match.instances:
        members = [m.pos for _, m in sorted(inst.members.items())]
        c.members.append(members)
        c.dur.append(min(durations[m] for m in members))
        c.label.append(inst.label)
        send = next((m.pos for m in inst.members.values() if m.kind == COMM_SEND_NODE), -1)
        c.eager.append(send)
    for gid, members in enumerate(c.members):
        for m in members:
            couple[m] = gid
    return c, couple


def _couple_transfers(c: _Coupling, group_of: list[int], transfers: dict[int, tuple[int, float]],
                      gap: list[float], rdur: list[float], after_transfer: dict[int, float]) -> None:
    """A coupled record with children on its thread couples its transfer piece, not its lead.

    The child ``k`` that follows the transfer stands in for the record in its group: it arrives when
    its thread reaches the transfer (its gap without the transfer piece), and, once every peer has
    arrived, runs the group's transfer time and then its own duration.  The record itself runs its
    lead like any other node.
    """
    for x, (k, w) in transfers.items():
        grp = group_of[x]
        if grp < 0:
            continue
        members = c.members[grp]
        members[members.index(x)] = k
        if c.eager[grp] == x:
            c.eager[grp] = k
        group_of[k] = grp
        group_of[x] = -1
        gap[k] = max(0.0, gap[k] - w)
        after_transfer[k] = rdur[k]


def _net_durations(c: _Coupling, graphs: Sequence[RankGraph], offsets: Sequence[int],
                   durations: list[float], base: Sequence[float]) -> None:
    """``collective="net"``: each participant lasts its own recorded duration minus its recorded wait.

    On the common clock the recorded arrivals are ``start_time_micros + base``; a
    participant that arrived ``w`` µs before the last one waited ``w`` µs inside its
    recording, so its transfer took ``duration - w`` (at least 0).  Ranks of a ring
    collective do not finish together; this keeps each one's recorded finish.
    """
    c.member_dur = []
    for members in c.members:
        arr = []
        for m in members:
            ri = _rank_of(offsets, m)
            arr.append(graphs[ri].starts[m - offsets[ri]] + base[ri])
        last = max(arr)
        c.member_dur.append([max(0.0, durations[m] - (last - a)) for m, a in zip(members, arr)])


def _rank_of(offsets: Sequence[int], gi: int) -> int:
    lo, hi = 0, len(offsets) - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if offsets[mid] <= gi:
            lo = mid
        else:
            hi = mid - 1
    return lo


def simulate(graphs: Sequence[RankGraph], *, ranks: Sequence[int] | None = None, mode: str = "lanes",
             gaps: bool = True, missing: str = "error", couple: bool = False,
             base: Sequence[float] | None = None, collective: str = "net", unknown_group: str = "error"
             ) -> SimOutput:
    """Replay ``graphs`` (one per rank) together; ``couple`` ties collectives/send/recv across ranks.

    ``base`` (lanes mode) is the time at which each rank's replay begins on the common
    clock; results stay on that clock.  ``collective`` is the transfer time of a coupled
    group: ``"net"`` (each participant's recording net of its recorded wait, see
    :func:`_net_durations`) or ``"min"`` (shortest recording, every participant ends together).
    """
    if mode not in MODES:
        raise ChakraError(f"unknown replay mode {mode!r} (expected one of {', '.join(MODES)})")
    if collective not in COLLECTIVE_DURATIONS:
        raise ChakraError(f"unknown collective duration {collective!r} (expected min or net)")
    if missing not in ("error", "ignore"):
        raise ChakraError(f"missing must be 'error' or 'ignore', not {missing!r}")
    if ranks is None:
        ranks = list(range(len(graphs)))
    lanes_mode = mode == "lanes"
    use_gaps = gaps and lanes_mode
    if lanes_mode and not couple and len(graphs) == 1 and not (base is not None and any(base)) \
            and _exact(graphs[0]):
        return _simulate_one(graphs[0], use_gaps, missing)
    # (segments apply with or without gaps: they are how nested CPU ops occupy a thread)

    offsets = [0]
    for g in graphs:
        offsets.append(offsets[-1] + len(g.ids))
    total = offsets[-1]

    dur: list[float] = []
    is_meta: list[bool] = []
    ready_at = [0.0] * total
    rem = [0] * total
    succ: list[list[int] | None] = [None] * total
    lane_next = [-1] * total
    gap = [0.0] * total
    res = [-1] * total
    orders: list[list[int]] = []

    rdur: list[float] = []          # replayed duration (lanes mode, CPU ops: the leading segment)
    ff_rem = [0] * total            # unfinished finish-to-finish dependencies
    ff_succ: dict[int, list[tuple[int, float | None, float]]] = {}  # u -> [(v, tail after u's end, offset)]
    ff_min: dict[int, float] = {}   # v -> shortest tail: v's own time when nothing is waited for
    release: dict[int, float] = {}  # node -> time after its start at which its lane is free again
    dsucc: dict[int, list[tuple[int, float]]] = {}  # u -> [(v, delay)]: v starts >= end(u) + delay
    closes: dict[int, tuple[int, float]] = {}       # parent -> (its last descendant, the tails after it)
    transfers: dict[int, tuple[int, float]] = {}    # coupled record -> (child after its transfer, piece)
    if base is not None and lanes_mode:
        for ri, b in enumerate(base):
            if b:
                ready_at[offsets[ri]:offsets[ri + 1]] = [float(b)] * (offsets[ri + 1] - offsets[ri])
    for ri, g in enumerate(graphs):
        off = offsets[ri]
        deps = _resolve_deps(g, missing)
        order = _priority_topo_order(g, deps)
        orders.append(order)
        scaled = _scaled_durations(g)
        dur.extend(scaled)
        is_meta.extend(t == METADATA_NODE for t in g.types)
        if lanes_mode:
            if g.thread_timing:
                plan = _pieces_plan(g, order, use_gaps)
                for b, a in enumerate(plan.lane_prev):
                    if a >= 0:
                        lane_next[off + a] = off + b
                        rem[off + b] += 1
                for i, v in enumerate(plan.gap):
                    if v:
                        gap[off + i] = v
                for i, v in plan.first.items():
                    ready_at[off + i] += v
                for i, v in plan.release.items():
                    release[off + i] = v
                for j, pairs in plan.after.items():
                    rem[off + j] += len(pairs)
                    for u, dl in pairs:
                        dsucc.setdefault(off + u, []).append((off + j, dl))
                rd, rd_rec = plan.rd, plan.rd_rec
                for x, (last, t) in plan.close.items():
                    closes[off + x] = (off + last, t)
                if couple:
                    for x, (c, w) in plan.transfer.items():
                        transfers[off + x] = (off + c, w)
            else:
                rd = _lane_plan(g, order, off, use_gaps, lane_next, rem, gap, ready_at, release)
                rd_rec = rd
                if g.factor is not None or g.delay is not None:
                    rd = [x * y for x, y in zip(rd, g.factor)] if g.factor is not None else list(rd)
                    if g.delay is not None:
                        rd = [x + y for x, y in zip(rd, g.delay)]
            waits = _finish_waits(g, deps, rd_rec)
            f_of = g.factor
            d_of = g.delay
            for i, pairs in waits.items():
                skip = {j for j, _, _ in pairs}
                deps[i] = tuple(j for j in deps[i] if j not in skip)
                gi = off + i
                tails = [t for _, t, _ in pairs if t is not None]
                rem[gi] += len(pairs)
                ff_rem[gi] = len(tails)
                if tails:   # the node's own time after what it waited for: a what-if scales it too
                    ff_min[gi] = min(tails) * (f_of[i] if f_of is not None else 1.0) \
                        + (d_of[i] if d_of is not None else 0.0)
                for j, tail, offset in pairs:
                    if tail is not None and f_of is not None:
                        tail = tail * f_of[i] + (d_of[i] if d_of is not None else 0.0)
                    ff_succ.setdefault(off + j, []).append((gi, tail, offset))
            rdur.extend(rd)
            if rd is not scaled:        # a coupled node lasts as long as on its own
                dur[off:off + len(rd)] = rd
        else:
            rdur.extend(scaled)
            first_res = ri * 3
            types, cpu = g.types, g.is_cpu
            for i in range(len(g.ids)):
                if types[i] != METADATA_NODE:
                    res[off + i] = first_res + _resource_kind(types[i], cpu[i])
        for i, d in enumerate(deps):
            if d:
                gi = off + i
                rem[gi] += len(d)
                for j in d:
                    s = succ[off + j]
                    if s is None:
                        succ[off + j] = [gi]
                    else:
                        s.append(gi)

    for x, (_c, w) in transfers.items():
        dur[x] = w                       # what the peers share of such a record: its transfer
    coupling, group_of = (_build_coupling(graphs, ranks, offsets, orders, dur, unknown_group) if couple
                          else (_Coupling(), None))
    if couple and collective == "net":
        _net_durations(coupling, graphs, offsets, dur,
                       base if base is not None and lanes_mode else [0.0] * len(graphs))
    after_transfer: dict[int, float] = {}    # coupled child -> its own time, after the transfer
    if transfers and group_of is not None:
        _couple_transfers(coupling, group_of, transfers, gap, rdur, after_transfer)
    n_groups = len(coupling.members)
    arrived = [0] * n_groups
    latest = [0.0] * n_groups
    gsize = [len(m) for m in coupling.members]
    comm_start: dict[int, float] = {}
    arrived_nodes: set[int] = set()
    ff_cand: dict[int, float] = {}     # v -> latest (end of u + tail) seen so far
    ff_started: dict[int, float] = {}  # v started, waiting for finish-to-finish deps

    start = [0.0] * total
    end = [-1.0] * total
    heap: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    done = 0

    def arrive(gi: int, t: float) -> None:
        grp = group_of[gi]  # type: ignore[index]
        arrived_nodes.add(gi)
        arrived[grp] += 1
        if t > latest[grp]:
            latest[grp] = t
        eager = coupling.eager[grp]
        if gi == eager:                       # a send does not wait for its receiver
            comm_start[gi] = t
            schedule_end(gi, t + ff_min.get(gi, rdur[gi]))
        if arrived[grp] == gsize[grp]:
            cs = latest[grp]
            e = cs + coupling.dur[grp]
            per_member = coupling.member_dur[grp] if coupling.member_dur is not None else None
            for k, m in enumerate(coupling.members[grp]):
                if m != eager:
                    comm_start[m] = cs
                    em = e if per_member is None else cs + per_member[k]
                    schedule_end(m, em + after_transfer[m] if after_transfer and m in after_transfer else em)

    def schedule_end(gi: int, e: float) -> None:
        """End at ``e``, or later if a dependency it was recorded waiting for ends later."""
        if gi in ff_min:
            if ff_rem[gi]:
                ff_started[gi] = e - ff_min[gi]   # finished by the last finish-wait dependency
                return
            if ff_cand[gi] > e:
                e = ff_cand[gi]
        push(heap, (e, gi))

    if lanes_mode:

        pending: list[int] = []            # nodes whose start constraints are all met

        def start_ready() -> None:
            while pending:
                gi = pending.pop()
                t = ready_at[gi]
                start[gi] = t
                rel = release.get(gi)
                if rel is not None:            # the thread goes on while this record runs
                    j = lane_next[gi]
                    tj = t + rel + gap[j]
                    if ready_at[j] < tj:
                        ready_at[j] = tj
                    rem[j] -= 1
                    if rem[j] == 0:
                        pending.append(j)
                fs = ff_succ.get(gi)
                if fs is not None:             # start-to-start half of finish waits
                    for v, _tail, offset in fs:
                        tv = t + offset
                        if ready_at[v] < tv:
                            ready_at[v] = tv
                        rem[v] -= 1
                        if rem[v] == 0:
                            pending.append(v)
                if is_meta[gi]:
                    push(heap, (t, gi))
                elif group_of is not None and group_of[gi] >= 0:
                    arrive(gi, t)
                else:
                    schedule_end(gi, t + ff_min.get(gi, rdur[gi]))

        pending.extend(gi for gi in range(total - 1, -1, -1) if rem[gi] == 0)
        start_ready()
        while heap:
            t, gi = pop(heap)
            end[gi] = t
            done += 1
            s = succ[gi]
            if s is not None:
                for j in s:
                    if ready_at[j] < t:
                        ready_at[j] = t
                    rem[j] -= 1
                    if rem[j] == 0:
                        pending.append(j)
            ds = dsucc.get(gi) if dsucc else None
            if ds is not None:                 # waits with a recorded latency; closed records
                for j, dl in ds:
                    tj = t + dl
                    if ready_at[j] < tj:
                        ready_at[j] = tj
                    rem[j] -= 1
                    if rem[j] == 0:
                        pending.append(j)
            j = lane_next[gi]
            if j >= 0 and gi not in release:
                tj = t + gap[j]
                if ready_at[j] < tj:
                    ready_at[j] = tj
                rem[j] -= 1
                if rem[j] == 0:
                    pending.append(j)
            fs = ff_succ.get(gi)
            if fs is not None:                 # finish-to-finish half
                for v, tail, _offset in fs:
                    if tail is None:
                        continue
                    c = t + tail
                    if ff_cand.get(v, -1.0) < c:
                        ff_cand[v] = c
                    ff_rem[v] -= 1
                    if ff_rem[v] == 0 and v in ff_started:
                        push(heap, (max(ff_started.pop(v) + ff_min[v], ff_cand[v]), v))
            if pending:
                start_ready()
    else:
        n_res = 3 * len(graphs)
        queues: list[list[int]] = [[] for _ in range(n_res)]
        busy = [False] * n_res
        dirty: set[int] = set()

        def ready_a(gi: int, t: float) -> None:
            if is_meta[gi]:
                start[gi] = t
                push(heap, (t, gi))
            else:
                r = res[gi]
                push(queues[r], gi)
                dirty.add(r)

        def dispatch(t: float) -> None:
            for r in sorted(dirty):
                if not busy[r] and queues[r]:
                    gi = pop(queues[r])
                    busy[r] = True
                    start[gi] = t
                    if group_of is not None and group_of[gi] >= 0:
                        arrive(gi, t)
                    else:
                        push(heap, (t + rdur[gi], gi))
            dirty.clear()

        for gi in range(total):
            if rem[gi] == 0:
                ready_a(gi, 0.0)
        dispatch(0.0)
        while heap:
            t = heap[0][0]
            while heap and heap[0][0] == t:
                _, gi = pop(heap)
                end[gi] = t
                done += 1
                r = res[gi]
                if r >= 0:
                    busy[r] = False
                    dirty.add(r)
                s = succ[gi]
                if s is not None:
                    for j in s:
                        rem[j] -= 1
                        if rem[j] == 0:
                            ready_a(j, t)
            dispatch(t)

    if done != total:
        raise ReplayError(_stall_message(graphs, ranks, offsets, coupling, arrived, arrived_nodes,
                                         total - done))
    bases = [float(b) for b in base] if base is not None and lanes_mode else [0.0] * len(graphs)
    close_end = {x: end[last] + t for x, (last, t) in closes.items()}
    return SimOutput(starts=start, ends=end, offsets=offsets, comm_start=comm_start, lane_order=orders,
                     base=bases, groups=n_groups, closes=close_end)


def _scaled_durations(g: RankGraph) -> list[float]:
    """Recorded durations under the what-if (``g.factor``, ``g.delay``); METADATA nodes unchanged."""
    durs = g.durations
    if g.factor is None and g.delay is None:
        return durs
    out = [d * f for d, f in zip(durs, g.factor)] if g.factor is not None else list(durs)
    if g.delay is not None:
        out = [d + x for d, x in zip(out, g.delay)]
    for i, t in enumerate(g.types):
        if t == METADATA_NODE:
            out[i] = durs[i]
    return out


def _exact(g: RankGraph) -> bool:
    """Whether every time of a one-rank replay is an exact integer: recorded starts and durations are
    whole µs (what a protobuf ET holds) small enough that no sum of them ever rounds.  Then the result
    does not depend on the order in which the constraints are applied (see :func:`_simulate_one`)."""
    starts, durs = g.starts, g.durations
    if g.factor is not None or g.delay is not None:
        return False        # a what-if: fractional times, the general path
    if not starts:
        return True
    is_int = float.is_integer
    try:
        if not (all(map(is_int, starts)) and all(map(is_int, durs))):
            return False
    except TypeError:       # not floats (a hand-made graph): take the general path
        return False
    if METADATA_NODE in g.types and any(compress(g.lanes, map(operator.eq, g.types, repeat(METADATA_NODE)))):
        return False        # a METADATA node given a lane (by hand): the general path
    lo = min(min(starts), min(durs))
    s_max, d_max = max(starts), max(durs)
    # a node's start or end exceeds a predecessor's end by at most 3 recorded starts + 2 durations
    return lo >= 0 and (len(starts) + 1) * (3 * s_max + 2 * d_max) + s_max < 2.0 ** 52


def _simulate_one(g: RankGraph, use_gaps: bool, missing: str) -> SimOutput:
    """Lanes mode, one rank on its own, exact integer times (:func:`_exact`): the same result as the
    event loop of :func:`simulate` in one pass over the lane order.

    Without coupling every constraint of a node points to a node earlier in the lane order (its
    dependencies, its lane predecessor, its finish-wait dependencies), and each is a ``max`` of sums of
    exact integers, so computing each node's start and end once, in that order, from its predecessors'
    gives the event loop's values, bit for bit: no heap, no successor lists.  The finish waits of
    :func:`_finish_waits` are recognised on the way.  The lane order is first taken to be the plain
    (recorded start, id) order; if a dependency turns out to come later in it, the general
    :func:`_priority_topo_order` decides (and reports a cycle) and the pass is made again.
    """
    n = len(g.ids)
    nodes = list(range(n))        # one int object per index, shared by every list below
    index = dict(zip(g.ids, nodes))
    get = index.get
    deps = list(map(tuple, map(map, repeat(get), g.deps)))
    del index, get
    if None in chain.from_iterable(deps):
        deps = _resolve_deps(g, missing)   # the message (or the warning and the pruned lists)
    order = _topo_order(g, deps, nodes)
    del nodes
    out = _one_pass(g, deps, order, use_gaps)
    assert out is not None
    start, end, closes = out
    return SimOutput(starts=start, ends=end, offsets=[0, n], comm_start={}, lane_order=[order],
                     base=[0.0], groups=0, closes=closes)


def _topo_order(g: RankGraph, deps: list[tuple[int, ...]], nodes: list[int]) -> list[int]:
    """:func:`_priority_topo_order`'s order (always the ready node of smallest (recorded start, id)),
    found by walking the nodes in (start, id) order: a node whose dependencies are all placed is
    placed; one that is not ready when its turn comes waits, and is placed as soon as its last
    dependency is (before any later node of the walk: it sorts before them; waiting nodes that get
    ready together go in (start, id) order).  Usually only a few nodes ever wait."""
    n = len(nodes)
    starts = g.starts
    by_key = sorted(nodes, key=starts.__getitem__)
    done = bytearray(n)
    is_done = done.__getitem__
    waiting: list[list[int] | None] = [None] * n
    rem: dict[int, int] = {}
    heap: list[tuple[float, int]] = []
    order: list[int] = []
    append = order.append
    push, pop = heapq.heappush, heapq.heappop
    for c in by_key:
        d = deps[c]
        if not all(map(is_done, d)):
            k = 0
            for j in d:
                if not done[j]:
                    k += 1
                    w = waiting[j]
                    if w is None:
                        waiting[j] = [c]
                    else:
                        w.append(c)
            rem[c] = k
            continue
        x = c
        while True:
            done[x] = 1
            append(x)
            w = waiting[x]
            if w is not None:
                waiting[x] = None
                for v in w:
                    r = rem[v] - 1
                    rem[v] = r
                    if not r:
                        push(heap, (starts[v], v))
            if not heap:
                break
            x = pop(heap)[1]
    if len(order) != n:
        return _priority_topo_order(g, deps)    # raises the cycle error
    return order


def _one_pass(g: RankGraph, deps: list[tuple[int, ...]], order: list[int], use_gaps: bool
              ) -> tuple[list[float], list[float], dict[int, float]] | None:
    """Start and end of every node, computed in ``order``, and when each parent's tail ends; None if a
    dependency comes later in it."""
    n = len(order)
    lanes, starts, is_cpu, durs, ids = g.lanes, g.starts, g.is_cpu, g.durations, g.ids
    parents = g.parents
    timed = g.timed
    after: dict[int, list[tuple[int, float]]] = {}
    close: dict[int, tuple[int, float]] = {}
    if g.thread_timing:
        plan = _pieces_plan(g, order, use_gaps)
        close = plan.close
        rd, rd_rec, lane_prev, gap, release, after = (plan.rd, plan.rd_rec, plan.lane_prev, plan.gap,
                                                      plan.release, plan.after)
        ready = [0.0] * n
        for i, v in plan.first.items():
            ready[i] = v
        seqs: dict = {}
    else:
        rd = list(durs)
        # each lane's nodes in lane order: seqs[lanes[i]].append(i) for i in order, in C
        by_order = list(map(lanes.__getitem__, order))
        seqs = {lane: [] for lane in dict.fromkeys(by_order)}
        any(map(list.append, map(seqs.__getitem__, by_order), order))
        del by_order
        seqs.pop(None, None)
        lane_prev = [-1] * n
        gap = [0.0] * n
        ready = [0.0] * n
        release = {}
    for lane, seq in seqs.items():
        if lane[0] != "cpu" or not (timed or use_gaps):
            any(map(lane_prev.__setitem__, islice(seq, 1, None), seq))   # lane_prev[b] = a, in C
            continue
        # _lane_plan: segments (a parent runs up to its first child) and gaps, in one walk
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
                        if use_gaps:
                            rd[a] = adv = sb - sa
                    else:
                        release[a] = adv = sb - sa
                if use_gaps:
                    cur += adv
                    if sb > cur:
                        gap[b] = sb - cur
                        cur = sb
            elif use_gaps and sb > cur:
                ready[b] += sb - cur
                cur = sb
            a, sa = b, sb
    if not g.thread_timing:
        rd_rec = rd
    start = [0.0] * n
    end = [-1.0] * n
    if METADATA_NODE in g.types:          # a METADATA node ends when it starts
        for i in compress(count(), map(operator.eq, g.types, repeat(METADATA_NODE))):
            rd[i] = 0.0
    timed_waits = timed
    rget = release.get if release else {}.get
    for i in order:
        t = ready[i]
        d = deps[i]
        lane = lanes[i]
        m = None
        if d:
            if lane is None or not timed_waits:
                for j in d:
                    e = end[j]
                    if e > t:
                        t = e
                    elif e < 0.0:
                        return None
            else:
                # _finish_waits: a dependency on another lane that the recording shows this node
                # already running while it finished bounds this node's end, not its start
                s = starts[i]
                e_rec = s + rd_rec[i]
                cand = -1.0
                for j in d:
                    e = end[j]
                    if e < 0.0:
                        return None
                    sj = starts[j]
                    f = sj + durs[j]
                    if s < f and (lj := lanes[j]) is not None \
                            and not (is_cpu[j] and (lj == lane or ids[j] in parents)):
                        c = start[j] + (s - sj if s > sj else 0.0)
                        if c > t:
                            t = c
                        if f <= e_rec + 1.0:
                            tail = e_rec - f if e_rec > f else 0.0
                            c = e + tail
                            if cand < c:
                                cand = c
                            if m is None or tail < m:
                                m = tail
                        continue
                    if e > t:
                        t = e
        p = lane_prev[i]
        if p >= 0:
            rel = rget(p)
            c = end[p] + gap[i] if rel is None else start[p] + rel + gap[i]
            if c > t:
                t = c
        if after:
            for u, dl in after.get(i, ()):
                e = end[u]
                if e < 0.0:
                    return None
                if e + dl > t:
                    t = e + dl
        start[i] = t
        if m is None:
            end[i] = t + rd[i]
        else:
            e = t + m
            end[i] = cand if cand > e else e
    return start, end, {x: end[last] + t for x, (last, t) in close.items()}


def _stall_message(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: Sequence[int],
                   coupling: _Coupling, arrived: list[int], arrived_nodes: set[int], n_stuck: int) -> str:
    """Explain a whole-job deadlock: which coupled groups are waiting for whom."""
    parts = [f"replay stalled: {n_stuck} node(s) can never start (the ranks wait for each other)"]
    shown = 0
    for grp, members in enumerate(coupling.members):
        if arrived[grp] == 0 or arrived[grp] == len(members) or shown >= 3:
            continue
        shown += 1
        waiting, missing = [], []
        for m in members:
            ri = _rank_of(offsets, m)
            desc = f"rank {ranks[ri]} node {graphs[ri].ids[m - offsets[ri]]}"
            (waiting if m in arrived_nodes else missing).append(desc)
        parts.append(f"{coupling.label[grp]}: waiting: {', '.join(waiting)}; "
                     f"never reached by: {', '.join(missing)}")
    if shown == 0:
        parts.append("no collective is partially reached; check the ranks' collective orders")
    return "; ".join(parts)

