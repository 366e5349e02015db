"""A host ET whose ExecutionTraceObserver ran over other steps than the profiler's active window.

Both folders were collected with trace_collection/collect.py (2 ranks, gloo, the profiler's schedule
wait=1, warmup=1, active=2: Kineto holds ProfilerStep#2 and #3):

* ``gloo_et_wide_2r`` (``--et-steps 0:6 --steps 6``): the observer over iterations 0-5, so the host ET holds
  ProfilerStep#1-#5 (iteration 0's ops under no ProfilerStep: it began before the observer started) -
  1,564 host ops on the main thread for 474 Kineto events;
* ``gloo_et_late_2r`` (``--et-steps 3:5 --steps 6``): the observer over iterations 3 and 4, so the host ET
  holds iteration 3's ops under no ProfilerStep node (their events in Kineto's ProfilerStep#3) and
  ProfilerStep#4, which the Kineto trace lacks;
* ``gloo_et_mid_2r`` (``--et-steps 2:4``): the observer over iterations 2 and 3, the profiler's own
  window: iteration 2's ops under no ProfilerStep node, then ProfilerStep#3;
* ``gloo_et_one_2r`` (``--et-steps 2:3``): the observer over iteration 2 alone, started right after the
  ``prof.step()`` that began ProfilerStep#2: no ProfilerStep node at all in the host ET;
* ``gloo_et_shift_2r`` (``--et-steps 1:3``): the observer over iterations 1 and 2, so the host ET holds
  iteration 1's ops under no ProfilerStep node (ProfilerStep#1 began before the observer started; the
  profiler was warming up: no Kineto event) and ProfilerStep#2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_replayed_within

from chakra.io import load_json
from chakra.pipeline import run_pipeline

DATA = Path(__file__).resolve().parents[1] / "data"


def test_a_host_et_of_more_steps_is_matched_by_its_record_function_ids(tmp_path):
    """Every Kineto event carries its host op's rf_id, but the ids were trusted only when half of the host
    ET's 1,564 ops found one; names were aligned instead, the two gloo:all_reduce events went to ops of
    steps the Kineto trace lacks, and the kept all_reduces (nodes 1043, 1372 of rank 0) had no time: 447 of
    474 kept ops matched, rank 0 replayed 44,540.0 us for 45,185.7 measured.  Now all 474 match by rf_id
    and each all_reduce has its Kineto event's duration (rf 837: 754.003 us, rf 1074: 3,620.94 us)."""
    run_pipeline(DATA / "gloo_et_wide_2r", tmp_path / "out", jobs=1)
    doc = load_json(tmp_path / "out" / "et_plus_0.json")
    stats = doc["link_stats"]
    assert (stats["strategy"], stats["host_ops"], stats["matched"]) == ("rf_id", 474, 474)
    durs = {n["id"]: n.get("dur") for n in doc["nodes"] if n["name"] == "gloo:all_reduce"}
    assert durs == {1043: 754.003, 1372: 3620.94}
    assert_replayed_within(load_json(tmp_path / "out" / "summary.json")["ranks"], 0.005)


def test_ops_recorded_before_the_profilers_window_under_no_step_are_left_out(tmp_path, caplog):
    """Iteration 1's 255 ops (two broadcasts and an all_reduce among them) sit under no ProfilerStep node
    and have no Kineto event; linked whole they stayed in the ET+ without a time (237 of 492 matched), the
    job replay coupled 4 collectives instead of the window's 1, and ASTRA-sim ran them too (rank 0 19,671.1
    us for 18,694.7 measured).  Now they are left out with a warning: 237 of 237 matched, 1 collective."""
    run_pipeline(DATA / "gloo_et_shift_2r", tmp_path / "out", jobs=1)
    for rank in (0, 1):
        doc = load_json(tmp_path / "out" / f"et_plus_{rank}.json")
        stats = doc["link_stats"]
        assert (stats["host_ops"], stats["matched"]) == (237, 237), rank
        comms = sorted(n["id"] for n in doc["nodes"] if n["name"].startswith("gloo:"))
        assert len(comms) == 1, rank
        timed = [n.get("dur") is not None for n in doc["nodes"] if n["name"].startswith(("aten::", "gloo:"))]
        assert timed and all(timed), rank
    assert sum("255 host op(s) lie outside its ProfilerStep nodes" in m for m in caplog.messages) == 2
    assert_replayed_within(load_json(tmp_path / "out" / "summary.json")["ranks"], 0.01)


