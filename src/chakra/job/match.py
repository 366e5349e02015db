"""Which communication nodes of different ranks are one collective (or one send/recv pair).

A simulator does not read ranks one by one: ASTRA-sim matches the collectives of a
process group across its ranks by the order in which each rank issues them, and
expects the same type and size from every rank.  Real traces break that in three
ways this module repairs or reports:

* **Windows cut at different collectives.**  Each rank starts and stops its
  profiler at its own moment, so one rank's trace may hold a collective that
  another's does not (at either edge of the window).  Collectives are matched by
  the sequence number the trace recorded (``comm_seq``, the process group's own
  counter) when every one of the group has it; otherwise by order: each rank's
  sequence is placed against the longest one at the offset where the collective
  types agree, preferring the offset whose collectives *end* together (a
  collective ends on all its ranks at about the same moment, whatever each rank
  waited before it; the ends are on the common clock when the files carry
  ``measured_start_us``), then the longest overlap, then the smallest shift.
  Only collectives every member rank holds are kept; the rest are "left out",
  each with its reason.
* **Uneven sizes** (an all_to_allv): one size per collective, the largest
  per-rank size, with a note naming the collective and the spread.
* **Ranks that order groups differently.**  Every rank must issue its
  collectives in one global order, or two ranks can each wait for the other
  (a simulator runs one collective per rank at a time).  The matched
  instances are put in a topological order of the per-rank issue orders; a
  contradiction is a :class:`JobMatchError` naming the ranks and collectives.

Send/recv pairs are matched per channel (source, destination, tag) the same way;
in a channel of CPU records (gloo's ``gloo:send``/``gloo:recv``) a send is placed by
its start, not its end: such a send's record does not end with its receive (an
isend's ends when the sender waits on it), so ends would shift a pipeline's
micro-batches against each other; it starts just after it was posted, and its
receive ends once the data is there.  (NCCL's send and receive kernels run, and
end, together.)
Everything here works on small records (:class:`Comm`), whoever produced the
graph: the replay builds them from its graphs, the ASTRA-sim pass and
``chakra validate`` from ``.et`` files.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from chakra.errors import ChakraError
from chakra.host.collective_names import is_cpu_record
from chakra.job.unnamed import name_gloo_groups
from chakra.schema import COLLECTIVE_NAMES, COMM_COLL_NODE, COMM_SEND_NODE
from chakra.tunables import MATCH_EXHAUSTIVE_PAIRS

WORLD = ""

#: what a collective on a process group no table lists is: an error, or one of the world's
UnknownGroup = Literal["error", "world"]


class JobMatchError(ChakraError):
    """The ranks of a job cannot be matched into one runnable whole."""


def world_pg(pg: str) -> bool:
    return pg in ("", "0")


@dataclass(slots=True)
class Comm:
    """One communication node of one rank, as the matcher sees it."""

    pos: int                  # the caller's index of the node (position in its list of nodes)
    node_id: int
    kind: int                 # COMM_COLL_NODE / COMM_SEND_NODE / COMM_RECV_NODE
    comm_type: int | None     # collectives: CollectiveCommType
    size: int                 # comm_size, bytes
    pg: str                   # "" = the world
    peer: int | None = None   # send: destination rank, recv: source rank
    tag: int = 0
    seq: int | None = None    # the process group's collective sequence number, when recorded
    end: float | None = None  # absolute end, µs on the job's common clock, when known
    start: float | None = None   # absolute start, likewise
    name: str = ""
    thread: int | None = None    # the thread a host-side record (gloo:*) ran on, when known

    def describe(self) -> str:
        if self.kind != COMM_COLL_NODE:
            what = "send" if self.kind == COMM_SEND_NODE else "recv"
        elif self.comm_type is None:
            what = "collective"
        else:
            what = COLLECTIVE_NAMES.get(self.comm_type, f"collective type {self.comm_type}")
        name = self.name if len(self.name) <= 40 else self.name[:37] + "..."
        return f"{what} of {self.size:,} B (node {self.node_id}{f' {name!r}' if name else ''})"


@dataclass(slots=True)
class RankComms:
    """A rank's communication nodes in the order it issues them."""

    rank: int
    comms: list[Comm]
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)   # pg -> ranks (() = the world)
    path: str | None = None


