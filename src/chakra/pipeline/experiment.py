"""A self-contained ASTRA-sim experiment of a job: its ``.et`` files timed so that the simulator reproduces
the replay, the network fitted to its collectives, and the configuration files and command line to run it.

``chakra pipeline DIR -o OUT --astrasim`` calls :func:`build_experiment` after the job-level pass
(:mod:`chakra.job.astrasim`) has made the ranks' files agree with each other: the job is replayed (lanes
mode, ranks coupled), the network is fitted to the transfers of its collectives
(:func:`chakra.job.network.fit_network`), and every rank is rewritten by
:func:`chakra.replay.materialize.materialize_job`.  A what-if is applied in that replay (node durations)
and, for ``--bandwidth`` / ``--latency``, to the network file, so the same change runs in both.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra import schema as pb
from chakra.formats import ATTR_COMM_SIZE, ATTR_COMM_TYPE, META_RANK
from chakra.io import atomic_output
from chakra.io.pbstream import read_messages, write_frames
from chakra.job.network import NETWORK_KINDS, Network, Sample, fit_network, write_configs
from chakra.job.simulator import CONFIG_OPTIONS
from chakra.replay.api import JobResult, replay_job
from chakra.replay.graph import COMM_TYPES
from chakra.replay.materialize import Materialized, materialize_job
from chakra.replay.whatif import group_size
from chakra.schema import COMM_COLL_NODE
from chakra.tunables import TOGETHER_PP


@dataclass(slots=True)
class Experiment:
    """What :func:`build_experiment` wrote and what it rests on."""

    prefix: Path
    ranks: list[int]
    npus: int
    network: Network
    fitted: Network                         # the network fitted to the recording (before a what-if)
    configs: dict[str, Path]
    comm_group: Path | None
    job: JobResult                          # the replay the files reproduce
    offsets_us: dict[int, float] = field(default_factory=dict)   # rank -> its start on the job's clock
    short_transfers: int = 0
    pieces: dict[str, int] = field(default_factory=dict)

    def command(self, run_sh: str | os.PathLike[str] = "run.sh", here: bool = False) -> str:
        """The ASTRA-sim launcher's command line that runs the experiment (``../shared/astra-sim/run.sh``);
        ``here``: with the files named from the experiment's folder (run it there)."""
        def name(p: Path) -> str:
            return p.name if here else os.fspath(p)

        args = [os.fspath(run_sh), name(self.prefix), str(self.npus)]
        if self.comm_group is not None:
            args += ["--comm-group", name(self.comm_group)]
        for key, opt in CONFIG_OPTIONS.items():
            args += [opt, name(self.configs[key])]
        return shlex.join(args)

    def describe(self) -> dict[str, Any]:
        """For summary.json: the network, the fit's residual per kind, what was added, the command line."""
        net, fit = self.network, self.fitted
        return {
            "network": {"topology": net.topology, "npus": net.npus, "latency_ns": net.latency_ns,
                        "bandwidth_gbps": net.gbps, "source": net.source},
            "fit": {"latency_ns": fit.latency_ns, "bandwidth_gbps": fit.gbps, "residuals": fit.residuals},
            "start_offsets_us": {str(r): v for r, v in sorted(self.offsets_us.items())},
            "transfers_shorter_than_model": self.short_transfers,
            "pieces": dict(sorted(self.pieces.items())),
            "files": {k: p.name for k, p in self.configs.items()},
            "command": self.command(here=True),
        }

    def lines(self) -> list[str]:
        fit = self.fitted
        out = [f"ASTRA-sim experiment: network {self.network.describe()}"]
        for kind, r in fit.residuals.items():
            out.append(f"  {kind}: {r['count']} transfer(s), the network model {r['model_share_pct']:.0f}% "
                       f"of their time; left over per transfer {r['mean_us']:,.1f} µs on average "
                       f"({r['min_us']:,.1f} .. {r['max_us']:,.1f}), written as its own time")
        if self.short_transfers:
            out.append(f"  {self.short_transfers} transfer(s) shorter than the network model: they take the "
                       "model's time in the simulator")
        if self.pieces:
            out.append("  time between ops written as nodes: " + ", ".join(
                f"{k} {v:,}" for k, v in sorted(self.pieces.items())))
        return out


