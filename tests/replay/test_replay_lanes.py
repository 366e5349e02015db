"""The lanes-mode scheduler (chakra.replay.lanes) places every node of a rank where a plain fixed point
over the plan's bounds does (tests/helpers/lane_oracle.py), bit for bit, on random ranks: whole or
fractional times, segments or thread timing, with or without a what-if, waits that name later nodes."""

from __future__ import annotations

import random

from helpers.lane_oracle import place

from chakra.errors import ChakraError
from chakra.replay import engine
from chakra.replay.graph import NodeSpec, RankGraph, graph_from_specs
from chakra.replay.plan import rank_plan


def _random_specs(rng: random.Random) -> list[NodeSpec]:
    """A random rank: CPU threads, gloo-like records on them, GPU streams, METADATA nodes, later and
    missing dependencies, cycles; whole or fractional times; some with the converter's thread timing
    (depth, pieces, idle time, waits)."""
    n = rng.choice([2, 5, 20, 100, 300])
    ids = rng.sample(range(1, 3 * n), n)
    frac = rng.random() < 0.4
    timing = rng.random() < 0.4
    specs = []

    def t(x: float) -> float:
        return x + rng.choice([0.0, 0.25, 0.1, 1 / 3]) if frac else x

    for k, nid in enumerate(ids):
        deps = rng.sample(ids[:k], min(k, rng.choice([0, 1, 1, 2, 3])))
        if rng.random() < 0.03 and k + 1 < n:
            deps.append(ids[k + 1])          # a dependency recorded later: the lane order is not the sort
        if rng.random() < 0.003:
            deps.append(nid)                 # a cycle
        start = t(rng.randrange(0, 10 * n)) if rng.random() < 0.9 else 0
        dur = t(rng.choice([0, 1, 2, 5, 10, 50, 200]))
        kind = rng.random()
        if kind < 0.5:
            spec = NodeSpec(id=nid, duration=dur, deps=deps, tid=rng.choice([1, 2]), start=start)
        elif kind < 0.6:                     # a gloo-like record on a host thread
            spec = NodeSpec(id=nid, duration=dur, deps=deps, is_cpu=False, start=start,
                            lane=("cpu", rng.choice([1, 2])), type=rng.choice([4, 7]))
        elif kind < 0.95:
            spec = NodeSpec(id=nid, duration=dur, deps=deps, is_cpu=False, stream=rng.choice([7, 8]),
                            start=start, type=rng.choice([4, 4, 7]))
        else:
            spec = NodeSpec(id=nid, duration=dur, deps=deps, type=1, start=start)
        if timing and spec.type != 1:
            spec.depth = rng.choice([0, 0, 1, 2])
            spec.work_before = t(rng.choice([0, 0, 1, 3]))
            spec.tail = t(rng.choice([0, 0, 2]))
            spec.idle_before = t(rng.choice([0, 0, 0, 5]))
            if deps and rng.random() < 0.3:
                spec.wait_on = rng.choice(deps)
                spec.wait_post = t(rng.choice([0, 1]))
            spec.frees_thread = rng.random() < 0.05
        specs.append(spec)
    if rng.random() < 0.3:
        for s in specs:
            s.start = 0
    return specs


def _whatif(g: RankGraph, rng: random.Random) -> None:
    """A what-if on some nodes: a factor on all of their own time, a delay added."""
    n = len(g.ids)
    if rng.random() < 0.5:
        g.factor = [rng.choice([1.0, 1.0, 0.5, 2.0, 1.3]) for _ in range(n)]
    if rng.random() < 0.5:
        g.delay = [rng.choice([0.0, 0.0, 0.0, 3.0, 0.7]) for _ in range(n)]


def _oracle(g: RankGraph, gaps: bool, missing: str) -> tuple[str, ...]:
    try:
        deps = engine._resolve_deps(g, missing)
        order = engine._topo_order(g, deps)
    except ChakraError:
        return ("error",)
    start, end = place(rank_plan(g, deps, order, gaps), order)
    if None in end:
        return ("stalled",)
    return repr(start), repr(end)


def _engine(g: RankGraph, gaps: bool, missing: str) -> tuple[str, ...]:
    try:
        out = engine.simulate([g], gaps=gaps, missing=missing)
    except ChakraError as exc:
        return ("stalled",) if "stalled" in str(exc) else ("error",)
    return repr(out.starts), repr(out.ends)


def test_lanes_scheduler_equals_the_fixed_point() -> None:
    seen: dict[str, int] = {"times": 0, "error": 0, "stalled": 0, "waits later": 0}
    for seed in range(150):
        rng = random.Random(seed)
        g = graph_from_specs(_random_specs(rng))
        if rng.random() < 0.5:
            _whatif(g, rng)
        for gaps, missing in ((True, "ignore"), (False, "error")):
            want = _oracle(g, gaps, missing)
            assert _engine(g, gaps, missing) == want, (seed, gaps, missing)
            seen["times" if len(want) == 2 else want[0]] += 1
            if len(want) == 2:
                deps = engine._resolve_deps(g, missing)
                order = engine._topo_order(g, deps)
                pos = {i: k for k, i in enumerate(order)}
                plan = rank_plan(g, deps, order, gaps)
                later = (pos[u] > pos[i] for i, pairs in plan.after.items() for u, _ in pairs)
                seen["waits later"] += any(later)
    # every kind of rank came up: placed, refused (a cycle, a missing id), and with a wait on a later node
    assert seen["times"] > 150 and seen["error"] > 20 and seen["waits later"] > 0, seen
