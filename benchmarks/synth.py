"""Synthetic host ET + Kineto trace pairs of any size, for the link/convert/replay benchmarks.

``generate(n_ops, out_dir, ranks=1, seed=0, weight="light") -> list[(host_path, kineto_path)]`` writes
``host_et_R.json`` + ``kineto_R.json`` per rank (``.json.gz`` with ``compress=True``).  Everything is
deterministic in ``seed``.  Two node weights (``--weight``; the command line defaults to ``real``, the
function to ``light``, which its existing callers were written for):

**real** (``_HeavyRank``): nodes and events as heavy as PyTorch 2.x writes them, calibrated on the
corpus (benchmarks/README.md, "Real-weight nodes": ~840 B per host node in compact JSON against 843-896 B
for the 1.1.1 ``cpu_gloo`` traces).  Host ET 1.1.1-chakra.0.0.4 (``layout="flat"``: the same values as 1.0.1):
every node has the ten attrs of a real 1.1.1 node (rf_id, fw_parent, seq_id, scope, tid, fw_tid,
op_schema, kernel_backend, kernel_file, tensor_range) with the real ``op_schema`` strings, backward
functions with scope 1 / fw_parent / fw_tid, inputs and outputs with values (tensors as [tensor_id,
storage_id, offset, numel, elem_bytes, device], views sharing storage, ints, bools, doubles, int lists,
tensor lists, None, devices, objects), shapes, types and strides.  A small MLP (64 linear + ReLU layers,
MSE loss) trained with DDP and SGD: the main thread runs ``aten::to`` > ``aten::_to_copy`` >
(``aten::empty_strided``, ``aten::copy_``), per layer ``aten::linear`` > (``aten::t`` > ``aten::transpose``
> ``aten::as_strided``, ``aten::addmm``) and ``aten::relu`` > ``aten::clamp_min``, the loss, the optimizer's
``aten::add_`` per parameter and ``aten::item``; the autograd thread the evaluate_function / backward
function pairs (ReluBackward0, AddmmBackward0 with its transposes, mm, mm, sum and view, AccumulateGrad >
aten::detach > detach) and every fourth layer a bucket ``c10d::allreduce_`` > ``record_param_comms`` (with
the 1.1.0 comm attrs) > ``nccl:all_reduce``.  About 2,100 host ops per step.  Kineto: cpu_op args External
id (its own counter), Record function id (= rf_id), Concrete Inputs, Input type, Input Strides, Input
Dims, Ev Idx (Sequence number, Fwd thread id on backward functions); launches carry the External id of
their op; kernels carry their geometry and occupancy; an ac2g flow pair per launch; collective args on
``record_param_comms`` and the NCCL kernel; ``ph: M`` process/thread names; a clock relative to
``baseTimeNanoseconds``.  Both files are written step by step, never whole in memory.

**light**: the benchmark's original nodes, byte for byte what this generator wrote before the knob
existed but the host ET's ``time``, now T0's (the linker refuses clocks days apart as different runs)
(one ``ProfilerStep#N`` per iteration, about 1,000 ops each):

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

The light host ET uses the flat 1.0.1 layout by default (``layout="chakra"`` writes
1.1.1-chakra.0.0.4 with ``record_param_comms`` attrs but only seven attrs per node, empty op_schema and no
strides) and includes a ``## process_group:init ##`` node.  Its Kineto trace carries ``External id`` only
(an id offset from the host ``rf_id``), so the linker must align names; ``rf_ids=True`` adds ``Record
function id``.  Both weights: ``drop_rate`` removes that fraction of the Kineto ``cpu_op`` events and
``extra_rate`` adds Kineto-only ``aten::empty`` events, to exercise the tolerant alignment.
"""

from __future__ import annotations

import calendar
import json
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chakra.io import atomic_output, dump_json  # noqa: E402

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
            "time": "2023-11-14 22:13:20",   # T0: the linker refuses clocks days apart (other runs)
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


# ---- real-weight nodes --------------------------------------------------------------------------------
#
# What a node of a real 1.1.1-chakra.0.0.4 host ET carries (measured on the corpus: benchmarks/README.md,
# "Real-weight nodes"): ten attrs (rf_id, fw_parent, seq_id, scope, tid, fw_tid, op_schema, kernel_backend,
# kernel_file, tensor_range; ~540 B of the node's ~870 B in compact JSON), the op's schema string, and
# inputs/outputs as {values, shapes, types, strides} where a tensor value is [tensor_id, storage_id, offset,
# numel, elem_bytes, device] and scalars, lists, None and objects appear with their own types.  The Kineto
# events of PyTorch 2.x carry, for a cpu_op, External id / Record function id / Concrete Inputs / Input
# type / Input Strides / Input Dims / Ev Idx (and Sequence number / Fwd thread id for backward functions);
# a kernel carries its launch geometry and occupancy; a launch is joined to its kernel by an ac2g flow pair.

T0_REAL = 5_168_089_219_335.0  # µs: PyTorch 2.x writes a clock relative to baseTimeNanoseconds
HOST_TIME = "2026-11-30 08:00:00"
LAYER_DIMS = (1024, 4096)  # hidden widths, alternating layer by layer
BATCH = 32

