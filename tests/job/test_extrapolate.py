"""``chakra extrapolate``: a measured job's files -> a larger data-parallel job (issue 32).

- the measured size gives the measured files back, byte for byte;
- gloo_mlp_2r's ASTRA-sim experiment (``chakra pipeline --astrasim``) grown to 8 ranks runs in ASTRA-sim and
  in ``chakra replay --job``: every rank takes its measured rank's time plus what the fitted ring adds to its
  two all-reduces (12 more messages of the fitted latency each: 2(8-1) against 2(2-1));
- a generated DDP job grown to 1,024 ranks runs in both, at the time the network gives by hand;
- a generated TP x DP job (tp 2, 4 ranks) grown to 8: the groups checked by hand, in the comm-group file and
  in each rank's collectives;
- a hand-built job with a process-group table, a METADATA node and send/recv: the table, pg sizes and peers of
  the new ranks; a send to another replica and a size that is no whole number of replicas are refused
  (exit 2), leaving nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.astrasim import ASTRASIM, run

from chakra import schema as pb
from chakra.cli import extrapolate as cli
from chakra.io import load_json, read_messages
from chakra.job.extrapolate import extrapolate
from chakra.job.network import Network, read_network_yaml, write_configs
from chakra.replay.api import replay_job
from chakra.tools.generator import GenSpec, generate

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """gloo_mlp_2r's ASTRA-sim experiment: its prefix (the files, network.yml, system.json beside)."""
    from chakra.pipeline import run_pipeline

    out = tmp_path_factory.mktemp("mlp2") / "exp"
    res = run_pipeline(DATA / "gloo_mlp_2r", out, jobs=1, astrasim=True)
    return out / res.name


def _gen(folder: Path, workload: str, n: int, **kw) -> Path:
    generate(GenSpec(num_npus=n, workloads=[workload], **kw), f"{folder}/")
    return folder / workload


def _meta(path: Path) -> dict:
    md, _ = read_messages(path, pb.GlobalMetadata, pb.Node)
    return {a.name: pb.attr_value(a) for a in md.attr}


def _comms(path: Path) -> list[dict]:
    _, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    out = []
    for nd in nodes:
        a = {x.name: pb.attr_value(x) for x in nd.attr}
        if nd.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE) and "timing_piece" not in a:
            out.append({"name": nd.name, "dur": nd.duration_micros, **a})
    return out


def test_the_measured_size_gives_the_measured_files(experiment, tmp_path):
    res = extrapolate(str(experiment), 2, str(tmp_path / "same"))
    assert [p.name for p in res.outputs] == ["same.0.et", "same.1.et"]
    for r in range(2):
        assert (tmp_path / f"same.{r}.et").read_bytes() == Path(f"{experiment}.{r}.et").read_bytes()
    assert res.retimed == 0
    net = read_network_yaml(tmp_path / "same.network.yml")
    assert net == read_network_yaml(experiment.parent / "network.yml")
    assert json.loads((tmp_path / "same.comm_group.json").read_text()) == {}   # the world only
    tp = _gen(tmp_path / "gen", "tp", 4, tp_size=2, layers=2)
    extrapolate(str(tp), 4, str(tmp_path / "tp4"))
    for r in range(4):
        assert (tmp_path / f"tp4.{r}.et").read_bytes() == Path(f"{tp}.{r}.et").read_bytes()
    assert json.loads((tmp_path / "tp4.comm_group.json").read_text()) == \
        json.loads(Path(f"{tp}.comm_group.json").read_text())


