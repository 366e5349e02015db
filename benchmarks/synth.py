"""Synthetic host ET + Kineto trace pairs of any size, for the link/convert/replay benchmarks.

``generate(n_ops, out_dir, ranks=1, seed=0) -> list[(host_path, kineto_path)]`` writes
``host_et_R.json`` + ``kineto_R.json`` per rank (``.json.gz`` with ``compress=True``).

What a rank looks like (one ``ProfilerStep#N`` per iteration, as many iterations
as needed to reach ``n_ops`` host operator nodes, about 1,000 ops each):

- main thread: ``ProfilerStep#N`` > ``## zero_grad ##`` (fill kernels), ``## forward ##``
  (an input ``aten::copy_`` with a ``cudaMemcpyAsync``; per layer ``aten::linear`` >
  ``aten::t`` > ``aten::transpose`` > ``aten::as_strided`` and ``aten::addmm`` (a GEMM
  kernel), ``aten::relu`` > ``aten::clamp_min`` (an elementwise kernel)), ``## backward ##``
  (the main thread waits while the autograd thread works), ``## optimizer ##``
  (``Optimizer.step#SGD.step`` > one ``aten::add_`` kernel per layer; a zeroing
  ``cudaMemsetAsync``), ``aten::item`` > ``aten::_local_scalar_dense`` (a device-to-host
  copy then ``cudaStreamSynchronize``) and a ``cudaDeviceSynchronize`` at the end of the step;
- autograd thread: per layer ``autograd::engine::evaluate_function: AddmmBackward0`` >
  ``AddmmBackward0`` > two ``aten::mm`` and an ``aten::sum`` (kernels); every fourth layer a
  gradient bucket ``c10d::allreduce_`` > ``record_param_comms`` > ``nccl:all_reduce`` that
  launches ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` on the stream of one of three process
  groups (``0`` = world, ``1`` = even/odd halves, ``2`` = pairs);
- compute kernels on stream 7, copies on stream 7, collectives on streams 20, 21, 22.

The host ET uses the flat 1.0.1 layout by default (``layout="chakra"`` writes
1.1.1-chakra.0.0.4 with ``record_param_comms`` attrs) and includes a
``## process_group:init ##`` node.  The Kineto trace carries ``External id`` only
(an id offset from the host ``rf_id``), so the linker must align names;
``rf_ids=True`` adds ``Record function id``.  ``drop_rate`` removes that fraction
of the Kineto ``cpu_op`` events and ``extra_rate`` adds Kineto-only ``aten::empty``
events, to exercise the tolerant alignment.  Everything is deterministic in ``seed``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chakra.io import dump_json  # noqa: E402

OPS_PER_LAYER_ESTIMATE = 16
LAYERS = 64
COMPUTE_STREAM = 7
PG_STREAMS = {"0": 20, "1": 21, "2": 22}
T0 = 1_700_000_000_000_000.0  # µs, Kineto clock


class _Rank:
    """Builds one rank's host nodes and Kineto events while walking the iterations."""

    def __init__(
        self,
        rank: int,
        world: int,
        seed: int,
        layout: str,
        rf_ids: bool,
        drop_rate: float,
        extra_rate: float,
        kernels_per_leaf: float = 1.0,
    ) -> None:
        self.rank = rank
        self.world = world
        self.rng = random.Random(seed * 1_000_003 + rank)
        self.layout = layout
        self.rf_ids = rf_ids
        self.drop_rate = drop_rate
        self.extra_rate = extra_rate
        self.pid = 10_000 + rank
        self.ktid = {1: self.pid, 2: self.pid + 17}
        self.next_id = 5  # 1 process root, 2/3 thread roots, 4 process_group:init
        self.next_rf = 2  # rf 1 is process_group:init
        self.ext_offset = 1 + rank  # Kineto External id = rf_id + offset (an offset, not equality)
        self.corr = 100_000
        self.clock = {1: T0 + 50.0, 2: T0 + 50.0}
        self.stream_free: dict[int, float] = {}
        self.stack: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        self.nodes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.host_ops = 0
        self.seq = 0
        self.kernels_per_leaf = kernels_per_leaf
        self.kernel_credit = 0.0

    # ---- helpers ----------------------------------------------------------------------------------
    def _tensor(self, numel: int) -> list[Any]:
        tid = self.next_id
        self.next_id += 1
        return [tid, tid, 0, numel, 4, f"cuda:{self.rank}"]

    def begin(
        self,
        tid: int,
        name: str,
        cat: str = "cpu_op",
        inputs: list[Any] | None = None,
        types: list[str] | None = None,
        parent: int | None = None,
    ) -> dict[str, Any]:
        stack = self.stack[tid]
        nid = self.next_id
        self.next_id += 1
        rf = self.next_rf
        self.next_rf += 1
        self.clock[tid] += self.rng.uniform(0.5, 3.0)
        if parent is None:
            parent = stack[-1]["id"] if stack else (2 if tid == 1 else 3)
        op = {
            "name": name,
            "id": nid,
            "rf_id": rf,
            "parent": parent,
            "tid": tid,
            "cat": cat,
            "ts": self.clock[tid],
            "inputs": inputs or [],
            "types": types or [],
            "outputs": [],
            "otypes": [],
        }
        stack.append(op)
        self.host_ops += 1
        return op

    def end(self, tid: int, outputs: list[Any] | None = None) -> dict[str, Any]:
        op = self.stack[tid].pop()
        self.clock[tid] += self.rng.uniform(0.5, 2.0)
        op["dur"] = self.clock[tid] - op["ts"]
        if outputs:
            op["outputs"] = outputs
            op["otypes"] = ["Tensor(float)"] * len(outputs)
        self._emit(op)
        return op

    def _emit(self, op: dict[str, Any]) -> None:
        shapes = [[v[3]] if isinstance(v, list) and len(v) == 6 else [] for v in op["inputs"]]
        oshapes = [[v[3]] for v in op["outputs"]]
        if self.layout == "flat":
            self.nodes.append(
                {
                    "name": op["name"],
                    "id": op["id"],
                    "rf_id": op["rf_id"],
                    "parent": op["parent"],
                    "fw_parent": 0,
                    "seq_id": -1,
                    "scope": 0,
                    "tid": op["tid"],
                    "fw_tid": 0,
                    "op_schema": "",
                    "inputs": op["inputs"],
                    "input_shapes": shapes,
                    "input_types": op["types"],
                    "outputs": op["outputs"],
                    "output_shapes": oshapes,
                    "output_types": op["otypes"],
                }
            )
        else:
            attrs = [
                {"name": "rf_id", "type": "uint64", "value": op["rf_id"]},
                {"name": "fw_parent", "type": "uint64", "value": 0},
                {"name": "seq_id", "type": "int64", "value": -1},
                {"name": "scope", "type": "uint64", "value": 0},
                {"name": "tid", "type": "uint64", "value": op["tid"]},
                {"name": "fw_tid", "type": "uint64", "value": 0},
                {"name": "op_schema", "type": "string", "value": ""},
            ]
            attrs.extend(op.get("attrs", ()))
            self.nodes.append(
                {
                    "id": op["id"],
                    "name": op["name"],
                    "ctrl_deps": op["parent"],
                    "inputs": {"values": op["inputs"], "shapes": shapes, "types": op["types"]},
                    "outputs": {"values": op["outputs"], "shapes": oshapes, "types": op["otypes"]},
                    "attrs": attrs,
                }
            )
        if op["cat"] == "cpu_op" and self.rng.random() < self.drop_rate:
            return
        args: dict[str, Any] = {"External id": op["rf_id"] + self.ext_offset}
        if self.rf_ids:
            args["Record function id"] = op["rf_id"]
        self.events.append(
            {
                "ph": "X",
                "cat": op["cat"],
                "name": op["name"],
                "pid": self.pid,
                "tid": self.ktid[op["tid"]],
                "ts": op["ts"],
                "dur": op["dur"],
                "args": args,
            }
        )
        if self.extra_rate and self.rng.random() < self.extra_rate:
            self.events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::empty",
                    "pid": self.pid,
                    "tid": self.ktid[op["tid"]],
                    "ts": op["ts"] + op["dur"] + 0.1,
                    "dur": 0.0,
                    "args": {},
                }
            )

    def runtime(self, tid: int, name: str, dur: float, corr: int | None = None) -> tuple[float, int]:
        self.clock[tid] += self.rng.uniform(0.3, 1.0)
        ts = self.clock[tid]
        if corr is None:
            self.corr += 1
            corr = self.corr
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self.pid,
                "tid": self.ktid[tid],
                "ts": ts,
                "dur": dur,
                "args": {"External id": corr, "cbid": 211, "correlation": corr},
            }
        )
        self.clock[tid] += dur
        return ts, corr

    def launch(
        self,
        tid: int,
        kname: str,
        dur: float,
        stream: int = COMPUTE_STREAM,
        cat: str = "kernel",
        api: str = "cudaLaunchKernel",
        extra: dict[str, Any] | None = None,
    ) -> None:
        ts, corr = self.runtime(tid, api, self.rng.uniform(3.0, 6.0))
        start = max(ts + self.rng.uniform(2.0, 6.0), self.stream_free.get(stream, 0.0))
        self.stream_free[stream] = start + dur
        args = {
            "External id": corr,
            "queued": 0,
            "device": self.rank,
            "context": 1,
            "stream": stream,
            "correlation": corr,
        }
        if extra:
            args.update(extra)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": kname,
                "pid": self.rank,
                "tid": stream,
                "ts": start,
                "dur": dur,
                "args": args,
            }
        )

    def sync(self, tid: int, name: str, stream: int | None) -> None:
        now = self.clock[tid] + 0.5
        free = (
            max(self.stream_free.values(), default=now)
            if stream is None
            else self.stream_free.get(stream, now)
        )
        self.runtime(tid, name, max(0.0, free - now) + self.rng.uniform(1.0, 3.0))

    def leaf(
        self,
        tid: int,
        name: str,
        kernel: str | None = None,
        kdur: float = 0.0,
        inputs: list[Any] | None = None,
    ) -> None:
        self.begin(tid, name, inputs=inputs, types=["Tensor(float)"] * len(inputs or []))
        if kernel:
            # kernels_per_leaf > 1: extra launches (split-K reductions, epilogues), spread evenly
            self.kernel_credit += self.kernels_per_leaf
            n = int(self.kernel_credit)
            self.kernel_credit -= n
            for k in range(max(n, 1)):
                self.launch(tid, kernel if k == 0 else f"{kernel}_part{k}", kdur)
        self.clock[tid] += self.rng.uniform(1.0, 4.0)
        self.end(tid, [self._tensor(1024)] if kernel else None)

    # ---- one iteration ------------------------------------------------------------------------------
    def step(self, n: int) -> None:
        rng = self.rng
        self.begin(1, f"ProfilerStep#{n}", "user_annotation")
        self.begin(1, "## zero_grad ##", "user_annotation")
        for _ in range(2):
            self.begin(1, "aten::zero_")
            self.leaf(
                1,
                "aten::fill_",
                "void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>",
                rng.uniform(2, 5),
            )
            self.end(1)
        self.end(1)
        self.begin(1, "## forward ##", "user_annotation")
        x = self._tensor(16 * 1024)
        self.begin(1, "aten::copy_", inputs=[x], types=["Tensor(float)"])
        self.launch(
            1, "Memcpy HtoD (Pinned -> Device)", rng.uniform(3, 8), cat="gpu_memcpy", api="cudaMemcpyAsync"
        )
        self.end(1, [x])
        for _layer in range(LAYERS):
            self.begin(1, "aten::linear")
            self.begin(1, "aten::t")
            self.begin(1, "aten::transpose")
            self.leaf(1, "aten::as_strided")
            self.end(1)
            self.end(1)
            self.leaf(
                1, "aten::addmm", "volta_sgemm_128x64_tn", rng.uniform(8, 40), inputs=[self._tensor(1024)]
            )
            self.end(1)
            self.begin(1, "aten::relu")
            self.leaf(
                1,
                "aten::clamp_min",
                "void at::native::vectorized_elementwise_kernel<4, clamp_min>",
                rng.uniform(2, 6),
            )
            self.end(1)
        self.end(1)
        # backward: the main thread sits in "## backward ##" while the autograd thread works
        bw = self.begin(1, "## backward ##", "user_annotation")
        self.clock[2] = max(self.clock[2], self.clock[1] + rng.uniform(20, 60))
        for layer in range(LAYERS):
            self.begin(2, "autograd::engine::evaluate_function: AddmmBackward0")
            self.begin(2, "AddmmBackward0")
            self.leaf(2, "aten::mm", "volta_sgemm_64x64_nn", rng.uniform(8, 30))
            self.leaf(2, "aten::mm", "volta_sgemm_64x64_nt", rng.uniform(8, 30))
            self.leaf(2, "aten::sum", "void at::native::reduce_kernel<512, 1>", rng.uniform(3, 8))
            self.end(2)
            self.end(2)
            if layer % 4 == 3:
                self._allreduce(layer)
        self.clock[1] = self.clock[2] + rng.uniform(5, 20)
        self.end(1)
        del bw
        self.begin(1, "## optimizer ##", "user_annotation")
        self.begin(1, "Optimizer.step#SGD.step", "user_annotation")
        for _layer in range(LAYERS):
            self.leaf(
                1,
                "aten::add_",
                "void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>",
                rng.uniform(2, 6),
            )
        self.begin(1, "aten::zero_")
        self.launch(1, "Memset (Device)", rng.uniform(1, 3), cat="gpu_memset", api="cudaMemsetAsync")
        self.end(1)
        self.end(1)
        self.end(1)
        self.begin(1, "aten::item")
        self.begin(1, "aten::_local_scalar_dense")
        self.launch(
            1, "Memcpy DtoH (Device -> Pageable)", rng.uniform(1, 3), cat="gpu_memcpy", api="cudaMemcpyAsync"
        )
        self.sync(1, "cudaStreamSynchronize", COMPUTE_STREAM)
        self.end(1)
        self.end(1)
        self.begin(1, "## sync ##", "user_annotation")
        self.sync(1, "cudaDeviceSynchronize", None)
        self.end(1)
        self.end(1)

    def _allreduce(self, layer: int) -> None:
        rng = self.rng
        pg = str((layer // 4) % 3)
        size = {"0": self.world, "1": max(1, self.world // 2), "2": min(2, self.world)}[pg]
        numel = 1 << rng.randint(14, 20)
        t = self._tensor(numel)
        self.begin(2, "c10d::allreduce_", inputs=[[t]], types=["GenericList[Tensor(float)]"])
        self.seq += 1
        rpc_inputs = [t, self.seq, [pg, f"pg_{pg}"], self.rank, "allreduce", [], [], 0, 1, size]
        rpc_types = [
            "Tensor(float)",
            "Int",
            "Tuple[String,String]",
            "Int",
            "String",
            "GenericList[]",
            "GenericList[]",
            "Int",
            "Int",
            "Int",
        ]
        rpc = self.begin(2, "record_param_comms", inputs=rpc_inputs, types=rpc_types)
        if self.layout == "chakra":
            rpc["attrs"] = [
                {"name": "collective_name", "type": "string", "value": "allreduce"},
                {"name": "dtype", "type": "string", "value": "Float"},
                {"name": "in_msg_nelems", "type": "uint64", "value": numel},
                {"name": "out_msg_nelems", "type": "uint64", "value": numel},
                {"name": "in_split_size", "type": "string", "value": "[]"},
                {"name": "out_split_size", "type": "string", "value": "[]"},
                {"name": "global_rank_start", "type": "uint64", "value": 0},
                {"name": "global_rank_stride", "type": "uint64", "value": 1},
                {"name": "pg_name", "type": "string", "value": pg},
                {"name": "pg_desc", "type": "string", "value": f"pg_{pg}"},
                {"name": "pg_size", "type": "uint64", "value": size},
            ]
        self.begin(2, "nccl:all_reduce", "user_annotation", inputs=[t], types=["Tensor(float)"])
        self.launch(
            2,
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            rng.uniform(20, 200),
            stream=PG_STREAMS[pg],
            extra={
                "Collective name": "allreduce",
                "Process Group Name": pg,
                "In msg nelems": numel,
                "Out msg nelems": numel,
                "dtype": "Float",
                "Group size": size,
            },
        )
        self.end(2)
        self.end(2)
        self.end(2, [t])

    # ---- files --------------------------------------------------------------------------------------
    def documents(self, n_steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
        groups = [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "ranks": [],
                "group_size": self.world,
                "group_count": 3,
            },
            {
                "pg_name": "1",
                "pg_desc": "pg_1",
                "backend_config": "cuda:nccl",
                "ranks": [r for r in range(self.world) if r % 2 == self.rank % 2],
                "group_size": max(1, self.world // 2),
                "group_count": 3,
            },
            {
                "pg_name": "2",
                "pg_desc": "pg_2",
                "backend_config": "cuda:nccl",
                "ranks": [r for r in range(self.world) if r // 2 == self.rank // 2],
                "group_size": min(2, self.world),
                "group_count": 3,
            },
        ]
        pg_init = {
            "name": "## process_group:init ##",
            "id": 4,
            "rf_id": 1,
            "parent": 2,
            "fw_parent": 0,
            "seq_id": -1,
            "scope": 7,
            "tid": 1,
            "fw_tid": 0,
            "op_schema": "",
            "inputs": [json.dumps(groups)],
            "input_shapes": [[]],
            "input_types": ["String"],
            "outputs": [],
            "output_shapes": [],
            "output_types": [],
        }
        roots = [
            {
                "name": "[pytorch|profiler|execution_trace|thread]",
                "id": 2,
                "rf_id": 0,
                "parent": 1,
                "fw_parent": 0,
                "seq_id": -1,
                "scope": 7,
                "tid": 1,
                "fw_tid": 0,
                "op_schema": "",
                "inputs": [],
                "input_shapes": [],
                "input_types": [],
                "outputs": [],
                "output_shapes": [],
                "output_types": [],
            },
            {
                "name": "[pytorch|profiler|execution_trace|thread]",
                "id": 3,
                "rf_id": 0,
                "parent": 1,
                "fw_parent": 0,
                "seq_id": -1,
                "scope": 7,
                "tid": 2,
                "fw_tid": 0,
                "op_schema": "",
                "inputs": [],
                "input_shapes": [],
                "input_types": [],
                "outputs": [],
                "output_shapes": [],
                "output_types": [],
            },
        ]
        proc = {
            "name": "[pytorch|profiler|execution_trace|process]",
            "id": 1,
            "rf_id": 0,
            "parent": 1,
            "fw_parent": 0,
            "seq_id": -1,
            "scope": 7,
            "tid": 0,
            "fw_tid": 0,
            "op_schema": "",
            "inputs": [],
            "input_shapes": [],
            "input_types": [],
            "outputs": [],
            "output_shapes": [],
            "output_types": [],
        }
        head = roots + [pg_init]
        if self.layout == "chakra":
            head = [_to_chakra(n) for n in head]
            proc = _to_chakra(proc)
        host = {
            "schema": "1.0.1" if self.layout == "flat" else "1.1.1-chakra.0.0.4",
            "pid": self.pid,
            "time": "2026-11-30 08:00:00",
            "start_ts": 1000,
            "finish_ts": 2000,
            "nodes": head + self.nodes + [proc],
        }
        pg_config = [
            {
                "pg_name": g["pg_name"],
                "pg_desc": g["pg_desc"],
                "backend_config": g["backend_config"],
                "pg_size": g["group_size"],
                "ranks": g["ranks"] or list(range(self.world)),
            }
            for g in groups
        ]
        kineto = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": self.rank, "name": "Synthetic GPU"}],
            "distributedInfo": {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": self.world,
                "pg_count": len(groups),
                "pg_config": pg_config,
            },
            "traceEvents": self.events,
            "traceName": f"synthetic_rank{self.rank}_{n_steps}_steps",
        }
        return host, kineto


def _to_chakra(n: dict[str, Any]) -> dict[str, Any]:
    attrs = [
        {"name": "rf_id", "type": "uint64", "value": n["rf_id"]},
        {"name": "fw_parent", "type": "uint64", "value": 0},
        {"name": "seq_id", "type": "int64", "value": -1},
        {"name": "scope", "type": "uint64", "value": n["scope"]},
        {"name": "tid", "type": "uint64", "value": n["tid"]},
        {"name": "fw_tid", "type": "uint64", "value": 0},
        {"name": "op_schema", "type": "string", "value": ""},
    ]
    return {
        "id": n["id"],
        "name": n["name"],
        "ctrl_deps": n["parent"],
        "inputs": {"values": n["inputs"], "shapes": n["input_shapes"], "types": n["input_types"]},
        "outputs": {"values": n["outputs"], "shapes": n["output_shapes"], "types": n["output_types"]},
        "attrs": attrs,
    }


def generate(
    n_ops: int,
    out_dir: str | Path,
    ranks: int = 1,
    seed: int = 0,
    *,
    layout: str = "flat",
    rf_ids: bool = False,
    drop_rate: float = 0.0,
    extra_rate: float = 0.0,
    compress: bool = False,
    kernels_per_leaf: float = 1.0,
) -> list[tuple[Path, Path]]:
    """Write ``ranks`` synthetic host ET + Kineto pairs of about ``n_ops`` host ops each; return the paths.

    ``kernels_per_leaf``: average number of kernels each kernel-launching leaf op launches (1.0: about
    0.45 GPU ops per host op; 2.3: about one GPU op per host op).
    """
    if layout not in ("flat", "chakra"):
        raise ValueError("layout must be 'flat' or 'chakra'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if compress else ".json"
    paths: list[tuple[Path, Path]] = []
    for rank in range(ranks):
        r = _Rank(rank, ranks, seed, layout, rf_ids, drop_rate, extra_rate, kernels_per_leaf)
        step = 1
        while r.host_ops < n_ops:
            r.step(step)
            step += 1
        host, kineto = r.documents(step - 1)
        hp, kp = out / f"host_et_{rank}{suffix}", out / f"kineto_{rank}{suffix}"
        dump_json(hp, host)
        dump_json(kp, kineto)
        paths.append((hp, kp))
    return paths


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n_ops", type=int)
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layout", choices=("flat", "chakra"), default="flat")
    ap.add_argument("--rf-ids", action="store_true")
    ap.add_argument("--drop-rate", type=float, default=0.0)
    ap.add_argument("--extra-rate", type=float, default=0.0)
    ap.add_argument("--gz", action="store_true")
    ap.add_argument("--kernels-per-leaf", type=float, default=1.0)
    a = ap.parse_args()
    for hp, kp in generate(
        a.n_ops,
        a.out_dir,
        a.ranks,
        a.seed,
        layout=a.layout,
        rf_ids=a.rf_ids,
        drop_rate=a.drop_rate,
        extra_rate=a.extra_rate,
        compress=a.gz,
        kernels_per_leaf=a.kernels_per_leaf,
    ):
        print(hp, kp)
