"""Findings of issue 16 that have no better home: a host ET whose nodes are their own parent, and the
timeline visualizer's CSV input as the README documents it."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from helpers.traces import cpu, host_doc, kineto_doc, op, write

from chakra.convert import convert_file
from chakra.device.loader import load_kineto
from chakra.host.loader import load_host_et
from chakra.link import link_traces

REPO = Path(__file__).resolve().parents[2]
MESSAGE = ("2 of 4 nodes are their own parent (only the process root should be): the call tree is missing, "
           "so they are taken as top-level ops, without parent/child control dependencies")


def self_parented(tmp_path: Path) -> tuple[Path, Path]:
    """Thread root 2, process root 1 (its own parent, as it should be) and ops 10, 11 that name themselves
    as parent: 11 ran inside 10, which the file no longer says."""
    host = host_doc([op(10, "aten::linear", 10, 1), op(11, "aten::mm", 11, 2)])
    events = [cpu("aten::linear", 0, 50, 1, rf=1), cpu("aten::mm", 10, 30, 2, rf=2)]
    return write(tmp_path, host, kineto_doc(events))


def test_linking_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hp, kp = self_parented(tmp_path)
    with caplog.at_level(logging.WARNING):
        link_traces(load_host_et(hp), load_kineto(kp))
    assert [r.getMessage() for r in caplog.records if "own parent" in r.getMessage()] == [f"{hp}: {MESSAGE}"]


def test_converting_a_bare_host_et_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hp, _ = self_parented(tmp_path)
    with caplog.at_level(logging.WARNING):
        report = convert_file(hp, tmp_path / "x.et")
    assert f"{hp}: {MESSAGE}" in report.stats.warnings


def test_a_healthy_host_et_says_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = host_doc([op(10, "aten::linear", 2, 1), op(11, "aten::mm", 10, 2)])
    hp, kp = write(tmp_path, host, kineto_doc([cpu("aten::linear", 0, 50, 1, rf=1), cpu("aten::mm", 10, 30, 2,
                                                                                       rf=2)]))
    with caplog.at_level(logging.WARNING):
        link_traces(load_host_et(hp), load_kineto(kp))
        convert_file(hp, tmp_path / "y.et")
    assert not [r for r in caplog.records if "own parent" in r.getMessage()]


def test_readme_documents_the_timeline_csv(tmp_path: Path) -> None:
    """The README's CSV example is read by the timeline visualizer as the README says it is."""
    from chakra.tools.timeline import convert_timeline

    readme = (REPO / "README.md").read_text()
    section = readme.split("### The timeline visualizer's input", 1)[1]
    section = section.split("\n## ", 1)[0].split("\n### ", 1)[0]
    csv = re.search(r"```\n(issue,.*?)```", section, re.S).group(1)
    src = tmp_path / "sim.csv"
    src.write_text(csv)
    out = tmp_path / "t.json"
    counts = convert_timeline(src, out, 2, 1000.0)
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    # the README's example: npu 0 runs node 5 from cycle 1000 to 4000 (1 to 4 µs at 1000 MHz), npu 1 node 7
    # from 2000 to 2500
    assert counts["events"] == 2
    got = sorted((e["pid"], e["name"], e["ts"], e["dur"]) for e in events)
    assert got == [(0, "aten::mm", 1.0, 3.0), (1, "all_reduce", 2.0, 0.5)]
