"""The lanes-mode scheduler: each node's start and end, computed once, from the ranks' plans.

Every rule of a lanes-mode replay is a bound of the form "start (or end) no earlier than some other node's
start or end plus a delay" (:class:`chakra.replay.plan.Plan` lists them; the engine's module docstring says
why each one holds).  Such times do not need an event loop: a node's start is the largest of its start
bounds once every node they name is placed, and its end likewise.  So each rank is walked in its lane order
(a topological order of its dependencies and lanes): a node whose bounds are all known is placed there and
then; one that names a node not yet placed (a wait redirected to a parent's last descendant that the
recording placed later; a node after a collective whose peers have not all arrived) waits for it and is
placed when it is.  A coupled node (whole job) arrives at its group when it starts and ends when the
group's transfer does (:class:`chakra.replay.coupling.Coupling`); a rank whose walk left a node waiting
hands over to the next rank, so the ranks of a job reach their collectives together and few nodes wait.
What no node can ever satisfy (a deadlock between ranks) stays unplaced: the engine reports it.

The bounds are the plan's (:func:`chakra.replay.plan.start_bounds`, :func:`~chakra.replay.plan.end_bounds`,
which the critical path reads too); the walk's short way for a node with nothing but dependencies and a
lane predecessor (:meth:`_Lanes.walk`) takes the same sums, inline (most nodes take it).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass
from itertools import compress

from chakra.replay.coupling import Coupling
from chakra.replay.plan import Plan, end_bounds, start_bounds

_WAITING, _STARTED, _ENDED = 0, 1, 2


class ByRank:
    """``starts`` and ``ends`` by global index, of a result that holds each rank's times (``rank_starts``,
    ``rank_ends``: by local index)."""

    __slots__ = ()
    rank_starts: Sequence[Sequence[float]]
    rank_ends: Sequence[Sequence[float]]

    @property
    def starts(self) -> list[float]:
        """Every node's start, by global index."""
        return join_ranks(self.rank_starts)

    @property
    def ends(self) -> list[float]:
        """Every node's end, by global index."""
        return join_ranks(self.rank_ends)


@dataclass(slots=True)
class LaneRun(ByRank):
    """What :func:`run_lanes` gives: each rank's start and end of every node (local index), how many ended
    (fewer than all: a deadlock) and when each parent's tail ends (global index = rank offset + local).
    The times are ``array('d')`` (8 bytes a node; a list of floats: 32): :func:`as_lists` turns them into
    lists, a rank at a time, once the plans are freed."""

    rank_starts: list[MutableSequence[float]]
    rank_ends: list[MutableSequence[float]]
    done: int
    closes: dict[int, float]


def join_ranks(lists: Sequence[Sequence[float]]) -> list[float]:
    """Per-rank lists as one, by global index (one rank: its list itself)."""
    if len(lists) == 1:
        one = lists[0]
        return one if isinstance(one, list) else list(one)
    return [x for one in lists for x in one]


def as_lists(columns: list[MutableSequence[float]]) -> list[list[float]]:
    """Each rank's times as a list, converted in place one rank at a time (each array is freed as its list
    is made, so the job never holds both forms of more than one rank)."""
    for r, col in enumerate(columns):
        if not isinstance(col, list):
            columns[r] = col.tolist() if isinstance(col, array) else list(col)
    return columns  # type: ignore[return-value]   # (every entry is a list now)


def run_lanes(plans: Sequence[Plan], orders: Sequence[Sequence[int]], offsets: Sequence[int],
              bases: Sequence[float], gaps: Sequence[list[float]] | None = None,
              coupling: Coupling | None = None, group_of: Sequence[int] | None = None) -> LaneRun:
    """Place every node of the ranks ``plans`` (each rank begins at its ``bases`` entry); ``gaps``
    replaces the plans' gaps (a whole job's coupled transfers change some), ``coupling`` / ``group_of``
    tie nodes of different ranks (global indices)."""
    run = _Lanes(plans, offsets, bases, gaps, coupling, group_of)
    at = [0] * len(orders)                  # each rank's walk goes on from there
    while True:
        moved = False
        for r, order in enumerate(orders):
            if at[r] < len(order):
                at[r] = run.walk(r, order, at[r])
                moved = True
        if not moved:
            break
    closes: dict[int, float] = {}
    for plan, off, e in zip(plans, offsets, run.end):
        closes.update((off + x, e[last] + t) for x, (last, t) in plan.close.items())
    return LaneRun(run.start, run.end, sum(run.ended), closes)


