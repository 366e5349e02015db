"""Whether a host ET and a Kineto trace come from the same run (chakra.link.provenance): what it reads."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.stretch_pairs import read, write

from chakra.cli import trace_link
from chakra.device import load_kineto
from chakra.host.loader import load_host_et
from chakra.link.provenance import host_wall_time, kineto_pid, kineto_wall_start, run_mismatches

COLLECTED = Path(__file__).resolve().parents[1] / "data" / "gloo_one_iter_2r"


def _kineto(tmp_path: Path, events: list[dict], **top: object):
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return load_kineto(path)


def _x(name: str, ts: float, pid: object, cat: str = "cpu_op", dur: float = 1.0, tid: object = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def test_cpu_clock_counts_cpu_events_only(tmp_path: Path) -> None:
    # two CPU events of pid 7, one of pid 9; the kernels of "pid" 0 (a device) outnumber them but are GPU
    # events; the first CPU ts is 20 (the kernel at 5 is not a CPU event)
    k = _kineto(tmp_path, [
        _x("aten::mm", 30.0, 7), _x("aten::add", 20.0, 9), _x("aten::relu", 40.0, 7),
        _x("k1", 5.0, 0, cat="kernel", tid=7), _x("k2", 6.0, 0, cat="kernel", tid=7),
        _x("k3", 7.0, 0, cat="kernel", tid=7), _x("k4", 8.0, 0, cat="kernel", tid=7),
    ])
    assert k.cpu_clock() == (7, 20.0)
    assert kineto_pid(k) == 7
    assert kineto_wall_start(k) is None          # 20 us is no epoch, and there is no baseTimeNanoseconds


def test_cpu_clock_tie_is_the_first_pid_seen(tmp_path: Path) -> None:
    k = _kineto(tmp_path, [_x("a", 1.0, 5), _x("b", 2.0, 3), _x("c", 3.0, 3), _x("d", 4.0, 5)])
    assert kineto_pid(k) == 5


def test_cpu_clock_without_cpu_events(tmp_path: Path) -> None:
    k = _kineto(tmp_path, [_x("k1", 5.0, 0, cat="kernel")])
    assert k.cpu_clock() == (None, None)
    assert kineto_pid(k) is None and kineto_wall_start(k) is None


def test_cpu_clock_survives_pickling_and_is_not_recomputed(tmp_path: Path) -> None:
    import pickle

    k = _kineto(tmp_path, [_x("a", 1.0, 5)])
    assert k.cpu_clock() == (5, 1.0)
    back = pickle.loads(pickle.dumps(k))
    assert back.cpu_clock_memo == (5, 1.0)
    back.events.clear()      # what a forked loader sent back is what counts
    assert back.cpu_clock() == (5, 1.0)


def test_wall_start_with_a_base(tmp_path: Path) -> None:
    # base 1,000 s + first CPU event at 2,500,000 us = 1,002.5 s since the epoch
    k = _kineto(tmp_path, [_x("a", 2_500_000.0, 5)], baseTimeNanoseconds=1_000_000_000_000)
    assert kineto_wall_start(k) == pytest.approx(1002.5)


@pytest.mark.parametrize(("text", "expected"), [
    ("2023-09-07 16:09:59", 1694102999.0),        # DLRM rank 0's ET (read as UTC)
    ("2023-9-7 16:9:59", 1694102999.0),           # strptime's one-digit fields
    (" 2023-09-07\t 16:09:59 ", 1694102999.0),    # any blank between date and time, stripped ends
    ("1970-01-01 00:00:00", 0.0),
    ("2023-02-30 10:00:00", None),                # no such day
    ("2023-09-07 24:00:00", None),
    ("2023-09-07 16:09:60", None),
    ("2023-09-07T16:09:59", None),                # ISO's T is not what PyTorch writes
    ("2023-09-07 16:09:59.5", None),
    ("2023-09-07 16:09", None),
    ("yesterday", None),
])
def test_host_wall_time(text: str, expected: float | None) -> None:
    assert host_wall_time(SimpleNamespace(time=text)) == expected   # type: ignore[arg-type]


def test_host_wall_time_not_a_string() -> None:
    assert host_wall_time(SimpleNamespace(time=1694102999)) is None   # type: ignore[arg-type]


@pytest.mark.corpus
def test_dlrm_rank0_same_run_seven_hours_apart(corpus: Path) -> None:
    host = load_host_et(corpus / "dlrm_8r_v100" / "host" / "host_et_0.json.gz")
    kineto = load_kineto(corpus / "dlrm_8r_v100" / "device" / "kineto_0.json.gz")
    assert host.pid == kineto_pid(kineto) == 59811
    assert host_wall_time(host) == 1694102999.0                       # 2023-09-07 16:09:59 (PDT, unknown)
    assert kineto_wall_start(kineto) == pytest.approx(1694128201.426674)   # ts is an epoch in us
    assert run_mismatches(host, kineto) == []                          # 7.0 h: within the 15 h allowed


def test_different_runs_refused_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The collected rank 0's host ET as if written three days before its Kineto trace began (its ``time``:
    ``start_ts`` / ``finish_ts`` are steady-clock ms, no date).  On main: a warning, and the link (exit 0)."""
    host = read(COLLECTED / "host_et_0.json.gz")
    assert host["time"] == "2026-12-03 20:21:08"   # the Kineto trace begins 2026-12-03 20:21:13.9 UTC
    host["time"] = "2026-11-30 20:21:08"
    host = write(tmp_path / "h.json", host)
    out = tmp_path / "et_plus.json"
    argv = ["--chakra-host-trace", str(host), "--chakra-device-trace", str(COLLECTED / "kineto_0.json.gz"),
            "-o", str(out)]
    assert trace_link.main(argv) == 1
    err = capsys.readouterr().err
    assert ("kineto_0.json.gz: not the same run as " in err and "host ET time '2026-11-30 20:21:08' (its "
            "machine's clock) is 3.0 days before the Kineto trace's start, 2026-12-03 20:21:13 UTC (--force "
            "links anyway)" in err), err
    assert not out.exists()
    assert trace_link.main([*argv, "--force"]) == 0
    assert "(linked anyway: --force)" in capsys.readouterr().err
    assert out.exists()
    assert trace_link.main([*argv, "--force", "--strict"]) == 2
