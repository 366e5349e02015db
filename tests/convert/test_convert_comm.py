"""Converter comm rules: one comm_size convention, the pg_name fallback warning, --astrasim-safe."""

from __future__ import annotations

import json

import orjson
import pytest
from conftest import CORPUS, needs_corpus
from helpers.et_checks import check_et
from helpers.etplus import attrs, by_id, chakra_node, flat, gloo_etplus, small_etplus

from chakra import schema as pb
from chakra.cli.converter import main as converter_main
from chakra.convert import build, convert_file, convert_trace
from chakra.host.loader import build_host_trace

F1 = [14, 15, 0, 1, 4, "cuda:0"]     # one float
F1B = [19, 20, 0, 1, 4, "cuda:0"]


def all_gather_etplus(et_plus_size: int | None = None) -> dict:
    """1.0.2-style nccl:all_gather of one float on 2 ranks: the record has the 4-byte input only, its
    record_param_comms parent has the 2-float (8-byte) gathered output."""
    d = small_etplus()
    nodes = [x for x in d["nodes"] if x["id"] not in (6, 7, 22)]
    nodes += [
        flat(6, "record_param_comms", 2, ts=200, dur=30, inputs=[[F1], 12, 0, 0, "all_gather", [], [], 2],
             input_types=["GenericList[Tensor(float)]", "Int", "Int", "Int", "String", "GenericList[]",
                          "GenericList[]", "Int"],
             outputs=[[[F1B, F1]]], output_types=["GenericList[GenericList[Tensor(float),Tensor(float)]]"]),
        flat(7, "nccl:all_gather", 6, ts=205, dur=20, inputs=[F1], input_types=["Tensor(float)"]),
    ]
    k = {"id": 22, "name": "ncclKernel_AllGather_RING_LL_Sum_float", "cat": "kernel", "ph": "X", "ts": 230,
         "dur": 100, "stream": 20, "device": 0, "tid": 20, "args": {"stream": 20}, "parent": 7,
         "inputs": [F1], "input_shapes": [], "input_types": [], "outputs": [], "output_shapes": [],
         "output_types": [], "pg_name": "", "collective_name": "allgather"}
    if et_plus_size is not None:
        k["comm_size"] = et_plus_size
    nodes.append(k)
    d["nodes"] = nodes
    return d


@pytest.mark.parametrize("et_plus_size", [None, 0, 4, 8])
def test_all_gather_size_is_the_gathered_output_whatever_the_source(et_plus_size):
    # nccl record: 4 B in; record_param_comms: 4 B in, 8 B out; ET+ comm_size (the linker's figure,
    # 4 when it only saw the nccl record): max over all of them = 8
    _, nodes = convert_trace(build_host_trace(all_gather_etplus(et_plus_size)))
    a = attrs(by_id(nodes)[22])
    assert a["comm_type"] == pb.ALL_GATHER and a["comm_size"] == 8


def test_without_kernels_the_nccl_record_is_the_comm_node_with_the_same_size():
    d = all_gather_etplus()
    d["nodes"] = [x for x in d["nodes"] if "cat" not in x]
    _, nodes = convert_trace(build_host_trace(d))
    n = by_id(nodes)[7]
    assert n.type == pb.COMM_COLL_NODE and attrs(n)["comm_size"] == 8


def test_gloo_reduce_scatter_size_is_the_full_input():
    # c10d::_reduce_scatter_base_(output 64 floats, input 128 floats); gloo all_reduce record 128 floats
    _, nodes = convert_trace(build_host_trace(gloo_etplus()))
    assert attrs(by_id(nodes)[6])["comm_size"] == 512


# -- pg_name fallback warning --------------------------------------------------------------------------

def _with_groups(groups):
    d = gloo_etplus()
    d["nodes"][1]["inputs"]["values"] = [json.dumps(groups)]
    return d


def _group(name, ranks):
    return {"pg_name": name, "pg_desc": "", "backend_config": "cpu:gloo", "ranks": ranks,
            "group_size": len(ranks), "group_count": 3}


