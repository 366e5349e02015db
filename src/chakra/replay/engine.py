"""The replay: when each node of one rank or a whole job starts and ends, deterministic.

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
    the segments and gaps above (:func:`chakra.replay.plan._pieces_plan`): a node waits for its
    lane predecessor, the pieces in between (each times its owner's what-if factor) and its idle time (dropped
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
    participant arrives.  With ``collective="net"`` each participant then lasts its
    own recording minus the time it was recorded waiting for the last arrival: ring
    collectives do not end together on all ranks, and the threads that wait for them
    (``wait_on``) need each rank's own end; this needs the clock alignment below to be
    meaningful.  ``collective="min"`` instead gives every participant the *shortest
    recorded duration among the participants* (every recorded duration is
    communication plus waiting for the peers, and the participant that arrived last
    waited least, so the minimum is the best estimate of the communication alone) and
    ends them together.  ``replay_job``'s default (``"auto"``,
    :func:`chakra.replay.api.collective_rule`) is ``net`` when every rank's file records
    its waits (thread timing) and ``min`` when one does not (another producer's file:
    ``net`` would count the recorded wait again).  Every participant's node
    spans from its own arrival to its end (its wait is kept separately).  A record
    with children on its thread (a gloo collective allocating, transferring and
    copying out on its worker thread) couples its longest piece of own time, the
    transfer, instead of its lead (see :func:`_couple_transfers`).
    COMM_SEND / COMM_RECV are matched per (src, dst, tag) channel, in order.  A
    send is eager: it never waits for its receiver and takes its recorded duration
    (blocking both sides would deadlock the common "everyone sends, then everyone
    receives" exchange that isend/irecv make legal).  A recv waits for its send to
    start, then lasts the shorter of the two recorded durations.  In lanes mode a
    send starts, for its receiver, when it was posted: a record that starts inside
    the op that issued it (gloo's ``gloo:send`` in ``c10d::send``) was posted at
    that op's start (:func:`chakra.replay.coupling.post_lead`).

Clock alignment (whole job, lanes mode)
    Each rank's recorded times count from its own measured window start.  Ranks of
    one job rarely enter the profiled step together (in the corpus their steps end
    within ~1 ms of each other but start up to 7.5 ms apart: the early ranks wait for
    the late ones inside the step).  With ``align=True`` (default) a rank whose window
    started later begins its replay later by the difference of the recorded
    ``measured_start_us`` (one clock per host: Kineto timestamps), so collectives meet
    as they did; each rank's times are then reported from its own window start.

Ties: in lanes mode a node's times do not depend on the order nodes are placed in; in astrasim
events at equal times are processed in (rank, node id) order and "lowest id first" fixes the result.

How it runs
    Per rank, the dependencies are resolved to indices and put in lane order
    (:func:`_topo_order`); :func:`chakra.replay.plan.rank_plan` turns the rules above into
    data (lane predecessors, gaps, releases, waits, finish waits, the what-if).  In lanes mode
    :func:`chakra.replay.lanes.run_lanes` reads those plans: every rule is a bound on a node's start
    or end by other nodes' times, so each node is placed once, each rank walked in lane order, as
    soon as the nodes its bounds name are (a whole job's coupled groups included).  The ASTRA-sim
    rule, whose resources are taken in time order, is an event loop (:class:`_Job`), one heap of
    completion events.
"""


from __future__ import annotations

import heapq
import logging
from array import array
from collections.abc import Container, MutableSequence, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice, repeat
from typing import cast

from chakra.errors import ChakraError
from chakra.formats import ATTR_COMM_TYPE
from chakra.replay.coupling import (
    Coupling,
    build_coupling,
    couple_transfers,
    net_durations,
    post_leads,
    rank_of,
    stall_message,
)
from chakra.replay.graph import COMM_TYPES, DepsCSR, RankGraph, ReplayError
from chakra.replay.lanes import ByRank, as_lists, run_lanes
from chakra.replay.modes import (
    COLLECTIVE_DURATIONS,
    MISSING,
    MODES,
    CollectiveDuration,
    Missing,
    Mode,
    UnknownGroup,
)
from chakra.replay.plan import Plan, rank_plan
from chakra.replay.progress import Steps
from chakra.schema import BROADCAST, COMM_COLL_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, METADATA_NODE
from chakra.tunables import IDS_LISTED_MAX

