"""``chakra replay --job`` on another tool's ETs: --comm-group FILE and --unknown-group world (issue 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.et_nodes import pb_node

from chakra.cli.replay import main
from chakra.errors import TraceFormatError
from chakra.io import write_messages
from chakra.replay.api import load_comm_groups, replay_job
from chakra.schema import COMM_COLL_NODE, GlobalMetadata


def other_tool_job(tmp_path: Path) -> list[Path]:
    """Two ranks, no process-group table, no rank attribute: a CPU op (10 / 25 µs) then an all_reduce of
    process group "1" on a GPU stream (recorded 30 / 12 µs), as a generator or another converter writes."""
    paths = []
    for rank, (first, coll) in enumerate(((10, 30), (25, 12))):
        p = tmp_path / f"other.{rank}.et"
        write_messages(p, [GlobalMetadata(version="0.0.4"),
                           pb_node(1, first, 0),
                           pb_node(2, coll, first, deps=[1], cpu=False, stream=7, ntype=COMM_COLL_NODE,
                                   pg="1", name="all_reduce")])
        paths.append(p)
    return paths


def test_unknown_group_is_an_error_that_says_what_to_do(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    paths = other_tool_job(tmp_path)
    assert main([*map(str, paths), "--job"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("collective node 2 ('all_reduce') of rank 0 uses process group '1', which its process-group "
            "table does not list (known: none)") in err
    assert "--comm-group FILE" in err and "--unknown-group world" in err


def test_comm_group_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = other_tool_job(tmp_path)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1]}))
    # --collective min: every participant lasts the shortest recording (the default, net, keeps each own end)
    assert main([*map(str, paths), "--job", "--comm-group", str(groups), "--json", "--collective", "min"]) \
        == 0
    summary = json.loads(capsys.readouterr().out)
    # coupled: the all_reduce starts when rank 1 arrives (25 µs) and lasts the shorter recording (12 µs)
    assert [r["replayed_us"] for r in summary["ranks"]] == [37.0, 37.0]
    assert summary["matched_comm_groups"] == 1
    # each alone: 10 + 30 and 25 + 12
    assert [r.replayed_us for r in replay_job(paths, couple=False)] == [40.0, 37.0]


def test_unknown_group_as_the_world(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = other_tool_job(tmp_path)
    assert main([*map(str, paths), "--job", "--unknown-group", "world", "--json", "--collective", "min"]) == 0
    got = capsys.readouterr()
    assert [r["replayed_us"] for r in json.loads(got.out)["ranks"]] == [37.0, 37.0]
    assert got.err.count("process group '1' is not listed") == 1      # warned once, not per rank


def test_comm_group_file_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = other_tool_job(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": "0,1"}))
    with pytest.raises(TraceFormatError, match=r"group '1': expected a list of global ranks"):
        load_comm_groups(bad)
    assert main([*map(str, paths), "--job", "--comm-group", str(bad)]) == 1
    assert "bad.json" in capsys.readouterr().err
    bad.write_text("[[0, 1]]")
    assert main([*map(str, paths), "--job", "--comm-group", str(bad)]) == 1
    assert "bad.json: top level is a JSON list, expected a JSON object" in capsys.readouterr().err
    # per-rank replay has no groups to use
    assert main([*map(str, paths), "--unknown-group", "world"]) == 2
    assert "add --job" in capsys.readouterr().err


def test_file_wins_over_the_ranks_own_table(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from helpers.et_nodes import rank_nodes, write_rank

    p0, p1 = tmp_path / "job.0.et", tmp_path / "job.1.et"
    write_rank(p0, 0, rank_nodes(10, 30), measured=40)       # their table: pg "0" = ranks [0, 1]
    write_rank(p1, 1, rank_nodes(25, 12), measured=43)
    res = replay_job([p0, p1], comm_groups={"0": [0, 1]})
    assert res.groups == 1 and not caplog.records                       # same as the table: no warning
