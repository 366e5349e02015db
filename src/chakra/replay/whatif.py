"""What-if changes to a replay: scale or delay ops, re-time communication with a model.

A what-if never edits a file: it gives each replayed node a factor on all of its own
time and a delay added to it (``RankGraph.factor`` / ``RankGraph.delay``, read by the
engine), and re-times collectives with a communication model.  On files converted with
the thread timing (:mod:`chakra.convert.threads`) a factor applies to all of a CPU op's
own time (its lead, its time between and after its children), and a node's waits follow
what it waits for, so a change moves the step both ways.

Selecting nodes (``PATTERN[@RANKS]``): ``cpu``, ``gpu`` (GPU compute), ``comm``
(collectives and send/recv, on a GPU or a host thread) and ``all`` are node kinds;
anything else is a regular expression searched in node names (``aten::(addmm|mm)``).
``@0,3`` restricts a rule to those ranks.

Communication model: a collective of ``S`` bytes (the node's ``comm_size``: the larger of
its input and output buffers per rank) in a group of ``n`` ranks takes
``latency + F(type, n) * S / bandwidth`` where ``F`` is the data each rank moves per
byte of ``S`` with the usual algorithms: all_reduce (ring) ``2(n-1)/n``; all_gather,
reduce_scatter, all_to_all, reduce, gather, scatter ``(n-1)/n``; broadcast and
send/recv ``1``; barrier ``0``.  ``latency`` and ``bandwidth`` are fitted by least
squares over the trace's own collectives (for each distinct (type, size, group size),
the shortest recording: recorded durations include waiting for peers, the shortest
waited least), or given, or, when the trace has nothing to fit, the defaults below (with
a warning).  The model times collectives recorded without a duration (ASTRA-sim's
micro-benchmark ETs) and changes of size or bandwidth: a recorded collective keeps its
recording plus the model's difference, ``d + model'(S') - model(S)``.  A kind of
collective recorded at two sizes or more gets its own latency and bandwidth (gloo's
broadcast and all_reduce differ by more than the factor says).  A what-if network
(``bandwidth_gbps``, ``latency_us``) scales every kind's bandwidth by the new bandwidth
over the pooled one, and sets every kind's latency (:meth:`CommModel.with_network`).  A
model given (``WhatIf.model``) without any change applies to a plain replay as well.
"""

from __future__ import annotations

import logging
import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from typing import Any

from chakra.errors import ChakraError, UsageError
from chakra.replay.graph import COMM_TYPES, WORLD_PG_NAMES, CommInfo, RankGraph
from chakra.schema import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    BARRIER,
    BROADCAST,
    COLLECTIVE_TYPES,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    GATHER,
    METADATA_NODE,
    REDUCE,
    REDUCE_SCATTER,
    REDUCE_SCATTER_BLOCK,
    SCATTER,
)
from chakra.tunables import WHATIF_GBPS, WHATIF_LATENCY_US

log = logging.getLogger(__name__)

KINDS = ("cpu", "gpu", "comm", "all")


class WhatIfError(ChakraError):
    """A what-if that cannot be applied (bad rule, nothing to fit a model on)."""


# ---------------------------------------------------------------------------------------------- rules
@dataclass(frozen=True, slots=True)
class Selector:
    """Which nodes a rule applies to: a kind or a name pattern, and optionally some ranks."""

    text: str
    kind: str | None = None
    pattern: re.Pattern[str] | None = None
    ranks: frozenset[int] | None = None

    def matches(self, g: RankGraph, i: int, kind: str) -> bool:
        if self.ranks is not None and g.rank not in self.ranks:
            return False
        if self.kind is not None:
            return self.kind == "all" or self.kind == kind
        assert self.pattern is not None
        return self.pattern.search(g.names[i]) is not None


@dataclass(frozen=True, slots=True)
class Rule:
    selector: Selector
    value: float


