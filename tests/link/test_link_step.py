"""``--step N``: link (and convert, and run the pipeline on) one chosen ProfilerStep only (issue 16)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.traces import by_id, check_dependencies, cpu, gpu, host_doc, kineto_doc, op, rt, write

from chakra.cli import trace_link
from chakra.device.loader import load_kineto
from chakra.errors import TraceFormatError, UsageError
from chakra.host.loader import load_host_et
from chakra.io import load_json, read_messages
from chakra.link import link_files, link_traces
from chakra.schema import GlobalMetadata, Node

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "src" / "chakra" / "data" / "gloo_mlp_2r"


def two_steps() -> tuple[dict[str, Any], dict[str, Any]]:
    """Thread 1 runs ProfilerStep#1 (10: mm 11 launching kernel k1) and ProfilerStep#2 (13: mm 14 launching
    k2, with relu 15 inside mm), then add 18 outside any step; thread 2 runs bwd_x 12 in step 1, bwd_y 16 in
    step 2 and 17, which Kineto did not record, recorded (by id) after ProfilerStep#2 began."""
    host = host_doc(
        [
            op(10, "ProfilerStep#1", 2, 1),
            op(11, "aten::mm", 10, 2),
            op(12, "bwd_x", 3, 3, tid=2),
            op(13, "ProfilerStep#2", 2, 4),
            op(14, "aten::mm", 13, 5),
            op(15, "aten::relu", 14, 6),
            op(16, "bwd_y", 3, 7, tid=2),
            op(17, "mystery", 3, 8, tid=2),
            op(18, "aten::add", 2, 9),
        ],
        threads=(1, 2),
    )
    events = [
        cpu("ProfilerStep#1", 0, 100, 1, cat="user_annotation", rf=1),
        cpu("aten::mm", 10, 10, 2, rf=2),
        rt("cudaLaunchKernel", 12, 2, 101),
        gpu("k1", 15, 20, 101),
        cpu("bwd_x", 50, 20, 3, tid=200, rf=3),
        cpu("ProfilerStep#2", 2000, 400, 4, cat="user_annotation", rf=4),
        cpu("aten::mm", 2010, 30, 5, rf=5),
        rt("cudaLaunchKernel", 2012, 2, 102),
        gpu("k2", 2020, 20, 102),
        cpu("aten::relu", 2015, 10, 6, rf=6),
        cpu("bwd_y", 2250, 20, 7, tid=200, rf=7),
        cpu("aten::add", 3000, 10, 9, rf=9),
    ]
    return host, kineto_doc(events)


def deps_of(doc: dict[str, Any]) -> dict[int, list[int]]:
    out = {}
    for n in doc["nodes"]:
        d = ([n["inter_thread_dep"]] if "inter_thread_dep" in n else []) + list(n.get("sync_dep", []))
        if d:
            out[n["id"]] = d
    return out


def test_one_step_keeps_its_nodes_and_drops_deps_on_the_others(tmp_path: Path) -> None:
    hp, kp = write(tmp_path, *two_steps())
    host, kineto = load_host_et(hp), load_kineto(kp)
    full = link_traces(host, kineto)
    doc = link_traces(load_host_et(hp), load_kineto(kp), step=2)
    check_dependencies(doc)
    nodes = by_id(doc)
    host_ids = sorted(i for i in nodes if i < 19)
    # roots 1, 2, 3 (process, threads); step 2's subtree 13, 14, 15; thread 2's bwd_y (inside the window) and
    # mystery (unmatched, recorded after ProfilerStep#2 began); not step 1, bwd_x, or add after the steps
    assert host_ids == [1, 2, 3, 13, 14, 15, 16, 17]
    gpu_nodes = [n for i, n in nodes.items() if i >= 19]
    assert [n["name"] for n in gpu_nodes] == ["k2"] and gpu_nodes[0]["parent"] == 14
    assert doc["measured"]["window"] == "ProfilerStep#2" and doc["measured"]["dur_us"] == 400
    assert doc["link_stats"]["step"] == {"step": "ProfilerStep#2", "host_nodes_kept": 8,
                                         "host_nodes_dropped": 4, "gpu_ops_dropped": 1}
    # the deps kept are exactly the full link's deps among kept nodes: none is rewired, none dangles
    want = {}
    full_gpu = {n["id"]: n["name"] for n in full["nodes"] if n["id"] >= 19}
    kept_gpu = {n["name"]: n["id"] for n in gpu_nodes}
    for k, ds in deps_of(full).items():
        if k in nodes:
            mapped = [kept_gpu.get(full_gpu[d], -1) if d >= 19 else d for d in ds]
            mapped = [d for d in mapped if d in nodes]
            if mapped:
                want[k] = mapped
    assert deps_of(doc) == want
    # what was lost: ProfilerStep#2 (idle 1900 µs after step 1) waited for bwd_x on thread 2 in the full link
    assert 12 in deps_of(full).get(13, [])


