"""``chakra replay`` reads a .et in spans over the cores (chakra.io.forkmap, ``CHAKRA_PARTS``): the results,
the completion log and the timeline are the same bytes for one part and for three, on a real trace and on
a synthetic one whose file order is not its id order (the spans' nodes are put in id order after joining).
"""

from __future__ import annotations

import json
import random
from functools import partial

import pytest
from helpers.et_nodes import pb_node, write_rank

import chakra.io.forkmap as forkmap
import chakra.replay.reader as reader
from chakra.cli.replay import main
from chakra.io import read_messages
from chakra.schema import METADATA_NODE, GlobalMetadata, Node


def _spans_of(span_bytes: int, monkeypatch) -> None:
    """``chakra replay`` reads its file in spans of ``span_bytes`` (the reader's public parameter)."""
    monkeypatch.setattr(reader, "read_columns", partial(reader.read_columns, span_bytes=span_bytes))


def _replay(et, out, parts, monkeypatch, capsys) -> tuple[dict, bytes, bytes, list[int]]:
    """(JSON summary, log bytes, timeline bytes, pieces of each fork_map) of ``chakra replay et``."""
    monkeypatch.setenv("CHAKRA_PARTS", str(parts))
    pieces: list[int] = []
    real = forkmap.fork_map
    with monkeypatch.context() as m:
        m.setattr(forkmap, "fork_map", lambda fn, p, what: pieces.append(len(p)) or real(fn, p, what))
        return _run(et, out, capsys) + (pieces,)


