"""chakra pipeline --astrasim writes an ASTRA-sim experiment that reproduces the measured job (issue 31):
every rank of every multi-rank job, in the real simulator, within 2% of the later of its measured window's
end and the end of the work started in it (the issue's bound: median 3%, max 10%; before the experiment
the simulator was -2..-49% off on these jobs), and the ASTRA-sim rule replay of the written files within
1% of the simulator on every rank (two implementations of one rule set)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from conftest import assert_replayed_within
from helpers.astrasim import ASTRASIM, needs_astrasim

from chakra.io import load_json
from chakra.job.network import npus_of, read_network_yaml
from chakra.pipeline import run_pipeline
from chakra.replay.api import replay_job

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS_JOBS = ["dlrm_8r_v100", "cpu_gloo/tp_like_2r", "cpu_gloo/ddp_mlp_4r", "cpu_gloo/fsdp_2r"]
OWN_JOBS = ["gloo_mlp_2r", "gloo_collectives_2r", "gloo_skew_2r", "gloo_ddp_cycle_4r", "gloo_one_iter_2r",
            "gloo_pipeline_3r", "gloo_moe_4r"]


def _reference(row: dict) -> float:
    return max(row["measured_us"], row.get("recorded_end_us") or 0.0)


def _check(src: Path, out: Path) -> list[float]:
    """Run the experiment (in the simulator when it is here); the simulator's error per rank."""
    res = run_pipeline(src, out, jobs=1, astrasim=True,
                       simulator=ASTRASIM / "run.sh" if ASTRASIM is not None else None)
    summary = load_json(out / "summary.json")
    exp = summary["astrasim"]["experiment"]
    name = res.name
    n = len(summary["ranks"])
    npus = max(n, 2)
    # the experiment is self-contained: its files, the command that runs them
    net = read_network_yaml(out / "network.yml")
    assert npus_of(net) == npus
    assert (out / "system.json").is_file()
    assert exp["command"].startswith(f"run.sh {name} {npus} ")
    assert exp["command"] in (out / "summary.md").read_text()
    # the ASTRA-sim rule replay of the written files against the replay they were written from
    emulated = replay_job([out / f"{name}.{r['rank']}.et" for r in summary["ranks"]], mode="astrasim")
    offsets = exp["start_offsets_us"]
    for row in summary["ranks"]:
        t = emulated.ranks[row["rank"]].replayed_us - offsets[str(row["rank"])]
        assert t == pytest.approx(row["replayed_us"], rel=0.01), row["rank"]
        parts = row["simulated_breakdown_us"]          # compute + exposed communication + idle = the time
        assert sum(parts.values()) == pytest.approx(t, rel=1e-9)
        assert min(parts.values()) >= 0.0
        if ASTRASIM is not None:   # ... and against the simulator
            assert t == pytest.approx(row["simulated_us"], rel=0.01), row["rank"]
    if ASTRASIM is None:
        return []
    return [100.0 * (r["simulated_us"] - _reference(r)) / _reference(r) for r in summary["ranks"]]


@needs_astrasim
@pytest.mark.parametrize("job", CORPUS_JOBS)
def test_the_simulator_reproduces_every_corpus_job(corpus, tmp_path, job):
    errs = _check(corpus / job, tmp_path / "out")
    assert max(abs(e) for e in errs) <= 2.0, errs
    assert statistics.median(abs(e) for e in errs) <= 1.0, errs


@pytest.mark.parametrize("job", OWN_JOBS)
def test_the_project_jobs_experiments(tmp_path, job):
    """Without the simulator, the ASTRA-sim rule replay still checks the written files."""
    errs = _check(DATA / job, tmp_path / "out")
    if errs:
        assert max(abs(e) for e in errs) <= 2.0, errs


def test_a_pipeline_jobs_experiment_pairs_each_send_with_its_receive(tmp_path):
    """Three pipeline stages passing 3 micro-batches' activations and gradients by send/recv
    (trace_collection, --job pipeline; 12 send/recv pairs).  A written comm node starts when it arrives and
    lasts the network model's time: with the recorded window start kept in the written files, the rule
    replay of them (and the breakdown) took start + duration for the ends, matched channel 1->2 shifted by
    one and kept 10 pairs of 12 (rank 0's breakdown summed to 52,977 µs, the simulator's time 53,676 µs).
    _check holds each rank's rule replay to the replay, its breakdown to its time and to the simulator."""
    out = tmp_path / "out"
    _check(DATA / "gloo_pipeline_3r", out)
    written = replay_job([out / f"gloo_pipeline_3r.{r}.et" for r in range(3)], mode="astrasim")
    assert len(written.groups_members) == 12


def test_an_moe_jobs_expert_groups_are_coupled_apart(tmp_path):
    """tests/data/gloo_moe_4r: uneven all_to_alls on expert groups [0, 1] and [2, 3], an all_reduce on the
    world.  Taken for the world (gloo records name no group), the job coupled group [0, 1]'s all_to_alls
    with [2, 3]'s: ranks 0 and 1 replayed +6.52% and +6.42% (and so in ASTRA-sim, every all_to_all on 4
    NPUs); with each on its group every rank replays within 2% of its measured step."""
    run_pipeline(DATA / "gloo_moe_4r", tmp_path, jobs=1, job_replay=True)
    rows = load_json(tmp_path / "summary.json")["ranks"]
    assert len(rows) == 4
    assert_replayed_within(rows, 0.02)


