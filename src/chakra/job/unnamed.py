"""The process group of gloo collectives whose records name none, told by the worker thread that ran them.

A gloo collective's records (``c10d::allreduce_`` and ``gloo:all_reduce``, host ET and Kineto) name no
process group: the group is an ``<Object>`` input, and gloo writes no ``record_param_comms``.  What the
records do carry is the thread: every ``ProcessGroupGloo`` starts its own worker threads
(``pt_gloo_runloop``, two by default) as it is created, and runs its collectives (all but send/recv) on
them.  So on one rank

* the collectives of one worker thread are of one process group;
* threads of a group created earlier have smaller thread ids (Linux hands them out in increasing order),
  and groups are created in the order of their names ("0" the default group, then "1", "2" ... as
  ``new_group`` is called, the same on every rank).

That leaves, per rank, a few maps of threads to groups (non-decreasing in thread id, at most
``GLOO_GROUP_THREADS`` threads a group); the one every group's members agree on is the answer: every
member of a group ran the same collectives on it (the same types and sizes, counted: gloo's two threads may
swap neighbours), and the k-th of them (by start) overlapping in time on every member (a collective ends
on no rank before all its ranks have entered it; the ranks' records are on one clock).  The maps are
pruned rank against rank until nothing changes; when each rank keeps exactly one map, the unnamed
collectives get their group (groups of the same ranks: the lowest-numbered).  Otherwise nothing is
changed, and the matcher's note on unnamed collectives says what that means (a job that ran a world
all_reduce at the same moments as two pair groups would have: nothing tells them apart).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from chakra.schema import COMM_COLL_NODE
from chakra.tunables import GLOO_GROUP_THREADS, GLOO_THREAD_MAPS


class Comm(Protocol):
    """What this module reads of the matcher's record of a node (chakra.job.match.Comm), and sets: ``pg``."""

    kind: int
    comm_type: int | None
    size: int
    pg: str
    start: float | None
    end: float | None
    name: str
    thread: int | None


class RankComms(Protocol):
    """What this module reads of a rank (chakra.job.match.RankComms)."""

    @property
    def rank(self) -> int: ...
    @property
    def comms(self) -> Sequence[Comm]: ...
    @property
    def groups(self) -> dict[str, tuple[int, ...]]: ...

#: groups as the maps see them: the sorted ranks (the world: all ranks of the job)
Members = tuple[int, ...]
#: one rank's map: thread id -> members of its group
ThreadMap = tuple[tuple[int, Members], ...]
#: a gloo collective as the maps see it: thread, comm_type, comm_size, start, end (µs, common clock)
Rec = tuple[int, int, int, float | None, float | None]

_GLOO = "gloo:"


@dataclass(frozen=True, slots=True)
class _Run:
    """What a rank ran on one group under one map: its collectives' (type, size) counted (gloo's two
    threads may swap neighbours) and their (start, end) in start order."""

    kinds: tuple[tuple[int, int], ...]
    times: tuple[tuple[float | None, float | None], ...]

    def agrees(self, other: _Run) -> bool:
        """Two ranks can have run this on one group: the same collectives, and the k-th of each overlapping
        in time (a collective ends on no rank before every rank of its group has entered it)."""
        if self.kinds != other.kinds:
            return False
        for (s1, e1), (s2, e2) in zip(self.times, other.times):
            if None in (s1, e1, s2, e2):
                continue
            if s1 > e2 or s2 > e1:   # type: ignore[operator]
                return False
        return True


_NOTHING = _Run((), ())


def _monotone_maps(threads: Sequence[int], groups: Sequence[Members], limit: int) -> list[ThreadMap] | None:
    """Every non-decreasing map of ``threads`` (ascending) onto ``groups`` (in creation order) that gives
    no group more than its worker threads, as a set of distinct member maps; None when more than
    ``limit`` maps would have to be tried."""
    out: set[ThreadMap] = set()
    tried = [0]

    def walk(k: int, lo: int, used: int, acc: list[tuple[int, Members]]) -> bool:
        # used: the threads already given to groups[lo]
        if k == len(threads):
            tried[0] += 1
            out.add(tuple(acc))
            return tried[0] <= limit
        for j in range(lo, len(groups)):
            have = used if j == lo else 0
            if have >= GLOO_GROUP_THREADS:
                continue
            acc.append((threads[k], groups[j]))
            ok = walk(k + 1, j, have + 1, acc)
            acc.pop()
            if not ok:
                return False
        return True

    return sorted(out) if walk(0, 0, 0, []) else None


def _runs(recs: Sequence[Rec], tmap: ThreadMap) -> dict[Members, _Run]:
    """Per group of the map, what the rank ran on it."""
    where = dict(tmap)
    per: dict[Members, list[Rec]] = {}
    for rec in recs:
        per.setdefault(where[rec[0]], []).append(rec)
    out = {}
    for m, rs in per.items():
        kinds = Counter((ct, size) for _, ct, size, _, _ in rs)
        order = sorted(rs, key=lambda x: (x[3] is None, x[3] or 0.0))
        out[m] = _Run(tuple(sorted(kinds.elements())), tuple((x[3], x[4]) for x in order))
    return out


class _Rank:
    """One rank's unknowns: its gloo collectives, its groups in creation order, the maps still possible."""

    def __init__(self, rank: int, recs: list[Rec], groups: list[Members]) -> None:
        self.rank = rank
        self.recs = recs
        self.groups = groups
        self.maps: list[ThreadMap] = []
        self.runs: list[dict[Members, _Run]] = []

    def run(self, k: int, m: Members) -> _Run:
        return self.runs[k].get(m, _NOTHING)