log = logging.getLogger(__name__)

_CPU, _GPU_COMP, _GPU_COMM = 0, 1, 2

__all__ = ["COLLECTIVE_DURATIONS", "MODES", "ReplayError", "SimOutput", "simulate"]


@dataclass(slots=True)
class SimOutput(ByRank):
    """Per-node results: each rank's starts and ends by local index (position in its id order); the global
    index of a node, which ``comm_start``, ``members`` and ``closes`` use, is its rank's offset plus that."""

    rank_starts: list[list[float]]
    rank_ends: list[list[float]]
    offsets: list[int]
    comm_start: dict[int, float] = field(default_factory=dict)  # coupled node -> start of the transfer
    lane_order: list[array[int]] = field(default_factory=list)   # per rank: local indices in lane order
    groups: int = 0                                             # coupled groups (collectives + p2p pairs)
    members: list[list[int]] = field(default_factory=list)      # each coupled group's nodes (global indices)
    base: list[float] = field(default_factory=list)             # per rank: its time 0 on the common clock
    closes: dict[int, float] = field(default_factory=dict)      # parent node -> when its tail ends
    plans: list[Plan] = field(default_factory=list)             # lanes mode: each rank's plan (read only)


def _by_rank(values: list[float], offsets: Sequence[int]) -> list[list[float]]:
    if len(offsets) == 2:
        return [values]
    return [values[lo:hi] for lo, hi in zip(offsets, offsets[1:])]


def simulate(graphs: Sequence[RankGraph], *, ranks: Sequence[int] | None = None, mode: Mode = "lanes",
             gaps: bool = True, missing: Missing = "error", couple: bool = False,
             base: Sequence[float] | None = None, collective: CollectiveDuration = "net",
             unknown_group: UnknownGroup = "error", keep_plans: bool = False,
             steps: Steps | None = None) -> SimOutput:
    """Replay ``graphs`` (one per rank) together; ``couple`` ties collectives/send/recv across ranks.

    ``base`` (lanes mode) is the time at which each rank's replay begins on the common
    clock; results stay on that clock.  ``collective`` is the transfer time of a coupled
    group: ``"net"`` (each participant's recording net of its recorded wait, see
    :func:`chakra.replay.coupling.net_durations`) or ``"min"`` (shortest recording, every
    participant ends together).  ``keep_plans``: ``SimOutput.plans`` holds the ranks' plans (lanes mode;
    otherwise they are freed before the results are made).  ``steps``: where the phases are announced
    (:mod:`chakra.replay.progress`).
    """
    if mode not in MODES:
        raise ChakraError(f"unknown replay mode {mode!r} (expected one of {', '.join(MODES)})")
    if collective not in COLLECTIVE_DURATIONS:
        raise ChakraError(f"unknown collective duration {collective!r} (expected min or net)")
    if missing not in MISSING:
        raise ChakraError(f"missing must be 'error' or 'ignore', not {missing!r}")
    if ranks is None:
        ranks = list(range(len(graphs)))
    lanes_mode = mode == "lanes"
    bases = [float(b) for b in base] if base is not None and lanes_mode else [0.0] * len(graphs)
    offsets = [0]
    for g in graphs:
        offsets.append(offsets[-1] + len(g.ids))
    if steps is not None:
        steps.phase("dependencies and lane order", len(graphs))
    deps, orders = [], []
    for g in graphs:
        d = _resolve_deps(g, missing)
        deps.append(d)
        orders.append(_topo_order(g, d))
        if steps is not None:
            steps.advance()
    if not lanes_mode:
        if steps is not None:
            steps.phase(f"replaying {offsets[-1]:,} nodes (ASTRA-sim rules)")
        job = _Job.astrasim(graphs, ranks, offsets, deps, orders, couple, collective, unknown_group)
        job.run_astrasim()
        if job.done != offsets[-1]:
            raise ReplayError(stall_message(graphs, ranks, offsets, job.coupling, offsets[-1] - job.done))
        c = job.coupling
        return SimOutput(rank_starts=_by_rank(job.start, offsets), rank_ends=_by_rank(job.end, offsets),
                         offsets=offsets, comm_start=c.comm_start,
                         lane_order=orders, base=bases, groups=len(c.members), members=c.members)
    # (segments apply with or without gaps: they are how nested CPU ops occupy a thread)
    plans = _plans(graphs, deps, orders, gaps, steps)
    c = Coupling()
    if couple:
        if steps is not None:
            steps.phase("coupling the collectives")
        lane_gaps, c, group_of = _couple_lanes(graphs, ranks, offsets, plans, orders, bases, collective,
                                               unknown_group)
        if steps is not None:
            steps.phase(f"scheduling {offsets[-1]:,} nodes")
        run = run_lanes(plans, orders, offsets, bases, lane_gaps, c, group_of)
        del lane_gaps, group_of
    else:
        run = run_lanes(plans, orders, offsets, bases)
    if run.done != offsets[-1]:
        raise ReplayError(stall_message(graphs, ranks, offsets, c, offsets[-1] - run.done))
    kept = plans if keep_plans else []
    del plans, deps      # (freed before the times become lists: a whole job's peak is here)
    return SimOutput(rank_starts=as_lists(run.rank_starts), rank_ends=as_lists(run.rank_ends),
                     offsets=offsets,
                     comm_start=c.comm_start, lane_order=orders, base=bases, groups=len(c.members),
                     members=c.members, closes=run.closes, plans=kept)