def parse_rule(text: str, what: str = "factor") -> Rule:
    """``PATTERN[@RANKS]=VALUE`` or ``PATTERN=VALUE[@RANKS]`` -> Rule (``VALUE`` a factor, µs, ... as
    ``what`` says)."""
    head, sep, value = text.rpartition("=")
    if not sep or not head:
        raise WhatIfError(f"what-if rule {text!r}: expected PATTERN[@RANKS]={what.upper()}")
    if "@" in value:
        value, _, ranks = value.partition("@")
        if "@" in head:
            raise WhatIfError(f"what-if rule {text!r}: ranks given twice")
        head = f"{head}@{ranks}"
    try:
        v = float(value)
    except ValueError:
        raise WhatIfError(f"what-if rule {text!r}: {value!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise WhatIfError(f"what-if rule {text!r}: the {what} must be a finite number >= 0")
    return Rule(parse_selector(head), v)


def parse_selector(text: str) -> Selector:
    pat, at, ranks_text = text.rpartition("@") if "@" in text else (text, "", "")
    ranks = None
    if at:
        try:
            ranks = frozenset(int(r) for r in ranks_text.split(",") if r.strip())
        except ValueError:
            raise WhatIfError(f"what-if selector {text!r}: ranks after '@' must be integers") from None
        if not ranks:
            raise WhatIfError(f"what-if selector {text!r}: no rank after '@'")
    if not pat:
        raise WhatIfError(f"what-if selector {text!r}: empty pattern")
    if pat in KINDS:
        return Selector(text, kind=pat, ranks=ranks)
    try:
        return Selector(text, pattern=re.compile(pat), ranks=ranks)
    except re.error as exc:
        raise WhatIfError(f"what-if selector {text!r}: bad regular expression ({exc})") from None


def node_kind(g: RankGraph, i: int) -> str:
    """``comm``, ``cpu`` or ``gpu`` (compute); METADATA nodes are none of them."""
    t = g.types[i]
    if t in COMM_TYPES:
        return "comm"
    if t == METADATA_NODE:
        return "metadata"
    return "cpu" if g.is_cpu[i] else "gpu"


# ------------------------------------------------------------------------------------ the comm model
def algo_factor(comm_type: int | None, ntype: int, n: int) -> float:
    """Data each rank moves per byte of ``comm_size`` (see the module doc)."""
    if ntype in (COMM_SEND_NODE, COMM_RECV_NODE):
        return 1.0
    n = max(1, n)
    if comm_type == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if comm_type in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, REDUCE, GATHER, SCATTER, REDUCE_SCATTER_BLOCK):
        return (n - 1) / n
    if comm_type == BROADCAST:
        return 1.0 if n > 1 else 0.0
    if comm_type == BARRIER:
        return 0.0
    return 1.0


@dataclass(slots=True)
class CommModel:
    """``latency_us + F * bytes / bytes_per_us``; ``source`` says where the numbers come from.

    ``per_type`` holds separate (latency, bytes/µs) for collective kinds ((comm_type, node type)) that
    the trace recorded at two sizes or more: gloo's broadcast and all_reduce differ by more than the
    algorithm factor says (an all_reduce also adds on the CPU)."""

    latency_us: float
    bytes_per_us: float
    source: str = "given"
    points: int = 0
    per_type: dict[Any, tuple[float, float]] = field(default_factory=dict)

    @property
    def gbps(self) -> float:
        return self.bytes_per_us / 1000.0

    def time(self, comm_type: int | None, ntype: int, size: float, n: int) -> float:
        lat, bw = self.per_type.get((comm_type, ntype), (self.latency_us, self.bytes_per_us))
        return lat + algo_factor(comm_type, ntype, n) * size / bw

    def with_network(self, gbps: float | None, latency_us: float | None) -> CommModel:
        """This model on another network: every kind's bandwidth times ``gbps`` over this model's (pooled)
        bandwidth, so each kind keeps how far it is from the pooled fit and a faster network is faster for
        every kind; ``latency_us`` (when given) for every kind."""
        ratio = 1.0 if gbps is None else gbps * 1000.0 / self.bytes_per_us
        if ratio <= 0 or (latency_us is not None and latency_us < 0):
            raise WhatIfError("what-if bandwidth must be > 0 and latency >= 0")

        def lat(own: float) -> float:
            return own if latency_us is None else latency_us

        per_type = {k: (lat(a), b * ratio) for k, (a, b) in self.per_type.items()}
        return CommModel(lat(self.latency_us), self.bytes_per_us * ratio, "what-if", per_type=per_type)

    def describe(self) -> str:
        extra = ""
        if self.per_type:
            extra = "; per type: " + ", ".join(
                f"{_TYPE_NAMES.get(k[0], k[0])} {lat:.1f} µs + {bw / 1000.0:.3g} GB/s"
                for k, (lat, bw) in self.per_type.items())
        return f"latency {self.latency_us:.1f} µs, bandwidth {self.gbps:.3g} GB/s ({self.source}){extra}"