def _prune(ranks: dict[int, _Rank]) -> None:
    """Drop every map of a rank that some other member of one of its groups cannot agree with (no map of
    that member ran the same collectives on that group at overlapping times), until nothing changes."""
    changed = True
    while changed:
        changed = False
        for r in ranks.values():
            keep = [k for k in range(len(r.maps)) if _possible(ranks, r, k)]
            if len(keep) < len(r.maps):
                r.maps = [r.maps[k] for k in keep]
                r.runs = [r.runs[k] for k in keep]
                changed = True


def _possible(ranks: dict[int, _Rank], r: _Rank, k: int) -> bool:
    for m in set(r.groups):
        mine = r.run(k, m)
        for s in m:
            other = ranks.get(s)
            if s == r.rank:
                continue
            if other is None:       # a member with no gloo collective: it ran nothing on any group
                if mine.kinds:
                    return False
                continue
            if not any(other.run(j, m).agrees(mine) for j in range(len(other.maps))):
                return False
    return True


def _creation_order(table: dict[str, tuple[int, ...]], rank: int, everyone: Members) -> list[Members] | None:
    """The rank's groups (members; the world as ``everyone``) in the order they were created: by their
    numeric names, the default group "0" (or the world "") first; None when a name is not a number."""
    named: list[tuple[int, Members]] = [(-1, everyone)]
    for pg, members in table.items():
        if pg in ("", "0"):
            continue
        if not pg.isdigit():
            return None
        m = tuple(sorted(members)) if members else everyone
        if rank in m:
            named.append((int(pg), m))
    return [m for _, m in sorted(named)]


def _unknowns(rank_comms: Sequence[RankComms], everyone: Members) -> dict[int, _Rank] | None:
    """Per rank, its gloo collectives and maps; None when some rank's groups cannot be put in creation order
    or has too many maps to try."""
    out: dict[int, _Rank] = {}
    for rc in rank_comms:
        recs: list[Rec] = [(c.thread, c.comm_type or 0, c.size, c.start, c.end) for c in rc.comms
                           if _gloo(c) and c.thread is not None]
        if not recs:
            continue
        groups = _creation_order(rc.groups, rc.rank, everyone)
        if groups is None:
            return None
        r = _Rank(rc.rank, recs, groups)
        maps = _monotone_maps(sorted({rec[0] for rec in recs}), groups, GLOO_THREAD_MAPS)
        if maps is None:
            return None
        named = {c.thread: c.pg for c in rc.comms if _gloo(c) and c.pg and c.thread is not None}
        r.maps = [m for m in maps
                  if all(_fits(rc.groups, dict(m)[t], pg, everyone) for t, pg in named.items())]
        r.runs = [_runs(recs, m) for m in r.maps]
        out[rc.rank] = r
    return out


def _fits(table: dict[str, tuple[int, ...]], members: Members, pg: str, everyone: Members) -> bool:
    """A thread whose collectives name ``pg`` (e.g. an all_to_all placed by its split sizes) maps to it."""
    if pg in ("", "0"):
        return members == everyone
    have = table.get(pg)
    return have is not None and (tuple(sorted(have)) if have else everyone) == members


def _pg_of(groups: dict[str, tuple[int, ...]], everyone: Members) -> dict[Members, str]:
    """The name a member set is written with: "" for the world, else the lowest-numbered group of them."""
    out: dict[Members, str] = {everyone: ""}
    for pg in sorted(groups, key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p)):
        out.setdefault(tuple(sorted(groups[pg])) or everyone, pg)
    return out


def name_gloo_groups(rank_comms: Sequence[RankComms], groups: dict[str, tuple[int, ...]]
                     ) -> tuple[set[int], str]:
    """Set the process group of the gloo collectives that name none (``pg`` "") where the worker threads
    tell it (module doc).  Returns the ``id()`` of every collective told (those left in the world too) and
    a note ("" when nothing was told); changes nothing unless every rank's map is certain."""
    everyone = tuple(sorted(rc.rank for rc in rank_comms))
    if not any(2 <= len(m) < len(everyone) for m in groups.values()):
        return set(), ""
    if any(r not in everyone for m in groups.values() for r in m):
        return set(), ""             # ranks missing from the job: their runs are not known
    if not any(True for rc in rank_comms for _ in _unnamed(rc.comms)):
        return set(), ""
    ranks = _unknowns(rank_comms, everyone)
    if not ranks:
        return set(), ""
    _prune(ranks)
    if any(len(r.maps) != 1 for r in ranks.values()):
        return set(), ""
    pg_of = _pg_of(groups, everyone)
    told: set[int] = set()
    per_pg: Counter[str] = Counter()
    for rc in rank_comms:
        r = ranks.get(rc.rank)
        if r is None:
            continue
        where = dict(r.maps[0])
        for c in _unnamed(rc.comms):
            c.pg = pg_of[where[c.thread or 0]]
            told.add(id(c))
            per_pg[c.pg] += 1
    if not told:
        return told, ""
    listed = ", ".join(f"{n} on {('the world' if not pg else f'group {pg} ' + str(list(groups[pg])))}"
                       for pg, n in sorted(per_pg.items()))
    return told, (f"{len(told)} gloo collective(s) placed on their process group by the worker thread that "
                  f"ran them (gloo's records name none; each group has threads of its own): {listed}")


def _gloo(c: Comm) -> bool:
    """A gloo collective's record whose thread is known."""
    return c.kind == COMM_COLL_NODE and c.thread is not None and c.name.startswith(_GLOO)


def _unnamed(comms: Sequence[Comm]) -> Iterator[Comm]:
    """The gloo collective records that name no group."""
    return (c for c in comms if _gloo(c) and not c.pg)
