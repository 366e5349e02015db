"""`chakra stats`: figures compared with values worked out by hand on small graphs and read off a real ET."""

from __future__ import annotations

import io
import json

import pytest

from chakra.cli.stats import main as stats_main
from chakra.io import dump_json, write_messages
from chakra.schema import (
    ALL_GATHER,
    ALL_REDUCE,
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    METADATA_NODE,
    AttributeProto,
    GlobalMetadata,
    Node,
)
from chakra.tools.stats import (
    collective_type_name,
    compute_stats,
    graph_checks,
    graph_nodes,
    load_graph,
    rank_from_name,
)


def _node(nid, name, ntype, dur, *, cpu=None, ctrl=(), data=(), comm_type=None, size=None, pg=None, tid=None,
          stream=None):
    n = Node(id=nid, name=name, type=ntype, duration_micros=dur, ctrl_deps=list(ctrl), data_deps=list(data))
    if cpu is not None:
        n.attr.append(AttributeProto(name="is_cpu_op", bool_val=cpu))
    if tid is not None:
        n.attr.append(AttributeProto(name="tid", int64_val=tid))
    if stream is not None:
        n.attr.append(AttributeProto(name="stream", int64_val=stream))
        n.attr.append(AttributeProto(name="device", int64_val=0))
    if comm_type is not None:
        n.attr.append(AttributeProto(name="comm_type", int64_val=comm_type))
    if size is not None:
        n.attr.append(AttributeProto(name="comm_size", int64_val=size))
    if pg is not None:
        n.attr.append(AttributeProto(name="pg_name", string_val=pg))
    return n


def _meta(rank=None):
    m = GlobalMetadata(version="0.0.4")
    if rank is not None:
        m.attr.append(AttributeProto(name="rank", int64_val=rank))
    return m


def rank0_nodes():
    """The hand-worked graph: thread 1 runs 2 and 4; stream 7 the gemm kernels 3 and 7; stream 8 the
    communication 5, 6 and 8.

    Over the dependencies alone the longest chain is 2 (10) -> 3 (30) -> 5 (20) -> 7 (12) -> 8 (3) = 75 µs;
    the other way into 7, 2 -> 4 (5) -> 6 (8), reaches only 23 µs.  But 6 runs on stream 8 after 5: one op at
    a time per stream, 5 runs [40, 60], 6 [60, 68], so 7 starts at 68 and 8 ends at 83; the critical path is
    2 -> 3 -> 5 -> 6 (after 5 on its stream) -> 7 -> 8 = 83 µs.  Node 7 also names id 99, which does not exist
    (dangling).
    """
    return [
        _node(1, "pg_init", METADATA_NODE, 0),
        _node(2, "aten::mm", COMP_NODE, 10, cpu=True, tid=1),
        _node(3, "gemm_kernel", COMP_NODE, 30, cpu=False, ctrl=[2], stream=7),
        _node(4, "aten::add", COMP_NODE, 5, cpu=True, ctrl=[2], tid=1),
        _node(5, "nccl_allreduce", COMM_COLL_NODE, 20, cpu=False, data=[3], comm_type=ALL_REDUCE,
              size=1000, pg="0", stream=8),
        _node(6, "allgather", COMM_COLL_NODE, 8, cpu=False, ctrl=[4], data=[4], comm_type=ALL_GATHER,
              size=400, pg="1", stream=8),
        _node(7, "gemm_kernel", COMP_NODE, 12, cpu=False, ctrl=[99], data=[5, 6], stream=7),
        _node(8, "send", COMM_SEND_NODE, 3, cpu=False, ctrl=[7], size=64, pg="1", stream=8),
        _node(9, "recv", COMM_RECV_NODE, 4, size=64, pg="1"),  # no is_cpu_op: comm -> GPU side
        _node(10, "aten::mm(1)", COMP_NODE, 7),  # no is_cpu_op: comp -> CPU side; "(1)" dropped
    ]


