"""Replay engine: hand-built graphs whose replayed times were worked out by hand."""

from __future__ import annotations

import json
import random

import pytest
from helpers.et_nodes import pb_node, rank_nodes, write_rank

from chakra.io.naming import rank_from_filename
from chakra.replay import (
    NodeSpec,
    ReplayError,
    load_graph,
    replay_file,
    replay_job,
    replay_nodes,
    replay_rank,
    timeline,
)
from chakra.schema import (
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    METADATA_NODE,
)

N = NodeSpec


def times(res):
    return res.node_times()


# ---------------------------------------------------------------- single rank, lanes


def test_chain_on_one_thread():
    res = replay_nodes([N(1, 10), N(2, 5, deps=[1]), N(3, 7, deps=[2])])
    assert times(res) == {1: (0, 10), 2: (10, 15), 3: (15, 22)}
    assert res.replayed_us == 22


def test_two_threads_in_parallel_then_join():
    # thread 1: A(10); thread 2: B(20); C on thread 1 needs both -> starts at 20
    res = replay_nodes([N(1, 10, tid=1), N(2, 20, tid=2), N(3, 5, deps=[1, 2], tid=1)])
    assert times(res) == {1: (0, 10), 2: (0, 20), 3: (20, 25)}
    assert res.replayed_us == 25


def test_same_thread_runs_one_op_at_a_time_even_without_deps():
    res = replay_nodes([N(1, 10, start=0), N(2, 4, start=11)], gaps=False)
    assert times(res) == {1: (0, 10), 2: (10, 14)}


def test_gpu_stream_waits_for_its_launcher_and_for_the_stream():
    # CPU: L1 0-5, L2 5-10; K1 (needs L1) 5-35; K2 (needs L2, ready at 10) waits for the stream -> 35-45
    res = replay_nodes([
        N(1, 5, start=0), N(2, 5, start=5),
        N(3, 30, deps=[1], is_cpu=False, stream=7, start=6),
        N(4, 10, deps=[2], is_cpu=False, stream=7, start=36),
    ])
    assert times(res) == {1: (0, 5), 2: (5, 10), 3: (5, 35), 4: (35, 45)}
    assert res.replayed_us == 45


def test_two_gpu_streams_overlap():
    res = replay_nodes([
        N(1, 5), N(2, 30, deps=[1], is_cpu=False, stream=7), N(3, 30, deps=[1], is_cpu=False, stream=8),
    ])
    assert times(res)[2] == (5, 35) and times(res)[3] == (5, 35)


def test_metadata_nodes_take_no_time_and_no_lane():
    res = replay_nodes([N(1, 0, type=METADATA_NODE), N(2, 10, deps=[1]),
                        N(3, 0, type=METADATA_NODE, deps=[2]), N(4, 3, deps=[3])])
    assert times(res) == {1: (0, 0), 2: (0, 10), 3: (10, 10), 4: (10, 13)}


# ---------------------------------------------------------------- gaps


def nested_thread():
    # P [0,100] inclusive, exclusive 40; children A [10,40] and B [50,80]; idle 100..130; Q [130,140].
    return [
        N(1, 40, start=0),
        N(2, 30, start=10, deps=[1]),
        N(3, 30, start=50, deps=[1]),
        N(4, 10, start=130),
    ]


def test_gaps_between_top_level_ops_are_kept_and_nesting_adds_none():
    res = replay_nodes(nested_thread(), measured_us=140)
    # P runs its leading segment [0,10]; its other 30 µs of exclusive time (between A and B, after B)
    # and the 30 µs of idle time before Q are gaps: the thread replays exactly as recorded
    assert times(res) == {1: (0, 10), 2: (10, 40), 3: (50, 80), 4: (130, 140)}
    assert res.replayed_us == 140
    assert res.error_pct == 0


def test_a_delay_shifts_the_rest_of_the_thread_but_keeps_its_gaps():
    # per rank: L launches collective C; A (recorded 5 µs after C ended) needs C; B follows A after 5 µs
    def rank(launch):
        return [N(1, launch, start=0),
                N(2, 10, start=launch, deps=[1], is_cpu=False, stream=7, type=COMM_COLL_NODE),
                N(3, 5, start=launch + 15, deps=[2]), N(4, 5, start=launch + 25)]

    assert times(replay_nodes(rank(10))) == {1: (0, 10), 2: (10, 20), 3: (25, 30), 4: (35, 40)}
    # whole job: rank 1 launches at 30, so C runs [30,40] on both ranks. Rank 0's A: its thread allows
    # 10 + 15 = 25, C ends at 40 -> [40,45]; B keeps its 5 µs gap -> [50,55]
    job = replay_job({0: rank(10), 1: rank(30)}, collective="min")
    assert times(job.ranks[0]) == {1: (0, 10), 2: (10, 40), 3: (40, 45), 4: (50, 55)}
    assert times(job.ranks[1]) == {1: (0, 30), 2: (30, 40), 3: (45, 50), 4: (55, 60)}
    assert job.ranks[0].comm_wait == {2: 20}


