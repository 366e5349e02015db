"""Thread timing as data, waits, what-ifs, the communication model, the critical path: hand-worked graphs."""

from __future__ import annotations

import json

import pytest
from helpers.et_nodes import attr, pb_node, write_rank

from chakra.cli.replay import main
from chakra.io import read_messages, write_messages
from chakra.replay import NodeSpec, load_graph, replay_file, replay_job, replay_nodes
from chakra.replay.critical import critical_path
from chakra.replay.whatif import (
    CommModel,
    WhatIf,
    WhatIfError,
    algo_factor,
    apply_whatif,
    fit_model,
    parse_rule,
)
from chakra.schema import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    BARRIER,
    BROADCAST,
    COMM_COLL_NODE,
    COMM_SEND_NODE,
    REDUCE_SCATTER,
    GlobalMetadata,
    Node,
)

N = NodeSpec


def times(res):
    return {nid: (round(s, 6), round(e, 6)) for nid, (s, e) in res.node_times().items()}


def thread(changes=None):
    """One thread: P (exclusive 30: lead 14, 6 between its children, tail 10) > C1 (8), C2 (4); then Q (5).

    Recorded: P at 5 (5 µs after the window start), C1 19..27, C2 33..37, P ends 47, 20 µs idle, Q 67..72.
    """
    spec = {
        1: dict(duration=30, start=5, idle_before=5, tail=10, name="P"),
        2: dict(duration=8, start=19, deps=[1], depth=1, name="C1"),
        3: dict(duration=4, start=33, deps=[1, 2], depth=1, work_before=6, name="C2"),
        4: dict(duration=5, start=67, deps=[3], idle_before=20, name="Q"),
    }
    for nid, kw in (changes or {}).items():
        spec[nid].update(kw)
    return [N(nid, **kw) for nid, kw in spec.items()]


def test_an_unchanged_thread_replays_its_recording():
    res = replay_nodes(thread())
    assert times(res) == {1: (5, 19), 2: (19, 27), 3: (33, 37), 4: (67, 72)}
    assert res.replayed_us == 72


def test_no_gaps_drops_the_idle_time_only():
    # P's own time between and after its children is work and stays: C2 4+6 after C1, Q 10 after C2
    res = replay_nodes(thread(), gaps=False)
    assert times(res) == {1: (0, 14), 2: (14, 22), 3: (28, 32), 4: (42, 47)}


def test_scaling_a_parent_scales_its_lead_its_time_between_children_and_its_tail():
    # P x0.5: lead 7, 3 before C2, tail 5; the idle time stays
    res = replay_nodes(thread(), whatif=WhatIf(scale=[parse_rule("^P$=0.5")]))
    assert times(res) == {1: (5, 12), 2: (12, 20), 3: (23, 27), 4: (52, 57)}


def test_a_faster_or_slower_leaf_moves_everything_after_it_both_ways():
    faster = replay_nodes(thread(), whatif=WhatIf(scale=[parse_rule("C1=0.5")]))
    assert times(faster) == {1: (5, 19), 2: (19, 23), 3: (29, 33), 4: (63, 68)}
    slower = replay_nodes(thread(), whatif=WhatIf(scale=[parse_rule("C1=2")]))
    assert times(slower) == {1: (5, 19), 2: (19, 35), 3: (41, 45), 4: (75, 80)}
    # the same by editing the duration in the file: no what-if, the gaps are data
    assert times(replay_nodes(thread({2: {"duration": 4}}))) == times(faster)


def test_an_edited_parent_duration_below_its_pieces_shrinks_them():
    # P edited to 10 < its 16 µs of pieces: lead 0, pieces x 10/16 (C2 after 3.75, tail 6.25)
    res = replay_nodes(thread({1: {"duration": 10}}))
    assert times(res) == {1: (5, 5), 2: (5, 13), 3: (16.75, 20.75), 4: (47, 52)}


def test_a_delay_adds_to_the_matching_ops():
    res = replay_nodes(thread(), whatif=WhatIf(delay=[parse_rule("^Q$=3", "delay")]))
    assert times(res)[4] == (67, 75)


