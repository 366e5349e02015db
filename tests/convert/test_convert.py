"""chakra.convert on small hand-built ET+ traces whose every number is worked out by hand."""

from __future__ import annotations

import ast
import json

import orjson
import pytest
from helpers.et_checks import check_et
from helpers.etplus import (
    attrs,
    by_id,
    flat,
    gloo_etplus,
    small_etplus,
)
from helpers.wire_reader import read_et

from chakra import schema as pb
from chakra.convert import build, convert_file, convert_trace
from chakra.convert.attrs import make_attr
from chakra.convert.graph import CycleError, topological_order
from chakra.convert.plan import Plan
from chakra.errors import TraceFormatError
from chakra.host.loader import build_host_trace


def test_durations_are_exclusive_for_cpu_and_dur_for_gpu():
    meta, nodes = convert_trace(build_host_trace(small_etplus()))
    n = by_id(nodes)
    # C (160..170) synchronises with k1 (130..170): its 10 µs are waiting for k1, not work (see
    # test_a_synchronize_becomes_a_wait_of_the_next_op)
    assert {i: n[i].duration_micros for i in (1, 2, 3, 4, 5, 6, 7)} == {1: 0, 2: 0, 3: 30, 4: 20, 5: 0,
                                                                        6: 10, 7: 20}
    assert {i: n[i].duration_micros for i in (20, 21, 22)} == {20: 40, 21: 5, 22: 100}
    # start = ts - measured start (90)
    assert {i: n[i].start_time_micros for i in (3, 4, 20, 22)} == {3: 10, 4: 20, 20: 40, 22: 140}


def test_node_types_and_comm_attributes():
    _, nodes = convert_trace(build_host_trace(small_etplus()))
    n = by_id(nodes)
    assert n[22].type == pb.COMM_COLL_NODE
    a = attrs(n[22])
    assert a["comm_type"] == pb.ALL_REDUCE and a["comm_size"] == 4000 and a["pg_name"] == ""
    assert a["is_cpu_op"] is False and a["stream"] == 20
    # the host comm ops stay CPU COMP nodes: the collective is counted once
    assert n[6].type == n[7].type == pb.COMP_NODE
    assert attrs(n[7])["is_cpu_op"] is True
    assert sum(1 for x in nodes if x.type == pb.COMM_COLL_NODE) == 1
    assert n[20].type == pb.COMP_NODE and attrs(n[20])["is_cpu_op"] is False
    assert attrs(n[20])["correlation"] == 1020


def test_dependencies():
    _, nodes = convert_trace(build_host_trace(small_etplus()))
    n = by_id(nodes)
    # ctrl = ET parent; data = call order on the thread (A, B, C, R, N)
    assert list(n[4].ctrl_deps) == [3] and list(n[3].ctrl_deps) == [2]
    assert list(n[4].data_deps) == []             # previous in call order is its parent: ctrl only, once
    assert list(n[5].data_deps) == [4]            # C after B; its synchronize with k1 became R's wait
    assert list(n[6].data_deps) == [5, 20]        # R after C, and after k1, which C waited for
    # GPU: after its launcher, then the previous kernel of its stream
    assert list(n[20].data_deps) == [4]
    assert list(n[21].data_deps) == [5, 20]
    assert list(n[22].data_deps) == [7]
    assert not n[20].ctrl_deps
    # written in an order where every dependency comes first
    seen = set()
    for x in nodes:
        assert set(x.ctrl_deps) | set(x.data_deps) <= seen
        seen.add(x.id)


def test_thread_timing_attributes():
    # thread 1, µs from the window start (90): A [10,60] > B [20,40]; C [70,80]; R [110,140] > N [115,135].
    # The thread root is not an op: time in no op is idle.
    _, nodes = convert_trace(build_host_trace(small_etplus()))
    n = by_id(nodes)
    keys = ("thread_depth", "work_before_us", "tail_us", "idle_before_us", "wait_on", "wait_post_us")
    got = {i: {k: v for k, v in attrs(n[i]).items() if k in keys} for i in (3, 4, 5, 6, 7)}
    assert got == {
        3: {"idle_before_us": 10, "tail_us": 20},      # A: 10 µs after the window start; 40..60 after B
        4: {"thread_depth": 1},                         # B: A's first child (A's lead 10 = 30 - 20 tail)
        5: {"idle_before_us": 10},                      # C: 60 -> 70 idle
        # R: C's [70,80] was waiting for k1 (ends 80, C synchronises with its stream), then idle to 110;
        # its 10 µs: lead 110..115, tail 135..140
        6: {"wait_on": 20, "idle_before_us": 30, "tail_us": 5},
        7: {"thread_depth": 1},                         # N: R's first child
    }