def test_step_errors(tmp_path: Path) -> None:
    hp, kp = write(tmp_path, *two_steps())
    with pytest.raises(UsageError, match=r"--step 7: no ProfilerStep#7 in .*kineto_0.json \(its steps: "
                                         r"ProfilerStep#1, ProfilerStep#2\)"):
        link_traces(load_host_et(hp), load_kineto(kp), step=7)
    with pytest.raises(UsageError, match="--step and --annotation both choose the window"):
        link_traces(load_host_et(hp), load_kineto(kp), step=1, annotation="ProfilerStep#1")


def test_steps_nested_in_the_host_et_are_refused(tmp_path: Path) -> None:
    # as cpu_gloo/ddp_mlp_4r rank 3 records them: ProfilerStep#2 a child of ProfilerStep#1; the tree does not
    # tell the steps' ops apart, so neither step can be kept alone (it kept both, or nothing but the roots)
    host, kineto = two_steps()
    for n in host["nodes"]:
        if n["id"] == 13:
            n["parent"] = 10
    hp, kp = write(tmp_path, host, kineto)
    for step in (1, 2):
        want = rf"ProfilerStep#2 is recorded inside ProfilerStep#1 \(thread 1\): .* ProfilerStep#{step} can"
        with pytest.raises(TraceFormatError, match=want):
            link_traces(load_host_et(hp), load_kineto(kp), step=step)
    link_traces(load_host_et(hp), load_kineto(kp))     # the whole trace still links


def _raw_descendants(path: Path, root: int) -> set[int]:
    """Ids under ``root`` in the host ET's call tree, read with the standard library only."""
    nodes = json.loads(gzip.decompress(path.read_bytes()))["nodes"]
    children: dict[int, list[int]] = {}
    for n in nodes:
        if n["ctrl_deps"] != n["id"]:
            children.setdefault(n["ctrl_deps"], []).append(n["id"])
    out, todo = set(), [root]
    while todo:
        i = todo.pop()
        out.add(i)
        todo.extend(children.get(i, []))
    return out


@pytest.mark.parametrize(("step", "marker", "measured"), [(2, 4, 7556.621), (3, 355, 6184.404)])
def test_demo_trace_one_step_converts_without_dangling_deps(tmp_path: Path, step: int, marker: int,
                                                             measured: float) -> None:
    """gloo_mlp_2r rank 0: ProfilerStep#2 is node 4, ProfilerStep#3 node 355 (both under thread root 2);
    the measured step durations are those of the raw Kineto file."""
    out = tmp_path / "et_plus.json"
    rc = trace_link.main(["--chakra-host-trace", str(DEMO / "host_et_0.json.gz"), "--chakra-device-trace",
                          str(DEMO / "kineto_0.json.gz"), "--step", str(step), "-o", str(out), "-q"])
    assert rc == 0
    doc = load_json(out)
    want = {1, 2, 3} | _raw_descendants(DEMO / "host_et_0.json.gz", marker)
    assert {n["id"] for n in doc["nodes"]} == want and len(want) == 230
    assert doc["measured"]["dur_us"] == pytest.approx(measured, abs=0.001)
    from chakra.convert import convert_file
    from chakra.replay.api import replay_file

    et = tmp_path / f"job.0.{step}.et"
    convert_file(out, et)
    _, nodes = read_messages(et, GlobalMetadata, Node)
    ids = {n.id for n in nodes}
    assert all(d in ids for n in nodes for d in [*n.ctrl_deps, *n.data_deps])
    rep = replay_file(str(et))                # missing deps are an error in the replay: none here
    assert rep.measured_us == pytest.approx(measured, abs=1)
    assert abs(rep.error_pct) < 2.0