def test_tails_after_the_last_node_count_in_the_replayed_time():
    res = replay_nodes([N(1, 20, start=0, tail=8), N(2, 5, start=12, deps=[1], depth=1)])
    assert times(res) == {1: (0, 12), 2: (12, 17)}
    assert res.replayed_us == 25


def waiting_thread(**changes):
    """A (10) launches K (GPU, 20); B was blocked until K ended, and resumed 4 µs later (wait_on K)."""
    spec = {
        1: dict(duration=10, start=0, name="A"),
        2: dict(duration=20, start=10, deps=[1], is_cpu=False, stream=7, name="K"),
        3: dict(duration=5, start=34, deps=[1, 2], wait_on=2, wait_post=4, name="B"),
    }
    for nid, kw in changes.items():
        spec[nid].update(kw)
    return [N(nid, **kw) for nid, kw in spec.items()]


def test_a_wait_follows_what_it_waits_for_both_ways():
    assert times(replay_nodes(waiting_thread())) == {1: (0, 10), 2: (10, 30), 3: (34, 39)}
    faster = replay_nodes(waiting_thread(), whatif=WhatIf(scale=[parse_rule("gpu=0.5")]))
    assert times(faster) == {1: (0, 10), 2: (10, 20), 3: (24, 29)}
    slower = replay_nodes(waiting_thread(), whatif=WhatIf(scale=[parse_rule("cpu=2")]))
    assert times(slower) == {1: (0, 20), 2: (20, 40), 3: (44, 54)}


def test_critical_path_by_category():
    cp = critical_path(replay_nodes(waiting_thread()))
    assert cp.nodes == [1, 2, 3]
    assert cp.total_us == 39
    assert cp.by_category == {"cpu": 15, "gpu": 20, "comm": 0, "peer_wait": 0, "between_ops": 4}


def straggler_rank(rank):
    # F (forward, 10), X (collective on a worker, 5) after it; D was blocked on X, resumed 2 µs later
    return [N(1, 10, start=0, name="forward"),
            N(2, 5, start=10, deps=[1], is_cpu=False, type=COMM_COLL_NODE, stream=9, name="all_reduce"),
            N(3, 3, start=17, deps=[2], wait_on=2, wait_post=2, name="D")]


def test_a_straggler_delays_its_peer_through_the_collective():
    job = replay_job({0: straggler_rank(0), 1: straggler_rank(1)})
    assert [r.replayed_us for r in job] == [20, 20]
    late = replay_job({0: straggler_rank(0), 1: straggler_rank(1)},
                      whatif=WhatIf(delay=[parse_rule("forward=10@1", "delay")]))
    # rank 1 arrives at 20; rank 0 waits 10 there; both finish the collective at 25 and D at 27..30
    assert times(late.ranks[0]) == {1: (0, 10), 2: (10, 25), 3: (27, 30)}
    assert times(late.ranks[1]) == {1: (0, 20), 2: (20, 25), 3: (27, 30)}
    assert late.ranks[0].comm_wait == {2: 10}
    assert critical_path(late.ranks[0]).by_category["peer_wait"] == 10


def test_rules_parse_and_refuse_nonsense():
    r = parse_rule("aten::(addmm|mm)=2.5@0,3")
    assert r.value == 2.5 and r.selector.ranks == frozenset({0, 3}) and r.selector.pattern is not None
    assert parse_rule("gpu@1=0.5").selector.kind == "gpu"
    assert parse_rule("gpu=0.5@1").selector.ranks == frozenset({1})
    for bad in ("cpu", "=2", "cpu=x", "cpu=-1", "cpu=nan", "cpu@=2", "cpu@a=2", "(=2", "cpu@1=2@0"):
        with pytest.raises(WhatIfError):
            parse_rule(bad)


def test_algorithm_factors():
    assert algo_factor(ALL_REDUCE, COMM_COLL_NODE, 4) == 1.5
    assert algo_factor(ALL_GATHER, COMM_COLL_NODE, 4) == 0.75
    assert algo_factor(REDUCE_SCATTER, COMM_COLL_NODE, 4) == 0.75
    assert algo_factor(ALL_TO_ALL, COMM_COLL_NODE, 8) == 0.875
    assert algo_factor(BROADCAST, COMM_COLL_NODE, 4) == 1.0
    assert algo_factor(BARRIER, COMM_COLL_NODE, 4) == 0.0
    assert algo_factor(None, COMM_SEND_NODE, 4) == 1.0