@dataclass(slots=True)
class Instance:
    """One collective (or one send/recv pair) of the job: a node on each participating rank."""

    label: str                   # "all_reduce #3 of process group 'world'"
    pg: str
    kind: int
    comm_type: int | None
    members: dict[int, Comm]     # rank -> its node
    size: int = 0                # the one size of the job: the largest per-rank size

    @property
    def sizes(self) -> dict[int, int]:
        return {r: c.size for r, c in self.members.items()}


@dataclass(slots=True)
class LeftOut:
    """A communication node that has no counterpart on some rank (or cannot run), and why."""

    rank: int
    comm: Comm
    reason: str


@dataclass(slots=True)
class JobMatch:
    instances: list[Instance]            # in one order every rank can issue them in
    left_out: list[LeftOut]
    notes: list[str]                     # what was decided (sizes unified, windows trimmed)

    def left_out_by_rank(self) -> dict[int, list[LeftOut]]:
        out: dict[int, list[LeftOut]] = {}
        for x in self.left_out:
            out.setdefault(x.rank, []).append(x)
        return out


def _pg_label(pg: str) -> str:
    return "'world'" if world_pg(pg) else repr(pg)


def job_groups(ranks: Sequence[RankComms]) -> dict[str, tuple[int, ...]]:
    """The process groups of the job (pg -> member ranks, the world as all ranks), merged over the ranks'
    tables; two ranks listing one group with different members is an error."""
    everyone = tuple(sorted(r.rank for r in ranks))
    out: dict[str, tuple[int, ...]] = {}
    seen_in: dict[str, int] = {}
    for rc in ranks:
        for pg, members in rc.groups.items():
            if world_pg(pg):
                continue
            m = tuple(sorted(members)) if members else everyone
            if pg in out and out[pg] != m:
                raise JobMatchError(f"process group {pg!r} lists ranks {list(out[pg])} on rank {seen_in[pg]} "
                                    f"but {list(m)} on rank {rc.rank}", rc.path)
            out.setdefault(pg, m)
            seen_in.setdefault(pg, rc.rank)
    return out


def _end(c: Comm) -> float | None:
    return c.end


def _posted(c: Comm) -> float | None:
    """When a gloo send's record starts (it was posted just before; its end is when it was waited on, which
    its receive does not share), a receive's end."""
    return c.start if c.kind == COMM_SEND_NODE else c.end


