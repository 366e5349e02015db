"""chakra_visualizer: filters, dot text, graphml, graphviz rendering and its errors."""

from __future__ import annotations

import re
import shutil

import networkx as nx
import pytest

from chakra.cli.main import main as chakra_main
from chakra.cli.visualizer import main as viz_main
from chakra.errors import ChakraError, UsageError
from chakra.io import read_messages, write_messages
from chakra.schema import (
    ALL_REDUCE,
    COMM_COLL_NODE,
    COMP_NODE,
    AttributeProto,
    GlobalMetadata,
    Node,
)
from chakra.tools import visualizer as viz
from chakra.tools.stats import load_et


def _node(nid, name, ntype, dur, cpu, ctrl=(), data=(), comm_type=None):
    n = Node(id=nid, name=name, type=ntype, duration_micros=dur, ctrl_deps=list(ctrl), data_deps=list(data))
    n.attr.append(AttributeProto(name="is_cpu_op", bool_val=cpu))
    if comm_type is not None:
        n.attr.append(AttributeProto(name="comm_type", int64_val=comm_type))
    return n


def _write(path, rank, nodes):
    meta = GlobalMetadata(version="0.0.4", attr=[AttributeProto(name="rank", int64_val=rank)])
    write_messages(path, [meta, *nodes])
    return path


@pytest.fixture
def small(tmp_path):
    """1 -> 2 (ctrl), 2 -> 3 (data), 1 -> 4 (ctrl), 3 and 4 -> 5 (data); 5 also names a missing 77."""
    nodes = [
        _node(1, "aten::linear", COMP_NODE, 12, True),
        _node(2, "gemm_kernel_" + "x" * 60, COMP_NODE, 30, False, ctrl=[1]),
        _node(3, 'quote"name', COMP_NODE, 4, True, data=[2]),
        _node(4, "aten::relu", COMP_NODE, 2, True, ctrl=[1]),
        _node(5, "nccl:all_reduce", COMM_COLL_NODE, 20, False, ctrl=[77], data=[3, 4], comm_type=ALL_REDUCE),
    ]
    p0 = _write(tmp_path / "job.0.et", 0, nodes)
    p1 = _write(tmp_path / "job.1.et", 1, [_node(10, "only_on_rank1", COMP_NODE, 1, True)])
    return p0, p1


def test_select_and_dot_text(small):
    sel = viz.select(load_et(small[0]))
    assert [n.id for n in sel.nodes] == [1, 2, 3, 4, 5]
    assert sel.ctrl_edges == [(1, 2), (1, 4)]           # 77 is not in the file: no edge
    assert sel.data_edges == [(2, 3), (3, 5), (4, 5)]
    dot = viz.to_dot(sel)
    assert "n1 -> n2;" in dot and "n1 -> n4;" in dot
    assert "n2 -> n3 [style=dashed" in dot and "n4 -> n5 [style=dashed" in dot
    assert '"1: aten::linear\\nCOMP CPU 12 µs"' in dot
    assert '"5: nccl:all_reduce\\nCOMM_COLL ALL_REDUCE GPU 20 µs"' in dot
    assert "quote\\\"name" in dot                       # quotes escaped
    assert "gemm_kernel_" + "x" * 35 + "…" in dot      # 48 characters with the ellipsis
    assert "rankdir=TB" in dot                           # 3 levels, at most 2 nodes wide


def test_filters(small):
    g = load_et(small[0])
    assert [n.id for n in viz.select(g, (2, 4)).nodes] == [2, 3, 4]
    assert [n.id for n in viz.select(g, (None, 2)).nodes] == [1, 2]
    assert [n.id for n in viz.select(g, (4, None)).nodes] == [4, 5]
    assert [n.id for n in viz.select(g, name=r"^aten::").nodes] == [1, 4]
    assert [n.id for n in viz.select(g, head=2).nodes] == [1, 2]
    sel = viz.select(g, (3, 5))
    assert sel.ctrl_edges == [] and sel.data_edges == [(3, 5), (4, 5)]
    assert viz.parse_range("3:9") == (3, 9) and viz.parse_range(":9") == (None, 9)
    for bad in ("x:3", "9:3", "3"):
        with pytest.raises(UsageError):
            viz.parse_range(bad)
    with pytest.raises(UsageError, match="regular expression"):
        viz.select(g, name="(")


def test_wide_graph_goes_left_to_right(tmp_path):
    nodes = [_node(1, "root", COMP_NODE, 1, True)] + [
        _node(i, f"leaf{i}", COMP_NODE, 1, True, data=[1]) for i in range(2, 12)]
    sel = viz.select(load_et(_write(tmp_path / "w.0.et", 0, nodes)))
    assert viz.choose_layout(sel) == "LR"               # 10 wide, 2 deep
    assert "rankdir=TB" in viz.to_dot(sel, "TB")


