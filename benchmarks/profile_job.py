#!/usr/bin/env python3
"""Where a whole-job replay spends its time and memory, phase by phase.

    python benchmarks/profile_job.py /tmp/chakra_bench_job/r64_L1250_S2_tp8_c100_j10_s1   # a bench_job case
    python benchmarks/profile_job.py DIR --sizes          # + the deep size of every column / job structure
    python benchmarks/profile_job.py DIR --cprofile OUT   # + a cProfile of the whole replay (slower x2)

``DIR`` holds ``tp.<rank>.et`` and ``tp.comm_group.json`` (``bench_job.py --generate-only`` writes them).
The replay is ``chakra.replay.api.replay_job(files, comm_groups=..., allow_missing_ranks=False)``, as
``chakra replay --job`` calls it; the phases are timed by wrapping the library's functions (nothing is
changed): seconds (inclusive: ``couple`` is inside ``job build``) and the growth of the process's RSS
during the phase.  ``--sizes`` then walks the objects that stay alive (the ranks' graphs, the event
loop's arrays, the coupling, the results) and prints bytes per node of each, every object counted once
(interned names, shared lane tuples and cached floats go to the first column that holds them).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

try:
    import chakra  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import chakra.job.match as match_mod
import chakra.replay.api as api
import chakra.replay.coupling as coupling
import chakra.replay.engine as engine

PAGE = 4096
stats: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0.0])   # name -> [s, rss MB, calls, cpu s]
kept: dict[str, Any] = {}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def timed(name: str, fn: Any, keep: str | None = None) -> Any:
    def wrapper(*a: Any, **kw: Any) -> Any:
        r0, t0, c0 = rss_mb(), time.perf_counter(), time.process_time()
        out = fn(*a, **kw)
        s = stats[name]
        s[0] += time.perf_counter() - t0
        s[1] += rss_mb() - r0
        s[2] += 1
        s[3] += time.process_time() - c0
        if keep:
            kept[keep] = a[0] if keep == "self" else out
        return out
    return wrapper


def patch() -> None:
    api.load_job = timed("read (load_job)", api.load_job, keep="graphs")
    api.apply_comm_groups = timed("comm groups", api.apply_comm_groups)
    api.apply_whatif = timed("what-if / comm model", api.apply_whatif)
    api.simulate = timed("simulate", api.simulate)
    engine._resolve_deps = timed("  deps -> indices", engine._resolve_deps)
    engine._topo_order = timed("  lane order (topo)", engine._topo_order)
    engine.rank_plan = timed("  rank plans", engine.rank_plan)
    engine._couple_lanes = timed("  couple (lanes)", engine._couple_lanes)
    engine.build_coupling = timed("    couple: build_coupling", engine.build_coupling, keep="coupling")
    coupling.couple_in_step = timed("      couple_in_step (columns)", coupling.couple_in_step)
    coupling.match_job = timed("      match_job", coupling.match_job)
    match_mod._match_sequences = timed("        _match_sequences", match_mod._match_sequences)
    match_mod._global_order = timed("        _global_order", match_mod._global_order)
    engine.net_durations = timed("    couple: net_durations", engine.net_durations)
    engine.run_lanes = timed("  scheduler (run_lanes)", engine.run_lanes)
    api._results = timed("results (_results)", api._results, keep="results")
    api._coupled_ids = timed("coupled ids", api._coupled_ids)


def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of ``obj`` and everything it holds that ``seen`` does not hold yet (iterative)."""
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif hasattr(o, "__slots__") and not isinstance(o, (str, bytes, int, float)):
            for s in getattr(type(o), "__slots__", ()):
                if hasattr(o, s):
                    stack.append(getattr(o, s))
    return total


def sizes(total_nodes: int) -> list[tuple[str, float]]:
    seen: set[int] = set()
    rows: list[tuple[str, float]] = []
    graphs = kept.get("graphs") or []
    fields = [f for f in api.RankGraph.__slots__ if f not in ("__weakref__",)]
    for f in fields:
        b = sum(deep_size(getattr(g, f), seen) for g in graphs)
        rows.append((f"graph.{f}", b))
    built = kept.get("coupling")
    if built is not None:
        c = built[0]
        for f in c.__slots__:
            rows.append((f"coupling.{f}", deep_size(getattr(c, f), seen)))
        rows.append(("coupling: node -> group", deep_size(built[1], seen)))
    res = kept.get("results") or []
    rows.append(("results (ReplayResult: starts, ends, comm_wait, ...)",
                 sum(deep_size(r, seen) for r in res)))
    return [(name, b) for name, b in rows if b]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--ranks", type=int, default=0, help="only the first N ranks (default all)")
    ap.add_argument("--sizes", action="store_true")
    ap.add_argument("--cprofile", metavar="OUT")
    a = ap.parse_args(argv)
    d = Path(a.dir)
    files = sorted(d.glob("tp.*.et"), key=lambda p: int(p.name.split(".")[1]))
    if a.ranks:
        files = files[:a.ranks]
    patch()
    gc.disable()                      # as the console script does
    r0, t0, c0 = rss_mb(), time.perf_counter(), time.process_time()
    def call() -> Any:
        return api.replay_job([str(f) for f in files], comm_groups=str(d / "tp.comm_group.json"),
                              allow_missing_ranks=bool(a.ranks))

    if a.cprofile:
        import cProfile
        prof = cProfile.Profile()
        res = prof.runcall(call)
        prof.dump_stats(a.cprofile)
    else:
        res = call()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    nodes = sum(r.num_nodes for r in res)
    with open("/proc/self/status") as f:
        hwm = next(int(x.split()[1]) / 1024 for x in f if x.startswith("VmHWM"))
    print(f"{len(files)} ranks, {nodes:,} nodes: {wall:.1f} s, {cpu:.1f} CPU s ({nodes / wall:,.0f} "
          f"nodes/s), RSS {rss_mb() - r0:,.0f} MB grown, peak {hwm:,.0f} MB; {res.groups:,} coupled groups")
    print(f"{'phase':40s} {'s':>8s} {'% wall':>7s} {'CPU s':>8s} {'RSS +MB':>9s} {'calls':>7s}")
    for name, (s, mb, n, c) in stats.items():
        print(f"{name:40s} {s:8.2f} {100 * s / wall:6.1f}% {c:8.2f} {mb:9.0f} {n:7d}")
    if a.sizes:
        print(f"\n{'structure (alive after the replay)':52s} {'MB':>8s} {'B/node':>8s}")
        rows = sizes(nodes)
        for name, b in sorted(rows, key=lambda x: -x[1]):
            print(f"{name:52s} {b / 2**20:8.1f} {b / nodes:8.1f}")
        tot = sum(b for _, b in rows)
        print(f"{'total':52s} {tot / 2**20:8.1f} {tot / nodes:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