@pytest.fixture
def two_ranks(tmp_path):
    p0 = tmp_path / "job.0.et"
    p1 = tmp_path / "whatever.et"   # its rank comes from the metadata, not the name
    write_messages(p0, [_meta(), *rank0_nodes()])
    write_messages(p1, [_meta(rank=1),
                        _node(1, "aten::mm", COMP_NODE, 4, cpu=True, tid=1),
                        _node(2, "gemm_kernel", COMP_NODE, 6, cpu=False, ctrl=[1], stream=7),
                        _node(3, "nccl_allreduce", COMM_COLL_NODE, 9, cpu=False, comm_type=ALL_REDUCE,
                              size=1000, pg="0", stream=8)])
    return p0, p1


def test_one_rank_figures_by_hand(two_ranks):
    rep = compute_stats([two_ranks[0]], top=10)
    assert rep["all"] is None
    (r,) = rep["files"]
    assert r["rank"] == 0 and r["format"] == "et"
    assert r["nodes"] == 10
    assert r["node_types"] == {"COMM_COLL_NODE": 2, "COMM_RECV_NODE": 1, "COMM_SEND_NODE": 1, "COMP_NODE": 5,
                               "METADATA_NODE": 1}
    assert (r["cpu_ops"], r["cpu_total_us"]) == (3, 22.0)
    assert (r["gpu_ops"], r["gpu_total_us"]) == (6, 77.0)
    assert r["top_cpu_ops"] == [{"name": "aten::mm", "count": 2, "total_us": 17.0},
                                {"name": "aten::add", "count": 1, "total_us": 5.0}]
    assert r["top_kernels"][:3] == [{"name": "gemm_kernel", "count": 2, "total_us": 42.0},
                                    {"name": "nccl_allreduce", "count": 1, "total_us": 20.0},
                                    {"name": "allgather", "count": 1, "total_us": 8.0}]
    assert r["comm"] == {
        "nodes": 4, "bytes": 1528,
        "by_pg": {"0": {"count": 1, "bytes": 1000}, "1": {"count": 3, "bytes": 528}},
        "by_type": {"ALL_GATHER": {"count": 1, "bytes": 400}, "ALL_REDUCE": {"count": 1, "bytes": 1000},
                    "RECV": {"count": 1, "bytes": 64}, "SEND": {"count": 1, "bytes": 64}},
        "by_implementation": {"other": {"count": 4, "bytes": 1528}},   # names no row of the table holds
    }
    # every op has a duration: nothing untimed
    timed = (r["cpu_ops_timed"], r["cpu_ops_untimed"], r["gpu_ops_timed"], r["gpu_ops_untimed"])
    assert timed == (3, 0, 6, 0)
    cp = r["critical_path"]
    assert cp["length_us"] == 83.0 and cp["dependency_only_us"] == 75.0
    assert (cp["nodes"], cp["first_id"], cp["last_id"]) == (6, 2, 8)
    assert (cp["lane_links"], cp["dep_links"]) == (1, 4)         # 6 waited for 5 on stream 8
    assert cp["dangling_deps"] == 1 and cp["cycle_blocked_nodes"] == 0
    # what each op adds to the chain: 2: 10, 3: 30, 5: 20, 6: 8, 7: 12, 8: 3
    assert [(t["name"], t["count"], t["total_us"]) for t in cp["top"]] == [
        ("gemm_kernel", 2, 42.0), ("nccl_allreduce", 1, 20.0), ("aten::mm", 1, 10.0), ("allgather", 1, 8.0),
        ("send", 1, 3.0)]
    assert cp["top"][0]["share"] == pytest.approx(42 / 83)


def test_critical_path_ids_and_top_limit(two_ranks):
    r = compute_stats([two_ranks[0]], top=1)["files"][0]
    assert len(r["top_kernels"]) == 1 and len(r["critical_path"]["top"]) == 1


