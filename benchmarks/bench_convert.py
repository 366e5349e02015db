"""Benchmark of the converter on synthetic ET+ traces (and optionally a real file).

    python benchmarks/bench_convert.py                 # 62.5k, 250k and 1M nodes
    python benchmarks/bench_convert.py --nodes 100000 --nodes 400000
    python benchmarks/bench_convert.py --file ../shared/traces/dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz

Reports seconds per stage, on the path ``convert_file`` takes (load = ``convert.columns.load_columns``:
each node read by the host loader and put into per-node columns and pre-serialised pieces, in
``chakra.io.forkmap.parts()`` pieces (CHAKRA_PARTS=1: one process); synthetic traces are written to a
temporary JSON file first;
passes = tree, timing, comm, deps, thread timing, cycle check; build+write = the node messages assembled
from their pieces and written, in ``parts()`` ranges too),
µs per node, peak RSS, and the ratio of per-node cost between the largest and
smallest size (near 1.0 means linear scaling).  Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import orjson  # noqa: E402

from chakra.convert.columns import load_columns  # noqa: E402
from chakra.convert.core import stream_serialized  # noqa: E402
from chakra.convert.driver import write_et  # noqa: E402
from chakra.io.forkmap import parts  # noqa: E402


def synthetic_etplus(n_nodes: int, threads: int = 4) -> dict:
    """A flat-layout ET+ of about ``n_nodes`` nodes: per step, a module op with 3 aten children, a kernel
    per child, and every 50th step an all_reduce (record_param_comms > nccl:all_reduce > NCCL kernel)."""
    nodes: list[dict] = [{"name": "[pytorch|profiler|execution_trace|process]", "id": 1, "rf_id": 0,
                          "parent": 1, "tid": 0, "inputs": [], "input_shapes": [], "input_types": [],
                          "outputs": [], "output_shapes": [], "output_types": []}]
    nid = 2
    rf = 1
    ts = 1000.0
    roots = []
    for t in range(threads):
        roots.append(nid)
        nodes.append({"name": "[pytorch|profiler|execution_trace|thread]", "id": nid, "rf_id": rf,
                      "parent": 1, "tid": t + 1, "inputs": [], "input_shapes": [], "input_types": [],
                      "outputs": [], "output_shapes": [], "output_types": [], "ts": ts, "dur": 1e9})
        nid += 1
        rf += 1
    tensor = [100, 101, 0, 4096, 4, "cuda:0"]
    step = 0
    while len(nodes) < n_nodes:
        t = step % threads
        mod = nid
        nodes.append({"name": "nn.Module: Linear", "id": mod, "rf_id": rf, "parent": roots[t], "tid": t + 1,
                      "op_schema": "", "inputs": [tensor], "input_shapes": [[64, 64]],
                      "input_types": ["Tensor(float)"], "outputs": [tensor], "output_shapes": [[64, 64]],
                      "output_types": ["Tensor(float)"], "ts": ts, "dur": 30.0})
        nid += 1
        rf += 1
        for k in range(3):
            op = nid
            nodes.append({"name": f"aten::op{k}", "id": op, "rf_id": rf, "parent": mod, "tid": t + 1,
                          "op_schema": f"aten::op{k}(Tensor self) -> Tensor", "inputs": [tensor],
                          "input_shapes": [[64, 64]], "input_types": ["Tensor(float)"], "outputs": [tensor],
                          "output_shapes": [[64, 64]], "output_types": ["Tensor(float)"],
                          "ts": ts + 1 + 9 * k, "dur": 8.0})
            nodes.append({"id": op + 1, "name": f"kernel_{k}", "cat": "kernel", "ph": "X",
                          "ts": ts + 5 + 9 * k, "dur": 7.0, "stream": 7, "device": 0, "tid": 7,
                          "args": {"stream": 7, "correlation": op}, "parent": op, "inputs": [tensor],
                          "input_shapes": [[64, 64]], "input_types": ["Tensor(float)"], "outputs": [],
                          "output_shapes": [], "output_types": []})
            nid += 2
            rf += 1
        if step % 50 == 0:
            rpc, nccl, ker = nid, nid + 1, nid + 2
            nodes.append({"name": "record_param_comms", "id": rpc, "rf_id": rf, "parent": roots[t],
                          "tid": t + 1, "inputs": [[tensor], step, 5, 0, "allreduce", [], []],
                          "input_shapes": [], "input_types": [], "outputs": [], "output_shapes": [],
                          "output_types": [], "ts": ts + 31, "dur": 6.0})
            nodes.append({"name": "nccl:all_reduce", "id": nccl, "rf_id": rf + 1, "parent": rpc, "tid": t + 1,
                          "inputs": [tensor], "input_shapes": [[4096]], "input_types": ["Tensor(float)"],
                          "outputs": [], "output_shapes": [], "output_types": [], "ts": ts + 32, "dur": 4.0})
            nodes.append({"id": ker, "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cat": "kernel",
                          "ph": "X", "ts": ts + 40, "dur": 20.0, "stream": 20, "device": 0, "tid": 20,
                          "args": {"stream": 20}, "parent": nccl, "inputs": [tensor], "input_shapes": [],
                          "input_types": [], "outputs": [], "output_shapes": [], "output_types": []})
            nid += 3
            rf += 2
        ts += 40.0
        step += 1
    return {"schema": "1.0.1", "pid": 1, "time": "t", "start_ts": 0, "finish_ts": 0, "nodes": nodes,
            "rank": 0, "world_size": 8,
            "measured": {"window": "span", "start_us": 1000.0, "dur_us": ts - 1000.0, "steps": []}}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def children_rss_mb() -> float:
    """Peak RSS of the largest forked helper so far (the load decodes its nodes in ``parts()`` pieces)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def run(data_or_path, label: str) -> dict:
    gc.collect()
    with tempfile.TemporaryDirectory() as d:
        path = data_or_path
        if not isinstance(path, (str, Path)):
            path = os.path.join(d, "in.json")
            with open(path, "wb") as fh:
                fh.write(orjson.dumps(data_or_path))
        gc.disable()
        t0 = time.perf_counter()
        trace, cols, ser = load_columns(path)
        t1 = time.perf_counter()
        # the passes and checks; nodes are assembled while written (in parts: convert.write.SerialNodes)
        meta, write_nodes, stats = stream_serialized(trace, columns=cols, serializer=ser)
        del trace, cols, ser
        t2 = time.perf_counter()
        out = os.path.join(d, "out.et")
        write_et(out, meta, write_nodes)
        size = os.path.getsize(out)
        t3 = time.perf_counter()
        gc.enable()
    n = stats.nodes
    row = {"label": label, "nodes": n, "load_s": t1 - t0, "plan_s": t2 - t1, "build_write_s": t3 - t2,
           "us_per_node": 1e6 * (t3 - t1) / max(n, 1), "mb": size / 1e6, "rss_mb": rss_mb(),
           "comm": stats.comm_nodes, "children_rss_mb": children_rss_mb()}
    print(f"{label:>28} {n:>9} nodes  load {row['load_s']:6.2f}s  passes {row['plan_s']:6.2f}s  "
          f"build+write {row['build_write_s']:5.2f}s  {row['us_per_node']:5.1f} us/node  "
          f"{row['mb']:7.1f} MB  peak RSS {row['rss_mb']:7.0f} MB (helpers {row['children_rss_mb']:.0f} MB)  "
          f"comm {row['comm']}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, action="append", help="synthetic sizes (repeatable)")
    ap.add_argument("--file", action="append", default=[], help="real ET+ / host ET files to time")
    args = ap.parse_args(argv)
    print(f"parts (chakra.io.forkmap; CHAKRA_PARTS=1 for one process): {parts()}")
    for f in args.file:
        run(f, Path(f).name)
    sizes = args.nodes or ([] if args.file else [62_500, 250_000, 1_000_000])
    rows = []
    for n in sizes:
        data = synthetic_etplus(n)
        rows.append(run(data, f"synthetic {n}"))
        del data
    if len(rows) >= 2:
        lo, hi = rows[0], rows[-1]
        ratio = hi["us_per_node"] / lo["us_per_node"]
        print(f"per-node cost ratio {hi['nodes']} vs {lo['nodes']} nodes: {ratio:.2f} (1.0 = linear)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