def test_summary_md_names_the_simulator_and_the_fit(tmp_path):
    out = tmp_path / "out"
    run_pipeline(DATA / "gloo_mlp_2r", out, jobs=1, astrasim=True)
    text = (out / "summary.md").read_text()
    assert "## ASTRA-sim experiment" in text
    assert "| all_reduce |" in text          # the fit's residual, per kind
    summary = load_json(out / "summary.json")
    assert summary["files"]["network"] == "network.yml" and summary["files"]["system"] == "system.json"
    fit = summary["astrasim"]["experiment"]["fit"]
    assert fit["residuals"]["all_reduce"]["count"] == 4     # 2 ranks x 2 profiled steps, one bucket each


def test_validate_checks_the_network_against_the_job(tmp_path):
    from chakra.job.validate import validate

    out = tmp_path / "out"
    run_pipeline(DATA / "gloo_collectives_2r", out, jobs=1, astrasim=True)
    files = [out / "gloo_collectives_2r.0.et", out / "gloo_collectives_2r.1.et"]
    assert validate(files, network=out / "network.yml").ok
    three = tmp_path / "three.yml"
    three.write_text("topology: [ Ring ]\nnpus_count: [ 3 ]\nbandwidth: [ 10 ]\nlatency: [ 500, 500 ]\n")
    texts = [p.text for p in validate(files, network=three).problems]
    assert texts == [f"{three}: the network has 3 NPUs (npus_count [3]), the job 2 ranks",
                     f"{three}: latency has 2 entries for 1 dimensions"]
    groups = tmp_path / "groups.json"
    groups.write_text('{"1": [0, 1], "7": [1, 2]}')
    texts = [p.text for p in validate(files, network=out / "network.yml", comm_group=groups).problems]
    assert "process group '7' names rank(s) [2], which the network (2 NPUs) does not have" in texts


@needs_astrasim
@pytest.mark.parametrize("job, change", [
    pytest.param("dlrm_8r_v100", {"bandwidth_gbps": 5.0}, marks=pytest.mark.slow),
    pytest.param("dlrm_8r_v100", {"scale": ["cpu=1.3"]}, marks=pytest.mark.slow),
    ("cpu_gloo/ddp_mlp_4r", {"scale": ["cpu=1.5"]}),
    ("cpu_gloo/tp_like_2r", {"delay": ["aten::mm=2000@1"]}),
])
def test_a_whatif_reaches_the_simulator(corpus, tmp_path, job, change):
    """The same what-if in the replay and in ASTRA-sim (node durations, or the network file): their
    predicted changes of each rank's time agree within 5 percentage points (the issue's bound)."""
    from chakra.replay.whatif import WhatIf, parse_rule

    w = WhatIf(scale=[parse_rule(x) for x in change.get("scale", [])],
               delay=[parse_rule(x, "delay") for x in change.get("delay", [])],
               bandwidth_gbps=change.get("bandwidth_gbps"))
    base, what = tmp_path / "base", tmp_path / "what"
    run_pipeline(corpus / job, base, jobs=1, simulator=ASTRASIM / "run.sh")
    run_pipeline(corpus / job, what, jobs=1, simulator=ASTRASIM / "run.sh", whatif=w)
    rows = zip(load_json(base / "summary.json")["ranks"], load_json(what / "summary.json")["ranks"])
    moved = False
    for b, a in rows:
        replay = 100.0 * (a["replayed_us"] - b["replayed_us"]) / b["replayed_us"]
        sim = 100.0 * (a["simulated_us"] - b["simulated_us"]) / b["simulated_us"]
        assert abs(replay - sim) <= 5.0, (b["rank"], replay, sim)
        moved = moved or abs(sim) > 1.0
    assert moved          # (a what-if that changes nothing would pass vacuously)


def test_rooted_collectives_and_barriers_keep_their_ranks_waiting_for_each_other(tmp_path):
    """tests/data/gloo_rooted_6r (trace_collection --job rooted, 6 ranks): per step a broadcast from rank 5,
    a reduce to rank 1, a gather to rank 2, a scatter from rank 5, an all_reduce and a barrier.  The
    simulator runs none of reduce, gather, scatter or barrier; written as COMP nodes of their recorded
    duration, every rank waited for its peers twice (once as replayed, once as recorded): the experiment
    replayed (and ASTRA-sim ran) each rank +10.6% to +11.9% over its measured step.  Written as the
    all_reduce / all_gather / reduce_scatter over the same ranks, they are matched and the experiment
    gives what the job replay gives, within 4% of the measured step on every rank."""
    out = tmp_path / "out"
    _check(DATA / "gloo_rooted_6r", out)
    rows = load_json(out / "summary.json")["ranks"]
    assert len(rows) == 6
    assert_replayed_within(rows, 0.04)
    written = replay_job([out / f"gloo_rooted_6r.{r}.et" for r in range(6)], mode="astrasim")
    # per step 6 collectives (broadcast, reduce, gather, scatter, all_reduce, barrier), 2 steps
    assert len(written.groups_members) == 12
