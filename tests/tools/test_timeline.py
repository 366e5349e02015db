"""chakra_timeline_visualizer: a hand-written simulator log and the ts/dur worked out from it."""

from __future__ import annotations

import json

import pytest

from chakra.cli.main import main as chakra_main
from chakra.cli.timeline import main as timeline_main
from chakra.errors import TraceFormatError, UsageError
from chakra.tools.timeline import Interval, assign_lanes, convert_timeline, pair_events, parse_sim_log

# F = 500 MHz, so µs = cycles / 500.
#   NPU 0: node 1 aten::mm          1000 -> 3000  ts 2.0 dur 4.0  lane 0
#          node 2 "all_reduce, b0"  1500 -> 4000  ts 3.0 dur 5.0  lane 1 (lane 0 busy until 3000)
#          node 3 relu              3000 -> 3200  ts 6.0 dur 0.4  lane 0 (free again at 3000)
#   NPU 1: node 1 aten::mm             0 -> 2500  ts 0.0 dur 5.0  lane 0
#          node 5 "loop" issued twice (100, 200), called back twice (300, 400): FIFO pairs [100,300] and
#          [200,400]; lane 0 is busy until 2500, so they go to lanes 1 and 2 (ts 0.2/0.4, dur 0.4)
#          node 7 ghost: callback without issue (skipped); node 8: issued, never called back (skipped)
#   NPU 2: idle, still listed as a process
LOG = """\
[2024-01-01 00:00:00.000] [workload] [info] issue,sys->id=1,tick=0,node->id=1,node->name=aten::mm
issue,sys->id=1,tick=100,node->id=5,node->name=loop
issue,sys->id=1,tick=200,node->id=5,node->name=loop
callback,sys->id=1,tick=300,node->id=5,node->name=loop
callback,sys->id=1,tick=400,node->id=5,node->name=loop
issue,sys->id=0,tick=1000,node->id=1,node->name=aten::mm
issue,sys->id=0,tick=1500,node->id=2,node->name=all_reduce, b0
some unrelated log line, with=values
callback,sys->id=1,tick=2500,node->id=1,node->name=aten::mm
callback,sys->id=0,tick=3000,node->id=1,node->name=aten::mm
issue,sys->id=0,tick=3000,node->id=3,node->name=relu
callback,sys->id=0,tick=3200,node->id=3,node->name=relu
callback,sys->id=0,tick=4000,node->id=2,node->name=all_reduce, b0
callback,sys->id=1,tick=9000,node->id=7,node->name=ghost
issue,sys->id=1,tick=9100,node->id=8,node->name=never
"""

EXPECTED = {  # (pid, name, node_id): (ts, dur, tid)
    (0, "aten::mm", 1): (2.0, 4.0, 0),
    (0, "all_reduce, b0", 2): (3.0, 5.0, 1),
    (0, "relu", 3): (6.0, 0.4, 0),
    (1, "aten::mm", 1): (0.0, 5.0, 0),
}


@pytest.fixture
def log_file(tmp_path):
    p = tmp_path / "sim.csv"
    p.write_text(LOG)
    return p


def test_parse_rows(log_file):
    recs = parse_sim_log(LOG)
    assert len(recs) == 14
    first = recs[0]
    assert (first.kind, first.npu, first.cycle, first.node_id, first.name, first.line) == (
        "issue", 1, 0, 1, "aten::mm", 1)
    assert recs[6].name == "all_reduce, b0"


