"""chakra.replay.instep: a job in step is coupled on its columns into exactly the groups, order, labels and
durations ``match_job`` gives; a job it does not recognise is left to ``match_job``.

The jobs are built by hand: 4 ranks, two tensor-parallel groups (ranks 0-1, 2-3) and two data-parallel
groups (0-2, 1-3), each rank issuing a collective of each of its groups per layer (a generated job's shape),
then an all-to-all on the world."""

from __future__ import annotations

import random

import pytest

from chakra.replay import coupling as coupling_mod
from chakra.replay import instep
from chakra.replay.api import replay_job
from chakra.replay.coupling import build_coupling
from chakra.replay.engine import _resolve_deps, _topo_order
from chakra.replay.graph import NodeSpec, RankGraph, ReplayError, graph_from_specs
from chakra.schema import COMM_COLL_NODE, COMM_SEND_NODE

GROUPS = {"tp0": (0, 1), "tp1": (2, 3), "dp0": (0, 2), "dp1": (1, 3)}


def _rank(r: int, layers: int = 3, swap_at: int | None = None, seed: int = 0) -> RankGraph:
    rnd = random.Random(seed * 10 + r)
    tp, dp = f"tp{r // 2}", f"dp{r % 2}"
    specs: list[NodeSpec] = []
    nid = 0

    def add(**kw: object) -> None:
        nonlocal nid
        nid += 1
        specs.append(NodeSpec(id=nid, deps=(nid - 1,) if nid > 1 else (), is_cpu=False, lane=("gpu", 0, 0),
                              **kw))  # type: ignore[arg-type]

    for layer in range(layers):
        add(duration=10.0 + rnd.random())
        pair = [("tp", tp, 4096 * (layer + 1)), ("dp", dp, 1024)]
        if swap_at == layer:
            pair.reverse()
        for _kind, pg, size in pair:
            add(duration=0.0 if r % 2 else 3.0 + r, type=COMM_COLL_NODE, pg_name=pg, comm_type=0,
                comm_size=size)
    add(duration=2.0, type=COMM_COLL_NODE, pg_name="", comm_type=6, comm_size=64)
    return graph_from_specs(specs, rank=r, world_size=4, process_groups=GROUPS)


def _couple(graphs: list[RankGraph]) -> tuple[list[list[int]], list[float], list[str], list[int], list[int]]:
    offsets = [0]
    for g in graphs:
        offsets.append(offsets[-1] + len(g.ids))
    orders = [_topo_order(g, _resolve_deps(g, "error")) for g in graphs]
    durations = [d for g in graphs for d in g.durations]
    c, group_of = build_coupling(graphs, [g.rank or 0 for g in graphs], offsets, orders, durations)
    return c.members, c.dur, c.label, c.eager, list(group_of)


def test_a_job_in_step_is_coupled_on_its_columns_as_match_job_couples_it(monkeypatch):
    graphs = [_rank(r) for r in range(4)]
    offsets, orders = _offsets_orders(graphs)
    assert instep.couple_in_step(graphs, [0, 1, 2, 3], offsets, orders, [0.0] * offsets[-1]) is not None
    fast = _couple(graphs)
    members, dur, labels, eager, group_of = fast
    # 3 layers x (2 tp + 2 dp groups) + 1 world collective, each with one node per member rank
    assert len(members) == 13
    # 10 nodes a rank: rank 0's 1 = tp0 #0, 2 = dp0 #0; rank 1's (offset 10) 11 = tp0 #0; rank 2's
    # (offset 20) 21 = tp1 #0, 22 = dp0 #0; rank 3's 31 = tp1 #0; instances numbered by (group name, k):
    # the world's, dp0, dp1, tp0 (7-9), tp1 (10-12); ready first: tp0 #0 and tp1 #0, the lowest goes first
    assert members[:3] == [[1, 11], [21, 31], [2, 22]]
    assert labels[:3] == ["collective #0 of process group 'tp0'", "collective #0 of process group 'tp1'",
                          "collective #0 of process group 'dp0'"]
    assert labels[-1] == "collective #0 of process group 'world'"
    assert members[-1] == [9, 19, 29, 39]
    assert dur[2] == 3.0                         # dp0 #0: ranks 0 and 2 recorded 3 and 5 us
    assert dur[0] == 0.0                         # tp0 #0: rank 1 recorded none
    assert group_of[22] == 2 and group_of[0] == -1
    assert eager == [-1] * 13
    monkeypatch.setattr(coupling_mod, "couple_in_step", lambda *a: None)
    assert _couple(graphs) == fast               # match_job: the same groups, order, labels, durations


def test_job_replay_in_step_equals_the_match_job_replay(monkeypatch):
    graphs = {r: _rank(r, layers=5, seed=2) for r in range(4)}
    fast = replay_job(graphs)
    monkeypatch.setattr(coupling_mod, "couple_in_step", lambda *a: None)
    slow = replay_job({r: _rank(r, layers=5, seed=2) for r in range(4)})
    assert fast.groups == slow.groups == 21
    assert fast.groups_members == slow.groups_members
    for a, b in zip(fast, slow):
        assert a.starts == b.starts and a.ends == b.ends and a.comm_wait == b.comm_wait


def _offsets_orders(graphs: list[RankGraph]) -> tuple[list[int], list]:
    offsets = [0]
    for g in graphs:
        offsets.append(offsets[-1] + len(g.ids))
    return offsets, [_topo_order(g, _resolve_deps(g, "error")) for g in graphs]


