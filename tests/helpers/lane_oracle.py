"""A plain lanes-mode scheduler for one rank: the oracle :func:`chakra.replay.lanes.run_lanes` is compared
with on random graphs (tests/replay/test_replay_lanes.py).  It is not used by the package.

It reads the bounds of a :class:`chakra.replay.plan.Plan` as the engine's docstring states them and takes
them as a fixed point: sweep the nodes again and again, placing every node whose bounds name only placed
nodes, until a sweep places nothing.  No walk order, no waiting lists, no short way.
"""

from __future__ import annotations

from chakra.replay.plan import Plan


def place(plan: Plan, order: list[int], base: float = 0.0) -> tuple[list[float | None], list[float | None]]:
    """Start and end of each node (None: never placed, a deadlock).  ``order``: the sweep order (any
    order gives the same times; the lane order needs the fewest sweeps)."""
    n = len(plan.rd)
    start: list[float | None] = [None] * n
    end: list[float | None] = [None] * n
    progress = True
    while progress:
        progress = False
        for i in order:
            if start[i] is None:
                start[i] = _start(plan, i, base, start, end)
                progress |= start[i] is not None
            if start[i] is not None and end[i] is None:
                end[i] = _end(plan, i, start[i], end)
                progress |= end[i] is not None
    return start, end


def _start(plan: Plan, i: int, base: float, start: list[float | None], end: list[float | None]
           ) -> float | None:
    bounds = [base + plan.first.get(i, 0.0) if i in plan.first else base]
    bounds += [end[j] for j in plan.deps[i]]
    p = plan.lane_prev[i]
    if p >= 0:
        if p in plan.release:
            free = None if start[p] is None else start[p] + plan.release[p]
        else:
            free = end[p]
        bounds.append(None if free is None else free + plan.gap[i])
    bounds += [None if end[u] is None else end[u] + delay for u, delay in plan.after.get(i, ())]
    bounds += [None if start[u] is None else start[u] + offset for u, _tail, offset in plan.waits.get(i, ())]
    return None if None in bounds else max(bounds)


def _end(plan: Plan, i: int, s: float, end: list[float | None]) -> float | None:
    bounds = [s + plan.ff_min.get(i, plan.rd[i])]
    bounds += [None if end[u] is None else end[u] + tail
               for u, tail, _offset in plan.waits.get(i, ()) if tail is not None]
    return None if None in bounds else max(bounds)
