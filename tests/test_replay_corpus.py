"""Fidelity on the real corpus: link + convert every rank, replay, compare with the measured step.

The numbers asserted here were measured on the corpus (see the table in the replay notes):
per-rank replay within 1% on every rank of dlrm_8r_v100 and of every cpu_gloo job; whole-job
replay (ranks aligned on their recorded window starts) within 1% on dlrm_8r_v100, tp_like_2r and
fsdp_2r with the default "min" collective duration (ddp_mlp_4r: +6.4% on rank 2, gloo's ring
all_reduce does not end together on all ranks), and within 0.1% on every job with "net".
"""

from __future__ import annotations

import pytest

from chakra.replay import replay_job

pytest.importorskip("chakra.link.api")
pytest.importorskip("chakra.convert")

JOBS = {
    "dlrm_8r_v100": (8, "host/host_et_{r}.json.gz", "device/kineto_{r}.json.gz"),
    "cpu_gloo/ddp_mlp_4r": (4, "host_et_{r}.json.gz", "kineto_{r}.json.gz"),
    "cpu_gloo/tp_like_2r": (2, "host_et_{r}.json.gz", "kineto_{r}.json.gz"),
    "cpu_gloo/fsdp_2r": (2, "host_et_{r}.json.gz", "kineto_{r}.json.gz"),
    "cpu_gloo/single_1r": (1, "host_et_{r}.json.gz", "kineto_{r}.json.gz"),
    "simple_add_1r": (1, "host_et_{r}.json.gz", "kineto_{r}.json.gz"),   # measured = the Kineto span
}


@pytest.fixture(scope="module")
def converted(corpus, tmp_path_factory):
    from chakra.convert import convert_file
    from chakra.link.api import link_files

    out = {}
    root = tmp_path_factory.mktemp("replay_corpus")
    for job, (n, host, kineto) in JOBS.items():
        d = root / job.replace("/", "_")
        d.mkdir()
        ets = []
        for r in range(n):
            plus, et = d / f"plus_{r}.json", d / f"job.{r}.et"
            link_files(corpus / job / host.format(r=r), corpus / job / kineto.format(r=r), plus, rank=r)
            convert_file(plus, et)
            ets.append(et)
        out[job] = ets
    return out


@pytest.mark.slow
@pytest.mark.parametrize("job", list(JOBS))
def test_per_rank_replay_reproduces_the_measured_step(converted, job):
    result = replay_job(converted[job], couple=False)
    assert len(result.ranks) == JOBS[job][0]
    for res in result:
        assert res.measured_us is not None
        assert abs(res.error_pct) < 1.0, (job, res.rank, res.replayed_us, res.measured_us)


@pytest.mark.slow
@pytest.mark.parametrize("job", ["dlrm_8r_v100", "cpu_gloo/tp_like_2r", "cpu_gloo/fsdp_2r"])
def test_whole_job_replay_reproduces_the_measured_steps(converted, job):
    result = replay_job(converted[job])
    assert result.groups > 0
    for res in result:
        assert abs(res.error_pct) < 1.5, (job, res.rank, res.replayed_us, res.measured_us)


@pytest.mark.slow
@pytest.mark.parametrize("job", [j for j in JOBS if JOBS[j][0] > 1])
def test_whole_job_replay_with_net_collective_durations(converted, job):
    result = replay_job(converted[job], collective="net")
    for res in result:
        assert abs(res.error_pct) < 1.0, (job, res.rank, res.replayed_us, res.measured_us)


def test_min_collective_duration_ends_ring_collectives_together(converted):
    # ddp_mlp_4r rank 2 finished its gloo all_reduces ~3 ms before the others: "min" ends them together
    result = replay_job(converted["cpu_gloo/ddp_mlp_4r"])
    assert result.ranks[2].error_pct == pytest.approx(6.4, abs=0.5)


@pytest.mark.slow
def test_whole_job_replay_needs_the_clock_alignment(converted):
    # DLRM ranks enter ProfilerStep#10 up to 7.5 ms apart; started together, the early finishers wait
    result = replay_job(converted["dlrm_8r_v100"], align=False)
    assert max(res.error_pct for res in result) > 40