#: the op_schema attr of each operator, as PyTorch writes it (user annotations and autograd nodes have "")
SCHEMAS = {
    "aten::linear": "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "aten::t": "aten::t(Tensor(a) self) -> Tensor(a)",
    "aten::transpose": "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
    "aten::as_strided": "aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, "
    "SymInt? storage_offset=None) -> Tensor(a)",
    "aten::addmm": "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1)"
    " -> Tensor",
    "aten::relu": "aten::relu(Tensor self) -> Tensor",
    "aten::clamp_min": "aten::clamp_min(Tensor self, Scalar min) -> Tensor",
    "aten::mm": "aten::mm(Tensor self, Tensor mat2) -> Tensor",
    "aten::sum": "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
    "ScalarType? dtype=None) -> Tensor",
    "aten::view": "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    "aten::threshold_backward": "aten::threshold_backward(Tensor grad_output, Tensor self, Scalar threshold)"
    " -> Tensor",
    "aten::detach": "aten::detach(Tensor(a) self) -> Tensor(a)",
    "aten::add_": "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
    "aten::to": "aten::to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, "
    "MemoryFormat? memory_format=None) -> Tensor(a)",
    "aten::_to_copy": "aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None)"
    " -> Tensor",
    "aten::empty_strided": "aten::empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::copy_": "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
    "aten::mse_loss": "aten::mse_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor",
    "aten::sub": "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten::pow": "aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
    "aten::mean": "aten::mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten::mse_loss_backward": "aten::mse_loss_backward(Tensor grad_output, Tensor self, Tensor target, "
    "int reduction) -> Tensor",
    "aten::item": "aten::item(Tensor self) -> Scalar",
    "aten::_local_scalar_dense": "aten::_local_scalar_dense(Tensor self) -> Scalar",
    "c10d::allreduce_": "c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup "
    "process_group, __torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? sparse_indices, "
    "bool async_op=True, int timeout=-1) -> (Tensor[], __torch__.torch.classes.c10d.Work)",
}

_ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >"
                "(int, {f}, std::array<char*, {n}ul>)")
_REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, {f}, unsigned int, float, 4, "
           "4> >(at::native::ReduceOp<float, {f}, unsigned int, float, 4, 4>)")
_SUM_OP = ("at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
           "(at::TensorIterator&)::{lambda(float, float)#1}>")

#: kernel key -> (name, registers per thread, shared memory, blocks per SM, warps per SM, grid, block,
#: est. achieved occupancy %), the launch record Kineto writes for an A100/H100-class GPU
KERNELS: dict[str, tuple[str, int, int, float, float, list[int], list[int], int]] = {
    "gemm_tn": ("ampere_sgemm_128x64_tn", 122, 12544, 0.222222, 1.777778, [32, 1, 2], [128, 1, 1], 3),
    "gemm_nn": ("ampere_sgemm_64x64_nn", 86, 8192, 0.444444, 3.555556, [64, 1, 1], [128, 1, 1], 6),
    "gemm_nt": ("ampere_sgemm_128x32_nt", 90, 9216, 0.888889, 3.555556, [8, 32, 1], [256, 1, 1], 6),
    "splitk": ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>"
               "(cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, "
               "float const*, float const*, float*, void*, long, float*, int*)",
               32, 0, 1.481481, 5.925926, [128, 1, 1], [32, 16, 1], 9),
    "clamp_min": (_ELEMENTWISE.format(
        f="at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, "
          "c10::Scalar)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::"
          "{lambda(float)#1}", n=2), 16, 0, 1.185185, 4.740741, [160, 1, 1], [128, 1, 1], 7),
    "threshold_bw": (_ELEMENTWISE.format(
        f="at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, "
          "float)::{lambda(float, float)#1}", n=3), 20, 0, 1.185185, 4.740741, [160, 1, 1], [128, 1, 1], 7),
    "add": (_ELEMENTWISE.format(f="at::native::CUDAFunctor_add<float>", n=3), 20, 0, 7.901235, 31.604939,
            [1067, 1, 1], [128, 1, 1], 48),
    "sub": (_ELEMENTWISE.format(f="at::native::CUDAFunctor_add<float>", n=3), 20, 0, 0.074074, 0.296296,
            [10, 1, 1], [128, 1, 1], 0),
    "pow": (_ELEMENTWISE.format(
        f="at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>"
          "(at::TensorIteratorBase&, float)::{lambda(float)#2}", n=2), 16, 0, 0.074074, 0.296296,
            [10, 1, 1], [128, 1, 1], 0),
    "sum": (_REDUCE.format(f=_SUM_OP), 32, 16, 0.395062, 3.160494, [32, 1, 1], [32, 16, 1], 5),
    "mean": (_REDUCE.format(f="at::native::MeanOps<float, float, float, float>"), 32, 16, 0.012346, 0.098765,
             [1, 1, 1], [32, 16, 1], 0),
    "mse_bw": (_ELEMENTWISE.format(
        f="at::native::(anonymous namespace)::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar "
          "const&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
          "{lambda(float, float, float)#1}", n=4), 24, 0, 0.074074, 0.296296, [10, 1, 1], [128, 1, 1], 0),
}
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaStreamSynchronize": 131,
        "cudaDeviceSynchronize": 165}


class _T:
    """A tensor as the host ET records it."""

    __slots__ = ("v", "shape", "strides")

    def __init__(self, v: list[Any], shape: list[int], strides: list[int]) -> None:
        self.v, self.shape, self.strides = v, shape, strides


