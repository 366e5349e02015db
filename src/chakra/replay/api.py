"""Replay one rank or a whole job and say how close the replay is to the measurement.

``replay_rank`` takes protobuf nodes (what ``chakra.io.read_messages`` returns),
``replay_nodes`` takes hand-written :class:`NodeSpec`, ``replay_file`` a path and
``replay_job`` all ranks of a job.  The semantics are documented in
:mod:`chakra.replay.engine`.
"""

from __future__ import annotations

import logging
import math
import os
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from itertools import compress, count
from typing import TYPE_CHECKING, Any

from chakra.errors import ChakraError, UsageError
from chakra.formats import ATTR_PG_SIZE
from chakra.io import gc_paused
from chakra.job.etfile import read_comm_groups as load_comm_groups
from chakra.replay.coupling import rank_of
from chakra.replay.engine import ReplayError, SimOutput, simulate
from chakra.replay.graph import COMM_TYPES, WORLD_PG_NAMES, NodeSpec, RankGraph, graph_from_specs
from chakra.replay.modes import (
    COLLECTIVE_CHOICES,
    UNKNOWN_GROUP_CHOICES,
    CollectiveDuration,
    CollectiveRule,
    Missing,
    Mode,
    UnknownGroup,
)
from chakra.replay.progress import Steps
from chakra.replay.reader import graph_from_protobuf, load_graph, load_graphs
from chakra.replay.whatif import WhatIf, WhatIfReport, apply_whatif, check_ranks
from chakra.schema import COMM_COLL_NODE, METADATA_NODE
from chakra.tunables import RUN_ON_SHARE