@pytest.mark.parametrize("change", ["seq", "send", "short", "size", "timed", "unknown pg"])
def test_what_match_job_must_repair_is_left_to_it(change):
    graphs = [_rank(r) for r in range(4)]
    g = graphs[1]
    last = max(g.comm)
    if change == "seq":
        g.comm[last].seq = 7   # type: ignore[index]
    elif change == "send":
        g.types[last] = COMM_SEND_NODE   # type: ignore[index]
    elif change == "short":
        g.comm.pop(max(i for i, info in g.comm.items() if info.pg_name == "dp1"))  # type: ignore[attr-defined]
    elif change == "size":
        g.extra["comm_size"][last] = 65   # type: ignore[index]
    elif change == "timed":
        g.measured_start_us = 0.0
        g.starts[last] = 5.0
    else:
        g.comm[last].pg_name = "nobody"   # type: ignore[index]
    offsets, orders = _offsets_orders(graphs)
    durations = [d for x in graphs for d in x.durations]
    assert instep.couple_in_step(graphs, [0, 1, 2, 3], offsets, orders, durations) is None


def test_contradicting_issue_orders_are_explained_by_match_job():
    # rank 0 issues dp0 before tp0 in layer 1, rank 1 issues tp0 first, rank 2 dp0 first: rank 0 waits
    # in dp0 for rank 2, ... fine; but rank 0 swapped and rank 1 not: tp0 #1 (0, 1) after dp0 #1 on rank
    # 0, dp0 #1 (0, 2) after tp1 #1 on rank 2, tp1 ... a cycle only when the swaps close one: swap on 0
    # and 3, so tp0 #1 waits for dp0 #1 (rank 0), dp0 #1 for tp1 #1 (rank 2), tp1 #1 for dp1 #1 (rank 3
    # swapped), dp1 #1 for tp0 #1 (rank 1)
    graphs = [_rank(r, swap_at=1 if r in (0, 3) else None) for r in range(4)]
    offsets, orders = _offsets_orders(graphs)
    durations = [d for x in graphs for d in x.durations]
    assert instep.couple_in_step(graphs, [0, 1, 2, 3], offsets, orders, durations) is None
    with pytest.raises(ReplayError, match="contradicting orders"):
        build_coupling(graphs, [0, 1, 2, 3], offsets, orders, durations)


def test_a_generated_job_takes_the_column_paths_and_replays_as_match_job_replays_it(tmp_path, monkeypatch):
    """The generator's files (ids 0..n-1, untimed collectives in tensor- and data-parallel groups) take both
    short paths: dependencies read as indices without an id table, coupling on the columns; the replay is
    the one the id table and match_job give."""
    from chakra.replay import engine
    from chakra.replay.api import load_job
    from chakra.tools.generator import GenSpec, generate

    generate(GenSpec(num_npus=16, workloads=["tp"], tp_size=8, layers=3, steps=2, compute_us=100,
                     jitter_pct=10.0, seed=1), f"{tmp_path}/")
    files = [str(tmp_path / f"tp.{r}.et") for r in range(16)]
    groups = str(tmp_path / "tp.comm_group.json")
    graphs = load_job(files)
    for g in graphs:
        assert engine._ids_are_indices(g)
        index = {nid: i for i, nid in enumerate(g.ids)}
        assert engine._resolve_deps(g, "error") == [tuple(index[d] for d in row) for row in g.deps]
    shifted = load_job(files[:1])[0]
    shifted.ids = list(shifted.ids)              # (a hand-made graph: the id table)
    assert not engine._ids_are_indices(shifted)
    took: list[bool] = []
    real = coupling_mod.couple_in_step

    def spy(*a: object) -> object:
        out = real(*a)  # type: ignore[arg-type]
        took.append(out is not None)
        return out

    monkeypatch.setattr(coupling_mod, "couple_in_step", spy)
    fast = replay_job(files, comm_groups=groups)
    assert took == [True] and fast.groups > 0
    monkeypatch.setattr(coupling_mod, "couple_in_step", lambda *a: None)
    monkeypatch.setattr(engine, "_ids_are_indices", lambda g: False)
    slow = replay_job(files, comm_groups=groups)
    assert fast.groups == slow.groups and fast.groups_members == slow.groups_members
    assert fast.replayed_us == slow.replayed_us
    for a, b in zip(fast, slow):
        assert a.starts == b.starts and a.ends == b.ends and a.comm_wait == b.comm_wait


@pytest.mark.parametrize("change", ["no comm_type", "float sizes"])
def test_types_and_sizes_read_as_match_job_reads_them(change, monkeypatch):
    # a collective without comm_type is "no type" on every rank (in step); a float size its int
    graphs = [_rank(r) for r in range(4)]
    for g in graphs:
        if change == "no comm_type":
            del g.extra["comm_type"]
        else:
            g.extra["comm_size"] = {i: float(s) for i, s in g.extra["comm_size"].items()}
    offsets, orders = _offsets_orders(graphs)
    assert instep.couple_in_step(graphs, [0, 1, 2, 3], offsets, orders, [0.0] * offsets[-1]) is not None
    fast = _couple(graphs)
    monkeypatch.setattr(coupling_mod, "couple_in_step", lambda *a: None)
    assert _couple(graphs) == fast