_TYPE_NAMES: dict[int | None, str] = {t: name for name, t in COLLECTIVE_TYPES.items()}
_TYPE_NAMES[None] = "send/recv"


def fit_model(samples: Iterable[tuple[float, float, Any]]) -> CommModel | None:
    """The pooled fit over every (x, d, kind) and a fit per kind that has two sizes or more."""
    samples = list(samples)
    pooled = _fit([(x, d) for x, d, _ in samples])
    if pooled is None:
        return None
    kinds: dict[Any, list[tuple[float, float]]] = {}
    for x, d, k in samples:
        kinds.setdefault(k, []).append((x, d))
    for k, pts in kinds.items():
        if len({x for x, _ in pts}) >= 2:
            m = _fit(pts)
            if m is not None:
                pooled.per_type[k] = (m.latency_us, m.bytes_per_us)
    return pooled


def _fit(samples: Iterable[tuple[float, float]]) -> CommModel | None:
    """Least squares of ``d = a + b * x`` (x = F * bytes) over (x, d); None without two distinct x.

    ``a`` is clamped to >= 0 (then ``b`` refitted through the origin); ``b`` must come out > 0."""
    pts = [(x, d) for x, d in samples if x >= 0 and d > 0]
    xs = {x for x, _ in pts}
    if len(xs) < 2:
        if len(xs) == 1 and next(iter(xs)) > 0:   # one size: no latency to separate from bandwidth
            x = next(iter(xs))
            d = min(d for _, d in pts)
            return CommModel(0.0, x / d, "fitted (one message size: latency 0)", len(pts))
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(d for _, d in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (d - my) for x, d in pts)
    b = sxy / sxx if sxx else 0.0
    a = my - b * mx
    if a < 0 or b <= 0:
        a = 0.0
        sxx0 = sum(x * x for x, _ in pts)
        b = sum(x * d for x, d in pts) / sxx0 if sxx0 else 0.0
    if b <= 0:
        return None
    return CommModel(a, 1.0 / b, f"fitted on {n} collective sizes", n)


def group_size(g: RankGraph, i: int, job_ranks: int) -> int:
    """Ranks in node ``i``'s process group (its table, else the world, else the ranks replayed)."""
    info = g.comm.get(i)
    pg = info.pg_name if info is not None else ""
    if pg not in WORLD_PG_NAMES:
        members = g.process_groups.get(pg)
        if members:
            return len(members)
    if g.world_size:
        return g.world_size
    return max(job_ranks, 1)


def comm_positions(g: RankGraph) -> list[int]:
    """The indices of ``g``'s communication nodes (COMM_COLL / SEND / RECV), ascending."""
    return list(compress(range(len(g.types)), map(COMM_TYPES.__contains__, g.types)))


def _time(memo: dict[tuple[Any, ...], float], model: CommModel, comm_type: Any, ntype: int, size: float,
          n: int) -> float:
    """``model.time(...)``, worked out once per distinct collective (a job repeats a few thousand)."""
    key = (id(model), comm_type, ntype, size, n)
    t = memo.get(key)
    if t is None:
        t = memo[key] = model.time(comm_type, ntype, size, n)
    return t


