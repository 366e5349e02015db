"""Host op <-> Kineto event matching.

Two strategies, chosen per trace and reported in ``link_stats``:

``rf_id``
    Newer PyTorch writes ``args["Record function id"]`` on Kineto ``cpu_op`` /
    ``user_annotation`` events, equal to the host node's ``rf_id``: a dict
    lookup.  Chosen when at least half of the host operators (or of the distinct
    Record function ids of the Kineto trace, when fewer: a host ET that recorded
    more steps than the Kineto trace) find an event with their rf_id and nine in
    ten of those hits carry the same name.  Hits with a different name are not
    trusted.
``alignment``
    Older traces (schema 1.0.1, DLRM) relate ``rf_id`` to ``External id`` only
    loosely, so the operator-name sequences are aligned instead, per thread:
    host ops of one host ``tid`` in execution order (``rf_id`` order, which is
    the order record functions start; node-id order when rf_ids are missing)
    against the Kineto host events of one Kineto thread in execution order
    (``External id`` order when every event has one, else start time, longer
    first on ties).  Host threads are paired with Kineto threads by the overlap
    of their operator-name multisets.  See ``align.py`` for the alignment.

With alignment, host ops left over are then aligned in a second round: a host
thread records ops for work that ran on other OS threads (``gloo:*`` on gloo
worker threads; the host ET files them under the main thread while their inner
ops get worker tids of their own).  Each host thread's leftovers, in execution
order, are aligned ONCE against the unmatched events of every other Kineto
thread merged in start-time order.  (A thread at a time, and only the threads
no host thread was paired with, gave cpu_gloo/tp_like_2r without Record
function ids the wrong events: node 12 ``gloo:broadcast``, rf 8, took the event
of rf 208, 12.9 ms later, and 8 collectives stayed unmatched; their events were
on worker threads paired with the host tids of their inner ops.)  The events of
the host thread's own paired Kineto thread are not offered again: an op whose
event is missing would otherwise grab a same-named extra event far away in
time; and a pair whose event starts before the event of an op that ran earlier
on the host thread is dropped (``link_stats["second_round_order_dropped"]``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from chakra.device.model import KinetoTrace
from chakra.host.model import OP, HostOp, HostTrace
from chakra.link.align import align_sequences
from chakra.link.window import Window, rf_hits, rf_identifies

log = logging.getLogger(__name__)

RF_ID = "rf_id"
ALIGNMENT = "alignment"


@dataclass(slots=True)
class ThreadPair:
    host_tid: int
    kineto_tid: Any
    host_ops: int
    kineto_events: int
    matched: int


@dataclass(slots=True)
class MatchResult:
    """host op id -> position in ``KinetoTrace.events``, and the reverse."""

    strategy: str
    host_to_event: dict[int, int] = field(default_factory=dict)
    event_to_host: dict[int, int] = field(default_factory=dict)
    host_ops: int = 0  # host operator nodes considered (kind OP)
    kineto_candidates: int = 0  # Kineto cpu_op + user_annotation events in the window
    second_round: int = 0  # matches found by the leftover round
    order_dropped: int = 0  # leftover-round pairs dropped: the event starts before an earlier op's
    rf_name_mismatch: int = 0  # rf_id hits rejected because the names differ
    threads: list[ThreadPair] = field(default_factory=list)

    @property
    def matched(self) -> int:
        return len(self.host_to_event)

    def add(self, host_id: int, pos: int) -> None:
        self.host_to_event[host_id] = pos
        self.event_to_host[pos] = host_id


def host_operators(host: HostTrace) -> list[HostOp]:
    """The host nodes that are operators (not thread/process roots, not process_group:init)."""
    return [op for op in host.ops if op.kind == OP]


def execution_order(ops: list[HostOp]) -> list[HostOp]:
    """One thread's host ops in execution order (rf_id order; node-id order when rf_ids are missing)."""
    if all(op.rf_id is not None for op in ops):
        return sorted(ops, key=_RF_ID_ORDER)
    return sorted(ops, key=_ID_ORDER)


_RF_ID_ORDER = attrgetter("rf_id", "id")
_NAME = attrgetter("name")
_ID_ORDER = attrgetter("id")


def kineto_order(kineto: KinetoTrace, positions: list[int]) -> list[int]:
    """One thread's event positions in execution order (External id order when every event has one, else
    start time, longer first on ties)."""
    events = kineto.events
    evs = [events[p] for p in positions]
    keyed: list[tuple[Any, float, int]]   # (External id, else start time: each orders its own list)
    if all(ev.external_id is not None for ev in evs):
        keyed = [(ev.external_id, ev.ts, p) for ev, p in zip(evs, positions)]
    else:
        keyed = [(ev.ts, -ev.dur, p) for ev, p in zip(evs, positions)]
    keyed.sort()
    return [t[2] for t in keyed]


def match_ops(host: HostTrace, kineto: KinetoTrace, window: Window) -> MatchResult:
    """Match host operators to Kineto host events (strategy chosen here, see module doc)."""
    ops = host_operators(host)
    events = kineto.events
    candidates: list[int] = []
    by_rf: dict[int, int] = {}
    lo, hi = window.lo, window.hi
    for p in kineto.op_positions:  # the host ops and annotations
        ev = events[p]
        if lo <= ev.ts < hi:  # window.contains
            candidates.append(p)
        if ev.rf_id is not None:
            by_rf.setdefault(ev.rf_id, p)

    result: MatchResult | None = None
    if by_rf:
        found, hits, same = rf_hits(ops, kineto, by_rf)
        if rf_identifies(min(len(ops), len(by_rf)), hits, same):
            result = MatchResult(RF_ID)
            host_to_event = result.host_to_event
            event_to_host = result.event_to_host
            for oid, p, equal in found:
                if equal:   # result.add
                    host_to_event[oid] = p
                    event_to_host[p] = oid
                else:
                    result.rf_name_mismatch += 1
        else:
            log.info(
                "Record function ids present but they do not identify the host ops "
                "(%d of %d found, %d with the same name): aligning names instead",
                hits,
                len(ops),
                same,
            )
    if result is None:
        result = MatchResult(ALIGNMENT)
        host_groups = group_host(ops)
        paired = _align_threads(host_groups, kineto, candidates, result)
        _leftover_round(ops, host_groups, kineto, candidates, paired, result)
    result.host_ops = len(ops)
    result.kineto_candidates = len(candidates)
    return result