if TYPE_CHECKING:
    from chakra.io.ranks import RankClaim

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplayResult:
    """The replayed timeline of one rank.

    ``starts``/``ends`` are per node in ``graph`` order (ascending id), µs since the
    replay start (= the measured window start when gaps are kept).  For a node
    coupled to other ranks ``starts`` is its arrival; ``comm_wait`` maps its node id
    to how long it waited for its peers before the transfer began.
    """

    graph: RankGraph
    starts: list[float]
    ends: list[float]
    mode: Mode = "lanes"
    gaps: bool = True
    job: bool = False
    comm_wait: dict[int, float] = field(default_factory=dict)
    clock_offset: float = 0.0   # whole job: where this rank's time 0 lies on the job's common clock
    closes: dict[int, float] = field(default_factory=dict)   # parent index -> when its tail ends
    plan: Any = None   # the chakra.replay.plan.Plan the engine read, when asked (keep_plan; lanes mode)
    _end: list[float | None] = field(default_factory=list, repr=False, compare=False)  # recorded_end_us
    _replayed: list[float] = field(default_factory=list, repr=False, compare=False)  # replayed_us

    @property
    def rank(self) -> int | None:
        return self.graph.rank

    @property
    def num_nodes(self) -> int:
        return len(self.graph.ids)

    @property
    def replayed_us(self) -> float:
        """Completion time of the rank: end of its last (non-metadata) node, from the replay start
        (worked out once: a result's times do not change)."""
        if not self._replayed:
            types = self.graph.types
            ends: Iterable[float] = self.ends
            if METADATA_NODE in types:
                ends = compress(ends, map(METADATA_NODE.__ne__, types))
            best = max(self.closes.values(), default=0.0)
            last = max(ends, default=best)
            self._replayed.append(last if last > best else best)
        return self._replayed[0]

    @property
    def measured_us(self) -> float | None:
        return self.graph.measured_us

    @property
    def recorded_end_us(self) -> float | None:
        """When the rank's last op ended in the recording, in µs from the measured window's start (None for
        an untimed file).  Later than the window when the CPU ran ahead of the GPU: the kernels launched in
        the window ran on after it, and the replay, which runs them all, ends near here."""
        if not self._end:
            g = self.graph
            meta = METADATA_NODE
            self._end.append(max((s + d for s, d, t in zip(g.starts, g.durations, g.types) if t != meta),
                                 default=None) if g.timed else None)
        return self._end[0]

    @property
    def reference_us(self) -> float | None:
        """What the replay is compared with: the measured window, or, when the work started in it ran on more
        than 1 % past its end (:func:`error_reference`), the recorded end of that work."""
        return error_reference(self.measured_us, self.recorded_end_us)[0]

    @property
    def ran_on(self) -> bool:
        """Whether the recorded work of the window ran on past its end (the reference is then that end)."""
        return error_reference(self.measured_us, self.recorded_end_us)[1]

    @property
    def error_pct(self) -> float | None:
        """(replayed - reference) / reference in % (:attr:`reference_us`: the measured window, or the recorded
        end of its work when that ran on past it), or None without a measurement."""
        ref = self.reference_us
        if not ref:
            return None
        return 100.0 * (self.replayed_us - ref) / ref

    @property
    def window_error_pct(self) -> float | None:
        """(replayed - measured) / measured in %: against the window's end, whatever ran on after it."""
        m = self.measured_us
        if not m:
            return None
        return 100.0 * (self.replayed_us - m) / m

    def run_on(self) -> dict[str, str] | None:
        """What ran on past the measured window when :attr:`ran_on`: ``work`` ("GPU", "CPU" or "CPU and
        GPU": which side's ops ended after the window), ``last_op`` (the op that ended last) and ``lane``
        (where it ran: "thread T", "GPU D stream S"); else None.  A rank without any GPU compute op ran its
        collectives on the host (gloo's worker threads): those are CPU work, on the thread the lane names."""
        if not self.ran_on:
            return None
        g = self.graph
        m = self.measured_us or 0.0
        host_only = not any(not c and t not in COMM_TYPES and t != METADATA_NODE
                            for c, t in zip(g.is_cpu, g.types))
        sides: set[str] = set()
        last, last_end = -1, -math.inf
        for i, (s, d, t) in enumerate(zip(g.starts, g.durations, g.types)):
            end = s + d
            if t == METADATA_NODE or end <= m:
                continue
            lane = g.lanes[i]
            cpu = g.is_cpu[i] or host_only or lane is not None and lane[0] == "cpu"
            sides.add("CPU" if cpu else "GPU")
            if end > last_end:
                last, last_end = i, end
        lane = g.lanes[last]
        if lane is None:
            where = "-"
        elif lane[0] == "cpu" or host_only:
            where = f"thread {lane[-1]}"
        else:
            where = f"GPU {lane[1]} stream {lane[2]}"
        return {"work": " and ".join(sorted(sides)), "last_op": g.names[last], "lane": where}

    @property
    def total_wait_us(self) -> float:
        """The wall time this rank's coupled collectives waited for their peers: the union of the waits
        (two collectives waiting at once on two threads count that time once), never more than the replay."""
        waits = self.comm_wait
        if len(waits) > 1:
            index = {nid: i for i, nid in enumerate(self.graph.ids)}
            starts = self.starts
            spans = sorted((starts[index[nid]], starts[index[nid]] + w) for nid, w in waits.items() if w > 0)
            if any(b[0] < a[1] for a, b in zip(spans, spans[1:])):   # waits at once: each instant once
                return union_us(spans)
        return sum(waits.values())

    def node_times(self) -> dict[int, tuple[float, float]]:
        """node id -> (replayed start, replayed end)."""
        return {nid: (s, e) for nid, s, e in zip(self.graph.ids, self.starts, self.ends)}

    def completion_lines(self) -> Iterator[str]:
        """``[rank R] Node ID <id> completed at <T>us``, one per node, by completion time then id."""
        head = f"[rank {'-' if self.rank is None else self.rank}] Node ID "
        ends = self.ends
        # each node's completion, in C: its end, or for an op with children on its thread (files with
        # thread timing) the later of its end and the end of its tail after them
        done = list(map(max, ends, map(self.closes.get, count(), ends))) if self.closes else ends
        ids = self.graph.ids
        floor = math.floor
        # by completion, then id: a stable sort on the float alone (index order is id order)
        for i in sorted(range(len(ids)), key=done.__getitem__):
            yield f"{head}{ids[i]} completed at {int(floor(done[i] + 0.5))}us"

    def summary(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "path": self.graph.path,
            "nodes": self.num_nodes,
            "mode": self.mode,
            "gaps": self.gaps,
            "job": self.job,
            "measured_us": self.measured_us,
            "replayed_us": self.replayed_us,
            "error_pct": self.error_pct,
            "comm_wait_us": self.total_wait_us,
            **self._run_on_fields(),
        }

    def _run_on_fields(self) -> dict[str, Any]:
        """For a rank whose window's work ran on past it: what its error is against, and what ran on."""
        if not self.ran_on:
            return {}
        return {"recorded_end_us": self.recorded_end_us, "error_reference": "recorded_end",
                "window_error_pct": self.window_error_pct, "ran_on": self.run_on()}