def _comm_samples(graphs: Sequence[RankGraph], job_ranks: int) -> list[tuple[float, float, Any]]:
    """(F * bytes, shortest recorded duration, type) per distinct (type, size, group size) of the
    collectives."""
    best: dict[tuple[Any, ...], float] = {}
    for g in graphs:
        durs = g.durations
        timed = [i for i in comm_positions(g) if durs[i] > 0]
        if not timed:
            continue
        comm, ctype, csize = g.comm_lookups()
        sizes: dict[str, int] = {}          # pg -> its group size
        for i in timed:
            d = durs[i]
            if i not in csize:
                continue
            info = comm.get(i)
            pg = info.pg_name if info is not None else ""
            n = sizes.get(pg)
            if n is None:
                n = sizes[pg] = group_size(g, i, job_ranks)
            key = (ctype.get(i), g.types[i], csize[i], n)
            if key not in best or d < best[key]:
                best[key] = d
    out = []
    for (ct, nt, size, n), d in best.items():
        f = algo_factor(ct, nt, n)
        if f > 0 and size > 0:
            out.append((f * size, d, (ct, nt)))
    return out


# --------------------------------------------------------------------------------------- the what-if
@dataclass(slots=True)
class WhatIf:
    """A set of changes; empty means "as recorded" (collectives without a duration still get the model)."""

    scale: list[Rule] = field(default_factory=list)        # factor on matching nodes' own time
    delay: list[Rule] = field(default_factory=list)        # µs added to each matching node
    comm_size: list[Rule] = field(default_factory=list)    # factor on matching collectives' bytes
    bandwidth_gbps: float | None = None                    # what if the network had this bandwidth
    latency_us: float | None = None                        # ... and this latency
    # "fit", (latency µs, GB/s), a model already made, or None (fitted if a collective needs one)
    model: str | tuple[float, float] | CommModel | None = None

    @property
    def empty(self) -> bool:
        return not (self.scale or self.delay or self.comm_size or self.bandwidth_gbps is not None
                    or self.latency_us is not None)

    def describe(self) -> list[str]:
        out = [f"scale {r.selector.text} x{r.value:g}" for r in self.scale]
        out += [f"delay {r.selector.text} +{r.value:g} µs" for r in self.delay]
        out += [f"comm size {r.selector.text} x{r.value:g}" for r in self.comm_size]
        if self.bandwidth_gbps is not None:
            out.append(f"bandwidth {self.bandwidth_gbps:g} GB/s")
        if self.latency_us is not None:
            out.append(f"latency {self.latency_us:g} µs")
        return out


@dataclass(slots=True)
class WhatIfReport:
    """What applying a what-if did."""

    model: CommModel | None = None
    changed: CommModel | None = None   # the model on the what-if's network (--bandwidth / --latency)
    matched: dict[str, int] = field(default_factory=dict)   # rule text -> nodes matched (all ranks)
    modelled: int = 0          # collectives timed by the model alone (no recorded duration)
    retimed: int = 0           # recorded collectives changed by a size / bandwidth / latency what-if

    def lines(self) -> list[str]:
        out = [f"{k}: {v} node(s)" for k, v in self.matched.items()]
        if self.model is not None:
            out.append(f"communication model: {self.model.describe()}")
        if self.changed is not None:
            out.append(f"what-if network: {self.changed.describe()}")
        if self.modelled:
            out.append(f"{self.modelled} collective(s) without a recorded duration timed by the model")
        if self.retimed:
            out.append(f"{self.retimed} recorded collective(s) re-timed by the model")
        return out