def test_asynchronous_record_on_a_host_thread_does_not_block_it():
    # a gloo-style collective record on the calling thread: the thread goes on 5 µs after it starts (op 3,
    # chained after it by a dependency the recording contradicts); op 4 (recorded after the record
    # ended) really waits for it
    def rank(launch):
        return [N(1, launch, start=0, tid=1),
                N(2, 100, start=launch, deps=[1], is_cpu=False, type=COMM_COLL_NODE, lane=("cpu", 1)),
                N(3, 5, start=launch + 5, deps=[2], tid=1),
                N(4, 5, start=launch + 110, deps=[2], tid=1)]

    assert times(replay_nodes(rank(10))) == {1: (0, 10), 2: (10, 110), 3: (15, 20), 4: (120, 125)}
    # whole job: rank 1 arrives at 40, the collective runs [40,140]; rank 0's op 3 still runs at 15,
    # op 4 waits for the collective
    job = replay_job({0: rank(10), 1: rank(40)}, collective="min")
    assert times(job.ranks[0]) == {1: (0, 10), 2: (10, 140), 3: (15, 20), 4: (140, 145)}
    assert times(job.ranks[1]) == {1: (0, 40), 2: (40, 140), 3: (45, 50), 4: (150, 155)}


def test_kernel_starting_before_its_launch_call_returned():
    # K recorded [8,30] while its launcher L ran [0,10]: K may start 8 µs after L starts, not after L ends
    res = replay_nodes([N(1, 10, start=0), N(2, 22, start=8, deps=[1], is_cpu=False, stream=1)])
    assert times(res)[2] == (8, 30)


def test_a_synchronize_does_not_count_its_wait_twice():
    # L launches collective C (recorded [10,40]); S = cudaStreamSynchronize recorded [12,42] blocked on C,
    # with 2 µs of its own after C ended; X follows at 42
    def rank(launch):
        return [N(1, launch, start=0),
                N(2, 30, start=launch, deps=[1], is_cpu=False, stream=7, type=COMM_COLL_NODE),
                N(3, 30, start=launch + 2, deps=[2]), N(4, 5, start=launch + 32)]

    alone = replay_nodes(rank(10))
    assert times(alone) == {1: (0, 10), 2: (10, 40), 3: (12, 42), 4: (42, 47)}
    # whole job: rank 1 launches at 30, so C runs [30,60] on both ranks; rank 0's synchronize starts
    # when its thread gets there (12) and ends 2 µs after C: 62 -- not 60 + 30
    job = replay_job({0: rank(10), 1: rank(30)}, collective="min")
    assert times(job.ranks[0])[3] == (12, 62) and times(job.ranks[0])[4] == (62, 67)
    assert times(job.ranks[1])[3] == (32, 62)


def test_no_gaps_mode_packs_the_ops():
    res = replay_nodes(nested_thread(), gaps=False, measured_us=140)
    # ops back to back, each its whole exclusive time: P 40 (before its children), A, B, Q; only the
    # 30 µs of idle time before Q are gone
    assert times(res) == {1: (0, 40), 2: (40, 70), 3: (70, 100), 4: (100, 110)}
    assert res.replayed_us == 110
    assert res.error_pct == pytest.approx(-100 * 30 / 140)


def test_first_op_of_a_thread_keeps_its_offset_from_the_window_start():
    res = replay_nodes([N(1, 10, tid=1, start=0), N(2, 5, tid=2, start=25)])
    assert times(res)[2] == (25, 30)
    no_gaps = replay_nodes([N(1, 10, tid=1, start=0), N(2, 5, tid=2, start=25)], gaps=False)
    assert no_gaps.node_times()[2] == (0, 5)


def test_gpu_streams_get_no_gaps():
    res = replay_nodes([N(1, 5), N(2, 5, deps=[1], is_cpu=False, start=100)])
    assert times(res)[2] == (5, 10)


# ---------------------------------------------------------------- lane order


