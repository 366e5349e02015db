"""``link_files`` with one part and with several (``CHAKRA_PARTS``, :mod:`chakra.io.forkmap`): the Kineto
trace is loaded in a forked child while the host ET loads here; the ET+ bytes, the warnings and the errors
must not depend on it."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.fault_inputs import dumps, kineto_faults, random_pair

from chakra.device import loader as device_loader
from chakra.device.model import KinetoTrace
from chakra.errors import TraceFormatError
from chakra.link import api
from chakra.link.api import link_files


def _link(monkeypatch: pytest.MonkeyPatch, parts: int, host: Path, kineto: Path, out: Path) -> bytes:
    monkeypatch.setenv("CHAKRA_PARTS", str(parts))
    link_files(host, kineto, out)
    return out.read_bytes()


@pytest.fixture
def kineto_pids(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], list[int]]:
    """The pids of the processes that loaded a Kineto trace so far, in load order (a child writes its pid
    into a file: its memory is its own)."""
    record = tmp_path / "kineto_pids"
    real = device_loader.load_kineto

    def spy(*args: Any, **kw: Any) -> KinetoTrace:
        with open(record, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args, **kw)

    monkeypatch.setattr(api, "load_kineto", spy)
    return lambda: [int(x) for x in record.read_text().split()]


@pytest.mark.corpus
@pytest.mark.parametrize(("folder", "rank"), [("cpu_gloo/tp_like_2r", 1), ("simple_add_1r", 0)])
def test_corpus_rank_same_bytes_for_one_and_three_parts(corpus: Path, tmp_path: Path, folder: str, rank: int,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          kineto_pids: Callable[[], list[int]]) -> None:
    host = corpus / folder / f"host_et_{rank}.json.gz"
    kineto = corpus / folder / f"kineto_{rank}.json.gz"
    one = _link(monkeypatch, 1, host, kineto, tmp_path / "one.json")
    three = _link(monkeypatch, 3, host, kineto, tmp_path / "three.json")
    assert one == three
    # one part: loaded here; three: in a child (two loads, two pieces)
    assert kineto_pids()[0] == os.getpid() != kineto_pids()[1]


@pytest.mark.corpus
def test_dlrm_rank_same_bytes_for_one_and_three_parts(corpus: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 3: 64 GPU ops launched before the trace began, sync deps, two threads; then the ET+ written by
    # eight processes (pieces of a cost of 150 or more: cuts among the host nodes and among the GPU nodes)
    d = corpus / "dlrm_8r_v100"
    host, kineto = d / "host" / "host_et_3.json.gz", d / "device" / "kineto_3.json.gz"
    one = _link(monkeypatch, 1, host, kineto, tmp_path / "one.json")
    assert _link(monkeypatch, 3, host, kineto, tmp_path / "three.json") == one
    cuts: list[list[range]] = []
    real_pieces = api.NodeRanges.pieces
    monkeypatch.setattr(api.NodeRanges, "pieces",
                        lambda self: cuts.append(real_pieces(self, 150)) or cuts[-1])
    assert _link(monkeypatch, 8, host, kineto, tmp_path / "eight.json") == one
    gpus = one.count(b'"stream":')     # (only GPU nodes have the key)
    n = cuts[0][-1].stop
    assert len(cuts[0]) == 8 and any(n - gpus < r.start < n for r in cuts[0]), (cuts, gpus)
    assert b'"gpu_orphans_no_launch":64' in one


@pytest.mark.parametrize("layout", ["chakra", "flat"])
def test_synthetic_same_bytes_for_one_and_three_parts(tmp_path: Path, layout: str,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      kineto_pids: Callable[[], list[int]]) -> None:
    pair = random_pair(random.Random(13), threads=2, top_ops=40, layout=layout)
    host, kineto = tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"
    host.write_bytes(dumps(pair.host))
    kineto.write_bytes(dumps(pair.kineto))
    one = _link(monkeypatch, 1, host, kineto, tmp_path / "one.json")
    three = _link(monkeypatch, 3, host, kineto, tmp_path / "three.json")
    assert one == three
    assert one.count(b'"cat":"kernel"') == pair.kernels > 0
    assert kineto_pids()[0] == os.getpid() != kineto_pids()[1]


def test_child_warnings_are_logged_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture,
                                        kineto_pids: Callable[[], list[int]]) -> None:
    # a Kineto warning made in the child reaches this process's log (a test's capture, the CLI's handler)
    pair = random_pair(random.Random(5), top_ops=6)
    host, kineto = tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"
    host.write_bytes(dumps(pair.host))
    kineto.write_bytes(kineto_faults()["duplicate_correlation_ids"].data)
    monkeypatch.setenv("CHAKRA_PARTS", "2")
    with caplog.at_level(logging.WARNING):
        report = link_files(host, kineto, tmp_path / "et_plus.json")
    assert kineto_pids() != [os.getpid()]
    logged = [r for r in caplog.records
              if r.name == "chakra.device.loader" and "correlation" in r.getMessage()]
    assert len(logged) == 1 and logged[0].getMessage().startswith(f"{kineto}: ")
    assert any("correlation" in w for w in report.warnings)


@pytest.mark.parametrize("parts", [1, 2])
def test_errors_name_the_file_host_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int) -> None:
    pair = random_pair(random.Random(7), top_ops=4)
    host, kineto = tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"
    host.write_bytes(dumps(pair.host))
    bad_kineto = kineto_faults()["event_not_object"].data
    kineto.write_bytes(bad_kineto)
    out = tmp_path / "et_plus.json"
    monkeypatch.setenv("CHAKRA_PARTS", str(parts))
    with pytest.raises(TraceFormatError) as err:   # raised in the child with two parts: same type, same text
        link_files(host, kineto, out)
    assert str(err.value).startswith(f"{kineto}: ") and "traceEvents[2]" in str(err.value)
    host.write_bytes(b'{"schema": "1.1.1-chakra.0.0.4", "nodes": 3}')
    with pytest.raises(TraceFormatError) as err:   # both bad: the host ET's error, as in one part
        link_files(host, kineto, out)
    assert str(err.value).startswith(f"{host}: ")
    assert not out.exists()


@pytest.mark.parametrize("step", [None, 2])
def test_et_plus_written_in_pieces_is_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               step: int | None) -> None:
    """The ET+ nodes made and encoded in three processes (pieces of a cost of at least 5) are the bytes of
    one; with ``step`` the pieces are over the step's nodes only."""
    from chakra.io import jsonio

    demo = Path(__file__).resolve().parents[2] / "src" / "chakra" / "data" / "gloo_mlp_2r"
    host, kineto = demo / "host_et_0.json.gz", demo / "kineto_0.json.gz"
    counts: list[tuple[int, int]] = []   # (nodes, pieces) of each write
    real_map = jsonio.fork_map
    real_pieces = api.NodeRanges.pieces
    monkeypatch.setattr(api.NodeRanges, "pieces", lambda self: real_pieces(self, piece_cost=5))
    monkeypatch.setattr(jsonio, "fork_map", lambda fn, pieces, what, sink: counts.append(
        (sum(len(p) for p in pieces), len(pieces))) or real_map(fn, pieces, what, sink))
    got = []
    for parts in (1, 3):
        monkeypatch.setenv("CHAKRA_PARTS", str(parts))
        out = tmp_path / f"{parts}.json"
        link_files(host, kineto, out, step=step)
        got.append(out.read_bytes())
    assert got[0] == got[1]
    nodes = len(__import__("orjson").loads(got[0])["nodes"])
    assert counts == [(nodes, 1), (nodes, 3)] and nodes > 15
    if step is not None:   # fewer than the whole trace's
        assert b'"host_nodes_dropped":0' not in got[0]


def test_write_pieces_balance_host_and_gpu_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU node costs two host nodes: the pieces of the ET+ writer cut the cost, not the count."""
    nodes = api.NodeRanges(10, 5, lambda r: iter(()))
    monkeypatch.setenv("CHAKRA_PARTS", "2")
    assert nodes.pieces(4) == [range(0, 10), range(10, 15)]          # costs 10 and 10
    monkeypatch.setenv("CHAKRA_PARTS", "3")
    assert nodes.pieces(4) == [range(0, 6), range(6, 12), range(12, 15)]   # costs 6, 8, 6
    monkeypatch.setenv("CHAKRA_PARTS", "8")
    assert len(nodes.pieces(4)) == 5                                   # pieces of a cost of 4 at least
    assert nodes.pieces(4, forked_max=15) == nodes.pieces(4)
    assert nodes.pieces(4, forked_max=14) == [range(0, 15)]           # too many nodes to fork for