def _model_for(graphs: Sequence[RankGraph], w: WhatIf, job_ranks: int) -> CommModel:
    if isinstance(w.model, CommModel):
        return w.model
    if isinstance(w.model, tuple):
        lat, gbps = w.model
        if lat < 0 or gbps <= 0:
            raise WhatIfError("communication model: latency must be >= 0 and bandwidth > 0")
        return CommModel(float(lat), float(gbps) * 1000.0, "given")
    fitted = fit_model(_comm_samples(graphs, job_ranks))
    if fitted is not None:
        return fitted
    if w.model == "fit":
        raise WhatIfError("communication model: the trace has no recorded collective with a size and a "
                          "duration to fit it on; give one with LATENCY_US,GBPS")
    log.warning("no recorded collective to fit the communication model on: using latency %.0f µs, "
                "bandwidth %.0f GB/s (give --comm-model LATENCY_US,GBPS for your network)",
                WHATIF_LATENCY_US, WHATIF_GBPS)
    return CommModel(WHATIF_LATENCY_US, WHATIF_GBPS * 1000.0, "default")


def _needs_model(graphs: Sequence[RankGraph], w: WhatIf) -> bool:
    if w.model is not None or w.comm_size or w.bandwidth_gbps is not None or w.latency_us is not None:
        return True
    for g in graphs:
        durs = g.durations
        for i in g.comm:                  # the communication nodes
            if durs[i] <= 0:
                return True
    return False


def check_ranks(w: WhatIf | None, ranks: Iterable[int | None]) -> None:
    """A UsageError when a rule names ranks (``@R``) none of which the replay has: a typo, not a change
    that happens to match nothing.  Called with every rank of the replay (a pipeline replays them apart)."""
    present = {r for r in ranks if r is not None}
    for r in (*w.scale, *w.delay, *w.comm_size) if w is not None else ():
        if r.selector.ranks is not None and present.isdisjoint(r.selector.ranks):
            have = ", ".join(map(str, sorted(present))) or "none known"
            raise UsageError(f"what-if {r.selector.text!r}: no such rank in the replay (its ranks: {have})")


def _model_delays(g: RankGraph, w: WhatIf, model: CommModel, changed: CommModel | None,
                  times: dict[tuple[Any, ...], float], report: WhatIfReport, job_ranks: int
                  ) -> list[float] | None:
    """The µs the communication model adds to each node of ``g`` (None: none): a collective recorded
    without a duration takes the model's time, a recorded one its recording plus the model's difference
    when its size (``w.comm_size``) or the network (``changed``) changes."""
    comm, ctype, csize = g.comm_lookups()
    durs, types = g.durations, g.types
    if not w.comm_size and changed is None:
        return _untimed_delays(g, model, times, report, job_ranks, ctype, csize, comm)
    new_model = changed or model
    sizes: dict[str, int] = {}          # pg -> its group size
    delay_l: list[float] | None = None
    modelled = retimed = 0
    for i in comm_positions(g):
        size = float(csize.get(i, 0))
        factor = 1.0
        for r in w.comm_size:
            if r.selector.matches(g, i, "comm"):
                factor *= r.value
                report.matched[r.selector.text] += 1
        d = durs[i]
        if d > 0 and factor == 1.0 and changed is None:
            continue                    # recorded, and nothing changes it
        info = comm.get(i)
        pg = info.pg_name if info is not None else ""
        gs = sizes.get(pg)
        if gs is None:
            gs = sizes[pg] = group_size(g, i, job_ranks)
        ct, nt = ctype.get(i), types[i]
        if d <= 0:
            nd = _time(times, new_model, ct, nt, size * factor, gs)
            modelled += 1
        else:
            nd = max(0.0, d + _time(times, new_model, ct, nt, size * factor, gs)
                     - _time(times, model, ct, nt, size, gs))
            retimed += 1
        if delay_l is None:
            delay_l = [0.0] * len(durs)
        delay_l[i] += nd - d
    report.modelled += modelled
    report.retimed += retimed
    return delay_l