def test_across_ranks(two_ranks):
    rep = compute_stats(list(two_ranks), top=10)
    assert [f["rank"] for f in rep["files"]] == [0, 1]
    agg = rep["all"]
    assert agg["ranks"] == ["0", "1"]
    assert agg["nodes"] == 13
    assert agg["node_types"]["COMP_NODE"] == 7 and agg["node_types"]["COMM_COLL_NODE"] == 3
    assert agg["top_kernels"][0] == {"name": "gemm_kernel", "count": 3, "total_us": 48.0}
    assert agg["top_cpu_ops"][0] == {"name": "aten::mm", "count": 3, "total_us": 21.0}
    assert agg["comm"]["by_pg"]["0"] == {"count": 2, "bytes": 2000}
    assert agg["comm"]["by_type"]["ALL_REDUCE"] == {"count": 2, "bytes": 2000}
    assert agg["comm"]["bytes"] == 2528
    # rank 1: 4 -> 6 = 10 µs; the all_reduce alone (another stream) is 9 µs
    assert agg["critical_path"] == {"max_us": 83.0, "rank": "0", "per_rank": {"0": 83.0, "1": 10.0}}


def test_cycle_is_reported_and_path_still_given(tmp_path):
    """1 and 2 depend on each other and 3 on 2; 4 is alone on thread 2.  1, 2 are on the cycle and 3 is
    behind it; dropping 1's dependency on the later node 2 leaves 1 -> 2 -> 3 on thread 1: 5 + 7 + 1 =
    13 µs, each step released by a dependency (the lane predecessor ends then too: the dependency is
    listed first)."""
    path = tmp_path / "cyc.0.et"
    write_messages(path, [_meta(), _node(1, "a", COMP_NODE, 5, cpu=True, ctrl=[2], tid=1),
                          _node(2, "b", COMP_NODE, 7, cpu=True, ctrl=[1], tid=1),
                          _node(3, "c", COMP_NODE, 1, cpu=True, data=[2], tid=1),
                          _node(4, "d", COMP_NODE, 2, cpu=True, tid=2)])
    cp = compute_stats([path])["files"][0]["critical_path"]
    assert (cp["cycle_blocked_nodes"], cp["dropped_back_edges"], cp["dangling_deps"]) == (3, 1, 0)
    assert cp["length_us"] == 13.0 and (cp["nodes"], cp["first_id"], cp["last_id"]) == (3, 1, 3)
    assert (cp["dep_links"], cp["lane_links"]) == (2, 0)


def test_empty_and_duplicate_deps(tmp_path):
    assert graph_checks([], [], []) == {"dangling_deps": 0, "cycle_blocked_nodes": 0, "dropped_back_edges": 0}
    path = tmp_path / "dup.0.et"     # 2 names 1 as its ctrl and its data dependency: one chain, 5 + 7
    write_messages(path, [_meta(), _node(1, "a", COMP_NODE, 5, cpu=True, tid=1),
                          _node(2, "b", COMP_NODE, 7, cpu=True, ctrl=[1], data=[1], tid=2)])
    cp = compute_stats([path])["files"][0]["critical_path"]
    assert cp["length_us"] == 12.0 and (cp["nodes"], cp["dep_links"], cp["cycle_blocked_nodes"]) == (2, 1, 0)


def test_a_graph_the_replay_refuses_has_no_critical_path(tmp_path, capsys, caplog):
    """Id 2 twice: which one a dependency on 2 means is ambiguous, and the replay refuses the file.  The
    figures are still given; the critical path is n/a, not a longest chain over the dependencies taken
    end to start (which main gave: 5 + 7 = 12 µs, a figure no schedule of the trace need reach)."""
    path = tmp_path / "twice.0.et"
    write_messages(path, [_meta(), _node(1, "a", COMP_NODE, 5, cpu=True, tid=1),
                          _node(2, "b", COMP_NODE, 7, cpu=True, ctrl=[1], tid=1),
                          _node(2, "c", COMP_NODE, 3, cpu=True, tid=2)])
    rep = compute_stats([path])["files"][0]
    assert rep["nodes"] == 3 and rep["cpu_total_us"] == 15.0
    assert rep["critical_path"]["length_us"] is None and rep["critical_path"]["top"] == []
    assert "no critical path" in caplog.text and "duplicate node id 2" in caplog.text
    assert stats_main([str(path)]) == 0
    assert "critical path: n/a (the replay refused the graph" in " ".join(capsys.readouterr().out.split())