def test_a_host_et_starting_inside_the_profilers_window_links_the_step_it_shares(tmp_path):
    """The host ET's only step node, ProfilerStep#4, is not in the Kineto trace, so the window was chosen by
    name overlap: both steps (20,751.1 us on rank 0), step 2 replayed as idle time, ProfilerStep#4's ops
    aligned with step 2's events (472 of 473 matched, ASTRA-sim coupling its all_reduce too).  Now the
    window is the step holding the host ops' Record function ids, ProfilerStep#3 (12,281.55 us on rank 0,
    12,220.469 on rank 1), ProfilerStep#4 is left out, 236 of 236 match and the one all_reduce (rf 212)
    has its event's duration."""
    run_pipeline(DATA / "gloo_et_late_2r", tmp_path / "out", jobs=1)
    for rank, step_us, ar_us in ((0, 12281.55, 4993.582), (1, 12220.469, 3619.047)):
        doc = load_json(tmp_path / "out" / f"et_plus_{rank}.json")
        assert (doc["measured"]["window"], doc["measured"]["dur_us"]) == ("ProfilerStep#3", step_us), rank
        stats = doc["link_stats"]
        assert (stats["strategy"], stats["host_ops"], stats["matched"]) == ("rf_id", 236, 236), rank
        names = [n["name"] for n in doc["nodes"]]
        assert not any(n.startswith("ProfilerStep#") for n in names), rank
        assert [n.get("dur") for n in doc["nodes"] if n["name"] == "gloo:all_reduce"] == [ar_us], rank
    assert_replayed_within(load_json(tmp_path / "out" / "summary.json")["ranks"], 0.01)


def test_a_collective_the_host_et_lacks_is_named_in_a_warning(tmp_path, caplog):
    """The observer records an op when it ends: a gloo:all_reduce still running when it stopped is in the
    Kineto trace only (a real run, collect.py --prof-flags no-shapes,stack,memory,flops: rank 0's second
    all_reduce ended 6.2 ms after ProfilerStep#3).  Built here from tests/data/gloo_mlp_2r by taking rank
    0's second gloo:all_reduce (node 648) out of its host ET.  The link said nothing (only link_stats'
    kineto_unmatched counted it) and the job replay blamed the peer; now the link names it."""
    import gzip
    import json

    from chakra.link.api import link_files

    src = DATA / "gloo_mlp_2r"
    host = json.loads(gzip.decompress((src / "host_et_0.json.gz").read_bytes()))
    host["nodes"] = [n for n in host["nodes"] if n["id"] != 648]
    (tmp_path / "host_et_0.json").write_text(json.dumps(host))
    report = link_files(tmp_path / "host_et_0.json", src / "kineto_0.json.gz", tmp_path / "et_plus_0.json")
    assert report.matched == report.host_ops
    lost = [m for m in caplog.messages if "collective record(s) inside the window match no host op" in m]
    assert len(lost) == 1 and lost[0].split(": ", 1)[1].startswith("1 collective record(s)")
    assert "gloo:all_reduce" in lost[0]


def test_a_host_thread_the_profiler_did_not_record_is_named_in_a_warning(tmp_path, caplog):
    """A thread started by Python after profiling began is recorded by the ExecutionTraceObserver, not by
    the profiler (a real run, collect.py --opt-thread: each optimizer step on its own thread, 14 of 474 host
    ops without an event, 97% matched, no warning, their time 0 in the graph).  Built here from
    tests/data/gloo_mlp_2r: rank 0's last Optimizer.step#SGD.step and its 6 aten::add_ moved to a thread
    of their own (tid 99) and their Kineto events taken out."""
    import gzip
    import json

    from chakra.link.api import link_files

    src = DATA / "gloo_mlp_2r"
    host = json.loads(gzip.decompress((src / "host_et_0.json.gz").read_bytes()))
    step = max((n for n in host["nodes"] if n["name"] == "Optimizer.step#SGD.step"), key=lambda n: n["id"])
    moved = {step["id"]} | {n["id"] for n in host["nodes"] if n["ctrl_deps"] == step["id"]}
    rfs = set()
    for n in host["nodes"]:
        if n["id"] in moved:
            for a in n["attrs"]:
                if a["name"] == "tid":
                    a["value"] = 99
                elif a["name"] == "rf_id":
                    rfs.add(a["value"])
    kineto = json.loads(gzip.decompress((src / "kineto_0.json.gz").read_bytes()))
    kineto["traceEvents"] = [e for e in kineto["traceEvents"]
                             if e.get("args", {}).get("Record function id") not in rfs]
    (tmp_path / "host_et_0.json").write_text(json.dumps(host))
    (tmp_path / "kineto_0.json").write_text(json.dumps(kineto))
    report = link_files(tmp_path / "host_et_0.json", tmp_path / "kineto_0.json", tmp_path / "et_plus_0.json")
    assert (len(moved), report.host_ops - report.matched) == (7, 7)
    said = [m for m in caplog.messages if "no op of host thread(s) 99 matched a Kineto event" in m]
    assert len(said) == 1 and "(7 op(s), e.g. Optimizer.step#SGD.step)" in said[0]