def test_global_metadata():
    meta, _ = convert_trace(build_host_trace(small_etplus()))
    a = {x.name: x for x in meta.attr}
    assert meta.version == "0.0.4"
    assert a["rank"].WhichOneof("value") == "int64_val" and a["rank"].int64_val == 3
    assert a["world_size"].int64_val == 4
    assert a["measured_start_us"].double_val == 90.0 and a["measured_dur_us"].double_val == 300.0
    assert a["measured_window"].string_val == "ProfilerStep#1"
    assert a["pid"].int64_val == 7 and a["schema"].string_val == "1.0.1"









def test_gloo_collective_becomes_gpu_side_comm_node_with_c10d_wrapper():
    _, nodes = convert_trace(build_host_trace(gloo_etplus()))
    n = by_id(nodes)
    rs = n[6]
    assert rs.type == pb.COMM_COLL_NODE
    a = attrs(rs)
    # the c10d call names the collective; the gloo record's tensor gives the bytes
    assert a["comm_type"] == pb.REDUCE_SCATTER and a["comm_size"] == 512
    assert a["is_cpu_op"] is False and a["tid"] == 12
    assert rs.duration_micros == 200
    # the c10d wrapper stays a CPU COMP node and the comm node waits for it
    assert n[5].type == pb.COMP_NODE and attrs(n[5])["is_cpu_op"] is True
    assert 5 in rs.data_deps
    # inter_thread_dep is written
    assert 6 in n[7].data_deps


def test_gloo_send_has_global_peer_and_tag():
    _, nodes = convert_trace(build_host_trace(gloo_etplus()))
    s = by_id(nodes)[9]
    assert s.type == pb.COMM_SEND_NODE
    a = attrs(s)
    assert (a["comm_src"], a["comm_dst"], a["comm_tag"], a["comm_size"]) == (1, 0, 9, 128)
    assert 8 in list(s.ctrl_deps) + list(s.data_deps)   # after its c10d call (here also its ET parent)


def test_metadata_node_is_in_the_simulator_form():
    meta, nodes = convert_trace(build_host_trace(gloo_etplus()))
    m = by_id(nodes)[3]
    assert m.type == pb.METADATA_NODE and not m.ctrl_deps and not m.data_deps
    outer = ast.literal_eval(m.inputs.values)
    assert isinstance(outer, list) and len(outer) == 1
    groups = json.loads(outer[0])
    assert [(g["pg_name"], g["ranks"]) for g in groups] == [("0", [0, 1]), ("5", [1, 0])]
    assert m.inputs.values.startswith("['[{\"pg_name\": \"0\"")
    pgs = {x.name: x for x in meta.attr}["process_groups"]
    assert json.loads(pgs.string_val) == groups


def test_wrapper_whose_time_is_all_in_children_keeps_its_node_with_zero():
    d = small_etplus()
    d["nodes"].insert(1, flat(8, "wrapper", 2, ts=100, dur=50, rf_id=2))
    d["nodes"][2]["parent"] = 8     # A under the wrapper, same span
    _, nodes = convert_trace(build_host_trace(d))
    n = by_id(nodes)
    assert n[8].duration_micros == 0 and n[3].duration_micros == 30
    assert list(n[3].ctrl_deps) == [8]


def test_bare_host_et_gets_zero_durations_and_a_warning():
    d = small_etplus()
    for node in d["nodes"]:
        for k in ("ts", "dur"):
            node.pop(k, None)
    d["nodes"] = [x for x in d["nodes"] if "cat" not in x]
    for k in ("measured", "rank", "world_size"):
        d.pop(k)
    _, nodes, stats = build(build_host_trace(d))
    assert all(x.duration_micros == 0 for x in nodes)
    assert any("no timing" in w for w in stats.warnings)
    # without GPU kernels the nccl record itself is the comm node (not a CPU op)
    n = by_id(nodes)
    assert n[7].type == pb.COMM_COLL_NODE and attrs(n[7])["is_cpu_op"] is False
    assert attrs(n[7])["comm_size"] == 4000
    assert stats.rank == 0   # from the record_param_comms rank input


def test_dangling_references_are_dropped_not_written():
    d = small_etplus()
    d["nodes"][3]["sync_dep"] = [999]
    d["nodes"][1]["inter_thread_dep"] = 998
    _, nodes, stats = build(build_host_trace(d))
    ids = {x.id for x in nodes}
    assert all(set(x.data_deps) | set(x.ctrl_deps) <= ids for x in nodes)
    assert any("not in the trace" in w for w in stats.warnings)


def test_cycle_through_a_sync_dep_drops_that_dep_and_names_the_cycle():
    d = small_etplus()
    d["nodes"][1]["sync_dep"] = [21]   # A waits for k2, which needs C, which runs after A
    _, nodes, stats = build(build_host_trace(d))
    n = by_id(nodes)
    assert 21 not in n[3].data_deps
    msg = [w for w in stats.warnings if "cycle" in w]
    assert len(msg) == 1 and "3 (A)" in msg[0] and "21 (k2)" in msg[0] and "dropped" in msg[0]
    assert stats.sync_edges == 2   # both were read; one had to go


