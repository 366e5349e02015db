"""The network ASTRA-sim is given for a job: its cost model, fitted to the job's own collectives, and the
configuration files that carry it (``network.yml``, ``system.json``; the simulator's default remote memory).

How the simulator times a collective (its analytical, congestion-unaware backend; measured on the build in
``../shared/astra-sim`` over 2-8 ranks, every kind, sizes of 1 KiB - 16 MiB, ``tests/job/test_network.py``
compares this model with the binary): the ring implementation of a collective over ``n`` ranks sends
``messages`` messages one after another, each costing the link latency plus the system's endpoint delay,
and moves ``factor x comm_size`` bytes over the link bandwidth (GB/s of 2**30 bytes):

=================  ==============  ===============
kind               messages        factor
=================  ==============  ===============
all_reduce         2(n-1)          2(n-1)/n
all_gather         n-1             n-1  (``comm_size`` is one rank's input)
reduce_scatter     n-1             (n-1)/n
all_to_all         n(n-1)/2        (n-1)/2
send / recv        1               1  (no endpoint delay)
=================  ==============  ===============

with one dataset split (``preferred-dataset-splits: 1``; ``k`` splits multiply the messages by ``k``) and
the local-memory term switched off (``local-mem-bw`` far above any link: the fitted latency and bandwidth
hold every cost of a collective).  BROADCAST is timed by its ``duration_micros``, not by the network.

The fit: each collective of the job contributes its transfer time (from the last participant's arrival to
its end, the least any participant spent in it); ``latency`` and ``bandwidth`` are the least-squares fit of
``messages x latency + factor x bytes / bandwidth`` over them, then scaled down (both by one factor) until
the model is below the transfer time of every collective (``ENVELOPE_SHARE``): the network is the part
every collective pays, and what a collective took beyond it (gloo reducing on the CPU, a kernel's launch)
is that collective's own time, which the experiment writes beside it (:mod:`chakra.replay.materialize`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra.errors import TraceFormatError
from chakra.io import atomic_output
from chakra.schema import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    REDUCE_SCATTER,
)
from chakra.tunables import ENDPOINT_DELAY_NS, ENVELOPE_SHARE, NO_LOCAL_MEMORY_GBPS

#: a GB in the simulator's bandwidths
GIB = 2 ** 30

NETWORK_YML = "network.yml"
SYSTEM_JSON = "system.json"

#: what the simulator runs by the network (the rest are COMP nodes or timed by duration)
NETWORK_KINDS = {ALL_REDUCE: "all_reduce", ALL_GATHER: "all_gather", REDUCE_SCATTER: "reduce_scatter",
                 ALL_TO_ALL: "all_to_all"}


def ring_terms(comm_type: int | None, ntype: int, n: int) -> tuple[float, float]:
    """(messages, bytes factor) of one collective over ``n`` ranks in the simulator (module doc)."""
    if ntype in (COMM_SEND_NODE, COMM_RECV_NODE):
        return 1.0, 1.0
    n = max(1, n)
    if comm_type == ALL_REDUCE:
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if comm_type == ALL_GATHER:
        return float(n - 1), float(n - 1)
    if comm_type == REDUCE_SCATTER:
        return float(n - 1), (n - 1) / n
    if comm_type == ALL_TO_ALL:
        return n * (n - 1) / 2.0, (n - 1) / 2.0
    return 0.0, 0.0


@dataclass(slots=True)
class Network:
    """One network dimension: a ring of ``npus`` ranks, ``latency_ns`` per message, ``gbps`` per link."""

    npus: int
    latency_ns: float
    gbps: float
    topology: str = "Ring"
    source: str = "fitted"
    residuals: dict[str, dict[str, float]] = field(default_factory=dict)   # kind -> residual statistics

    def time_ns(self, comm_type: int | None, ntype: int, size: float, n: int) -> float:
        """What the simulator takes for one collective (or send/recv) of ``size`` bytes over ``n`` ranks."""
        messages, factor = ring_terms(comm_type, ntype, n)
        if messages == 0:
            return 0.0
        p2p = ntype in (COMM_SEND_NODE, COMM_RECV_NODE)
        per_message = self.latency_ns + (0.0 if p2p else ENDPOINT_DELAY_NS)
        return messages * per_message + factor * size / (self.gbps * GIB / 1e9)

    def time_us(self, comm_type: int | None, ntype: int, size: float, n: int) -> float:
        return self.time_ns(comm_type, ntype, size, n) / 1000.0

    def changed(self, gbps: float | None = None, latency_ns: float | None = None) -> Network:
        """This network with another bandwidth and/or latency (a what-if)."""
        return Network(self.npus, self.latency_ns if latency_ns is None else latency_ns,
                       self.gbps if gbps is None else gbps, self.topology, "what-if", dict(self.residuals))

    def describe(self) -> str:
        return (f"{self.topology} of {self.npus}, latency {self.latency_ns:,.0f} ns per message, "
                f"bandwidth {self.gbps:.4g} GB/s ({self.source})")


@dataclass(slots=True)
class Sample:
    """One collective of the job: what it is and how long its transfer took (µs)."""

    comm_type: int | None
    ntype: int
    size: float
    n: int
    transfer_us: float


def fit_network(samples: Sequence[Sample], npus: int) -> Network:
    """The network of the module doc, fitted to ``samples`` (collectives the simulator runs by the network).

    Without two distinct (messages, bytes) points, the latency comes from the smallest transfer alone."""
    pts = []
    for s in samples:
        m, f = ring_terms(s.comm_type, s.ntype, s.n)
        if m <= 0 or s.transfer_us <= 0:
            continue
        fixed = 0.0 if s.ntype in (COMM_SEND_NODE, COMM_RECV_NODE) else m * ENDPOINT_DELAY_NS
        pts.append((m, f * s.size, max(s.transfer_us * 1000.0 - fixed, 1.0)))
    if not pts:
        return Network(npus, 1000.0, 100.0, source="default: no collective to fit")
    lat, inv_bw = _least_squares(pts)
    # scale both down until the model stays below ENVELOPE_SHARE of the transfers (1.0: every one)
    ratios = sorted(t / (m * lat + b * inv_bw) for m, b, t in pts if m * lat + b * inv_bw > 0)
    k = ratios[int((1.0 - ENVELOPE_SHARE) * (len(ratios) - 1))] if ratios else 1.0
    k = min(1.0, k)
    lat *= k
    inv_bw *= k
    gbps = (1e9 / GIB) / inv_bw if inv_bw > 0 else 1e6       # bytes/ns -> GB/s of 2**30 bytes
    net = Network(npus, lat, min(gbps, 1e6), source=f"fitted on {len(pts)} collectives")
    net.residuals = _residuals(net, samples)
    return net


def _least_squares(pts: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """(latency ns, ns per byte) >= 0 minimising the squared error of ``m * lat + b * x`` over (m, b, t)."""
    smm = sum(m * m for m, _, _ in pts)
    sbb = sum(b * b for _, b, _ in pts)
    smb = sum(m * b for m, b, _ in pts)
    smt = sum(m * t for m, _, t in pts)
    sbt = sum(b * t for _, b, t in pts)
    det = smm * sbb - smb * smb
    if det > 1e-9 * max(smm * sbb, 1e-30):
        lat = (smt * sbb - sbt * smb) / det
        x = (sbt * smm - smt * smb) / det
        if lat >= 0 and x >= 0:
            return lat, x
    # one of them 0: the better of the two one-parameter fits
    cands = []
    if smm > 0:
        cands.append((smt / smm, 0.0))
    if sbb > 0:
        cands.append((0.0, sbt / sbb))
    if not cands:
        return 1000.0, 0.0

    def err(c: tuple[float, float]) -> float:
        return sum((m * c[0] + b * c[1] - t) ** 2 for m, b, t in pts)

    return min(cands, key=err)


def _residuals(net: Network, samples: Iterable[Sample]) -> dict[str, dict[str, float]]:
    """Per kind: how many, and the transfer time the model leaves over (µs: mean, min, max; % of the
    transfer time in all)."""
    acc: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        name = "send/recv" if s.ntype in (COMM_SEND_NODE, COMM_RECV_NODE) else NETWORK_KINDS.get(
            -1 if s.comm_type is None else s.comm_type, str(s.comm_type))
        acc.setdefault(name, []).append((s.transfer_us, net.time_us(s.comm_type, s.ntype, s.size, s.n)))
    out = {}
    for name, rows in sorted(acc.items()):
        res = [t - m for t, m in rows]
        total = sum(t for t, _ in rows)
        out[name] = {"count": len(rows), "mean_us": sum(res) / len(res), "min_us": min(res),
                     "max_us": max(res), "model_share_pct": 100.0 * sum(m for _, m in rows) / total if total
                     else 0.0}
    return out


def ring_finish(arrivals: Sequence[float], steps: int, total: float) -> list[float]:
    """When each member of a ring collective finishes in the simulator, given when each issued it (in ring
    order: member k receives from member k-1), its number of steps and its time when all issue together.

    Each step is a message to the next member; a member sends step s+1 once it has received step s, and is
    done when it has received the last one (measured: of two ranks issuing an all_gather 157 µs apart with a
    137.5 µs latency, the late one finished 20 ns after it issued, the early one a latency after the late
    one issued).  All issuing at ``t``: every member finishes at ``t + total``."""
    n = len(arrivals)
    if n < 2 or steps < 1:
        return [a + total for a in arrivals]
    cost = total / steps
    send = list(arrivals)
    recv = list(arrivals)
    for _ in range(steps):
        recv = [send[k - 1] + cost for k in range(n)]
        send = [max(r, a) for r, a in zip(recv, arrivals)]
    return [max(a, r) for a, r in zip(arrivals, recv)]


def ring_steps(comm_type: int | None, ntype: int, n: int) -> int:
    """The messages one member sends one after another (:func:`ring_terms`), at least 1."""
    return max(1, int(round(ring_terms(comm_type, ntype, n)[0])))


# ------------------------------------------------------------------------------------------ the files
def network_yaml(net: Network) -> str:
    return (f"# fitted by chakra: {net.describe()}\n"
            f"topology: [ {net.topology} ]\nnpus_count: [ {net.npus} ]\n"
            f"bandwidth: [ {_num(net.gbps)} ]  # GB/s\nlatency: [ {_num(net.latency_ns)} ]  # ns\n")


def system_config() -> dict[str, Any]:
    """The system of an experiment (module doc: ring collectives, one dataset split, no local-memory term)."""
    return {
        "scheduling-policy": "LIFO",
        "endpoint-delay": ENDPOINT_DELAY_NS,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1,
        "all-reduce-implementation": ["ring"],
        "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"],
        "all-to-all-implementation": ["ring"],
        "collective-optimization": "localBWAware",
        "local-mem-bw": NO_LOCAL_MEMORY_GBPS,
        "boost-mode": 0,
        "roofline-enabled": 0,
        "peak-perf": 900,
    }


def write_configs(out_dir: str | os.PathLike[str], net: Network) -> dict[str, Path]:
    """network.yml and system.json in ``out_dir``; {kind: path}."""
    out = Path(out_dir)
    paths = {"network": out / NETWORK_YML, "system": out / SYSTEM_JSON}
    with atomic_output(paths["network"]) as fh:
        fh.write(network_yaml(net).encode())
    with atomic_output(paths["system"]) as fh:
        fh.write((json.dumps(system_config(), indent=2) + "\n").encode())
    return paths


def read_network_yaml(path: str | os.PathLike[str]) -> dict[str, list[Any]]:
    """The lists of an ASTRA-sim network YAML (``topology``, ``npus_count``, ``bandwidth``, ``latency``:
    one entry per dimension), read without a YAML library (the format is flat: ``key: [ a, b ]``)."""
    out: dict[str, list[Any]] = {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TraceFormatError(f"cannot read the network file ({exc.strerror})", path) from None
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or ":" not in line:
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        items = value[1:-1].split(",") if value.startswith("[") and value.endswith("]") else [value]
        vals: list[Any] = []
        for item in (x.strip() for x in items if x.strip()):
            try:
                vals.append(float(item) if any(c in item for c in ".eE") else int(item))
            except ValueError:
                vals.append(item)
        out[key.strip()] = vals
    for key in ("npus_count",):
        if key not in out:
            raise TraceFormatError(f"network file has no {key}", path)
    return out


def npus_of(network: Mapping[str, list[Any]]) -> int:
    """The number of NPUs a network file describes: the product of its ``npus_count``."""
    return math.prod(int(x) for x in network.get("npus_count", [1]))


def _num(x: float) -> str:
    return f"{x:.6g}"