def test_least_squares_fit():
    # d = 10 + x / 100 through (1000, 20) and (3000, 40); a single size: latency 0, bandwidth x / d
    m = fit_model([(1000.0, 20.0, "a"), (3000.0, 40.0, "a")])
    assert m is not None and m.latency_us == pytest.approx(10) and m.bytes_per_us == pytest.approx(100)
    one = fit_model([(1000.0, 20.0, "a"), (1000.0, 25.0, "a")])
    assert one is not None and one.latency_us == 0 and one.bytes_per_us == pytest.approx(50)
    # a negative latency is refused: refitted through the origin
    neg = fit_model([(1000.0, 5.0, "a"), (3000.0, 40.0, "a")])
    assert neg is not None and neg.latency_us == 0
    assert neg.bytes_per_us == pytest.approx((1000 ** 2 + 3000 ** 2) / (1000 * 5 + 3000 * 40))
    assert fit_model([]) is None


def coll(nid, dur, size, start, deps=(), ctype=ALL_REDUCE):
    return N(nid, dur, start=start, deps=deps, is_cpu=False, stream=7, type=COMM_COLL_NODE, comm_type=ctype,
             comm_size=size, name=f"all_reduce_{size}")


def test_model_times_collectives_without_a_duration_and_bandwidth_what_ifs():
    # two recorded all_reduces (2 ranks: F = 1) fit latency 10 µs, 100 bytes/µs; the third has no duration
    nodes = [coll(1, 20, 1000, 0), coll(2, 40, 3000, 20, deps=[1]), coll(3, 0, 2000, 60, deps=[2])]
    g, report = apply_whatif([_graph(nodes)], None)
    assert report.model is not None and report.model.latency_us == pytest.approx(10)
    assert g[0].durations == [20, 40, 0] and g[0].delay == [0, 0, pytest.approx(30)]   # 10 + 2000 / 100
    res = replay_nodes(nodes, world_size=2)
    assert res.replayed_us == pytest.approx(90)
    # what if the network had half the bandwidth: each recording + the model's difference (S / 100)
    slow = replay_nodes(nodes, world_size=2, whatif=WhatIf(bandwidth_gbps=0.05))
    assert times(slow) == {1: (0, 30), 2: (30, 100), 3: (100, 150)}
    bigger = replay_nodes(nodes, world_size=2, whatif=WhatIf(comm_size=[parse_rule("all_reduce_1000=4")]))
    assert bigger.node_times()[1] == (0, pytest.approx(50))          # 20 + (4000 - 1000) / 100


def test_given_and_default_models():
    m = CommModel(5.0, 25_000.0)          # 5 µs, 25 GB/s
    assert m.time(ALL_REDUCE, COMM_COLL_NODE, 1 << 20, 4) == pytest.approx(5 + 1.5 * (1 << 20) / 25_000)
    nodes = [coll(1, 0, 1 << 20, 0)]
    res = replay_nodes(nodes, world_size=4, whatif=WhatIf(model=(5.0, 25.0)))
    assert res.replayed_us == pytest.approx(5 + 1.5 * (1 << 20) / 25_000)
    # nothing to fit: the documented default, 10 µs + 10 GB/s
    assert replay_nodes(nodes, world_size=4).replayed_us == pytest.approx(10 + 1.5 * (1 << 20) / 10_000)
    with pytest.raises(WhatIfError, match="no recorded collective"):
        replay_nodes(nodes, world_size=4, whatif=WhatIf(model="fit"))