@dataclass(slots=True)
class JobResult:
    """All ranks of a job replayed together (or side by side)."""

    ranks: dict[int, ReplayResult]
    mode: Mode = "lanes"
    gaps: bool = True
    coupled: bool = True
    groups: int = 0          # matched collectives + send/recv pairs
    whatif: WhatIfReport | None = None   # what the what-if (and the communication model) did
    collective: CollectiveDuration | None = None   # coupled: the rule that timed the collectives
    collective_note: str = ""            # ... and why (collective_rule), for the output
    _members: list[list[int]] = field(default_factory=list, repr=False, compare=False)  # groups, global index
    _offsets: list[int] = field(default_factory=list, repr=False, compare=False)   # each rank's first
    _where: list[list[list[tuple[int, int]]]] = field(default_factory=list, repr=False, compare=False)

    @property
    def groups_members(self) -> list[list[tuple[int, int]]]:
        """Each coupled group as (rank, node id) pairs, in rank order (made when first asked: a tuple per
        member of a thousand-rank job is ~60 bytes a node)."""
        if not self._where:
            self._where.append(_coupled_ids([r.graph for r in self], self._members, self._offsets))
        return self._where[0]

    @property
    def replayed_us(self) -> float:
        return max((r.replayed_us for r in self.ranks.values()), default=0.0)

    def __iter__(self) -> Iterator[ReplayResult]:
        return iter(self.ranks[r] for r in sorted(self.ranks))

    def times(self) -> dict[str, Any]:
        """The job as one: its time from the first rank's start to the last rank's end, measured and
        replayed.

        On the replay's common clock each rank starts at its ``clock_offset`` (its recorded window start
        relative to the earliest rank's); measured, each rank's window runs from ``measured_start_us`` for
        ``measured_us``.  Without recorded starts, the slowest rank's time.  ``comm_wait_us``: the time the
        collectives of all ranks waited for their peers (each rank's wall time,
        :attr:`ReplayResult.total_wait_us`, summed).  When a rank's work ran on past its window
        (:attr:`ReplayResult.ran_on`), ``error_pct`` is against ``reference_us`` (the same span to each
        rank's :attr:`ReplayResult.reference_us`), ``error_reference`` says so and ``window_error_pct`` is the
        error against the windows.
        """
        reps = list(self)
        replayed = max((r.clock_offset + r.replayed_us for r in reps), default=0.0)
        measured = _job_span(reps, [r.measured_us for r in reps])
        out: dict[str, Any] = {
            "measured_us": measured,
            "replayed_us": replayed,
            "error_pct": 100.0 * (replayed - measured) / measured if measured else None,
            "comm_wait_us": sum(r.total_wait_us for r in reps),
            "matched_comm_groups": self.groups,
            "start_offsets_us": {str(r.rank): r.clock_offset for r in reps},
        }
        ref, ran_on = error_reference(measured, _job_span(reps, [r.reference_us for r in reps])) \
            if any(r.ran_on for r in reps) else (measured, False)
        if ran_on:
            # a rank's work ran on past the job's end: compared with when the last rank's work ended
            out.update({"reference_us": ref, "error_reference": "recorded_end",
                        "window_error_pct": out["error_pct"],
                        "error_pct": 100.0 * (replayed - ref) / ref if ref else None})
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "gaps": self.gaps,
            "job": self.coupled,
            "replayed_us": self.replayed_us,
            "matched_comm_groups": self.groups,
            **({"collective": self.collective, "collective_rule": self.collective_note}
               if self.collective is not None else {}),
            "ranks": [r.summary() for r in self],
            **({"whatif": self.whatif.lines()} if self.whatif is not None and self.whatif.lines() else {}),
        }