def transfer_samples(job: JobResult) -> list[Sample]:
    """Each coupled collective (and send/recv) of every rank: its kind, size, group size and the time its
    transfer held the rank's one communication resource of the simulator: from the last participant's
    arrival (or the end of the rank's transfer before it, when two overlapped) to its end."""
    out = []
    n_ranks = len(job.ranks)
    for rep in job:
        g, plan = rep.graph, rep.plan
        stand_in = {k: x for x, (k, _w) in (plan.transfer.items() if plan is not None else ())}
        index = {nid: i for i, nid in enumerate(g.ids)}
        ctype, csize = g.extra.get(ATTR_COMM_TYPE, {}), g.extra.get(ATTR_COMM_SIZE, {})
        spans = []
        for nid, wait in rep.comm_wait.items():
            i = index[nid]
            begin = rep.starts[i] + wait
            finish = rep.ends[i]
            comm = stand_in.get(i, i)
            if comm != i and plan is not None:
                finish -= plan.rd[i]
            spans.append((finish, begin, comm))
        prev = float("-inf")
        for finish, begin, comm in sorted(spans):
            held = finish - max(begin, prev)
            prev = max(prev, finish)
            if g.types[comm] not in COMM_TYPES or comm not in csize or (
                    g.types[comm] == COMM_COLL_NODE and ctype.get(comm) not in NETWORK_KINDS):
                continue      # (a BROADCAST is timed by its duration, not by the network)
            n = group_size(g, comm, n_ranks)
            out.append(Sample(ctype.get(comm), g.types[comm], float(csize[comm]), n, held))
    return out


def build_experiment(et_paths: Sequence[str | os.PathLike[str]], prefix: str | os.PathLike[str], *,
                     npus: int, comm_group: str | os.PathLike[str] | None = None, whatif: Any = None
                     ) -> Experiment:
    """Replay the job of ``et_paths`` (the job-level pass's output, rewritten in place), fit its network,
    and write the experiment beside ``prefix`` (module doc).  ``npus``: the ranks the simulator runs (a
    one-rank job has an idle second NPU)."""
    comm_groups = os.fspath(comm_group) if comm_group is not None else None
    def replay(align: bool) -> JobResult:
        return replay_job(list(et_paths), keep_plan=True, whatif=whatif, comm_groups=comm_groups, align=align)

    job = _start_together_if_it_holds(replay(True), lambda: replay(False))
    fitted = fit_network(transfer_samples(_recorded(job, et_paths, comm_groups, whatif)), npus)
    net = fitted
    if whatif is not None and (whatif.bandwidth_gbps is not None or whatif.latency_us is not None):
        gbps = (fitted.gbps * whatif.bandwidth_gbps / _pooled_gbps(job, fitted)
                if whatif.bandwidth_gbps is not None else None)
        lat = whatif.latency_us * 1000.0 if whatif.latency_us is not None else None
        net = fitted.changed(gbps=gbps, latency_ns=lat)
    originals: dict[int, tuple[Any, list[Any]]] = {}
    for p in et_paths:
        md, nodes = read_messages(p, pb.GlobalMetadata, pb.Node)
        rank = next((pb.attr_value(a) for a in md.attr if a.name == META_RANK), None)
        originals[int(rank) if rank is not None else len(originals)] = (md, nodes)
    mats = materialize_job(job, originals, net)
    prefix = Path(prefix)
    for m in mats:
        _write_rank(Path(f"{prefix}.{m.rank}.et"), m)
    configs = write_configs(prefix.parent, net)
    pieces: dict[str, int] = {}
    for m in mats:
        for k, v in m.pieces.items():
            pieces[k] = pieces.get(k, 0) + v
    return Experiment(prefix=prefix, ranks=[m.rank for m in mats], npus=npus, network=net, fitted=fitted,
                      configs=configs, job=job,
                      comm_group=Path(comm_group) if comm_group is not None else None,
                      offsets_us={m.rank: m.offset_us for m in mats},
                      short_transfers=sum(m.short_transfers for m in mats), pieces=pieces)