def test_pipeline_step(tmp_path: Path) -> None:
    from chakra.pipeline import run_pipeline

    res = run_pipeline(DEMO, tmp_path, jobs=1, step=3)
    # raw Kineto ProfilerStep#3 of ranks 0 and 1 (test_demo's MEASURED are #2 + #3)
    assert [r["measured_us"] for r in res.summary["ranks"]] == pytest.approx([6184.404, 7413.507], abs=0.01)
    assert [r["nodes"] for r in res.summary["ranks"]] == [230, 230]


@pytest.mark.parametrize("kineto_only", [False, True])
def test_pipeline_step_measures_that_step_kineto_only_too(tmp_path: Path, kineto_only: bool) -> None:
    """tests/data/gloo_skew_2r (rank 1 20 ms late in each step): ProfilerStep#3 of its Kineto traces lasts
    36,393.968 us on rank 0 and 27,557.048 us on rank 1; with its host ET or without it, that is the measured
    time and the replay is within 1% of it.  Before, the Kineto-only link kept every step's ops in its host
    ET and measured the whole window of steps 1..3 (83,978.3 / 91,468.5 us: -29.13% and -69.87%)."""
    from chakra.io.ranks import RankNaming
    from chakra.pipeline import run_pipeline

    naming = RankNaming(kineto_only=True) if kineto_only else None
    res = run_pipeline(REPO / "tests/data/gloo_skew_2r", tmp_path, jobs=1, step=3, naming=naming)
    ranks = res.summary["ranks"]
    assert [r["measured_us"] for r in ranks] == pytest.approx([36393.968, 27557.048], abs=0.001)
    assert all(abs(r["error_pct"]) < 1.0 for r in ranks)
    for rank in (0, 1):
        doc = load_json(tmp_path / f"et_plus_{rank}.json")
        assert doc["measured"]["window"] == "ProfilerStep#3"
        assert "kineto_only" in doc if kineto_only else "kineto_only" not in doc
        if kineto_only:   # its host nodes: ops that start in the step, none of steps 1 and 2
            lo = doc["measured"]["start_us"]
            hi = lo + doc["measured"]["dur_us"]
            assert all(lo <= n["ts"] < hi for n in doc["nodes"] if "ts" in n and n.get("kineto_tid"))


@pytest.mark.corpus
def test_dlrm_single_step_keeps_everything(corpus: Path, tmp_path: Path) -> None:
    """DLRM's host ET has no ProfilerStep node and its Kineto trace one step (#10): every node is kept."""
    d = corpus / "dlrm_8r_v100"
    rep = link_files(d / "host/host_et_0.json.gz", d / "device/kineto_0.json.gz", tmp_path / "e.json",
                     step=10)
    doc = load_json(tmp_path / "e.json")
    assert doc["link_stats"]["step"]["host_nodes_dropped"] == 0 and rep.window == "ProfilerStep#10"
    assert doc["measured"]["dur_us"] == pytest.approx(14455, abs=1)


def test_the_summary_says_what_was_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert trace_link.main(["--chakra-host-trace", str(DEMO / "host_et_1.json.gz"), "--chakra-device-trace",
                            str(DEMO / "kineto_1.json.gz"), "--step", "2", "-o",
                            str(tmp_path / "e.json")]) == 0
    # 457 host nodes: the 3 roots/metadata and ProfilerStep#2's 227 kept, ProfilerStep#3's 227 dropped
    assert capsys.readouterr().out.endswith("; ProfilerStep#2 only: 230 host nodes kept, 227 dropped -> "
                                            f"{tmp_path / 'e.json'}\n")
