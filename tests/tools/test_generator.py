"""`chakra_generator`: what each synthetic workload holds (worked out by hand) and that every output runs
to completion in the real simulator (skipped where ../shared/astra-sim is absent)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from helpers.astrasim import needs_astrasim, run

from chakra import schema as pb
from chakra.cli.generator import main as generator_main
from chakra.errors import UsageError
from chakra.io import read_messages
from chakra.tools.generator import GenSpec, generate, parse_size, size_label


def _nodes(path: str | Path) -> list[pb.Node]:
    return read_messages(path, pb.GlobalMetadata, pb.Node)[1]


def _attr(node: pb.Node, name: str) -> object:
    return next(pb.attr_value(a) for a in node.attr if a.name == name)


def test_sizes() -> None:
    assert [parse_size(s) for s in ("65536", "64K", "64KiB", "1M", "1mib", "2G", "1000")] == \
        [65536, 65536, 65536, 1 << 20, 1 << 20, 2 << 30, 1000]
    assert [size_label(n) for n in (65536, 1 << 20, 3 << 30, 1000, 1536)] == \
        ["64KiB", "1MiB", "3GiB", "1000B", "1536B"]
    for bad in ("", "1.5M", "12 parsecs", "0"):
        with pytest.raises(UsageError):
            parse_size(bad)


def test_collectives_one_node_per_file(tmp_path: Path) -> None:
    spec = GenSpec(num_npus=4, workloads=["collectives"], collectives=["all_to_all", "reduce_scatter"],
                   sizes=[1000, 1 << 20])
    out = generate(spec, tmp_path / "g")
    assert [g.prefix for g in out] == [str(tmp_path / f"g_{n}") for n in
                                       ("all_to_all_1000B", "all_to_all_1MiB", "reduce_scatter_1000B",
                                        "reduce_scatter_1MiB")]
    for rank in range(4):
        (node,) = _nodes(tmp_path / f"g_reduce_scatter_1MiB.{rank}.et")
        assert (node.type, _attr(node, "comm_type"), _attr(node, "comm_size"), _attr(node, "pg_name"),
                _attr(node, "is_cpu_op")) == (pb.COMM_COLL_NODE, pb.REDUCE_SCATTER, 1 << 20, "0", False)


def test_dp_and_tp_steps_by_hand(tmp_path: Path) -> None:
    spec = GenSpec(num_npus=4, workloads=["dp", "tp"], layers=2, steps=2, compute_us=7, comm_bytes=4096,
                   tp_size=2)
    dp, tp = generate(spec, tmp_path)   # an existing folder: files go inside it
    # dp, per step: FWD x2, then layer1 WG + all-reduce + IG, layer0 WG + all-reduce -> 7 nodes, 2 all-reduces
    assert (dp.prefix, dp.nodes_per_rank, dp.comm_nodes_per_rank, dp.comm_group) == \
        (str(tmp_path / "dp"), 14, 4, None)
    nodes = _nodes(tmp_path / "dp.3.et")
    assert [n.name for n in nodes[:7]] == ["layer0.FWD", "layer1.FWD", "layer1.WG", "layer1.WG.ALL_REDUCE",
                                          "layer1.IG", "layer0.WG", "layer0.WG.ALL_REDUCE"]
    assert {n.duration_micros for n in nodes if n.type == pb.COMP_NODE} == {7}
    assert list(nodes[7].data_deps) == [6]   # step 2's first forward waits for layer 0's all-reduce
    # tp (groups of 2, data parallel across them), per step: FWD + its all-reduce (as reduce-scatter +
    # all-gather, the simulator-safe form) x2 layers = 6; IG x2 + layer1's all-reduce (2); WG x2 + their
    # data-parallel all-reduces (2) -> 14 nodes, 8 collectives
    assert (tp.nodes_per_rank, tp.comm_nodes_per_rank) == (28, 16)
    assert orjson.loads(Path(tp.comm_group).read_bytes()) == {"1": [0, 1], "2": [2, 3], "3": [0, 2],
                                                              "4": [1, 3]}
    for rank in range(4):
        by_group: dict[str, set[int]] = {}
        for n in _nodes(tmp_path / f"tp.{rank}.et"):
            if n.type == pb.COMM_COLL_NODE:
                by_group.setdefault(_attr(n, "pg_name"), set()).add(_attr(n, "comm_type"))
        assert by_group == {str(1 + rank // 2): {pb.REDUCE_SCATTER, pb.ALL_GATHER},
                            str(3 + rank % 2): {pb.ALL_REDUCE}}


def test_basic_and_errors(tmp_path: Path) -> None:
    out = generate(GenSpec(num_npus=1, workloads=["basic"], compute_us=3), tmp_path / "b")
    assert [(g.name, g.nodes_per_rank) for g in out] == [
        ("one_comp_node", 1), ("two_comp_nodes_independent", 2), ("two_comp_nodes_dependent", 2)]
    dep = _nodes(tmp_path / "b_two_comp_nodes_dependent.0.et")
    assert [(n.id, list(n.data_deps), n.duration_micros) for n in dep] == [(0, [], 3), (1, [0], 3)]
    for spec, msg in ((GenSpec(num_npus=1), "at least 2 ranks"),
                      (GenSpec(workloads=["pipeline"]), "unknown workload"),
                      (GenSpec(collectives=["broadcast"]), "unknown collective"),
                      (GenSpec(workloads=["tp"], tp_size=3), "divide"),
                      (GenSpec(layers=0), "--layers")):
        with pytest.raises(UsageError, match=msg):
            generate(spec, tmp_path / "x")
    assert not list(tmp_path.glob("x_*"))


def test_cli_reference_options_and_subcommand(tmp_path: Path, capsys) -> None:
    # the reference generator's command line
    assert generator_main(["--num_npus", "2", "--default_runtime", "5", "--default_comm_size", "65536",
                           "--workloads", "collectives,basic", "-o", str(tmp_path / "ref")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'ref'}_all_reduce_64KiB.{{0..1}}.et  1 nodes per rank (1 collectives)" in out
    assert len(out.splitlines()) == 4 + 3
    assert _nodes(tmp_path / "ref_one_comp_node.1.et")[0].duration_micros == 5
    r = subprocess.run([sys.executable, "-m", "chakra.cli.main", "generate", "--workloads", "dp", "--layers",
                        "1", "-o", str(tmp_path / "sub") + "/"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "sub" / "dp.7.et").is_file()   # the folder is made; 8 ranks by default
    assert generator_main(["--workloads", "nope", "-o", str(tmp_path / "z")]) == 2
    assert generator_main(["--sizes", "lots", "-o", str(tmp_path / "z")]) == 2
    assert generator_main(["-o", str(tmp_path / "missing" / "deeper") + "/"]) == 2
    assert "parent does not exist" in capsys.readouterr().err


@needs_astrasim
def test_every_output_runs_in_astrasim(tmp_path: Path) -> None:
    n = 4
    spec = GenSpec(num_npus=n, sizes=[1 << 16, 1 << 20], layers=3, steps=2, compute_us=10,
                   comm_bytes=1 << 20, tp_size=2)
    written = generate(spec, tmp_path)
    assert len(written) == 4 * 2 + 3 + 2
    times = {g.name: run(g.prefix, n, g.comm_group) for g in written}
    for g in written:
        assert len(set(times[g.name].values())) == 1, (g.name, times[g.name])   # symmetric workloads
    t = {name: ts[0] for name, ts in times.items()}
    # compute-only graphs: one GPU compute node at a time, 10 us each
    assert (t["one_comp_node"], t["two_comp_nodes_independent"], t["two_comp_nodes_dependent"]) == \
        (10_000, 20_000, 20_000)
    for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert t[f"{c}_1MiB"] > t[f"{c}_64KiB"] > 0
    # a step is at least its compute: 2 steps x (3 FWD + 3 WG + 2 IG) x 10 us
    assert t["dp"] >= 2 * 8 * 10_000


def _durations(path: Path) -> list[tuple[int, int]]:
    from chakra.io import read_messages

    _, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    return [(n.type, n.duration_micros) for n in nodes]


def test_jitter_makes_every_rank_its_own(tmp_path: Path) -> None:
    """--jitter 10: each compute node of every rank lasts 100 us x a factor in [0.9, 1.1] of its own (no two
    ranks alike), collectives untouched; the same seed gives the same files, another seed other ones."""
    spec = GenSpec(num_npus=4, workloads=["dp"], layers=6, steps=2, compute_us=100, jitter_pct=10.0, seed=7)
    generate(spec, f"{tmp_path}/a/")
    generate(spec, f"{tmp_path}/b/")
    generate(GenSpec(num_npus=4, workloads=["dp"], layers=6, steps=2, compute_us=100), f"{tmp_path}/plain/")
    ranks = [_durations(tmp_path / "a" / f"dp.{r}.et") for r in range(4)]
    plain = _durations(tmp_path / "plain" / "dp.0.et")
    for r in range(4):
        assert (tmp_path / "a" / f"dp.{r}.et").read_bytes() == (tmp_path / "b" / f"dp.{r}.et").read_bytes()
        assert [t for t, _ in ranks[r]] == [t for t, _ in plain]
        for (t, d), (_, d0) in zip(ranks[r], plain):
            if t == pb.COMP_NODE and d0:
                assert round(0.9 * d0) <= d <= round(1.1 * d0)
            else:
                assert d == d0
    comp = [[d for t, d in rk if t == pb.COMP_NODE] for rk in ranks]
    assert len({tuple(c) for c in comp}) == 4                     # no two ranks alike
    assert len(set(comp[0])) > 5                                  # a factor per node, not per rank
    generate(GenSpec(num_npus=4, workloads=["dp"], layers=6, steps=2, compute_us=100, jitter_pct=10.0,
                     seed=8), f"{tmp_path}/c/")
    assert _durations(tmp_path / "c" / "dp.0.et") != ranks[0]


@pytest.mark.slow
def test_the_generator_holds_one_rank_at_a_time(tmp_path: Path) -> None:
    """The peak of Python allocations while writing 64 ranks is about that of writing 8 (each rank is built,
    written and dropped before the next; held together they would take 8 times as much)."""
    import tracemalloc

    def peak(n: int) -> int:
        tracemalloc.start()
        generate(GenSpec(num_npus=n, workloads=["tp"], layers=400, steps=1, tp_size=4), f"{tmp_path}/n{n}/")
        p = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return p

    small, large = peak(8), peak(64)
    assert large < 1.2 * small, (small, large)


def test_jitter_must_be_a_percentage(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--jitter"):
        generate(GenSpec(num_npus=2, workloads=["dp"], jitter_pct=100.0), f"{tmp_path}/x/")