def test_a_faster_network_is_faster_for_every_kind_of_collective():
    # pooled 11 µs + 33.9 GB/s; all_to_all fitted apart: 0 µs + 4.77 GB/s.  An all_to_all of 8000 bytes on
    # 2 ranks (F = 1/2: 4000 bytes moved) takes 4000 / 4770 µs in the model.  1000 GB/s is 1e6 / 33900 times
    # the pooled bandwidth: the all_to_all's own bandwidth grows by as much, its latency stays 0.  (Timed with
    # the pooled 11 µs instead, it came out ~10 µs slower.)
    a2a = (ALL_TO_ALL, COMM_COLL_NODE)
    model = CommModel(11.0, 33_900.0, per_type={a2a: (0.0, 4_770.0)})
    fast = model.with_network(1000.0, None)
    ratio = 1e6 / 33_900
    assert fast.bytes_per_us == pytest.approx(1e6) and fast.latency_us == 11.0
    assert fast.per_type[a2a] == (0.0, pytest.approx(4_770 * ratio))
    assert model.with_network(None, 2.0).per_type[a2a] == (2.0, 4_770.0)
    nodes = [coll(1, 3, 8000, 0, ctype=ALL_TO_ALL)]
    g, report = apply_whatif([_graph(nodes)], WhatIf(bandwidth_gbps=1000.0, model=model))
    assert g[0].delay == [pytest.approx(4000 / (4_770 * ratio) - 4000 / 4_770)]     # -0.810 µs
    assert report.model is model and report.changed == fast
    assert "what-if network: latency 11.0 µs, bandwidth 1e+03 GB/s (what-if); per type: all_to_all 0.0 µs " \
           "+ 141 GB/s" in report.lines()
    slow = apply_whatif([_graph(nodes)], WhatIf(bandwidth_gbps=10.0, model=model))[0]
    assert slow[0].delay[0] > 0          # and a slower one slower
    with pytest.raises(WhatIfError, match="bandwidth must be > 0"):
        model.with_network(0.0, None)


def _graph(nodes, **kw):
    from chakra.replay.graph import graph_from_specs

    return graph_from_specs(nodes, world_size=2, **kw)


def test_work_inside_a_communication_record_keeps_its_duration(tmp_path):
    # a gloo worker thread: gloo:all_gather [0,60] (exclusive 10: lead 4, tail 6) allocates inside it,
    # aten::empty [4,54], its ET child (a Kineto-only link's tree: the ops its thread ran inside it).  The
    # record's own duration is not its end: the child was not blocked in it (fsdp_2r rank 0, Kineto-only:
    # such a child ended 1,662 us early and the rank replayed -2.13%)
    p = tmp_path / "worker.0.et"
    rec = pb_node(1, 10, 0, cpu=False, tid=2, ntype=COMM_COLL_NODE, name="gloo:all_gather")
    rec.attr.append(attr("tail_us", int64_val=6))
    kid = pb_node(2, 50, 4, deps=[1], tid=2, name="aten::empty")
    kid.attr.append(attr("thread_depth", int64_val=1))
    write_rank(p, 0, [rec, kid], measured=60, world=1)
    flag_thread_timing(p)
    res = replay_file(p)
    assert times(res) == {1: (0, 4), 2: (4, 54)}      # main: aten::empty (4, 48), the rank 54
    assert res.replayed_us == 60


# ----------------------------------------------------------------------------------------- command line
def waiting_file(path, flagged=True):
    """``waiting_thread`` as a protobuf file; ``flagged``: its GlobalMetadata says it has thread timing."""
    nodes = [pb_node(1, 10, 0, name="A"), pb_node(2, 20, 10, data=[1], cpu=False, stream=7, name="K")]
    b = pb_node(3, 5, 34, data=[1, 2], name="B")
    b.attr.append(attr("wait_on", int64_val=2))
    b.attr.append(attr("wait_post_us", int64_val=4))
    nodes.append(b)
    write_rank(path, 0, nodes, measured=39, world=1)
    if flagged:
        flag_thread_timing(path)
    return path


def flag_thread_timing(path):
    """Say in ``path``'s GlobalMetadata that its nodes carry the thread timing."""
    md, ns = read_messages(path, GlobalMetadata, Node)
    md.attr.append(attr("thread_timing", string_val="pieces-1"))
    write_messages(path, [md, *ns])