def test_chrome_trace_by_hand(log_file, tmp_path):
    out = tmp_path / "tl.json"
    counts = convert_timeline(log_file, out, num_npus=3, npu_frequency=500)
    assert counts == {"events": 6, "unmatched_callbacks": 1, "unfinished_issues": 1, "lanes": 3}
    trace = json.loads(out.read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    got = {(e["pid"], e["name"], e["args"]["node_id"]): (e["ts"], e["dur"], e["tid"]) for e in xs
           if e["name"] != "loop"}
    assert got.keys() == EXPECTED.keys()
    for key, (ts, dur, tid) in EXPECTED.items():
        assert got[key][0] == pytest.approx(ts) and got[key][1] == pytest.approx(dur) and got[key][2] == tid
    loops = sorted((e["ts"], e["dur"], e["tid"]) for e in xs if e["name"] == "loop")
    assert loops == [(0.2, 0.4, 1), (0.4, 0.4, 2)]
    relu = next(e for e in xs if e["name"] == "relu")
    assert relu["args"] == {"node_id": 3, "issue_cycle": 3000, "callback_cycle": 3200}
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "NPU 0", 1: "NPU 1", 2: "NPU 2"}
    lanes = sorted((e["pid"], e["tid"]) for e in trace["traceEvents"] if e["name"] == "thread_name")
    assert lanes == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert trace["otherData"]["npu_frequency_mhz"] == 500
    assert not any(e["name"] in ("ghost", "never") for e in xs)


def test_cli_and_umbrella(log_file, tmp_path):
    out = tmp_path / "a.json"
    assert timeline_main(["--input_filename", str(log_file), "--output_filename", str(out), "--num_npus", "2",
                          "--npu_frequency", "1000"]) == 0
    xs = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    mm0 = next(e for e in xs if e["pid"] == 0 and e["name"] == "aten::mm")
    assert (mm0["ts"], mm0["dur"]) == (1.0, 2.0)            # 1000 cycles at 1000 MHz = 1 µs
    out2 = tmp_path / "b.json.gz"
    assert chakra_main(["timeline", "-i", str(log_file), "-o", str(out2), "--num-npus", "2",
                        "--npu-frequency", "1000"]) == 0
    assert out2.read_bytes()[:2] == b"\x1f\x8b"


def test_lanes_reuse_lowest_free():
    ivs = [Interval(0, 1, "a", 0, 10), Interval(0, 2, "b", 2, 4), Interval(0, 3, "c", 3, 8),
           Interval(0, 4, "d", 5, 6), Interval(0, 5, "e", 10, 12)]
    assert assign_lanes(ivs) == 3
    # a:0, b:1, c:2 (0 and 1 busy), d:1 (b ended at 4), e:0 (a ended at 10; 0 is lower than free 1 and 2)
    assert [iv.lane for iv in ivs] == [0, 1, 2, 1, 0]


def test_errors(tmp_path, log_file, capsys):
    out = tmp_path / "x.json"
    with pytest.raises(TraceFormatError, match="line 1: NPU id 1 is outside 0..0"):
        convert_timeline(log_file, out, num_npus=1, npu_frequency=1000)
    bad = tmp_path / "bad.csv"
    bad.write_text("issue,sys->id=0,tick=10,node->id=1,node->name=a\ncallback,sys->id=zero,tick=5\n")
    with pytest.raises(TraceFormatError, match="line 2: expected"):
        convert_timeline(bad, out, num_npus=1, npu_frequency=1000)
    back = tmp_path / "back.csv"
    back.write_text("issue,a=0,b=10,c=1,d=a\ncallback,a=0,b=5,c=1,d=a\n")
    with pytest.raises(TraceFormatError, match="precedes its issue"):
        convert_timeline(back, out, num_npus=1, npu_frequency=1000)
    empty = tmp_path / "empty.csv"
    empty.write_text("nothing here\n")
    with pytest.raises(TraceFormatError, match="no issue/callback rows"):
        convert_timeline(empty, out, num_npus=1, npu_frequency=1000)
    with pytest.raises(UsageError):
        convert_timeline(log_file, out, num_npus=2, npu_frequency=0)
    assert not out.exists()
    args = ["-i", str(log_file), "-o", str(out), "--num_npus", "1", "--npu_frequency", "1"]
    assert timeline_main(args) == 1
    err = capsys.readouterr().err
    assert "sim.csv" in err and "Traceback" not in err


def test_pairing_counts():
    recs = parse_sim_log("callback,a=0,b=1,c=9,d=x\nissue,a=0,b=2,c=9,d=x\n")
    ivs, counts = pair_events(recs)
    assert ivs == [] and counts == {"events": 0, "unmatched_callbacks": 1, "unfinished_issues": 1}
