"""A cycle the converter makes itself (issue 30, class 1): the launch order of a process group's collectives
against a recorded edge that contradicts it.

gloo runs a process group's collectives on worker threads; the host ET records each ``gloo:*`` record under
whatever record was open, sometimes another collective's record on another worker thread.  DDP with two
gradient buckets launches bucket 1, then bucket 2; when bucket 2's record starts first (another worker was
free) and the ET makes it the parent of bucket 1's, the parent link (bucket 2 before bucket 1) and the
launch-order chain (bucket 1 before bucket 2, the order every rank shares) close a cycle.  The edge that
gives way is the recorded one; the conversion never aborts on it.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from helpers.etplus import by_id, chakra_node

from chakra import schema as pb
from chakra.convert import build
from chakra.host.loader import build_host_trace

BUCKET1 = [40, 41, 0, 64, 4, "cpu"]    # 64 floats
BUCKET2 = [42, 43, 0, 32, 4, "cpu"]    # 32 floats


def ddp_two_buckets(*, bucket1_parent: int = 8, extra: list | None = None, bucket1_tid: int = 12,
                    bucket1_ts: float = 1050.0) -> dict:
    """One DDP step on a rank: c10d calls for bucket 1 (node 5, at 1010) and bucket 2 (node 6, at 1030) on
    the main thread 11; bucket 2's gloo record (node 8) runs on worker 13 from 1036, bucket 1's (node 9) on
    worker ``bucket1_tid`` from ``bucket1_ts``, recorded under ``bucket1_parent`` (node 8: bucket 2's
    record)."""
    nodes = [
        chakra_node(2, "[pytorch|profiler|execution_trace|thread]", 1, rf_id=0),
        chakra_node(4, "ProfilerStep#1", 2, rf_id=2, ts=1000.0, dur=500.0, exclusive_dur=490.0,
                    kineto_tid=11),
        chakra_node(5, "c10d::allreduce_", 4, rf_id=3, ts=1010.0, dur=5.0, exclusive_dur=5.0, kineto_tid=11,
                    inputs=[[BUCKET1]], types=["GenericList[Tensor(float)]"]),
        chakra_node(6, "c10d::allreduce_", 4, rf_id=5, ts=1030.0, dur=5.0, exclusive_dur=5.0, kineto_tid=11,
                    inputs=[[BUCKET2]], types=["GenericList[Tensor(float)]"]),
        chakra_node(8, "gloo:all_reduce", 4, rf_id=6, ts=1036.0, dur=100.0, exclusive_dur=100.0,
                    kineto_tid=13, inputs=[BUCKET2], types=["Tensor(float)"]),
        chakra_node(9, "gloo:all_reduce", bucket1_parent, rf_id=4, ts=bucket1_ts, dur=80.0,
                    exclusive_dur=80.0, kineto_tid=bucket1_tid, inputs=[BUCKET1], types=["Tensor(float)"]),
        *(extra or []),
        chakra_node(1, "[pytorch|profiler|execution_trace|process]", 1, rf_id=0),
    ]
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 9, "time": "t", "start_ts": 0, "finish_ts": 0,
            "nodes": nodes, "rank": 0, "world_size": 2, "process_groups": [],
            "measured": {"window": "ProfilerStep#1", "start_us": 1000.0, "dur_us": 500.0, "steps": []}}


def convert(doc: dict):
    _, nodes, stats = build(build_host_trace(doc))
    return by_id(nodes), stats


def test_a_parent_link_against_the_launch_order_is_dropped():
    n, stats = convert(ddp_two_buckets())
    # bucket 1's record (9) runs after its call (5); bucket 2's record (8) after bucket 1's: launch order
    assert 5 in n[9].data_deps and 9 in n[8].data_deps and 6 in n[8].data_deps
    # ... and not under bucket 2's record, which the ET made its parent
    assert 8 not in n[9].ctrl_deps
    warned = [w for w in stats.warnings if "contradict the launch order" in w]
    assert len(warned) == 1
    assert ("node 9 (gloo:all_reduce) was launched before node 8 (gloo:all_reduce), yet recorded as its "
            "child") in warned[0]
    assert n[8].type == n[9].type == pb.COMM_COLL_NODE


def test_a_parent_link_that_agrees_with_the_launch_order_stays():
    # bucket 2's record recorded under bucket 1's: no contradiction, the link stays (as on the corpus)
    doc = ddp_two_buckets(bucket1_parent=4, bucket1_ts=1020.0)
    doc["nodes"][4]["ctrl_deps"] = 9      # node 8 under node 9
    n, stats = convert(doc)
    assert list(n[8].ctrl_deps) == [9]
    assert not [w for w in stats.warnings if "launch order" in w or "cycle" in w]


def test_a_cycle_through_a_child_of_the_other_record():
    # bucket 1's record hangs under an op (10) that ran inside bucket 2's record on worker 13: the cycle
    # 9 -> 10 -> 8 -> 9 goes through a node that is no collective; the cross-thread parent link goes
    copy = chakra_node(10, "aten::copy_", 8, rf_id=7, ts=1040.0, dur=2.0, exclusive_dur=2.0, kineto_tid=13)
    n, stats = convert(ddp_two_buckets(bucket1_parent=10, extra=[copy]))
    assert 10 not in n[9].ctrl_deps and 9 in n[8].data_deps and list(n[10].ctrl_deps) == [8]
    warned = [w for w in stats.warnings if "dependency cycle" in w]
    assert len(warned) == 1
    assert ("dropped the ET parent link of node 9 (gloo:all_reduce) to node 10 (aten::copy_) (a record of "
            "another thread), which contradicts the launch order (node 9 (gloo:all_reduce) was launched "
            "before node 8 (gloo:all_reduce))") in warned[0]


def test_the_launch_edge_goes_when_one_thread_recorded_the_other_order():
    # both records on worker 13, bucket 2's first: the thread's recorded order (9 after 8) and the launch
    # order (8 after 9) disagree with no parent link between them; the launch-order edge gives way
    n, stats = convert(ddp_two_buckets(bucket1_parent=4, bucket1_tid=13, bucket1_ts=1140.0))
    assert 8 in n[9].data_deps and 9 not in n[8].data_deps
    warned = [w for w in stats.warnings if "dependency cycle" in w]
    assert len(warned) == 1 and ("dropped the launch-order dependency of node 8 (gloo:all_reduce) on node 9 "
                                 "(gloo:all_reduce), which the recorded order contradicts") in warned[0]


# -- the real job --------------------------------------------------------------------------------------
# tests/data/gloo_ddp_cycle_4r: trace_collection/collect.py collect --job mlp --world-size 4 --hidden 128
# --bucket-cap-mb 0.05 --straggler-rank 3 --straggler-ms 5 (two gradient buckets per step).  In rank 3's
# ProfilerStep#2 bucket 1 (17,544 floats) was launched first (c10d call 256 at +0 µs, its record 327 on
# worker 14537 from +5,106 µs), bucket 2 (4,224 floats) second (call 324 at +2,525 µs, record 326 on worker
# 14536 from +2,830 µs), and the host ET records 327 under 326.
JOB = DATA / "gloo_ddp_cycle_4r"


def test_the_collected_rank_converts(tmp_path):
    from chakra.convert import convert_file
    from chakra.link.api import link_files

    plus, et = tmp_path / "plus_3.json", tmp_path / "job.3.et"
    link_files(JOB / "host_et_3.json.gz", JOB / "kineto_3.json.gz", plus, rank=3)
    report = convert_file(plus, et)
    assert any("node 327 (gloo:all_reduce) was launched before node 326 (gloo:all_reduce), yet recorded as "
               "its child" in w for w in report.stats.warnings)
    from chakra.io.pbstream import read_messages

    _, nodes = read_messages(et, pb.GlobalMetadata, pb.Node)
    n = {x.id: x for x in nodes}
    assert 326 not in n[327].ctrl_deps and 327 in n[326].data_deps
    comm = [x.id for x in nodes if x.type == pb.COMM_COLL_NODE]
    assert len(comm) == 4


def test_the_collected_job_replays_per_rank_and_whole(tmp_path):
    from chakra.pipeline import run_pipeline

    for job_replay in (False, True):
        res = run_pipeline(JOB, tmp_path / str(job_replay), jobs=1, job_replay=job_replay)
        s = json.loads((tmp_path / str(job_replay) / "summary.json").read_text())
        assert [r["rank"] for r in s["ranks"]] == [0, 1, 2, 3]
        # every rank within 1% of its measured window (+0.08 .. +0.14%)
        assert all(abs(r["error_pct"]) < 1.0 for r in s["ranks"]), s["ranks"]
        if job_replay:
            # the job: measured 87,049.3 µs (first start to last end), replayed within 1%
            assert abs(s["whole_job"]["error_pct"]) < 1.0
            assert s["whole_job"]["matched_comm_groups"] == 4
        assert res is not None


def test_the_collected_job_runs_in_astrasim(tmp_path):
    from helpers.astrasim import ASTRASIM, SKIP_REASON, run

    from chakra.job.validate import validate
    from chakra.pipeline import run_pipeline

    res = run_pipeline(JOB, tmp_path / "a", jobs=1, astrasim=True)
    files = [tmp_path / "a" / f"gloo_ddp_cycle_4r.{r}.et" for r in range(4)]
    assert validate(files).ok
    times = run(tmp_path / "a" / "gloo_ddp_cycle_4r", 4)      # (skips without the simulator)
    assert sorted(times) == [0, 1, 2, 3]
    if ASTRASIM is None:
        pytest.skip(SKIP_REASON)
    # with the experiment's network and system files (--simulator): every rank within 1% of its window
    res = run_pipeline(JOB, tmp_path / "b", jobs=1, astrasim=True, simulator=ASTRASIM / "run.sh")
    for r in res.summary["ranks"]:
        assert abs(r["simulated_us"] - r["measured_us"]) < 0.01 * r["measured_us"], r