def test_cli_what_if_table_and_json(tmp_path, capsys):
    p = waiting_file(tmp_path / "job.0.et")
    g = load_graph(p)
    assert g.thread_timing and g.extra["wait_on"] == {2: 2} and g.extra["wait_post_us"] == {2: 4}
    assert replay_file(p).replayed_us == 39
    # a file without the flag replays with the gaps of its start times: B stays at its recorded 34
    old = waiting_file(tmp_path / "old.0.et", flagged=False)
    assert replay_file(old, whatif=WhatIf(scale=[parse_rule("gpu=0.5")])).replayed_us == 39
    assert main([str(p), "--scale", "gpu=0.5", "-q"]) == 0
    out = capsys.readouterr().out
    assert "What-if (per rank): scale gpu x0.5" in out and "29.0" in out and "-25.64%" in out
    assert main([str(p), "--scale", "gpu=0.5", "--json", "-q"]) == 0
    s = json.loads(capsys.readouterr().out)
    r = s["ranks"][0]
    assert r["replayed_us"] == 39 and r["predicted_us"] == 29 and r["measured_us"] == 39
    assert r["critical_path_by_category"]["gpu"] == [20, 10]


def test_cli_comm_model_times_collectives_recorded_without_a_duration(tmp_path, capsys):
    # an all_reduce of 1 MiB on 2 ranks (F = 1) with no duration, as ASTRA-sim's micro-benchmark ETs have them
    p = tmp_path / "ar.0.et"
    write_rank(p, 0, [pb_node(1, 0, 0, cpu=False, stream=7, ntype=COMM_COLL_NODE, pg="0")], measured=1)
    given = 5 + (1 << 20) / 25_000                 # --comm-model 5,25: 5 µs + 25 GB/s
    default = 10 + (1 << 20) / 10_000              # nothing to fit: 10 µs + 10 GB/s, with a warning
    for args, want in (([], default), (["--comm-model", "5,25"], given)):
        assert main([str(p), "--json", "-q", *args]) == 0
        s = json.loads(capsys.readouterr().out)
        assert s["ranks"][0]["replayed_us"] == pytest.approx(want, abs=0.05)
    assert main([str(p), "--comm-model", "5,25"]) == 0
    assert "communication model: latency 5.0 µs, bandwidth 25 GB/s (given)" in capsys.readouterr().out
    # a what-if on top: replayed as recorded with the given model, predicted on the what-if's network
    assert main([str(p), "--comm-model", "5,25", "--bandwidth", "50", "--json", "-q"]) == 0
    r = json.loads(capsys.readouterr().out)["ranks"][0]
    assert r["replayed_us"] == pytest.approx(given, abs=0.05)
    assert r["predicted_us"] == pytest.approx(5 + (1 << 20) / 50_000, abs=0.05)
    # per rank, a what-if keeps both its change and the model (it was applied twice, the second time
    # without them): the collective, then a CPU op of 10 µs after it, scaled x2
    q = tmp_path / "two.0.et"
    write_rank(q, 0, [pb_node(1, 0, 0, cpu=False, stream=7, ntype=COMM_COLL_NODE, pg="0"),
                      pb_node(2, 10, 0, deps=[1])], measured=1)
    assert main([str(q), "--comm-model", "5,25", "--scale", "cpu=2", "--json", "-q"]) == 0
    r = json.loads(capsys.readouterr().out)["ranks"][0]
    assert (r["replayed_us"], r["predicted_us"]) == (pytest.approx(given + 10, abs=0.05),
                                                     pytest.approx(given + 20, abs=0.05))
    # the default model is fitted once for both replays: one warning
    assert main([str(p), "--bandwidth", "50", "-q"]) == 0
    assert capsys.readouterr().err.count("no recorded collective to fit") == 1


@pytest.mark.parametrize("args", [["--scale", "cpu"], ["--delay", "x=-1"], ["--comm-model", "1"],
                                  ["--bandwidth", "0"], ["--scale", "(=2"]])
def test_cli_bad_what_if_is_a_usage_error(tmp_path, capsys, args):
    p = waiting_file(tmp_path / "job.0.et")
    with pytest.raises(SystemExit) as exc:
        main([str(p), *args])
    assert exc.value.code == 2
    assert "chakra replay: error:" in capsys.readouterr().err