def test_lane_order_follows_recorded_start_not_id():
    res = replay_nodes([N(1, 10, start=20), N(2, 5, start=0)], gaps=False)
    assert times(res) == {2: (0, 5), 1: (5, 15)}


def test_timestamps_contradicting_dependencies_cannot_deadlock_a_lane():
    # node 2 recorded first but depends on node 1 on the same thread: dependency wins
    res = replay_nodes([N(1, 10, start=50), N(2, 5, start=0, deps=[1])])
    assert times(res)[2][0] >= 10
    assert res.replayed_us == times(res)[2][1]


# ---------------------------------------------------------------- astrasim rule


def test_astrasim_mode_serialises_cpu_ops_of_different_threads():
    specs = [N(1, 10, tid=1), N(2, 20, tid=2)]
    assert replay_nodes(specs).replayed_us == 20
    res = replay_nodes(specs, mode="astrasim")
    assert times(res) == {1: (0, 10), 2: (10, 30)}


def test_astrasim_mode_one_compute_one_comm_one_cpu_op_at_a_time_lowest_id_first():
    specs = [
        N(10, 10, tid=1),                                                 # CPU
        N(3, 4, tid=2),                                                   # CPU, lower id: first
        N(4, 15, is_cpu=False, stream=1),                                 # GPU compute
        N(6, 5, is_cpu=False, stream=2),                                  # GPU compute, waits for 4
        N(5, 7, is_cpu=False, stream=3, type=COMM_COLL_NODE),             # GPU comm, concurrent
    ]
    res = replay_nodes(specs, mode="astrasim")
    assert times(res) == {3: (0, 4), 10: (4, 14), 4: (0, 15), 6: (15, 20), 5: (0, 7)}
    assert res.replayed_us == 20
    assert res.gaps is False


def test_astrasim_mode_lowest_ready_id_not_lowest_id():
    # node 2 becomes ready only at 5; node 7 is alone and ready at 0, so it runs first
    specs = [N(1, 5, is_cpu=False), N(2, 3, deps=[1]), N(7, 4)]
    res = replay_nodes(specs, mode="astrasim")
    assert times(res) == {1: (0, 5), 7: (0, 4), 2: (5, 8)}


def test_unknown_mode_is_an_error():
    with pytest.raises(Exception, match="unknown replay mode"):
        replay_nodes([N(1, 1)], mode="ticks")


# ---------------------------------------------------------------- errors


def test_cycle_is_reported_with_its_nodes():
    specs = [N(1, 1, deps=[3]), N(2, 1, deps=[1]), N(3, 1, deps=[2]), N(4, 1, deps=[3]), N(5, 1)]
    with pytest.raises(ReplayError) as exc:
        replay_nodes(specs)
    msg = str(exc.value)
    assert "dependency cycle: node 1 -> 3 -> 2 -> 1" in msg
    assert "4 node(s) can never start: 1, 2, 3, 4" in msg


def test_self_dependency_is_a_cycle():
    with pytest.raises(ReplayError, match="node 7 -> 7"):
        replay_nodes([N(7, 1, deps=[7])])


def test_missing_dependency_is_reported_or_dropped():
    specs = [N(1, 5), N(2, 5, deps=[1, 99])]
    pattern = "1 dependencies point to 1 node id.*99.*node 2 depends on missing node 99"
    with pytest.raises(ReplayError, match=pattern):
        replay_nodes(specs)
    res = replay_nodes(specs, missing="ignore")
    assert times(res)[2] == (5, 10)


def test_duplicate_dependencies_count_once():
    res = replay_nodes([N(1, 5), N(2, 5, deps=[1, 1, 1])])
    assert times(res)[2] == (5, 10)


def test_result_does_not_depend_on_input_order():
    rng = random.Random(7)
    specs = []
    for i in range(1, 300):
        deps = rng.sample(range(1, i), k=min(i - 1, rng.randint(0, 3))) if i > 1 else []
        specs.append(N(i, rng.randint(0, 20), deps=deps, tid=rng.randint(0, 2), is_cpu=rng.random() < 0.7,
                       stream=rng.randint(0, 1), start=rng.randint(0, 500)))
    ref = replay_nodes(specs).node_times()
    shuffled = specs[:]
    rng.shuffle(shuffled)
    assert replay_nodes(shuffled).node_times() == ref
    ref_a = replay_nodes(specs, mode="astrasim").node_times()
    assert replay_nodes(shuffled, mode="astrasim").node_times() == ref_a