def test_world_fallback_warns_once_when_groups_differ():
    d = _with_groups([_group("0", [0, 1]), _group("3", [1])])
    _, _, stats = build(build_host_trace(d))
    hits = [w for w in stats.warnings if "could have been meant" in w]
    assert len(hits) == 1
    # the gloo reduce_scatter and the gloo send both fall back to ""
    assert "2 comm node(s)" in hits[0] and "0 [0, 1], 3 [1]" in hits[0]


def test_world_fallback_is_silent_when_every_group_has_the_same_ranks():
    _, _, stats = build(build_host_trace(gloo_etplus()))   # groups 0 [0, 1] and 5 [1, 0]
    assert not [w for w in stats.warnings if "could have been meant" in w]


# -- astrasim_safe -------------------------------------------------------------------------------------

BARRIER_SCHEMA = ("c10d::barrier(Tensor tensor, __torch__.torch.classes.c10d.ProcessGroup process_group, "
                  "int[] device_ids, int timeout) -> __torch__.torch.classes.c10d.Work")


def barrier_etplus() -> dict:
    d = gloo_etplus()
    root = d["nodes"].pop()   # the process root stays last
    d["nodes"] += [
        chakra_node(10, "c10d::barrier", 4, rf_id=8, ts=1200.0, dur=4.0, exclusive_dur=4.0, kineto_tid=11,
                    op_schema=BARRIER_SCHEMA, inputs=[[50, 51, 0, 1, 1, "cpu"], "<Object>", [], 1800000],
                    types=["Tensor(unsigned char)", "Object", "GenericList[]", "Int"]),
        chakra_node(11, "gloo:barrier", 4, rf_id=9, ts=1205.0, dur=37.0, exclusive_dur=37.0, kineto_tid=12),
        root,
    ]
    return d


def test_barrier_stays_a_collective_by_default():
    _, nodes = convert_trace(build_host_trace(barrier_etplus()))
    b = by_id(nodes)[11]
    assert b.type == pb.COMM_COLL_NODE and attrs(b)["comm_type"] == pb.BARRIER


def test_astrasim_safe_writes_barrier_as_a_timed_comp_node():
    _, nodes, stats = build(build_host_trace(barrier_etplus()), astrasim_safe=True)
    n = by_id(nodes)
    b = n[11]
    a = attrs(b)
    assert b.type == pb.COMP_NODE and b.duration_micros == 37
    assert a["is_cpu_op"] is False
    assert (a["orig_collective"], a["orig_comm_type"], a["orig_comm_size"], a["orig_pg_name"]) == \
        ("barrier", pb.BARRIER, 0, "")
    assert "comm_type" not in a and "comm_size" not in a and "pg_name" not in a
    assert 10 in b.data_deps   # still after its c10d call
    # the other collectives are untouched: reduce_scatter, send
    assert n[6].type == pb.COMM_COLL_NODE and n[9].type == pb.COMM_SEND_NODE
    assert stats.comm_nodes == 2 and stats.comm_as_comp == 1


@pytest.mark.parametrize("form", [
    ["PyTorch", "--input", "{src}", "--output", "{out}", "--astrasim-safe"],
    ["--input_filename", "{src}", "--output_filename", "{out}", "--input_type", "PyTorch", "--astrasim_safe"],
])
def test_cli_flag_in_both_generations(tmp_path, form):
    src, out = tmp_path / "b.json", tmp_path / "b.1.et"
    src.write_bytes(orjson.dumps(barrier_etplus()))
    argv = [x.format(src=src, out=out) for x in form] + ["-q"]
    assert converter_main(argv) == 0
    _, nodes = check_et(out)
    n = {x.id: x for x in nodes}
    assert n[11].type == pb.COMP_NODE and n[11].attrs["orig_comm_type"].value == pb.BARRIER
    assert sum(x.type == pb.COMM_COLL_NODE for x in nodes) == 1