def test_etplus_json(tmp_path):
    path = tmp_path / "et_plus_3.json.gz"
    dump_json(path, {"schema": "1.0.1", "pid": 1, "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "parent": 1},
        {"id": 2, "name": "aten::linear", "parent": 1, "ts": 0.0, "dur": 50.0, "exclusive_dur": 20.0},
        {"id": 3, "name": "aten::mm", "parent": 2, "ts": 1.0, "dur": 30.0, "exclusive_dur": 30.0},
        {"id": 4, "name": "record_param_comms", "parent": 1, "ts": 60.0, "dur": 10.0},
        {"id": 5, "name": "gemm", "cat": "kernel", "parent": 3, "ts": 5.0, "dur": 40.0},
        {"id": 6, "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cat": "kernel", "parent": 4,
         "ts": 70.0, "dur": 25.0, "pg_name": "0", "collective_name": "all_reduce", "comm_size": 4096},
        {"id": 7, "name": "Memcpy HtoD", "cat": "gpu_memcpy", "parent": 3, "ts": 2.0, "dur": 3.0},
    ]})
    r = compute_stats([path])["files"][0]
    assert r["format"] == "et+" and r["rank"] == 3
    assert r["node_types"] == {"gpu_comm": 1, "gpu_memcpy": 1, "host_comm": 1, "host_op": 2, "kernel": 1,
                               "root": 1}
    assert r["top_cpu_ops"] == [{"name": "aten::mm", "count": 1, "total_us": 30.0},
                                {"name": "aten::linear", "count": 1, "total_us": 20.0},
                                {"name": "record_param_comms", "count": 1, "total_us": 10.0}]
    assert r["gpu_total_us"] == 68.0
    assert r["comm"]["by_type"] == {"ALL_REDUCE": {"count": 1, "bytes": 4096}}
    assert r["critical_path"] is None


def test_a_host_et_without_timing_is_named_so(tmp_path, caplog):
    path = tmp_path / "host_et_0.json"
    dump_json(path, {"schema": "1.0.1", "pid": 1, "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "parent": 1},
        {"id": 2, "name": "aten::linear", "parent": 1}]})
    r = compute_stats([path])["files"][0]
    assert r["format"] == "host ET" and r["rank"] == 0
    assert "a host ET without timing" in caplog.text


@pytest.mark.parametrize("text,expected", [
    ("all_reduce", "ALL_REDUCE"), ("allgather", "ALL_GATHER"), ("reduce_scatter", "REDUCE_SCATTER"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "ALL_REDUCE"),
    ("ncclDevKernel_SendRecv", "SENDRECV"), ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "BROADCAST"),
    ("all_to_all", "ALL_TO_ALL"), ("barrier", "BARRIER"), ("reduce", "REDUCE"), ("mystery", "UNKNOWN"),
])
def test_collective_type_name(text, expected):
    assert collective_type_name(text) == expected


@pytest.mark.parametrize("name,rank", [("trace.3.et", 3), ("x.12.et.gz", 12), ("real_2023_rank0.et.gz", 0),
                                       ("et_plus_5.json.gz", 5), ("trace.et", None), ("x_12.et.gz", None),
                                       ("trace_1016005.et", None), ("host_et_2.json", 2)])
def test_rank_from_name(name, rank):
    assert rank_from_name(name) == rank


def test_format_told_by_suffix_then_content(tmp_path):
    # a metadata message of exactly 123 bytes makes the stream start with "{" (0x7b)
    meta = GlobalMetadata(version="0.0.4", attr=[AttributeProto(name="schema", string_val="x" * 103)])
    assert len(meta.SerializeToString()) == 123
    nodes = [_node(1, "a", COMP_NODE, 3, cpu=True)]
    for name in ("odd_name.bin", "trace.0.et"):
        write_messages(tmp_path / name, [meta, *nodes])
        assert (tmp_path / name).read_bytes()[:1] == b"{"
        g = load_graph(tmp_path / name)
        assert g.format == "et" and [n.id for n in graph_nodes(g)] == [1]
    dump_json(tmp_path / "plain.data", {"nodes": [{"id": 5, "name": "x", "dur": 2.0}]})
    assert load_graph(tmp_path / "plain.data").format == "et+"