def random_specs(seed, timed):
    rng = random.Random(seed)
    return [N(i, rng.randint(1, 9),
              deps=rng.sample(range(max(1, i - 20), i), k=min(i - 1, 2)) if i > 1 else [],
              tid=rng.randint(0, 3), is_cpu=rng.random() < 0.5, stream=rng.randint(0, 2),
              start=rng.randint(0, 1000) if timed else 0) for i in range(1, 500)]


def test_every_node_waits_for_all_its_dependencies():
    # without timestamps (and in astrasim mode) every node runs its recorded duration after its deps
    for mode, specs in (("lanes", random_specs(3, False)), ("astrasim", random_specs(3, True))):
        t = replay_nodes(specs, mode=mode).node_times()
        for s in specs:
            start, end = t[s.id]
            assert end - start == s.duration
            for d in s.deps:
                assert start >= t[d][1]
    # with timestamps a node may start before a dependency it was recorded overlapping, never before the
    # dependency started; a dependency recorded as finished before the node started is a start dependency
    specs = random_specs(4, True)
    by_id = {s.id: s for s in specs}
    t = replay_nodes(specs).node_times()
    for s in specs:
        start, end = t[s.id]
        assert 0 <= end - start
        for d in s.deps:
            assert start >= t[d][0]
            if by_id[d].start + by_id[d].duration <= s.start:
                assert start >= t[d][1]


# ---------------------------------------------------------------- whole job


def two_rank_collective():
    r0 = [N(1, 10), N(2, 50, deps=[1], is_cpu=False, type=COMM_COLL_NODE), N(3, 5, deps=[2])]
    r1 = [N(1, 30), N(2, 25, deps=[1], is_cpu=False, type=COMM_COLL_NODE), N(3, 5, deps=[2])]
    return {0: r0, 1: r1}


def test_collective_waits_for_the_slowest_participant_and_lasts_the_shortest_recording():
    job = replay_job(two_rank_collective(), collective="min")
    t0, t1 = job.ranks[0].node_times(), job.ranks[1].node_times()
    # arrivals 10 and 30 -> starts at 30, lasts min(50, 25) = 25 -> ends 55 on both ranks
    assert t0[2] == (10, 55) and t1[2] == (30, 55)
    assert t0[3] == (55, 60) and t1[3] == (55, 60)
    assert job.ranks[0].comm_wait == {2: 20} and job.ranks[1].comm_wait == {2: 0}
    assert job.replayed_us == 60
    assert job.groups == 1


def test_per_rank_mode_uses_recorded_collective_durations():
    job = replay_job(two_rank_collective(), couple=False)
    assert job.ranks[0].replayed_us == 10 + 50 + 5
    assert job.ranks[1].replayed_us == 30 + 25 + 5


def test_whole_job_aligns_the_ranks_on_their_recorded_window_starts():
    from chakra.replay.graph import graph_from_specs

    def rank(launch, coll, window_start):
        g = graph_from_specs([N(1, launch, start=0),
                              N(2, coll, start=launch, deps=[1], is_cpu=False, type=COMM_COLL_NODE),
                              N(3, 5, start=launch + coll, deps=[2])])
        g.measured_start_us = window_start
        return g

    # rank 0's window starts at 1000, it arrives at 1010 and waits 15 µs (recorded 25); rank 1's window
    # starts at 1020, it arrives at 1025 and waits for nobody (recorded 10)
    job = replay_job({0: rank(10, 25, 1000.0), 1: rank(5, 10, 1020.0)}, collective="min")
    t0, t1 = times(job.ranks[0]), times(job.ranks[1])
    # collective on the common clock: [1025, 1035]; each rank reported from its own window start
    assert t0 == {1: (0, 10), 2: (10, 35), 3: (35, 40)}
    assert t1 == {1: (0, 5), 2: (5, 15), 3: (15, 20)}
    assert job.ranks[0].comm_wait == {2: 15} and job.ranks[1].comm_wait == {2: 0}
    # the timeline uses the common clock: the collective ends at 1035 (35 after rank 0's start) on both
    events = timeline(job)["traceEvents"]
    coll = [(e["pid"], e["ts"], e["dur"]) for e in events if e.get("cat") == "collective"]
    assert coll == [(0, 10.0, 25.0), (1, 25.0, 10.0)]
    # without alignment both ranks start together: the collective runs [10, 20] on both
    job = replay_job({0: rank(10, 25, 1000.0), 1: rank(5, 10, 1020.0)}, align=False, collective="min")
    assert times(job.ranks[1]) == {1: (0, 5), 2: (5, 20), 3: (20, 25)}
    assert times(job.ranks[0])[3] == (35, 40)


