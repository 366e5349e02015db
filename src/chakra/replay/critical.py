"""The critical path of a replayed rank, and what a what-if moved on it.

Walked back in time from the node that ends last, with a cursor: the path has been explained from the
cursor to the end, and each step explains a little more of it by whatever bound it in the replay (the
rules of :mod:`chakra.replay.engine`, read off the rank's :class:`chakra.replay.plan.Plan`):

- a node whose end was set by a finish wait (it was recorded blocked on ``u``: a synchronize, a
  ``wait()``; ``end(v) = end(u) + tail``) is charged only its tail after ``end(u)``, and the walk goes
  on at ``u``'s end;
- otherwise the node is charged its time from its start to the cursor, and the walk goes on at what
  released its start, the one that released it last: a dependency's end; the end of the waited node plus
  the recorded latency of a wait (``wait_on``); its lane predecessor freeing the lane, plus the gap; or the
  start of a node it was recorded starting inside of (a finish wait's start bound: a kernel that started
  before its launch call returned), which is then charged only ``start(v) - start(u)``, the part of it
  before ``v`` started.  A node no predecessor released started at the window (or replay) start.

So every µs between 0 and the rank's end is counted once, on one node or between two, and no node is
charged more than its own time on the path.  Time on the path is split into what ran (CPU ops, GPU
compute, communication), waiting for peers in a whole-job replay (the part of a coupled node before its
transfer began), and the time between ops: the gaps of a thread (the pieces of enclosing ops around their
children, idle time with gaps), the latency after a waited node's end, the offset of the first node, and
a parent op's tail after the last node.  The categories sum to the path's length.

:func:`dependency_only_us` gives the same replay without the lanes (no thread or stream runs one op at a
time): the longest chain over the dependencies under the same start and end bounds, so never longer than
the lanes-mode replay.  An ASTRA-sim-mode replay has no plan: its walk follows the dependencies and the
previous node of each lane by replayed start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from chakra.replay.api import ReplayResult
from chakra.replay.engine import _topo_order
from chakra.replay.graph import RankGraph
from chakra.replay.plan import Plan, end_bounds, rank_plan, start_bounds
from chakra.replay.whatif import node_kind
from chakra.schema import METADATA_NODE
from chakra.tunables import PATH_EPS

CATEGORIES = ("cpu", "gpu", "comm", "peer_wait", "between_ops")
# what the time between ops is (CriticalPath.between): before the first node; a thread's gaps (the pieces
# of enclosing ops before, between and after their children, idle time with gaps); the recorded latency of
# a wait after the waited node's end; the tails of ops still open after the last node; and slack, a start
# later than anything the walk found released it (a whole-job replay's coupled transfers)
BETWEEN = ("start", "thread", "latency", "end", "slack")
_INF = float("inf")


@dataclass(slots=True)
class CriticalPath:
    """Time on one rank's critical path, by category, and by op name (own time only).

    ``nodes`` are the node ids first to last, ``charges`` the own time each one has on the path (its
    peer wait excluded), ``links`` how each node released the next (``len(nodes) - 1`` entries): ``dep``
    its end started the next (a dependency, a wait), ``lane`` it freed the next one's thread or stream,
    ``start`` the next was recorded starting while it ran (start-to-start), ``end`` the next was blocked
    on it and ended after it (the next one's end was bound by its end)."""

    total_us: float = 0.0
    by_category: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    by_name: dict[str, float] = field(default_factory=dict)   # op name -> its time on the path (µs)
    nodes: list[int] = field(default_factory=list)     # node ids, first to last
    charges: list[float] = field(default_factory=list)  # own µs of each node on the path
    links: list[str] = field(default_factory=list)     # how each node released the next
    between: dict[str, float] = field(default_factory=lambda: dict.fromkeys(BETWEEN, 0.0))


def _resolved_deps(g: RankGraph) -> list[tuple[int, ...]]:
    """The dependencies as indices, those on ids not in the graph dropped (the replay warned already)."""
    index = dict(zip(g.ids, range(len(g.ids))))
    return [tuple(j for j in map(index.get, d) if j is not None) for d in g.deps]


def replay_plan(res: ReplayResult) -> Plan | None:
    """The plan the lanes-mode replay of ``res`` read (rebuilt: the same deterministic rules); None for
    another mode.  What a whole-job replay changes on top of it (coupled durations, a record's transfer)
    is not in it; the walk then falls back on the replayed times."""
    if res.mode != "lanes":
        return None
    if res.plan is not None:          # the one the engine read (it leaves its plans as they were)
        return res.plan
    g = res.graph
    deps = _resolved_deps(g)
    return rank_plan(g, deps, _topo_order(g, deps), res.gaps)


def _replayed_lanes(res: ReplayResult, deps: list[tuple[int, ...]]) -> Plan:
    """A plan with nothing but dependencies and each lane's nodes by replayed start (no plan rules)."""
    g = res.graph
    n = len(g.ids)
    by_lane: dict[object, list[int]] = {}
    for i, lane in enumerate(g.lanes):
        if lane is not None:
            by_lane.setdefault(lane, []).append(i)
    lane_prev = [-1] * n
    for seq in by_lane.values():
        seq.sort(key=lambda i: (res.starts[i], i))
        for a, b in zip(seq, seq[1:]):
            lane_prev[b] = a
    return Plan(rd=list(g.durations), rd_rec=list(g.durations), deps=deps, lane_prev=lane_prev,
                gap=[0.0] * n, first={}, release={})


def critical_path(res: ReplayResult) -> CriticalPath:
    """The critical path of one replayed rank (see the module doc)."""
    g = res.graph
    n = len(g.ids)
    out = CriticalPath()
    if n == 0:
        return out
    ends, types = res.ends, g.types
    cur = max((i for i in range(n) if types[i] != METADATA_NODE), key=lambda i: (ends[i], -i), default=-1)
    if cur < 0:
        return out
    plan = replay_plan(res)
    walk = _Walk(res, plan if plan is not None else _replayed_lanes(res, _resolved_deps(g)), out)
    out.total_us = t = max(res.replayed_us, ends[cur])
    out.between["end"] += t - ends[cur]         # tails after the last node
    t = ends[cur]
    while cur >= 0:
        cur, t = walk.step(cur, t)
    out.by_category["between_ops"] += sum(out.between.values())
    out.nodes = [g.ids[i] for i in reversed(walk.path)]
    out.charges = walk.charges[::-1]
    out.links = walk.links[::-1]
    return out


class _Walk:
    """The walk back in time of :func:`critical_path`: each step explains the path below the cursor by
    what bound a node (the plan's bounds, :func:`chakra.replay.plan.start_bounds` and ``end_bounds``)."""

    def __init__(self, res: ReplayResult, plan: Plan, out: CriticalPath) -> None:
        self.res, self.plan, self.out = res, plan, out
        self.path: list[int] = []
        self.charges: list[float] = []
        self.links: list[str] = []
        self.seen: set[int] = set()

    def step(self, cur: int, t: float) -> tuple[int, float]:
        """Explain the path from node ``cur``, entered at ``t``: the next node and its cursor (-1: the
        path began at the window start)."""
        res, between = self.res, self.out.between
        self.seen.add(cur)
        s, e = res.starts[cur], res.ends[cur]
        if t > e:                           # entered past its end (a start offset longer than it ran)
            between["slack"] += t - e
            t = e
        nxt = self.blocked_on(cur, t)
        if nxt >= 0:                        # 1. an end bound: ended with a node it was recorded blocked on
            lo = min(t, max(res.ends[nxt], s))
            self.charge(cur, t, lo)
            self.links.append("end")
            return nxt, lo
        lo = min(t, s)                      # 2. its time from its start, then what released its start
        self.charge(cur, t, lo)
        t = lo
        best, best_r, entry, link, what = self.released_by(cur)
        if best < 0 or best_r < self.plan.first.get(cur, 0.0) - PATH_EPS:
            between["start"] += t           # from the window (replay) start
            return -1, t
        nt = min(entry, t)
        part = max(0.0, min(t - nt, best_r - entry))      # the gap or latency itself
        between[what] += part
        between["slack"] += t - nt - part
        self.links.append(link)
        return best, nt

    def blocked_on(self, cur: int, t: float) -> int:
        """The node whose end bound set ``cur``'s end (the latest such), -1 for none."""
        ends = self.res.ends
        s, e = self.res.starts[cur], ends[cur]
        nxt = -1
        if t < e - PATH_EPS:
            return nxt
        for j, tail in end_bounds(self.plan, cur):
            if j in self.seen:
                continue
            ej = ends[j]
            if abs(ej + tail - e) <= PATH_EPS and s - PATH_EPS <= ej and (nxt < 0 or ej > ends[nxt]):
                nxt = j
        return nxt

    def released_by(self, cur: int) -> tuple[int, float, float, str, str]:
        """What released ``cur``'s start, the one that did last (the first listed among equals): (node,
        release time, where the walk enters it, link, what the time in between is); node -1: none."""
        starts, ends = self.res.starts, self.res.ends
        s = starts[cur]
        best, best_r, best_entry, best_link, best_what = -1, -_INF, 0.0, "", "slack"
        for u, at_end, lead, delay, link, what in start_bounds(self.plan, cur):
            entry = (ends[u] if at_end else starts[u]) + lead
            r = entry + delay
            if r > best_r and r <= s + PATH_EPS and u not in self.seen:
                best, best_r, best_entry, best_link, best_what = u, r, entry, link, what
        return best, best_r, best_entry, best_link, best_what

    def charge(self, i: int, hi: float, lo: float) -> None:
        """Node ``i`` holds the path from ``lo`` to ``hi``: its peer wait, then its own time."""
        res, out = self.res, self.out
        g = res.graph
        cat = out.by_category
        s = res.starts[i]
        w = res.comm_wait.get(g.ids[i], 0.0)
        pw = max(0.0, min(hi, s + w) - max(lo, s)) if w else 0.0
        own = hi - lo - pw
        cat["peer_wait"] += pw
        kind = node_kind(g, i)
        if kind in cat:
            cat[kind] += own
            name = g.names[i]
            out.by_name[name] = out.by_name.get(name, 0) + own
            self.charges.append(own)
        else:                               # a METADATA node takes no time of its own
            out.between["slack"] += own
            self.charges.append(0.0)
        self.path.append(i)


def dependency_only_us(res: ReplayResult) -> float | None:
    """The replay of ``res``'s rank without its lanes: each node starts and ends as the replay's rules say
    (dependencies, waits and their latency, finish waits' start and end bounds, the durations the replay
    gives, what-if included), but no thread or stream runs one op at a time, and there are no gaps.  The
    time its last node ends: never more than the lanes-mode replay's.  None for another mode."""
    plan = replay_plan(res)
    if plan is None:
        return None
    g = res.graph
    n = len(g.ids)
    rd, deps, after, waits, ff_min = plan.rd, plan.deps, plan.after, plan.waits, plan.ff_min
    preds: list[list[int]] = [list(d) for d in deps]
    for i, pairs in after.items():
        preds[i].extend(u for u, _ in pairs)
    for i, pw in waits.items():
        preds[i].extend(j for j, _, _ in pw)
    succ: list[list[int]] = [[] for _ in range(n)]
    rem = [0] * n
    for i, ps in enumerate(preds):
        rem[i] = len(ps)
        for u in ps:
            succ[u].append(i)
    start = [0.0] * n
    end = [0.0] * n
    queue = [i for i in range(n) if not rem[i]]
    for i in queue:                          # (the list grows while it is walked)
        t = 0.0
        for u in deps[i]:
            t = max(t, end[u])
        for u, delay in after.get(i, ()):
            t = max(t, end[u] + delay)
        e_bound = None
        for j, tail, offset in waits.get(i, ()):
            t = max(t, start[j] + offset)
            if tail is not None:
                c = end[j] + tail
                e_bound = c if e_bound is None else max(e_bound, c)
        start[i] = t
        e = t + ff_min.get(i, rd[i])
        end[i] = e if e_bound is None else max(e, e_bound)
        for v in succ[i]:
            rem[v] -= 1
            if not rem[v]:
                queue.append(v)
    return max((end[i] for i in queue if g.types[i] != METADATA_NODE), default=0.0)


class PathChange(TypedDict):
    """What :func:`compare_paths` says."""

    categories: dict[str, tuple[float, float]]   # category -> (before, after) µs
    moved: list[tuple[str, float]]               # op name, change of its time on the path (µs), largest first


def compare_paths(before: CriticalPath, after: CriticalPath, top: int = 5) -> PathChange:
    """Category totals before/after and the op names whose time on the path changed most (by name among
    equal changes)."""
    cats = {c: (before.by_category[c], after.by_category[c]) for c in CATEGORIES}
    names = set(before.by_name) | set(after.by_name)
    moved = sorted(((after.by_name.get(k, 0.0) - before.by_name.get(k, 0.0), k) for k in names),
                   key=lambda x: (-abs(x[0]), x[1]))      # (equal changes by name: the set has no order)
    return {"categories": cats, "moved": [(k, d) for d, k in moved[:top] if abs(d) >= 0.5]}


def describe_change(before: CriticalPath, after: CriticalPath, top: int = 5) -> list[str]:
    """Lines: critical path total, per category (before -> after), the ops that moved most."""
    cmp = compare_paths(before, after, top)
    parts = []
    for c, (b, a) in cmp["categories"].items():
        if b or a:
            parts.append(f"{c} {b:,.0f}->{a:,.0f}")
    lines = [f"critical path {before.total_us:,.0f} -> {after.total_us:,.0f} µs: " + ", ".join(parts)]
    moved = cmp["moved"]
    if moved:
        lines.append("moved most: " + "; ".join(f"{k[:48]} {d:+,.0f} µs" for k, d in moved))
    return lines