def group_host(ops: list[HostOp]) -> dict[int, list[HostOp]]:
    """Host ops by host tid, each thread's in execution order."""
    groups: dict[int, list[HostOp]] = {}
    for op in ops:
        groups.setdefault(op.tid, []).append(op)
    return {tid: execution_order(g) for tid, g in groups.items()}


def group_kineto(kineto: KinetoTrace, positions: list[int]) -> dict[Any, list[int]]:
    """Event positions by Kineto thread ``(pid, tid)``, each thread's in execution order."""
    events = kineto.events
    groups: dict[Any, list[int]] = {}
    for p in positions:
        ev = events[p]
        groups.setdefault((ev.pid, ev.tid), []).append(p)
    return {key: kineto_order(kineto, g) for key, g in groups.items()}


def name_overlap(a: Counter[str], b: Counter[str]) -> int:
    """Size of the intersection of two name multisets."""
    if len(a) > len(b):
        a, b = b, a
    return sum(min(c, b.get(n, 0)) for n, c in a.items())


def _pair_threads(
    host_groups: dict[int, list[HostOp]], kin_groups: dict[Any, list[int]], kineto: KinetoTrace
) -> list[tuple[int, Any]]:
    """Greedy one-to-one pairing of host tids and Kineto threads by name-multiset overlap."""
    events = kineto.events
    name = _NAME
    h_names = {tid: Counter(map(name, g)) for tid, g in host_groups.items()}
    k_names = {key: Counter(map(name, map(events.__getitem__, g))) for key, g in kin_groups.items()}
    scored = sorted(
        (
            (name_overlap(hn, kn), str(htid), str(key), htid, key)
            for htid, hn in h_names.items()
            for key, kn in k_names.items()
        ),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    used_h: set[int] = set()
    used_k: set[Any] = set()
    pairs: list[tuple[int, Any]] = []
    for score, _, _, htid, key in scored:
        if score <= 0:
            break
        if htid in used_h or key in used_k:
            continue
        used_h.add(htid)
        used_k.add(key)
        pairs.append((htid, key))
    return pairs


def _align_threads(
    host_groups: dict[int, list[HostOp]], kineto: KinetoTrace, candidates: list[int], result: MatchResult
) -> dict[int, Any]:
    """Align each host thread (its ops in execution order) with its paired Kineto thread; return host
    tid -> paired Kineto thread key."""
    events = kineto.events
    kin_groups = group_kineto(kineto, candidates)
    paired: dict[int, Any] = {}
    for htid, key in _pair_threads(host_groups, kin_groups, kineto):
        h = host_groups[htid]
        k = kin_groups[key]
        pairs = align_sequences([op.name for op in h], [events[p].name for p in k])
        h2e, e2h = result.host_to_event, result.event_to_host
        for i, j in pairs:  # result.add, inline
            h2e[h[i].id] = k[j]
            e2h[k[j]] = h[i].id
        result.threads.append(ThreadPair(htid, key[1], len(h), len(k), len(pairs)))
        paired[htid] = key
    return paired


def _leftover_round(
    ops: list[HostOp],
    all_groups: dict[int, list[HostOp]],
    kineto: KinetoTrace,
    candidates: list[int],
    paired: dict[int, Any],
    result: MatchResult,
) -> None:
    """Align each host thread's unmatched ops once against the unmatched events of all other threads.

    The events (of every Kineto thread but the one this host thread was paired with) are merged in
    start-time order, since External ids are numbered per thread and cannot order events of different
    threads; the host ops go in execution (``rf_id``) order.  The alignment keeps both orders, and a
    pair is dropped when its event starts before the event of an op that ran earlier on the host thread
    (matched in the first round): a record function cannot start before its predecessor on the thread.
    """
    left_ops = [op for op in ops if op.id not in result.host_to_event]
    if not left_ops:
        return
    events = kineto.events
    left_ev = sorted(
        (p for p in candidates if p not in result.event_to_host),
        key=lambda p: (events[p].ts, -events[p].dur, p),
    )
    if not left_ev:
        return
    for htid, h in sorted(group_host(left_ops).items()):
        own = paired.get(htid)
        k = [p for p in left_ev if p not in result.event_to_host and (events[p].pid, events[p].tid) != own]
        if not k:
            continue
        # earliest start allowed for each leftover op: the start of the last first-round match before it
        floor: dict[int, float] = {}
        last = float("-inf")
        for op in all_groups[htid]:
            pos = result.host_to_event.get(op.id)
            if pos is not None:
                last = max(last, events[pos].ts)
            else:
                floor[op.id] = last
        pairs = align_sequences([op.name for op in h], [events[p].name for p in k])
        for i, j in pairs:
            if events[k[j]].ts < floor[h[i].id]:
                result.order_dropped += 1
                continue
            result.add(h[i].id, k[j])
            result.second_round += 1