def test_rank_pick(small, tmp_path):
    out = tmp_path / "r1.dot"
    viz.visualize([str(small[0]), str(small[1])], out, rank=1)
    text = out.read_text()
    assert "only_on_rank1" in text and "aten::linear" not in text
    with pytest.raises(UsageError, match="choose one with --rank"):
        viz.visualize([str(small[0]), str(small[1])], tmp_path / "x.dot")
    with pytest.raises(UsageError, match="no input is rank 5"):
        viz.visualize([str(small[0]), str(small[1])], tmp_path / "x.dot", rank=5)


def test_graphml(small, tmp_path):
    out = tmp_path / "g.graphml"
    viz.visualize([str(small[0])], out, max_nodes=1)   # the limit is for drawings only
    g = nx.read_graphml(out)
    assert g.number_of_nodes() == 5
    deps = sorted((a, b, d["dep"]) for a, b, d in g.edges(data=True))
    assert deps == [("1", "2", "ctrl"), ("1", "4", "ctrl"), ("2", "3", "data"), ("3", "5", "data"),
                    ("4", "5", "data")]
    assert g.nodes["5"]["type"] == "COMM_COLL_NODE" and g.nodes["5"]["duration_micros"] == 20.0
    assert g.nodes["2"]["side"] == "gpu"


