"""chakra.job.match: which communication nodes of different ranks are one collective (hand-made ranks)."""

from __future__ import annotations

import pytest

from chakra.job.match import Comm, JobMatchError, RankComms, match_job
from chakra.schema import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE

AR, A2A = 0, 6


def coll(pos, size=100, ctype=AR, pg="", seq=None, end=None):
    return Comm(pos=pos, node_id=100 + pos, kind=COMM_COLL_NODE, comm_type=ctype, size=size, pg=pg, seq=seq,
                end=end)


def p2p(pos, kind, peer, size=64):
    return Comm(pos=pos, node_id=100 + pos, kind=kind, comm_type=None, size=size, pg="", peer=peer)


def members(inst):
    return {r: c.pos for r, c in inst.members.items()}


def test_sequence_numbers_decide_when_every_collective_has_one():
    r0 = [coll(0, seq=5), coll(1, seq=6), coll(2, seq=7), coll(3, seq=8)]
    r1 = [coll(0, seq=6), coll(1, seq=7), coll(2, seq=8)]
    m = match_job([RankComms(0, r0), RankComms(1, r1)])
    assert [members(i) for i in m.instances] == [{0: 1, 1: 0}, {0: 2, 1: 1}, {0: 3, 1: 2}]
    assert [(x.rank, x.comm.seq) for x in m.left_out] == [(0, 5)]
    assert "sequence number 5 is not in the trace of rank(s) [1]" in m.left_out[0].reason


@pytest.mark.parametrize("ends1, kept0, dropped0", [
    ((31, 51, 71), [1, 2, 3], 0),    # rank 1's window began one collective later
    ((11, 31, 51), [0, 1, 2], 3),    # rank 1's window ended one collective earlier
])
def test_order_with_trimming_follows_the_end_times(ends1, kept0, dropped0):
    # the same all_reduce every step: only the end times (on the common clock) say which ones are the same
    r0 = [coll(k, end=10 + 20 * k) for k in range(4)]
    r1 = [coll(k, end=e) for k, e in enumerate(ends1)]
    m = match_job([RankComms(0, r0), RankComms(1, r1)])
    assert [members(i) for i in m.instances] == [{0: p, 1: k} for k, p in enumerate(kept0)]
    assert [(x.rank, x.comm.pos) for x in m.left_out] == [(0, dropped0)]
    assert "rank(s) [1] recorded no counterpart" in m.left_out[0].reason
    assert any("kept the 3 matched" in n for n in m.notes)


def test_sizes_outweigh_end_times_that_scatter():
    # gloo records' ends scatter by milliseconds (ddp_mlp_4r): the bucket sizes 71208/33280 alternate, so
    # the unshifted placement (sizes agree) wins although its mean end gap is not the smallest
    sizes = (71208, 33280, 71208, 33280)
    r0 = [coll(k, s, end=e) for k, (s, e) in enumerate(zip(sizes, (0, 4700, 24500, 25400)))]
    r1 = [coll(k, s, end=e) for k, (s, e) in enumerate(zip(sizes, (3800, 7700, 24450, 25400)))]
    m = match_job([RankComms(0, r0), RankComms(1, r1)])
    assert [members(i) for i in m.instances] == [{0: k, 1: k} for k in range(4)] and not m.left_out


def test_one_size_per_collective_the_largest_with_a_note():
    ranks = [RankComms(r, [coll(0, s, A2A)]) for r, s in enumerate((13568, 53248, 13568, 18944))]
    m = match_job(ranks)
    assert m.instances[0].size == 53248
    assert m.notes == ["collective #0 of process group 'world' (all_to_all): comm_size differs across ranks: "
                       "13,568 B on rank(s) [0, 2], 53,248 B on rank(s) [1], 18,944 B on rank(s) [3]; "
                       "using the largest, 53,248 B"]