class _Lanes:
    """The state of a lanes-mode replay: per rank, each node's start, end and state."""

    def __init__(self, plans: Sequence[Plan], offsets: Sequence[int], bases: Sequence[float],
                 gaps: Sequence[list[float]] | None, coupling: Coupling | None,
                 group_of: Sequence[int] | None) -> None:
        self.plans = plans
        self.offsets = offsets
        self.gaps = [p.gap for p in plans] if gaps is None else gaps
        self.coupling = coupling
        self.group_of = group_of
        self.start: list[MutableSequence[float]] = []
        self.end: list[MutableSequence[float]] = []
        self.state: list[bytearray] = []
        self.ready: list[list[float]] = []        # a node's earliest start: its rank's base, its offset
        for p, b in zip(plans, bases):
            n = len(p.rd)
            ready = [b] * n
            for i, v in p.first.items():
                ready[i] += v
            self.ready.append(ready)
            self.start.append(array("d", (0.0,)) * n)
            self.end.append(array("d", (-1.0,)) * n)
            self.state.append(bytearray(n))
        self.special: list[bytearray] = []      # per rank: 1 = a node the walk never places the short way
        self.bounded: list[set[int]] = []       # ... of them, those with bounds beyond deps and lane
        for p, off in zip(plans, offsets):
            bounded = set(p.after)
            bounded.update(p.waits, p.ff_min)
            n = len(p.rd)
            special = bytearray(n)
            for i in bounded:
                special[i] = 1
            if group_of is not None:
                for i in compress(range(n), map((0).__le__, group_of[off:off + n])):
                    special[i] = 1
            self.special.append(special)
            self.bounded.append(bounded)
        self.columns = [(p.rd, p.deps, p.lane_prev, g, ready, start, end, state, p.release.get, special,
                         bounded)
                        for p, g, ready, start, end, state, special, bounded in
                        zip(plans, self.gaps, self.ready, self.start, self.end, self.state, self.special,
                            self.bounded)]
        self.walked = [0] * len(plans)           # per rank: nodes the walk reached
        self.ended = [0] * len(plans)            # per rank: nodes placed (start and end)
        self.own_end: dict[tuple[int, int], float] = {}   # started, its end waits for a finish wait's
        self.waiters: dict[tuple[int, int], list[tuple[int, int]]] = {}   # node -> nodes waiting for it
        self.todo: list[tuple[int, int]] = []
        self.shared = (self.walked, self.ended, self.todo)   # (no bound method: a cycle outlives gc_paused)
        if coupling is not None:
            coupling.start_run()

    def walk(self, r: int, order: Sequence[int], at: int) -> int:
        """Rank ``r`` in lane order from ``order[at]``, until a node is left waiting (for a peer, or a node
        later in the order): where the walk goes on (the other ranks take their turn in between, so that a
        whole job's ranks reach their collectives together).  While every node the walk reached has ended,
        a node with nothing but dependencies and a lane predecessor (both earlier in the order) is placed
        the short way."""
        # (one unpacking: a whole job calls this about once per coupled node)
        rd, deps, lane_prev, gap, ready, start, end, state, rget, special, bounded = self.columns[r]
        walked, ended, todo = self.shared
        drain, started = self.drain, self.started
        pending = walked[r] - ended[r]        # nodes the walk reached that have not ended
        short = 0
        k = at
        for k in range(at, len(order)):
            i = order[k]
            if pending or special[i]:
                walked[r] += 1
                if pending or i in bounded:
                    todo.append((r, i))
                    drain()
                    pending = walked[r] - ended[r]
                    if pending:
                        break
                    continue
            # (its start bounds are all placed: the latest of them, the short way)
            t = ready[i]
            for j in deps[i]:
                e = end[j]
                if e > t:
                    t = e
            j = lane_prev[i]
            if j >= 0:
                rel = rget(j)
                c = (end[j] if rel is None else start[j] + rel) + gap[i]
                if c > t:
                    t = c
            if special[i]:   # a coupled node: it arrives at its group
                started(r, i, t)
                drain()
                pending = walked[r] - ended[r]
                if pending:
                    break
                continue
            start[i] = t
            end[i] = t + rd[i]
            state[i] = _ENDED
            short += 1
        else:
            k = len(order) - 1
        ended[r] += short
        walked[r] += short
        return k + 1

    def drain(self) -> None:
        todo = self.todo
        while todo:
            r, i = todo.pop()
            if self.state[r][i] == _WAITING:
                t = self.start_of(r, i)
                if t is None:
                    continue
                self.started(r, i, t)
            else:
                self.finish(r, i, self.own_end.pop((r, i)))

    def wait_for(self, r: int, j: int, i: int) -> None:
        """Node ``i`` of rank ``r`` needs node ``j`` placed further: it is tried again when ``j`` is."""
        self.waiters.setdefault((r, j), []).append((r, i))

    def wake(self, r: int, j: int) -> None:
        if not self.waiters:       # (most of a job: no node waits for a later one)
            return
        w = self.waiters.pop((r, j), None)
        if w is not None:
            self.todo.extend(w)

    def start_of(self, r: int, i: int) -> float | None:
        """The start of node ``i`` of rank ``r``: the latest of its start bounds (None: one names a node
        not placed that far; ``i`` then waits for it)."""
        start, end, state = self.start[r], self.end[r], self.state[r]
        t = self.ready[r][i]
        for u, at_end, lead, delay, _link, _between in start_bounds(self.plans[r], i, self.gaps[r]):
            if state[u] == _WAITING or (at_end and state[u] != _ENDED):
                self.wait_for(r, u, i)
                return None
            c = ((end[u] if at_end else start[u]) + lead) + delay
            if c > t:
                t = c
        return t

    def started(self, r: int, i: int, t: float) -> None:
        """Node ``i`` of rank ``r`` starts at ``t``: a coupled node arrives at its group, any other runs
        its replayed duration (or its own time after what it waits for)."""
        self.start[r][i] = t
        self.state[r][i] = _STARTED
        if self.waiters:
            self.wake(r, i)
        p = self.plans[r]
        c = self.coupling
        gi = self.offsets[r] + i
        group = self.group_of[gi] if self.group_of is not None else -1
        if c is None or group < 0:
            self.finish(r, i, t + p.ff_min.get(i, p.rd[i]))
            return
        if c.arrive(gi, t, group):
            ends = c.ends(group)
        else:
            ends = []
        if gi == c.eager[group]:                # a send does not wait for its receiver
            self.finish(r, i, t + p.ff_min.get(i, p.rd[i]))
        if ends:
            offsets = self.offsets
            for m, e in ends:
                rm = bisect_right(offsets, m) - 1
                self.finish(rm, m - offsets[rm], e)

    def finish(self, r: int, i: int, e: float) -> None:
        """Node ``i`` of rank ``r`` would end at ``e`` by its own time; it ends no earlier than each node
        it was recorded blocked on, plus its tail (a finish wait)."""
        end, state = self.end[r], self.state[r]
        plan = self.plans[r]
        for u, tail in end_bounds(plan, i) if i in plan.waits else ():
            if state[u] != _ENDED:
                self.own_end[(r, i)] = e
                self.wait_for(r, u, i)
                return
            if end[u] + tail > e:
                e = end[u] + tail
        end[i] = e
        state[i] = _ENDED
        self.ended[r] += 1
        if self.waiters:
            self.wake(r, i)
