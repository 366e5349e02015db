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


# ---- the nodes read as they are written (ReadAsWritten) ------------------------------------------------

_GRAPH_FIELDS = ("ids", "names", "types", "durations", "starts", "deps", "is_cpu", "lanes", "comm", "extra",
                 "parents", "ctrl_parent", "process_groups", "world_size", "rank", "thread_timing")


def _read_while_writing(src, out, parts, piece, monkeypatch):
    """The RankGraph of ``convert_file(src, out)`` read as written, in ``parts`` parts of ``piece`` nodes;
    the number of pieces the writer made."""
    import chakra.convert.write as write
    import chakra.io.forkmap as forkmap
    from chakra.replay.reader import ReadAsWritten

    monkeypatch.setenv("CHAKRA_PARTS", str(parts))
    monkeypatch.setattr(write, "ET_WRITE_READ_PIECE_NODES", piece)
    made: list[int] = []
    real = forkmap.fork_map
    monkeypatch.setattr(write, "fork_map", lambda fn, p, what, sink=None: made.append(len(p))
                        or real(fn, p, what, sink))
    read = ReadAsWritten()
    convert_file(src, out, reader=read)
    return read.graph(), made


def _same_graph(a, b):
    for f in _GRAPH_FIELDS:
        assert getattr(a, f) == getattr(b, f), f


def test_read_as_written_is_the_graph_of_the_file_for_any_parts(tmp_path, monkeypatch):
    from chakra.replay import load_graph

    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps(gloo_etplus()))
    for parts in (1, 3):
        out = tmp_path / f"p{parts}.0.et"
        got, made = _read_while_writing(src, out, parts, 2, monkeypatch)
        assert made == [parts]
        _same_graph(got, load_graph(out))
        assert len(got) == 9 and METADATA_NODE in got.types


def test_read_as_written_real_trace_in_one_and_three_parts(corpus, tmp_path, monkeypatch):
    from chakra.link.api import link_files
    from chakra.replay import load_graph

    d = corpus / "dlrm_8r_v100"
    plus = tmp_path / "plus_3.json"
    link_files(d / "host" / "host_et_3.json.gz", d / "device" / "kineto_3.json.gz", plus, rank=3)
    graphs = []
    for parts in (1, 3):
        out = tmp_path / f"dlrm{parts}.3.et"
        got, made = _read_while_writing(plus, out, parts, 300, monkeypatch)
        assert made == [parts]
        _same_graph(got, load_graph(out))
        graphs.append(got)
    _same_graph(*graphs)
    assert (tmp_path / "dlrm1.3.et").read_bytes() == (tmp_path / "dlrm3.3.et").read_bytes()
    # (as chakra replay of it says): 1,948 nodes and the 64 GPU ops launched before the trace began
    assert len(graphs[0]) == 2012 and graphs[0].rank == 3


def test_cli_simulate_lines_are_those_of_a_replay_of_the_file_in_three_parts(tmp_path, monkeypatch):
    import chakra.convert.write as write

    monkeypatch.setenv("CHAKRA_PARTS", "3")
    monkeypatch.setattr(write, "ET_WRITE_READ_PIECE_NODES", 2)
    src = tmp_path / "et_plus_0.json"
    src.write_bytes(orjson.dumps(small_etplus()))
    out, log = tmp_path / "o.0.et", tmp_path / "conv.log"
    assert converter_main(["--log-filename", str(log), "PyTorch", "--input", str(src), "--output", str(out),
                           "--simulate", "-q"]) == 0
    write_completion_log(tmp_path / "replay.log", [replay_file(out)])
    lines = [x for x in log.read_text().splitlines() if "Node ID" in x]
    assert lines == (tmp_path / "replay.log").read_text().splitlines()
    assert len(lines) == 10


def test_a_graph_is_made_once(tmp_path):
    import pytest

    from chakra.replay.reader import ReadAsWritten

    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps(small_etplus()))
    read = ReadAsWritten()
    with pytest.raises(ValueError):
        read.graph()    # nothing written yet
    convert_file(src, tmp_path / "o.et", reader=read)
    assert len(read.graph()) == 10
    with pytest.raises(ValueError):
        read.graph()    # the columns were taken over


def test_a_failed_reading_while_writing_reads_the_file_back_and_says_so(tmp_path, monkeypatch, caplog):
    import chakra.replay.etdecode as etdecode
    import chakra.replay.reader as reader
    from chakra.replay import load_graph

    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps(gloo_etplus()))
    real = etdecode.ColumnBuilder.add_frames
    calls = []

    def flaky(self, first, frames, path):
        calls.append(first)
        if len(calls) == 1:
            raise RuntimeError("a bug in the reading")
        return real(self, first, frames, path)

    monkeypatch.setattr(etdecode.ColumnBuilder, "add_frames", flaky)
    read = reader.ReadAsWritten()
    out = tmp_path / "o.0.et"
    convert_file(src, out, reader=read)            # the conversion itself goes on
    assert out.stat().st_size > 0
    monkeypatch.setattr(etdecode.ColumnBuilder, "add_frames", real)
    g = read.graph()
    assert "reading it as it was written failed (RuntimeError: a bug in the reading); reading it back" \
        in caplog.text
    _same_graph(g, load_graph(out))