def test_the_ddp_experiment_grown_to_8_ranks(experiment, tmp_path):
    out = tmp_path / "big"
    res = extrapolate(str(experiment), 8, str(out))
    assert (res.layout.replica, res.layout.world) == (1, ["0"])
    assert res.retimed == 4            # 2 ranks x 2 all_reduces
    lat_us = read_network_yaml(experiment.parent / "network.yml")["latency"][0] / 1000.0
    assert read_network_yaml(f"{out}.network.yml")["npus_count"] == [8]
    assert _meta(Path(f"{out}.5.et"))["rank"] == 5 and _meta(Path(f"{out}.5.et"))["world_size"] == 8
    table = json.loads(_meta(Path(f"{out}.5.et"))["process_groups"])
    assert [(g["pg_name"], g["ranks"]) for g in table] == [("0", list(range(8)))]
    # per-rank bytes kept; the duration grows by the ring's 12 more messages (bandwidth 1e6 GB/s: nothing)
    before, after = _comms(Path(f"{experiment}.1.et")), _comms(Path(f"{out}.7.et"))
    assert [c["comm_size"] for c in after] == [c["comm_size"] for c in before] == [27168, 27168]
    assert [c["dur"] - b["dur"] for c, b in zip(after, before)] == [round(12 * lat_us)] * 2
    two = replay_job([Path(f"{experiment}.{r}.et") for r in range(2)], mode="astrasim")
    eight = replay_job([Path(f"{out}.{r}.et") for r in range(8)], mode="astrasim")
    for r in range(8):
        expected = two.ranks[r % 2].replayed_us + 24 * lat_us
        assert eight.ranks[r].replayed_us == pytest.approx(expected, abs=2.0)
    lanes = replay_job([Path(f"{out}.{r}.et") for r in range(8)])        # the default mode runs too
    assert sorted(lanes.ranks) == list(range(8))
    if ASTRASIM is not None:
        sim = run(out, 8, f"{out}.comm_group.json", "--network", f"{out}.network.yml", "--system",
                  f"{out}.system.json")
        sim2 = run(experiment, 2, None, "--network", str(experiment.parent / "network.yml"), "--system",
                   str(experiment.parent / "system.json"))
        for r in range(8):
            assert sim[r] / 1000.0 == pytest.approx(sim2[r % 2] / 1000.0 + 24 * lat_us, abs=1.0)
            assert sim[r] / 1000.0 == pytest.approx(eight.ranks[r].replayed_us, abs=1.0)


@pytest.mark.slow
def test_a_ddp_job_grown_to_1024_ranks(tmp_path):
    """Three nodes per rank (a 10 µs forward, a 10 µs weight gradient, a 1 MiB all_reduce), 2 -> 1,024 ranks.
    By hand: the simulator's ring of 1,024 sends 2,046 messages of 1,000 + 10 ns and 2 x 1023/1024 MiB at
    100 GiB/s, 2,066,460 + 19,512 ns, after the 20 µs of compute; the replay's own model, without a fitted
    network (10 µs, 10 GB/s): 10 µs + 2,095,104 B / 10 GB/s = 219.51 µs after the same 20 µs."""
    gen = _gen(tmp_path / "gen", "dp", 2, layers=1)
    write_configs(gen.parent, Network(2, 1000.0, 100.0))
    out = tmp_path / "big"
    rc = cli.main([str(gen), "--ranks", "1024", "-o", str(out), "-q"])
    assert rc == 0
    assert load_json(f"{out}.comm_group.json") == {}
    job = replay_job([Path(f"{out}.{r}.et") for r in range(1024)])
    assert {round(rep.replayed_us, 2) for rep in job.ranks.values()} == {239.51}
    if ASTRASIM is not None:
        sim = run(out, 1024, f"{out}.comm_group.json", "--network", f"{out}.network.yml", "--system",
                  f"{out}.system.json")
        assert len(sim) == 1024 and len(set(sim.values())) == 1
        assert sim[0] == pytest.approx(20_000 + 2_066_460 + 19_512, rel=1e-3)


def test_a_tp_x_dp_job_grown_to_8_ranks(tmp_path):
    tp = _gen(tmp_path / "gen", "tp", 4, tp_size=2, layers=2)
    out = tmp_path / "tp8"
    assert cli.main([str(tp), "--ranks", "8", "-o", str(out)]) == 0
    groups = load_json(f"{out}.comm_group.json")
    # model groups of 2 inside each replica (two new ones), data groups across the four replicas
    assert groups == {"1": [0, 1], "2": [2, 3], "3": [0, 2, 4, 6], "4": [1, 3, 5, 7], "5": [4, 5],
                      "6": [6, 7]}
    # every rank's collectives: the tp ones in its replica's model group, the dp ones in its data group
    for r in range(8):
        pgs = {c["pg_name"] for c in _comms(Path(f"{out}.{r}.et"))}
        model = {0: "1", 1: "2", 2: "5", 3: "6"}[r // 2]
        assert pgs == {model, "3" if r % 2 == 0 else "4"}, r
        assert r in groups[model]
        assert _meta(Path(f"{out}.{r}.et"))["world_size"] == 8
    job = replay_job([Path(f"{out}.{r}.et") for r in range(8)], comm_groups=str(f"{out}.comm_group.json"))
    assert sorted(job.ranks) == list(range(8))
    if ASTRASIM is not None:
        assert len(run(out, 8, f"{out}.comm_group.json")) == 8
