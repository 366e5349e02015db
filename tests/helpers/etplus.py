"""Small hand-built ET+ documents (flat and Chakra layouts, a gloo job) shared by the converter tests, and
readers of a converted node's attributes."""

from __future__ import annotations

import json

from chakra.convert.attrs import attr_value

TENSOR = [10, 11, 0, 1000, 4, "cuda:0"]   # 1000 floats = 4000 bytes


def flat(nid, name, parent, **kw):
    """A 1.0.1 flat-layout node."""
    n = {"name": name, "id": nid, "rf_id": kw.pop("rf_id", nid), "parent": parent, "fw_parent": 0,
         "seq_id": -1, "scope": 0, "tid": kw.pop("tid", 1), "fw_tid": 0, "op_schema": "",
         "inputs": kw.pop("inputs", []),
         "input_shapes": [], "input_types": kw.pop("input_types", []), "outputs": [], "output_shapes": [],
         "output_types": []}
    n.update(kw)
    return n


def gpu(nid, name, parent, ts, dur, stream, **kw):
    n = {"id": nid, "name": name, "cat": kw.pop("cat", "kernel"), "ph": "X", "ts": ts, "dur": dur,
         "stream": stream, "device": 0, "tid": stream, "args": {"stream": stream, "correlation": nid + 1000},
         "parent": parent, "inputs": kw.pop("inputs", []), "input_shapes": [], "input_types": [],
         "outputs": [], "output_shapes": [], "output_types": []}
    n.update(kw)
    return n


def small_etplus() -> dict:
    """One thread: A(100..150) > B(110..130); C(160..170); R(200..230) > N(205..225); 3 kernels.

    Exclusive: A 30, B 20, C 10, R 10, N 20.  Measured window starts at 90.
    """
    nodes = [
        flat(2, "[pytorch|profiler|execution_trace|thread]", 1, rf_id=0, ts=95, dur=200),
        flat(3, "A", 2, ts=100, dur=50),
        flat(4, "B", 3, ts=110, dur=20),
        flat(5, "C", 2, ts=160, dur=10, sync_dep=[20]),
        flat(6, "record_param_comms", 2, ts=200, dur=30,
             inputs=[[TENSOR], 7, 123, 0, "allreduce", [], []],
             input_types=["GenericList[Tensor(float)]", "Int", "Int", "Int", "String", "GenericList[]",
                          "GenericList[]"]),
        flat(7, "nccl:all_reduce", 6, ts=205, dur=20, inputs=[TENSOR], input_types=["Tensor(float)"]),
        flat(1, "[pytorch|profiler|execution_trace|process]", 1, rf_id=0, tid=0),
        gpu(20, "k1", 4, 130, 40, 7),
        gpu(21, "k2", 5, 175, 5, 7),
        gpu(22, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 7, 230,
            100, 20, inputs=[TENSOR], pg_name="", collective_name="", comm_size=0),
    ]
    return {"schema": "1.0.1", "pid": 7, "time": "2026-01-01 00:00:00", "start_ts": 1, "finish_ts": 2,
            "nodes": nodes, "rank": 3, "world_size": 4,
            "measured": {"window": "ProfilerStep#1", "start_us": 90.0, "dur_us": 300.0, "steps": []}}


def by_id(nodes):
    return {n.id: n for n in nodes}


def attrs(node):
    return {a.name: attr_value(a) for a in node.attr}


def chakra_node(nid, name, parent, attrs=None, inputs=None, types=None, **kw):
    base = [{"name": "rf_id", "type": "uint64", "value": kw.pop("rf_id", nid)},
            {"name": "fw_parent", "type": "uint64", "value": 0},
            {"name": "seq_id", "type": "int64", "value": -1},
            {"name": "scope", "type": "uint64", "value": 0},
            {"name": "tid", "type": "uint64", "value": 1},
            {"name": "fw_tid", "type": "uint64", "value": 0},
            {"name": "op_schema", "type": "string", "value": kw.pop("op_schema", "")}]
    n = {"id": nid, "name": name, "ctrl_deps": parent,
         "inputs": {"values": inputs or [], "shapes": [[] for _ in inputs or []], "types": types or []},
         "outputs": {"values": [], "shapes": [], "types": []}, "attrs": base + (attrs or [])}
    n.update(kw)
    return n


PG_PAYLOAD = json.dumps([
    {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [], "group_size": 2,
     "group_count": 2},
    {"pg_name": "5", "pg_desc": "pair", "backend_config": "cpu:gloo", "ranks": [1, 0], "group_size": 2,
     "group_count": 2},
])


SEND_SCHEMA = ("c10d::send(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
               "int dst, int tag) -> __torch__.torch.classes.c10d.Work")


T32 = [40, 41, 0, 32, 4, "cpu"]


def gloo_etplus() -> dict:
    """A gloo trace: reduce_scatter implemented by a gloo all_reduce record on a worker thread, a send."""
    nodes = [
        chakra_node(2, "[pytorch|profiler|execution_trace|thread]", 1, rf_id=0),
        chakra_node(3, "## process_group:init ##", 2, inputs=[PG_PAYLOAD], types=["String"], rf_id=1),
        chakra_node(4, "ProfilerStep#1", 2, rf_id=2, ts=1000.0, dur=500.0, exclusive_dur=100.0,
                    kineto_tid=11),
        chakra_node(5, "c10d::_reduce_scatter_base_", 4, rf_id=3, ts=1010.0, dur=20.0, exclusive_dur=20.0,
                    kineto_tid=11, inputs=[[30, 31, 0, 64, 4, "cpu"], [32, 33, 0, 128, 4, "cpu"]],
                    types=["Tensor(float)", "Tensor(float)"]),
        # the gloo record hangs under the step in the ET but runs on the gloo worker thread 12
        chakra_node(6, "gloo:all_reduce", 4, rf_id=4, ts=1015.0, dur=200.0, exclusive_dur=200.0,
                    kineto_tid=12, inputs=[[34, 35, 0, 128, 4, "cpu"]], types=["Tensor(float)"]),
        chakra_node(7, "aten::add", 4, rf_id=5, ts=1040.0, dur=10.0, exclusive_dur=10.0, kineto_tid=11,
                    inter_thread_dep=6),
        chakra_node(8, "c10d::send", 4, rf_id=6, ts=1100.0, dur=60.0, exclusive_dur=5.0, kineto_tid=11,
                    op_schema=SEND_SCHEMA, inputs=[[T32], "<Object>", 0, 9],
                    types=["GenericList[Tensor(float)]", "Object", "Int", "Int"]),
        chakra_node(9, "gloo:send", 8, rf_id=7, ts=1103.0, dur=55.0, exclusive_dur=55.0, kineto_tid=11,
                    inputs=[T32], types=["Tensor(float)"]),
        chakra_node(1, "[pytorch|profiler|execution_trace|process]", 1, rf_id=0),
    ]
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 9, "time": "t", "start_ts": 0, "finish_ts": 0,
            "nodes": nodes, "rank": 1, "world_size": 2, "process_groups": [],
            "measured": {"window": "ProfilerStep#1", "start_us": 1000.0, "dur_us": 500.0, "steps": []}}
