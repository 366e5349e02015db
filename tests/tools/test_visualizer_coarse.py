"""chakra_visualizer on real sizes (issue 30, class 9): the coarse view's phases, .dot text at any size.

The small rank below is worked out by hand (times in µs; a CPU op's duration is its exclusive time):

    CPU thread 1   1 aten::linear [0, 10)  > 2 cudaLaunchKernel [1, 4)   (2 launches 10)
                   3 aten::relu   [12, 17) > 4 cudaLaunchKernel [13, 15) (4 launches 11 and 13)
                   5 aten::add    [40, 44)                               (launches 12)
                   6 cudaStreamSynchronize [45, 75) waits for 12
                   7 aten::mul    [80, 85)                               (launches 14)
    GPU stream 7   10 gemm [6, 26)  11 relu [26, 30)  12 add [50, 70)  14 mul [86, 89) (waits for 15)
    GPU stream 14  13 all_reduce [31, 41) (after 11)  15 all_reduce [72, 80) (after 12)

Cuts every view has: the first op of each lane (1, 10), the collectives (13, 15), the sync points 6 (12
ended at 70, after aten::add's 44) and 14 (15 ended at 80, after add's 70).  Idle gaps: 5 (23 µs after
relu ended at 17), 12 (20 after 30), 7 (5 after 75), 3 (2 after 10), 2 and 4 (1 after their parent began).
With 6 boxes the CPU thread's share is round(6 * 7 / 13) = 3 (two used: 1, 6), so 5 is cut; stream 7's is
round(6 * 4 / 13) = 2, both used.  With 7 boxes the thread's share is 4: 5 and 7.
"""

from __future__ import annotations

import re
import shutil
import struct

import pytest

from chakra.cli.visualizer import main as viz_main
from chakra.io import write_messages
from chakra.schema import (
    ALL_REDUCE,
    COMM_COLL_NODE,
    COMP_NODE,
    METADATA_NODE,
    AttributeProto,
    GlobalMetadata,
    Node,
)
from chakra.tools import visualizer as viz
from chakra.tools.coarse import coarsen_graph, lane_name
from chakra.tools.stats import load_et


def _op(nid, name, start, dur, *, tid=None, stream=None, ctrl=(), data=(), comm=False):
    n = Node(id=nid, name=name, type=COMM_COLL_NODE if comm else COMP_NODE, start_time_micros=start,
             duration_micros=dur, ctrl_deps=list(ctrl), data_deps=list(data))
    n.attr.append(AttributeProto(name="is_cpu_op", bool_val=tid is not None))
    if tid is not None:
        n.attr.append(AttributeProto(name="tid", int64_val=tid))
    else:
        n.attr.append(AttributeProto(name="device", int64_val=0))
        n.attr.append(AttributeProto(name="stream", int64_val=stream))
    if comm:
        n.attr.append(AttributeProto(name="comm_type", int64_val=ALL_REDUCE))
        n.attr.append(AttributeProto(name="comm_size", int64_val=4 << 20))
        n.attr.append(AttributeProto(name="pg_name", string_val="0"))
    return n


def _write(path, nodes):
    write_messages(path, [GlobalMetadata(version="0.0.4", attr=[AttributeProto(name="rank", int64_val=0)]),
                          *nodes])
    return path


@pytest.fixture
def gpu_rank(tmp_path):
    return _write(tmp_path / "small.0.et", [
        _op(1, "aten::linear", 0, 10, tid=1),
        _op(2, "cudaLaunchKernel", 1, 3, tid=1, ctrl=[1]),
        _op(3, "aten::relu", 12, 5, tid=1),
        _op(4, "cudaLaunchKernel", 13, 2, tid=1, ctrl=[3]),
        _op(5, "aten::add", 40, 4, tid=1),
        _op(6, "cudaStreamSynchronize", 45, 30, tid=1, data=[12]),
        _op(7, "aten::mul", 80, 5, tid=1),
        _op(10, "gemm", 6, 20, stream=7, data=[2]),
        _op(11, "relu_kernel", 26, 4, stream=7, data=[4]),
        _op(12, "add_kernel", 50, 20, stream=7, data=[5]),
        _op(13, "ncclKernel_AllReduce", 31, 10, stream=14, data=[4, 11], comm=True),
        _op(14, "mul_kernel", 86, 3, stream=7, data=[7, 15]),
        _op(15, "ncclKernel_AllReduce", 72, 8, stream=14, data=[12], comm=True),
    ])


def _members(c):
    return {c.nodes[b.members[0]].id: sorted(c.nodes[i].id for i in b.members) for b in c.boxes}


