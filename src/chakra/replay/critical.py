"""The critical path of a replayed rank, and what a what-if moved on it.

Walked back from the node that ends last: each node's start is explained by whichever
predecessor released it last (a dependency's end, plus the recorded latency of a wait;
its lane predecessor's end).  Time on the path is split into what ran (CPU ops, GPU
compute, communication), waiting for peers in a whole-job replay, and the thread's time
between ops (the pieces of enclosing ops, idle time, launch latency).  A node whose start
no predecessor explains (the replay's start-to-start rules) is charged to the gap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from chakra.replay.api import ReplayResult
from chakra.replay.whatif import node_kind
from chakra.schema import METADATA_NODE

CATEGORIES = ("cpu", "gpu", "comm", "peer_wait", "between_ops")
_EPS = 1e-6


@dataclass(slots=True)
class CriticalPath:
    """Time on one rank's critical path, by category, and by op name (own time only)."""

    total_us: float = 0.0
    by_category: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    by_name: Counter[str] = field(default_factory=Counter)
    nodes: list[int] = field(default_factory=list)     # node ids, first to last


def critical_path(res: ReplayResult) -> CriticalPath:
    """The critical path of one replayed rank (see the module doc)."""
    g = res.graph
    n = len(g.ids)
    out = CriticalPath()
    if n == 0:
        return out
    starts, ends = res.starts, res.ends
    index = {nid: i for i, nid in enumerate(g.ids)}
    lanes = g.lanes
    # lane predecessor by replayed start
    by_lane: dict[object, list[int]] = {}
    for i in range(n):
        if lanes[i] is not None:
            by_lane.setdefault(lanes[i], []).append(i)
    lane_prev = [-1] * n
    for seq in by_lane.values():
        seq.sort(key=lambda i: (starts[i], g.ids[i]))
        for a, b in zip(seq, seq[1:]):
            lane_prev[b] = a
    wait_on = g.extra.get("wait_on", {})
    wait_post = g.extra.get("wait_post_us", {})
    cur = max((i for i in range(n) if g.types[i] != METADATA_NODE), key=lambda i: (ends[i], -i), default=-1)
    if cur < 0:
        return out
    out.total_us = max(res.replayed_us, ends[cur])
    out.by_category["between_ops"] += max(0.0, out.total_us - ends[cur])   # tails after the last node
    seen: set[int] = set()
    path: list[int] = []
    while cur >= 0 and cur not in seen:
        seen.add(cur)
        path.append(cur)
        kind = node_kind(g, cur)
        s, e = starts[cur], ends[cur]
        wait = res.comm_wait.get(g.ids[cur], 0.0)
        own = max(0.0, e - s - wait)
        if kind in ("cpu", "gpu", "comm"):
            out.by_category[kind] += own
            out.by_name[g.names[cur]] += own
        out.by_category["peer_wait"] += wait
        best, best_t = -1, -1.0
        cands = [index[d] for d in g.deps[cur] if d in index]
        if lane_prev[cur] >= 0:
            cands.append(lane_prev[cur])
        for u in cands:
            t = ends[u]
            if wait_on.get(cur) == g.ids[u]:
                t += wait_post.get(cur, 0)
            if t <= s + _EPS and t > best_t:
                best, best_t = u, t
        if best < 0:
            out.by_category["between_ops"] += max(0.0, s)
            break
        out.by_category["between_ops"] += max(0.0, s - ends[best])
        cur = best
    out.nodes = [g.ids[i] for i in reversed(path)]
    return out


def compare_paths(before: CriticalPath, after: CriticalPath, top: int = 5) -> dict[str, object]:
    """Category totals before/after and the op names whose time on the path changed most."""
    cats = {c: (before.by_category[c], after.by_category[c]) for c in CATEGORIES}
    names = set(before.by_name) | set(after.by_name)
    moved = sorted(((after.by_name.get(k, 0.0) - before.by_name.get(k, 0.0), k) for k in names),
                   key=lambda x: -abs(x[0]))
    return {"categories": cats, "moved": [(k, d) for d, k in moved[:top] if abs(d) >= 0.5]}


def describe_change(before: CriticalPath, after: CriticalPath, top: int = 5) -> list[str]:
    """Lines: critical path total, per category (before -> after), the ops that moved most."""
    cmp = compare_paths(before, after, top)
    parts = []
    for c, (b, a) in cmp["categories"].items():  # type: ignore[union-attr]
        if b or a:
            parts.append(f"{c} {b:,.0f}->{a:,.0f}")
    lines = [f"critical path {before.total_us:,.0f} -> {after.total_us:,.0f} µs: " + ", ".join(parts)]
    moved: Sequence[tuple[str, float]] = cmp["moved"]  # type: ignore[assignment]
    if moved:
        lines.append("moved most: " + "; ".join(f"{k[:48]} {d:+,.0f} µs" for k, d in moved))
    return lines