def test_pipeline_what_if(tmp_path, data_dir):
    from chakra.cli.pipeline import main as pipeline_main

    src = str(data_dir / "gloo_mlp_2r")
    assert pipeline_main([src, "--output-dir", str(tmp_path / "a"), "--job", "-q"]) == 0
    assert pipeline_main([src, "--output-dir", str(tmp_path / "b"), "--job", "-q", "--scale", "cpu=0.5"]) == 0
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert "whatif" not in a and b["whatif"] == ["scale cpu x0.5"]
    for ra, rb in zip(a["ranks"], b["ranks"]):
        assert rb["replayed_us"] < 0.9 * ra["replayed_us"]


def test_a_rule_for_ranks_the_replay_does_not_have_is_refused(tmp_path, capsys):
    p = waiting_file(tmp_path / "job.0.et")
    assert main([str(p), "--delay", "cpu=10@9"]) == 2
    assert "what-if 'cpu@9': no such rank in the replay (its ranks: 0)" in capsys.readouterr().err
    assert main([str(p), "--delay", "cpu=10@0,9", "-q"]) == 0      # one of them is there: applied to it


def test_a_pipeline_rule_for_one_rank_neither_warns_on_the_others_nor_misses(tmp_path, data_dir, capsys):
    from chakra.cli import pipeline

    out = tmp_path / "out"
    for rule, warned in (("cpu=10@1", False), ("nosuchop=10@1", True)):
        assert pipeline.main([str(data_dir / "gloo_mlp_2r"), "-o", str(out), "--delay", rule, "-q"]) == 0
        assert ("matches no node" in capsys.readouterr().err) == warned
    assert pipeline.main([str(data_dir / "gloo_mlp_2r"), "-o", str(out), "--delay", "cpu=10@5", "-q"]) == 2


def test_replay_job_refuses_a_rule_for_absent_ranks_too(tmp_path):
    from chakra.errors import UsageError

    p = waiting_file(tmp_path / "job.0.et")
    with pytest.raises(UsageError, match=r"what-if 'cpu@9': no such rank in the replay \(its ranks: 0\)"):
        replay_job([p], whatif=WhatIf(delay=[parse_rule("cpu@9=5", "delay (µs)")]), couple=False)


def test_the_kept_plan_is_the_one_the_critical_path_would_rebuild(tmp_path):
    from chakra.replay import replay_rank

    g = load_graph(waiting_file(tmp_path / "job.0.et"))
    kept = replay_rank(g, keep_plan=True)
    assert kept.plan is not None and replay_rank(g).plan is None       # not held on unless asked
    walked = critical_path(kept)
    kept.plan = None                                                    # rebuilt from the graph
    rebuilt = critical_path(kept)
    assert (walked.nodes, walked.charges, walked.links, walked.between) == \
        (rebuilt.nodes, rebuilt.charges, rebuilt.links, rebuilt.between)
    assert walked.nodes == [1, 2, 3] and sum(walked.charges) + sum(walked.between.values()) == 39


def test_the_model_reads_the_communication_nodes_only():
    # a rank of compute, all-reduce, METADATA, send, recv: the model times nodes 1, 3 and 4 (ascending):
    # 10 µs + 1,000 B at 10 GB/s for a send or recv (10.1 µs); an all-reduce of one rank moves nothing
    from chakra.replay.graph import graph_from_specs
    from chakra.replay.whatif import comm_positions
    from chakra.schema import COMM_RECV_NODE, METADATA_NODE

    specs = [NodeSpec(0, 5.0),
             NodeSpec(1, 0.0, is_cpu=False, type=COMM_COLL_NODE, comm_type=ALL_REDUCE, comm_size=1000),
             NodeSpec(2, 0.0, type=METADATA_NODE),
             NodeSpec(3, 0.0, is_cpu=False, type=COMM_SEND_NODE, comm_dst=1, comm_size=1000),
             NodeSpec(4, 0.0, is_cpu=False, type=COMM_RECV_NODE, comm_src=1, comm_size=1000)]
    assert comm_positions(graph_from_specs(specs, rank=0)) == [1, 3, 4]
    res = replay_nodes(specs, rank=0, whatif=WhatIf(model=(10.0, 10.0)))
    assert [round(e - s, 6) for s, e in zip(res.starts, res.ends)] == [5.0, 10.0, 0.0, 10.1, 10.1]