def test_cycle_of_structural_edges_is_an_error_naming_its_nodes():
    from chakra.convert.collectives import find_comm
    from chakra.convert.deps import add_deps, output_order
    from chakra.convert.tree import build_tree, compute_timing, index_ops

    conv = Plan(build_host_trace(small_etplus()))
    index_ops(conv)
    tree = build_tree(conv)
    tm = compute_timing(conv, tree)
    cm = find_comm(conv, tree)
    dp = add_deps(conv, tree, tm, cm)
    dp.data[conv.index[3]].append(conv.index[5])   # A after C, while C runs after A in call order
    with pytest.raises(TraceFormatError) as err:
        output_order(conv, tree, tm, cm, dp)
    msg = str(err.value)
    assert "dependency cycle" in msg and "3 (A)" in msg and "5 (C)" in msg


def test_cycle_finder_is_iterative_on_a_long_chain():
    n = 200_000
    ids = list(range(n))
    deps = [[i - 1] if i else [n - 1] for i in range(n)]
    with pytest.raises(CycleError) as err:
        topological_order(ids, deps)
    assert len(err.value.cycle) == n
    deps[0] = []
    assert topological_order(ids, deps)[:3] == [0, 1, 2]


def test_attribute_value_fields():
    assert make_attr("is_cpu_op", 1).WhichOneof("value") == "bool_val"
    assert make_attr("comm_src", 3).WhichOneof("value") == "int32_val"
    assert make_attr("tensor_size", 3).WhichOneof("value") == "uint64_val"
    assert make_attr("pg_name", 5).string_val == "5"
    assert make_attr("rf_id", 3, "uint64").WhichOneof("value") == "int64_val"   # contract wins
    assert make_attr("in_msg_nelems", 3, "uint64").WhichOneof("value") == "uint64_val"
    assert make_attr("x", [1, 2]).int64_list.values == [1, 2]
    assert make_attr("x", {"a": 1}).string_val == '{"a":1}'
    assert make_attr("x", 1 << 63).WhichOneof("value") == "uint64_val"


def test_convert_file_writes_a_stream_the_wire_reader_accepts(tmp_path):
    src = tmp_path / "et_plus_3.json"
    src.write_bytes(orjson.dumps(gloo_etplus()))
    out = tmp_path / "out.3.et"
    report = convert_file(src, out)
    assert report.nodes == 9 and report.stats.by_type["COMM_COLL_NODE"] == 1
    meta, nodes = check_et(out)
    assert meta["rank"].value == 1
    kinds = {n.id: n.type for n in nodes}
    assert kinds[9] == 5 and kinds[3] == 1


def test_bad_input_leaves_no_output(tmp_path):
    src = tmp_path / "bad.json"
    d = small_etplus()
    d["nodes"].append(dict(d["nodes"][1]))   # duplicate id 3
    src.write_bytes(orjson.dumps(d))
    out = tmp_path / "out.et"
    with pytest.raises(TraceFormatError):
        convert_file(src, out)
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_wire_reader_agrees_with_bindings(tmp_path):
    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps(small_etplus()))
    out = tmp_path / "o.et"
    convert_file(src, out)
    _, _, wnodes = read_et(out)
    w = {n.id: n for n in wnodes}
    assert w[22].attrs["comm_size"].value == 4000 and w[22].attrs["comm_type"].kind == "int64_val"
    assert w[3].duration_micros == 30 and w[21].data_deps == [5, 20]


def test_non_numeric_pg_names_get_unused_numbers():
    from chakra.convert.comm import PgNames
    from chakra.host.model import ProcessGroup

    p = PgNames([ProcessGroup("0"), ProcessGroup("dp"), ProcessGroup("1"), ProcessGroup("tp", "tensor")])
    assert [p.numeric(x) for x in ("0", "dp", "1", "tp", "tensor", "", "nope")] == ["0", "2", "1", "3", "3",
                                                                                      "", ""]


def test_chakra_layout_gpu_node_hangs_off_its_launcher_by_data_dep():
    d = gloo_etplus()
    d["nodes"].insert(-1, {"id": 50, "name": "vectorized_add_kernel", "cat": "kernel", "ph": "X",
                           "ts": 1045.0, "dur": 7.6, "inclusive_dur": 7.6, "exclusive_dur": 7.6, "stream": 7,
                           "device": 0, "tid": 7, "args": {"stream": 7}, "pg_name": "", "collective_name": "",
                           "comm_size": 0, "ctrl_deps": 7,
                           "inputs": {"values": [], "shapes": [], "types": []},
                           "outputs": {"values": [], "shapes": [], "types": []}})
    _, nodes = convert_trace(build_host_trace(d))
    k = by_id(nodes)[50]
    assert k.type == pb.COMP_NODE and list(k.data_deps) == [7] and not k.ctrl_deps
    assert k.duration_micros == 8 and k.start_time_micros == 45
    a = attrs(k)
    assert (a["is_cpu_op"], a["stream"], a["device"], a["cat"]) == (False, 7, 0, "kernel")
    assert "pg_name" not in a and "comm_size" not in a