def _plans(graphs: Sequence[RankGraph], deps: Sequence[list[tuple[int, ...]]],
           orders: Sequence[Sequence[int]], gaps: bool, steps: Steps | None) -> list[Plan]:
    """Each rank's plan (:func:`chakra.replay.plan.rank_plan`), a rank at a time."""
    if steps is not None:
        steps.phase("rank plans", len(graphs))
    plans = []
    for g, d, o in zip(graphs, deps, orders):
        plans.append(rank_plan(g, d, o, gaps))
        if steps is not None:
            steps.advance()
    return plans


def _coupling(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: list[int],
              orders: Sequence[Sequence[int]], dur: Sequence[float], bases: list[float],
              collective: CollectiveDuration, unknown_group: UnknownGroup, posted: bool = False,
              transfers: Container[int] = ()) -> tuple[Coupling, MutableSequence[int]]:
    """The groups of a whole job and node -> group; ``dur``: each node's duration when coupled; ``posted``
    (lanes mode): a send counts from when it was posted (:func:`chakra.replay.coupling.post_leads`), but
    for the records in ``transfers``."""
    c, group_of = build_coupling(graphs, ranks, offsets, orders, dur, unknown_group)
    if posted:
        post_leads(c, graphs, offsets, transfers)
    if collective == "net":
        net_durations(c, graphs, offsets, dur, bases)
    return c, group_of


def _couple_lanes(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: list[int],
                  plans: Sequence[Plan], orders: Sequence[Sequence[int]], bases: list[float],
                  collective: CollectiveDuration, unknown_group: UnknownGroup
                  ) -> tuple[list[list[float]], Coupling, MutableSequence[int]]:
    """The coupling of a lanes-mode job, and each rank's gaps with the coupled transfers taken out."""
    rdur = array("d", chain.from_iterable(p.rd for p in plans))
    dur = array("d", rdur)      # a coupled node lasts as long as on its own ...
    transfers: dict[int, tuple[int, float]] = {}   # coupled record -> (child after its transfer, piece)
    for off, p in zip(offsets, plans):
        transfers.update((off + x, (off + k, w)) for x, (k, w) in p.transfer.items())
    for x, (_k, w) in transfers.items():
        dur[x] = w              # ... a record with children on its thread: its transfer
    c, group_of = _coupling(graphs, ranks, offsets, orders, dur, bases, collective, unknown_group,
                            posted=True, transfers=transfers)
    gap = list(chain.from_iterable(p.gap for p in plans))
    if transfers:
        couple_transfers(c, group_of, transfers, gap, rdur)
    return [gap[off:off + len(p.gap)] for off, p in zip(offsets, plans)], c, group_of