def test_phases_of_a_gpu_rank(gpu_rank):
    sel = viz.select(load_et(gpu_rank))
    out = viz.coarsen(sel, 6)
    assert sorted(n.id for n in out.nodes) == [1, 5, 6, 10, 13, 14, 15]     # a box is named by its first op
    c = coarsen_graph(sel.nodes, sel.ctrl_edges, sel.data_edges, 6)
    assert _members(c) == {1: [1, 2, 3, 4], 5: [5], 6: [6, 7], 10: [10, 11, 12], 14: [14], 13: [13], 15: [15]}
    assert {c.nodes[b.members[0]].id: b.why for b in c.boxes} == {
        1: "first", 10: "first", 13: "comm", 5: "idle", 6: "sync", 15: "comm", 14: "sync"}
    assert [b.gap for b in c.boxes if b.why == "idle"] == [23]

    # edges between lanes only (1 -> 2 and 3 -> 4 are inside the CPU box); all are data deps here
    assert out.ctrl_edges == []
    assert sorted(out.data_edges) == [(1, 10), (1, 13), (5, 10), (6, 14), (10, 6), (10, 13), (10, 15),
                                      (15, 14)]
    assert sorted(out.lane_edges) == [(1, 5), (5, 6), (10, 14), (13, 15)]
    assert [name for name, _ in out.lanes] == ["CPU thread 1: 7 ops", "GPU 0 stream 7: 4 ops",
                                               "GPU 0 stream 14: 2 ops"]
    # rows by start, then every box below those it depends on: the stream's first phase holds add_kernel,
    # launched by aten::add (row 1), so it is drawn in the row after it
    assert out.rows == [[1], [5], [10], [13, 6], [15], [14]]
    assert out.labels[5] == "1 op, 4 µs busy\naten::add\n0.040-0.044 ms (idle 23 µs)"
    assert out.labels[6] == "2 ops, 35 µs busy\ncudaStreamSynchronize\naten::mul\n0.045-0.085 ms (waited)"
    assert out.labels[13] == "ALL_REDUCE 4.0 MB pg 0\nncclKernel_AllReduce\n10 µs, 0.031-0.041 ms"
    text = viz.to_dot(out)
    assert "13 nodes in 7 boxes" in text and "rankdir=TB" in text and "newrank=true" in text
    assert "{ rank=same; r3; n13; n6; }" in text
    assert re.search(r'subgraph cluster_0 \{.*label="CPU thread 1: 7 ops"\]; n1; n5; n6; \}', text)


def test_the_budget_goes_to_the_longest_gaps(gpu_rank):
    sel = viz.select(load_et(gpu_rank))
    c = coarsen_graph(sel.nodes, sel.ctrl_edges, sel.data_edges, 7)
    # the thread's share is 4: its gaps of 23 (before 5) and 5 µs (before 7); stream 7 keeps its 2
    assert _members(c) == {1: [1, 2, 3, 4], 5: [5], 6: [6], 7: [7], 10: [10, 11, 12], 14: [14], 13: [13],
                           15: [15]}
    # a budget below the required cuts: those only
    c = coarsen_graph(sel.nodes, sel.ctrl_edges, sel.data_edges, 1)
    assert _members(c) == {1: [1, 2, 3, 4, 5], 6: [6, 7], 10: [10, 11, 12], 14: [14], 13: [13], 15: [15]}


@pytest.mark.parametrize("x_end,same_phase", [(10, True), (18, False)])
def test_a_dependency_is_a_sync_point_when_the_lane_waited_for_it(tmp_path, x_end, same_phase):
    # thread 2 runs y [0, 15) then z [16, 21), z needs x of thread 1: a wait only when x ended after y did
    path = _write(tmp_path / "w.0.et", [
        _op(1, "x", 0, x_end, tid=1),
        _op(2, "y", 0, 15, tid=2),
        _op(3, "z", 16, 5, tid=2, data=[1]),
    ])
    sel = viz.select(load_et(path))
    c = coarsen_graph(sel.nodes, sel.ctrl_edges, sel.data_edges, 2)    # one box a thread: no idle cut
    assert (c.box_of[1] == c.box_of[2]) is same_phase


def test_roots_and_metadata_are_left_out(tmp_path):
    root = Node(id=1, name="[pytorch|profiler|execution_trace|thread]", type=COMP_NODE)
    root.attr.append(AttributeProto(name="is_cpu_op", bool_val=True))
    root.attr.append(AttributeProto(name="tid", int64_val=9))
    meta = Node(id=2, name="## process_group:init ##", type=METADATA_NODE)
    path = _write(tmp_path / "r.0.et", [root, meta, _op(3, "aten::mm", 5, 5, tid=1, ctrl=[1]),
                                        _op(4, "gemm", 6, 3, stream=7, data=[3])])
    out = viz.coarsen(viz.select(load_et(path)), 10)
    assert [n.id for n in out.nodes] == [3, 4] and out.left_out == 2 and out.data_edges == [(3, 4)]
    assert "2 roots and metadata nodes left out" in viz.to_dot(out)


