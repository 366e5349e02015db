"""``chakra replay`` command line."""

from __future__ import annotations

import json

import pytest
from helpers.et_nodes import pb_node, rank_nodes, write_rank

from chakra.cli.main import main as chakra_main
from chakra.cli.replay import main
from chakra.io import load_json, write_messages
from chakra.schema import GlobalMetadata


def job(tmp_path):
    p0, p1 = tmp_path / "job.0.et", tmp_path / "job.1.et"
    write_rank(p0, 0, rank_nodes(10, 30), measured=40)
    write_rank(p1, 1, rank_nodes(25, 12), measured=43)
    return p0, p1


def test_table_per_rank(tmp_path, capsys):
    p0, p1 = job(tmp_path)
    assert main([str(p0), str(p1), "-q"]) == 0
    out = capsys.readouterr().out
    assert "Replay (per rank, mode lanes, with gaps)" in out
    # rank 0 replays in 42 us against 40 measured: +5.00 %; rank 1: its last CPU op (8 us gap after the
    # launcher, 6 us long) ends at 25 + 2 + 8 + 6 = 41 vs 43 measured -> -4.65 %
    assert "42.0" in out and "+5.00%" in out
    assert "41.0" in out and "-4.65%" in out


def test_json_whole_job_log_and_timeline(tmp_path, capsys):
    p0, p1 = job(tmp_path)
    log, tl = tmp_path / "replay.log", tmp_path / "tl.json"
    assert main([str(p0), str(p1), "--job", "--collective", "min", "--json", "--log", str(log), "--timeline",
                 str(tl), "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["job"] is True and summary["matched_comm_groups"] == 1
    assert [r["replayed_us"] for r in summary["ranks"]] == [39.0, 41.0]
    lines = log.read_text().splitlines()
    assert len(lines) == 10
    assert "[rank 1] Node ID 5 completed at 41us" in lines
    trace = load_json(tl)
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1}
    assert all(e["dur"] >= 0 for e in trace["traceEvents"] if e["ph"] == "X")


def test_astrasim_mode_and_no_gaps(tmp_path, capsys):
    p0, _ = job(tmp_path)
    assert main([str(p0), "--mode", "astrasim", "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # one CPU op at a time: 2 [0,10], 3 [10,12], 5 [12,18]; kernel 4 [12,42]
    assert summary["ranks"][0]["replayed_us"] == 42.0 and summary["gaps"] is False
    assert main([str(p0), "--no-gaps", "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["replayed_us"] == 42.0


def test_bad_data_exit_1_bad_usage_exit_2(tmp_path, capsys):
    bad = tmp_path / "cycle.0.et"
    write_messages(bad, [GlobalMetadata(version="0.0.4"), pb_node(1, 1, 0, deps=[2]),
                         pb_node(2, 1, 0, deps=[1])])
    assert main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("chakra replay: error: ") and "dependency cycle: node 1 -> 2 -> 1" in err
    assert err.count("\n") == 1
    with pytest.raises(SystemExit) as exc:
        main([str(bad), "--mode", "ticks"])
    assert exc.value.code == 2
    assert main([str(tmp_path / "missing.et")]) == 1
    assert "file not found" in capsys.readouterr().err


def test_umbrella_command(tmp_path, capsys):
    p0, _ = job(tmp_path)
    assert chakra_main(["replay", str(p0), "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["nodes"] == 5


def test_the_cli_offers_exactly_the_modes_the_replay_takes() -> None:
    """The choices of --mode, --collective and --unknown-group are the values of the replay's Literal types
    (a mode added to one and not the other would be refused by argparse, or reach the replay unchecked).
    The CLI spells them out: its --help imports no stage (tests/cli/test_lazy_imports.py)."""
    from typing import get_args

    from chakra.cli.replay import build_parser
    from chakra.replay.modes import CollectiveRule, Mode, UnknownGroup

    choices = {a.dest: tuple(a.choices) for a in build_parser()._actions if a.choices is not None}
    assert choices["mode"] == get_args(Mode) == ("lanes", "astrasim")
    assert choices["collective"] == get_args(CollectiveRule) == ("auto", "net", "min")
    assert choices["unknown_group"] == get_args(UnknownGroup) == ("error", "world")