# ---- per rank: dependencies and lane order -----------------------------------------------------------------


def _fmt_ids(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:IDS_LISTED_MAX])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > IDS_LISTED_MAX else "")


def _resolve_deps(g: RankGraph, missing: Missing) -> list[tuple[int, ...]]:
    """Dependency ids -> local indices; unknown ids per ``missing`` (an error, or dropped with a warning).

    A read graph whose ids are its indices (0 to n-1: the generator's; the converter's start at 1) and whose
    dependencies all name one of them has its rows taken as they are, without an id -> index table."""
    n = len(g.ids)
    if _ids_are_indices(g):
        return list(g.deps)
    index = dict(zip(g.ids, range(n)))
    rows = g.deps
    if isinstance(rows, DepsCSR):    # (a read graph: its rows' ids in one array, and where each row starts)
        flat: Sequence[int] = rows.flat
        ptr: Sequence[int] = rows.ptr
    else:
        flat = list(chain.from_iterable(rows))
        ptr = list(accumulate(map(len, rows), initial=0))
    try:   # the position of every id at once, then cut into rows (C loops, no map made per row)
        pos = list(map(index.__getitem__, flat))
    except KeyError:   # an id not in the file: per ``missing``, below
        pos = None
    if pos is not None:
        return list(map(tuple, map(pos.__getitem__, map(slice, ptr, islice(ptr, 1, None)))))
    out: list[tuple[int | None, ...]] = list(map(tuple, map(map, repeat(index.get), rows)))
    unknown: dict[int, list[int]] = {}
    for i, (res, deps) in enumerate(zip(out, g.deps)):
        if None in res:
            for d in deps:
                if d not in index:
                    unknown.setdefault(d, []).append(g.ids[i])
            out[i] = tuple(j for j in res if j is not None)
    n_edges = sum(len(v) for v in unknown.values())
    first = min(unknown)
    msg = (f"{n_edges} dependencies point to {len(unknown)} node id(s) not in the file: "
           f"{_fmt_ids(sorted(unknown))}; e.g. node {unknown[first][0]} depends on missing node {first}")
    if missing == "error":
        raise ReplayError(msg + " (use missing='ignore' / --ignore-missing-deps to drop them)", g.path)
    log.warning("%s: %s; dropped", g.path or f"rank {g.rank}", msg)
    return cast(list[tuple[int, ...]], out)   # (the unknown ones dropped)


def _ids_are_indices(g: RankGraph) -> bool:
    """Whether ``g`` is a read graph whose ids are 0..n-1 and whose dependencies name only those (C loops)."""
    ids, deps = g.ids, g.deps
    n = len(ids)
    if not isinstance(deps, DepsCSR) or not isinstance(ids, array) or not n:
        return False
    if ids[0] != 0 or ids[-1] != n - 1:
        return False
    return array.__eq__(ids, array(ids.typecode, range(n))) and (not deps.flat or max(deps.flat) < n)


def _topo_order(g: RankGraph, deps: list[tuple[int, ...]]) -> array[int]:
    """The lane order of ``g`` (:func:`lane_order`) as an ``array('l')`` (8 bytes a node; a list of
    ints: 36); a cycle raises ReplayError."""
    order = lane_order(g.starts, deps)
    if len(order) != len(deps):
        placed = bytearray(len(deps))
        for i in order:
            placed[i] = 1
        raise ReplayError(_cycle_message(g, deps, placed), g.path)
    return array("l", order)