def test_a_position_whose_types_disagree_is_left_out_on_every_rank():
    r0 = [coll(0), coll(1, ctype=AR), coll(2)]
    r1 = [coll(0), coll(1, ctype=A2A), coll(2)]
    m = match_job([RankComms(0, r0), RankComms(1, r1)])
    assert [members(i) for i in m.instances] == [{0: 0, 1: 0}, {0: 2, 1: 2}]
    assert sorted((x.rank, x.comm.pos) for x in m.left_out) == [(0, 1), (1, 1)]
    assert "the ranks disagree" in m.left_out[0].reason


def test_groups_are_matched_apart_and_one_rank_groups_left_out():
    groups = {"5": (0, 1), "7": (1, 2), "9": (2,)}
    ranks = [RankComms(0, [coll(0, pg="5"), coll(1)], groups),
             RankComms(1, [coll(0, pg="7"), coll(1, pg="5"), coll(2)], groups),
             RankComms(2, [coll(0, pg="7"), coll(1, pg="9"), coll(2)], groups)]
    m = match_job(ranks)
    got = sorted((i.pg, tuple(sorted(members(i).items()))) for i in m.instances)
    assert got == [("", ((0, 1), (1, 2), (2, 2))), ("5", ((0, 0), (1, 1))), ("7", ((1, 0), (2, 0)))]
    assert [(x.rank, x.comm.pos) for x in m.left_out] == [(2, 1)]
    assert "has one rank" in m.left_out[0].reason


def test_unknown_group_is_an_error_or_the_world():
    ranks = [RankComms(0, [coll(0, pg="3")]), RankComms(1, [coll(0)])]
    with pytest.raises(JobMatchError, match="process group '3', which no rank's process-group table lists"):
        match_job(ranks)
    m = match_job(ranks, unknown_group="world")
    assert [members(i) for i in m.instances] == [{0: 0, 1: 0}]


def test_contradicting_orders_across_groups_are_named():
    groups = {"1": (0, 1), "2": (0, 1)}
    r0 = [coll(0, pg="1"), coll(1, pg="2")]
    r1 = [coll(0, pg="2"), coll(1, pg="1")]
    with pytest.raises(JobMatchError, match="contradicting orders.*rank 0 issues collective #0 of process "
                                            "group '1', collective #0 of process group '2'"):
        match_job([RankComms(0, r0, groups), RankComms(1, r1, groups)])


def test_everyone_sends_then_receives_is_no_deadlock():
    # isend/irecv around a ring of two: each rank sends first; a send waits for nobody
    r0 = [p2p(0, COMM_SEND_NODE, 1), p2p(1, COMM_RECV_NODE, 1), coll(2)]
    r1 = [p2p(0, COMM_SEND_NODE, 0), p2p(1, COMM_RECV_NODE, 0), coll(2)]
    m = match_job([RankComms(0, r0), RankComms(1, r1)])
    labels = [i.label for i in m.instances]
    assert sorted(labels) == ["collective #0 of process group 'world'", "send/recv 0->1 tag 0 #0",
                              "send/recv 1->0 tag 0 #0"]
    assert labels[-1] == "collective #0 of process group 'world'"
    pair = next(i for i in m.instances if i.label.startswith("send/recv 0->1"))
    assert members(pair) == {0: 0, 1: 1}


def test_a_send_to_a_rank_outside_the_job_is_left_out():
    m = match_job([RankComms(0, [p2p(0, COMM_SEND_NODE, 5)]), RankComms(1, [])])
    assert m.instances == [] and "its peer rank 5 is not in the job" in m.left_out[0].reason


