"""The tables say what they mean (issue 30, class 8): what an error column compares with, the comm wait as
wall time, a what-if's change, the ASTRA-sim column of summary.md.

Inputs are corpus traces, or made from them by the edit that creates the structure; expected values are read
off the raw traces with the stdlib ``json`` module or worked out by hand.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from chakra.io import load_json
from chakra.pipeline import pipeline_command, run_pipeline

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def _read(path: Path) -> Any:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def stop_profiling_at(src: Path, rank: int, step: str, out: Path) -> dict[str, Any]:
    """Rank ``rank`` of ``src`` as if profiling had stopped when ``step`` began: the Kineto events that start
    there or later are dropped, and so are the host ET nodes recorded by them (by ``Record function id`` =
    ``rf_id``) with their descendants.  Work started before still runs on in the events kept (a gloo worker
    thread's all_reduce).  Writes ``host_et_R.json`` + ``kineto_R.json`` into ``out``; returns the Kineto
    trace written."""
    kin = _read(src / f"kineto_{rank}.json.gz")
    host = _read(src / f"host_et_{rank}.json.gz")
    cut = next(e["ts"] for e in kin["traceEvents"] if e.get("name") == step)
    late = {e["args"]["Record function id"] for e in kin["traceEvents"]
            if e.get("ph") == "X" and e["ts"] >= cut and "Record function id" in e.get("args", {})}
    kin["traceEvents"] = [e for e in kin["traceEvents"] if not (e.get("ph") in ("X", "f", "s", "i")
                                                                and e.get("ts", 0) >= cut)]

    def rf_id(n: dict[str, Any]) -> Any:
        return next((a["value"] for a in n.get("attrs", []) if a["name"] == "rf_id"), None)

    drop = {n["id"] for n in host["nodes"] if rf_id(n) in late}
    grew = True
    while grew:
        grew = False
        for n in host["nodes"]:
            if n["id"] not in drop and n.get("ctrl_deps") in drop:
                drop.add(n["id"])
                grew = True
    host["nodes"] = [n for n in host["nodes"] if n["id"] not in drop]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"kineto_{rank}.json").write_text(json.dumps(kin))
    (out / f"host_et_{rank}.json").write_text(json.dumps(host))
    return kin


# --- (a) work that runs past the window ---------------------------------------------------------------

def test_a_gloo_all_reduce_running_past_the_window_is_said_and_measured_against_its_end(corpus, tmp_path):
    # ddp_mlp_4r rank 3: the gloo all_reduce its worker thread (tid 17123) started in ProfilerStep#1 ends
    # after that step.  Profiling stopped as ProfilerStep#2 began: the window is ProfilerStep#1 alone, and the
    # all_reduce runs on past it
    kin = stop_profiling_at(corpus / "cpu_gloo" / "ddp_mlp_4r", 3, "ProfilerStep#2", tmp_path / "in")
    step = next(e for e in kin["traceEvents"] if e.get("name") == "ProfilerStep#1")
    ar = max((e for e in kin["traceEvents"] if e.get("name") == "gloo:all_reduce"),
             key=lambda e: e["ts"] + e["dur"])
    window, end = step["dur"], ar["ts"] + ar["dur"] - step["ts"]
    assert (ar["tid"], window, round(end, 1)) == (17123, 35983.717, 38076.3)   # 2,092.6 µs after it
    out = io.StringIO()
    assert pipeline_command(str(tmp_path / "in"), str(tmp_path / "out"), jobs=1, stream=out,
                            allow_missing_ranks=True) == 0      # rank 3 alone of the 4
    row = load_json(tmp_path / "out" / "summary.json")["ranks"][0]
    assert row["measured_us"] == window and row["recorded_end_us"] == pytest.approx(end, abs=1)
    # the replay runs the all_reduce to its end: against the window's end that is +5.81%, against the end of
    # the work started in the window (the reference the table names) it is within 0.01%
    assert row["window_error_pct"] == pytest.approx(100 * (row["replayed_us"] - window) / window)
    assert row["window_error_pct"] == pytest.approx(5.81, abs=0.01)
    assert row["error_pct"] == pytest.approx(100 * (row["replayed_us"] - row["recorded_end_us"])
                                             / row["recorded_end_us"])
    assert abs(row["error_pct"]) < 0.01 and row["error_reference"] == "recorded_end"
    assert row["ran_on"] == {"work": "CPU", "last_op": "gloo:all_reduce", "lane": "thread 17123"}
    text = out.getvalue()
    assert re.search(r"│ +3 │ +232 │ +35,983\.7 │ +38,07\d\.0 │ [+-]0\.00%\* │", text)
    note = ("* rank 3: CPU work started in the window ran until 38,076.0 µs, 2,092.3 µs after the measured "
            "window (gloo:all_reduce on thread 17123 ended last); the replay runs that work to its end, so "
            "its error is against that end; against the window's end it is +5.81%")
    assert note in " ".join(text.split())
    md = (tmp_path / "out" / "summary.md").read_text()
    assert f"- {note}" in md and "Largest |error|: 0.00%" in md


def test_the_whole_job_is_measured_against_the_end_of_the_work_that_ran_on(corpus, tmp_path):
    # ranks 0 and 3 of ddp_mlp_4r, both profiled up to ProfilerStep#1 (run with --allow-missing-ranks): rank 3
    # starts first and its window ends last, 35,983.7 µs after; its all_reduce then runs on to 38,076 µs
    src = corpus / "cpu_gloo" / "ddp_mlp_4r"
    kins = {r: stop_profiling_at(src, r, "ProfilerStep#2", tmp_path / "in") for r in (0, 3)}
    steps = {r: next(e for e in k["traceEvents"] if e.get("name") == "ProfilerStep#1")
             for r, k in kins.items()}
    first = min(s["ts"] for s in steps.values())
    window_end = max(s["ts"] + s["dur"] for s in steps.values()) - first
    assert round(window_end, 1) == 35983.7 and steps[3]["ts"] == first
    out = io.StringIO()
    assert pipeline_command(str(tmp_path / "in"), str(tmp_path / "out"), jobs=1, job_replay=True, stream=out,
                            allow_missing_ranks=True) == 0
    whole = load_json(tmp_path / "out" / "summary.json")["whole_job"]
    assert whole["measured_us"] == pytest.approx(window_end, abs=0.01)
    # the job's reference: rank 3's start (the first) to the recorded end of its all_reduce
    rank3 = load_json(tmp_path / "out" / "summary.json")["ranks"][1]
    assert whole["reference_us"] == rank3["recorded_end_us"] == 38076.0
    assert whole["error_reference"] == "recorded_end"
    assert whole["error_pct"] == pytest.approx(100 * (whole["replayed_us"] / 38076.0 - 1))
    assert whole["window_error_pct"] == pytest.approx(100 * (whole["replayed_us"] / whole["measured_us"] - 1))
    assert abs(whole["error_pct"]) < 0.1 and whole["window_error_pct"] > 5.7
    job_row = next(line for line in out.getvalue().splitlines() if line.startswith("│  job"))
    assert re.search(r"│ +35,983\.7 │ +38,0\d\d\.\d │ +[+-]0\.\d\d%\* │", job_row)
    md = (tmp_path / "out" / "summary.md").read_text()
    assert (f"against the recorded end of the work started in the windows, 38,076.0 µs; "
            f"{whole['window_error_pct']:+.2f}% against the windows)") in md


# --- (b) comm wait is wall time; (c) a what-if's column is the change ------------------------------------

def _union(spans: list[tuple[float, float]]) -> float:
    total, lo, hi = 0.0, None, None
    for a, b in sorted(spans):
        if hi is None or a >= hi:
            total += 0.0 if hi is None else hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return total + (0.0 if hi is None else hi - lo)


@pytest.mark.slow
def test_a_straggler_what_if_job_table_waits_in_wall_time_and_shows_the_change(corpus, tmp_path, capsys):
    from chakra.cli import pipeline as pipeline_cli

    # ddp_mlp_4r with rank 1 20 ms late in each forward: ranks 0, 2, 3 wait for it in both steps, each time
    # on two gloo worker threads at once (two gradient buckets)
    out = tmp_path / "out"
    assert pipeline_cli.main([str(corpus / "cpu_gloo" / "ddp_mlp_4r"), "-o", str(out), "--job", "--jobs", "1",
                              "-q", "--delay", "DistributedDataParallel.forward=20000@1"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "rank" in line and "nodes" in line)
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "rank", "nodes", "starts at (µs)", "measured (µs)", "predicted (µs)", "change", "comm wait (µs)",
        "wait share"]
    summary = load_json(out / "summary.json")
    events = load_json(out / "timeline.json")["traceEvents"]
    for row in summary["ranks"]:
        # the wait intervals of the rank's collectives, read off the timeline the run wrote
        spans = [(e["ts"], e["ts"] + e["args"]["wait_us"]) for e in events
                 if e.get("ph") == "X" and e["pid"] == row["rank"] and "wait_us" in e["args"]]
        assert row["comm_wait_us"] == pytest.approx(_union(spans), abs=0.01)
        assert row["comm_wait_us"] <= row["replayed_us"]
        # (c) a prediction against the measured step is a change, not an error
        assert "error_pct" not in row
        assert row["change_pct"] == pytest.approx(100 * (row["replayed_us"] / row["measured_us"] - 1))
    rank3 = summary["ranks"][3]
    # rank 3 waited 11,717..31,090 and 52,261..81,524 µs (its two threads' waits overlap): 48,636 µs of its
    # 87,650 µs, where the summed waits (89,923 µs) were 102.6% of it
    assert rank3["comm_wait_us"] == pytest.approx(48636.4, abs=1)
    assert summary["abs_change_pct_max"] == pytest.approx(max(abs(r["change_pct"]) for r in summary["ranks"]))
    assert "change_pct" in summary["whole_job"] and "error_pct" not in summary["whole_job"]
    md = (out / "summary.md").read_text()
    assert "| rank | nodes | measured (µs) | predicted (µs) | change |" in md
    assert "What-if: delay DistributedDataParallel.forward@1 +20000 µs; change: the predicted step against " \
           "the measured one." in md
    assert "Largest |change|" in md and "error" not in md



# --- (d) a Kineto-only rank is the one its trace records, never digits of a file name --------------------

def test_a_kineto_only_rank_is_its_traces_not_a_number_of_its_file_name(tmp_path, capsys):
    from chakra.cli import converter, replay, trace_link

    # the two Kineto traces of gloo_mlp_2r (distributedInfo rank 0 and 1) under the names of a process id,
    # which the built-in name kineto_trace_N reads as a rank: before, ranks 1016005 and 1016006 (files, table)
    src = tmp_path / "in"
    src.mkdir()
    for r, pid in ((0, 1016005), (1, 1016006)):
        shutil.copy(DATA / "gloo_mlp_2r" / f"kineto_{r}.json.gz", src / f"kineto_trace_{pid}.json.gz")
    res = run_pipeline(src, tmp_path / "out", jobs=1)
    assert [(r["rank"], r["kineto"], r["et_plus"]) for r in res.summary["ranks"]] == [
        (0, "kineto_trace_1016005.json.gz", "et_plus_0.json"),
        (1, "kineto_trace_1016006.json.gz", "et_plus_1.json")]
    assert load_json(tmp_path / "out" / "et_plus_1.json")["rank"] == 1
    # a trace that records no rank, linked alone and converted: the replay takes its position (0), not the
    # digits of its name
    kin = _read(DATA / "gloo_mlp_2r" / "kineto_1.json.gz")
    del kin["distributedInfo"]
    (tmp_path / "trace_1016005.json").write_text(json.dumps(kin))
    plus, et = tmp_path / "trace_1016005.plus.json", tmp_path / "trace_1016005.et"
    assert trace_link.main(["--chakra-device-trace", str(tmp_path / "trace_1016005.json"), "-o",
                            str(plus)]) == 0
    assert capsys.readouterr().out.startswith("no rank recorded: ")
    assert converter.main(["-i", str(plus), "-o", str(et)]) == 0
    assert replay.main([str(et), "--json"]) == 0
    assert [r["rank"] for r in json.loads(capsys.readouterr().out)["ranks"]] == [0]