def test_cli_json_and_table(two_ranks, capsys):
    assert stats_main([str(two_ranks[0]), str(two_ranks[1]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"][0]["critical_path"]["length_us"] == 83.0
    assert data["all"]["critical_path"]["per_rank"] == {"0": 83.0, "1": 10.0}
    assert stats_main([str(two_ranks[0])]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())     # rich wraps long lines at the terminal's width
    assert "critical path: 83.0 µs over 6 nodes" in flat
    assert "1 steps wait for the op before on the thread or stream, 4 for a dependency" in flat
    assert "over the dependencies alone 75.0 µs" in flat
    assert "CPU ops 3: 3 timed (22.0 µs); GPU ops 6: 6 timed (77.0 µs)" in flat
    # the process-group table has a header on every column
    header = next(ln for ln in out.splitlines() if "pg_name" in ln)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["pg_name", "nodes", "bytes", "size"]
    assert "ALL_REDUCE" in out and "gemm_kernel" in out


def test_cli_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.et"
    bad.write_bytes(b"\xff\xff\xff")
    assert stats_main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.et" in err and "Traceback" not in err
    weird = tmp_path / "weird.json"
    dump_json(weird, {"nodes": [{"id": 1, "name": "a"}, {"id": "two", "name": "b"}]})
    assert stats_main([str(weird)]) == 1
    assert "node at index 1 is not an object with an integer 'id'" in capsys.readouterr().err
    assert stats_main([str(tmp_path / "missing.et")]) == 1
    assert "file not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        stats_main([])
    assert exc.value.code == 2


def test_real_2023_sample(corpus):
    """Type counts and comm sizes read off the file's raw protobuf fields (see the numbers below)."""
    rep = compute_stats([corpus / "chakra_et" / "real_2023_rank0.et.gz"])
    r = rep["files"][0]
    assert r["rank"] == 0
    assert r["nodes"] == 3664
    assert r["node_types"] == {"COMP_NODE": 3643, "COMM_COLL_NODE": 21}
    assert r["cpu_ops"] == 2448 and r["gpu_ops"] == 1216
    # 5 ncclKernel_AllReduce nodes: 8196000 + 31502336 + 26255360 + 26550272 + 9724160 bytes
    assert r["comm"]["by_type"]["ALL_REDUCE"] == {"count": 5, "bytes": 102228128}
    # 2 ncclKernel_Broadcast nodes: 212480 + 424 bytes; 14 c10d CPU-side nodes carry no comm_type
    assert r["comm"]["by_type"]["BROADCAST"] == {"count": 2, "bytes": 212904}
    assert r["comm"]["by_type"]["UNKNOWN"] == {"count": 14, "bytes": 0}
    cp = r["critical_path"]
    # the file depends on ids it does not hold (851 times on id 3, ...) and has real cycles (3317 <-> 3318)
    assert cp["dangling_deps"] == 1277
    assert cp["cycle_blocked_nodes"] > 0 and cp["dropped_back_edges"] > 0
    assert 0 < cp["length_us"] <= r["cpu_total_us"] + r["gpu_total_us"]
    # one op at a time per stream: GPU stream 7 alone holds 292,828 µs of kernels (tid 7 of the GPU ops),
    # so no schedule, and no critical path, is shorter; over the dependencies alone it is 82,269 µs
    assert cp["length_us"] >= 292_828 and cp["dependency_only_us"] == 82_269.0
    assert cp["lane_links"] > 0
    # untimed: 157 GPU ops of duration 0 in that file
    assert (r["gpu_ops_timed"], r["gpu_ops_untimed"], r["cpu_ops_untimed"]) == (1059, 157, 0)


# ------------------------------------------------------- tests/data: the traces the project collected itself
def _gunzip(path):
    import gzip

    return gzip.decompress(path.read_bytes())


@pytest.mark.parametrize("name,host_nodes,comm_ops", [
    ("gloo_mlp_2r", (457, 457), {"c10d::allreduce_": 2}),
    ("gloo_collectives_2r", (139, 138), {
        "c10d::allreduce_": 6, "c10d::broadcast_": 2, "c10d::allgather_": 2, "c10d::reduce_scatter_": 2,
        "c10d::alltoall_base_": 2, "c10d::send": 2, "c10d::recv_": 2, "c10d::barrier": 2}),
])
def test_collected_traces_and_archive(data_dir, name, host_nodes, comm_ops):
    """What trace_collection/collect.py wrote (counts read off the files when they were collected)."""
    import tarfile
    from collections import Counter

    folder = data_dir / name
    with tarfile.open(data_dir / f"{name}.tgz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == [name, f"{name}/chakra_host_et_0.json", f"{name}/chakra_host_et_1.json",
                                   f"{name}/kineto_0.json", f"{name}/kineto_1.json"]
        for rank in (0, 1):
            host = tar.extractfile(f"{name}/chakra_host_et_{rank}.json").read()
            assert host == _gunzip(folder / f"host_et_{rank}.json.gz")
            kin = tar.extractfile(f"{name}/kineto_{rank}.json").read()
            assert kin == _gunzip(folder / f"kineto_{rank}.json.gz")
    for rank in (0, 1):
        host = json.loads(_gunzip(folder / f"host_et_{rank}.json.gz"))
        assert host["schema"] == "1.1.1-chakra.0.0.4"
        assert len(host["nodes"]) == host_nodes[rank]
        names = Counter(n["name"] for n in host["nodes"])
        assert {k: v for k, v in names.items() if k.startswith("c10d::")} == comm_ops
        assert names["## process_group:init ##"] == 1
        kin = json.loads(_gunzip(folder / f"kineto_{rank}.json.gz"))
        assert kin["distributedInfo"]["rank"] == rank and kin["distributedInfo"]["world_size"] == 2
        assert kin["distributedInfo"]["backend"] == "gloo"
        steps = sorted(e["name"] for e in kin["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
        assert steps == ["ProfilerStep#2", "ProfilerStep#3"]


def test_tests_data_stays_small(data_dir):
    total = sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file())
    assert total < 2 * 1024 * 1024


@pytest.mark.parametrize("rank", [0, 1])
def test_critical_path_is_the_replays_time_on_a_collected_trace(data_dir, tmp_path, rank):
    """gloo_mlp_2r linked and converted: the path's length is the replay's time without idle gaps, what its
    ops hold and the time between them sum to it, and each step of it is a dependency or the previous op of
    the thread."""
    from chakra.convert import convert_file
    from chakra.link import link_files
    from chakra.replay.api import replay_file
    from chakra.tools.stats import graph_stats, scheduled_path

    d = data_dir / "gloo_mlp_2r"
    link_files(d / f"host_et_{rank}.json.gz", d / f"kineto_{rank}.json.gz", tmp_path / "e.json")
    convert_file(tmp_path / "e.json", tmp_path / "g.et")
    g = load_graph(tmp_path / "g.et")
    sched = scheduled_path(g)
    replayed = replay_file(tmp_path / "g.et", gaps=False)
    assert sched["length_us"] == replayed.replayed_us
    # what its ops hold of it, and the time between them that no op holds, sum to it
    assert sum(sched["adds"]) + sum(sched["between"].values()) == pytest.approx(sched["length_us"])
    times = replayed.node_times()
    by_id = {n.id: n for n in graph_nodes(g)}
    assert times[sched["path"][0]][0] == 0
    for a, b in zip(sched["path"], sched["path"][1:]):
        assert a in by_id[b].ctrl_deps + by_id[b].data_deps or times[a][1] == times[b][0]
    cp = graph_stats(g)["critical_path"]
    assert cp["length_us"] == sched["length_us"] and cp["nodes"] == len(sched["path"])


def test_gloo_collectives_are_cpu_ops_not_gpu_ops(data_dir, tmp_path, capsys):
    """A CPU-only gloo job: its collectives ran on gloo's worker threads.  The converter writes them
    ``is_cpu_op`` false (the simulator refuses CPU comm nodes), with the thread they ran on; stats counts
    them as the CPU ops they are, and the job has no GPU op."""
    from chakra.convert import convert_file
    from chakra.link import link_files

    d = data_dir / "gloo_collectives_2r"
    link_files(d / "host_et_0.json.gz", d / "kineto_0.json.gz", tmp_path / "e.json")
    convert_file(tmp_path / "e.json", tmp_path / "g.et")
    r = compute_stats([tmp_path / "g.et"])["files"][0]
    metadata = r["node_types"]["METADATA_NODE"]
    assert (r["gpu_ops"], r["cpu_ops"]) == (0, r["nodes"] - metadata)
    assert r["comm"]["nodes"] == 20 and r["comm"]["by_implementation"] == {
        "gloo": {"count": 20, "bytes": r["comm"]["bytes"]}}
    gloo = [row for row in compute_stats([tmp_path / "g.et"], top=1000)["files"][0]["top_cpu_ops"]
            if row["name"].startswith("gloo:")]
    assert sum(row["count"] for row in gloo) == 22   # 2 more: the second chunk of each reduce_scatter_
    assert stats_main([str(tmp_path / "g.et")]) == 0
    assert "no GPU ops" in " ".join(capsys.readouterr().out.split())


def test_critical_path_through_a_launch_and_a_synchronize(tmp_path):
    """Thread 1: L (cudaLaunchKernel, recorded 0..15) launches K (stream 7, recorded 4..12, inside L); thread
    2: S (cudaStreamSynchronize, recorded 6..20) was blocked on K and returned 8 µs after it.

    The replay (see tests/replay/test_replay_critical.py): K starts 4 µs after L does and S ends 8 µs after
    K, so L 0..15, K 4..12, S 6..20: the path is L -> K (started inside L) -> S (ended after K), 20 µs,
    of which L holds the 4 before K started, K its 8 and S its 8 after K.  Each dependency taken as
    end-to-start would chain 15 + 8 + 14 = 37 µs, more than any replay of the trace; over the dependencies
    with the replay's start and end bounds (no queues) it is 20.
    """
    nodes = [_node(1, "cudaLaunchKernel", COMP_NODE, 15, cpu=True, tid=1),
             _node(2, "kernel", COMP_NODE, 8, cpu=False, ctrl=[1], stream=7),
             _node(3, "cudaStreamSynchronize", COMP_NODE, 14, cpu=True, ctrl=[2], tid=2)]
    for n, start in zip(nodes, (0, 4, 6)):
        n.start_time_micros = start
    path = tmp_path / "sync.0.et"
    write_messages(path, [_meta(), *nodes])
    cp = compute_stats([path])["files"][0]["critical_path"]
    assert cp["length_us"] == 20.0 and cp["dependency_only_us"] == 20.0
    assert (cp["nodes"], cp["first_id"], cp["last_id"]) == (3, 1, 3)
    assert (cp["lane_links"], cp["dep_links"], cp["start_links"], cp["end_links"]) == (0, 0, 1, 1)
    assert [(t["name"], t["count"], t["total_us"]) for t in cp["top"]] == [
        ("cudaStreamSynchronize", 1, 8.0), ("kernel", 1, 8.0), ("cudaLaunchKernel", 1, 4.0)]
    assert cp["between_ops_us"] == {}


def test_critical_path_through_a_launch_and_a_synchronize_printed(tmp_path, capsys):
    nodes = [_node(1, "cudaLaunchKernel", COMP_NODE, 15, cpu=True, tid=1),
             _node(2, "kernel", COMP_NODE, 8, cpu=False, ctrl=[1], stream=7),
             _node(3, "cudaStreamSynchronize", COMP_NODE, 14, cpu=True, ctrl=[2], tid=2)]
    for n, start in zip(nodes, (0, 4, 6)):
        n.start_time_micros = start
    write_messages(tmp_path / "sync.0.et", [_meta(), *nodes])
    assert stats_main([str(tmp_path / "sync.0.et")]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "critical path: 20.0 µs over 3 nodes (ids 1 -> 3)" in flat
    assert ("0 steps wait for the op before on the thread or stream, 0 for a dependency, 1 start while an op "
            "they depend on runs, 1 end after an op they were blocked on; over the dependencies alone "
            "20.0 µs") in flat


def test_dlrm_critical_path_holds_no_op_longer_than_it_ran(corpus, tmp_path):
    """DLRM rank 0 linked and converted (the pipeline's rank 0 ET): each op name's time on the critical path
    is at most its total duration in the same report, and what the ops hold plus the time between them
    is the path's length.  (Before the walk followed start-to-start links and end bounds, the first
    SendRecv kernel held the ~3 ms of CPU work before it: 10,244 µs on the path for 3,999 µs of kernels.)"""
    from chakra.convert import convert_file
    from chakra.link import link_files
    from chakra.tools.stats import graph_stats, render

    d = corpus / "dlrm_8r_v100"
    link_files(d / "host/host_et_0.json.gz", d / "device/kineto_0.json.gz", tmp_path / "e.json")
    convert_file(tmp_path / "e.json", tmp_path / "g.et")
    rep = graph_stats(load_graph(tmp_path / "g.et"), top=100_000)
    cp = rep["critical_path"]
    totals: dict[str, float] = {}
    for row in rep["top_kernels"] + rep["top_cpu_ops"]:
        totals[row["name"]] = totals.get(row["name"], 0.0) + row["total_us"]
    assert cp["top"]
    for row in cp["top"]:
        assert row["total_us"] <= totals[row["name"]] + 1e-6, row["name"]
    held = sum(row["total_us"] for row in cp["top"])
    assert held + sum(cp["between_ops_us"].values()) == pytest.approx(cp["length_us"])
    assert cp["first_id"] == 1 and cp["end_links"] > 0
    # the replay's start and end bounds without the queues: never longer than the path
    assert 0 < cp["dependency_only_us"] <= cp["length_us"]
    send_recv = next(r for r in cp["top"] if r["name"].startswith("ncclKernel_SendRecv"))
    assert send_recv["total_us"] <= 3_999
    del rep["_totals"]
    out = io.StringIO()
    render({"files": [rep], "all": None}, out, width=200)
    assert "(recorded wait latency after an op)" in out.getvalue()


def test_a_file_out_of_id_order_is_seen_in_file_order(tmp_path):
    """Messages: node 3 (5 µs, ctrl_dep 1), node 1 (7 µs, ctrl_dep 3), node 2 (1 µs, data_dep 1, no
    is_cpu_op).  3 and 1 depend on each other and 2 is behind them; the dependency on a later node of the
    file is 3's on 1, dropped: the path is 3 -> 1 (after 3 on thread 1) -> 2 = 13 µs (in id order it would
    be 1 -> 3, 12 µs).  Node 2, a COMP node without is_cpu_op, counts as a CPU op; the drawings get the
    nodes at file positions 2 and 0 with their ctrl/data split."""
    path = tmp_path / "order.0.et"
    write_messages(path, [_meta(), _node(3, "a", COMP_NODE, 5, cpu=True, ctrl=[1], tid=1),
                          _node(1, "b", COMP_NODE, 7, cpu=True, ctrl=[3], tid=1),
                          _node(2, "c", COMP_NODE, 1, data=[1])])
    rep = compute_stats([path])["files"][0]
    cp = rep["critical_path"]
    assert (cp["cycle_blocked_nodes"], cp["dropped_back_edges"]) == (3, 1)
    assert (cp["length_us"], cp["first_id"], cp["last_id"], cp["nodes"]) == (13.0, 3, 2, 3)
    assert (rep["cpu_ops"], rep["cpu_total_us"], rep["gpu_ops"]) == (3, 13.0, 0)
    g = load_graph(path)
    two = graph_nodes(g, [2, 0])
    assert [(n.id, n.is_cpu, n.ctrl_deps, n.data_deps) for n in two] == [(2, True, (), (1,)),
                                                                          (3, True, (1,), ())]
    assert [n.id for n in graph_nodes(g)] == [3, 1, 2]