def lane_order(starts: Sequence[float], deps: Sequence[tuple[int, ...]]) -> list[int]:
    """The lane order: a topological order of ``deps`` that always takes the ready node of smallest
    (recorded start, index); the nodes on a cycle or behind one are left out.

    Found by walking the nodes in (start, index) order: a node whose dependencies are all placed is
    placed; one that is not ready when its turn comes waits, and is placed as soon as its last dependency
    is (before any later node of the walk: it sorts before them; waiting nodes that get ready together go
    in (start, index) order).  Usually only a few nodes ever wait.  (In a RankGraph index order is id
    order.)"""
    n = len(deps)
    done = bytearray(n)
    is_done = done.__getitem__
    waiting: list[list[int] | None] = [None] * n
    rem: dict[int, int] = {}
    heap: list[tuple[float, int]] = []
    order: list[int] = []
    append = order.append
    push, pop = heapq.heappush, heapq.heappop
    for c in sorted(range(n), key=starts.__getitem__):
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
    return order


def _cycle_message(g: RankGraph, deps: list[tuple[int, ...]], placed: bytearray) -> str:
    """Walk 'waits for' edges among never-placed nodes until one repeats: that is a cycle."""
    stuck = [i for i, p in enumerate(placed) if not p]
    v = stuck[0]
    pos: dict[int, int] = {}
    path: list[int] = []
    while v not in pos:
        pos[v] = len(path)
        path.append(v)
        v = next(j for j in deps[v] if not placed[j])
    cycle = path[pos[v]:] + [v]
    chain_text = " -> ".join(str(g.ids[i]) for i in cycle)
    return (f"dependency cycle: node {chain_text} (each waits for the next); "
            f"{len(stuck)} node(s) can never start: {_fmt_ids([g.ids[i] for i in stuck])}")


# ---- the event loop ----------------------------------------------------------------------------------------