def _contiguous(shape: list[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


# One input or output: (ET value, ET shape, ET type, ET strides, Kineto Input Dims, Kineto Input type,
# Kineto Input Strides, Kineto Concrete Inputs), the way PyTorch 2.x records each kind of argument.
Item = tuple[Any, Any, str, Any, Any, str, Any, str]


def _ten(t: _T) -> Item:
    return (t.v, t.shape, "Tensor(float)", t.strides, t.shape, "float", t.strides, "")


def _int(n: int) -> Item:
    return (n, [], "Int", [], [], "Scalar", [], str(n))


def _bool(b: bool) -> Item:
    return (b, [], "Bool", [], [], "Scalar", [], "True" if b else "False")


def _dbl(x: float) -> Item:
    return (x, [], "Double", [], [], "Scalar", [], repr(x))


def _ints(xs: list[int]) -> Item:
    empty = [[] for _ in xs]
    kind = "GenericList[" + ",".join("Int" for _ in xs) + "]"
    return (xs, empty, kind, empty, [], "ScalarList", [], str(xs))


def _tensors(ts: list[_T]) -> Item:
    return ([t.v for t in ts], [t.shape for t in ts], "GenericList[Tensor(float)]", [t.strides for t in ts],
            [], "TensorList", [], "")


def _str(s: str) -> Item:
    return (s, [], "String", [], [], "", [], s)


def _names(a: str, b: str) -> Item:
    return ([a, b], [[], []], "Tuple[String,String]", [[], []], [], "", [], "")


_NONE: Item = ("<None>", [], "None", [], [], "", [], "")
_OBJ: Item = ("<Object>", [], "Object", [], [], "", [], "")


def _dev(d: str) -> Item:
    return (d, [], "Device", [], [], "", [], "")


def _columns(items: Any, n: int) -> list[list[Any]]:
    """The first ``n`` fields of the items, as parallel lists."""
    if not items:
        return [[] for _ in range(n)]
    cols = list(zip(*items))
    return [list(cols[i]) for i in range(n)]


def _heavy_attrs(rf: int, fw_parent: int, seq: int, scope: int, tid: int, fw_tid: int,
                 schema: str) -> list[dict[str, Any]]:
    return [
        {"name": "rf_id", "type": "uint64", "value": rf},
        {"name": "fw_parent", "type": "uint64", "value": fw_parent},
        {"name": "seq_id", "type": "int64", "value": seq},
        {"name": "scope", "type": "uint64", "value": scope},
        {"name": "tid", "type": "uint64", "value": tid},
        {"name": "fw_tid", "type": "uint64", "value": fw_tid},
        {"name": "op_schema", "type": "string", "value": schema},
        {"name": "kernel_backend", "type": "string", "value": ""},
        {"name": "kernel_file", "type": "string", "value": ""},
        {"name": "tensor_range", "type": "string", "value": ""},
    ]


def _heavy_node(layout: str, nid: int, name: str, parent: int, rf: int, fw_parent: int, seq: int, scope: int,
                tid: int, fw_tid: int, schema: str, ins: Any, outs: Any,
                extra_attrs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A host ET node in the 1.1.1-chakra.0.0.4 layout (or flat 1.0.1, which has no strides)."""
    if layout == "flat":
        iv, ishp, ityp = _columns(ins, 3)
        ov, oshp, otyp = _columns(outs, 3)
        return {"name": name, "id": nid, "rf_id": rf, "parent": parent, "fw_parent": fw_parent, "seq_id": seq,
                "scope": scope, "tid": tid, "fw_tid": fw_tid, "op_schema": schema, "inputs": iv,
                "input_shapes": ishp, "input_types": ityp, "outputs": ov, "output_shapes": oshp,
                "output_types": otyp}
    iv, ishp, ityp, istr = _columns(ins, 4)
    ov, oshp, otyp, ostr = _columns(outs, 4)
    attrs = _heavy_attrs(rf, fw_parent, seq, scope, tid, fw_tid, schema)
    if extra_attrs:
        attrs.extend(extra_attrs)
    return {"id": nid, "name": name, "ctrl_deps": parent,
            "inputs": {"values": iv, "shapes": ishp, "types": ityp, "strides": istr},
            "outputs": {"values": ov, "shapes": oshp, "types": otyp, "strides": ostr},
            "attrs": attrs}


class _HeavyRank(_Rank):
    """One rank with nodes and events as heavy as real ones (``weight="real"``).

    The model: ``LAYERS`` linear + ReLU layers of alternating width, an MSE loss, DDP-style gradient
    all_reduce on the autograd thread every fourth layer (three process groups), SGD.  Per layer the main
    thread records ``aten::linear`` > (``aten::t`` > ``aten::transpose`` > ``aten::as_strided``,
    ``aten::addmm``) and ``aten::relu`` > ``aten::clamp_min``; the autograd thread records the
    ``ReluBackward0``, ``AddmmBackward0`` (transposes, two ``aten::mm``, ``aten::sum``, ``aten::view``) and
    two ``AccumulateGrad`` functions; the optimizer one ``aten::add_`` per parameter: 32 host ops and 8
    kernels per layer (about one GPU op per four host ops with ``kernels_per_leaf=1``).  Nodes are handed to
    the writer step by step (see :func:`generate`), so a million of them never sit in memory.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = {1: T0_REAL + 50.0, 2: T0_REAL + 50.0}
        self.dev = f"cuda:{self.rank}"
        self.ext = 0  # Kineto External id of CPU ops (its own counter, as in PyTorch 2.x)
        self.ev_idx = 0
        self.fwd_seq = 0
        self.params: list[tuple[_T, _T]] = []
        for layer in range(LAYERS):
            din, dout = LAYER_DIMS[layer % 2], LAYER_DIMS[(layer + 1) % 2]
            self.params.append((self.tensor([dout, din]), self.tensor([dout])))

    # ---- helpers ----------------------------------------------------------------------------------
    def tensor(self, shape: list[int], dev: str | None = None, like: _T | None = None,
               strides: list[int] | None = None) -> _T:
        """A new tensor (a view of ``like``'s storage when given); ids come from the node counter."""
        tid = self.next_id
        self.next_id += 1
        if like is None:
            sid = self.next_id
            self.next_id += 1
            device = dev or self.dev
        else:
            sid, device = like.v[1], like.v[5]
        numel = 1
        for d in shape:
            numel *= d
        return _T([tid, sid, 0, numel, 4, device], shape, strides or _contiguous(shape))

    def seq_next(self) -> int:
        self.fwd_seq += 1
        return self.fwd_seq

    def begin(  # type: ignore[override]
        self,
        tid: int,
        name: str,
        cat: str = "cpu_op",
        ins: Any = (),
        *,
        seq: int = -1,
        fw: dict[str, Any] | None = None,
        kargs: dict[str, Any] | None = None,
        attrs: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Open an op; ``fw`` = the forward op a backward function belongs to (scope 1, fw_parent/fw_tid)."""
        stack = self.stack[tid]
        nid = self.next_id
        self.next_id += 1
        rf = self.next_rf
        self.next_rf += 1
        self.ext += 1
        self.clock[tid] += self.rng.uniform(0.5, 3.0)
        op = {
            "name": name, "id": nid, "rf_id": rf,
            "parent": stack[-1]["id"] if stack else (2 if tid == 1 else 3),
            "tid": tid, "cat": cat, "ts": self.clock[tid], "ext": self.ext, "ins": ins, "outs": (),
            "seq": fw["seq"] if fw else seq, "fw_parent": fw["rf_id"] if fw else 0, "fw_tid": 1 if fw else 0,
            "scope": 1 if fw else (7 if cat == "user_annotation" else 0), "kargs": kargs, "attrs": attrs,
        }
        stack.append(op)
        self.host_ops += 1
        return op

    def end(self, tid: int, outputs: Any = None) -> dict[str, Any]:
        op = self.stack[tid].pop()
        self.clock[tid] += self.rng.uniform(0.5, 2.0)
        op["dur"] = self.clock[tid] - op["ts"]
        if outputs:
            op["outs"] = outputs
        self._emit(op)
        return op

    def _emit(self, op: dict[str, Any]) -> None:
        ins = op["ins"]
        self.nodes.append(_heavy_node(
            self.layout, op["id"], op["name"], op["parent"], op["rf_id"], op["fw_parent"], op["seq"],
            op["scope"], op["tid"], op["fw_tid"], SCHEMAS.get(op["name"], ""), ins, op["outs"], op["attrs"]))
        if op["cat"] == "cpu_op" and self.rng.random() < self.drop_rate:
            return
        args: dict[str, Any] = {"External id": op["ext"]}
        if self.rf_ids:
            args["Record function id"] = op["rf_id"]
        if ins:
            kdims, ktypes, kstrides, kconcrete = _columns([i[4:] for i in ins], 4)
            args["Concrete Inputs"] = kconcrete
            args["Input type"] = ktypes
            args["Input Strides"] = kstrides
            args["Input Dims"] = kdims
        if op["kargs"]:
            args.update(op["kargs"])
        if op["scope"] == 1:
            args["Sequence number"] = op["seq"]
            args["Fwd thread id"] = 1
        args["Ev Idx"] = self.ev_idx
        self.ev_idx += 1
        ts = round(op["ts"], 3)
        self.events.append({"ph": "X", "cat": op["cat"], "name": op["name"], "pid": self.pid,
                            "tid": self.ktid[op["tid"]], "ts": ts, "dur": round(op["dur"], 3), "args": args})
        if self.extra_rate and self.rng.random() < self.extra_rate:
            self.ext += 1
            self.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": self.pid,
                                "tid": self.ktid[op["tid"]], "ts": round(op["ts"] + op["dur"] + 0.1, 3),
                                "dur": 0.0, "args": {"External id": self.ext, "Ev Idx": self.ev_idx}})
            self.ev_idx += 1

    def runtime(self, tid: int, name: str, dur: float, corr: int | None = None) -> tuple[float, int]:
        self.clock[tid] += self.rng.uniform(0.3, 1.0)
        ts = self.clock[tid]
        if corr is None:
            self.corr += 1
            corr = self.corr
        stack = self.stack[tid]
        self.events.append({
            "ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.pid, "tid": self.ktid[tid],
            "ts": round(ts, 3), "dur": round(dur, 3),
            "args": {"External id": stack[-1]["ext"] if stack else 0, "cbid": CBID[name],
                     "correlation": corr},
        })
        self.clock[tid] += dur
        return ts, corr

    def launch(  # type: ignore[override]
        self,
        tid: int,
        kernel: str,
        dur: float,
        stream: int = COMPUTE_STREAM,
        cat: str = "kernel",
        api: str = "cudaLaunchKernel",
        extra: dict[str, Any] | None = None,
        nbytes: int = 0,
    ) -> None:
        """A launch call, its kernel (a key of KERNELS, or a memcpy/memset name) and their ac2g flow pair."""
        ts, corr = self.runtime(tid, api, self.rng.uniform(3.0, 6.0))
        start = max(ts + self.rng.uniform(2.0, 6.0), self.stream_free.get(stream, 0.0))
        self.stream_free[stream] = start + dur
        stack = self.stack[tid]
        args: dict[str, Any] = {"External id": stack[-1]["ext"] if stack else 0}
        if cat == "kernel":
            name, regs, smem, blocks, warps, grid, block, occ = KERNELS[kernel] if kernel in KERNELS else (
                kernel, 96, 0, 1.0, 4.0, [4, 1, 1], [640, 1, 1], 0)
            args.update({"queued": 0, "device": self.rank, "context": 1, "stream": stream,
                         "correlation": corr, "registers per thread": regs, "shared memory": smem,
                         "blocks per SM": blocks, "warps per SM": warps, "grid": grid, "block": block,
                         "est. achieved occupancy %": occ})
        else:
            name = kernel
            args.update({"device": self.rank, "context": 1, "stream": stream, "correlation": corr,
                         "bytes": nbytes, "memory bandwidth (GB/s)": nbytes / (dur * 1e3)})
        if extra:
            args.update(extra)
        ts3, start3 = round(ts, 3), round(start, 3)
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": self.rank, "tid": stream,
                            "ts": start3, "dur": round(dur, 3), "args": args})
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.ktid[tid], "ts": ts3,
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": self.rank, "tid": stream, "ts": start3,
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def op(self, tid: int, name: str, ins: Any, outs: Any, kernel: str | None = None, kdur: float = 0.0,
           seq: int = -1, fw: dict[str, Any] | None = None) -> dict[str, Any]:
        """A leaf op; one kernel when ``kernel`` is given (more with kernels_per_leaf > 1: split-K reduce)."""
        self.begin(tid, name, ins=ins, seq=seq, fw=fw)
        if kernel:
            self.kernel_credit += self.kernels_per_leaf
            n = int(self.kernel_credit)
            self.kernel_credit -= n
            for k in range(max(n, 1)):
                self.launch(tid, kernel if k == 0 else "splitk", kdur if k == 0 else kdur / 4)
        self.clock[tid] += self.rng.uniform(1.0, 4.0)
        return self.end(tid, outs)

    def transpose(self, tid: int, w: _T) -> _T:
        """``aten::t`` > ``aten::transpose`` > ``aten::as_strided``: a transposed view of a 2-d tensor."""
        rows, cols = w.shape
        wt = self.tensor([cols, rows], like=w, strides=[w.strides[1], w.strides[0]])
        out = [_ten(wt)]
        self.begin(tid, "aten::t", ins=[_ten(w)], seq=self.seq_next() if tid == 1 else -1)
        self.begin(tid, "aten::transpose", ins=[_ten(w), _int(0), _int(1)])
        self.op(tid, "aten::as_strided", [_ten(w), _ints(wt.shape), _ints(wt.strides), _NONE], out)
        self.end(tid, out)
        self.end(tid, out)
        return wt

    def backward_fn(self, name: str, fw: dict[str, Any]) -> None:
        """Open ``autograd::engine::evaluate_function: name`` > ``name`` on the autograd thread."""
        self.begin(2, f"autograd::engine::evaluate_function: {name}", fw=fw)
        self.begin(2, name, fw=fw)

    # ---- one iteration ------------------------------------------------------------------------------
    def step(self, n: int) -> None:
        rng = self.rng
        self.begin(1, f"ProfilerStep#{n}", "user_annotation")
        self.begin(1, "Optimizer.zero_grad#SGD.zero_grad", "user_annotation")  # set_to_none: no ops
        self.end(1)
        self.begin(1, "## forward ##", "user_annotation")
        d0 = LAYER_DIMS[0]
        xc = self.tensor([BATCH, d0], dev="cpu")
        x = self.tensor([BATCH, d0])
        to_in = [_ten(xc), _NONE, _NONE, _dev(self.dev), _NONE, _bool(True), _bool(False), _NONE]
        self.begin(1, "aten::to", ins=to_in)
        self.begin(1, "aten::_to_copy", ins=to_in[:6] + [_NONE])
        self.op(1, "aten::empty_strided",
                [_ints(x.shape), _ints(x.strides), _int(6), _int(0), _dev(self.dev), _bool(False)], [_ten(x)])
        self.begin(1, "aten::copy_", ins=[_ten(x), _ten(xc), _bool(True)])
        self.launch(1, "Memcpy HtoD (Pinned -> Device)", rng.uniform(3, 8), cat="gpu_memcpy",
                    api="cudaMemcpyAsync", nbytes=4 * BATCH * d0)
        self.end(1, [_ten(x)])
        self.end(1, [_ten(x)])
        self.end(1, [_ten(x)])
        saved: list[tuple[_T, _T, _T, _T, dict[str, Any], dict[str, Any]]] = []
        for layer in range(LAYERS):
            w, b = self.params[layer]
            y = self.tensor([BATCH, w.shape[0]])
            self.begin(1, "aten::linear", ins=[_ten(x), _ten(w), _ten(b)])
            wt = self.transpose(1, w)
            mm = self.op(1, "aten::addmm", [_ten(b), _ten(x), _ten(wt), _int(1), _int(1)], [_ten(y)],
                         "gemm_tn", rng.uniform(8, 40), seq=self.seq_next())
            self.end(1, [_ten(y)])
            z = self.tensor(y.shape)
            relu = self.begin(1, "aten::relu", ins=[_ten(y)], seq=self.seq_next())
            self.op(1, "aten::clamp_min", [_ten(y), _int(0)], [_ten(z)], "clamp_min", rng.uniform(2, 6))
            self.end(1, [_ten(z)])
            saved.append((x, wt, y, z, mm, relu))
            x = z
        target = self.tensor(x.shape)
        diff, sq, loss = self.tensor(x.shape), self.tensor(x.shape), self.tensor([])
        mse = self.begin(1, "aten::mse_loss", ins=[_ten(x), _ten(target), _int(1)], seq=self.seq_next())
        self.op(1, "aten::sub", [_ten(x), _ten(target), _int(1)], [_ten(diff)], "sub", rng.uniform(2, 4))
        self.op(1, "aten::pow", [_ten(diff), _int(2)], [_ten(sq)], "pow", rng.uniform(2, 4))
        self.op(1, "aten::mean", [_ten(sq), _NONE], [_ten(loss)], "mean", rng.uniform(3, 6))
        self.end(1, [_ten(loss)])
        self.end(1)
        # backward: the main thread sits in "## backward ##" while the autograd thread works
        self.begin(1, "## backward ##", "user_annotation")
        self.clock[2] = max(self.clock[2], self.clock[1] + rng.uniform(20, 60))
        g = self.tensor(x.shape)
        self.backward_fn("MseLossBackward0", mse)
        self.op(2, "aten::mse_loss_backward", [_ten(loss), _ten(x), _ten(target), _int(1)], [_ten(g)],
                "mse_bw", rng.uniform(2, 5))
        self.end(2)
        self.end(2)
        grads: list[tuple[_T, _T]] = []
        for k, layer in enumerate(reversed(range(LAYERS))):
            xin, wt, y, z, mm, relu = saved[layer]
            w, b = self.params[layer]
            gy = self.tensor(y.shape)
            self.backward_fn("ReluBackward0", relu)
            self.op(2, "aten::threshold_backward", [_ten(g), _ten(z), _int(0)], [_ten(gy)], "threshold_bw",
                    rng.uniform(2, 6))
            self.end(2)
            self.end(2)
            gx, gw, gb = self.tensor(xin.shape), self.tensor(w.shape), self.tensor([1, b.shape[0]])
            self.backward_fn("AddmmBackward0", mm)
            wtt = self.transpose(2, wt)  # addmm's mat2, transposed back: grad_input = grad @ W
            self.op(2, "aten::mm", [_ten(gy), _ten(wtt)], [_ten(gx)], "gemm_nn", rng.uniform(8, 30))
            xt = self.transpose(2, xin)
            gwt = self.tensor([w.shape[1], w.shape[0]])
            self.op(2, "aten::mm", [_ten(xt), _ten(gy)], [_ten(gwt)], "gemm_nt", rng.uniform(8, 30))
            self.op(2, "aten::sum", [_ten(gy), _ints([0]), _bool(True), _NONE], [_ten(gb)], "sum",
                    rng.uniform(3, 8))
            gbv = self.tensor(b.shape, like=gb)
            self.op(2, "aten::view", [_ten(gb), _ints(b.shape)], [_ten(gbv)])
            self.end(2)
            self.end(2)
            for p, gp in ((w, gw), (b, gbv)):
                self.backward_fn("torch::autograd::AccumulateGrad", mm)
                det = self.tensor(p.shape, like=gp)
                self.begin(2, "aten::detach", ins=[_ten(gp)])
                self.op(2, "detach", [_ten(gp)], ())
                self.end(2, [_ten(det)])
                self.end(2)
                self.end(2)
            grads.append((gw, gbv))
            if k % 4 == 3:
                self._allreduce(layer)
            g = gx
        self.clock[1] = self.clock[2] + rng.uniform(5, 20)
        self.end(1)
        self.begin(1, "## optimizer ##", "user_annotation")
        self.begin(1, "Optimizer.step#SGD.step", "user_annotation")
        for layer, (gw, gb) in zip(reversed(range(LAYERS)), grads):
            w, b = self.params[layer]
            for p, gp in ((w, gw), (b, gb)):
                self.op(1, "aten::add_", [_ten(p), _ten(gp), _dbl(-0.01)], [_ten(p)], "add",
                        rng.uniform(2, 6))
        self.end(1)
        self.end(1)
        self.begin(1, "aten::item", ins=[_ten(loss)])
        self.begin(1, "aten::_local_scalar_dense", ins=[_ten(loss)])
        self.launch(1, "Memcpy DtoH (Device -> Pageable)", rng.uniform(1, 3), cat="gpu_memcpy",
                    api="cudaMemcpyAsync", nbytes=4)
        self.sync(1, "cudaStreamSynchronize", COMPUTE_STREAM)
        self.end(1, [_dbl(0.25)])
        self.end(1, [_dbl(0.25)])
        self.begin(1, "## sync ##", "user_annotation")
        self.sync(1, "cudaDeviceSynchronize", None)
        self.end(1)
        self.end(1)

    def _allreduce(self, layer: int) -> None:
        """DDP's bucket all_reduce: ``c10d::allreduce_`` > ``record_param_comms`` > ``nccl:all_reduce``."""
        rng = self.rng
        pg = str((layer // 4) % 3)
        size = {"0": self.world, "1": max(1, self.world // 2), "2": min(2, self.world)}[pg]
        ranks = {"0": list(range(self.world)),
                 "1": [r for r in range(self.world) if r % 2 == self.rank % 2],
                 "2": [r for r in range(self.world) if r // 2 == self.rank // 2]}[pg]
        desc = "default_pg" if pg == "0" else f"pg_{pg}"
        numel = 4 * LAYER_DIMS[0] * LAYER_DIMS[1]
        bucket = self.tensor([numel])
        coll = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": numel,
                "Out msg nelems": numel, "Group size": size, "In split size": "[]", "Out split size": "[]",
                "Global rank start": 0, "Global rank stride": 1, "Process Group Name": pg,
                "Process Group Description": desc, "Process Group Ranks": str(ranks)}
        self.begin(2, "c10d::allreduce_", ins=[_tensors([bucket]), _OBJ, _OBJ, _NONE, _bool(True), _int(-1)])
        self.seq += 1
        rpc_attrs = None
        if self.layout == "chakra":
            rpc_attrs = [
                {"name": "collective_name", "type": "string", "value": "allreduce"},
                {"name": "dtype", "type": "string", "value": "Float"},
                {"name": "in_msg_nelems", "type": "uint64", "value": numel},
                {"name": "out_msg_nelems", "type": "uint64", "value": numel},
                {"name": "in_split_size", "type": "string", "value": "[]"},
                {"name": "out_split_size", "type": "string", "value": "[]"},
                {"name": "global_rank_start", "type": "uint64", "value": 0},
                {"name": "global_rank_stride", "type": "uint64", "value": 1},
                {"name": "pg_name", "type": "string", "value": pg},
                {"name": "pg_desc", "type": "string", "value": desc},
                {"name": "pg_size", "type": "uint64", "value": size},
            ]
        rpc_in = [_tensors([bucket]), _int(self.seq), _names(pg, desc), _int(self.rank), _str("allreduce"),
                  _ints([]), _ints([]), _int(0), _int(1), _int(size)]
        self.begin(2, "record_param_comms", ins=rpc_in, kargs=coll, attrs=rpc_attrs)
        self.begin(2, "nccl:all_reduce", "user_annotation", ins=[_ten(bucket)])
        self.launch(2, NCCL_KERNEL, rng.uniform(20, 200), stream=PG_STREAMS[pg], extra=coll)
        self.end(2)
        self.end(2, [_tensors([bucket])])
        self.end(2, [_tensors([bucket]), _OBJ])

    # ---- files --------------------------------------------------------------------------------------
    def groups(self) -> list[dict[str, Any]]:
        return [
            {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [],
             "group_size": self.world, "group_count": 3},
            {"pg_name": "1", "pg_desc": "pg_1", "backend_config": "cuda:nccl",
             "ranks": [r for r in range(self.world) if r % 2 == self.rank % 2],
             "group_size": max(1, self.world // 2), "group_count": 3},
            {"pg_name": "2", "pg_desc": "pg_2", "backend_config": "cuda:nccl",
             "ranks": [r for r in range(self.world) if r // 2 == self.rank // 2],
             "group_size": min(2, self.world), "group_count": 3},
        ]

    def head_nodes(self) -> list[dict[str, Any]]:
        """The two thread roots and ``## process_group:init ##`` (written first, like PyTorch does)."""
        root = "[pytorch|profiler|execution_trace|thread]"
        pg_init = [(json.dumps(self.groups()), [], "String", [])]
        return [
            _heavy_node(self.layout, 2, root, 1, 0, 0, -1, 7, 1, 0, "", (), ()),
            _heavy_node(self.layout, 3, root, 1, 0, 0, -1, 7, 2, 0, "", (), ()),
            _heavy_node(self.layout, 4, "## process_group:init ##", 2, 1, 0, -1, 7, 1, 0, "", pg_init, ()),
        ]

    def process_node(self) -> dict[str, Any]:
        name = "[pytorch|profiler|execution_trace|process]"
        return _heavy_node(self.layout, 1, name, 1, 0, 0, -1, 7, 0, 0, "", (), ())

    def metadata_events(self) -> list[dict[str, Any]]:
        """The ``ph: M`` events naming the process, its threads and the GPU's streams."""
        ts = T0_REAL
        out: list[dict[str, Any]] = []
        for pid, label in ((self.pid, "CPU"), (self.rank, f"GPU {self.rank}")):
            out.append({"ph": "M", "name": "process_name", "ts": ts, "pid": pid, "tid": 0,
                        "args": {"name": "python"}})
            out.append({"ph": "M", "name": "process_labels", "ts": ts, "pid": pid, "tid": 0,
                        "args": {"labels": label}})
        for t in self.ktid.values():
            out.append({"ph": "M", "name": "thread_name", "ts": ts, "pid": self.pid, "tid": t,
                        "args": {"name": f"thread {t} (python)"}})
        for s in (COMPUTE_STREAM, *PG_STREAMS.values()):
            out.append({"ph": "M", "name": "thread_name", "ts": ts, "pid": self.rank, "tid": s,
                        "args": {"name": f"stream {s}"}})
        return out

    def host_document(self) -> dict[str, Any]:
        return {"schema": "1.0.1" if self.layout == "flat" else "1.1.1-chakra.0.0.4", "pid": self.pid,
                "time": HOST_TIME, "start_ts": 652161, "nodes": [], "finish_ts": 652161}

    def kineto_document(self) -> dict[str, Any]:
        # the host ET's wall clock and the Kineto clock agree (chakra.link.provenance checks them)
        wall = calendar.timegm(time.strptime(HOST_TIME, "%Y-%m-%d %H:%M:%S"))
        base_ns = int(wall - T0_REAL / 1e6) * 1_000_000_000
        return {
            "schemaVersion": 1,
            "deviceProperties": [{
                "id": self.rank, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936,
                "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
                "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
                "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}],
            "record_shapes": 1,
            "distributedInfo": {
                "backend": "nccl", "rank": self.rank, "world_size": self.world, "pg_count": 3,
                "pg_config": [{"pg_name": g["pg_name"], "pg_desc": g["pg_desc"],
                               "backend_config": g["backend_config"], "pg_size": g["group_size"],
                               "ranks": g["ranks"] or list(range(self.world))} for g in self.groups()]},
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": base_ns,
            "traceEvents": [],
            "traceName": f"synthetic_rank{self.rank}",
        }


_SPLIT = "\x00synth-split\x00"


class _ListWriter:
    """Write a JSON document whose one big list grows while it is written (atomic; gzip for ``.gz``).

    The keys before the list are written at the start, the list's items batch by batch, the keys after it
    (which may change meanwhile, e.g. ``finish_ts``) at the end: compact JSON, as ``dump_json`` writes it,
    without the items ever being all in memory.
    """

    def __init__(self, path: Path, doc: dict[str, Any], key: str, text: Any = orjson.dumps) -> None:
        self.path, self.doc, self.key = path, doc, key
        self.first = True
        self.text = text   # value -> JSON text (compact: orjson's; or the spacing of a PyTorch writer)
        self.comma = b"," if text is orjson.dumps else b", "

    def _split(self) -> tuple[bytes, bytes]:
        shell = dict(self.doc)
        shell[self.key] = _SPLIT
        head, tail = self.text(shell).split(orjson.dumps(_SPLIT))
        return head, tail

    def __enter__(self) -> _ListWriter:
        self._cm = atomic_output(self.path)
        self.fh = self._cm.__enter__()
        self.comp = zlib.compressobj(6, zlib.DEFLATED, 31) if self.path.name.endswith(".gz") else None
        self.head = self._split()[0]
        self._write(self.head + b"[")
        return self

    def _write(self, data: bytes) -> None:
        self.fh.write(self.comp.compress(data) if self.comp is not None else data)

    def add(self, items: list[Any]) -> None:
        if items:
            part = self.text(items)[1:-1]
            self._write(part if self.first else self.comma + part)
            self.first = False

    def __exit__(self, *exc: Any) -> Any:
        if exc[0] is None:
            head, tail = self._split()
            if head != self.head:
                raise RuntimeError(f"{self.path}: keys before '{self.key}' changed while writing")
            self._write(b"]" + tail)
            if self.comp is not None:
                self.fh.write(self.comp.flush())
        return self._cm.__exit__(*exc)


def _et_text(v: Any) -> bytes:
    """JSON text spaced as PyTorch's execution-trace writer spaces it: ``"key": value`` and ``, `` between the
    members of an object and the objects of a list (``attrs``), lists of plain values compact (``inputs``'
    ``values``, ``shapes``, ``types``, ``strides``: ``[[10,11,0,64,4,"cuda:1"],[-1]]``)."""
    if type(v) is dict:
        return b"{" + b", ".join(orjson.dumps(k) + b": " + _et_text(x) for k, x in v.items()) + b"}"
    if type(v) is list and any(type(x) is dict for x in v):
        return b"[" + b", ".join(_et_text(x) for x in v) + b"]"
    return orjson.dumps(v)


def _kineto_text(v: Any) -> bytes:
    """JSON text spaced as Kineto's writer spaces it: ``, `` and ``": "`` everywhere, lists included."""
    return msgspec.json.format(orjson.dumps(v), indent=0)


def _generate_heavy(r: _HeavyRank, n_ops: int, hp: Path, kp: Path, spaced: bool = False) -> None:
    """Walk ``r`` until it has ``n_ops`` host ops, writing both files step by step (``spaced``: with the
    spacing of PyTorch's writers, :func:`_et_text` / :func:`_kineto_text`)."""
    host, kineto = r.host_document(), r.kineto_document()
    ht, kt = (_et_text, _kineto_text) if spaced else (orjson.dumps, orjson.dumps)
    with _ListWriter(hp, host, "nodes", ht) as hw, _ListWriter(kp, kineto, "traceEvents", kt) as kw:
        hw.add(r.head_nodes())
        kw.add(r.metadata_events())
        step = 1
        while r.host_ops < n_ops:
            r.step(step)
            step += 1
            hw.add(r.nodes)
            r.nodes.clear()
            kw.add(r.events)
            r.events.clear()
        hw.add([r.process_node()])
        host["finish_ts"] = 652161 + int((max(r.clock.values()) - T0_REAL) / 1000)
        kineto["traceName"] = f"synthetic_rank{r.rank}_{step - 1}_steps"


def generate(
    n_ops: int,
    out_dir: str | Path,
    ranks: int = 1,
    seed: int = 0,
    *,
    weight: str = "light",
    layout: str | None = None,
    rf_ids: bool | None = None,
    drop_rate: float = 0.0,
    extra_rate: float = 0.0,
    compress: bool = False,
    kernels_per_leaf: float = 1.0,
    spacing: str = "compact",
) -> list[tuple[Path, Path]]:
    """Write ``ranks`` synthetic host ET + Kineto pairs of about ``n_ops`` host ops each; return the paths.

    ``weight``: ``"real"`` nodes and events as heavy as PyTorch 2.x writes them (``_HeavyRank``; layout
    ``chakra`` = 1.1.1-chakra.0.0.4 and ``Record function id`` unless told otherwise); ``"light"`` the
    benchmark's original nodes, byte for byte what this generator wrote before the knob existed (layout
    ``flat`` and no ``Record function id`` unless told otherwise).  The function's default stays ``light``
    so that existing callers (tests/cli/test_faults_signals.py, bench_link.py) get the files they were written
    for; the command line defaults to ``real``.
    ``kernels_per_leaf``: average number of kernels each kernel-launching leaf op launches (light: 1.0 gives
    about 0.45 GPU ops per host op, 2.3 about one; real: 1.0 gives about 0.26, 1.3 about one per three).
    ``spacing`` (real weight only): ``"compact"`` JSON as orjson writes it, or ``"pytorch"``: spaced as
    PyTorch's execution-trace writer and Kineto space it (the same values; ``_et_text``, ``_kineto_text``).
    """
    if spacing not in ("compact", "pytorch"):
        raise ValueError("spacing must be 'compact' or 'pytorch'")
    if spacing != "compact" and weight != "real":
        raise ValueError("spacing 'pytorch' is for weight 'real'")
    if weight not in ("light", "real"):
        raise ValueError("weight must be 'light' or 'real'")
    if layout is None:
        layout = "chakra" if weight == "real" else "flat"
    if layout not in ("flat", "chakra"):
        raise ValueError("layout must be 'flat' or 'chakra'")
    if rf_ids is None:
        rf_ids = weight == "real"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if compress else ".json"
    paths: list[tuple[Path, Path]] = []
    for rank in range(ranks):
        hp, kp = out / f"host_et_{rank}{suffix}", out / f"kineto_{rank}{suffix}"
        if weight == "real":
            heavy = _HeavyRank(rank, ranks, seed, layout, rf_ids, drop_rate, extra_rate, kernels_per_leaf)
            _generate_heavy(heavy, n_ops, hp, kp, spaced=spacing == "pytorch")
            paths.append((hp, kp))
            continue
        r = _Rank(rank, ranks, seed, layout, rf_ids, drop_rate, extra_rate, kernels_per_leaf)
        step = 1
        while r.host_ops < n_ops:
            r.step(step)
            step += 1
        host, kineto = r.documents(step - 1)
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
    ap.add_argument("--weight", choices=("light", "real"), default="real",
                    help="real: nodes and events as heavy as PyTorch 2.x writes them (default); light: the "
                         "original benchmark nodes")
    ap.add_argument("--layout", choices=("flat", "chakra"), default=None,
                    help="default: chakra (1.1.1-chakra.0.0.4) for --weight real, flat (1.0.1) for light")
    ap.add_argument("--rf-ids", action=argparse.BooleanOptionalAction, default=None,
                    help="write Record function id in Kineto (default: yes for real, no for light)")
    ap.add_argument("--drop-rate", type=float, default=0.0)
    ap.add_argument("--extra-rate", type=float, default=0.0)
    ap.add_argument("--gz", action="store_true")
    ap.add_argument("--kernels-per-leaf", type=float, default=1.0)
    ap.add_argument("--spacing", choices=("compact", "pytorch"), default="compact",
                    help="pytorch: spaced as PyTorch's execution-trace writer and Kineto space it "
                         "(--weight real)")
    a = ap.parse_args()
    for hp, kp in generate(
        a.n_ops,
        a.out_dir,
        a.ranks,
        a.seed,
        weight=a.weight,
        layout=a.layout,
        rf_ids=a.rf_ids,
        drop_rate=a.drop_rate,
        extra_rate=a.extra_rate,
        compress=a.gz,
        kernels_per_leaf=a.kernels_per_leaf,
        spacing=a.spacing,
    ):
        print(hp, kp)