def test_too_many_nodes(small, tmp_path, capsys):
    out = tmp_path / "big.png"
    rc = viz_main(["--input_filename", str(small[0]), "--output_filename", str(out), "--max-nodes", "3"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "5 nodes are too many to draw (limit --max-nodes 3)" in err and "--node-range" in err
    assert not out.exists()


def test_bad_format_and_empty_selection(small, tmp_path, capsys):
    assert viz_main(["-i", str(small[0]), "-o", str(tmp_path / "x.jpg")]) == 2
    assert "unsupported output format 'jpg'" in capsys.readouterr().err
    assert viz_main(["-i", str(small[0]), "-o", str(tmp_path / "x.dot"), "--name", "nothing"]) == 1
    assert "no node is left" in capsys.readouterr().err


def test_missing_dot_binary(small, tmp_path, monkeypatch):
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    out = tmp_path / "x.svg"
    with pytest.raises(ChakraError, match="apt-get install graphviz"):
        viz.visualize([str(small[0])], out)
    assert not out.exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed")
@pytest.mark.parametrize("suffix,magic", [("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")])
def test_render_with_graphviz(small, tmp_path, suffix, magic):
    out = tmp_path / f"g.{suffix}"
    assert chakra_main(["visualize", str(small[0]), "-o", str(out)]) == 0
    assert out.read_bytes()[:5].startswith(magic)
    if suffix == "svg":
        text = out.read_text()
        assert "aten::linear" in text and "stroke-dasharray" in text   # the dashed data edges


def test_real_sample_first_60_nodes(corpus, tmp_path):
    path = corpus / "chakra_et" / "real_2023_rank0.et.gz"
    _, nodes = read_messages(path, GlobalMetadata, Node)
    first = nodes[:60]
    ids = {n.id for n in first}
    ctrl = sum(1 for n in first for d in set(n.ctrl_deps) if d in ids)
    data = sum(1 for n in first for d in set(n.data_deps) if d in ids)
    out = tmp_path / "real60.dot"
    sel = viz.visualize([str(path)], out, head=60)
    assert len(sel.nodes) == 60
    assert (len(sel.ctrl_edges), len(sel.data_edges)) == (ctrl, data)
    text = out.read_text()
    assert len(re.findall(r"^  n\d+ -> n\d+", text, flags=re.M)) == ctrl + data
    assert "216: aten::flatten_dense_tensors(0)" in text
    assert "rankdir=LR" in text     # this part of the trace fans out: 40+ ops read one tensor


def test_etplus_input_draws_the_call_tree(tmp_path):
    from chakra.io import dump_json

    src = tmp_path / "et_plus_0.json"
    dump_json(src, {"schema": "1.0.1", "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "parent": 1},
        {"id": 2, "name": "aten::linear", "parent": 1, "dur": 50.0, "exclusive_dur": 20.0},
        {"id": 3, "name": "aten::mm", "parent": 2, "dur": 30.0},
        {"id": 4, "name": "gemm", "cat": "kernel", "parent": 3, "dur": 40.0},
    ]})
    out = tmp_path / "t.dot"
    sel = viz.visualize([str(src)], out)
    assert sel.ctrl_edges == [(1, 2), (2, 3), (3, 4)] and sel.data_edges == []
    text = out.read_text()
    assert '"2: aten::linear\\nhost_op CPU 20 µs"' in text and '"4: gemm\\nkernel GPU 40 µs"' in text


# ---- what dot can lay out in seconds (issue 16) ---------------------------------------------------------

def test_estimate_follows_the_measured_model():
    # K * (nodes + edges)^2 with K = 3.2e-6 s: DLRM rank 0's first 400 nodes + 601 edges took 3.2 s
    assert viz.estimate_dot_seconds(400, 601) == pytest.approx(3.2e-6 * 1001 ** 2)
    assert viz.estimate_dot_seconds(1936, 3066) == pytest.approx(80.0, abs=0.1)


def test_slow_layout_is_refused_before_dot_runs(small, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(viz.shutil, "which", lambda name: pytest.fail("dot must not run"))
    out = tmp_path / "x.svg"
    # 5 nodes + 5 edges: 3.2e-4 s estimated, above a 1e-4 s budget
    assert viz_main(["-i", str(small[0]), "-o", str(out), "--max-seconds", "0.0001"]) == 2
    err = capsys.readouterr().err
    assert "5 nodes and 5 edges: graphviz's dot would need about 0 s" in err
    assert "--coarse" in err and "--head N" in err and "--max-seconds" in err
    assert not out.exists()
    # .dot text needs no layout: written whatever the estimate
    assert viz_main(["-i", str(small[0]), "-o", str(tmp_path / "x.dot"), "--max-seconds", "0.0001"]) == 0


def test_coarse_view_without_start_times(small):
    # no start times: no waits or gaps to see; each lane (CPU thread 0, GPU stream 0, the comm lane) gets
    # round(2 * its share of the 5 nodes) boxes, at least 1: one each
    sel = viz.coarsen(viz.select(load_et(small[0])), boxes=2)
    assert [n.id for n in sel.nodes] == [1, 2, 5] and sel.merged_from == 5
    assert sel.ctrl_edges == [(1, 2)]                    # 1 -> 4 is inside the CPU box
    assert sel.data_edges == [(2, 1), (1, 5)]            # 2 -> 3, then 3 -> 5 and 4 -> 5 merged
    assert sel.labels[1] == '3 ops, 18 µs busy\naten::linear\nquote"name'
    assert sel.labels[5] == "ALL_REDUCE\nnccl:all_reduce\n20 µs"
    assert [name for name, _ in sel.lanes] == ["CPU thread 0: 3 ops", "GPU 0 stream 0: 1 op",
                                               "GPU 0 communication: 1 op"]
    text = viz.to_dot(sel)
    assert "5 nodes in 3 boxes" in text and "rankdir=TB" in text and "nslimit=1" in text
    with pytest.raises(UsageError, match="--coarse must be at least 1"):
        viz.coarsen(sel, 0)


def _fake_dot(tmp_path, body):
    exe = tmp_path / "dot"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(exe)


def test_dot_timeout_and_crash(small, tmp_path, monkeypatch):
    out = tmp_path / "x.svg"
    slow = _fake_dot(tmp_path, "cat > /dev/null; exec sleep 30")
    monkeypatch.setattr(viz.shutil, "which", lambda name: slow)
    with pytest.raises(ChakraError, match=r"did not finish laying out 5 nodes and 5 edges .* in 0\.5 s "
                                          r"\(--timeout\) and was stopped: draw a coarser view"):
        viz.visualize([str(small[0])], out, timeout=0.5, progress=True)
    assert not out.exists()
    crash = _fake_dot(tmp_path, "cat > /dev/null; kill -SEGV $$")
    monkeypatch.setattr(viz.shutil, "which", lambda name: crash)
    with pytest.raises(ChakraError, match=r"dot failed \(killed by signal 11\) on 5 nodes"):
        viz.visualize([str(small[0])], out)
    assert not out.exists()


@pytest.mark.corpus
def test_real_trace_refused_then_drawn_coarse(corpus, tmp_path):
    path = corpus / "chakra_et" / "real_2023_rank0.et.gz"
    sel = viz.select(load_et(path))
    edges = len(sel.ctrl_edges) + len(sel.data_edges)
    assert len(sel.nodes) == 3664
    with pytest.raises(UsageError, match="3664 nodes are too many to draw"):
        viz.visualize([str(path)], tmp_path / "all.svg")
    with pytest.raises(UsageError, match=rf"{viz.estimate_dot_seconds(3664, edges):,.0f} s to lay this out"):
        viz.visualize([str(path)], tmp_path / "all.svg", max_nodes=5000)
    coarse = viz.visualize([str(path)], tmp_path / "coarse.dot", coarse=40)
    # no start times in this file: the 21 communication ops apart (the lanes they are on cut after each), the
    # rest runs of equal length
    assert coarse.merged_from == 3664 and coarse.left_out == 0
    assert sum(1 for n in coarse.nodes if n.comm is not None) == 21
    assert 40 <= len(coarse.nodes) <= 50