class _Job:
    """The ASTRA-sim rule's event loop: every rank's nodes on one clock (global index = rank offset + local
    index), one heap of completion events."""

    def __init__(self, total: int) -> None:
        self.rdur: list[float] = []                 # replayed duration of every node
        self.rem = [0] * total                      # unmet dependencies
        self.succ: list[list[int] | None] = [None] * total
        self.start = [0.0] * total
        self.end = [-1.0] * total
        self.heap: list[tuple[float, int]] = []
        self.done = 0
        self.res: list[int] = []                    # node -> its resource (-1: none)
        self.n_res = 0
        self.coupling = Coupling()
        self.group_of: MutableSequence[int] | None = None
        self.steps: list[int] = []                  # each coupled group's ring steps (0: none)
        self.arrivals: list[list[tuple[int, float]]] = []

    # -- building --------------------------------------------------------------------------------------

    @classmethod
    def astrasim(cls, graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: list[int],
                 deps: Sequence[list[tuple[int, ...]]], orders: Sequence[Sequence[int]], couple: bool,
                 collective: CollectiveDuration, unknown_group: UnknownGroup) -> _Job:
        """The job of an ASTRA-sim-rule replay: recorded durations (what-if applied), one resource per
        kind and rank."""
        job = cls(offsets[-1])
        res = job.res
        job.n_res = 3 * len(graphs)
        for ri, (g, off) in enumerate(zip(graphs, offsets)):
            job.rdur += _scaled_durations(g)
            first_res = ri * 3
            for ntype, cpu in zip(g.types, g.is_cpu):
                res.append(-1 if ntype == METADATA_NODE else first_res + _resource_kind(ntype, cpu))
            job.add_deps(off, deps[ri])
        if couple:
            job.coupling, job.group_of = _coupling(graphs, ranks, offsets, orders, list(job.rdur),
                                                   [0.0] * len(graphs), collective, unknown_group)
            job.coupling.start_run()
            job.uncouple_timed(graphs, offsets)
            job.ring_groups(graphs, offsets)
        return job

    def ring_groups(self, graphs: Sequence[RankGraph], offsets: list[int]) -> None:
        """ASTRA-sim passes a collective around its ring: a member that issued it last finishes sooner
        than one that waited for it (:func:`chakra.job.network.ring_finish`).  The steps of each group."""
        # (imported here: only the ASTRA-sim mode needs it, a rank's replay does not import job.network)
        from chakra.job.network import ring_steps

        c = self.coupling
        self.steps = []
        self.arrivals = [[] for _ in c.members]
        for members in c.members:
            gi = members[0]
            ri = rank_of(offsets, gi)
            g, i = graphs[ri], gi - offsets[ri]
            if g.types[i] != COMM_COLL_NODE:
                self.steps.append(0)
                continue
            self.steps.append(ring_steps(g.extra.get(ATTR_COMM_TYPE, {}).get(i), g.types[i], len(members)))

    def uncouple_timed(self, graphs: Sequence[RankGraph], offsets: list[int]) -> None:
        """ASTRA-sim runs a BROADCAST for its duration on each rank, without waiting for the peers: the
        ASTRA-sim rule does not couple it."""
        group_of = self.group_of
        if group_of is None:
            return
        for g, off in zip(graphs, offsets):
            for i, t in g.extra.get(ATTR_COMM_TYPE, {}).items():
                if t == BROADCAST and group_of[off + i] >= 0:
                    group_of[off + i] = -1

    def add_deps(self, off: int, deps: list[tuple[int, ...]]) -> None:
        rem, succ = self.rem, self.succ
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

    # -- events ----------------------------------------------------------------------------------------

    def arrive(self, gi: int, t: float) -> None:
        """A coupled node reaches its group at ``t``; the last arrival starts the transfer (around the
        ring for a collective)."""
        c = self.coupling
        grp = self.group_of[gi]  # type: ignore[index]
        push = heapq.heappush
        complete = c.arrive(gi, t, grp)
        if gi == c.eager[grp]:                # a send does not wait for its receiver
            push(self.heap, (t + self.rdur[gi], gi))
        steps = self.steps[grp] if self.steps else 0
        if steps:
            self.arrivals[grp].append((gi, t))
        if not complete:
            return
        if steps:            # the ASTRA-sim rule: around the ring
            from chakra.job.network import ring_finish

            at = dict(self.arrivals[grp])
            members = c.members[grp]
            for m, em in zip(members, ring_finish([at[m] for m in members], steps, c.dur[grp])):
                c.comm_start[m] = c.latest[grp]
                push(self.heap, (em, m))
            return
        for m, em in c.ends(grp):
            push(self.heap, (em, m))

    def run_astrasim(self) -> None:
        """The ASTRA-sim rule: per rank one CPU op, one GPU compute op and one GPU comm op at a time, the
        lowest id first among the ready ones of a kind."""
        res, rem, succ, start, end, heap, rdur = self.res, self.rem, self.succ, self.start, self.end, \
            self.heap, self.rdur
        group_of, arrive = self.group_of, self.arrive
        push, pop = heapq.heappush, heapq.heappop
        n_res = self.n_res
        queues: list[list[int]] = [[] for _ in range(n_res)]
        busy = [False] * n_res
        dirty: set[int] = set()

        def ready(gi: int, t: float) -> None:
            r = res[gi]
            if r < 0:                     # METADATA: no resource, no time
                start[gi] = t
                push(heap, (t, gi))
            else:
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

        for gi in range(len(rem)):
            if rem[gi] == 0:
                ready(gi, 0.0)
        dispatch(0.0)
        done = 0
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
                            ready(j, t)
            dispatch(t)
        self.done = done


def _resource_kind(ntype: int, is_cpu: bool) -> int:
    # (measured on ASTRA-sim: a MEM_LOAD/MEM_STORE node not on the CPU holds the communication resource)
    if is_cpu:
        return _CPU
    if ntype in COMM_TYPES or ntype in (MEM_LOAD_NODE, MEM_STORE_NODE):
        return _GPU_COMM
    return _GPU_COMP


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