def _channel(sends: list[tuple[float, float]], recv_ends: list[float], name: str) -> list[RankComms]:
    """Channel 0->1: rank 0's sends (start, end) and rank 1's receives (their ends), µs on one clock."""
    r0 = [Comm(pos=k, node_id=k, kind=COMM_SEND_NODE, comm_type=None, size=1024, pg="", peer=1, start=s,
               end=e, name=f"{name}send") for k, (s, e) in enumerate(sends)]
    r1 = [Comm(pos=k, node_id=k, kind=COMM_RECV_NODE, comm_type=None, size=1024, pg="", peer=0, end=e,
               name=f"{name}recv") for k, e in enumerate(recv_ends)]
    return [RankComms(0, r0), RankComms(1, r1)]


def test_a_gloo_channel_places_a_send_by_its_start_not_its_end():
    """Times (µs) read off real 3-stage gloo pipelines (trace_collection --job pipeline, channel 0->1,
    two profiled steps of 4 micro-batches).  --p2p async: rank 0 isends each micro-batch's activations and
    waits on the sends at the end of the step, so its send records all end there; weighed by those ends
    the matcher shifted the channel by 4 (step 2's sends paired with step 3's receives, 4 of 8 kept).  A
    gloo send's record starts as it is posted: placed by that, every pair is k-th to k-th.  A channel of
    NCCL kernels (which end together) is still placed by its end times."""
    sends = [(9239, 51448), (9943, 51460), (10376, 51475), (10833, 51485),
             (63286, 136671), (64241, 136685), (64819, 136707), (65352, 136718)]
    recv_ends = [11156, 15317, 19381, 23324, 65607, 71537, 80867, 87703]
    m = match_job(_channel(sends, recv_ends, "gloo:"))
    assert m.left_out == []
    assert sorted((members(i)[0], members(i)[1]) for i in m.instances) == [(k, k) for k in range(8)]
    m = match_job(_channel(sends, recv_ends, "nccl:"))   # (not CPU records: placed by the ends)
    assert len(m.instances) == 4 and len(m.left_out) == 8


def test_a_gloo_channel_cut_by_skewed_windows_keeps_the_shared_step():
    """--window-skew 1:1: rank 1 profiles steps 3-4, rank 0 steps 2-3 (blocking send/recv).  The four pairs
    of step 3 are matched (rank 0's sends 4-7 with rank 1's receives 0-3), the rest left out: by order
    alone the channel paired step 2's sends with step 3's receives (+88% on rank 0)."""
    sends = [(1994, 2275), (2754, 2780), (3538, 3716), (4263, 4288),
             (17583, 19171), (19930, 20851), (21582, 22557), (23451, 23486)]
    recv_ends = [18110, 19990, 21651, 23494, 49385, 55646, 56889, 57913]
    m = match_job(_channel(sends, recv_ends, "gloo:"))
    assert sorted((members(i)[0], members(i)[1]) for i in m.instances) == [(4, 0), (5, 1), (6, 2), (7, 3)]
    assert len(m.left_out) == 8


def test_collectives_without_a_group_in_a_job_with_sub_groups_are_flagged():
    """gloo's records name no process group: a pipeline of 2 stages x 2 replicas all-reduces each stage's
    gradients on [0, 2] or [1, 3], but its collectives read pg "" and are matched as the world's (a real
    run: the first stage's ranks replayed +15%).  The matcher says so; a job whose groups are the world or
    one rank (the corpus' tp_like_2r) gets no such note."""
    groups = {"1": (0, 2), "2": (1, 3)}
    m = match_job([RankComms(r, [coll(0), coll(1)], groups if r in (0, 2) else {"2": (1, 3)})
                   for r in range(4)])
    note = [n for n in m.notes if "name no process group" in n]
    assert note == ["8 collective node(s) name no process group (ranks [0, 1, 2, 3]) and are matched as the "
                    "world's, though the job has groups of some of its ranks ([0, 2], [1, 3]): where one ran "
                    "on such a group, its coupling and the ranks' times are wrong (gloo records do not say "
                    "which group they used)"]
    m = match_job([RankComms(r, [coll(0)], {"0": (), "1": (), "2": (0,)}) for r in range(2)])
    assert not [n for n in m.notes if "name no process group" in n]
