"""The simulator's network as the experiment models it (chakra.job.network): the cost of a collective, the
ring in which its members finish, the fit, the files.  The model is checked against the real binary."""

from __future__ import annotations

import json

import pytest
from helpers.astrasim import run

from chakra.io import write_messages
from chakra.job.network import (
    Network,
    Sample,
    fit_network,
    npus_of,
    read_network_yaml,
    ring_finish,
    ring_steps,
    system_config,
    write_configs,
)
from chakra.schema import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    COMM_COLL_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    REDUCE_SCATTER,
    AttributeProto,
    GlobalMetadata,
    Node,
)


def _collective(kind: int, size: int) -> Node:
    n = Node(id=1, name="c", type=COMM_COLL_NODE)
    n.attr.extend([AttributeProto(name="is_cpu_op", bool_val=False),
                   AttributeProto(name="comm_type", int64_val=kind),
                   AttributeProto(name="comm_size", int64_val=size),
                   AttributeProto(name="pg_name", string_val="")])
    return n


@pytest.mark.parametrize("kind", [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL])
def test_the_model_is_what_the_simulator_takes(tmp_path, kind):
    """One collective alone on 2, 3, 4 and 8 ranks, 1 KiB and 1 MiB, on a fast and a slow network: the
    model is within 100 ns (the simulator rounds each message) of the simulator's time."""
    for n in (2, 3, 4, 8):
        for size in (1024, 1 << 20):
            for lat, gbps in ((500.0, 150.0), (20_000.0, 2.0)):
                net = Network(n, lat, gbps)
                d = tmp_path / f"{kind}_{n}_{size}_{int(lat)}"
                d.mkdir()
                for r in range(n):
                    write_messages(d / f"job.{r}.et",
                                   [GlobalMetadata(version="0.0.4"), _collective(kind, size)])
                paths = write_configs(d, net)
                got = run(d / "job", n, None, "--network", str(paths["network"]), "--system",
                          str(paths["system"]))
                want = net.time_ns(kind, COMM_COLL_NODE, size, n)
                assert abs(max(got.values()) - want) <= 100, (kind, n, size, lat, gbps, got, want)


def test_ring_finish_of_two_ranks_issuing_apart():
    """Read off the simulator (fsdp_2r's first all_gather): rank 1 issued 157 µs after rank 0 with a
    137.5 µs message; rank 1 finished as it issued (rank 0's message had arrived), rank 0 one message after
    rank 1 issued."""
    assert ring_finish([0.0, 157.0], 1, 137.5) == [294.5, 157.0]


def test_ring_finish_of_ranks_issuing_together_is_the_model():
    steps = ring_steps(ALL_REDUCE, COMM_COLL_NODE, 4)
    assert steps == 6
    assert ring_finish([10.0, 10.0, 10.0, 10.0], steps, 60.0) == [70.0] * 4


@pytest.mark.parametrize("kind", [ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL])
@pytest.mark.parametrize("delays", [[0, 0, 100, 0], [50, 0, 0, 200], [0, 30, 0, 0, 300, 0, 0, 5], [0, 157]])
def test_ring_finish_is_when_the_simulator_ends_each_rank(tmp_path, kind, delays):
    """Ranks issuing one collective at different times (a COMP node of the delay before it): each rank
    ends where ring_finish says, to 0.2 µs (the simulator rounds each message)."""
    n = len(delays)
    net = Network(n, 10_000.0, 10.0)
    for r, d in enumerate(delays):
        wait = Node(id=1, name="w", type=COMP_NODE, duration_micros=d)
        wait.attr.append(AttributeProto(name="is_cpu_op", bool_val=True))
        coll = _collective(kind, 65536)
        coll.id = 2
        coll.data_deps.append(1)
        write_messages(tmp_path / f"job.{r}.et", [GlobalMetadata(version="0.0.4"), wait, coll])
    paths = write_configs(tmp_path, net)
    got = run(tmp_path / "job", n, None, "--network", str(paths["network"]), "--system", str(paths["system"]))
    # (a 0-µs node lasts 1 ns in the simulator)
    want = ring_finish([d + (0.001 if not d else 0.0) for d in delays], ring_steps(kind, COMM_COLL_NODE, n),
                       net.time_us(kind, COMM_COLL_NODE, 65536, n))
    assert [got[r] / 1000.0 for r in range(n)] == pytest.approx(want, abs=0.2)


def test_the_fit_recovers_a_network_from_its_own_times():
    truth = Network(4, 2500.0, 12.0)
    samples = [Sample(k, COMM_COLL_NODE, s, 4, truth.time_us(k, COMM_COLL_NODE, s, 4))
               for k in (ALL_REDUCE, ALL_GATHER, ALL_TO_ALL) for s in (4096, 1 << 20, 8 << 20)]
    fit = fit_network(samples, 4)
    assert fit.latency_ns == pytest.approx(2500.0, rel=1e-6)
    assert fit.gbps == pytest.approx(12.0, rel=1e-6)
    assert all(abs(r["mean_us"]) < 1e-6 for r in fit.residuals.values())


def test_the_fit_stays_below_every_transfer():
    """Transfers that took longer than the network (gloo reducing on the CPU) are left over as their own
    time, never negative: the model is below each of them."""
    truth = Network(2, 1000.0, 50.0)
    samples = [Sample(ALL_REDUCE, COMM_COLL_NODE, s, 2, truth.time_us(ALL_REDUCE, COMM_COLL_NODE, s, 2) * f)
               for s, f in ((1024, 3.0), (1 << 16, 1.0), (1 << 20, 1.5), (4 << 20, 1.1))]
    samples.append(Sample(None, COMM_SEND_NODE, 1 << 20, 2, 30.0))
    fit = fit_network(samples, 2)
    for s in samples:
        assert fit.time_us(s.comm_type, s.ntype, s.size, s.n) <= s.transfer_us + 1e-9
    assert fit.residuals["all_reduce"]["count"] == 4 and fit.residuals["send/recv"]["count"] == 1


def test_configs_are_what_run_sh_reads(tmp_path):
    paths = write_configs(tmp_path, Network(8, 117.0, 71.03))
    net = read_network_yaml(paths["network"])
    assert net["topology"] == ["Ring"] and net["npus_count"] == [8] and npus_of(net) == 8
    assert net["bandwidth"] == [71.03] and net["latency"] == [117]
    assert json.loads(paths["system"].read_text()) == system_config()
    assert system_config()["preferred-dataset-splits"] == 1
