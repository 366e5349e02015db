"""Which stretch of a Kineto trace the host ET recorded, when no ProfilerStep says it.

The ExecutionTraceObserver can be started and stopped around one iteration while the profiler runs over many,
without ``prof.step()`` (PARAM's linker test pairs are made so): a host ET of one iteration, a Kineto trace of
dozens, no ProfilerStep on either side.  Linked against the whole trace, the host ops were matched to events
of several iterations, the measured window was the whole trace and the GPU ops of the other iterations
counted as not attached.  :func:`find_stretch` finds the contiguous stretch of the Kineto trace that the host
ET recorded; only its events are then matched, and it is the measured window.

What ties the two files, in order:

1. ``Record function id``: PyTorch writes it on the Kineto events of the ops the ET observer recorded, equal
   to the host node's ``rf_id`` (0 on the events of the other iterations): the stretch spans those events.
2. Otherwise the operator names.  The host ET's busiest thread (its ops in execution order) is aligned with
   the repetitions of its sequence in the Kineto thread of the most similar names: runs of 8 names
   (:data:`STRETCH_GRAMS`) that occur once in the host sequence vote for an offset, the votes cluster by
   repetition, and each repetition is aligned (:func:`chakra.link.align.align_sequences`).  The one that
   leaves the fewest ops unmatched on either side wins.  Repetitions that align alike (within 1% of the
   host ops: identical iterations) are told apart by time: the first after the ``## process_group:init ##``
   event that the ET observer records as it starts, when the Kineto trace holds one (PyTorch 2.x, the
   profiler running then); else the one that ran slowest op by op, as the observer's callbacks run inside
   every op it records (the median op 43 us against 3 us in the other iterations of a collected gloo MLP
   rank, ``trace_collection/collect.py --et-iteration``).

The host ET's own clock does not tie it to Kineto's: its ``start_ts`` / ``finish_ts`` are steady-clock
milliseconds taken when the observer was registered and unregistered, its ``time`` the wall clock of that
moment to the second, in the machine's zone (what tells different runs apart: :mod:`chakra.link.provenance`).

When nothing of the Kineto thread lies outside the stretch (the host ET recorded the whole trace), the window
stays the whole trace.  When no stretch aligns (under :data:`STRETCH_MIN_ALIGNED` of the host thread's ops in
order), the link is refused; ``force`` links against the whole trace anyway.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from chakra.device.model import KinetoEvent, KinetoTrace, StepWindow
from chakra.errors import TraceFormatError
from chakra.host.model import PG_INIT_NAME, HostOp, HostTrace
from chakra.link.align import align_sequences
from chakra.link.match import (
    execution_order,
    host_operators,
    kineto_order,
    name_overlap,
)
from chakra.link.window import Window, rf_hits, rf_identifies, rf_index
from chakra.tunables import STRETCH_GRAMS, STRETCH_MIN_ALIGNED, STRETCH_PACKED, STRETCH_SPANS_MAX

log = logging.getLogger(__name__)

STRETCH = "host_et_stretch"


@dataclass(slots=True)
class _Aligned:
    """The host thread's ops aligned with one stretch of the Kineto thread's events."""

    pairs: list[tuple[int, int]]   # (host index, Kineto index), increasing in both

    @property
    def first(self) -> int:
        return self.pairs[0][1]

    @property
    def last(self) -> int:
        return self.pairs[-1][1]

    def cost(self, n: int) -> int:
        """Ops left unmatched: of the ``n`` host ops, and of the Kineto events between the first and last."""
        matched = len(self.pairs)
        return (n - matched) + (self.last - self.first + 1 - matched)


def find_stretch(host: HostTrace, kineto: KinetoTrace, window: Window, force: bool = False) -> Window:
    """The window of the stretch of ``kineto`` that ``host`` recorded (see the module doc), or ``window`` (the
    whole trace) when the host ET recorded all of it.  A TraceFormatError when no stretch aligns, unless
    ``force`` (then ``window``, with a warning)."""
    ops = host_operators(host)
    if not ops or not kineto.op_positions:
        return window
    by_rf = rf_index(kineto)
    if by_rf:
        found, hits, same = rf_hits(ops, kineto, by_rf)
        if rf_identifies(min(len(ops), len(by_rf)), hits, same):
            return _rf_stretch(kineto, [p for _, p, equal in found if equal], window)
    return _aligned_stretch(host, kineto, ops, window, force)


def _rf_stretch(kineto: KinetoTrace, positions: list[int], window: Window) -> Window:
    """The span of the matched events of the thread that holds most of them (as :func:`_aligned_stretch`
    measures it: the other threads' ops of the iteration run inside it)."""
    events = kineto.events
    main = Counter((events[p].pid, events[p].tid) for p in positions).most_common(1)[0][0]
    lo, hi = _span(events, [p for p in positions if (events[p].pid, events[p].tid) == main])
    outside = 0
    for p in kineto.op_positions:
        ev = events[p]
        if ev.parent is None and (ev.pid, ev.tid) == main and not lo <= ev.ts < hi:
            outside += 1
    if not outside:
        return window
    return _window(lo, hi, f"the stretch the host ET recorded: {len(positions)} host ops found by Record "
                           f"function id; {outside} top-level ops of Kineto thread {main[1]} lie outside it")


def _aligned_stretch(host: HostTrace, kineto: KinetoTrace, ops: list[HostOp], window: Window,
                     force: bool) -> Window:
    events = kineto.events
    # the busiest host thread and the Kineto thread of the most similar names, only those two put in order
    tids = Counter(op.tid for op in ops)
    htid = min(tids, key=lambda t: (-tids[t], str(t)))
    h_ops = execution_order([op for op in ops if op.tid == htid])
    kin: dict[Any, list[int]] = {}
    for p in kineto.op_positions:
        ev = events[p]
        kin.setdefault((ev.pid, ev.tid), []).append(p)
    h_names = Counter(op.name for op in h_ops)
    key = min(kin, key=lambda k: (-name_overlap(h_names, Counter(events[p].name for p in kin[k])), str(k)))
    k_pos = kineto_order(kineto, kin[key])
    code: dict[str, int] = {}
    h = [code.setdefault(op.name, len(code)) for op in h_ops]
    k = [code.setdefault(events[p].name, len(code)) for p in k_pos]
    n = len(h)
    found = _distinct([a for a in (_align(h, k, lo, hi) for lo, hi in _spans(h, k)) if a is not None])
    best = min(found, key=lambda a: (a.cost(n), a.first), default=None)
    got = len(best.pairs) if best is not None else 0
    if got < STRETCH_MIN_ALIGNED * n:
        what = (f"no stretch of the Kineto trace aligns with the host ET {host.path}: at best {got} of the "
                f"{n} ops of its thread {htid} match in order ({100 * got / n:.1f}%, Kineto thread "
                f"{key[1]}); traces of different runs or programs?")
        if not force:
            raise TraceFormatError(what + " (--force links anyway)", kineto.path)
        log.warning("%s: %s (linked against the whole trace: --force)", kineto.path, what)
        return window
    assert best is not None
    tol = max(2, n // 100)
    tied = sorted((a for a in found if a.cost(n) <= best.cost(n) + tol), key=lambda a: a.first)
    chosen, note = (best, "") if len(tied) == 1 else _after_et_start(tied, kineto, k_pos) or \
        _slowest(tied, kineto, k_pos)
    outside = sum(1 for p in k_pos[:chosen.first] if events[p].parent is None) + \
        sum(1 for p in k_pos[chosen.last + 1:] if events[p].parent is None)
    if not outside:
        return window
    lo, hi = _span(events, k_pos[chosen.first:chosen.last + 1])
    return _window(lo, hi, f"the stretch the host ET recorded: the {n} ops of its thread {htid} aligned with "
                           f"{len(chosen.pairs)} of {chosen.last - chosen.first + 1} events of Kineto thread "
                           f"{key[1]}{note}; {outside} top-level ops of that thread lie outside it")


def _window(lo: float, hi: float, reason: str) -> Window:
    return Window(STRETCH, [StepWindow(STRETCH, lo, hi - lo)], lo, hi, reason)


def _span(events: list[KinetoEvent], positions: Sequence[int]) -> tuple[float, float]:
    """(first start, last end) of the events at ``positions``; the end is after the last start, so that
    ``Window.contains`` holds every one of them."""
    lo = min(events[p].ts for p in positions)
    last = max(events[p].ts for p in positions)
    hi = max(events[p].ts + events[p].dur for p in positions)
    return lo, max(hi, math.nextafter(last, math.inf))


def _spans(h: list[int], k: list[int]) -> list[tuple[int, int]]:
    """Ranges of ``k`` that each hold one repetition of ``h`` (best voted first): all of ``k`` when it is
    about as long as ``h``."""
    n, m = len(h), len(k)
    if m <= n + n // 4:
        return [(0, m)]
    votes: list[tuple[int, int, int]] = []
    for q in STRETCH_GRAMS:
        votes = _votes(h, k, min(q, n))
        if votes:
            break
    else:   # not a run of three names in common: the whole thread, as an alignment without a stretch
        return [(0, m)]
    band = max(8, n // 20)   # drift of the offset along one repetition (ops missing on one side)
    clusters: list[list[tuple[int, int, int]]] = [[votes[0]]]
    for v in votes[1:]:
        if v[0] - clusters[-1][-1][0] <= band:
            clusters[-1].append(v)
        else:
            clusters.append([v])
    top = max(map(len, clusters))
    keep = sorted((c for c in clusters if 4 * len(c) >= top),
                  key=lambda c: (-len(c), c[0][0]))[:STRETCH_SPANS_MAX]
    spans = []
    for c in keep:
        _, i0, j0 = min(c, key=itemgetter(1))
        _, i1, j1 = max(c, key=itemgetter(1))
        spans.append((max(0, j0 - i0 - band), min(m, j1 + n - i1 + band)))
    return spans


def _votes(h: list[int], k: list[int], q: int) -> list[tuple[int, int, int]]:
    """``(j - i, i, j)``, sorted, for each run of ``q`` names at index i of ``h`` (one that occurs once there,
    else any) found at index j of ``k``: the repetition of ``h`` there starts near ``j - i``."""
    at: dict[tuple[int, ...], int] = {}
    repeated: set[tuple[int, ...]] = set()
    for i, g in enumerate(zip(*(h[s:] for s in range(q)))):
        if g in at:
            repeated.add(g)
        else:
            at[g] = i
    unique = {g: i for g, i in at.items() if g not in repeated} or at
    return sorted((j - at_h, at_h, j) for j, g in enumerate(zip(*(k[s:] for s in range(q))))
                  if (at_h := unique.get(g)) is not None)


def _align(h: list[int], k: list[int], lo: int, hi: int) -> _Aligned | None:
    """``h`` aligned with ``k[lo:hi]``, the Kineto side of its first and last :data:`STRETCH_PACKED` pairs
    packed as tight as the matched names allow (a name that the neighbouring repetition also has is taken
    inside the stretch, not beyond it)."""
    pairs = [(i, j + lo) for i, j in align_sequences(h, k[lo:hi])]
    if not pairs:
        return None
    cut = max(1, len(pairs) - STRETCH_PACKED)
    # leftmost after the middle: the end comes as early as it can ...
    for t in range(cut, len(pairs)):
        i, j = pairs[t][0], pairs[t - 1][1] + 1
        while k[j] != h[i]:
            j += 1
        pairs[t] = (i, j)
    # ... and rightmost before it: the start as late as it can
    for t in range(min(STRETCH_PACKED, len(pairs) - 1) - 1, -1, -1):
        i, j = pairs[t][0], pairs[t + 1][1] - 1
        while k[j] != h[i]:
            j -= 1
        pairs[t] = (i, j)
    return _Aligned(pairs)


def _distinct(found: list[_Aligned]) -> list[_Aligned]:
    """One alignment per stretch: of those that overlap by more than half, the one found first."""
    kept: list[_Aligned] = []
    for a in found:
        span = a.last - a.first + 1
        if all(min(a.last, b.last) - max(a.first, b.first) + 1 <= span // 2 for b in kept):
            kept.append(a)
    return kept


def _after_et_start(tied: list[_Aligned], kineto: KinetoTrace, k_pos: list[int]
                    ) -> tuple[_Aligned, str] | None:
    """Of stretches that align alike, the first that starts after the ET observer did, when the Kineto trace
    holds the one ``## process_group:init ##`` event that the observer records as it starts (PyTorch 2.x
    does, when the profiler runs then); None without one."""
    events = kineto.events
    marks = [events[p].ts for p in kineto.op_positions if events[p].name == PG_INIT_NAME]
    if len(marks) != 1:
        return None
    after = [a for a in tied if events[k_pos[a.first]].ts >= marks[0]]
    if not after:
        return None
    return after[0], (f" ({len(tied)} stretches align alike: the first after the ET observer started, at its "
                      f"{PG_INIT_NAME} event, {_at(events[k_pos[after[0].first]])})")


def _slowest(tied: list[_Aligned], kineto: KinetoTrace, k_pos: list[int]) -> tuple[_Aligned, str]:
    """Of stretches that align alike, the one whose ops ran slowest (the ET observer's recording slows every
    op it records): the one slowest in the most of the ops all of them matched; the earliest when none is."""
    events = kineto.events
    maps = [dict(a.pairs) for a in tied]
    common = sorted(set.intersection(*(set(m) for m in maps)))
    wins = [0] * len(tied)
    for i in common:
        durs = [events[k_pos[m[i]]].dur for m in maps]
        top = max(durs)
        if durs.count(top) == 1:
            wins[durs.index(top)] += 1
    c = max(range(len(tied)), key=lambda x: (wins[x], -x))
    where = _at(events[k_pos[tied[c].first]])
    if not wins[c]:
        log.warning("%s: %d stretches align alike with the host ET and ran alike: linked the first (%s)",
                    kineto.path, len(tied), where)
        return tied[c], f" ({len(tied)} stretches align alike and ran alike: the first)"
    if 2 * wins[c] < len(common):
        log.warning("%s: %d stretches align alike with the host ET; the one at %s ran slowest in only %d of "
                    "%d ops: it may not be the iteration the host ET recorded", kineto.path, len(tied), where,
                    wins[c], len(common))
    return tied[c], (f" ({len(tied)} stretches align alike: the one that ran slowest in {wins[c]} of their "
                     f"{len(common)} common ops, as the ET observer slows the ops it records)")


def _at(ev: KinetoEvent) -> str:
    return f"ts {ev.ts:.0f}"