def test_a_step_recorded_without_its_node_is_measured_with_the_others(tmp_path):
    """Iteration 2's ops sit under no ProfilerStep node but their events are in Kineto's ProfilerStep#2
    (Record function ids); the window was the host ET's one step node, ProfilerStep#3 (rank 0 measured
    4,331.257 us), while the ET+ held both iterations: replayed 8,949.1 us, +79.77% (rank 1 +97.27%).
    Now the window is ProfilerStep#2+#3 (7,968.43 + 4,331.257 us on rank 0)."""
    run_pipeline(DATA / "gloo_et_mid_2r", tmp_path / "out", jobs=1)
    for rank, steps in ((0, [("ProfilerStep#2", 7968.43), ("ProfilerStep#3", 4331.257)]),
                        (1, [("ProfilerStep#2", 8049.911), ("ProfilerStep#3", 4335.623)])):
        doc = load_json(tmp_path / "out" / f"et_plus_{rank}.json")
        assert [(s["name"], s["dur"]) for s in doc["measured"]["steps"]] == steps, rank
        stats = doc["link_stats"]
        assert (stats["host_ops"], stats["matched"]) == (473, 473), rank
    # rank 0's all_reduce ends 696.3 us after the window: the replay runs it to its end
    for row in load_json(tmp_path / "out" / "summary.json")["ranks"]:
        end = max(row["measured_us"], row["recorded_end_us"] or 0.0)
        assert row["replayed_us"] == pytest.approx(end, rel=0.01), row["rank"]


def test_a_host_et_of_one_step_without_its_node_is_linked_to_that_step(tmp_path):
    """No ProfilerStep node in the host ET: the window was the Kineto step whose op names overlap the host
    ET best, ProfilerStep#3 (0.998 against 2), while every host op's Record function id is on an event of
    ProfilerStep#2: rank 0 measured 14,185.5 us and replayed 46,748.0 (+229.55%), rank 1 +95.97%.  Now the
    window is ProfilerStep#2 (26,335.949 us on rank 0, 35,638.554 on rank 1)."""
    run_pipeline(DATA / "gloo_et_one_2r", tmp_path / "out", jobs=1)
    for rank, step_us in ((0, 26335.949), (1, 35638.554)):
        doc = load_json(tmp_path / "out" / f"et_plus_{rank}.json")
        assert (doc["measured"]["window"], doc["measured"]["dur_us"]) == ("ProfilerStep#2", step_us), rank
        assert (doc["link_stats"]["host_ops"], doc["link_stats"]["matched"]) == (236, 236), rank
    assert_replayed_within(load_json(tmp_path / "out" / "summary.json")["ranks"], 0.01)