def _untimed_delays(g: RankGraph, model: CommModel, times: dict[tuple[Any, ...], float],
                    report: WhatIfReport, job_ranks: int, ctype: dict[int, Any], csize: dict[int, Any],
                    comm: dict[int, CommInfo]) -> list[float] | None:
    """:func:`_model_delays` when nothing changes sizes or the network: only the collectives recorded
    without a duration change, each to the model's time; worked out once per distinct (type, node type,
    size, group), the nodes mapped to it in C."""
    durs = g.durations
    every = comm_positions(g)
    pos = list(compress(every, map((0.0).__ge__, map(durs.__getitem__, every))))
    if not pos:
        return None
    pgs = [x.pg_name if x is not None else "" for x in map(comm.get, pos)]
    keys = list(zip(map(ctype.get, pos), map(g.types.__getitem__, pos), map(csize.get, pos, repeat(0)), pgs))
    sizes = {pg: group_size(g, i, job_ranks) for pg, i in dict(zip(pgs, pos)).items()}
    nd = {k: _time(times, model, k[0], k[1], float(k[2]), sizes[k[3]]) for k in dict.fromkeys(keys)}
    delay_l = [0.0] * len(durs)
    # delay = 0.0 + (model's time - recorded), as _model_delays adds it
    any(map(delay_l.__setitem__, pos, map((0.0).__add__, map(operator.sub, map(nd.__getitem__, keys),
                                                              map(durs.__getitem__, pos)))))
    report.modelled += len(pos)
    return delay_l


def apply_whatif(graphs: Sequence[RankGraph], w: WhatIf | None) -> tuple[list[RankGraph], WhatIfReport]:
    """The graphs with ``w`` applied (copies: the inputs are left as they are) and what it did.

    The recorded durations stay as they are (the replay compares them with the recorded start times);
    a node's new time is ``duration * factor + delay``, where the delay also holds the model's re-timing
    of a collective.  Collectives recorded without a duration are timed by the model even with no
    change asked."""
    w = w or WhatIf()
    report = WhatIfReport()
    job_ranks = len(graphs)
    model = _model_for(graphs, w, job_ranks) if _needs_model(graphs, w) else None
    report.model = model
    changed = None
    if model is not None and (w.bandwidth_gbps is not None or w.latency_us is not None):
        changed = model.with_network(w.bandwidth_gbps, w.latency_us)
    report.changed = changed
    for r in (*w.scale, *w.delay, *w.comm_size):
        report.matched.setdefault(r.selector.text, 0)
    if model is None and not (w.scale or w.delay):
        return list(graphs), report
    out = []
    times: dict[tuple[Any, ...], float] = {}   # (model, type, node type, bytes, group size) -> its time
    for g in graphs:
        n = len(g.ids)
        kinds = [node_kind(g, i) for i in range(n)] if w.scale or w.delay else []
        delay_l: list[float] | None = None      # µs added: delays, and the model's re-timing of collectives
        if model is not None:
            delay_l = _model_delays(g, w, model, changed, times, report, job_ranks)
        factor_l: list[float] | None = None
        for r in w.scale:
            for i in range(n):
                if kinds[i] != "metadata" and r.selector.matches(g, i, kinds[i]):
                    if factor_l is None:
                        factor_l = [1.0] * n
                    factor_l[i] *= r.value
                    report.matched[r.selector.text] += 1
        for r in w.delay:
            for i in range(n):
                if kinds[i] != "metadata" and r.selector.matches(g, i, kinds[i]):
                    if delay_l is None:
                        delay_l = [0.0] * n
                    delay_l[i] += r.value
                    report.matched[r.selector.text] += 1
        if factor_l is None and delay_l is None:
            out.append(g)
            continue
        out.append(replace(g, factor=factor_l, delay=delay_l))
    present = {g.rank for g in graphs}
    rules = {r.selector.text: r.selector for r in (*w.scale, *w.delay, *w.comm_size)}
    for text, k in report.matched.items():
        sel = rules[text]
        if k == 0 and (sel.ranks is None or not present.isdisjoint(sel.ranks)):   # (other ranks: not here)
            log.warning("what-if %r matches no node", text)
    return out, report
