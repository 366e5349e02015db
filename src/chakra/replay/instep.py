"""Coupling a job whose ranks issue their collectives in step, on the graphs' columns.

:func:`chakra.job.match.match_job` works on one record per communication node
(:class:`~chakra.job.match.Comm`) and one dict per collective: ~200 bytes a node for the time of the match,
and most of its time, at a thousand ranks. Most large jobs need none of its repairs: every communication
node is a collective, none records a sequence number or an end time (generated jobs: the communication model
times them), and the ranks of each process group issue the same types and sizes k-th for k-th. Then
``match_job`` pairs the k-th with the k-th (:func:`chakra.job.match._in_step`), leaves nothing out and notes
nothing, and orders the collectives by issue order, the lowest (group, k) first among those every member
rank has reached (:func:`chakra.job.match._global_order` with no end times). :func:`couple_in_step` computes
exactly that from per-(group, rank) arrays of node positions; a job it does not recognise (a send or a recv,
a sequence number, an end time, a group it cannot resolve, sequences out of step, issue orders that
contradict each other) it leaves to ``match_job``, which repairs or explains it.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Any

from chakra.job.match import COMM_COLL_NODE, JobMatchError, RankComms, job_groups, world_pg
from chakra.replay.graph import RankGraph


@dataclass(slots=True)
class InStep:
    """The groups :func:`couple_in_step` found, in ``match_job``'s order: each one's members (global
    indices, in rank order), its duration (the shortest member's) and its label; node -> group."""

    members: list[list[int]] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    group_of: array = field(default_factory=lambda: array("l"))


def couple_in_step(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: Sequence[int],
                   orders: Sequence[Sequence[int]], durations: Sequence[float]) -> InStep | None:
    """The coupling of a job in step (module doc), or None when ``match_job`` has to do it."""
    try:
        groups = job_groups([RankComms(r, [], dict(g.process_groups), g.path) for r, g in zip(ranks, graphs)])
    except JobMatchError:
        return None                          # (match_job says what is wrong)
    try:
        seqs = _sequences(graphs, ranks, offsets, orders, groups)
    except OverflowError:                    # (a type or size no int64 holds)
        return None
    if seqs is None:
        return None
    by_group, issue = seqs
    names = sorted(by_group)
    first: list[int] = []                   # each group's first instance
    gix = array("l")                        # instance -> its group (position in names)
    for p, pg in enumerate(names):
        sig, cols = by_group[pg]
        ref = next(iter(sig.values()))
        n = len(next(iter(cols.values())))
        if any(len(c) != n for c in cols.values()) or any(x != ref for x in sig.values()):
            return None                     # not k-th with k-th: match_job aligns them
        first.append(len(gix))
        gix.extend(array("l", (p,)) * n)
    ranks_of = [sorted(by_group[pg][1]) for pg in names]
    order = _issue_order(names, issue, first, gix, ranks_of)
    if order is None:
        return None                         # contradicting orders: match_job explains them
    out = InStep(group_of=array("l", (-1,)) * offsets[-1])
    labels = [f"collective #{{}} of process group {_label(pg)}" for pg in names]
    cols_of = [[by_group[pg][1][r] for r in rs] for pg, rs in zip(names, ranks_of)]
    group_of = out.group_of
    for gid, inst in enumerate(order):
        p = gix[inst]
        k = inst - first[p]
        members = [c[k] for c in cols_of[p]]
        out.members.append(members)
        out.dur.append(min(map(durations.__getitem__, members)))
        out.label.append(labels[p].format(k))
        for m in members:
            group_of[m] = gid
    return out


def _label(pg: str) -> str:
    return "'world'" if world_pg(pg) else repr(pg)


_Sig = dict[int, tuple[bytes, bytes]]          # rank -> its collectives' types and sizes, packed
_Issue = tuple[int, array, list[str]]          # a rank, its collectives' groups in issue order, the groups
_SEQ, _PG = attrgetter("seq"), attrgetter("pg_name")


def _sequences(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: Sequence[int],
               orders: Sequence[Sequence[int]], groups: dict[str, tuple[int, ...]]
               ) -> tuple[dict[str, tuple[_Sig, dict[int, array]]], list[_Issue]] | None:
    """Per group: each member rank's signature and its nodes' global indices in issue order; per rank:
    (rank, the group of each of its collectives in issue order as an index into the list that follows,
    that list of groups).  None when a node is not a plain untimed collective or a group does not
    resolve as ``match_job`` resolves it without a note."""
    job_set = set(ranks)
    everyone = tuple(sorted(job_set))
    by_group: dict[str, tuple[_Sig, dict[int, array]]] = {}
    issue: list[_Issue] = []
    for r, g, off, order in zip(ranks, graphs, offsets, orders):
        comm, ctypes, csizes = g.comm_lookups()
        infos = list(map(comm.get, order))
        pos = list(compress(order, infos))          # the comm nodes, in lane order
        types = g.types
        if any(types[i] != COMM_COLL_NODE for i in pos):
            return None
        if g.measured_start_us is not None and any(g.starts[i] for i in pos):
            return None                             # timed: match_job weighs the end times
        found = list(filter(None, infos))
        if set(map(_SEQ, found)) - {None}:
            return None                             # recorded sequence numbers: match_job pairs by them
        raw_pgs = list(map(_PG, found))
        mine: dict[str, int] = {}                   # recorded pg -> its position in names
        names: list[str] = []
        for raw in dict.fromkeys(raw_pgs):
            pg = _resolve(raw, r, groups, job_set, everyone)
            if pg is None or pg in names:           # (two recorded names of one group: "" and "0")
                return None
            mine[raw] = len(names)
            names.append(pg)
        which = array("l", map(mine.__getitem__, raw_pgs))
        cols = _columns(off, pos, list(map(ctypes.get, pos)), list(map(csizes.get, pos)), which, len(names))
        issue.append((r, which, names))
        for pg, (p, t, s) in zip(names, cols):
            sig, seqs = by_group.setdefault(pg, ({}, {}))
            if not seqs:
                members = groups.get(pg, everyone) if pg else everyone
                seqs.update((x, array("q")) for x in members)
                sig.update((x, (b"", b"")) for x in members)
            seqs[r] = p
            sig[r] = (t.tobytes(), s.tobytes())
    return by_group, issue


def _columns(off: int, pos: list[int], ctypes: list[Any], csizes: list[Any], which: array, n_groups: int
             ) -> list[tuple[array, array, array]]:
    """Per group of a rank (``pos``: its comm nodes in issue order, ``ctypes`` / ``csizes`` theirs,
    ``which``: the group of each): its nodes' global indices, collective types (the lowest int64 for
    none) and sizes, as ``match_job``'s records read them."""
    types: array[int]
    sizes: array[int]
    try:
        types = array("q", ctypes)          # (all ints: C)
    except TypeError:
        types = array("q", [int(ct) if isinstance(ct, (int, float)) else -(2**63) for ct in ctypes])
    try:
        sizes = array("q", csizes)
    except TypeError:
        sizes = array("q", [int(s or 0) for s in csizes])
    at = array("q", map(off.__add__, pos))
    if n_groups == 1:
        return [(at, types, sizes)]
    out = []
    for w in range(n_groups):
        sel = list(map(w.__eq__, which))
        out.append((array("q", compress(at, sel)), array("q", compress(types, sel)),
                    array("q", compress(sizes, sel))))
    return out


def _resolve(raw: str, rank: int, groups: dict[str, tuple[int, ...]], job_set: set[int],
             everyone: tuple[int, ...]) -> str | None:
    """The group a recorded pg name is in ``match_job`` (the world is ""), or None when it would raise,
    note or leave something out there."""
    pg = "" if world_pg(raw) else raw
    if pg and pg not in groups:
        return None
    members = groups.get(pg, everyone) if pg else everyone
    if rank not in members or len(members) < 2 or any(x not in job_set for x in members):
        return None
    return pg


def _issue_order(names: list[str], issue: list[_Issue], first: list[int],
                 gix: array, ranks_of: list[list[int]]) -> list[int] | None:
    """The instances (``first[p] + k``) in ``_global_order``'s order: a collective is ready when it is the
    next one of every member rank; the lowest ready one goes first.  None: the ranks contradict."""
    total = len(gix)
    pos_of = {pg: p for p, pg in enumerate(names)}
    chains: dict[int, array] = {}       # rank -> its instances in issue order
    for r, which, rnames in issue:
        nxt = [first[pos_of[pg]] for pg in rnames]
        chain = array("l")
        for w in which:
            chain.append(nxt[w])
            nxt[w] += 1
        chains[r] = chain
    indeg = array("l", (0,)) * total
    for k in range(total):
        indeg[k] = len(ranks_of[gix[k]])
    head = dict.fromkeys(chains, 0)
    for chain in chains.values():
        if chain:
            indeg[chain[0]] -= 1
    heap = [k for k in range(total) if indeg[k] == 0]
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    order: list[int] = []
    while heap:
        k = pop(heap)
        order.append(k)
        for r in ranks_of[gix[k]]:
            chain = chains[r]
            h = head[r] + 1
            head[r] = h
            if h < len(chain):
                b = chain[h]
                indeg[b] -= 1
                if indeg[b] == 0:
                    push(heap, b)
    return order if len(order) == total else None
