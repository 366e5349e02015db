"""`chakra_converter Text`: ASTRA-sim 1.0 text workloads -> one Chakra ET per NPU.

Hand-worked graphs for small workloads, process-group layouts, errors, both command lines, and every
workload of the corpus run in the real simulator (skipped where ../shared/astra-sim is absent).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from helpers.astrasim import needs_astrasim, run

from chakra import schema as pb
from chakra.cli.converter import main as converter_main
from chakra.convert.text import (
    convert_text,
    default_model_parallel_size,
    parse_text,
    plan_groups,
)
from chakra.errors import TraceFormatError, UsageError
from chakra.io import read_messages

DATA_2L = """DATA
2
l0 -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 4096 500
l1 -1 1500 NONE 0 2500 NONE 0 3500 ALLREDUCE 8192 0
"""


def _write(tmp_path: Path, text: str, name: str = "w.txt") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _nodes(path: str | Path) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    return read_messages(path, pb.GlobalMetadata, pb.Node)


def _attrs(node: pb.Node) -> dict[str, tuple[str, object]]:
    return {a.name: (a.WhichOneof("value"), pb.attr_value(a)) for a in node.attr}


def _table(nodes: list[pb.Node]) -> list[tuple[int, str, int, list[int]]]:
    return [(n.id, n.name, n.duration_micros, list(n.data_deps)) for n in nodes]


# ---- hand-worked graphs -------------------------------------------------------------------------------


def test_two_layer_data_parallel_one_pass(tmp_path: Path) -> None:
    rep = convert_text(_write(tmp_path, DATA_2L), tmp_path / "d", 4, 1)
    assert rep.files == [str(tmp_path / f"d.{r}.et") for r in range(4)] and rep.comm_group_path is None
    meta, nodes = _nodes(tmp_path / "d.0.et")
    # forward l0, l1; backward l1: WG, its all-reduce, IG; l0: WG, its all-reduce, WU (update 500 cycles).
    # Durations: cycles/1000 rounded half up (1500 -> 2, 3500 -> 4, 2500 -> 3, 500 -> 1).
    assert _table(nodes) == [
        (0, "l0.FWD", 1, []),
        (1, "l1.FWD", 2, [0]),
        (2, "l1.WG", 4, [1]),
        (3, "l1.WG.ALL_REDUCE", 0, [2]),
        (4, "l1.IG", 3, [2]),
        (5, "l0.WG", 3, [4]),
        (6, "l0.WG.ALL_REDUCE", 0, [5]),
        (7, "l0.WU", 1, [6]),
    ]
    assert [n.type for n in nodes] == [pb.COMP_NODE] * 3 + [pb.COMM_COLL_NODE] + [pb.COMP_NODE] * 2 + \
        [pb.COMM_COLL_NODE, pb.COMP_NODE]
    assert _attrs(nodes[3]) == {"is_cpu_op": ("bool_val", False), "comm_type": ("int64_val", pb.ALL_REDUCE),
                                "comm_size": ("int64_val", 8192), "pg_name": ("string_val", "0")}
    assert _attrs(nodes[6])["comm_size"] == ("int64_val", 4096)
    assert _attrs(nodes[0]) == {"is_cpu_op": ("bool_val", False)}
    assert _attrs(nodes[7]) == {"is_cpu_op": ("bool_val", True)}   # the update is a delay, not GPU work
    md = {a.name: pb.attr_value(a) for a in meta.attr}
    assert md["parallelism"] == "DATA" and md["world_size"] == 4 and md["rank"] == 0
    # every rank of a DATA workload has the same graph
    for r in range(1, 4):
        assert [n.SerializeToString() for n in _nodes(tmp_path / f"d.{r}.et")[1]] == \
            [n.SerializeToString() for n in nodes]
    assert (rep.compute_cycles, rep.compute_micros) == (1000 + 1500 + 3500 + 2500 + 3000, 1 + 2 + 4 + 3 + 3)


def test_two_layer_data_parallel_passes_are_chained(tmp_path: Path) -> None:
    convert_text(_write(tmp_path, DATA_2L), tmp_path / "d", 2, 2)
    nodes = _nodes(tmp_path / "d.1.et")[1]
    assert len(nodes) == 16
    # pass 2: l0's forward waits for l0's update (node 7), l1's forward for l1's all-reduce (node 3: l1 has
    # no update time)
    assert _table(nodes)[8:10] == [(8, "l0.FWD", 1, [7]), (9, "l1.FWD", 2, [3, 8])]
    assert _table(nodes)[10:] == [(10, "l1.WG", 4, [9]), (11, "l1.WG.ALL_REDUCE", 0, [10]),
                                  (12, "l1.IG", 3, [10]), (13, "l0.WG", 3, [12]),
                                  (14, "l0.WG.ALL_REDUCE", 0, [13]), (15, "l0.WU", 1, [14])]


def test_cycle_ns_scales_durations(tmp_path: Path) -> None:
    convert_text(_write(tmp_path, DATA_2L), tmp_path / "d", 1, 1, cycle_ns=1000)   # the reference's rule
    nodes = _nodes(tmp_path / "d.0.et")[1]
    # one rank: the world group has one member, so no collective is written
    assert [(n.name, n.duration_micros) for n in nodes] == [
        ("l0.FWD", 1000), ("l1.FWD", 1500), ("l1.WG", 3500), ("l1.IG", 2500), ("l0.WG", 3000), ("l0.WU", 500)]


def test_model_parallel_blocking_collectives(tmp_path: Path) -> None:
    text = "MODEL\n2\na -1 1000 ALLGATHER 64 1000 ALLREDUCE 32 1000 NONE 0 0\n" \
           "b -1 2000 ALLGATHER 128 2000 ALLREDUCE 16 2000 ALLREDUCE 999 0\n"
    convert_text(_write(tmp_path, text), tmp_path / "m", 2, 1)
    nodes = _nodes(tmp_path / "m.0.et")[1]
    # forward: compute then its all-gather, the next layer waits for it; backward: IG, its all-reduce (not
    # for layer a), WG; MODEL runs no weight-gradient collective (b's ALLREDUCE 999 is ignored)
    assert _table(nodes) == [
        (0, "a.FWD", 1, []), (1, "a.FWD.ALL_GATHER", 0, [0]),
        (2, "b.FWD", 2, [1]), (3, "b.FWD.ALL_GATHER", 0, [2]),
        (4, "b.IG", 2, [3]), (5, "b.IG.ALL_REDUCE", 0, [4]), (6, "b.WG", 2, [4]),
        (7, "a.IG", 1, [5, 6]), (8, "a.WG", 1, [7]),
    ]
    assert [_attrs(nodes[i])["comm_size"][1] for i in (1, 3, 5)] == [64, 128, 16]


def test_dlrm_embedding_all_to_all_overlaps_the_bottom_mlp(tmp_path: Path) -> None:
    text = ("HYBRID_DLRM 1\n4\n"
            "emb -1 1000 ALLTOALL 100 1000 ALLTOALL 200 1000 NONE 0 0\n"
            "bot -1 1000 NONE 0 1000 NONE 0 1000 ALLREDUCE 10 0\n"
            "top0 -1 1000 NONE 0 1000 NONE 0 1000 ALLREDUCE 20 0\n"
            "top1 -1 1000 NONE 0 1000 NONE 0 1000 ALLREDUCE 30 0\n")
    convert_text(_write(tmp_path, text), tmp_path / "x", 2, 1)
    nodes = _nodes(tmp_path / "x.0.et")[1]
    assert [(i, name, deps) for i, name, _, deps in _table(nodes)] == [
        (0, "emb.FWD", []), (1, "emb.FWD.ALL_TO_ALL", [0]),
        (2, "bot.FWD", [0]),                  # does not wait for the all-to-all
        (3, "top0.FWD", [1, 2]),              # the first layer after the last bottom layer (1) does
        (4, "top1.FWD", [3]),
        (5, "top1.WG", [4]), (6, "top1.WG.ALL_REDUCE", [5]), (7, "top1.IG", [5]),
        (8, "top0.WG", [7]), (9, "top0.WG.ALL_REDUCE", [8]), (10, "top0.IG", [8]),
        (11, "emb.IG.ALL_TO_ALL", [10]),      # the embedding's input gradient leaves after top0's IG
        (12, "bot.WG", [10]), (13, "bot.WG.ALL_REDUCE", [12]), (14, "bot.IG", [12]),
        (15, "emb.WG", [11, 14]),             # and the embedding's weight gradient waits for it
    ]
    assert _attrs(nodes[11])["comm_size"][1] == 200


HYBRID_2L = """HYBRID_TRANSFORMER model_parallel_NPU_group: 2
2
a -1 1000 ALLREDUCE 100 1000 NONE 0 1000 ALLREDUCE 1000 0
b -1 1000 ALLGATHER 50 1000 ALLREDUCE 300 1000 ALLREDUCE 2000 0
"""


def test_hybrid_groups_and_pg_names(tmp_path: Path) -> None:
    rep = convert_text(_write(tmp_path, HYBRID_2L), tmp_path / "h", 4, 1)
    # model groups: consecutive pairs (ids 1, 2); data groups: same position in each pair (ids 3, 4)
    assert rep.groups == {1: (0, 1), 2: (2, 3), 3: (0, 2), 4: (1, 3)} and rep.model_parallel_size == 2
    assert orjson.loads(Path(rep.comm_group_path).read_bytes()) == {"1": [0, 1], "2": [2, 3], "3": [0, 2],
                                                                    "4": [1, 3]}
    assert rep.comm_group_path == str(tmp_path / "h.comm_group.json")
    expect = {0: ("1", "3"), 1: ("1", "4"), 2: ("2", "3"), 3: ("2", "4")}
    for rank, (model, data) in expect.items():
        nodes = _nodes(tmp_path / f"h.{rank}.et")[1]
        pgs = {n.name: _attrs(n)["pg_name"][1] for n in nodes if n.type == pb.COMM_COLL_NODE}
        assert pgs == {"a.FWD.ALL_REDUCE": model, "b.FWD.ALL_GATHER": model, "b.IG.ALL_REDUCE": model,
                       "b.WG.ALL_REDUCE": data, "a.WG.ALL_REDUCE": data}


def test_hybrid_astrasim_safe_splits_the_model_group_all_reduces(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="chakra.convert.text"):
        convert_text(_write(tmp_path, HYBRID_2L), tmp_path / "plain", 4, 1)
    assert "double-frees" in caplog.text and "--astrasim-safe" in caplog.text
    rep = convert_text(_write(tmp_path, HYBRID_2L), tmp_path / "s", 4, 1, astrasim_safe=True)
    nodes = _nodes(tmp_path / "s.0.et")[1]
    comm = [(n.name, _attrs(n)["comm_type"][1], _attrs(n)["comm_size"][1], _attrs(n)["pg_name"][1])
            for n in nodes if n.type == pb.COMM_COLL_NODE]
    # model group (pg 1) all-reduces -> reduce-scatter S + all-gather S/2; the data group (pg 3) keeps its
    # all-reduces: no collective type is left in both groups of a rank
    assert comm == [
        ("a.FWD.REDUCE_SCATTER", pb.REDUCE_SCATTER, 100, "1"), ("a.FWD.ALL_GATHER", pb.ALL_GATHER, 50, "1"),
        ("b.FWD.ALL_GATHER", pb.ALL_GATHER, 50, "1"),
        ("b.IG.REDUCE_SCATTER", pb.REDUCE_SCATTER, 300, "1"), ("b.IG.ALL_GATHER", pb.ALL_GATHER, 150, "1"),
        ("b.WG.ALL_REDUCE", pb.ALL_REDUCE, 2000, "3"),
        ("a.WG.ALL_REDUCE", pb.ALL_REDUCE, 1000, "3"),
    ]
    split = [n for n in nodes if n.name == "a.FWD.ALL_GATHER"][0]
    assert _attrs(split)["orig_comm_type"] == ("int64_val", pb.ALL_REDUCE)
    assert _attrs(split)["orig_comm_size"] == ("int64_val", 100)
    assert any("reduce-scatter + all-gather" in note for note in rep.notes)


def test_group_layouts() -> None:
    dm = plan_groups("HYBRID_DATA_MODEL", 8, 2)
    assert dm.groups == {1: (0, 1), 2: (2, 3), 3: (4, 5), 4: (6, 7), 5: (0, 2, 4, 6), 6: (1, 3, 5, 7)}
    md = plan_groups("HYBRID_MODEL_DATA", 8, 2)
    # data groups are the consecutive blocks (of N/M = 4), model groups take one rank of each block
    assert md.groups == {1: (0, 4), 2: (1, 5), 3: (2, 6), 4: (3, 7), 5: (0, 1, 2, 3), 6: (4, 5, 6, 7)}
    assert md.pg("model", 6) == ("3", 2) and md.pg("data", 6) == ("6", 4) and md.pg("world", 6) == ("0", 8)
    assert plan_groups("DATA", 8, None).groups == {}
    assert [default_model_parallel_size(n) for n in (1, 2, 7, 8, 12, 16, 64)] == [1, 1, 1, 2, 3, 4, 8]
    with pytest.raises(UsageError, match="divides"):
        plan_groups("HYBRID_DATA_MODEL", 8, 3)


def test_one_rank_groups_and_micro(tmp_path: Path) -> None:
    # a Transformer whose model group is the whole world: the data groups have one rank, so the
    # weight-gradient all-reduces are left out (nothing to exchange)
    rep = convert_text(_write(tmp_path, HYBRID_2L), tmp_path / "t", 2, 1)
    names = [n.name for n in _nodes(tmp_path / "t.0.et")[1] if n.type == pb.COMM_COLL_NODE]
    assert names == ["a.FWD.ALL_REDUCE", "b.FWD.ALL_GATHER", "b.IG.ALL_REDUCE"]
    assert "left out on every rank: 2 WG collectives over a one-rank group" in rep.notes
    micro = "MICRO\n1\nconv1 -1 5 NONE 0 5 NONE 0 5  ALLTOALL 1048576 5\n"
    convert_text(_write(tmp_path, micro), tmp_path / "u", 4, 3)
    nodes = _nodes(tmp_path / "u.0.et")[1]
    assert [(i, name, deps) for i, name, _, deps in _table(nodes)] == [
        (0, "conv1.WG.ALL_TO_ALL", []), (1, "conv1.WG.ALL_TO_ALL", [0]), (2, "conv1.WG.ALL_TO_ALL", [1])]


def test_inference_forward_only_and_recomputation_note(tmp_path: Path) -> None:
    text = "DISTRIBUTED_INFERENCE\n2\na -1 1000 ALLREDUCE 64 9 ALLREDUCE 9 9 NONE 0 9\n" \
           "b -1 2000 NONE 0 9 NONE 0 9 NONE 0 9\n"
    convert_text(_write(tmp_path, text), tmp_path / "i", 2, 2)
    # forward only (no IG / WG / WU nodes); the second pass waits for the first one's last node
    assert [(i, name, deps) for i, name, _, deps in _table(_nodes(tmp_path / "i.0.et")[1])] == [
        (0, "a.FWD", []), (1, "a.FWD.ALL_REDUCE", [0]), (2, "b.FWD", [1]),
        (3, "a.FWD", [2]), (4, "a.FWD.ALL_REDUCE", [3]), (5, "b.FWD", [4])]
    fib = HYBRID_2L.replace("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD") \
        .replace("group: 2", "group: 2 checkpoints: 1 1 checkpoint_initiates: 0")
    rep = convert_text(_write(tmp_path, fib, "f.txt"), tmp_path / "f", 4, 1)
    assert any("recomputation" in note for note in rep.notes)
    assert rep.nodes_per_rank[0] == convert_text(_write(tmp_path, HYBRID_2L, "h.txt"), tmp_path / "h", 4,
                                                 1).nodes_per_rank[0]


# ---- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"),
    ("PIPELINE\n1\n", "line 1: unsupported parallelism kind 'PIPELINE'"),
    ("DATA\nx\n", "line 2: layer count 'x' is not an integer"),
    ("DATA\n2\na -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 0\n", "declares 2 layers but has 1"),
    ("DATA\n1\na -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8\n", "line 3: a layer line needs 12 fields"),
    ("DATA\n1\na -1 1 NONE 0 1 NONE 0 1 BROADCAST 8 0\n", "line 3: a: weight-gradient comm type 'BROADCAST'"),
    ("DATA\n1\na -1 1 NONE 0 -4 NONE 0 1 ALLREDUCE 8 0\n", "line 3: a: input-gradient compute cycles is neg"),
    ("HYBRID_DLRM\n3\n" + "a -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n" * 3, "needs the last bottom-MLP layer"),
])
def test_bad_workloads(text: str, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        parse_text(text, "w.txt")


def test_cli_errors_leave_no_output(tmp_path: Path, capsys) -> None:
    bad = _write(tmp_path, "DATA\n1\na -1 1 NONE 0 1 NONE 0\n", "bad.txt")
    assert converter_main(["Text", "--input", str(bad), "--output", str(tmp_path / "o"),
                           "--num-npus", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: line 3" in err and "Traceback" not in err
    good = _write(tmp_path, DATA_2L)
    assert converter_main(["Text", "--input", str(good), "--output", str(tmp_path / "o")]) == 2   # no N
    assert "--num-npus" in capsys.readouterr().err
    assert converter_main(["PyTorch", "--input", str(good), "--output", str(tmp_path / "o"),
                           "--num-npus", "2"]) == 2
    assert converter_main(["Text", "--input_type", "PyTorch", "--input", str(good), "--output",
                           str(tmp_path / "o"), "--num-npus", "2"]) == 2
    assert converter_main(["Text", "--input", str(good), "--output", str(tmp_path / "o"),
                           "--num-npus", "0"]) == 2
    assert converter_main(["Text", "--input", str(good), "--output", str(tmp_path / "nodir" / "o"),
                           "--num-npus", "2"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "w.txt"]


def test_both_command_lines_write_the_same_bytes(tmp_path: Path) -> None:
    w = _write(tmp_path, HYBRID_2L)
    a = subprocess.run([sys.executable, "-m", "chakra.cli.converter", "Text", "--input", str(w), "--output",
                        str(tmp_path / "a"), "--num-npus", "4", "--num-passes", "2"],
                       capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    assert f"wrote {tmp_path / 'a'}.0.et .. {tmp_path / 'a'}.3.et: 4 ranks" in a.stdout
    assert f"wrote {tmp_path / 'a'}.comm_group.json: 4 process groups" in a.stdout
    assert converter_main(["--input_type", "Text", "--input_filename", str(w), "--output_filename",
                           str(tmp_path / "b"), "--num_npus", "4", "--num_passes", "2",
                           "--comm_group", str(tmp_path / "groups.json")]) == 0
    for r in range(4):
        assert (tmp_path / f"a.{r}.et").read_bytes() == (tmp_path / f"b.{r}.et").read_bytes()
    assert (tmp_path / "groups.json").read_bytes() == (tmp_path / "a.comm_group.json").read_bytes()


# ---- the corpus, in the simulator ---------------------------------------------------------------------


def _expected_per_pass(path: Path) -> tuple[str, int, int]:
    """(kind, nodes, collectives) of one DATA / MICRO pass, counted off the text independently."""
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.split()]
    kind, layers = lines[0][0], lines[2:2 + int(lines[1][0])]
    wg_comm = sum(1 for f in layers if f[9] != "NONE" and int(f[10]) > 0)
    if kind == "MICRO":
        return kind, wg_comm, wg_comm
    updates = sum(1 for f in layers if int(f[11]) > 0)
    return kind, 3 * len(layers) - 1 + wg_comm + updates, wg_comm   # FWD, WG, IG (not layer 0)


@needs_astrasim
@pytest.mark.parametrize("name", ["Resnet50_DataParallel", "microAllReduce", "microAllToAll",
                                  "MLP_ModelParallel", "DLRM_HybridParallel", "MLP_HybridParallel_Data_Model",
                                  "MLP_HybridParallel_Model_Data", "Transformer_HybridParallel"])
def test_corpus_workload_runs_in_astrasim(corpus: Path, tmp_path: Path, name: str) -> None:
    src = corpus / "astrasim_text" / f"{name}.txt"
    n, passes = 8, 2
    rep = convert_text(src, tmp_path / name, n, passes, astrasim_safe=True)
    kind = rep.kind
    for f in rep.files:
        _, nodes = _nodes(f)
        assert [n_.id for n_ in nodes] == list(range(len(nodes)))
        assert all(d < n_.id for n_ in nodes for d in n_.data_deps)           # acyclic, no dangling id
        assert not any(n_.type == pb.METADATA_NODE for n_ in nodes)
        assert all(_attrs(n_)["is_cpu_op"][1] is False for n_ in nodes if not n_.name.endswith(".WU"))
    if kind in ("DATA", "MICRO"):
        _, per_pass, coll = _expected_per_pass(src)
        assert rep.nodes_per_rank == [passes * per_pass] * n
        assert rep.comm_nodes_per_rank == [passes * coll] * n
    times = run(rep.prefix, n, rep.comm_group_path)
    assert sorted(times) == list(range(n))
    if rep.comm_group_path is None:
        # one world group, identical graphs on a ring: every rank finishes at the same time
        assert len(set(times.values())) == 1, times
    # the GPU compute of all passes runs one node at a time: a lower bound of every rank's finish time
    assert min(times.values()) >= rep.compute_micros * 1000


@needs_astrasim
def test_the_helper_reports_a_rank_that_never_finishes(tmp_path: Path) -> None:
    from helpers.astrasim import SimulationFailed

    convert_text(_write(tmp_path, DATA_2L), tmp_path / "ok", 2, 1)
    convert_text(_write(tmp_path, DATA_2L.replace("8192", "4000"), "other.txt"), tmp_path / "odd", 2, 1)
    (tmp_path / "ok.1.et").write_bytes((tmp_path / "odd.1.et").read_bytes())   # rank 1: another size
    with pytest.raises(SimulationFailed, match="exit 3, 0/2 ranks finished"):
        run(tmp_path / "ok", 2)