def _align(ref: list[Comm], seq: list[Comm], same: Callable[[Comm, Comm], bool],
           when: Callable[[Comm], float | None] = _end) -> int:
    """The offset ``d`` placing ``seq[i]`` against ``ref[i + d]``: the one of least cost, then the longest
    overlap, then the smallest shift.

    The cost adds, over the overlapping pairs: twice the share whose types differ, the share whose sizes
    differ, the mean gap between their end times in units of the usual spacing of the reference's
    collectives (the ends of one collective agree across ranks to well under that spacing; a shift by
    one collective is off by about one spacing on every pair), and twice the share of the shorter
    sequence the overlap leaves out.  No term alone decides: sizes repeat from step to step, gloo
    records' ends scatter by milliseconds, two async collectives can swap places on one rank, and a
    small overlap agrees more easily than a large one.
    """
    n, m = len(ref), len(seq)
    tr, ts = [when(c) for c in ref], [when(c) for c in seq]
    timed = None not in tr and None not in ts
    if n * m <= MATCH_EXHAUSTIVE_PAIRS:
        candidates: Iterable[int] = range(-(m - 1), n)
    elif timed:
        ends = tr
        cand: set[int] = set()
        for i in (0, m // 2, m - 1):
            k = _nearest(ends, ts[i])  # type: ignore[arg-type]
            cand.update(k - i + s for s in (-2, -1, 0, 1, 2))
        candidates = sorted(cand)
    else:
        candidates = (0,)
    spacing = 1.0
    if timed and n > 1:
        steps = sorted(abs(b - a) for a, b in zip(tr, tr[1:]))  # type: ignore[operator]
        spacing = max(steps[len(steps) // 2], 1.0)
    best: tuple | None = None
    best_d = 0
    shorter = min(n, m)
    for d in candidates:
        lo, hi = max(0, -d), min(m, n - d)
        if hi <= lo:
            continue
        overlap = hi - lo
        cost = 2.0 * sum(1 for i in range(lo, hi) if not same(ref[i + d], seq[i])) / overlap
        cost += sum(1 for i in range(lo, hi) if ref[i + d].size != seq[i].size) / overlap
        cost += 2.0 * (1.0 - overlap / shorter)
        if timed:
            gaps = sum(abs(tr[i + d] - ts[i]) for i in range(lo, hi))  # type: ignore[operator]
            cost += gaps / overlap / spacing
        score = (round(cost, 6), -overlap, abs(d))
        if best is None or score < best:
            best, best_d = score, d
    return best_d


def _nearest(values: list, x: float) -> int:
    import bisect

    k = bisect.bisect_left(values, x)
    if k >= len(values):
        return len(values) - 1
    if k > 0 and x - values[k - 1] < values[k] - x:
        return k - 1
    return k


def _same_collective(a: Comm, b: Comm) -> bool:
    return a.comm_type == b.comm_type


def _any(a: Comm, b: Comm) -> bool:
    return True


def _match_sequences(seqs: dict[int, list[Comm]], what: str, same: Callable[[Comm, Comm], bool],
                     notes: list[str], left: list[LeftOut], when: Callable[[Comm], float | None] = _end
                     ) -> list[dict[int, Comm]]:
    """Match one group's sequences (rank -> its comms in issue order); return the aligned tuples
    (``when``: the time of a node :func:`_align` weighs)."""
    ranks = sorted(seqs)
    if all(c.seq is not None for r in ranks for c in seqs[r]) and all(
            len({c.seq for c in seqs[r]}) == len(seqs[r]) for r in ranks):
        by_seq = {r: {c.seq: c for c in seqs[r]} for r in ranks}
        common = set.intersection(*(set(s) for s in by_seq.values()))
        for r in ranks:
            for c in seqs[r]:
                if c.seq not in common:
                    missing = [x for x in ranks if c.seq not in by_seq[x]]
                    left.append(LeftOut(r, c, f"{what}: sequence number {c.seq} is not in the trace of "
                                              f"rank(s) {missing}"))
        out = []
        for s in sorted(common):   # type: ignore[type-var]
            t = {r: by_seq[r][s] for r in ranks}
            if not all(same(t[ranks[0]], t[r]) for r in ranks):
                for r in ranks:
                    left.append(LeftOut(r, t[r], f"{what}: sequence number {s} is "
                                        + ", ".join(f"{t[x].describe()} on rank {x}" for x in ranks)))
                continue
            out.append(t)
        return out
    ref_rank = max(ranks, key=lambda r: (len(seqs[r]), -r))
    ref = seqs[ref_rank]
    if _in_step(seqs, ref_rank, when):
        return [dict(zip(ranks, t)) for t in zip(*(seqs[r] for r in ranks))]
    offsets = {r: 0 if r == ref_rank else _align(ref, seqs[r], same, when) for r in ranks}
    lo = max(max(0, offsets[r]) for r in ranks)
    hi = min(min(len(ref), offsets[r] + len(seqs[r])) for r in ranks)
    out = []
    trimmed: dict[int, int] = {}
    for r in ranks:
        for i, c in enumerate(seqs[r]):
            p = i + offsets[r]
            if not lo <= p < hi:
                trimmed[r] = trimmed.get(r, 0) + 1
                holders = [x for x in ranks if 0 <= p - offsets[x] < len(seqs[x])]
                lacking = [x for x in ranks if x not in holders]
                left.append(LeftOut(r, c, f"{what}: outside the window every rank's trace holds "
                                          f"(rank(s) {lacking} recorded no counterpart)"))
    for p in range(lo, hi):
        t = {r: seqs[r][p - offsets[r]] for r in ranks}
        first = t[ref_rank]
        if not all(same(first, t[r]) for r in ranks):
            for r in ranks:
                left.append(LeftOut(r, t[r], f"{what} #{p}: the ranks disagree: "
                                    + ", ".join(f"rank {x} {t[x].describe()}" for x in ranks)))
            continue
        out.append(t)
    if trimmed:
        notes.append(f"{what}: kept the {max(0, hi - lo)} matched in every rank's window; left out "
                     + ", ".join(f"{k} on rank {r}" for r, k in sorted(trimmed.items())))
    return out


def _in_step(seqs: dict[int, list[Comm]], ref_rank: int, when: Callable[[Comm], float | None] = _end) -> bool:
    """Whether every rank's sequence matches the reference's k-th to k-th with nothing left out: equal
    lengths, the same collective type and size at each place, and no pair of sequences both timed.  Then
    :func:`_align` chooses offset 0 for every rank (cost 0 at full overlap and no shift, the least score
    there is; or, above :data:`MATCH_EXHAUSTIVE_PAIRS` untimed, the only offset it tries) and every
    place agrees: the order path's answer, without its search.  (Timed sequences are left to the search:
    its end-time term can prefer a shift.)"""
    ref = seqs[ref_rank]
    n = len(ref)
    if any(len(x) != n for x in seqs.values()):
        return False
    ref_timed = all(when(c) is not None for c in ref)
    sig = [(c.comm_type, c.size) for c in ref]
    for r, x in seqs.items():
        if r == ref_rank:
            continue
        if ref_timed and all(when(c) is not None for c in x):
            return False
        if [(c.comm_type, c.size) for c in x] != sig:
            return False
    return True


def match_job(ranks: Sequence[RankComms], *, unknown_group: UnknownGroup = "error") -> JobMatch:
    """Match the communication nodes of all ranks of a job (see the module doc).

    ``unknown_group``: what a collective on a process group no rank lists means: ``"error"``, or
    ``"world"`` (the whole job).
    """
    groups = job_groups(ranks)
    job_set = {r.rank for r in ranks}
    everyone = tuple(sorted(job_set))
    told, told_note = name_gloo_groups(ranks, groups)
    notes: list[str] = [told_note] if told_note else []
    left: list[LeftOut] = []
    by_group: dict[str, dict[int, list[Comm]]] = {}
    channels: dict[tuple[int, int, int], dict[int, list[Comm]]] = {}
    for rc in ranks:
        # what a rank's collectives of one recorded pg go to: worked out once per (group, rank), not per
        # node (each is O(group size))
        bucket_of: dict[str, list[Comm] | str] = {}
        for c in rc.comms:
            if c.kind == COMM_COLL_NODE:
                bucket = bucket_of.get(c.pg)
                if bucket is None:
                    bucket = bucket_of[c.pg] = _bucket(rc, c, groups, job_set, everyone, by_group,
                                                       unknown_group)
                if isinstance(bucket, str):
                    left.append(LeftOut(rc.rank, c, bucket))
                else:
                    bucket.append(c)
            else:
                if c.peer is None:
                    side = ("send", "dst") if c.kind == COMM_SEND_NODE else ("recv", "src")
                    raise JobMatchError(f"{side[0]} node {c.node_id} on rank {rc.rank} names no peer "
                                        f"(comm_{side[1]})", rc.path)
                if c.peer not in job_set:
                    left.append(LeftOut(rc.rank, c, f"its peer rank {c.peer} is not in the job"))
                    continue
                src, dst = (rc.rank, c.peer) if c.kind == COMM_SEND_NODE else (c.peer, rc.rank)
                ch = channels.setdefault((src, dst, c.tag), {src: [], dst: []})
                ch[rc.rank].append(c)
    tuples: list[tuple[str, str, int, dict[int, Comm]]] = []
    for pg, seqs in sorted(by_group.items()):
        what = f"process group {_pg_label(pg)}"
        for k, t in enumerate(_match_sequences(seqs, what, _same_collective, notes, left)):
            tuples.append((pg, f"collective #{k} of {what}", COMM_COLL_NODE, t))
    for (src, dst, tag), seqs in sorted(channels.items()):
        what = f"send/recv {src}->{dst} tag {tag}"
        if src == dst:
            for c in seqs[src]:
                left.append(LeftOut(src, c, f"{what}: a rank sending to itself"))
            continue
        gloo = any(is_cpu_record(c.name) for seq in seqs.values() for c in seq)
        for k, t in enumerate(_match_sequences(seqs, what, _any, notes, left, _posted if gloo else _end)):
            tuples.append(("", f"{what} #{k}", COMM_SEND_NODE, t))
    instances = []
    for pg, label, kind, t in tuples:
        first = next(iter(t.values()))
        inst = Instance(label=label, pg=pg, kind=kind, members=t,
                        comm_type=first.comm_type if kind == COMM_COLL_NODE else None)
        each = [c.size for c in t.values()]
        inst.size = max(each)
        if min(each) != inst.size:
            sizes = inst.sizes
            spread: dict[int, list[int]] = {}
            for r, s in sorted(sizes.items()):
                spread.setdefault(s, []).append(r)
            ct = inst.comm_type
            what = 'send/recv' if ct is None else COLLECTIVE_NAMES.get(ct, 'send/recv')
            notes.append(f"{label} ({what}): comm_size differs "
                         "across ranks: " + ", ".join(f"{s:,} B on rank(s) {rs}" for s, rs in
                                                      sorted(spread.items(), key=lambda x: -len(x[1])))
                         + f"; using the largest, {inst.size:,} B")
        instances.append(inst)
    unnamed = _unnamed_group_note(ranks, groups, job_set, told)
    if unnamed:
        notes.append(unnamed)
    return JobMatch(_global_order(ranks, instances), left, notes)


#: the start of the note of :func:`_unnamed_group_note` (the replay logs it as a warning)
UNNAMED_GROUP = "collective node(s) name no process group"


def _unnamed_group_note(ranks: Sequence[RankComms], groups: dict[str, tuple[int, ...]], job_set: set[int],
                        told: set[int]) -> str:
    """A note when collectives without a process group (pg "": gloo's records name none) are matched as
    the world's although the job has a group of some of its ranks: had one run on that group, its
    coupling and times are wrong (a real gloo pipeline of 2 stages x 2 replicas, each stage's gradients
    all-reduced on its replicas' group: coupled as the world, the first stage's ranks replayed +15%).
    ``told``: the ``id()`` of the collectives whose group their gloo worker thread told (job.unnamed)."""
    partial = sorted({m for m in groups.values() if 2 <= len(m) < len(job_set)})
    if not partial:
        return ""
    per_rank = {rc.rank: sum(1 for c in rc.comms if c.kind == COMM_COLL_NODE and c.pg == WORLD
                             and id(c) not in told)
                for rc in ranks}
    total = sum(per_rank.values())
    if not total:
        return ""
    where = sorted(r for r, k in per_rank.items() if k)
    shown = ", ".join(str(list(m)) for m in partial[:4]) + (", ..." if len(partial) > 4 else "")
    return (f"{total} {UNNAMED_GROUP} (ranks {where}) and are matched as the world's, though the job has "
            f"groups of some of its ranks ({shown}): where one ran on such a group, its coupling and the "
            "ranks' times are wrong (gloo records do not say which group they used)")


def _bucket(rc: RankComms, c: Comm, groups: dict[str, tuple[int, ...]], job_set: set[int],
            everyone: tuple[int, ...], by_group: dict[str, dict[int, list[Comm]]], unknown_group: UnknownGroup
            ) -> list[Comm] | str:
    """Where rank ``rc``'s collectives on ``c.pg`` go: its sequence in the group's ``by_group`` entry, or,
    when they cannot be matched, why (each is then left out).  A pg that is not the rank's own is an
    error (named after ``c``, the first such node)."""
    pg = WORLD if world_pg(c.pg) else c.pg
    if pg and pg not in groups:
        if unknown_group != "world":
            raise JobMatchError(
                f"collective node {c.node_id} on rank {rc.rank} uses process group {c.pg!r}, "
                "which no rank's process-group table lists (known: "
                f"{sorted(groups) or 'none'}); give the groups (a comm-group JSON) or treat "
                "unknown groups as the world", rc.path)
        pg = WORLD
    members = groups.get(pg, everyone) if pg else everyone
    if rc.rank not in members:
        raise JobMatchError(f"collective node {c.node_id} on rank {rc.rank} uses process group "
                            f"{c.pg!r} whose ranks {list(members)} do not include {rc.rank}", rc.path)
    absent = [x for x in members if x not in job_set]
    if absent:
        return f"process group {c.pg!r}: rank(s) {absent} are not in the job"
    if len(members) < 2:
        return f"process group {c.pg!r} has one rank: nothing to match"
    seqs = by_group.get(pg)
    if seqs is None:
        seqs = by_group[pg] = {x: [] for x in members}
    return seqs[rc.rank]


def _global_order(ranks: Sequence[RankComms], instances: list[Instance]) -> list[Instance]:
    """The instances in an order consistent with every rank's issue order (Kahn; earliest end first).

    A rank waits in a collective or a receive until its peers arrive; an order two ranks contradict is a
    wait that never ends.  A send is eager (posted, not waited for), so it orders nothing after it."""
    where: dict[int, int] = {}   # id of a member's Comm -> its instance (the Comms live through the call)
    for k, inst in enumerate(instances):
        for c in inst.members.values():
            where[id(c)] = k
    succ: list[list[int]] = [[] for _ in instances]
    indeg = [0] * len(instances)
    seqs: dict[int, list[int]] = {}
    for rc in ranks:
        chain = [(where[id(c)], c.kind) for c in rc.comms if id(c) in where]
        seqs[rc.rank] = [k for k, _ in chain]
        for (a, kind), (b, _) in zip(chain, chain[1:]):
            if kind != COMM_SEND_NODE:   # a send does not wait for its receiver: what follows need not either
                succ[a].append(b)
                indeg[b] += 1

    def prio(k: int) -> tuple[float, int]:
        ends = [c.end for c in instances[k].members.values() if c.end is not None]
        return (min(ends) if ends else math.inf, k)

    heap = [(prio(k), k) for k in range(len(instances)) if indeg[k] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, k = heapq.heappop(heap)
        order.append(k)
        for b in succ[k]:
            indeg[b] -= 1
            if indeg[b] == 0:
                heapq.heappush(heap, (prio(b), b))
    if len(order) < len(instances):
        stuck = [k for k in range(len(instances)) if indeg[k] > 0]
        first_stuck = instances[stuck[0]]
        detail = "; ".join(
            f"rank {r} issues " + ", ".join(instances[k].label for k in seqs[r] if k in set(stuck[:6]))
            for r in sorted(first_stuck.members))
        raise JobMatchError("the ranks issue collectives of different process groups in contradicting "
                            f"orders (a simulator would wait forever): {detail}")
    return [instances[k] for k in order]
