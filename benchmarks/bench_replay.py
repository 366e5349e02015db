#!/usr/bin/env python3
"""Replay throughput (nodes per second).

    python benchmarks/bench_replay.py                 # synthetic 1M-node graph
    python benchmarks/bench_replay.py --nodes 200000  # smaller
    python benchmarks/bench_replay.py --dlrm          # + the DLRM corpus (link + convert first)
    python benchmarks/bench_replay.py --et a.0.et b.1.et   # + any Chakra ETs (per rank and whole job)

Each phase is timed separately: reading protobuf nodes into the replay's columns,
and the event-driven replay itself.  Besides nodes/s the suite prints the ratio to
a plain Python loop over the same nodes (sum of durations), so numbers from
different machines compare.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tempfile
import time
from pathlib import Path

try:
    import chakra  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chakra.replay.engine import simulate
from chakra.replay.reader import graph_from_protobuf, load_graph
from chakra.schema import COMM_COLL_NODE, COMP_NODE, AttributeProto, GlobalMetadata, Node


def _attr(name: str, **kw) -> AttributeProto:
    a = AttributeProto(name=name)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def synthetic(n: int, seed: int = 1) -> list[Node]:
    """A training-step-like graph: 2 CPU threads with nested ops, 2 GPU streams, a collective every 500 ops.

    Per thread: top-level ops each with 2 children (ctrl dep on the parent, data dep on the previous op of
    the thread); every launcher-like child launches a kernel on a stream (dep on the launcher).
    """
    rng = random.Random(seed)
    nodes: list[Node] = []
    clock = {1: 0, 2: 0}
    prev = {1: 0, 2: 0}
    nid = 0
    while len(nodes) < n:
        tid = 1 if rng.random() < 0.8 else 2
        nid += 1
        parent = nid
        t = clock[tid] + rng.randint(0, 20)
        excl = rng.randint(1, 10)
        p = Node(id=parent, name="aten::op", type=COMP_NODE, start_time_micros=t, duration_micros=excl)
        if prev[tid]:
            p.data_deps.append(prev[tid])
        p.attr.extend([_attr("is_cpu_op", bool_val=True), _attr("tid", int64_val=tid)])
        nodes.append(p)
        t += excl
        last = parent
        for _ in range(2):
            nid += 1
            d = rng.randint(1, 8)
            c = Node(id=nid, name="cudaLaunchKernel", type=COMP_NODE, start_time_micros=t, duration_micros=d)
            c.ctrl_deps.append(parent)
            c.data_deps.append(last)
            c.attr.extend([_attr("is_cpu_op", bool_val=True), _attr("tid", int64_val=tid)])
            nodes.append(c)
            launcher = nid
            nid += 1
            coll = nid % 500 == 0
            k = Node(id=nid, name="ncclKernel_AllReduce" if coll else "kernel",
                     type=COMM_COLL_NODE if coll else COMP_NODE, start_time_micros=t + d,
                     duration_micros=rng.randint(2, 40))
            k.ctrl_deps.append(launcher)
            k.attr.extend([_attr("is_cpu_op", bool_val=False), _attr("stream", int64_val=7 + (nid % 2)),
                           _attr("device", int64_val=0)])
            nodes.append(k)
            t += d
            last = launcher
        clock[tid] = t
        prev[tid] = last
    return nodes[:n] if len(nodes) == n else _trim(nodes, n)


def _trim(nodes: list[Node], n: int) -> list[Node]:
    keep = nodes[:n]
    ids = {x.id for x in keep}
    for x in keep:
        for field in (x.ctrl_deps, x.data_deps):
            kept = [d for d in field if d in ids]
            del field[:]
            field.extend(kept)
    return keep


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_nodes(label: str, nodes: list[Node], repeat: int) -> None:
    n = len(nodes)
    t_base, _ = _best(lambda: sum(x.duration_micros for x in nodes), repeat)
    t_load, g = _best(lambda: graph_from_protobuf(nodes, GlobalMetadata(version="0.0.4")), repeat)
    print(f"{label}: {n:,} nodes")
    print(f"  baseline loop (sum of durations)   {t_base:8.3f} s")
    print(f"  protobuf -> replay columns          {t_load:8.3f} s  {n / t_load:12,.0f} nodes/s  "
          f"ratio {t_load / t_base:6.1f}x baseline")
    for mode in ("lanes", "astrasim"):
        t_sim, out = _best(lambda mode=mode: simulate([g], mode=mode), repeat)
        end = max(out.ends)  # type: ignore[attr-defined]
        print(f"  replay mode={mode:<9}               {t_sim:8.3f} s  {n / t_sim:12,.0f} nodes/s  "
              f"ratio {t_sim / t_base:6.1f}x baseline  (replayed {end:,.0f} us)")


def phases(path: Path) -> None:
    """Where one file's replay spends its time: read (columns), finish (id order, lanes), dependencies,
    lane order, plan, the lanes pass, completion lines (CPU seconds of this process, the GC paused as
    the replay does; the last is timed on a second replay of the same graph).  The read runs in
    ``forkmap.parts()`` processes (``CHAKRA_PARTS``): its wall time is printed too, and its CPU seconds
    here are those of the first span only."""
    from chakra.io import gc_paused
    from chakra.io.forkmap import parts as n_parts
    from chakra.replay import engine, plan
    from chakra.replay.api import replay_rank
    from chakra.replay.lanes import run_lanes
    from chakra.replay.reader import graph_from_columns, read_columns

    clock = time.process_time
    with gc_paused():
        t = [clock()]
        wall = time.perf_counter()
        cols = read_columns(path)
        wall = time.perf_counter() - wall
        t.append(clock())
        g = graph_from_columns(cols)
        t.append(clock())
        deps = engine._resolve_deps(g, "error")
        t.append(clock())
        order = engine._topo_order(g, deps)
        t.append(clock())
        p = plan.rank_plan(g, deps, order, True)
        t.append(clock())
        run_lanes([p], [order], [0, len(order)], [0.0])
        t.append(clock())
        result = replay_rank(g)              # (the same steps again: not timed)
        t.append(clock())
        lines = sum(1 for _ in result.completion_lines())
        t.append(clock())
    spans = [b - a for a, b in zip(t, t[1:])]
    del spans[-2]                            # (the second replay)
    names = ("read", "finish", "deps", "lane order", "plan", "pass", "completion lines")
    parts = ", ".join(f"{name} {span:.2f}" for name, span in zip(names, spans))
    print(f"  {path.name}: {len(g):,} nodes, {lines:,} lines; read {wall:.2f} s wall in {n_parts()} part(s); "
          f"CPU s: {parts}")


def bench_files(label: str, paths: list[Path], repeat: int) -> None:
    from chakra.replay.api import replay_job

    for p in paths:
        phases(p)
    t_read, graphs = _best(lambda: [load_graph(p) for p in paths], 1)
    n = sum(len(g) for g in graphs)  # type: ignore[union-attr]
    print(f"{label}: {len(paths)} file(s), {n:,} nodes; read + columns {t_read:.3f} s "
          f"({n / t_read:,.0f} nodes/s)")
    t_pb, _ = _best(lambda: [_via_messages(p) for p in paths], 1)
    print(f"  read via protobuf Node messages (graph_from_protobuf) {t_pb:.3f} s: "
          f"the batched reader takes {t_read / t_pb:.2f}x that")
    for couple in (False, True):
        try:
            t, job = _best(lambda couple=couple: replay_job(graphs, couple=couple), repeat)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports and goes on
            print(f"  {'whole job' if couple else 'per rank '}: {exc}")
            continue
        worst = max((abs(r.error_pct) for r in job if r.error_pct is not None), default=float("nan"))
        print(f"  {'whole job' if couple else 'per rank '}: {t:.3f} s  {n / t:12,.0f} nodes/s  "
              f"max |error| vs measured {worst:.2f}%")


def _via_messages(path: Path):
    """The plain way to the same RankGraph: every Node message decoded, then its fields read."""
    import os

    from chakra.io import read_messages
    from chakra.io.naming import rank_from_filename

    meta, nodes = read_messages(path, GlobalMetadata, Node)
    return graph_from_protobuf(nodes, meta, path=os.fspath(path), rank=rank_from_filename(path))


def dlrm_ets(corpus: Path, out: Path) -> list[Path]:
    """Link + convert the 8 DLRM ranks into ``out`` (needs chakra.link and chakra.convert)."""
    from chakra.convert import convert_file

    try:
        from chakra.link import link_files
    except ImportError:
        from chakra.link.api import link_files

    ets = []
    for r in range(8):
        et = out / f"dlrm.{r}.et"
        if not et.exists():
            plus = out / f"dlrm_plus_{r}.json"
            link_files(corpus / "dlrm_8r_v100" / "host" / f"host_et_{r}.json.gz",
                       corpus / "dlrm_8r_v100" / "device" / f"kineto_{r}.json.gz", plus, rank=r)
            convert_file(plus, et)
        ets.append(et)
    return ets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dlrm", action="store_true", help="also link+convert+replay the DLRM corpus")
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    ap.add_argument("--et", nargs="*", default=[], help="Chakra ET files to replay (one per rank)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    nodes = synthetic(args.nodes)
    print(f"generated {len(nodes):,} synthetic nodes in {time.perf_counter() - t0:.1f} s")
    bench_nodes("synthetic", nodes, args.repeat)
    del nodes
    if args.et:
        bench_files("given ETs", [Path(p) for p in args.et], args.repeat)
    if args.dlrm:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                ets = dlrm_ets(Path(args.corpus), Path(tmp))
            except ImportError as exc:
                print(f"DLRM: skipped, link/convert not available ({exc})")
                return 0
            bench_files("DLRM 8 ranks", ets, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