def _stopped_inside_step3(out: Path) -> Path:
    """tests/data/gloo_mlp_2r as an observer stopped inside ProfilerStep#3, after its DDP forward, writes it:
    the step's node is never written (a node is written when its op ends) and the forward's ops name it as
    their parent; nothing after the forward is recorded."""
    import gzip
    import json

    out.mkdir()
    src = DATA / "gloo_mlp_2r"
    for r in (0, 1):
        host = json.loads(gzip.decompress((src / f"host_et_{r}.json.gz").read_bytes()))
        by_id = {n["id"]: n for n in host["nodes"]}
        step = next(n for n in host["nodes"] if n["name"] == "ProfilerStep#3")
        fwd = next(n for n in host["nodes"] if n["name"] == "DistributedDataParallel.forward"
                   and n["id"] > step["id"])

        def under(n: dict, root: int, by_id: dict = by_id) -> bool:
            while n is not None and n["id"] != root and n["ctrl_deps"] != n["id"]:
                n = by_id.get(n["ctrl_deps"])
            return n is not None and n["id"] == root

        last = max(n["id"] for n in host["nodes"] if under(n, fwd["id"]))
        host["nodes"] = [n for n in host["nodes"] if n["id"] != step["id"]
                         and (n["id"] < step["id"] or n["id"] <= last or n["name"].startswith("[pytorch"))]
        (out / f"host_et_{r}.json").write_text(json.dumps(host))
        (out / f"kineto_{r}.json.gz").write_bytes((src / f"kineto_{r}.json.gz").read_bytes())
    return out


def test_ops_of_a_step_the_observer_stopped_inside_are_left_out(tmp_path, caplog):
    """The 44 ops of ProfilerStep#3's forward (their parent, the step's node, missing) matched their events
    after the window (ProfilerStep#2): they stayed in the ET+ and the replay ran them past its end (rank 0
    8,284.0 us for 7,556.6 measured; the converter warned of 6 nodes naming a missing parent).  Now they
    are left out with a warning and every rank replays within 1% of ProfilerStep#2."""
    run_pipeline(_stopped_inside_step3(tmp_path / "src"), tmp_path / "out", jobs=1)
    for rank in (0, 1):
        doc = load_json(tmp_path / "out" / f"et_plus_{rank}.json")
        assert doc["measured"]["window"] == "ProfilerStep#2", rank
        assert (doc["link_stats"]["host_ops"], doc["link_stats"]["matched"]) == (227, 227), rank
    assert sum("44 host op(s) lie outside its ProfilerStep nodes" in m for m in caplog.messages) == 2
    assert not any("name a parent that is not in the trace" in m for m in caplog.messages)
    assert_replayed_within(load_json(tmp_path / "out" / "summary.json")["ranks"], 0.01)


def _one_step_stopped_after_forward(out: Path) -> Path:
    """tests/data/gloo_et_one_2r (an observer over iteration 2, started right after prof.step(): no step node)
    as one stopped after the forward writes it: the ops that ended before the stop (the host ET writes a
    node when its op ends, up to the first backward op), then its thread and process nodes."""
    import gzip
    import json

    out.mkdir()
    src = DATA / "gloo_et_one_2r"
    for r in (0, 1):
        host = json.loads(gzip.decompress((src / f"host_et_{r}.json.gz").read_bytes()))
        nodes = host["nodes"]
        cut = next(i for i, n in enumerate(nodes) if n["name"].endswith("_backward"))
        host["nodes"] = nodes[:cut] + [n for n in nodes[cut:] if n["name"].startswith("[pytorch")]
        (out / f"host_et_{r}.json").write_text(json.dumps(host))
        (out / f"kineto_{r}.json.gz").write_bytes((src / f"kineto_{r}.json.gz").read_bytes())
    return out


def test_a_step_the_observer_stopped_inside_is_measured_to_its_last_recorded_op(tmp_path, caplog):
    """No step node and the forward alone recorded: the window was the whole ProfilerStep#2 (26,335.9 us on
    rank 0, 35,638.6 on rank 1) for ~2 ms of recorded ops, replayed -92.28% / -94.98%.  Now the step is
    measured up to the end of the last recorded op's event (the Kineto trace holds 167 operators after it
    that the host ET lacks), with a warning, and every rank replays within 1%."""
    run_pipeline(_one_step_stopped_after_forward(tmp_path / "src"), tmp_path / "out", jobs=1)
    for rank, step_us in ((0, 26335.949), (1, 35638.554)):
        doc = load_json(tmp_path / "out" / f"et_plus_{rank}.json")
        assert doc["measured"]["window"] == "ProfilerStep#2", rank
        assert 1000 < doc["measured"]["dur_us"] < 0.1 * step_us, rank
        assert doc["measured"]["dur_us"] == doc["measured"]["steps"][0]["dur"], rank
    assert sum("holds 167 operator(s) after them that it did not record" in m for m in caplog.messages) == 2
    assert_replayed_within(load_json(tmp_path / "out" / "summary.json")["ranks"], 0.01)
