"""chakra.replay.api: a whole job's per-rank results, made in one pass over the job's coupled nodes."""

from __future__ import annotations

from chakra.replay.api import _by_rank, replay_job
from chakra.replay.graph import NodeSpec as N
from chakra.schema import COMM_COLL_NODE, METADATA_NODE


def test_by_rank_splits_by_offsets_in_the_order_given():
    # ranks of 3, 0, 2 and 4 nodes: global indices 0-2, 3-4, 5-8
    offsets = [0, 3, 3, 5, 9]
    values = {7: 1.0, 0: 2.0, 4: 3.0, 2: 4.0, 5: 5.0, 3: 6.0}
    assert _by_rank(values, offsets) == [[0, 2], [], [4, 3], [7, 5]]
    assert _by_rank({1: 0.5, 0: 1.5}, [0, 2]) == [[1, 0]]


def test_each_rank_gets_its_own_waits():
    # three ranks, one collective; rank r launches it after 10 + 10 r µs: the collective runs from 30 for
    # 5 µs (the shortest recording); rank 0 waits 20, rank 1 10, rank 2 none.  The trailing op keeps its
    # recorded place on the thread (40, after the collective's end at 35) and ends at 44 on every rank
    def rank(r):
        return [N(1, 10 + 10 * r, start=0),
                N(2, 5 + r, start=10 + 10 * r, deps=[1], is_cpu=False, stream=7, type=COMM_COLL_NODE),
                N(3, 0, type=METADATA_NODE, is_cpu=False),
                N(4, 4, start=40, deps=[2])]

    job = replay_job({r: rank(r) for r in range(3)}, collective="min")
    assert [job.ranks[r].comm_wait for r in range(3)] == [{2: 20.0}, {2: 10.0}, {2: 0.0}]
    assert [job.ranks[r].replayed_us for r in range(3)] == [44.0, 44.0, 44.0]
    assert job.replayed_us == 44.0


def test_the_groups_as_rank_and_node_id_are_made_when_asked(monkeypatch):
    # the job above: one collective, node 2 of each rank; its (rank, id) list is made on first access
    # only (a tuple per member of a thousand-rank job is ~60 bytes a node), once
    from chakra.replay import api

    def rank(r):
        return [N(1, 10 + 10 * r, start=0),
                N(2, 5 + r, start=10 + 10 * r, deps=[1], is_cpu=False, stream=7, type=COMM_COLL_NODE)]

    calls = []
    real = api._coupled_ids
    monkeypatch.setattr(api, "_coupled_ids", lambda *a: calls.append(1) or real(*a))
    job = replay_job({r: rank(r) for r in range(3)}, collective="min")
    assert calls == []
    assert job.groups_members == [[(0, 2), (1, 2), (2, 2)]]
    assert job.groups_members is job.groups_members and calls == [1]