def test_net_collective_durations_keep_each_ranks_recorded_finish():
    from chakra.replay.graph import graph_from_specs

    def rank(launch, coll, window_start):
        g = graph_from_specs([N(1, launch, start=0),
                              N(2, coll, start=launch, deps=[1], is_cpu=False, type=COMM_COLL_NODE)])
        g.measured_start_us = window_start
        return g

    ranks = {0: rank(10, 28, 1000.0), 1: rank(5, 12, 1020.0)}
    # recorded arrivals on the common clock: 1010 and 1025; the transfer starts at 1025
    # min: both last min(28, 12) = 12 -> end at 1037
    job = replay_job(ranks, collective="min")
    assert times(job.ranks[0])[2] == (10, 37) and times(job.ranks[1])[2] == (5, 17)
    # net: rank 0 waited 15 of its 28 µs -> 13; rank 1 arrived last -> 12
    job = replay_job(ranks, collective="net")
    assert times(job.ranks[0])[2] == (10, 38) and times(job.ranks[1])[2] == (5, 17)
    with pytest.raises(Exception, match="unknown collective duration"):
        replay_job(ranks, collective="max")


def test_collectives_match_by_process_group_and_sequence():
    pgs = json.dumps([{"pg_name": "0", "ranks": []}, {"pg_name": "5", "ranks": [0, 2]}])

    def coll(nid, dur, pg, deps=()):
        return N(nid, dur, deps=deps, is_cpu=False, type=COMM_COLL_NODE, pg_name=pg)

    from chakra.replay.graph import graph_from_specs

    ranks = {
        0: graph_from_specs([N(1, 10), coll(2, 40, "5", [1]), coll(3, 8, "0", [2])], process_groups=pgs),
        1: graph_from_specs([N(1, 100), coll(2, 9, "0", [1])], process_groups=pgs),
        2: graph_from_specs([N(1, 20), coll(2, 30, "5", [1]), coll(3, 12, "", [2])], process_groups=pgs),
    }
    job = replay_job(ranks, collective="min")
    t = {r: job.ranks[r].node_times() for r in ranks}
    # pg 5 (ranks 0, 2): arrivals 10, 20 -> [20, 50]; world: arrivals 50, 100, 50 -> [100, 108]
    assert t[0][2] == (10, 50) and t[2][2] == (20, 50)
    assert t[0][3][1] == t[1][2][1] == t[2][3][1] == 108
    assert job.groups == 2


def test_unknown_process_group_is_an_error():
    from chakra.replay.graph import graph_from_specs

    g = graph_from_specs([N(1, 1, is_cpu=False, type=COMM_COLL_NODE, pg_name="7")], process_groups="[]")
    with pytest.raises(ReplayError, match="process group '7'"):
        replay_job({0: g, 1: graph_from_specs([N(1, 1)])}, collective="min")


def test_collective_without_counterpart_runs_alone(caplog):
    # rank 1's window ended before its second collective: rank 0's second one has no counterpart and
    # runs alone for its recorded 3 us after the coupled first one [0, 2] (min of 2 and 5)
    r0 = [N(1, 2, is_cpu=False, type=COMM_COLL_NODE), N(2, 3, is_cpu=False, type=COMM_COLL_NODE, deps=[1])]
    r1 = [N(1, 5, is_cpu=False, type=COMM_COLL_NODE)]
    with caplog.at_level("WARNING"):
        job = replay_job({0: r0, 1: r1}, collective="min")
    assert job.ranks[0].node_times() == {1: (0, 2), 2: (2, 5)}
    assert job.ranks[1].node_times() == {1: (0, 2)}
    assert job.groups == 1
    assert "rank 0: 1 communication node(s) replayed alone" in caplog.text
    assert "rank(s) [1] recorded no counterpart" in caplog.text


def test_crossed_collective_orders_are_a_deadlock_not_a_hang():
    from chakra.replay.graph import graph_from_specs

    pgs = json.dumps([{"pg_name": "1", "ranks": [0, 1]}, {"pg_name": "2", "ranks": [0, 1]}])

    def coll(nid, pg, deps=()):
        return N(nid, 5, deps=deps, is_cpu=False, type=COMM_COLL_NODE, pg_name=pg, start=nid)

    r0 = graph_from_specs([coll(1, "1"), coll(2, "2", [1])], process_groups=pgs)
    r1 = graph_from_specs([coll(1, "2"), coll(2, "1", [1])], process_groups=pgs)
    crossed = ("contradicting orders .*rank 0 issues collective #0 of process group '1', collective #0 "
               "of process group '2'; rank 1 issues collective #0 of process group '2', collective #0 of "
               "process group '1'")
    with pytest.raises(ReplayError, match=crossed):
        replay_job({0: r0, 1: r1}, collective="min")