def _run(et, out, capsys) -> tuple[dict, bytes, bytes]:
    out.mkdir()
    log, tl = out / "replay.log", out / "tl.json"
    assert main([str(et), "--json", "--log", str(log), "--timeline", str(tl), "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    return summary, log.read_bytes(), tl.read_bytes()


def _same_for_one_and_three_parts(et, tmp_path, monkeypatch, capsys) -> tuple[dict, bytes]:
    one = _replay(et, tmp_path / "p1", 1, monkeypatch, capsys)
    three = _replay(et, tmp_path / "p3", 3, monkeypatch, capsys)
    assert one[3] == [1] and three[3] == [3]       # the reading: one span, three spans
    assert one[0] == three[0]
    assert one[1] == three[1]
    assert one[2] == three[2]
    return one[0], one[1]


def test_real_trace_replays_the_same_in_one_and_three_parts(corpus, tmp_path, monkeypatch, capsys):
    from chakra.convert import convert_file
    from chakra.link.api import link_files

    d = corpus / "dlrm_8r_v100"
    plus, et = tmp_path / "plus_0.json", tmp_path / "dlrm.0.et"
    link_files(d / "host" / "host_et_0.json.gz", d / "device" / "kineto_0.json.gz", plus, rank=0)
    convert_file(plus, et)
    assert et.stat().st_size > 3 * 65536
    _spans_of(65536, monkeypatch)
    summary, log = _same_for_one_and_three_parts(et, tmp_path, monkeypatch, capsys)
    _, nodes = read_messages(et, GlobalMetadata, Node)        # the file read plainly, message by message
    (rank,) = summary["ranks"]
    assert rank["nodes"] == len(nodes)
    # a completion line per node but the METADATA ones
    assert len(log.splitlines()) == sum(n.type != METADATA_NODE for n in nodes)
    assert abs(rank["error_pct"]) < 1.0     # the per-rank fidelity on the corpus (test_replay_corpus)


def test_real_2023_file_reads_the_same_in_one_and_three_parts(corpus, monkeypatch):
    """A gzipped .et (decompressed whole, its spans cut in memory), with dependencies out of the file."""
    path = corpus / "chakra_et" / "real_2023_rank0.et.gz"
    graphs = []
    for parts in (1, 3):
        monkeypatch.setenv("CHAKRA_PARTS", str(parts))
        graphs.append(reader.load_graph(path, span_bytes=4096))
    one, three = graphs
    assert len(one) == 3664
    for f in ("ids", "names", "types", "durations", "starts", "deps", "is_cpu", "lanes", "comm", "extra",
              "parents", "ctrl_parent"):
        assert getattr(one, f) == getattr(three, f), f


def _synthetic(n: int, seed: int) -> list[Node]:
    """n launchers on CPU thread 1 (3 us each, one every 10 us, each after the previous), each launching a
    5 us kernel on stream 7; the nodes written in shuffled windows of 50, so the file is not in id order."""
    nodes = []
    for k in range(n):
        launcher, kernel = 2 * k + 1, 2 * k + 2
        nodes.append(pb_node(launcher, 3, 10 * k, data=[launcher - 2] if k else []))
        nodes.append(pb_node(kernel, 5, 10 * k + 3, deps=[launcher], cpu=False, stream=7))
    rng = random.Random(seed)
    out = []
    for w in range(0, len(nodes), 50):
        window = nodes[w:w + 50]
        rng.shuffle(window)
        out += window
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_synthetic_trace_replays_the_same_in_one_and_three_parts(seed, tmp_path, monkeypatch, capsys):
    n = 3000
    et = tmp_path / "syn.0.et"
    write_rank(et, 0, _synthetic(n, seed), measured=10 * (n - 1) + 8, world=1)
    _spans_of(4096, monkeypatch)
    summary, log = _same_for_one_and_three_parts(et, tmp_path, monkeypatch, capsys)
    (rank,) = summary["ranks"]
    # each launcher starts at its recorded 10 k (its 7 us gap kept), its kernel right after it (3 us) and
    # lasts 5 us, before the next launch: the last kernel ends at 10 (n - 1) + 3 + 5
    assert rank["nodes"] == 2 * n
    assert rank["replayed_us"] == 10 * (n - 1) + 8
    lines = log.decode().splitlines()
    assert len(lines) == 2 * n
    assert f"Node ID {2 * n} completed at {10 * (n - 1) + 8}us" in lines[-1]


def test_job_ranks_are_read_file_by_file_over_the_parts(tmp_path, monkeypatch, capsys):
    """``chakra replay --job``: the ranks' files are handed to the cores whole (one fork_map, a run of
    files per part; not each file cut into spans), and the replay is the same bytes as in one part.
    Each rank: the synthetic launchers and kernels (the last kernel ends at 10 (n - 1) + 8), then an
    all-reduce of 4 us on stream 7 after it, coupled across the two ranks: both end at 10 (n - 1) + 12."""
    from chakra.schema import COMM_COLL_NODE

    n = 300
    files = []
    for rank in (0, 1):
        nodes = _synthetic(n, rank + 1)
        nodes.append(pb_node(2 * n + 1, 4, 10 * (n - 1) + 8, deps=[2 * n], cpu=False, stream=7,
                             ntype=COMM_COLL_NODE, pg="0"))
        files.append(tmp_path / f"job.{rank}.et")
        write_rank(files[-1], rank, nodes, measured=10 * (n - 1) + 12)
    outs = []
    for parts in (1, 2):
        monkeypatch.setenv("CHAKRA_PARTS", str(parts))
        pieces: list[int] = []
        real = forkmap.fork_map
        out = tmp_path / f"p{parts}"
        out.mkdir()
        log = out / "replay.log"
        with monkeypatch.context() as m:
            m.setattr(forkmap, "fork_map",
                      lambda fn, p, what, seen=pieces, real=real: seen.append(len(p)) or real(fn, p, what))
            assert main([*map(str, files), "--job", "--json", "--log", str(log), "-q"]) == 0
        outs.append((json.loads(capsys.readouterr().out), log.read_bytes(), pieces))
    (one, log1, pieces1), (two, log2, pieces2) = outs
    # one part: each file in one span; two: a file per part (then this process's file, in one span)
    assert pieces1 == [1, 1] and pieces2 == [2, 1]
    assert one == two and log1 == log2
    assert [r["replayed_us"] for r in one["ranks"]] == [10 * (n - 1) + 12] * 2
