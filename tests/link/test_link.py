"""The linker on small hand-made traces whose right answer is known exactly.

Each case writes a host ET and a Kineto trace to ``tmp_path`` and goes through
the real loaders and ``link_files``/``link_traces``, so what is tested is what a
user runs.  The expected ids and times below were worked out by hand from the
events listed in each case.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.traces import (
    by_id,
    cpu,
    gpu,
    host_doc,
    kineto_doc,
    link,
    op,
    rt,
    sync_case,
    write,
)

from chakra.device.loader import load_kineto
from chakra.errors import TraceFormatError, UsageError
from chakra.host.loader import load_host_et
from chakra.io import load_json
from chakra.link import link_files, link_traces

# ---- builders ---------------------------------------------------------------------------------------






















# ---- GPU attachment and synchronisation -------------------------------------------------------------




def test_gpu_ops_attach_to_the_innermost_host_op(tmp_path: Path) -> None:
    doc = link(tmp_path, *sync_case())
    nodes = by_id(doc)
    # GPU nodes get ids after the largest host id (14), in GPU start order; the one launched before the
    # trace began (no launching call) ran in the window (the whole trace): no launcher (parent 0)
    gpu_nodes = [n for n in doc["nodes"] if "cat" in n]
    assert [(n["id"], n["name"], n["parent"], n["cat"], n["stream"]) for n in gpu_nodes] == [
        (15, "left_over_from_before_profiling", 0, "kernel", 7),
        (16, "gemm_a", 10, "kernel", 7),
        (17, "gemm_b", 11, "kernel", 8),
        (18, "Memcpy DtoH", 13, "gpu_memcpy", 7),
    ]
    assert (nodes[15]["ts"], nodes[15]["dur"], nodes[15]["inputs"]) == (1, 3, [])
    assert nodes[16]["ts"] == 12 and nodes[16]["dur"] == 100 and nodes[16]["exclusive_dur"] == 100
    assert nodes[16]["tid"] == 7 and nodes[16]["ph"] == "X" and nodes[16]["pg_name"] == ""
    stats = doc["link_stats"]
    assert stats["strategy"] == "alignment" and stats["matched"] == 5 and stats["host_ops"] == 5
    assert (stats["gpu_ops"], stats["gpu_attached"], stats["gpu_orphans_no_launch"]) == (4, 3, 1)
    assert stats["gpu_attach_rate"] == 1.0  # of those with a launch call in the trace
    # of all GPU ops of the window in the graph: the one launched before the trace began too
    assert (stats["gpu_ops_in_window"], stats["gpu_attach_rate_in_window"]) == (4, 1.0)
    # host timing from the matched events, exclusive = minus the child operators and synchronizing calls
    # on the thread: the cudaStreamSynchronize (131) is a wait the sync dep models; the cudaMemcpyAsync
    # call (4) is the op's own CPU work
    assert (nodes[12]["ts"], nodes[12]["dur"], nodes[12]["exclusive_dur"]) == (60, 140, 2)
    assert nodes[13]["exclusive_dur"] == 138 - 131
    assert nodes[10]["kineto_tid"] == 100
    assert "ts" not in nodes[2]  # the thread root has no Kineto partner


def test_sync_dependencies(tmp_path: Path) -> None:
    doc = link(tmp_path, *sync_case())
    nodes = by_id(doc)
    # cudaStreamSynchronize without a stream arg: the stream of the thread's last launch (the memcpy, 7);
    # the memcpy is the op's own child, so the wait points at the last earlier GPU op of stream 7: gemm_a
    assert nodes[13]["sync_dep"] == [16]
    # cudaDeviceSynchronize: the last GPU op of every stream launched before the op started
    assert nodes[14]["sync_dep"] == [17, 18]
    assert "sync_dep" not in nodes[10] and "sync_dep" not in nodes[12]
    s = doc["link_stats"]
    assert (s["sync_calls"], s["sync_deps"], s["sync_ops"]) == (2, 3, 2)


def test_sync_on_an_explicit_stream_and_unknown_event_stream(tmp_path: Path) -> None:
    host = host_doc(
        [op(10, "aten::mm", 2, 1), op(11, "aten::mm", 2, 2), op(12, "wait", 2, 3), op(13, "wait_event", 2, 4)]
    )
    events = [
        cpu("aten::mm", 0, 20, 1),
        rt("cudaLaunchKernel", 5, 5, 1),
        gpu("k7", 12, 10, 1, stream=7),
        cpu("aten::mm", 30, 20, 2),
        rt("cudaLaunchKernel", 35, 5, 2),
        gpu("k8", 42, 10, 2, stream=8),
        cpu("wait", 60, 20, 3),
        rt("cudaStreamSynchronize", 61, 5, 3, stream=7),
        cpu("wait_event", 90, 20, 4),
        rt("cudaEventSynchronize", 91, 5, 4),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    assert nodes[12]["sync_dep"] == [14]  # args["stream"] == 7 -> k7 (ids: k7 14, k8 15)
    assert "sync_dep" not in nodes[13]  # event sync without the event's stream: skipped, counted
    assert doc["link_stats"]["sync_unknown_stream"] == 1


# ---- inter-thread dependencies ----------------------------------------------------------------------


def test_inter_thread_dependencies(tmp_path: Path) -> None:
    host = host_doc(
        [
            op(10, "fwd", 2, 1, tid=1),
            op(11, "bwd_a", 3, 2, tid=2),
            op(12, "bwd_b", 3, 3, tid=2),
            op(13, "opt", 2, 4, tid=1),
            op(14, "bwd_c", 3, 5, tid=2),
        ],
        threads=(1, 2),
    )
    events = [
        cpu("fwd", 0, 100, 1, tid=100),
        cpu("bwd_a", 150, 50, 2, tid=200),
        cpu("bwd_b", 210, 50, 3, tid=200),
        cpu("opt", 3000, 100, 4, tid=100),
        cpu("bwd_c", 3500, 100, 5, tid=200),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    deps = {n["id"]: n["inter_thread_dep"] for n in doc["nodes"] if "inter_thread_dep" in n}
    # bwd_a: first op of its thread -> the last op of the other thread that ended before 150: fwd
    # bwd_b: 10 µs after bwd_a (below the 1000 µs gap) -> none
    # opt: 2900 µs idle after fwd -> bwd_b (ended at 260); bwd_c: 3240 µs idle after bwd_b -> opt (ended 3100)
    assert deps == {11: 10, 13: 12, 14: 13}
    assert nodes[11]["kineto_tid"] == 200
    assert doc["link_stats"]["inter_thread_deps"] == 3
    # a larger gap threshold keeps only the thread starts
    hp, kp = tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"
    doc2 = link_traces(load_host_et(hp), load_kineto(kp), inter_thread_gap_us=5000)
    assert {n["id"]: n["inter_thread_dep"] for n in doc2["nodes"] if "inter_thread_dep" in n} == {11: 10}


# ---- which iteration ---------------------------------------------------------------------------------


def three_steps(step_ops: dict[int, list[str]]) -> list[dict[str, Any]]:
    events = []
    ext = 1
    for s in (1, 2, 3):
        base = 200 * (s - 1)
        events.append(cpu(f"ProfilerStep#{s}", base, 100, ext, cat="user_annotation"))
        ext += 1
        for k, name in enumerate(step_ops[s]):
            events.append(cpu(name, base + 10 + 20 * k, 10, ext))
            ext += 1
    return events


def test_host_profiler_step_selects_that_iteration(tmp_path: Path) -> None:
    host = host_doc([op(10, "ProfilerStep#2", 2, 1), op(11, "aten::mm", 10, 2), op(12, "aten::add", 10, 3)])
    events = three_steps(
        {1: ["aten::mm", "aten::add"], 2: ["aten::mm", "aten::add"], 3: ["aten::mm", "aten::add"]}
    )
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    assert (nodes[10]["ts"], nodes[11]["ts"], nodes[12]["ts"]) == (200, 210, 230)
    assert doc["measured"] == {
        "window": "ProfilerStep#2",
        "start_us": 200.0,
        "dur_us": 100.0,
        "steps": [{"name": "ProfilerStep#2", "ts": 200.0, "dur": 100.0}],
    }
    assert doc["link_stats"]["window"] == "ProfilerStep#2"


def test_best_overlapping_iteration_when_the_host_has_no_step(tmp_path: Path) -> None:
    host = host_doc([op(10, "aten::mm", 2, 1), op(11, "aten::relu", 2, 2)])
    events = three_steps(
        {1: ["aten::mm", "aten::add"], 2: ["aten::mm", "aten::relu"], 3: ["aten::mm", "aten::add"]}
    )
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    assert (nodes[10]["ts"], nodes[11]["ts"]) == (210, 230)
    assert doc["measured"]["window"] == "ProfilerStep#2"


def test_annotation_window(tmp_path: Path) -> None:
    host = host_doc([op(10, "my_region", 2, 1), op(11, "aten::mm", 10, 2), op(12, "aten::relu", 10, 3)])
    events = [
        cpu("my_region", 0, 50, 1, cat="user_annotation"),
        cpu("aten::add", 10, 10, 2),
        cpu("my_region", 100, 50, 3, cat="user_annotation"),
        cpu("aten::mm", 110, 10, 4),
        cpu("aten::relu", 130, 10, 5),
    ]
    doc = link(tmp_path, host, kineto_doc(events), annotation="my_region")
    nodes = by_id(doc)
    assert (nodes[10]["ts"], nodes[11]["ts"], nodes[12]["ts"]) == (100, 110, 130)
    assert doc["measured"]["window"] == "my_region" and doc["measured"]["start_us"] == 100
    hp, kp = tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"
    with pytest.raises(UsageError, match="no_such_region"):
        link_traces(load_host_et(hp), load_kineto(kp), annotation="no_such_region")


def test_no_profiler_step_uses_the_kineto_span(tmp_path: Path) -> None:
    host = host_doc([op(10, "aten::mm", 2, 1)])
    events = [cpu("aten::mm", 10, 10, 5), rt("cudaLaunchKernel", 12, 2, 1), gpu("k", 15, 20, 1)]
    doc = link(tmp_path, host, kineto_doc(events))
    assert doc["measured"] == {"window": "kineto_span", "start_us": 10.0, "dur_us": 25.0, "steps": []}


# ---- rf_id strategy, chakra layout, collectives -----------------------------------------------------


def chakra_op(
    nid: int,
    name: str,
    parent: int,
    rf: int,
    tid: int = 1,
    values: list[Any] | None = None,
    types: list[str] | None = None,
    attrs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    vals = values or []
    std = [
        {"name": "rf_id", "type": "uint64", "value": rf},
        {"name": "fw_parent", "type": "uint64", "value": 0},
        {"name": "seq_id", "type": "int64", "value": -1},
        {"name": "scope", "type": "uint64", "value": 0},
        {"name": "tid", "type": "uint64", "value": tid},
        {"name": "fw_tid", "type": "uint64", "value": 0},
        {"name": "op_schema", "type": "string", "value": ""},
    ]
    return {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": {"values": vals, "shapes": [[] for _ in vals], "types": types or ["Int" for _ in vals]},
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": std + (attrs or []),
    }


def test_rf_id_strategy_chakra_layout_and_nccl_fields(tmp_path: Path) -> None:
    pg_payload = json.dumps(
        [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "ranks": [],
                "group_size": 2,
                "group_count": 2,
            },
            {
                "pg_name": "5",
                "pg_desc": "pair",
                "backend_config": "cuda:nccl",
                "ranks": [0, 1],
                "group_size": 2,
                "group_count": 2,
            },
        ]
    )
    tensor = [30, 31, 0, 1000, 4, "cuda:0"]
    rpc_attrs = [
        {"name": "collective_name", "type": "string", "value": "allreduce"},
        {"name": "dtype", "type": "string", "value": "Float"},
        {"name": "in_msg_nelems", "type": "uint64", "value": 1000},
        {"name": "out_msg_nelems", "type": "uint64", "value": 1000},
        {"name": "pg_name", "type": "string", "value": "5"},
    ]
    nodes = [
        chakra_op(2, "[pytorch|profiler|execution_trace|thread]", 1, 0),
        chakra_op(3, "## process_group:init ##", 2, 1, values=[pg_payload], types=["String"]),
        chakra_op(10, "c10d::allreduce_", 2, 2, values=[[tensor]], types=["GenericList[Tensor(float)]"]),
        chakra_op(
            11,
            "record_param_comms",
            10,
            3,
            values=[tensor, 1, ["5", "pair"], 0, "allreduce", [], []],
            types=[
                "Tensor(float)",
                "Int",
                "Tuple[String,String]",
                "Int",
                "String",
                "GenericList[]",
                "GenericList[]",
            ],
            attrs=rpc_attrs,
        ),
        chakra_op(12, "nccl:all_reduce", 11, 4, values=[tensor], types=["Tensor(float)"]),
        chakra_op(1, "[pytorch|profiler|execution_trace|process]", 1, 0, tid=0),
    ]
    host = {
        "schema": "1.1.1-chakra.0.0.4",
        "pid": 7,
        "time": "t",
        "start_ts": 1,
        "finish_ts": 2,
        "nodes": nodes,
    }
    events = [
        # External ids unrelated to rf ids; Record function id decides
        cpu("c10d::allreduce_", 0, 100, 900, rf=2),
        cpu("record_param_comms", 5, 90, 901, rf=3),
        cpu("nccl:all_reduce", 10, 80, 902, rf=4, cat="user_annotation"),
        rt("cudaLaunchKernel", 20, 5, 1),
        gpu(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            30,
            50,
            1,
            stream=20,
        ),
    ]
    kin = kineto_doc(
        events,
        distributedInfo={
            "rank": 1,
            "world_size": 2,
            "backend": "nccl",
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": 2,
                    "ranks": [0, 1],
                },
                {
                    "pg_name": "9",
                    "pg_desc": "only_in_kineto",
                    "backend_config": "cuda:nccl",
                    "pg_size": 1,
                    "ranks": [1],
                },
            ],
        },
    )
    doc = link(tmp_path, host, kin)
    ids = by_id(doc)
    s = doc["link_stats"]
    assert s["strategy"] == "rf_id" and s["matched"] == 3 and s["host_ops"] == 3  # pg init is not an op
    assert "ts" not in ids[3]
    k = ids[13]
    assert k["ctrl_deps"] == 12 and "parent" not in k
    assert k["inputs"] == {"values": [tensor], "shapes": [[]], "types": ["Tensor(float)"]}
    # the kernel has no comm args: the fields come from record_param_comms above the launching nccl:* op
    assert (k["pg_name"], k["collective_name"], k["comm_size"]) == ("5", "allreduce", 4000)
    assert s["nccl_kernels"] == 1
    assert doc["rank"] == 1 and doc["world_size"] == 2
    assert doc["process_groups"] == [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "ranks": [0, 1],
            "group_size": 2,
            "group_count": 2,
        },
        {
            "pg_name": "5",
            "pg_desc": "pair",
            "backend_config": "cuda:nccl",
            "ranks": [0, 1],
            "group_size": 2,
            "group_count": 2,
        },
        {
            "pg_name": "9",
            "pg_desc": "only_in_kineto",
            "backend_config": "cuda:nccl",
            "ranks": [1],
            "group_size": 1,
            "group_count": 0,
        },
    ]
    # host nodes keep the chakra layout: attrs list, ctrl_deps, inputs object
    assert ids[11]["attrs"][0] == {"name": "rf_id", "type": "uint64", "value": 3}
    assert {"name": "pg_name", "type": "string", "value": "5"} in ids[11]["attrs"]


def test_kineto_collective_args_win(tmp_path: Path) -> None:
    host = host_doc([op(10, "nccl:all_to_all", 2, 1, inputs=[[5, 6, 0, 10, 4, "cuda:0"]])])
    host["nodes"][1]["input_types"] = ["Tensor(float)"]
    events = [
        cpu("nccl:all_to_all", 0, 50, 3, cat="user_annotation"),
        rt("cudaLaunchKernel", 5, 5, 1),
        gpu(
            "ncclDevKernel_SendRecv(ncclDevComm*)",
            10,
            20,
            1,
            stream=30,
            **{
                "Process Group Name": "3",
                "Collective name": "all_to_allv",
                "In msg nelems": 64,
                "Out msg nelems": 128,
                "dtype": "BFloat16",
            },
        ),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    k = by_id(doc)[11]
    assert (k["pg_name"], k["collective_name"], k["comm_size"]) == ("3", "all_to_all", 256)
    assert k["parent"] == 10 and k["inputs"] == [[5, 6, 0, 10, 4, "cuda:0"]]


# ---- files, layout, errors --------------------------------------------------------------------------


def test_link_files_writes_gz_and_keeps_the_host_layout(tmp_path: Path) -> None:
    host, kin = sync_case()
    hp, kp = write(tmp_path, host, kin)
    out = tmp_path / "et_plus.json.gz"
    report = link_files(hp, kp, out)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    doc = load_json(out)
    assert (report.matched, report.host_ops, report.gpu_attached, report.sync_deps) == (5, 5, 3, 3)
    assert (report.gpu_ops_in_window, report.gpu_attach_rate_in_window, report.gpu_launched_before_trace) == (
        4, 1.0, 1)
    assert ("4/4 GPU ops attached (100.0%, 1 launched before the trace: on their streams, no host op)"
            in report.summary())
    assert report.rank == 0 and doc["rank"] == 0
    assert [k for k in doc if k not in ("nodes",)] == [
        "schema",
        "pid",
        "time",
        "start_ts",
        "finish_ts",
        "rank",
        "world_size",
        "process_groups",
        "measured",
        "link_stats",
    ]
    link_keys = {"ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "inter_thread_dep", "sync_dep"}
    for original, linked in zip(host["nodes"], doc["nodes"]):
        assert {k: v for k, v in linked.items() if k not in link_keys} == original


def test_bad_input_leaves_no_output(tmp_path: Path) -> None:
    host, _ = sync_case()
    hp = tmp_path / "host.json"
    hp.write_text(json.dumps(host))
    kp = tmp_path / "kineto.json"
    kp.write_text('{"traceEvents": [')
    out = tmp_path / "out.json"
    with pytest.raises(TraceFormatError, match="kineto.json"):
        link_files(hp, kp, out)
    assert not out.exists()
    with pytest.raises(TraceFormatError, match="missing.json: file not found"):
        link_files(tmp_path / "missing.json", kp, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host.json", "kineto.json"]


def test_dependency_that_would_close_a_cycle_through_the_host_tree_is_skipped(tmp_path: Path) -> None:
    # as in cpu_gloo/ddp_mlp_4r rank 2: the host ET records a gloo op (run later on a worker thread)
    # as the parent of an op that ran earlier on the main thread
    host = host_doc([op(10, "ProfilerStep#1", 2, 1), op(11, "gloo:all_reduce", 10, 2), op(12, "acc", 11, 3)])
    events = [
        cpu("ProfilerStep#1", 0, 1000, 1, cat="user_annotation", rf=1),
        cpu("acc", 300, 100, 3, rf=3),
        cpu("gloo:all_reduce", 500, 50, 2, tid=300, cat="user_annotation", rf=2),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    # "acc" ended last before the gloo op started, but acc -> parent gloo -> acc would be a cycle
    assert not any("inter_thread_dep" in n for n in doc["nodes"])
    assert doc["link_stats"]["inter_thread_skipped_order"] == 1
    assert doc["link_stats"]["strategy"] == "rf_id" and by_id(doc)[11]["kineto_tid"] == 300


def test_alignment_finds_ops_that_ran_on_an_unpaired_worker_thread(tmp_path: Path) -> None:
    host = host_doc(
        [op(10, "c10d::allreduce_", 2, 1), op(11, "gloo:all_reduce", 10, 2), op(12, "aten::add", 2, 3)]
    )
    events = [
        cpu("c10d::allreduce_", 0, 10, 50),
        cpu("aten::add", 20, 5, 52),
        cpu("gloo:all_reduce", 12, 30, 900, tid=300, cat="user_annotation"),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    assert nodes[11]["kineto_tid"] == 300 and nodes[11]["ts"] == 12
    s = doc["link_stats"]
    assert (s["matched"], s["matched_second_round"]) == (3, 1)
    assert nodes[11]["collective_name"] == "allreduce" and nodes[11]["comm_backend"] == "gloo"


def test_missing_event_is_not_replaced_by_a_distant_namesake(tmp_path: Path) -> None:
    # host: a b c d e f ; Kineto: a b d e f x c (the host's "c" is missing; a later extra "c" exists)
    names = ["a", "b", "c", "d", "e", "f"]
    host = host_doc([op(10 + i, n, 2, 1 + i) for i, n in enumerate(names)])
    events = [cpu(n, 2 * i, 1, 1 + i) for i, n in enumerate(["a", "b", "d", "e", "f", "x", "c"])]
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    assert "ts" not in nodes[12]
    assert [nodes[i]["ts"] for i in (10, 11, 13, 14, 15)] == [0, 2, 4, 6, 8]
    assert doc["link_stats"]["matched"] == 5


def test_leftover_ops_take_events_of_threads_paired_with_other_host_threads(tmp_path: Path) -> None:
    # as in cpu_gloo/tp_like_2r: the host ET files both gloo:broadcast under the main thread (tid 1) and the
    # inner op of the first one under tid 2; Kineto ran the first on worker 300 (which tid 2 pairs with),
    # the second on worker 301.  A thread-at-a-time leftover round offered only worker 301 and gave its
    # event (ts 30) to the first broadcast, leaving the second unmatched.
    host = host_doc(
        [
            op(10, "main_a", 2, 1),
            op(11, "gloo:broadcast", 2, 2),
            op(12, "aten::copy_", 11, 3, tid=2),
            op(13, "main_b", 2, 5),
            op(14, "gloo:broadcast", 2, 6),
        ],
        threads=(1, 2),
    )
    events = [
        cpu("main_a", 0, 5, 1),
        cpu("main_b", 20, 5, 2),
        cpu("gloo:broadcast", 10, 5, 513, tid=300, cat="user_annotation"),
        cpu("aten::copy_", 11, 2, 514, tid=300),
        cpu("gloo:broadcast", 30, 5, 1025, tid=301, cat="user_annotation"),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    nodes = by_id(doc)
    assert [(nodes[i]["ts"], nodes[i]["kineto_tid"]) for i in (10, 11, 12, 13, 14)] == [
        (0, 100),
        (10, 300),
        (11, 300),
        (20, 100),
        (30, 301),
    ]
    s = doc["link_stats"]
    assert [(t["host_tid"], t["kineto_tid"]) for t in s["threads"]] == [(1, 100), (2, 300)]
    assert (s["matched"], s["matched_second_round"], s["second_round_order_dropped"]) == (5, 2, 0)


@pytest.mark.parametrize(("gloo_ts", "matched"), [(10, False), (60, True)])
def test_leftover_event_that_starts_before_an_earlier_op_is_refused(
    tmp_path: Path, gloo_ts: float, matched: bool
) -> None:
    # gloo:all_reduce (rf 3) was recorded after "b" (rf 2), which started at ts 50: the event at ts 10 is
    # not its event
    host = host_doc([op(10, "a", 2, 1), op(11, "b", 2, 2), op(12, "gloo:all_reduce", 2, 3)])
    events = [
        cpu("a", 0, 5, 1),
        cpu("b", 50, 5, 2),
        cpu("gloo:all_reduce", gloo_ts, 5, 513, tid=300, cat="user_annotation"),
    ]
    doc = link(tmp_path, host, kineto_doc(events))
    s = doc["link_stats"]
    assert by_id(doc)[12].get("ts") == (gloo_ts if matched else None)
    assert (s["matched"], s["matched_second_round"], s["second_round_order_dropped"]) == (
        (3, 1, 0) if matched else (2, 0, 1)
    )


# ---- the rank written --------------------------------------------------------------------------------


def rank_warnings(report: Any) -> list[str]:
    # sync_case also has a GPU event launched before the trace: that warning is not the subject here
    return [w for w in report.warnings if "rank" in w]


def test_explicit_rank_that_contradicts_distributed_info_is_reported_and_not_used(tmp_path: Path) -> None:
    host, kin = sync_case()  # distributedInfo.rank 0
    hp, kp = write(tmp_path, host, kin)
    out = tmp_path / "et_plus.json"
    report = link_files(hp, kp, out, rank=3)
    assert load_json(out)["rank"] == 0 and report.rank == 0
    assert rank_warnings(report) == [
        "--rank 3 disagrees with Kineto distributedInfo.rank 0 (wrote rank 0; --strict refuses)"
    ]
    # a rank guessed from a file name never wins over the trace's either, and is not worth a warning
    report = link_files(hp, kp, out, fallback_rank=3)
    assert load_json(out)["rank"] == 0 and rank_warnings(report) == []
    # an agreeing --rank is fine
    assert rank_warnings(link_files(hp, kp, out, rank=0, strict=True)) == []
    out.unlink()
    with pytest.raises(TraceFormatError, match=r"--rank 3 disagrees with .*rank 0 \(refused: --strict\)"):
        link_files(hp, kp, out, rank=3, strict=True)
    assert not out.exists()


@pytest.mark.parametrize(
    ("rank", "fallback", "expected"), [(3, None, 3), (None, 4, 4), (3, 4, 3), (None, None, None)]
)
def test_rank_without_distributed_info(
    tmp_path: Path, rank: int | None, fallback: int | None, expected: int | None
) -> None:
    host, kin = sync_case()
    del kin["distributedInfo"]
    hp, kp = write(tmp_path, host, kin)
    report = link_files(hp, kp, tmp_path / "et_plus.json", rank=rank, fallback_rank=fallback, strict=True)
    assert load_json(tmp_path / "et_plus.json")["rank"] == expected and report.rank == expected
    assert rank_warnings(report) == []


def test_summary_says_there_are_no_gpu_ops() -> None:
    """A CPU-only trace has no GPU op to attach: the summary says so, not "0/0 GPU ops attached (100.0%)";
    GPU ops that all lie outside the linked window are counted as such."""
    from chakra.link.api import LinkReport

    base = dict(host_path="h.json", kineto_path="k.json", output_path=None, rank=0, strategy="rf_id",
                window="ProfilerStep#2", host_ops=10, matched=10, match_rate=1.0, gpu_attached=0,
                gpu_attach_rate=1.0, sync_deps=0, inter_thread_deps=0)
    none = LinkReport(**base, gpu_ops=0, gpu_ops_in_window=0)
    assert none.summary() == ("rank 0: 10/10 host ops matched (100.0%, rf_id, window ProfilerStep#2); no GPU "
                              "ops; 0 sync deps, 0 inter-thread deps; no communication")
    outside = LinkReport(**base, gpu_ops=7, gpu_ops_in_window=0)
    assert "; no GPU ops in the window (7 outside it);" in outside.summary()