def test_recv_waits_for_its_send_and_send_is_eager():
    r0 = [N(1, 5), N(2, 8, deps=[1], is_cpu=False, type=COMM_SEND_NODE, comm_dst=1, comm_tag=3),
          N(3, 4, deps=[2], is_cpu=False, type=COMM_SEND_NODE, comm_dst=1, comm_tag=3)]
    r1 = [N(1, 20, is_cpu=False, type=COMM_RECV_NODE, comm_src=0, comm_tag=3),
          N(2, 2, deps=[1], is_cpu=False, type=COMM_RECV_NODE, comm_src=0, comm_tag=3)]
    job = replay_job({0: r0, 1: r1}, collective="min")
    t0, t1 = job.ranks[0].node_times(), job.ranks[1].node_times()
    # first pair: the send runs [5,13] on its own; the recv (ready at 0) waits for the send to start
    # at 5, then lasts min(8, 20) = 8 -> [0,13]
    assert t0[2] == (5, 13) and t1[1] == (0, 13)
    # second pair: send [13,17]; recv ready at 13, send started at 13 -> lasts min(4, 2) = 2 -> [13,15]
    assert t0[3] == (13, 17) and t1[2] == (13, 15)
    assert job.groups == 2
    assert job.ranks[1].comm_wait == {1: 5, 2: 0}


def test_everyone_sends_then_receives_does_not_deadlock():
    def rank(me, peer):
        return [N(1, 10, is_cpu=False, type=COMM_SEND_NODE, comm_dst=peer),
                N(2, 30, deps=[1], is_cpu=False, type=COMM_RECV_NODE, comm_src=peer)]

    job = replay_job({0: rank(0, 1), 1: rank(1, 0)}, collective="min")
    # sends [0,10]; recvs ready at 10, their sends started at 0: last min(10, 30) = 10 -> [10,20]
    assert job.ranks[0].node_times() == {1: (0, 10), 2: (10, 20)}
    assert job.replayed_us == 20


def test_send_without_recv_runs_alone(caplog):
    # rank 1's window holds no receive: the send runs its recorded 5 us, uncoupled, and says so
    r0 = [N(1, 5, is_cpu=False, type=COMM_SEND_NODE, comm_dst=1, comm_tag=0)]
    with caplog.at_level("WARNING"):
        job = replay_job({0: r0, 1: [N(1, 1)]}, collective="min")
    assert job.ranks[0].node_times() == {1: (0, 5)} and job.groups == 0
    assert "send/recv 0->1 tag 0: outside the window" in caplog.text


def test_astrasim_mode_couples_collectives_too():
    job = replay_job(two_rank_collective(), mode="astrasim", collective="min")
    assert job.ranks[0].node_times()[2] == (10, 55)
    assert job.replayed_us == 60


def test_two_inputs_with_the_same_rank_are_refused():
    from chakra.replay.graph import graph_from_specs

    with pytest.raises(Exception, match="two inputs claim rank 0"):
        replay_job([graph_from_specs([N(1, 1)], rank=0), graph_from_specs([N(1, 1)], rank=0)])


# ---------------------------------------------------------------- protobuf input and outputs










def test_protobuf_files_per_rank_and_whole_job(tmp_path):
    p0, p1 = tmp_path / "job.0.et", tmp_path / "job.1.et"
    write_rank(p0, 0, rank_nodes(10, 30), measured=45)
    write_rank(p1, 1, rank_nodes(25, 12), measured=45)
    g = load_graph(p0)
    assert (g.rank, g.world_size, g.measured_us, g.process_groups) == (0, 2, 45.0, {"0": ()})
    assert g.lanes[3] == ("gpu", 0, 7)

    r0 = replay_file(p0)
    # CPU: 2 [0,10], 3 [10,12], 5 gap 8 -> [20,26]; kernel 4 [12,42]
    assert r0.node_times() == {1: (0, 0), 2: (0, 10), 3: (10, 12), 4: (12, 42), 5: (20, 26)}
    assert r0.replayed_us == 42
    assert r0.error_pct == pytest.approx(100 * (42 - 45) / 45)

    job = replay_job([p1, p0], collective="min")
    # arrivals 12 (rank 0) and 27 (rank 1); lasts min(30, 12) = 12 -> ends 39
    assert job.ranks[0].node_times()[4] == (12, 39)
    assert job.ranks[1].node_times()[4] == (27, 39)
    assert job.ranks[1].node_times()[5] == (35, 41)
    assert job.replayed_us == 41