def test_etplus_lanes_and_times(tmp_path):
    from chakra.io import dump_json

    src = tmp_path / "et_plus_0.json"
    dump_json(src, {"schema": "1.0.1", "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "parent": 1},
        {"id": 2, "name": "aten::linear", "parent": 1, "tid": 5, "ts": 1_000_000, "dur": 50.0,
         "exclusive_dur": 20.0},
        {"id": 3, "name": "gemm", "cat": "kernel", "parent": 2, "device": 0, "stream": 7, "ts": 1_000_010,
         "dur": 40.0},
    ]})
    out = viz.coarsen(viz.select(viz.pick_rank([str(src)], None)), 4)
    assert [name for name, _ in out.lanes] == ["CPU thread 5: 1 op", "GPU 0 stream 7: 1 op"]
    assert out.ctrl_edges == [(2, 3)] and out.left_out == 1
    # Kineto's clock: times from the first op
    assert out.labels[3] == "1 op, 40 µs busy\ngemm\n0.010-0.050 ms"


def _big_rank(path, n_ops):
    """A rank of ``n_ops`` CPU ops each launching a kernel (2 * n_ops nodes)."""
    nodes = []
    for k in range(n_ops):
        nodes.append(_op(2 * k + 1, "aten::op", 10 * k, 4, tid=1))
        nodes.append(_op(2 * k + 2, "kernel", 10 * k + 5, 4, stream=7, data=[2 * k + 1]))
    return _write(path, nodes)


def test_dot_text_of_a_big_graph_is_written_without_dot(tmp_path, monkeypatch):
    monkeypatch.setattr(viz.shutil, "which", lambda name: pytest.fail("dot must not run for .dot text"))
    et = _big_rank(tmp_path / "big.0.et", 15_000)
    out = tmp_path / "big.dot"
    assert viz_main(["-i", str(et), "-o", str(out)]) == 0    # 30,000 nodes: above --max-nodes 2000
    text = out.read_text()
    assert len(re.findall(r"^  n\d+ \[label=", text, flags=re.M)) == 30_000
    assert len(re.findall(r"^  n\d+ -> n\d+", text, flags=re.M)) == 15_000
    # a drawing of it is refused before dot runs
    assert viz_main(["-i", str(et), "-o", str(tmp_path / "big.png")]) == 2
    assert not (tmp_path / "big.png").exists()


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def a100_step(corpus, tmp_path_factory):
    """Rank 3 of the A100 NCCL job (Kineto-only), ProfilerStep#1010: 8,373 nodes, 10 collectives."""
    from chakra.convert import convert_file
    from chakra.link.api import link_files

    tmp = tmp_path_factory.mktemp("a100")
    trace = corpus / "kineto_only" / "hta" / "a100_rank3_of_8_nccl.json.gz"
    link_files(None, trace, tmp / "a.json", step=1010)
    convert_file(tmp / "a.json", tmp / "a100.3.et")
    return tmp / "a100.3.et"


@pytest.mark.corpus
def test_real_gpu_rank_coarse(a100_step, tmp_path):
    graph = load_et(a100_step)
    sel = viz.select(graph)
    assert len(sel.nodes) == 8373
    boxes = viz.coarsen(sel, 60)
    collectives = [n for n in boxes.nodes if n.comm is not None]
    assert [n.comm for n in collectives] == ["ALL_TO_ALL"] * 7 + ["ALL_REDUCE"] * 3
    c = coarsen_graph(sel.nodes, sel.ctrl_edges, sel.data_edges, 60)
    comm = [i for i, n in enumerate(c.nodes) if n.comm is not None]
    assert len(comm) == 10
    # every collective its own box
    assert all(c.boxes[c.box_of[i]].members == [i] for i in comm)
    # the process root and the two thread roots are left out; two threads and four streams remain
    assert c.left_out == 3
    assert sorted(lane_name(lane) for lane in c.lanes) == [
        "CPU thread 3113936", "CPU thread 3126441", "GPU 3 stream 20", "GPU 3 stream 21", "GPU 3 stream 22",
        "GPU 3 stream 7"]
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed")
    out = tmp_path / "a100.png"
    assert viz_main(["-i", str(a100_step), "-o", str(out), "--coarse"]) == 0
    width, height = _png_size(out)
    assert width <= 4000 and height > width      # a column per lane, time running down