# -- real traces ---------------------------------------------------------------------------------------

@needs_corpus
def test_tp_like_rank0_astrasim_safe(tmp_path):
    rel = CORPUS / "cpu_gloo/tp_like_2r/host_et_0.json.gz"
    default = convert_file(rel, tmp_path / "d.0.et")
    safe = convert_file(rel, tmp_path / "s.0.et", astrasim_safe=True)
    # counted by hand from the trace: 14 gloo records (6 all_reduce, 2 broadcast, 2 all_gather,
    # 1 all_to_all, 1 send, 1 recv, 1 barrier); only the barrier (node 384) is a type the simulator
    # does not run
    d, s = default.stats.by_type, safe.stats.by_type
    assert (d["COMM_COLL_NODE"], d["COMM_SEND_NODE"], d["COMM_RECV_NODE"]) == (12, 1, 1)
    assert (s["COMM_COLL_NODE"], s["COMM_SEND_NODE"], s["COMM_RECV_NODE"]) == (11, 1, 1)
    assert s["COMP_NODE"] == d["COMP_NODE"] + 1 and safe.stats.nodes == default.stats.nodes
    _, nodes = check_et(tmp_path / "s.0.et")
    b = {x.id: x for x in nodes}[384]
    assert b.name == "gloo:barrier" and b.type == pb.COMP_NODE
    assert b.attrs["is_cpu_op"].value is False and b.attrs["orig_comm_type"].value == pb.BARRIER


@needs_corpus
def test_tp_like_rank0_warns_about_the_world_fallback(tmp_path):
    report = convert_file(CORPUS / "cpu_gloo/tp_like_2r/host_et_0.json.gz", tmp_path / "o.0.et")
    hits = [w for w in report.warnings if "could have been meant" in w]
    assert len(hits) == 1
    assert "tp_like_2r/host_et_0.json.gz" in hits[0]
    assert "14 comm node(s)" in hits[0] and "0 [0, 1], 1 [0, 1], 2 [0]" in hits[0]


@needs_corpus
def test_one_group_traces_do_not_warn(tmp_path):
    report = convert_file(CORPUS / "cpu_gloo/fsdp_2r/host_et_0.json.gz", tmp_path / "o.0.et")
    assert not [w for w in report.warnings if "could have been meant" in w]


@needs_corpus
def test_gloo_all_gather_size_is_the_gathered_output(tmp_path):
    convert_file(CORPUS / "cpu_gloo/tp_like_2r/host_et_0.json.gz", tmp_path / "o.0.et")
    _, nodes = check_et(tmp_path / "o.0.et")
    n = {x.id: x for x in nodes}
    # gloo:all_gather records carry the 1024-float input (4096 B); the c10d call's output holds both
    # ranks' parts: 2048 floats = 8192 B
    assert n[45].attrs["comm_size"].value == n[71].attrs["comm_size"].value == 8192


def test_an_all_to_all_on_an_expert_group_gets_the_group_its_split_list_spans(tmp_path):
    """tests/data/gloo_moe_4r (trace_collection --job moe --world-size 4): per step two uneven
    all_to_all_single on expert groups [0, 1] / [2, 3], then an all_reduce on the world.  The gloo records
    name no group; c10d::alltoall_base_'s input_split_sizes has 2 entries and rank 2's one group of 2 is
    pg 2 [2, 3].  The all_reduce stays the world ("", with the warning: nothing says which it used)."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "data" / "gloo_moe_4r" / "host_et_2.json.gz"
    report = convert_file(src, tmp_path / "o.2.et")
    _, nodes = check_et(tmp_path / "o.2.et")
    pgs = [(x.name, x.attrs["pg_name"].value) for x in nodes if x.type == pb.COMM_COLL_NODE]
    assert pgs == [("gloo:all_to_all", "2"), ("gloo:all_to_all", "2"), ("gloo:all_reduce", "")] * 2
    assert [w for w in report.warnings if "could have been meant" in w][0].count("2 comm node(s)") == 1
