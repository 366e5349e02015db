"""Kineto loader: real traces of the shared corpus, plus tiny hand-made traces for the edge cases.

Numbers in the corpus tests were read off the files with an independent stdlib script
(``json.loads(gzip.decompress(...))`` and counting ``ph``/``cat``/``name``), not with the loader.
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from chakra.device import load_kineto, measured_window
from chakra.device.model import (
    ANNOTATION,
    DRIVER,
    HOST_OP,
    KERNEL,
    LAUNCH,
    MEMCPY,
    MEMSET,
    OTHER,
    RUNTIME,
    SYNC,
)
from chakra.errors import TraceFormatError

# --------------------------------------------------------------------------------------------------
# real corpus
# --------------------------------------------------------------------------------------------------

# file -> (traceEvents, X events, s/f flow events)
CORPUS_COUNTS = {
    "cpu_gloo/ddp_mlp_4r/kineto_0.json.gz": (513, 459, 40),
    "cpu_gloo/ddp_mlp_4r/kineto_1.json.gz": (513, 459, 40),
    "cpu_gloo/ddp_mlp_4r/kineto_2.json.gz": (513, 459, 40),
    "cpu_gloo/ddp_mlp_4r/kineto_3.json.gz": (513, 459, 40),
    "cpu_gloo/fsdp_2r/kineto_0.json.gz": (1191, 1129, 48),
    "cpu_gloo/fsdp_2r/kineto_1.json.gz": (1191, 1129, 48),
    "cpu_gloo/single_1r/kineto_0.json.gz": (291, 257, 24),
    "cpu_gloo/tp_like_2r/kineto_0.json.gz": (278, 246, 12),
    "cpu_gloo/tp_like_2r/kineto_1.json.gz": (278, 246, 12),
    "dlrm_8r_v100/device/kineto_0.json.gz": (3290, 2460, 786),
    "dlrm_8r_v100/device/kineto_1.json.gz": (3424, 2527, 853),
    "dlrm_8r_v100/device/kineto_2.json.gz": (3268, 2449, 775),
    "dlrm_8r_v100/device/kineto_3.json.gz": (3474, 2552, 878),
    "dlrm_8r_v100/device/kineto_4.json.gz": (3310, 2470, 796),
    "dlrm_8r_v100/device/kineto_5.json.gz": (3250, 2440, 766),
    "dlrm_8r_v100/device/kineto_6.json.gz": (3272, 2451, 777),
    "dlrm_8r_v100/device/kineto_7.json.gz": (3250, 2440, 766),
    "simple_add_1r/kineto_0.json.gz": (111, 56, 19),
}

# README of the corpus: ProfilerStep#10 per DLRM rank
DLRM_STEP10 = [14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509]
# ddp_mlp_4r: (#1, #2) per rank, exact values of the files
DDP_STEPS = [(29203.134, 21320.409), (38514.793, 16295.542), (32028.428, 17837.269), (35983.717, 20381.154)]


def _by_index(trace, index: int):
    """The event at traceEvents[index] (positions in trace.events differ from file indices)."""
    hits = [ev for ev, i in zip(trace.events, trace.file_index) if i == index]
    assert len(hits) == 1
    return hits[0]


def test_corpus_has_every_kineto_file(corpus: Path) -> None:
    found = {str(p.relative_to(corpus)) for p in corpus.rglob("kineto_*.json*")}
    assert found == set(CORPUS_COUNTS)


@pytest.mark.parametrize("rel", sorted(CORPUS_COUNTS))
def test_event_counts(corpus: Path, rel: str) -> None:
    total, x_events, flows = CORPUS_COUNTS[rel]
    trace = load_kineto(corpus / rel)
    assert trace.stats["events_total"] == total
    assert len(trace.events) == x_events
    assert trace.flow_count == flows
    assert all(ev.ph == "X" for ev in trace.events)
    # file order kept
    idx = list(trace.file_index)
    assert len(idx) == len(trace.events) and idx == sorted(idx)
    # every CPU-side event has a non-negative exclusive time not above its duration
    assert all(0.0 <= ev.excl_dur <= ev.dur for ev in trace.events)


def test_dlrm_rank0_kinds_and_correlation(corpus: Path) -> None:
    trace = load_kineto(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    kinds = [ev.kind for ev in trace.events]
    assert kinds.count(KERNEL) == 245
    assert kinds.count(MEMCPY) == 16
    assert kinds.count(MEMSET) == 0
    assert kinds.count(HOST_OP) == 1633
    assert kinds.count(ANNOTATION) == 40
    # 245 cudaLaunchKernel + 16 cudaMemcpyAsync
    assert kinds.count(LAUNCH) == 261
    assert sum(ev.name == "cudaLaunchKernel" and ev.kind == LAUNCH for ev in trace.events) == 245
    # 44 cudaStreamWaitEvent + 10 cudaStreamSynchronize + 1 cudaDeviceSynchronize
    assert kinds.count(SYNC) == 55
    assert all(ev.is_sync for ev in trace.events if ev.kind == SYNC)
    # 525 cuda_runtime = 261 launch + 55 sync + 209 other runtime calls (8 of them INVALID)
    assert kinds.count(RUNTIME) == 209
    invalid = [ev for ev in trace.events if ev.name == "INVALID"]
    assert len(invalid) == 8 and all(ev.kind == RUNTIME for ev in invalid)
    assert kinds.count(OTHER) == 1  # the "PyTorch Profiler (0)" Trace span

    # every GPU op has its launcher through the correlation id
    gpu = [pos for pos, ev in enumerate(trace.events) if ev.kind in (KERNEL, MEMCPY, MEMSET)]
    assert len(gpu) == 261
    for pos in gpu:
        ev = trace.events[pos]
        launcher = trace.events[trace.launch_by_correlation[ev.correlation]]
        assert launcher.correlation == ev.correlation
        assert pos in trace.gpu_by_correlation[ev.correlation]
        expected = "cudaLaunchKernel" if ev.kind == KERNEL else "cudaMemcpyAsync"
        assert launcher.name == expected
        assert ev.excl_dur == ev.dur
        assert ev.device == 0
    assert trace.stats["gpu_without_launch"] == 0
    assert trace.stats["ac2g_confirmed"] == 261
    assert {trace.events[p].stream for p in gpu} == {7, 22, 24, 84}


def test_dlrm_first_kernel_and_its_enclosing_host_op(corpus: Path) -> None:
    trace = load_kineto(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    # traceEvents[1739] cudaLaunchKernel (ts ...428460, dur 12) sits inside aten::addmm [1108]
    launch = _by_index(trace, 1739)
    assert launch.name == "cudaLaunchKernel" and launch.kind == LAUNCH
    host = trace.events[launch.parent]
    assert trace.file_index[launch.parent] == 1108 and host.name == "aten::addmm"
    kernels = [trace.events[p] for p in trace.gpu_by_correlation[launch.correlation]]
    assert len(kernels) == 1 and kernels[0].name.startswith("void gemmSN_TN_kernel")
    assert kernels[0].stream == 7


def test_dlrm_ranks_1_and_3_have_kernels_launched_before_profiling(corpus: Path) -> None:
    for rank, kernels in ((1, 310), (3, 315)):
        trace = load_kineto(corpus / f"dlrm_8r_v100/device/kineto_{rank}.json.gz")
        assert sum(ev.kind == KERNEL for ev in trace.events) == kernels
        assert trace.stats["gpu_without_launch"] == 64
        assert any("64 GPU event(s) have no launching call" in w for w in trace.warnings)
    trace3 = load_kineto(corpus / "dlrm_8r_v100/device/kineto_3.json.gz")
    memsets = [ev for ev in trace3.events if ev.kind == MEMSET]
    assert len(memsets) == 6
    assert all(trace3.events[trace3.launch_by_correlation[m.correlation]].name == "cudaMemsetAsync"
               for m in memsets)


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_steps(corpus: Path, rank: int) -> None:
    trace = load_kineto(corpus / f"dlrm_8r_v100/device/kineto_{rank}.json.gz")
    assert [s.name for s in trace.steps] == ["ProfilerStep#10"]
    assert trace.steps[0].dur == DLRM_STEP10[rank]
    name, start, dur = measured_window(trace)
    assert (name, start, dur) == ("ProfilerStep#10", trace.steps[0].ts, DLRM_STEP10[rank])
    assert trace.rank == rank and trace.world_size == 8 and trace.backend == "nccl"
    assert trace.pg_config == []
    assert len(trace.device_properties) == 8
    assert trace.device_properties[0]["name"] == "Tesla V100-SXM2-32GB"


def test_dlrm_trace_name(corpus: Path) -> None:
    trace = load_kineto(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    assert trace.trace_name == "./kineto/worker0_step_12.1694128201545.pt.trace.json"
    assert trace.extra == {"schemaVersion": 1, "record_shapes": 1}


@pytest.mark.parametrize("rank", range(4))
def test_ddp_steps(corpus: Path, rank: int) -> None:
    trace = load_kineto(corpus / f"cpu_gloo/ddp_mlp_4r/kineto_{rank}.json.gz")
    assert [s.name for s in trace.steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert [s.dur for s in trace.steps] == pytest.approx(DDP_STEPS[rank], abs=1e-9)
    assert trace.steps[0].ts < trace.steps[1].ts
    name, start, dur = measured_window(trace)
    assert name == "ProfilerStep#1+ProfilerStep#2"
    assert start == trace.steps[0].ts
    # the steps do not overlap: the union is the sum (the gap between them is not measured time)
    assert dur == pytest.approx(sum(DDP_STEPS[rank]), abs=1e-6)


def test_ddp_rank0_step_values_and_extra(corpus: Path) -> None:
    trace = load_kineto(corpus / "cpu_gloo/ddp_mlp_4r/kineto_0.json.gz")
    assert trace.steps[0].ts == pytest.approx(5168089219596.147, abs=1e-3)
    assert trace.steps[1].ts == pytest.approx(5168089248850.787, abs=1e-3)
    assert trace.rank == 0 and trace.world_size == 4 and trace.backend == "gloo"
    assert trace.pg_config == [{"pg_name": "0", "pg_desc": "default_pg",
                                "backend_config": "cpu:gloo,cuda:gloo", "pg_size": 4, "ranks": [0, 1, 2, 3]}]
    assert trace.device_properties == []
    assert trace.trace_name == "kineto_0.json"
    assert trace.extra["host_name"] == "vm"
    assert trace.extra["baseTimeNanoseconds"] == 1790857026000000000
    # Record function id and External id of ProfilerStep#1 (traceEvents[...]: args 1 / 2)
    step1 = next(ev for ev in trace.events if ev.name == "ProfilerStep#1")
    assert (step1.external_id, step1.rf_id, step1.kind) == (1, 2, ANNOTATION)
    # the "PyTorch Profiler (0)" span has string pid/tid
    span = next(ev for ev in trace.events if ev.cat == "Trace")
    assert (span.pid, span.tid, span.kind, span.parent) == ("Spans", "PyTorch Profiler", OTHER, None)


def test_tp_like_distributed_info(corpus: Path) -> None:
    t0 = load_kineto(corpus / "cpu_gloo/tp_like_2r/kineto_0.json.gz")
    t1 = load_kineto(corpus / "cpu_gloo/tp_like_2r/kineto_1.json.gz")
    assert (t0.rank, t0.world_size, t0.backend) == (0, 2, "gloo")
    assert t1.rank == 1
    assert [(p["pg_name"], p["pg_desc"], p["ranks"]) for p in t0.pg_config] == [
        ("0", "default_pg", [0, 1]), ("1", "tp_subgroup", [0, 1]), ("2", "solo_0", [0])]
    assert [(p["pg_name"], p["pg_desc"], p["ranks"]) for p in t1.pg_config] == [
        ("0", "default_pg", [0, 1]), ("1", "tp_subgroup", [0, 1]), ("3", "solo_1", [1])]
    assert t0.distributed_info["pg_count"] == 4  # pg_count says 4, pg_config lists 3 on each rank
    assert [s.dur for s in t0.steps] == [16292.887]
    assert [s.dur for s in t1.steps] == [19498.945]


def test_single_1r_has_no_distributed_info(corpus: Path) -> None:
    trace = load_kineto(corpus / "cpu_gloo/single_1r/kineto_0.json.gz")
    assert (trace.rank, trace.world_size, trace.backend, trace.pg_config) == (None, None, None, [])
    assert [(s.name, s.dur) for s in trace.steps] == [("ProfilerStep#1", 5888.328)]


def test_simple_add_uses_kineto_span(corpus: Path) -> None:
    trace = load_kineto(corpus / "simple_add_1r/kineto_0.json.gz")
    assert trace.steps == []
    # the span of the 55 CPU/GPU activity events (cpu_op, user_annotation, cuda_runtime, kernel, ...):
    # first ts 1689360788493697, last end 1689360808307984; the profiler's own "PyTorch Profiler (0)"
    # Trace span (ts 1689360788459677, dur 19848330) adds idle time at both ends and is left out
    assert measured_window(trace) == ("kineto_span", 1689360788493697.0, 19814287.0)
    kinds = [ev.kind for ev in trace.events]
    assert kinds.count(KERNEL) == 4 and kinds.count(LAUNCH) == 4
    assert kinds.count(SYNC) == 5  # five cudaDeviceSynchronize
    assert trace.rank == 0 and trace.world_size is None


def test_exclusive_durations_by_hand_dlrm(corpus: Path) -> None:
    trace = load_kineto(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    # traceEvents[1108] aten::addmm, ts ...428423, dur 54, direct children:
    #   [1109] aten::empty 5, [1735] cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags 1,
    #   [1739] cudaLaunchKernel 12.  Only operator children and synchronizing calls are subtracted: the
    #   occupancy query and the launch are the op's own CPU work (no node stands for them) -> 54 - 5 = 49
    addmm = _by_index(trace, 1108)
    assert addmm.name == "aten::addmm" and addmm.excl_dur == 49.0
    assert trace.events[_by_index(trace, 1739).parent] is addmm  # the launch still finds its op
    # traceEvents[1104] aten::linear, dur 70, children [1105] aten::t 13 and [1108] aten::addmm 54
    #                                               -> 70 - (13 + 54) = 3
    linear = _by_index(trace, 1104)
    assert linear.name == "aten::linear" and linear.excl_dur == 3.0
    assert trace.events[addmm.parent] is linear
    # traceEvents[686] Optimizer.zero_grad#Adagrad.zero_grad, dur 62, children aten::slice 10, aten::view 2
    #                                               -> 62 - 12 = 50
    zero = _by_index(trace, 686)
    assert zero.excl_dur == 50.0
    # leaf: the cudaLaunchKernel itself
    assert _by_index(trace, 1739).excl_dur == 12.0


def test_exclusive_durations_by_hand_ddp(corpus: Path) -> None:
    trace = load_kineto(corpus / "cpu_gloo/ddp_mlp_4r/kineto_0.json.gz")
    # traceEvents[27] aten::addmm dur 219.285; children aten::expand 70.514, aten::copy_ 23.024,
    # aten::resolve_conj 9.894 and 8.322: 219.285 - 111.754 = 107.531
    addmm = _by_index(trace, 27)
    assert addmm.name == "aten::addmm"
    assert addmm.excl_dur == pytest.approx(107.531, abs=1e-9)
    # traceEvents[22] aten::linear dur 327.125; children aten::t 74.24, aten::addmm 219.285 -> 33.6
    linear = _by_index(trace, 22)
    assert linear.excl_dur == pytest.approx(33.6, abs=1e-9)
    assert trace.events[addmm.parent] is linear


def test_real_overrunning_child_is_clipped(corpus: Path) -> None:
    trace = load_kineto(corpus / "cpu_gloo/tp_like_2r/kineto_0.json.gz")
    assert trace.stats["overrun_children"] == 2
    # traceEvents[202] c10d::send  ts 5168095501270.398 dur 53.239 (ends ...323.637)
    # traceEvents[203] gloo:send   ts 5168095501310.708 dur 56.063: starts inside, ends after the parent
    # clipped child = 323.637 - 310.708 = 12.929(ish)    -> exclusive of c10d::send = 53.239 - 12.929 = 40.31
    send = _by_index(trace, 202)
    gsend = _by_index(trace, 203)
    assert trace.events[gsend.parent] is send
    assert send.excl_dur == pytest.approx(40.31, abs=2e-3)
    assert gsend.excl_dur == pytest.approx(56.063, abs=1e-9)


# --------------------------------------------------------------------------------------------------
# hand-made traces
# --------------------------------------------------------------------------------------------------

PID, TID = 100, 101


def X(name: str, ts: Any, dur: Any, cat: str = "cpu_op", pid: Any = PID, tid: Any = TID, **args: Any) -> dict:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = {k.replace("_", " "): v for k, v in args.items()}
    return ev


def write(tmp_path: Path, events: list[Any], name: str = "t.json", **top: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def by_name(trace) -> dict[str, Any]:
    out = {}
    for ev in trace.events:
        assert ev.name not in out
        out[ev.name] = ev
    return out


def parent_name(trace, ev) -> str | None:
    return None if ev.parent is None else trace.events[ev.parent].name


def test_nested_three_deep(tmp_path: Path) -> None:
    #  A [0,100)  > B [10,60) > C [20,30)      B excl = 50 - 10 = 40, A excl = 100 - 50 - 20 = 30
    #             > D [70,90)
    path = write(tmp_path, [X("C", 20, 10), X("A", 0, 100), X("D", 70, 20), X("B", 10, 50)])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert [parent_name(tr, ev[n]) for n in "ABCD"] == [None, "A", "B", "A"]
    assert [ev[n].excl_dur for n in "ABCD"] == [30.0, 40.0, 10.0, 20.0]


def test_equal_timestamps(tmp_path: Path) -> None:
    # P [0,10); two children starting at the same ts as each other: Q [2,5) and R [2,4).
    # Sorted by (ts, -dur): Q first, R is inside Q.  Identical twins S1/S2 [20,30): the first in the
    # file is the parent.
    path = write(tmp_path, [X("P", 0, 10), X("R", 2, 2), X("Q", 2, 3), X("S1", 20, 10), X("S2", 20, 10)])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert parent_name(tr, ev["Q"]) == "P" and parent_name(tr, ev["R"]) == "Q"
    assert (ev["P"].excl_dur, ev["Q"].excl_dur, ev["R"].excl_dur) == (7.0, 1.0, 2.0)
    assert parent_name(tr, ev["S2"]) == "S1" and ev["S1"].parent is None
    assert (ev["S1"].excl_dur, ev["S2"].excl_dur) == (0.0, 10.0)


def test_child_starting_at_parent_start_with_same_ts(tmp_path: Path) -> None:
    # parent and child share ts; the longer one is the parent whatever the file order
    path = write(tmp_path, [X("child", 5, 3), X("parent", 5, 8)])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert parent_name(tr, ev["child"]) == "parent"
    assert ev["parent"].excl_dur == 5.0


def test_zero_length_events(tmp_path: Path) -> None:
    # P [0,10): Z0 at its start is a child; Zend exactly at its end is not (half-open intervals);
    # Za and Zb both at ts 4 are siblings (a zero-length event has no children).
    path = write(tmp_path, [X("P", 0, 10), X("Z0", 0, 0), X("Za", 4, 0), X("Zb", 4, 0), X("Zend", 10, 0)])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert parent_name(tr, ev["Z0"]) == "P"
    assert parent_name(tr, ev["Za"]) == "P" and parent_name(tr, ev["Zb"]) == "P"
    assert ev["Zend"].parent is None
    assert ev["P"].excl_dur == 10.0
    assert all(ev[n].excl_dur == 0.0 for n in ("Z0", "Za", "Zb", "Zend"))


def test_overrunning_child_is_clipped(tmp_path: Path) -> None:
    # A [0,10) with child B [5,15) that runs past A's end; C [12,14) starts after A ended.
    # B counts 5 (clipped to 10) for A: A excl = 5.  C is not B's child (B is clipped to 10 as well):
    # C is a root.  B excl = 10 (its own full duration, no children).
    path = write(tmp_path, [X("A", 0, 10), X("B", 5, 10), X("C", 12, 2)])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert parent_name(tr, ev["B"]) == "A" and ev["C"].parent is None
    assert (ev["A"].excl_dur, ev["B"].excl_dur, ev["C"].excl_dur) == (5.0, 10.0, 2.0)
    assert tr.stats["overrun_children"] == 1
    assert any("clipped" in w for w in tr.warnings)


def test_fractional_microseconds(tmp_path: Path) -> None:
    # P [1000.125, +10.5) with children 2.25 and 3.125 -> 10.5 - 5.375 = 5.125 (all exact binary fractions)
    path = write(tmp_path, [X("P", 1000.125, 10.5), X("a", 1001.0, 2.25), X("b", 1004.5, 3.125)])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert ev["P"].excl_dur == 5.125
    assert ev["a"].ts == 1001.0 and ev["b"].dur == 3.125
    # realistic decimals on large absolute times: 0.1 + 0.2 style rounding must not go negative
    path = write(tmp_path, [X("Q", 5168089220387.892, 0.3), X("q1", 5168089220387.892, 0.1),
                            X("q2", 5168089220387.992, 0.2)], name="u.json")
    tr = load_kineto(path)
    q = by_name(tr)["Q"]
    assert 0.0 <= q.excl_dur < 1e-9


def test_threads_are_separate_and_string_ids(tmp_path: Path) -> None:
    # the same interval on another thread is not a child; string pid/tid ("Spans") work
    path = write(tmp_path, [X("main", 0, 100), X("worker", 10, 5, tid=102),
                            X("span", 0, 200, cat="Trace", pid="Spans", tid="PyTorch Profiler"),
                            X("strtid", 1, 1, pid="p", tid="t")])
    tr = load_kineto(path)
    ev = by_name(tr)
    assert ev["worker"].parent is None and ev["main"].excl_dur == 100.0
    assert ev["span"].kind == OTHER and ev["span"].excl_dur == 200.0
    assert (ev["strtid"].pid, ev["strtid"].tid, ev["strtid"].kind) == ("p", "t", HOST_OP)
    assert tr.stats["cpu_threads"] == 3
    # the span is the activity (main 0..100), not the profiler's own Trace span (0..200)
    assert measured_window(tr) == ("kineto_span", 0.0, 100.0)


def gpu(name: str, ts: float, dur: float, corr: int, cat: str = "kernel", stream: int = 7) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream, "device": 0, "External id": corr}}


def rt(name: str, ts: float, dur: float, corr: int, cat: str = "cuda_runtime") -> dict:
    return X(name, ts, dur, cat=cat, correlation=corr, External_id=corr)


def test_classification(tmp_path: Path) -> None:
    events = [
        X("aten::copy_", 0, 100),
        rt("cudaLaunchKernel", 1, 2, 1),
        rt("cudaMemcpy", 5, 10, 2),                 # synchronous copy: launch and sync
        rt("cudaMemcpyAsync", 20, 2, 3),
        rt("cudaMemsetAsync", 23, 1, 4),
        rt("cudaStreamSynchronize", 25, 3, 5),
        rt("cudaStreamWaitEvent", 29, 1, 6),
        rt("cudaEventQuery", 31, 1, 7),
        rt("INVALID", 33, 0, 8),                    # no GPU op: plain runtime call
        rt("cudaSomethingNew", 34, 1, 9),           # unknown name, but a GPU op has correlation 9
        rt("cuLaunchKernel", 40, 2, 10, cat="cuda_driver"),
        rt("cuModuleGetFunction", 43, 1, 11, cat="cuda_driver"),
        rt("hipMemcpyWithStream", 45, 2, 12),
        rt("hipLaunchKernel", 48, 1, 13),
        rt("hipDeviceSynchronize", 50, 1, 14),
        X("record_function_x", 60, 5, cat="user_annotation"),
        X("fwd", 60, 5, cat="python_function"),
        gpu("k1", 110, 5, 1),
        gpu("Memcpy DtoH", 111, 3, 2, cat="gpu_memcpy", stream=22),
        gpu("Memcpy HtoD", 115, 3, 3, cat="gpu_memcpy"),
        gpu("Memset (Device)", 119, 1, 4, cat="gpu_memset"),
        gpu("k9", 120, 1, 9),
        gpu("k10", 121, 1, 10),
        gpu("k12copy", 122, 1, 12, cat="gpu_memcpy"),
        gpu("k13", 123, 1, 13),
        gpu("gpu_side_x", 110, 14, 0, cat="gpu_user_annotation"),
    ]
    tr = load_kineto(write(tmp_path, events))
    ev = by_name(tr)
    expect = {
        "aten::copy_": (HOST_OP, False), "cudaLaunchKernel": (LAUNCH, False), "cudaMemcpy": (LAUNCH, True),
        "cudaMemcpyAsync": (LAUNCH, False), "cudaMemsetAsync": (LAUNCH, False),
        "cudaStreamSynchronize": (SYNC, True), "cudaStreamWaitEvent": (SYNC, True),
        "cudaEventQuery": (RUNTIME, False), "INVALID": (RUNTIME, False), "cudaSomethingNew": (LAUNCH, False),
        "cuLaunchKernel": (LAUNCH, False), "cuModuleGetFunction": (DRIVER, False),
        "hipMemcpyWithStream": (LAUNCH, True), "hipLaunchKernel": (LAUNCH, False),
        "hipDeviceSynchronize": (SYNC, True), "fwd": (OTHER, False),
        "k1": (KERNEL, False), "Memcpy DtoH": (MEMCPY, False), "Memset (Device)": (MEMSET, False),
    }
    for name, (kind, is_sync) in expect.items():
        assert (ev[name].kind, ev[name].is_sync) == (kind, is_sync), name
    gua = [e for e in tr.events if e.cat == "gpu_user_annotation"]
    ua = [e for e in tr.events if e.cat == "user_annotation"]
    assert gua[0].kind == OTHER and ua[0].kind == ANNOTATION
    assert tr.stats["promoted_launches"] == 1
    # correlation tables (positions in trace.events)
    pos = {e.name: i for i, e in enumerate(tr.events) if e.cat != "gpu_user_annotation"}
    assert tr.launch_by_correlation == {1: pos["cudaLaunchKernel"], 2: pos["cudaMemcpy"],
                                        3: pos["cudaMemcpyAsync"], 4: pos["cudaMemsetAsync"],
                                        9: pos["cudaSomethingNew"], 10: pos["cuLaunchKernel"],
                                        12: pos["hipMemcpyWithStream"], 13: pos["hipLaunchKernel"]}
    assert tr.gpu_by_correlation[2] == [pos["Memcpy DtoH"]]
    assert ev["Memcpy DtoH"].stream == 22 and ev["Memcpy DtoH"].device == 0
    # launches are children of the host op; GPU events have no parent
    assert ev["cudaMemcpy"].parent == pos["aten::copy_"]
    assert ev["k1"].parent is None and ev["k1"].excl_dur == 5.0
    assert ev["cudaLaunchKernel"].external_id == 1 and ev["cudaLaunchKernel"].correlation == 1


def test_duplicate_correlation_keeps_first(tmp_path: Path) -> None:
    events = [rt("cudaLaunchKernel", 0, 1, 7), rt("cudaLaunchKernel", 5, 1, 7),
              gpu("k", 10, 1, 7), gpu("k2", 12, 1, 7)]
    tr = load_kineto(write(tmp_path, events))
    assert tr.launch_by_correlation == {7: 0}
    assert tr.gpu_by_correlation == {7: [2, 3]}   # several GPU ops per launch are legitimate
    assert tr.stats["duplicate_launch_correlations"] == 1
    assert any("reuse a correlation id" in w for w in tr.warnings)


def test_flows_counted_not_kept(tmp_path: Path) -> None:
    events = [rt("cudaLaunchKernel", 0, 1, 7), gpu("k", 10, 1, 7),
              {"ph": "s", "id": 7, "pid": PID, "tid": TID, "ts": 0, "cat": "ac2g", "name": "ac2g"},
              {"ph": "f", "id": 7, "pid": 0, "tid": 7, "ts": 10, "cat": "ac2g", "name": "ac2g", "bp": "e"},
              {"ph": "s", "id": 1, "pid": PID, "tid": TID, "ts": 0, "cat": "fwdbwd", "name": "fwdbwd"},
              {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "x"}},
              {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 20}]
    tr = load_kineto(write(tmp_path, events))
    assert len(tr.events) == 2
    assert tr.flow_count == 3
    assert tr.stats["ac2g_confirmed"] == 1
    assert (tr.stats["ph_M"], tr.stats["ph_i"]) == (1, 1)
    assert tr.warnings == []


def test_events_lacking_fields(tmp_path: Path) -> None:
    # no name, no cat, no pid/tid, no args, ids as strings
    events = [{"ph": "X", "ts": 1, "dur": 2},
              {"ph": "X", "ts": 3.5, "dur": "1.5", "cat": "cpu_op", "name": "n",
               "args": {"External id": "42", "Record function id": 7.0}},
              {"ts": 1}, {}]
    tr = load_kineto(write(tmp_path, events))
    assert len(tr.events) == 2
    first, second = tr.events
    assert (first.name, first.cat, first.kind, first.pid, first.tid) == ("", "", OTHER, None, None)
    assert (second.dur, second.external_id, second.rf_id) == (1.5, 42, 7)
    assert tr.stats["ph_?"] == 2


def test_bad_durations_are_clamped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    # NaN is not JSON, but PyTorch writes it; chakra.io falls back to the stdlib parser for it
    path.write_text('{"traceEvents": ['
                    '{"ph": "X", "cat": "cpu_op", "name": "P", "pid": 1, "tid": 1, "ts": 0, "dur": 10},'
                    '{"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 1, "dur": -3},'
                    '{"ph": "X", "cat": "cpu_op", "name": "nan", "pid": 1, "tid": 1, "ts": 2, "dur": NaN},'
                    '{"ph": "X", "cat": "cpu_op", "name": "nodur", "pid": 1, "tid": 1, "ts": 4},'
                    '{"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 5, "dur": 2}]}')
    tr = load_kineto(path)
    ev = by_name(tr)
    assert [ev[n].dur for n in ("neg", "nan", "nodur")] == [0.0, 0.0, 0.0]
    assert ev["P"].excl_dur == 8.0
    assert tr.stats["clamped_durations"] == 3
    assert any("3 X event(s)" in w and "traceEvents[1, 2, 3]" in w for w in tr.warnings)


@pytest.mark.parametrize("ts", [None, "abc", [1]])
def test_unusable_timestamp_is_an_error_naming_the_event(tmp_path: Path, ts: Any) -> None:
    broken = {"ph": "X", "name": "broken", "dur": 1, **({} if ts is None else {"ts": ts})}
    events = [X("a", 0, 1), X("b", 1, 1), broken]
    path = write(tmp_path, events)
    with pytest.raises(TraceFormatError) as err:
        load_kineto(path)
    assert "traceEvents[2]" in str(err.value) and "'broken'" in str(err.value)
    assert err.value.path == str(path)


def test_nan_timestamp_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}')
    with pytest.raises(TraceFormatError, match=r"traceEvents\[0\]"):
        load_kineto(path)


def test_annotation_windows_and_union(tmp_path: Path) -> None:
    ua = "user_annotation"
    events = [X("ProfilerStep#3", 100, 50, cat=ua), X("ProfilerStep#2", 0, 60, cat=ua),
              X("## forward ##", 10, 20, cat=ua), X("## forward ##", 110, 10, cat=ua),
              X("ProfilerStep#2", 0, 60, cat="gpu_user_annotation", pid=0, tid=7),
              X("ProfilerStep#x", 0, 500, cat="user_annotation"),
              X("## forward ##", 115, 10, cat="user_annotation", tid=5)]
    tr = load_kineto(write(tmp_path, events))
    # GPU-side mirror and non-numeric suffix are not steps; sorted by time
    assert [(s.name, s.ts, s.dur) for s in tr.steps] == [("ProfilerStep#2", 0.0, 60.0),
                                                          ("ProfilerStep#3", 100.0, 50.0)]
    assert measured_window(tr) == ("ProfilerStep#2+ProfilerStep#3", 0.0, 110.0)
    tr = load_kineto(write(tmp_path, events), annotation="## forward ##")
    assert [(s.ts, s.dur) for s in tr.steps] == [(10.0, 20.0), (110.0, 10.0), (115.0, 10.0)]
    # [10,30) + union([110,120), [115,125)) = 20 + 15
    assert measured_window(tr) == ("## forward ##", 10.0, 35.0)
    with pytest.raises(TraceFormatError, match="no CPU annotation or op named 'missing'"):
        load_kineto(write(tmp_path, events), annotation="missing")


def test_many_steps_window_name(tmp_path: Path) -> None:
    events = [X(f"ProfilerStep#{n}", 10 * n, 5, cat="user_annotation") for n in range(6)]
    tr = load_kineto(write(tmp_path, events))
    assert measured_window(tr) == ("ProfilerStep#0..ProfilerStep#5 (6 windows)", 0.0, 30.0)


def test_top_level_fields(tmp_path: Path) -> None:
    info = {"backend": "nccl", "rank": "3", "world_size": 8, "pg_config": [{"pg_name": "0"}, "junk"]}
    path = write(tmp_path, [X("a", 0, 1)], distributedInfo=info, deviceProperties=[{"id": 0, "name": "G"}],
                 traceName="x.json", schemaVersion=1, baseTimeNanoseconds=5)
    tr = load_kineto(path)
    assert (tr.rank, tr.world_size, tr.backend) == (3, 8, "nccl")
    assert tr.pg_config == [{"pg_name": "0"}]
    assert tr.device_properties == [{"id": 0, "name": "G"}]
    assert tr.trace_name == "x.json"
    assert tr.extra == {"schemaVersion": 1, "baseTimeNanoseconds": 5}
    assert any("pg_config" in w for w in tr.warnings)


def test_empty_trace(tmp_path: Path) -> None:
    tr = load_kineto(write(tmp_path, []))
    assert tr.events == [] and tr.steps == []
    assert measured_window(tr) == ("kineto_span", 0.0, 0.0)


def test_gzip_detected_by_magic(tmp_path: Path) -> None:
    path = tmp_path / "named_plain.json"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": [X("a", 0, 1)]}).encode()))
    assert len(load_kineto(path).events) == 1


# errors -------------------------------------------------------------------------------------------

def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text("this is not json {")
    with pytest.raises(TraceFormatError, match="not valid JSON") as err:
        load_kineto(path)
    assert err.value.path == str(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "k.json.gz"
    blob = gzip.compress(json.dumps({"traceEvents": [X("a", i, 1) for i in range(200)]}).encode())
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(TraceFormatError, match="gzip") as err:
        load_kineto(path)
    assert err.value.path == str(path)


def test_no_trace_events(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"schema": "1.0.1", "nodes": []}))
    with pytest.raises(TraceFormatError, match="no 'traceEvents'") as err:
        load_kineto(path)
    assert str(path) in str(err.value)


def test_trace_events_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"traceEvents": {"ph": "X"}}))
    with pytest.raises(TraceFormatError, match="'traceEvents' is a JSON dict, expected a list"):
        load_kineto(path)


def test_top_level_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text("[]")
    with pytest.raises(TraceFormatError, match="top level"):
        load_kineto(path)


def test_event_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, [X("a", 0, 1), 5])
    with pytest.raises(TraceFormatError, match=r"traceEvents\[1\] is a JSON int"):
        load_kineto(path)


def test_sync_call_time_is_subtracted_launch_time_is_not(corpus: Path) -> None:
    trace = load_kineto(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    # the aten::copy_ of 1096 µs that spends 1078 µs in a cudaStreamSynchronize (the wait becomes a sync
    # dependency on the GPU op, not CPU time); find it by its child rather than by index
    sync = [e for e in trace.events if e.name == "cudaStreamSynchronize" and e.dur == 1078]
    assert len(sync) == 1
    op = trace.events[sync[0].parent]
    assert op.name == "aten::copy_" and op.dur == 1096
    children = [(e.name, e.dur) for e in trace.events
                if e.parent is not None and trace.events[e.parent] is op]
    assert children == [("cudaMemcpyAsync", 10.0), ("cudaStreamSynchronize", 1078.0)]
    # 1096 - 1078 (the wait) = 18, which keeps the 10 µs of the cudaMemcpyAsync call as the op's own work
    assert op.excl_dur == 18.0


def test_a_pickled_trace_comes_back_equal_across_event_chunks(tmp_path: Path) -> None:
    # KinetoTrace pickles its events in chunks (a forked loader sends it back pickled): 5 events in
    # chunks of 2 -> 3 pickles, every field and every event back, in order
    from chakra.device import model

    path = write(tmp_path, [X("C", 20, 10), X("A", 0, 100), X("D", 70, 20), X("B", 10, 50), X("E", 95, 1)])
    tr = load_kineto(path)
    rebuild, (values,) = tr.reduce_in_chunks(2)
    assert len(values[model._TRACE_FIELDS.index("events")]) == 3
    back = rebuild(pickle.loads(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)))
    assert type(back) is model.KinetoTrace and back == tr
    assert pickle.loads(pickle.dumps(tr, protocol=pickle.HIGHEST_PROTOCOL)) == tr   # (the default chunks)
    assert [e.name for e in back.events] == ["C", "A", "D", "B", "E"]
    # C [20,30) in B [10,60) in A [0,100); D [70,90) and E [95,96) in A
    assert [parent_name(back, e) for e in back.events] == ["B", None, "A", "A", "A"]


def test_a_pickled_corpus_trace_comes_back_equal(corpus: Path) -> None:
    from chakra.device import model

    tr = load_kineto(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    assert len(tr.events) == 2460
    rebuild, (values,) = tr.reduce_in_chunks(1000)
    assert len(values[model._TRACE_FIELDS.index("events")]) == 3
    back = rebuild(pickle.loads(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)))
    assert back == tr and back.events[-1] == tr.events[-1]
