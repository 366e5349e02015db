"""The critical path through start-to-start links and end bounds (finish waits): hand-worked graphs."""

from __future__ import annotations

from chakra.replay import NodeSpec, replay_nodes
from chakra.replay.critical import CriticalPath, compare_paths, critical_path, dependency_only_us

N = NodeSpec


def launch_and_sync():
    """Thread 1: L (cudaLaunchKernel, recorded 0..15) launches K (stream 7, recorded 4..12: it started 4 µs
    into L and ended before L returned); thread 2: S (cudaStreamSynchronize, recorded 6..20) was blocked on
    K and returned 8 µs after K ended.

    Finish waits (the plan): K depends on L but started inside it: start(K) >= start(L) + 4, and no end bound
    (L ended after K).  S depends on K and started inside it: start(S) >= start(K) + 2 and end(S) >= end(K)
    + 8, lasting 8 (its tail) on its own.  Replayed without gaps: L 0..15, K 4..12, S 6..20 (its end bound
    by K's).  Walked back from S (20): S holds 20 - 12 = 8 after K's end, K ends at 12 and was started by
    L's start + 4: K holds its whole 12 - 4 = 8 and L only the 4 µs before K started, not its 15.
    """
    return [N(1, 15, start=0, tid=1, name="cudaLaunchKernel"),
            N(2, 8, start=4, deps=[1], is_cpu=False, stream=7, name="kernel"),
            N(3, 14, start=6, deps=[2], tid=2, name="cudaStreamSynchronize")]


def test_a_start_link_charges_the_launch_only_until_the_kernel_started():
    res = replay_nodes(launch_and_sync(), gaps=False)
    assert res.node_times() == {1: (0, 15), 2: (4, 12), 3: (6, 20)}
    cp = critical_path(res)
    assert cp.total_us == 20
    assert cp.nodes == [1, 2, 3]
    assert cp.charges == [4, 8, 8]
    assert cp.links == ["start", "end"]
    assert cp.by_category == {"cpu": 12, "gpu": 8, "comm": 0, "peer_wait": 0, "between_ops": 0}
    assert cp.by_name == {"cudaLaunchKernel": 4, "kernel": 8, "cudaStreamSynchronize": 8}
    # without the lanes nothing changes here: every bound is a dependency's
    assert dependency_only_us(res) == 20


def one_thread():
    """One thread: L (launch, recorded 0..10) launches K (recorded 4..34, 4 µs into L, ending 24 µs after
    L); then S (synchronize, recorded 12..37) blocked on K, returning 3 µs after it; then T (5) after S.

    K: start >= start(L) + 4, end >= end(L) + 24, lasting 24 on its own.  S (after L on its thread, 2 µs
    of idle with gaps): start >= start(K) + 8, end >= end(K) + 3, lasting 3 on its own.  Replayed with the
    gaps: L 0..10, K 4..34, S 12..37, T 37..42.  Back from T: T 5 (after S on the thread), S its 3 after K's
    end (34), K its 24 after L's end (10), L 10 from 0.
    """
    return [N(1, 10, start=0, name="launch"),
            N(2, 30, start=4, deps=[1], is_cpu=False, stream=7, name="kernel"),
            N(3, 25, start=12, deps=[1, 2], name="sync"),
            N(4, 5, start=37, deps=[3], name="T")]


def test_end_bounds_hand_each_node_its_tail_only():
    res = replay_nodes(one_thread())
    assert res.node_times() == {1: (0, 10), 2: (4, 34), 3: (12, 37), 4: (37, 42)}
    cp = critical_path(res)
    assert cp.total_us == 42
    assert cp.nodes == [1, 2, 3, 4]
    assert cp.charges == [10, 24, 3, 5]
    assert cp.links == ["end", "end", "dep"]
    assert cp.by_category == {"cpu": 18, "gpu": 24, "comm": 0, "peer_wait": 0, "between_ops": 0}
    # (the walk without end bounds went from S to L, S holding its whole 25 µs and 2 µs of gap, K left
    # out); each charge is at most the node's replayed time
    times = res.node_times()
    assert all(c <= times[nid][1] - times[nid][0] for nid, c in zip(cp.nodes, cp.charges))


def test_a_scaled_kernel_moves_the_path_through_its_end_bound():
    from chakra.replay.whatif import WhatIf, parse_rule

    # K x0.5: its own 24 after L becomes 12; S ends 3 after K: 0..10, K 4..22, S 12..25, T 25..30
    res = replay_nodes(one_thread(), whatif=WhatIf(scale=[parse_rule("kernel=0.5")]))
    assert res.node_times() == {1: (0, 10), 2: (4, 22), 3: (12, 25), 4: (25, 30)}
    cp = critical_path(res)
    assert (cp.total_us, cp.nodes, cp.charges) == (30, [1, 2, 3, 4], [10, 12, 3, 5])


def test_a_start_offset_past_a_shortened_launch_is_not_charged_to_it():
    from chakra.replay.whatif import WhatIf, parse_rule

    # L x0.1 lasts 1.5 but K still starts at L's start + 4 (the recorded offset): L holds its 1.5, the
    # 2.5 after it that nothing ran is slack between ops
    res = replay_nodes(launch_and_sync(), gaps=False,
                       whatif=WhatIf(scale=[parse_rule("^cudaLaunchKernel$=0.1")]))
    assert res.node_times() == {1: (0, 1.5), 2: (4, 12), 3: (6, 20)}
    cp = critical_path(res)
    assert (cp.total_us, cp.nodes, cp.charges, cp.links) == (20, [1, 2, 3], [1.5, 8, 8], ["start", "end"])
    assert cp.between == {"start": 0, "thread": 0, "latency": 0, "end": 0, "slack": 2.5}
    assert cp.by_category["between_ops"] == 2.5


def test_a_waits_latency_and_a_threads_gap_are_named():
    # the waiting thread of test_replay_whatif: A (10) launches K (20); B resumed 4 µs after K ended
    res = replay_nodes([N(1, 10, start=0, name="A"),
                        N(2, 20, start=10, deps=[1], is_cpu=False, stream=7, name="K"),
                        N(3, 5, start=34, deps=[1, 2], wait_on=2, wait_post=4, name="B")])
    cp = critical_path(res)
    assert (cp.nodes, cp.charges, cp.links) == ([1, 2, 3], [10, 20, 5], ["dep", "dep"])
    assert cp.between["latency"] == 4 and sum(cp.charges) + 4 == cp.total_us == 39


def test_equal_changes_are_listed_by_name():
    """20 ops each 1 µs shorter on the path, 2 ops 3 µs longer: the longer ones first, then the others by
    name (they came in the order of a set of strings, which changes from one process to the next: the DLRM
    what-if `--job --scale cpu=0.7` listed aten::mul or aten::add_, both -240 µs on rank 4)."""
    names = [f"op{k:02d}" for k in range(20)]
    before, after = CriticalPath(), CriticalPath()
    for k in names:
        before.by_name[k] = 2.0
        after.by_name[k] = 1.0
    after.by_name["z"] = after.by_name["y"] = 3.0
    moved = compare_paths(before, after, top=22)["moved"]
    assert moved == [("y", 3.0), ("z", 3.0)] + [(k, -1.0) for k in names]
