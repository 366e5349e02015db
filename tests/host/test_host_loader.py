"""Host ET loader, process-group table and communication fields.

Corpus tests read the real traces from ../shared/traces (values read off the
files by hand); the tmp_path tests on tiny hand-written traces always run.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from chakra.errors import TraceFormatError
from chakra.host.comm import (
    CANONICAL_COLLECTIVES,
    canonical_collective,
    comm_info,
    comm_infos,
    comm_type_of,
    schema_arg_names,
)
from chakra.host.loader import load_host_et
from chakra.host.model import METADATA, OP, PROCESS_ROOT, THREAD_ROOT, HostOp, IOInfo, ProcessGroup
from chakra.host.process_groups import (
    PayloadError,
    group_to_record,
    groups_from_kineto,
    merge_process_groups,
    parse_pg_init,
)
from chakra.io import load_json
from chakra.schema import ALL_REDUCE, ALL_TO_ALL, BARRIER, REDUCE_SCATTER

# ---------------------------------------------------------------------------
# The real corpus
# ---------------------------------------------------------------------------

# (file, schema, layout, node count, thread-root count, METADATA count) read off the files.
HOST_ETS = [
    ("dlrm_8r_v100/host/host_et_0.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_1.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_2.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_3.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_4.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_5.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_6.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/host/host_et_7.json.gz", "1.0.1", "flat", 1675, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz", "1.0.1", "flat", 1936, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_1.json.gz", "1.0.1", "flat", 2001, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_2.json.gz", "1.0.1", "flat", 1937, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_3.json.gz", "1.0.1", "flat", 2006, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_4.json.gz", "1.0.1", "flat", 1942, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_5.json.gz", "1.0.1", "flat", 1936, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_6.json.gz", "1.0.1", "flat", 1937, 2, 0),
    ("dlrm_8r_v100/et_plus_2023/et_plus_7.json.gz", "1.0.1", "flat", 1937, 2, 0),
    ("simple_add_1r/host_et_0.json.gz", "1.0.1", "flat", 38, 1, 0),
    ("cpu_gloo/ddp_mlp_4r/host_et_0.json.gz", "1.1.1-chakra.0.0.4", "chakra", 461, 1, 1),
    ("cpu_gloo/ddp_mlp_4r/host_et_1.json.gz", "1.1.1-chakra.0.0.4", "chakra", 461, 1, 1),
    ("cpu_gloo/ddp_mlp_4r/host_et_2.json.gz", "1.1.1-chakra.0.0.4", "chakra", 461, 1, 1),
    ("cpu_gloo/ddp_mlp_4r/host_et_3.json.gz", "1.1.1-chakra.0.0.4", "chakra", 461, 1, 1),
    ("cpu_gloo/fsdp_2r/host_et_0.json.gz", "1.1.1-chakra.0.0.4", "chakra", 1133, 3, 1),
    ("cpu_gloo/fsdp_2r/host_et_1.json.gz", "1.1.1-chakra.0.0.4", "chakra", 1133, 3, 1),
    ("cpu_gloo/tp_like_2r/host_et_0.json.gz", "1.1.1-chakra.0.0.4", "chakra", 250, 3, 1),
    ("cpu_gloo/tp_like_2r/host_et_1.json.gz", "1.1.1-chakra.0.0.4", "chakra", 250, 3, 1),
    ("cpu_gloo/single_1r/host_et_0.json.gz", "1.1.1-chakra.0.0.4", "chakra", 258, 1, 0),
    ("host_only/ddp_2gpu_rank0_1.0.2-chakra.0.0.4.json.gz", "1.0.2-chakra.0.0.4", "chakra", 263, 1, 1),
    ("host_only/resnet_1gpu_1.0.3-chakra.0.0.4.json.gz", "1.0.3-chakra.0.0.4", "chakra", 14391, 2, 0),
    ("host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz", "1.1.0-chakra.0.0.4", "chakra", 14392, 2, 1),
]


def test_corpus_list_is_complete(corpus: Path) -> None:
    on_disk = {
        str(p.relative_to(corpus))
        for p in corpus.rglob("*.json.gz")
        # (Kineto traces: kineto_N files, and everything under kineto_only/)
        if not p.name.startswith("kineto_") and "kineto_only" not in p.relative_to(corpus).parts
    }
    assert on_disk == {row[0] for row in HOST_ETS}


@pytest.mark.parametrize("rel, schema, layout, count, threads, metas", HOST_ETS, ids=[r[0] for r in HOST_ETS])
def test_every_host_et_loads(corpus: Path, rel: str, schema: str, layout: str, count: int,
                             threads: int, metas: int) -> None:
    trace = load_host_et(corpus / rel)
    assert trace.schema == schema
    assert trace.layout == layout
    assert trace.warnings == []
    assert len(trace.ops) == count
    assert len(trace.by_id) == count
    assert [op.index for op in trace.ops] == list(range(count))
    kinds = [op.kind for op in trace.ops]
    assert kinds.count(PROCESS_ROOT) == 1
    assert kinds.count(THREAD_ROOT) == threads
    assert kinds.count(METADATA) == metas
    root = trace.by_id[1]
    assert root.kind == PROCESS_ROOT and root.parent == 1
    # the process root is written last
    assert trace.ops[-1].id == 1 or layout == "flat" and "et_plus" in rel
    for op in trace.ops:
        if op.kind == THREAD_ROOT:
            assert op.parent == 1
    if metas:
        assert trace.metadata_id is not None
        assert trace.by_id[trace.metadata_id].kind == METADATA
        assert trace.process_groups
    else:
        assert trace.metadata_id is None


def test_dlrm_flat_fields(corpus: Path) -> None:
    trace = load_host_et(corpus / "dlrm_8r_v100/host/host_et_0.json.gz")
    assert (trace.pid, trace.time, trace.start_ts, trace.finish_ts) == (
        59811, "2023-09-07 16:09:59", 6672645, 6674697)
    assert trace.extra == {}
    assert [op.id for op in trace.ops if op.kind == THREAD_ROOT] == [2, 1113]
    assert trace.by_id[2].name == "[pytorch|profiler|execution_graph|thread]"
    op = trace.by_id[1246]
    assert (op.name, op.parent, op.rf_id, op.tid, op.seq_id, op.scope, op.op_schema) == (
        "record_param_comms", 1245, 903, 2, -1, 0, "")
    assert op.inputs.types[:5] == ["GenericList[Tensor(float)]", "Int", "Int", "Int", "String"]
    assert op.outputs.values == [[[1244, 1156, 0, 394241, 4, "cuda:0"]]]
    assert op.inputs.strides is None
    assert op.attrs == {}


def test_et_plus_extra_node_keys_go_to_attrs(corpus: Path) -> None:
    trace = load_host_et(corpus / "dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz")
    op = trace.by_id[21]
    assert (op.name, op.index, op.parent, op.rf_id) == ("aten::as_strided", 10, 20, 13)
    assert op.attrs == {"dur": 1, "ts": 1694128201427009}
    gpu = trace.by_id[524]  # first appended GPU node: a memcpy, no rf_id
    assert gpu.index == 1675
    assert gpu.rf_id is None
    assert (gpu.parent, gpu.tid, gpu.kind) == (523, 22, OP)
    assert gpu.attrs["cat"] == "gpu_memcpy"
    assert gpu.attrs["ph"] == "X"
    assert gpu.attrs["ts"] == 1694128201428003
    assert gpu.attrs["args"]["correlation"] == 40772
    # keys the typed decoder knows come in the order the linker writes them (the file has ph, cat, pid,
    # ts, dur, args); a node with a key it does not know keeps file order (test_host_decode)
    assert list(gpu.attrs) == ["cat", "ph", "ts", "dur", "pid", "args"]
    assert trace.ops[-1].id == 2241


def test_chakra_layout_fields_and_strides(corpus: Path) -> None:
    trace = load_host_et(corpus / "cpu_gloo/tp_like_2r/host_et_0.json.gz")
    op = trace.by_id[101]
    assert (op.name, op.parent, op.rf_id, op.tid, op.scope, op.seq_id, op.fw_parent) == (
        "gloo:all_reduce", 4, 63, 1, 7, -1, 0)
    assert op.inputs == IOInfo([[98, 44, 0, 1024, 4, "cpu"]], [[16, 64]], ["Tensor(float)"], [[64, 1]])
    assert op.outputs.strides == []
    assert op.attrs == {"kernel_backend": "", "kernel_file": "", "tensor_range": ""}
    assert op.attr_types == {"kernel_backend": "string", "kernel_file": "string", "tensor_range": "string"}
    send = trace.by_id[288]
    assert send.op_schema.startswith("c10d::send(Tensor[] tensors")
    assert send.seq_id == 30


def test_simple_add_param_annotations_are_ops(corpus: Path) -> None:
    trace = load_host_et(corpus / "simple_add_1r/host_et_0.json.gz")
    assert trace.by_id[3].name == "[param|cuda]"
    assert trace.by_id[3].kind == OP
    assert trace.by_id[2].kind == THREAD_ROOT


# -- process groups ----------------------------------------------------------

def _pgs(trace: Any) -> list[tuple[Any, ...]]:
    return [(g.pg_name, g.pg_desc, g.backend, g.ranks, g.group_size, g.group_count)
            for g in trace.process_groups]


def test_tp_like_process_groups(corpus: Path) -> None:
    t0 = load_host_et(corpus / "cpu_gloo/tp_like_2r/host_et_0.json.gz")
    assert t0.metadata_id == 3
    assert t0.by_id[3].kind == METADATA
    assert t0.world_size == 2
    assert _pgs(t0) == [
        ("0", "default_pg", "cpu:gloo,cuda:gloo", (0, 1), 2, 4),
        ("1", "tp_subgroup", "cpu:gloo,cuda:gloo", (0, 1), 2, 4),
        ("2", "solo_0", "cpu:gloo,cuda:gloo", (0,), 1, 4),
    ]
    t1 = load_host_et(corpus / "cpu_gloo/tp_like_2r/host_et_1.json.gz")
    assert [(g.pg_name, g.pg_desc, g.ranks) for g in t1.process_groups] == [
        ("0", "default_pg", (0, 1)), ("1", "tp_subgroup", (0, 1)), ("3", "solo_1", (1,))]


@pytest.mark.parametrize("rel, world", [
    ("cpu_gloo/ddp_mlp_4r/host_et_2.json.gz", 4),
    ("cpu_gloo/fsdp_2r/host_et_1.json.gz", 2),
])
def test_default_group_only(corpus: Path, rel: str, world: int) -> None:
    trace = load_host_et(corpus / rel)
    assert trace.metadata_id == 3
    assert _pgs(trace) == [("0", "default_pg", "cpu:gloo,cuda:gloo", tuple(range(world)), world, 1)]


def test_host_only_payloads(corpus: Path) -> None:
    # 1.0.2: the payload has no pg_desc but a backend_id, which record_param_comms carries as its pg input
    t = load_host_et(corpus / "host_only/ddp_2gpu_rank0_1.0.2-chakra.0.0.4.json.gz")
    assert t.metadata_id == 3
    assert [(g.pg_name, g.pg_desc, g.backend, g.ranks, g.group_size, g.backend_id)
            for g in t.process_groups] == [("0", "", "cuda:nccl", (0, 1), 2, 82149104)]
    t = load_host_et(corpus / "host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz")
    assert t.metadata_id == 4
    assert _pgs(t) == [("0", "default_pg", "cuda:nccl", (0, 1), 2, 1)]


def test_kineto_distributed_info_groups(corpus: Path) -> None:
    kineto = load_json(corpus / "cpu_gloo/tp_like_2r/kineto_0.json.gz")
    groups = groups_from_kineto(kineto["distributedInfo"])
    assert [(g.pg_name, g.pg_desc, g.backend, g.ranks, g.group_size, g.group_count) for g in groups] == [
        ("0", "default_pg", "cpu:gloo,cuda:gloo", (0, 1), 2, 4),
        ("1", "tp_subgroup", "cpu:gloo,cuda:gloo", (0, 1), 2, 4),
        ("2", "solo_0", "cpu:gloo,cuda:gloo", (0,), 1, 4),
    ]
    host = load_host_et(corpus / "cpu_gloo/tp_like_2r/host_et_0.json.gz").process_groups
    assert merge_process_groups(host, groups) == host


# -- communication fields ------------------------------------------------------

def test_dlrm_record_param_comms_positional(corpus: Path) -> None:
    t0 = load_host_et(corpus / "dlrm_8r_v100/host/host_et_0.json.gz")
    ar = comm_info(t0.by_id[1246])
    assert ar is not None
    assert (ar.collective_name, ar.seq, ar.pg_id, ar.rank, ar.dtype, ar.in_msg_nelems, ar.out_msg_nelems,
            ar.elem_bytes, ar.source) == ("allreduce", 151, 94594108284448, 0, "float", 394241, 394241, 4,
                                          "inputs")
    assert ar.pg_name == ""
    a2a = comm_info(t0.by_id[1103])
    assert a2a is not None
    assert a2a.collective_name == "all_to_allv"
    assert canonical_collective(a2a.collective_name) == "all_to_all"
    assert a2a.in_split_size == [96, 224, 288, 1664, 592, 96, 192, 240]
    assert a2a.out_split_size == [96] * 8
    assert (a2a.in_msg_nelems, a2a.out_msg_nelems, a2a.dtype, a2a.elem_bytes) == (3392, 768, "int", 4)
    wait = comm_info(t0.by_id[606])
    assert wait is not None
    assert (wait.collective_name, wait.seq, wait.pg_id, wait.in_msg_nelems) == ("wait", 141, None, 0)
    t3 = load_host_et(corpus / "dlrm_8r_v100/host/host_et_3.json.gz")
    a2a3 = comm_info(t3.by_id[1103])
    assert a2a3 is not None
    assert (a2a3.rank, a2a3.out_split_size, a2a3.out_msg_nelems) == (3, [1664] * 8, 13312)
    counts: dict[str, int] = {}
    for info in comm_infos(t0.ops).values():
        key = canonical_collective(info.collective_name)
        counts[key] = counts.get(key, 0) + 1
    # 13 record_param_comms (5 all_to_all(v), 3 allreduce, 5 wait) + 5 nccl:all_to_all + 5
    # c10d::alltoall_base_ + 3 nccl:all_reduce + 3 c10d::allreduce_
    assert counts == {"wait": 5, "all_to_all": 15, "allreduce": 9}


def test_dlrm_backend_ops(corpus: Path) -> None:
    t0 = load_host_et(corpus / "dlrm_8r_v100/host/host_et_0.json.gz")
    nccl = comm_info(t0.by_id[1247])
    assert nccl is not None
    assert (nccl.collective_name, nccl.in_msg_nelems, nccl.elem_bytes, nccl.source) == (
        "all_reduce", 394241, 4, "op")
    c10d = comm_info(t0.by_id[1102])  # alltoall_base_(output, input, pg, output_split, input_split, timeout)
    assert c10d is not None
    assert (c10d.in_msg_nelems, c10d.out_msg_nelems) == (3392, 768)
    assert c10d.in_split_size == [96, 224, 288, 1664, 592, 96, 192, 240]
    assert c10d.out_split_size == [96] * 8
    assert comm_info(t0.by_id[21]) is None  # not a comm op


def test_record_param_comms_1_0_2_backend_id(corpus: Path) -> None:
    t = load_host_et(corpus / "host_only/ddp_2gpu_rank0_1.0.2-chakra.0.0.4.json.gz")
    info = comm_info(t.by_id[30], t.process_groups)
    assert info is not None
    assert (info.collective_name, info.seq, info.pg_id, info.pg_name, info.world_size,
            info.in_msg_nelems, info.out_msg_nelems) == ("all_gather", 12, 82149104, "0", 2, 1, 2)
    assert comm_info(t.by_id[30]).pg_name == ""  # without the table the id stays unresolved


def test_record_param_comms_1_0_3_tuple_pg(corpus: Path) -> None:
    t = load_host_et(corpus / "host_only/resnet_1gpu_1.0.3-chakra.0.0.4.json.gz")
    info = comm_info(t.by_id[436])
    assert info is not None
    assert (info.collective_name, info.pg_name, info.pg_desc, info.seq, info.global_rank_start,
            info.global_rank_stride, info.world_size, info.in_msg_nelems) == (
        "broadcast", "0", "default_pg", 33, 0, 1, 1, 53120)


def test_record_param_comms_1_1_0_attrs(corpus: Path) -> None:
    t = load_host_et(corpus / "host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz")
    b = comm_info(t.by_id[437])
    assert b is not None
    assert (b.source, b.collective_name, b.dtype, b.in_msg_nelems, b.out_msg_nelems, b.pg_name, b.pg_desc,
            b.pg_size, b.global_rank_start, b.global_rank_stride, b.elem_bytes, b.seq) == (
        "attrs", "broadcast", "Float", 53120, 53120, "0", "default_pg", 2, 0, 1, 4, 33)
    assert b.in_split_size == [] and b.out_split_size == []
    ar = comm_info(t.by_id[15894])
    assert ar is not None
    assert (ar.collective_name, ar.in_msg_nelems, ar.rank) == ("allreduce", 2431040, 1)
    wait = comm_info(t.by_id[604])
    assert wait is not None
    assert (wait.collective_name, wait.pg_name, wait.pg_size, wait.seq) == ("wait", "", 1, 33)


def test_gloo_c10d_ops(corpus: Path) -> None:
    t = load_host_et(corpus / "cpu_gloo/tp_like_2r/host_et_0.json.gz")
    send = comm_info(t.by_id[288])
    recv = comm_info(t.by_id[290])
    assert send is not None and recv is not None
    assert (canonical_collective(send.collective_name), send.peer, send.tag, send.in_msg_nelems) == (
        "send", 1, 0, 32)
    assert (canonical_collective(recv.collective_name), recv.peer, recv.tag, recv.out_msg_nelems) == (
        "recv", 1, 0, 32)
    rs = comm_info(t.by_id[239])
    assert rs is not None
    assert (canonical_collective(rs.collective_name), rs.in_msg_nelems, rs.out_msg_nelems) == (
        "reduce_scatter", 8192, 4096)
    ag = comm_info(t.by_id[31])
    assert ag is not None
    assert (canonical_collective(ag.collective_name), ag.in_msg_nelems, ag.out_msg_nelems) == (
        "allgather", 1024, 2048)
    bc = comm_info(t.by_id[330])
    assert bc is not None
    assert (bc.root, bc.dtype, bc.elem_bytes, bc.in_msg_nelems) == (0, "long int", 8, 16)
    gl = comm_info(t.by_id[101])
    assert gl is not None
    assert (gl.collective_name, gl.in_msg_nelems, gl.dtype) == ("all_reduce", 1024, "float")
    barrier = comm_info(t.by_id[384])
    assert barrier is not None and canonical_collective(barrier.collective_name) == "barrier"
    names = sorted({canonical_collective(i.collective_name) for i in comm_infos(t.ops).values()})
    assert names == ["all_to_all", "allgather", "allreduce", "barrier", "broadcast", "recv",
                     "reduce_scatter", "send"]


# ---------------------------------------------------------------------------
# Hand-written traces (always run)
# ---------------------------------------------------------------------------

def _write(path: Path, data: Any, gz: bool = False) -> Path:
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def _chakra_node(nid: int, name: str, parent: int, **attrs: Any) -> dict[str, Any]:
    base = {"rf_id": nid, "fw_parent": 0, "seq_id": -1, "scope": 0, "tid": 1, "fw_tid": 0, "op_schema": ""}
    base.update(attrs)
    types = {"op_schema": "string", "seq_id": "int64"}
    return {
        "id": nid, "name": name, "ctrl_deps": parent,
        "inputs": {"values": [], "shapes": [], "types": []},
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": [{"name": k, "type": types.get(k, "uint64" if isinstance(v, int) else "string"), "value": v}
                  for k, v in base.items()],
    }


def _flat_node(nid: int, name: str, parent: int, **extra: Any) -> dict[str, Any]:
    n = {"name": name, "id": nid, "rf_id": nid + 100, "parent": parent, "fw_parent": 0, "seq_id": -1,
         "scope": 0, "tid": 1, "fw_tid": 0, "op_schema": "", "inputs": [[5, 6, 0, 8, 4, "cpu"], 3],
         "input_shapes": [[2, 4], []], "input_types": ["Tensor(float)", "Int"], "outputs": [],
         "output_shapes": [], "output_types": []}
    n.update(extra)
    return n


def _flat_trace() -> dict[str, Any]:
    return {
        "schema": "1.0.1", "pid": 7, "time": "2024-01-01 00:00:00", "start_ts": 10,
        "nodes": [
            _flat_node(2, "[pytorch|profiler|execution_trace|thread]", 1),
            _flat_node(3, "aten::add", 2, ts=5.5, dur=2),
            _flat_node(1, "[pytorch|profiler|execution_trace|process]", 1),
        ],
        "finish_ts": 20, "rank": 0, "world_size": 1, "measured": {"window": "span"},
    }


@pytest.mark.parametrize("gz", [False, True])
def test_tiny_flat(tmp_path: Path, gz: bool) -> None:
    path = _write(tmp_path / ("t.json.gz" if gz else "t.json"), _flat_trace(), gz)
    t = load_host_et(path)
    assert (t.schema, t.layout, t.pid, t.start_ts, t.finish_ts, t.rank, t.world_size) == (
        "1.0.1", "flat", 7, 10, 20, 0, 1)
    assert t.extra == {"rank": 0, "world_size": 1, "measured": {"window": "span"}}
    assert [(o.id, o.kind, o.index) for o in t.ops] == [(2, THREAD_ROOT, 0), (3, OP, 1), (1, PROCESS_ROOT, 2)]
    add = t.by_id[3]
    assert (add.parent, add.rf_id, add.attrs) == (2, 103, {"ts": 5.5, "dur": 2})
    assert add.inputs == IOInfo([[5, 6, 0, 8, 4, "cpu"], 3], [[2, 4], []], ["Tensor(float)", "Int"], None)
    assert t.process_groups == [] and t.metadata_id is None


def test_tiny_chakra_with_python_repr_pg_init(tmp_path: Path) -> None:
    payload = ("[{'pg_name': '0', 'pg_desc': 'default_pg', 'backend_config': 'cuda:nccl', 'ranks': [], "
               "'group_size': 4, 'group_count': 2}, {'pg_name': '5', 'pg_desc': 'pair', "
               "'backend_config': 'cuda:nccl', 'ranks': [2, 3], 'group_size': 2, 'group_count': 2}]")
    pg = _chakra_node(3, "## process_group:init ##", 2)
    pg["inputs"] = {"values": [payload], "shapes": [[]], "types": ["String"]}
    op = _chakra_node(4, "aten::mul", 2, kernel_backend="", seq_id=9)
    op["inputs"] = {"values": [[7, 8, 0, 6, 2, "cuda:0"]], "shapes": [[2, 3]], "types": ["Tensor(c10::Half)"],
                    "strides": [[3, 1]]}
    op["ts"] = 12.25
    data = {"schema": "1.0.2-chakra.0.0.4", "pid": 1, "time": "t", "start_ts": 0, "finish_ts": 1, "nodes": [
        _chakra_node(2, "[pytorch|profiler|execution_trace|thread]", 1), pg, op,
        _chakra_node(1, "[pytorch|profiler|execution_trace|process]", 1)]}
    t = load_host_et(_write(tmp_path / "c.json", data))
    assert t.layout == "chakra"
    assert t.metadata_id == 3 and t.by_id[3].kind == METADATA
    assert t.world_size == 4
    assert [(g.pg_name, g.ranks, g.group_size) for g in t.process_groups] == [
        ("0", (0, 1, 2, 3), 4), ("5", (2, 3), 2)]
    mul = t.by_id[4]
    assert (mul.rf_id, mul.seq_id, mul.tid, mul.parent) == (4, 9, 1, 2)
    assert mul.attrs == {"kernel_backend": "", "ts": 12.25}
    assert mul.attr_types == {"kernel_backend": "string"}
    assert mul.inputs.strides == [[3, 1]]


def test_process_root_by_id_without_name(tmp_path: Path) -> None:
    data = _flat_trace()
    data["nodes"][2]["name"] = "something_else"
    t = load_host_et(_write(tmp_path / "t.json", data))
    assert t.by_id[1].kind == PROCESS_ROOT


def test_deep_chain_without_recursion(tmp_path: Path) -> None:
    n = 20000  # far deeper than Python's recursion limit
    nodes = [_flat_node(i, "aten::x", i - 1) for i in range(2, n + 2)]
    nodes.append(_flat_node(1, "[pytorch|profiler|execution_trace|process]", 1))
    t = load_host_et(_write(tmp_path / "deep.json", {"schema": "1.0.1", "nodes": nodes}))
    assert len(t.ops) == n + 1
    assert t.by_id[n + 1].parent == n


def test_unknown_newer_schema_loads_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = {"schema": "1.2.0-chakra.1.0.0", "nodes": [
        _chakra_node(2, "[pytorch|profiler|execution_trace|thread]", 1),
        _chakra_node(1, "[pytorch|profiler|execution_trace|process]", 1)]}
    path = _write(tmp_path / "new.json", data)
    with caplog.at_level(logging.WARNING, logger="chakra.host.loader"):
        t = load_host_et(path)
    assert t.layout == "chakra" and len(t.ops) == 2
    assert len(t.warnings) == 1 and "1.2.0-chakra.1.0.0" in t.warnings[0]
    assert any("unknown schema" in r.getMessage() for r in caplog.records)


def test_schema_and_shape_disagree_follows_nodes(tmp_path: Path) -> None:
    data = {"schema": "1.0.1", "nodes": [_chakra_node(1, "[pytorch|profiler|execution_trace|process]", 1)]}
    t = load_host_et(_write(tmp_path / "x.json", data))
    assert t.layout == "chakra"
    assert len(t.warnings) == 1 and "following the nodes" in t.warnings[0]


def _bad(tmp_path: Path, data: Any, needle: str, raw: bytes | None = None) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(raw if raw is not None else json.dumps(data).encode())
    with pytest.raises(TraceFormatError) as exc:
        load_host_et(path)
    assert str(path) in str(exc.value)
    assert needle in str(exc.value)


def test_error_not_json(tmp_path: Path) -> None:
    _bad(tmp_path, None, "not valid JSON", raw=b"{\"nodes\": [1,")


def test_error_truncated_gzip(tmp_path: Path) -> None:
    _bad(tmp_path, None, "gzip", raw=gzip.compress(json.dumps(_flat_trace()).encode())[:-20])


def test_error_no_nodes(tmp_path: Path) -> None:
    _bad(tmp_path, {"schema": "1.0.1", "pid": 3}, "no 'nodes'")


def test_error_nodes_not_list(tmp_path: Path) -> None:
    _bad(tmp_path, {"schema": "1.0.1", "nodes": {"1": {}}}, "expected a list")


def test_error_duplicate_ids(tmp_path: Path) -> None:
    data = _flat_trace()
    data["nodes"].insert(2, _flat_node(3, "aten::again", 2))
    _bad(tmp_path, data, "duplicate node id 3 (indices 1 and 2)")


def test_error_node_without_id_or_name(tmp_path: Path) -> None:
    data = _flat_trace()
    del data["nodes"][1]["id"]
    _bad(tmp_path, data, "node at index 1 has no id")
    data = _flat_trace()
    del data["nodes"][1]["name"]
    _bad(tmp_path, data, "node id 3 (index 1) has no name")
    data = {"schema": "1.1.1-chakra.0.0.4", "nodes": [_chakra_node(1, "x", 1), _chakra_node(2, "y", 1)]}
    data["nodes"][1]["id"] = "2"
    _bad(tmp_path, data, "non-integer id '2'")


def test_error_unknown_layout(tmp_path: Path) -> None:
    _bad(tmp_path, {"schema": "1.0.1", "nodes": [{"id": 1, "name": "x", "edges": []}]}, "unknown node layout")
    _bad(tmp_path, {"schema": "9-zzz", "nodes": []}, "unknown schema")


def test_error_mixed_layout_names_node(tmp_path: Path) -> None:
    data = {"schema": "1.1.1-chakra.0.0.4", "nodes": [_chakra_node(2, "a", 1), _flat_node(5, "b", 2)]}
    _bad(tmp_path, data, "node id 5 (index 1): inputs is a list")


def test_error_bad_pg_payload(tmp_path: Path) -> None:
    pg = _chakra_node(3, "## process_group:init ##", 1)
    pg["inputs"] = {"values": ["[{pg_name: 0"], "shapes": [[]], "types": ["String"]}
    _bad(tmp_path, {"schema": "1.1.0-chakra.0.0.4", "nodes": [pg]}, "node id 3")


def test_error_not_an_object(tmp_path: Path) -> None:
    _bad(tmp_path, [1, 2], "expected a JSON object")


# -- parse_pg_init / Kineto helper, by hand ---------------------------------------

def test_parse_pg_init_json_and_repr_agree() -> None:
    recs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": [],
             "group_size": 8, "group_count": 3},
            {"pg_name": "28", "pg_desc": "undefined", "backend_config": "cuda:nccl", "ranks": [2, 3],
             "group_size": 2, "group_count": 3}]
    a = parse_pg_init(json.dumps(recs), None)
    b = parse_pg_init(repr(recs), None)
    assert a == b
    assert a[0].ranks == tuple(range(8)) and a[1].ranks == (2, 3)
    assert [group_to_record(g) for g in a][1] == {
        "pg_name": "28", "pg_desc": "undefined", "backend_config": "cuda:nccl", "ranks": [2, 3],
        "group_size": 2, "group_count": 3}
    # the simulator's METADATA form: str() of a one-element list holding the JSON text
    assert parse_pg_init(str([json.dumps(recs)]), None) == a


def test_parse_pg_init_world_size_and_unknown() -> None:
    rec = "[{'pg_name': '7', 'backend_config': 'cpu:gloo', 'ranks': [], 'group_size': 3, 'group_count': 1}]"
    assert parse_pg_init(rec, None)[0].ranks == ()  # no default group, no world size: unresolved
    assert parse_pg_init(rec, 3)[0].ranks == (0, 1, 2)
    assert parse_pg_init("", None) == []


@pytest.mark.parametrize("payload", ["__import__('os').system('true')", "[1, 2]", "{'ranks': []}", 5])
def test_parse_pg_init_rejects(payload: Any) -> None:
    with pytest.raises(PayloadError):
        parse_pg_init(payload, None)


def test_groups_from_kineto_by_hand() -> None:
    info = {"backend": "nccl", "rank": 1, "world_size": 4, "pg_count": 2, "pg_config": [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 4, "ranks": []},
        {"pg_name": "3", "pg_desc": "dp", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [1, 3]}]}
    groups = groups_from_kineto(info)
    assert [(g.pg_name, g.ranks, g.group_size, g.group_count) for g in groups] == [
        ("0", (0, 1, 2, 3), 4, 2), ("3", (1, 3), 2, 2)]
    host = [ProcessGroup("0", "", "cuda:nccl", (0, 1, 2, 3), 4, 0, 99)]
    merged = merge_process_groups(host, groups)
    assert [(g.pg_name, g.pg_desc, g.group_count, g.backend_id) for g in merged] == [
        ("0", "default_pg", 2, 99), ("3", "dp", 2, None)]
    assert groups_from_kineto(None) == []


# -- collective names and c10d schemas ---------------------------------------------

@pytest.mark.parametrize("name, canon", [
    ("c10d::allreduce_", "allreduce"), ("nccl:all_reduce", "allreduce"), ("gloo:all_reduce", "allreduce"),
    ("allreduce_coalesced", "allreduce"), ("ALLREDUCE", "allreduce"),
    ("c10d::_allgather_base_", "allgather"), ("all_gather", "allgather"),
    ("allgather_into_tensor_coalesced", "allgather"),
    ("c10d::_reduce_scatter_base_", "reduce_scatter"), ("reduce_scatter_tensor", "reduce_scatter"),
    ("nccl:all_to_all", "all_to_all"), ("all_to_allv", "all_to_all"), ("c10d::alltoall_base_", "all_to_all"),
    ("broadcast", "broadcast"), ("c10d::broadcast_", "broadcast"), ("reduce", "reduce"),
    ("gather", "gather"), ("scatter", "scatter"), ("c10d::barrier", "barrier"),
    ("monitored_barrier", "barrier"), ("c10d::send", "send"), ("isend", "send"), ("c10d::recv_", "recv"),
    ("recv_any_source", "recv"), ("wait", "wait"), ("c10d::_something_new_", "something_new"), ("", ""),
])
def test_canonical_collective(name: str, canon: str) -> None:
    assert canonical_collective(name) == canon


def test_canonical_names_and_comm_types() -> None:
    assert all(canonical_collective(c) == c for c in CANONICAL_COLLECTIVES)
    assert (comm_type_of("allreduce"), comm_type_of("all_to_all"), comm_type_of("reduce_scatter"),
            comm_type_of("barrier"), comm_type_of("send")) == (ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER,
                                                              BARRIER, None)


def test_schema_arg_names() -> None:
    s = ("c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d.ProcessGroup "
         "process_group, int[] output_split_sizes, int[] input_split_sizes, bool async_op=True, "
         "int timeout=-1) -> __torch__.torch.classes.c10d.Work")
    assert schema_arg_names(s) == ("output", "input", "process_group", "output_split_sizes",
                                   "input_split_sizes", "async_op", "timeout")
    assert schema_arg_names("aten::randn.generator(SymInt[] size, *, Generator? generator) -> Tensor") == (
        "size", "generator")
    assert schema_arg_names("") == ()


def test_comm_info_by_hand_1_0_1_positional() -> None:
    t = [1, 2, 0, 10, 2, "cuda:1"]
    op = HostOp(9, "record_param_comms", 8,
                inputs=IOInfo([[t], 4, 1234, 1, "reduce_scatter", [], []],
                              [], ["GenericList[Tensor(c10::Half)]", "Int", "Int", "Int", "String",
                                   "GenericList[]", "GenericList[]"]),
                outputs=IOInfo([[3, 4, 0, 5, 2, "cuda:1"]], [], ["Tensor(c10::Half)"]))
    info = comm_info(op)
    assert info is not None
    assert (info.collective_name, info.seq, info.pg_id, info.rank, info.in_msg_nelems, info.out_msg_nelems,
            info.elem_bytes, info.dtype) == ("reduce_scatter", 4, 1234, 1, 10, 5, 2, "c10::Half")
    assert comm_info(HostOp(1, "aten::mm", 0)) is None


def test_empty_node_list_uses_schema_layout(tmp_path: Path) -> None:
    t = load_host_et(_write(tmp_path / "e.json", {"schema": "1.1.1-chakra.1.0.0", "nodes": []}))
    assert (t.layout, t.ops, t.by_id, t.warnings) == ("chakra", [], {}, [])
    t = load_host_et(_write(tmp_path / "f.json", {"schema": "1.0.1", "nodes": []}))
    assert t.layout == "flat"
