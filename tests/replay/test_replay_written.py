"""chakra.replay.written: ``chakra_converter --simulate``'s replay of the file it wrote."""

from __future__ import annotations

import re

import orjson
from helpers.etplus import gloo_etplus, small_etplus

from chakra.cli.converter import main as converter_main
from chakra.convert import convert_file
from chakra.replay import replay_file, write_completion_log
from chakra.replay.written import simulate_written
from chakra.schema import METADATA_NODE


def _converted(tmp_path):
    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps(small_etplus()))
    out = tmp_path / "o.et"
    convert_file(src, out)
    return out


def test_lines_are_appended_and_are_those_of_the_replay(tmp_path):
    et = _converted(tmp_path)
    log = tmp_path / "conv.log"
    log.write_text("earlier line\n")
    done = simulate_written(et, log)
    write_completion_log(tmp_path / "replay.log", [replay_file(et)])
    text = log.read_text()
    assert text == "earlier line\n" + (tmp_path / "replay.log").read_text()
    # small_etplus converts to 10 nodes, each with its line
    assert done.completion_lines == 10 == text.count("Node ID")
    assert done.replayed_us == replay_file(et).replayed_us > 0


def test_without_a_log_nothing_is_written(tmp_path):
    et = _converted(tmp_path)
    done = simulate_written(et, None)
    assert done.completion_lines == 0 and done.replayed_us == replay_file(et).replayed_us
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json", "o.et"]


def test_cli_astrasim_simulate_replays_the_file_as_rewritten(tmp_path):
    src = tmp_path / "et_plus_0.json"
    src.write_bytes(orjson.dumps(gloo_etplus()))   # node 3 is the METADATA node (process_group:init)
    out, log = tmp_path / "o.0.et", tmp_path / "conv.log"
    rc = converter_main(["--log-filename", str(log), "PyTorch", "--input", str(src), "--output", str(out),
                         "--astrasim", "--simulate", "-q"])
    assert rc == 0
    # the ASTRA-sim form has no METADATA node: the lines are those of the file as written
    assert METADATA_NODE not in replay_file(out).graph.types
    ids = sorted(int(m) for m in re.findall(r"Node ID (\d+) completed", log.read_text()))
    assert ids == [1, 2, 4, 5, 6, 7, 8, 9]