def _start_together_if_it_holds(aligned: JobResult, together: Any) -> JobResult:
    """The replay the experiment is written from: with the ranks starting together when that changes no
    rank's replayed time by more than ``TOGETHER_PP`` of its measurement (then the simulator's time of a
    rank is its time from its own start, as a user reading ``run.sh`` expects), else starting where their
    windows started on the job's clock (the DLRM corpus job: a rank's windows start up to 7.5 ms apart,
    and started together the late ranks replay +10..+53%)."""
    if all(not r.clock_offset for r in aligned):
        return aligned
    alone = together()
    for a, b in zip(aligned, alone):
        m = a.measured_us
        if not m or abs(a.replayed_us - b.replayed_us) > TOGETHER_PP / 100.0 * m:
            return aligned
    return alone


def _recorded(job: JobResult, et_paths: Sequence[str | os.PathLike[str]], comm_groups: Any, whatif: Any
              ) -> JobResult:
    """The replay as recorded (the network is fitted to what was measured, not to a what-if)."""
    if whatif is None:
        return job
    aligned = any(r.clock_offset for r in job)
    return replay_job(list(et_paths), keep_plan=True, comm_groups=comm_groups, align=aligned)


def _pooled_gbps(job: JobResult, fitted: Network) -> float:
    """The bandwidth a ``--bandwidth`` what-if is relative to: the replay's pooled fit when it made one
    (chakra.replay.whatif scales every kind by GBPS over it), else the simulator network's own."""
    report = job.whatif
    model = report.model if report is not None else None
    return model.gbps if model is not None and model.gbps else fitted.gbps


def breakdown(et_paths: Sequence[str | os.PathLike[str]], offsets: dict[int, float]
              ) -> dict[int, dict[str, float]]:
    """Where each rank's time goes under the simulator's rules (``chakra replay --mode astrasim`` of the
    written files, which gives the simulator's times): ``compute`` while an op of the trace runs (CPU or
    GPU), ``exposed_comm`` while only communication does (a collective, its own time), ``idle`` while
    neither does (the gaps, wake-ups and waits the experiment wrote as nodes, and waiting for peers); µs
    from the rank's start, summing to its time."""
    job = replay_job(list(et_paths), mode="astrasim")
    out: dict[int, dict[str, float]] = {}
    for rep in job:
        rank = rep.rank
        assert rank is not None   # (each rank of a job has its number)
        g = rep.graph
        comp: list[tuple[float, float]] = []
        comm: list[tuple[float, float]] = []
        for name, t, s, e in zip(g.names, g.types, rep.starts, rep.ends):
            if e <= s:
                continue
            if name == "chakra:own_time" or (t in COMM_TYPES and not name.startswith("chakra:")):
                comm.append((s, e))
            elif not name.startswith("chakra:"):
                comp.append((s, e))
        off = offsets.get(rank, 0.0)
        span = rep.replayed_us - off
        busy_comp = _union(comp)
        busy_all = _union(comp + comm)
        out[rank] = {"compute": busy_comp, "exposed_comm": busy_all - busy_comp,
                         "idle": max(0.0, span - busy_all)}
    return out


def _union(spans: list[tuple[float, float]]) -> float:
    total = 0.0
    end = float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _write_rank(path: Path, m: Materialized) -> None:
    with atomic_output(path) as fh:
        write_frames(fh.write, [m.metadata, *m.nodes], path)