def test_completion_lines_and_timeline(tmp_path):
    res = replay_nodes([N(1, 2.5, name="a"), N(2, 0.5, deps=[1], is_cpu=False, stream=3, name="k"),
                        N(3, 0, type=METADATA_NODE)], rank=4)
    lines = list(res.completion_lines())
    assert lines == ["[rank 4] Node ID 3 completed at 0us", "[rank 4] Node ID 1 completed at 3us",
                     "[rank 4] Node ID 2 completed at 3us"]
    tl = timeline([res])
    json.dumps(tl)
    xs = [e for e in tl["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["pid"], e["ts"], e["dur"]) for e in xs] == [("a", 4, 0.0, 2.5), ("k", 4, 2.5, 0.5)]
    names = {(e["tid"], e["args"]["name"]) for e in tl["traceEvents"] if e["name"] == "thread_name"}
    assert names == {(1, "CPU thread 0"), (2, "GPU 0 stream 3")}
    assert xs[0]["tid"] == 1 and xs[1]["tid"] == 2


def test_host_comm_record_without_stream_stays_on_its_thread():
    from chakra.replay.reader import graph_from_protobuf

    nodes = [pb_node(1, 5, 0, tid=9), pb_node(2, 20, 5, deps=[1], cpu=False, tid=9, ntype=COMM_COLL_NODE),
             pb_node(3, 5, 30, deps=[1], tid=9)]
    g = graph_from_protobuf(nodes)
    assert g.lanes == [("cpu", 9), ("cpu", 9), ("cpu", 9)]
    # the gloo record keeps its place in the thread: 3 starts after it and after the 5 µs gap
    res = replay_rank(g)
    assert res.node_times()[3] == (30, 35)


def test_rank_from_filename():
    assert rank_from_filename("/x/all_reduce_4npus_1MB.3.et") == 3
    assert rank_from_filename("a/chakra.12.et.gz") == 12
    assert rank_from_filename("trace.et") is None
    # digits that follow no rank convention are no rank (a process id: a Kineto-only rank's file)
    assert rank_from_filename("trace_1016005.et") is None and rank_from_filename("trace_5.et") is None
    assert rank_from_filename("dir/rank-3.json") == 3 and rank_from_filename("chakra_et_plus_2.json") == 2


def test_timeline_draws_a_parent_around_its_children():
    from chakra.replay.reader import graph_from_protobuf

    # P (exclusive 40) with children A [10,40] and B [50,80], children linked to P by ctrl_deps
    nodes = [pb_node(1, 40, 0), pb_node(2, 30, 10, deps=[1]), pb_node(3, 30, 50, deps=[1], data=[2])]
    res = replay_rank(graph_from_protobuf(nodes))
    assert res.node_times() == {1: (0, 10), 2: (10, 40), 3: (50, 80)}
    xs = {e["args"]["node_id"]: (e["ts"], e["dur"]) for e in timeline([res])["traceEvents"] if e["ph"] == "X"}
    assert xs == {1: (0.0, 80.0), 2: (10.0, 30.0), 3: (50.0, 30.0)}


def test_a_window_whose_gpu_work_runs_on_after_it_is_said_so():
    from chakra.replay.output import overrun_note

    # the CPU step runs 0..10 (the measured window); a kernel that depends on it ran 5..35
    nodes = [NodeSpec(1, 10, start=0), NodeSpec(2, 30, deps=[1], start=5, is_cpu=False, stream=7)]
    res = replay_nodes(nodes, measured_us=10)
    assert res.recorded_end_us == 35 and res.replayed_us == 35
    # the error is against when that work ended (35), not the window's end (10: +250%), and says so
    assert (res.ran_on, res.reference_us, res.error_pct, res.window_error_pct) == (True, 35, 0.0, 250.0)
    assert res.run_on() == {"work": "GPU", "last_op": "node2", "lane": "GPU 0 stream 7"}
    assert overrun_note(res.rank, res.measured_us, res.recorded_end_us, res.replayed_us, res.run_on()) == (
        "* rank -: the window's GPU work ran until 35.0 µs, 25.0 µs after the measured window (the CPU ran "
        "ahead of the GPU); the replay runs that work to its end, so its error is against that end; against "
        "the window's end it is +250.00%")
    assert res.summary()["error_reference"] == "recorded_end"
    # within 1 % of the window: nothing to say, and the error is against the window
    assert overrun_note(0, 100.0, 101.0, 100.0) is None and overrun_note(0, None, 35.0, 30.0) is None
    inside = replay_nodes([NodeSpec(1, 10, start=0), NodeSpec(2, 0.05, deps=[1], start=10, is_cpu=False,
                                                               stream=7)], measured_us=10)
    assert (inside.ran_on, inside.reference_us, inside.run_on()) == (False, 10, None)
    assert "error_reference" not in inside.summary()


def test_device_ops_that_say_nothing_of_where_run_compute_and_communication_apart(tmp_path):
    # as ASTRA-sim text workloads and generated ETs are written: is_cpu_op false, no tid / stream / device;
    # and a CPU op without a tid (the text workloads' weight-update delay), which must not pull them onto
    # its thread.  A 10 µs layer, its 50 µs all_reduce, and the next layer (needing only the first):
    # the next layer runs beside the all_reduce, as on ASTRA-sim's two resources.
    from chakra.io import write_messages
    from chakra.replay import replay_file
    from chakra.replay.graph import COMM_STREAM
    from chakra.schema import ALL_REDUCE, COMM_COLL_NODE, COMP_NODE, AttributeProto, GlobalMetadata, Node

    def node(nid, ntype, dur, deps=(), cpu=False, *extra):
        n = Node(id=nid, name=f"n{nid}", type=ntype, duration_micros=dur, data_deps=list(deps))
        n.attr.append(AttributeProto(name="is_cpu_op", bool_val=cpu))
        n.attr.extend(extra)
        return n

    comm = (AttributeProto(name="comm_type", int64_val=ALL_REDUCE),
            AttributeProto(name="comm_size", int64_val=1024))
    nodes = [node(0, COMP_NODE, 10), node(1, COMM_COLL_NODE, 50, [0], False, *comm),
             node(2, COMP_NODE, 10, [0]), node(3, COMP_NODE, 5, [2], True)]
    path = tmp_path / "w.0.et"
    write_messages(path, [GlobalMetadata(version="0.0.4"), *nodes])
    res = replay_file(path)
    assert res.graph.lanes[:3] == [("gpu", 0, 0), ("gpu", 0, COMM_STREAM), ("gpu", 0, 0)]
    assert res.node_times() == {0: (0, 10), 1: (10, 60), 2: (10, 20), 3: (20, 25)}
    assert res.replayed_us == 60


def test_a_ranks_comm_wait_is_wall_time_not_the_sum_of_concurrent_waits():
    # each rank launches two collectives at once on two gloo worker threads (2 and 3), after a launcher op of
    # ``launch`` µs on its thread 1; each collective lasts 10 µs
    def rank(launch):
        return [N(1, launch, start=0, tid=1),
                N(2, 10, start=launch, deps=[1], is_cpu=False, type=COMM_COLL_NODE, lane=("cpu", 2)),
                N(3, 10, start=launch, deps=[1], is_cpu=False, type=COMM_COLL_NODE, lane=("cpu", 3))]

    job = replay_job({0: rank(10), 1: rank(50)}, collective="min")
    r0 = job.ranks[0]
    # rank 0 arrives at 10 with both, rank 1 at 50: each waited 40 µs, over the same 40 µs of wall time
    assert times(r0) == {1: (0, 10), 2: (10, 60), 3: (10, 60)}
    assert r0.comm_wait == {2: 40, 3: 40}
    assert r0.total_wait_us == 40 and r0.replayed_us == 60      # 67% of its time, not 80 µs (133%)
    assert job.times()["comm_wait_us"] == 40 + 0                 # the job's: summed over its ranks
    # waits one after the other still add up: rank 1 works 40 µs (rank 0: 5) between its two collectives
    def serial(launch, between):
        return [N(1, launch, start=0, tid=1),
                N(2, 10, start=launch, deps=[1], is_cpu=False, type=COMM_COLL_NODE, lane=("cpu", 2)),
                N(3, between, start=launch + 10, deps=[2], tid=1),
                N(4, 10, start=launch + 10 + between, deps=[3], is_cpu=False, type=COMM_COLL_NODE,
                  lane=("cpu", 2))]

    job = replay_job({0: serial(10, 5), 1: serial(50, 40)}, collective="min")
    # rank 0: C1 waits 10..50, op 3 runs 60..65, C2 waits 65..100 (rank 1 arrives at 50 + 10 + 40)
    assert job.ranks[0].comm_wait == {2: 40, 4: 35} and job.ranks[0].total_wait_us == 75