def error_reference(measured_us: float | None, recorded_end_us: float | None) -> tuple[float | None, bool]:
    """``(reference, ran_on)``: what a replay is compared with.  The measured window's length, unless the work
    started in the window was recorded ending more than :data:`RUN_ON_SHARE` of it after its end (kernels the
    CPU launched ahead of the GPU; a worker thread's collective still running when the step ended): the
    replay runs that work to its end, so its reference is when that work ended (``ran_on`` True)."""
    m, end = measured_us, recorded_end_us
    if m and end is not None and end > (1.0 + RUN_ON_SHARE) * m:
        return end, True
    return m, False


def union_us(spans: Sequence[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals sorted by start."""
    total = 0.0
    lo = hi = -math.inf
    for a, b in spans:
        if a >= hi:                 # a new stretch: the last one is done
            if hi > lo:
                total += hi - lo
            lo, hi = a, b
        elif b > hi:
            hi = b
    if hi > lo:
        total += hi - lo
    return total


def _job_span(reps: Sequence[ReplayResult], spans: Sequence[float | None]) -> float | None:
    """From the first rank's recorded start to the last end of ``spans`` (each rank's, from its own start);
    without recorded starts, the longest span."""
    starts = [r.graph.measured_start_us for r in reps]
    if reps and all(s is not None for s in starts) and all(m is not None for m in spans):
        first = min(starts)  # type: ignore[type-var]
        return max(s + m for s, m in zip(starts, spans)) - first  # type: ignore[operator]
    if reps and all(m is not None for m in spans):
        return max(spans)  # type: ignore[type-var]
    return None


def round_us(t: float) -> int:
    """Integer µs, half up (Python's round() would round halves to even)."""
    return int(math.floor(t + 0.5))


def _results(graphs: Sequence[RankGraph], out: SimOutput, mode: Mode, gaps: bool, job: bool
             ) -> list[ReplayResult]:
    offsets = out.offsets
    comm_start, all_closes = out.comm_start, out.closes
    waits_of = _by_rank(comm_start, offsets)   # each rank's own coupled nodes: one pass over the job's
    closes_of = _by_rank(all_closes, offsets)
    results = []
    for ri, g in enumerate(graphs):
        lo = offsets[ri]
        ids, starts, ends = g.ids, out.rank_starts[ri], out.rank_ends[ri]
        waits = {ids[gi - lo]: comm_start[gi] - starts[gi - lo] for gi in waits_of[ri]}
        b = out.base[ri] if out.base else 0.0
        if b:
            starts = [x - b for x in starts]
            ends = [x - b for x in ends]
        closes = {gi - lo: all_closes[gi] - b for gi in closes_of[ri]}
        results.append(ReplayResult(graph=g, starts=starts, ends=ends, mode=mode,
                                    gaps=gaps and mode == "lanes", job=job, comm_wait=waits, clock_offset=b,
                                    closes=closes, plan=out.plans[ri] if out.plans else None))
    return results


def _by_rank(values: Mapping[int, float], offsets: Sequence[int]) -> list[list[int]]:
    """The global indices that key ``values`` split by rank (``offsets``), each rank's in the order of
    ``values``: one pass over them, not one per rank."""
    out: list[list[int]] = [[] for _ in range(len(offsets) - 1)]
    if len(out) == 1:
        out[0] = list(values)
        return out
    for gi in values:
        out[bisect_right(offsets, gi) - 1].append(gi)
    return out


def as_graph(nodes: Any, metadata: Any = None, *, rank: int | None = None) -> RankGraph:
    """RankGraph, protobuf nodes or NodeSpecs -> RankGraph."""
    if isinstance(nodes, RankGraph):
        return nodes
    if isinstance(nodes, (str, os.PathLike)):
        return load_graph(nodes, rank=rank)
    nodes = list(nodes)
    if nodes and isinstance(nodes[0], NodeSpec):
        return graph_from_specs(nodes, rank=rank)
    return graph_from_protobuf(nodes, metadata, rank=rank)


def replay_rank(nodes: Any, *, metadata: Any = None, mode: Mode = "lanes", gaps: bool = True,
                missing: Missing = "error", rank: int | None = None, whatif: WhatIf | None = None,
                keep_plan: bool = False) -> ReplayResult:
    """Replay one rank on its own: collectives and send/recv take their recorded durations (those
    recorded without one, the communication model's: :mod:`chakra.replay.whatif`).  ``keep_plan``: the
    result keeps the engine's plan (``ReplayResult.plan``, for a critical path; a million-node plan held
    on costs ~30 MB and ~0.3 s of page faults later, so only when asked)."""
    g = as_graph(nodes, metadata, rank=rank)
    return _replay_alone(apply_whatif([g], whatif)[0][0], mode, gaps, missing, keep_plan)


def _replay_alone(g: RankGraph, mode: Mode, gaps: bool, missing: Missing, keep_plan: bool = False
                  ) -> ReplayResult:
    """Replay one rank whose what-if (and communication model) is already applied."""
    with gc_paused():  # millions of acyclic tuples/lists: the cyclic GC would only rescan them
        out = simulate([g], ranks=[g.rank if g.rank is not None else 0], mode=mode, gaps=gaps,
                       missing=missing, keep_plans=keep_plan)
        return _results([g], out, mode, gaps, job=False)[0]


def replay_nodes(specs: Iterable[NodeSpec], *, mode: Mode = "lanes", gaps: bool = True,
                 missing: Missing = "error", rank: int | None = None, measured_us: float | None = None,
                 world_size: int | None = None, whatif: WhatIf | None = None) -> ReplayResult:
    """Replay hand-written nodes (see :class:`NodeSpec`)."""
    g = graph_from_specs(specs, rank=rank, measured_us=measured_us, world_size=world_size)
    return replay_rank(g, mode=mode, gaps=gaps, missing=missing, whatif=whatif)


def replay_file(path: str | os.PathLike[str], *, mode: Mode = "lanes", gaps: bool = True,
                missing: Missing = "error", whatif: WhatIf | None = None) -> ReplayResult:
    """Read and replay one Chakra ET file on its own."""
    return replay_rank(load_graph(path), mode=mode, gaps=gaps, missing=missing, whatif=whatif)


def load_job(inputs: Any) -> list[RankGraph]:
    """Paths, RankGraphs, or {rank: (metadata, nodes) | RankGraph | [NodeSpec]} -> graphs with ranks set.

    The files among the inputs are read together, spread over the cores (:func:`load_graphs`)."""
    graphs: list[RankGraph] = []
    if isinstance(inputs, Mapping):
        order = sorted(inputs)
        read = _read_paths([inputs[rank] for rank in order], order)
        for rank in order:
            item = inputs[rank]
            if id(item) in read:
                g = read[id(item)]
            elif isinstance(item, tuple) and len(item) == 2:
                g = as_graph(item[1], item[0], rank=rank)
            else:
                g = as_graph(item, rank=rank)
            if g.rank is not None and g.rank != rank:
                raise ChakraError(f"rank {rank}: its GlobalMetadata says rank {g.rank}", g.path)
            g.rank = rank
            graphs.append(g)
    else:
        items = list(inputs)
        read = _read_paths(items, None)
        for pos, item in enumerate(items):
            g = read[id(item)] if id(item) in read else as_graph(item)
            if g.rank is None:
                g.rank = pos
            graphs.append(g)
    seen: dict[int, str | None] = {}
    for g in graphs:
        assert g.rank is not None
        if g.rank in seen:
            raise ChakraError(f"two inputs claim rank {g.rank}: {seen[g.rank]} and {g.path}")
        seen[g.rank] = g.path
    graphs.sort(key=lambda g: g.rank or 0)   # (each has its rank)
    return graphs


def _ranks(graphs: Sequence[RankGraph]) -> list[int]:
    """The ranks of graphs :func:`load_job` made (each has one)."""
    ranks = [g.rank for g in graphs if g.rank is not None]
    assert len(ranks) == len(graphs)
    return ranks


def _read_paths(items: Sequence[Any], ranks: Sequence[int] | None) -> dict[int, RankGraph]:
    """id of each item that is a path -> its graph (``ranks``: the rank each item is read as)."""
    where = [k for k, item in enumerate(items) if isinstance(item, (str, os.PathLike))]
    if len(set(map(id, (items[k] for k in where)))) < len(where):
        where = []         # (the same path object twice: read each where it occurs)
    graphs = load_graphs([items[k] for k in where], None if ranks is None else [ranks[k] for k in where])
    return {id(items[k]): g for k, g in zip(where, graphs)}


def apply_comm_groups(graphs: Sequence[RankGraph], groups: Mapping[str, Sequence[int]] | None = None,
                      unknown_group: UnknownGroup = "error") -> None:
    """Give every rank the process groups its collectives use, before a whole-job replay.

    ``groups`` (a comm-group file, :func:`load_comm_groups`) is added to each rank's own table and wins
    where both list a group (with a warning when they disagree).  A collective whose group is still unknown
    (an ET from another tool carries no table) is an error that says how to give the groups, or with
    ``unknown_group="world"`` couples all ranks of the job (warned once per group).
    """
    if unknown_group not in UNKNOWN_GROUP_CHOICES:
        raise UsageError(f"unknown-group {unknown_group!r}: choose from {', '.join(UNKNOWN_GROUP_CHOICES)}")
    job = tuple(sorted(g.rank for g in graphs if g.rank is not None))
    for g in graphs:
        for pg, ranks in (groups or {}).items():
            own = g.process_groups.get(pg)
            if own is not None and sorted(own or job) != sorted(ranks):   # () in a table: every rank
                log.warning("%s: process group %r: rank %s's table says ranks %s, the comm-group file %s; "
                            "using the file's", g.path, pg, g.rank, list(own), list(ranks))
            g.process_groups[pg] = tuple(ranks)
    warned: set[str] = set()
    for g in graphs:
        for i, info in (g.comm or {}).items():
            pg = info.pg_name
            if g.types[i] != COMM_COLL_NODE or pg in WORLD_PG_NAMES or pg in g.process_groups:
                continue
            if unknown_group == "world":
                g.process_groups[pg] = ()
                if pg not in warned:
                    warned.add(pg)
                    log.warning("process group %r is not listed (rank %s, %s): treated as the whole job "
                                "(--unknown-group world)", pg, g.rank, g.path)
                continue
            raise ReplayError(
                f"collective node {g.ids[i]} ({g.names[i]!r}) of rank {g.rank} uses process group {pg!r}, "
                f"which its process-group table does not list (known: {sorted(g.process_groups) or 'none'}): "
                "give the groups with --comm-group FILE (ASTRA-sim's {\"<pg id>\": [global ranks]}), or "
                "--unknown-group world to couple all ranks", g.path)


def collective_rule(graphs: Sequence[RankGraph], collective: CollectiveRule = "auto"
                    ) -> tuple[CollectiveDuration, str]:
    """The rule that times the coupled collectives of a whole-job replay, and a line that says why.

    ``"auto"``: ``"net"`` (each participant's recording less its recorded wait for the last arrival)
    when every rank's file records its waits (our converter's thread timing: ``wait_on``,
    ``wait_post_us``, ...; its start times then share the job's clock), else ``"min"``: a file of
    another producer records a participant's waiting for its peers inside the collective's duration
    and nothing that tells it apart, and the replay makes every participant wait for the last arrival
    itself, so each lasts the shortest recording among them (that of the last to arrive, which
    waited least) instead of counting its recorded wait again.  ``"net"`` and ``"min"`` are used as
    asked."""
    if collective not in COLLECTIVE_CHOICES:
        raise ChakraError(f"unknown collective duration {collective!r} (expected auto, net or min)")
    no_waits = [str(g.rank) for g in graphs if not g.thread_timing]
    what = {"net": "net, each participant's recording less its recorded wait for the last arrival",
            "min": "min, the shortest recording of the participants, from the last arrival"}
    listed = (f"ranks {', '.join(no_waits)} record" if len(no_waits) > 1
              else f"rank {''.join(no_waits)} records") + " no waits"
    if collective == "auto":
        if not no_waits:
            return "net", f"collectives: {what['net']} (the files record their waits)"
        return "min", (f"collectives: {what['min']} ({listed}: their recordings hold the wait for the "
                       "peers, which the replay adds itself)")
    if collective == "net" and no_waits:
        return "net", (f"collectives: {what['net']} (--collective net; {listed}: each recorded wait counts "
                       "twice unless their start times share one clock)")
    return collective, f"collectives: {what[collective]} (--collective {collective})"


def job_claims(graphs: Sequence[RankGraph]) -> list[RankClaim]:
    """What the ranks' files say of how many ranks the job has: the world size in their metadata, their
    process-group tables (the groups' global ranks; a comm-group file's too, once applied), and the
    ``pg_size`` recorded on a collective of the world group."""
    from chakra.io.ranks import RankClaim, group_claims  # (pathlib: not for a replay of one file)

    out: list[RankClaim] = []
    for g in graphs:
        where = os.path.basename(g.path) if g.path else f"rank {g.rank}"
        if g.world_size:
            out.append(RankClaim(g.world_size, f"world_size {g.world_size} in the metadata of {where}"))
        out += group_claims(((pg, ranks, None) for pg, ranks in g.process_groups.items()), where)
        sizes = [v for i, v in g.extra.get(ATTR_PG_SIZE, {}).items()
                 if type(v) is int and v > 0 and i in g.comm and g.comm[i].pg_name in WORLD_PG_NAMES]
        if sizes:
            out.append(RankClaim(max(sizes), f"a world collective of {where} records pg_size {max(sizes)}"))
    return out


def replay_job(inputs: Any, *, mode: Mode = "lanes", gaps: bool = True, missing: Missing = "error",
               couple: bool = True, align: bool = True, collective: CollectiveRule = "auto",
               comm_groups: Mapping[str, Sequence[int]] | str | os.PathLike[str] | None = None,
               unknown_group: UnknownGroup = "error", whatif: WhatIf | None = None, keep_plan: bool = False,
               allow_missing_ranks: bool | None = None, steps: Steps | None = None) -> JobResult:
    """Replay every rank of a job; ``couple=False`` replays them side by side, independently.

    ``align`` (lanes mode, when every rank has ``measured_start_us``) starts each rank's
    replay at its recorded window start relative to the earliest rank (see
    :mod:`chakra.replay.engine`, "Clock alignment").  ``collective``: ``"net"`` or ``"min"``
    transfer time of a coupled group (see :func:`chakra.replay.engine.simulate`), or ``"auto"``
    (default): the one that fits the files (:func:`collective_rule`; ``JobResult.collective`` and
    ``collective_note`` say which, and why).
    ``whatif`` changes the replay (:mod:`chakra.replay.whatif`); collectives recorded without a
    duration take the communication model's in any case.  ``JobResult.whatif`` says what it did.
    ``comm_groups`` (a mapping or the path of a comm-group file) and ``unknown_group``: see
    :func:`apply_comm_groups`.  ``keep_plan``: as :func:`replay_rank`'s.  ``allow_missing_ranks`` False
    (``chakra replay --job``): coupled, a job of which the files' process-group tables (world size, groups'
    ranks, a world collective's recorded ``pg_size``, :func:`job_claims`) name ranks that were not given is
    refused naming them (:func:`chakra.io.ranks.check_complete`); True: replayed over the ranks given, with a
    warning; None (default): not checked.  ``steps``: where the phases of a long replay are announced
    (:mod:`chakra.replay.progress`).
    """
    if steps is not None:
        steps.phase(f"reading {len(inputs):,} ranks" if isinstance(inputs, Sized) else "reading the ranks")
    graphs = load_job(inputs)
    if not graphs:
        raise ChakraError("no ranks to replay")
    if steps is not None:
        steps.phase("process groups and communication model")
    check_ranks(whatif, (g.rank for g in graphs))
    if couple:
        if isinstance(comm_groups, (str, os.PathLike)):
            comm_groups = load_comm_groups(comm_groups)
        apply_comm_groups(graphs, comm_groups, unknown_group)
        if allow_missing_ranks is not None:
            from chakra.io.ranks import check_complete

            check_complete(_ranks(graphs), job_claims(graphs),
                           allow=allow_missing_ranks, doing="replaying")
    rule, note = collective_rule(graphs, collective)
    graphs, report = apply_whatif(graphs, whatif)
    ranks = _ranks(graphs)
    if couple:
        starts = [g.measured_start_us for g in graphs]
        base = None
        if align and mode == "lanes" and all(s is not None for s in starts):
            first = min(starts)  # type: ignore[type-var]
            base = [s - first for s in starts]  # type: ignore[operator]
        with gc_paused():
            out = simulate(graphs, ranks=ranks, mode=mode, gaps=gaps, missing=missing,
                           couple=True, base=base, collective=rule, unknown_group=unknown_group,
                           keep_plans=keep_plan, steps=steps)
            if steps is not None:
                steps.phase("per-rank results")
            results = _results(graphs, out, mode, gaps, job=True)
        groups, members, offsets = out.groups, out.members, out.offsets
    else:
        if steps is not None:
            steps.phase("replaying each rank alone", len(graphs))
        results = []
        for g in graphs:
            results.append(_replay_alone(g, mode, gaps, missing, keep_plan))
            if steps is not None:
                steps.advance()
        groups, members, offsets = 0, [], []
    return JobResult(ranks={r.rank: r for r in results}, mode=mode, gaps=gaps and mode == "lanes",  # type: ignore[misc]
                     coupled=couple, groups=groups, whatif=report, _members=members, _offsets=offsets,
                     collective=rule if couple else None, collective_note=note if couple else "")


def _coupled_ids(graphs: Sequence[RankGraph], members: list[list[int]], offsets: Sequence[int]
                 ) -> list[list[tuple[int, int]]]:
    """The coupled groups (``members``: global indices over ``offsets``) as (rank, node id) pairs."""
    ranks = _ranks(graphs)
    where = []
    for gi_members in members:   # (members in rank order)
        grp = []
        for gi in gi_members:
            ri = rank_of(offsets, gi)
            grp.append((ranks[ri], graphs[ri].ids[gi - offsets[ri]]))
        where.append(grp)
    return where



__all__ = ["COLLECTIVE_CHOICES", "JobResult", "ReplayError", "ReplayResult", "apply_comm_groups", "as_graph",
           "collective_rule", "load_comm_groups",
           "load_job", "replay_file", "replay_job",
           "replay_nodes", "replay_rank", "round_us"]
