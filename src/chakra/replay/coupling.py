"""Whole-job coupling: which nodes of different ranks start and end together (collectives, send/recv).

The matching itself is :func:`chakra.job.match.match_job` (by recorded sequence number, else by order with
trimming at the window edges); this module turns its groups into what the engine's event loop needs, and
explains a job that deadlocks.  The rules are in :mod:`chakra.replay.engine` ("Whole-job coupling").
"""

from __future__ import annotations

import logging
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Container, MutableSequence, Sequence
from itertools import compress
from typing import Any

from chakra.job.match import UNNAMED_GROUP, Comm, JobMatchError, RankComms, UnknownGroup, match_job
from chakra.replay.graph import RankGraph, ReplayError
from chakra.replay.instep import couple_in_step
from chakra.schema import COMM_RECV_NODE, COMM_SEND_NODE

log = logging.getLogger(__name__)


class Coupling:
    """Groups of nodes (one per participating rank) that start and end together, and, while a replay runs,
    who has arrived.  The rules of a group (the engine's "Whole-job coupling") are stated here once, for both
    schedulers: :meth:`arrive` and :meth:`ends`."""

    __slots__ = ("members", "dur", "label", "eager", "member_dur", "after", "arrived", "latest",
                 "waiting", "comm_start", "lead")

    def __init__(self) -> None:
        self.members: list[list[int]] = []
        self.dur: list[float] = []
        self.member_dur: list[list[float]] | None = None   # collective="net": one duration per member
        self.label: list[str] = []
        self.eager: list[int] = []   # the member that does not wait (a send), or -1
        self.after: dict[int, float] = {}   # a coupled child -> its own time after the transfer
        self.arrived: list[int] = []        # per group: members arrived so far
        self.latest: list[float] = []       # per group: the latest arrival so far
        self.waiting: dict[int, list[int]] = {}   # a group some but not all members reached -> those
        self.comm_start: dict[int, float] = {}   # coupled node -> start of its transfer
        self.lead: dict[int, float] = {}   # group -> how long before its send's record the send was posted

    def start_run(self) -> None:
        """Nobody has arrived yet."""
        self.arrived = [0] * len(self.members)
        self.latest = [0.0] * len(self.members)
        self.waiting = {}

    def arrive(self, gi: int, t: float, group: int) -> bool:
        """Node ``gi`` reaches its group at ``t``; True when it is the last to (the transfer starts at
        the latest arrival).  A send does not wait for its receiver: its transfer starts when it arrives,
        or, posted ``lead`` before its record (:func:`post_leads`), counts for the group that much earlier."""
        n = self.arrived[group] + 1
        self.arrived[group] = n
        if gi == self.eager[group]:
            self.comm_start[gi] = t
            t -= self.lead.get(group, 0.0)
        if t > self.latest[group]:
            self.latest[group] = t
        if n == len(self.members[group]):
            self.waiting.pop(group, None)
            return True
        w = self.waiting.get(group)
        if w is None:
            self.waiting[group] = [gi]
        else:
            w.append(gi)
        return False

    def ends(self, group: int) -> list[tuple[int, float]]:
        """Each waiting member of a group every member reached and when its transfer ends (its own time
        after the transfer included): the group's duration, or with ``collective="net"`` its own."""
        cs = self.latest[group]
        e = cs + self.dur[group]
        per_member = self.member_dur[group] if self.member_dur is not None else None
        after, eager, comm_start = self.after, self.eager[group], self.comm_start
        out = []
        for k, m in enumerate(self.members[group]):
            if m != eager:
                comm_start[m] = cs
                em = e if per_member is None else cs + per_member[k]
                out.append((m, em + after[m] if after and m in after else em))
        return out


def build_coupling(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: Sequence[int],
                    orders: Sequence[Sequence[int]], durations: Sequence[float],
                    unknown_group: UnknownGroup = "error") -> tuple[Coupling, MutableSequence[int]]:
    """Match collectives and send/recv pairs across ranks (:func:`chakra.job.match.match_job`: by recorded
    sequence number, else by order with trimming at the window edges); return groups and node -> group.

    A communication node with no counterpart in another rank's trace (its window started later or ended
    earlier) runs alone for its recorded duration, with a warning saying what was left out.

    A job whose every communication node is an untimed collective without a recorded sequence number, each
    group's ranks issuing the same types and sizes k-th for k-th (a generated job), is coupled on its
    columns (:func:`chakra.replay.instep.couple_in_step`), with no record per node: the same groups in the
    same order."""
    fast = couple_in_step(graphs, ranks, offsets, orders, durations)
    if fast is not None:
        c = Coupling()
        c.members, c.dur, c.label = fast.members, fast.dur, fast.label
        c.eager = [-1] * len(c.members)
        return c, fast.group_of
    total = offsets[-1]
    couple = array("l", (-1,)) * total      # (8 bytes a node; a list with an int per coupled node: ~25)
    job: list[RankComms] = []
    for r, g, off, order in zip(ranks, graphs, offsets, orders):
        comms = []
        base = g.measured_start_us
        comm, ctypes, csizes = g.comm_lookups()
        infos = list(map(comm.get, order))
        for i, info in zip(compress(order, infos), filter(None, infos)):   # the comm nodes, in lane order
            ntype = g.types[i]
            if ntype == COMM_SEND_NODE and info.dst is None:
                raise ReplayError(f"send node {g.ids[i]} has no comm_dst", g.path)
            if ntype == COMM_RECV_NODE and info.src is None:
                raise ReplayError(f"recv node {g.ids[i]} has no comm_src", g.path)
            start = None if base is None or not g.starts[i] else base + g.starts[i]
            end = None if start is None else start + g.durations[i]
            ctype = ctypes.get(i)
            comms.append(Comm(pos=off + i, node_id=g.ids[i], kind=ntype,
                              comm_type=int(ctype) if isinstance(ctype, (int, float)) else None,
                              size=int(csizes.get(i) or 0), pg=info.pg_name,
                              peer=info.dst if ntype == COMM_SEND_NODE else info.src, tag=info.tag,
                              seq=info.seq, end=end, start=start, name=g.names[i],
                              thread=lane_thread(g.lanes[i])))
        job.append(RankComms(r, comms, dict(g.process_groups), g.path))
    try:
        match = match_job(job, unknown_group=unknown_group)
    except JobMatchError as exc:
        raise ReplayError(exc.message, exc.path) from None
    for note in match.notes:
        if "outside the window" in note or "kept the" in note or UNNAMED_GROUP in note:
            log.warning("%s", note)
    left = match.left_out_by_rank()
    for r, xs in sorted(left.items()):
        first = xs[0]
        log.warning("rank %d: %d communication node(s) replayed alone (no counterpart on a peer), "
                    "e.g. %s: %s", r, len(xs), first.comm.describe(), first.reason)
    c = Coupling()
    for inst in match.instances:
        members = [m.pos for _, m in sorted(inst.members.items())]
        c.members.append(members)
        c.dur.append(min(durations[m] for m in members))
        c.label.append(inst.label)
        send = next((m.pos for m in inst.members.values() if m.kind == COMM_SEND_NODE), -1)
        c.eager.append(send)
    for gid, members in enumerate(c.members):
        for m in members:
            couple[m] = gid
    return c, couple


def lane_thread(lane: Any) -> int | None:
    """The thread id of a node's lane (``("cpu", tid)``, or ``("gpu", 0, tid)`` for a record whose thread
    runs no CPU op: a gloo worker thread; see chakra.replay.graph), None when it has none."""
    last = lane[-1] if isinstance(lane, tuple) and lane else None
    return last if type(last) is int else None


def post_lead(g: RankGraph, i: int) -> tuple[int, float] | None:
    """Where send ``i``'s record starts after the op that issued it started, the send was posted then:
    (that op's index, the distance), else None.

    gloo posts a send's buffer in ``c10d::send`` (``send`` and ``isend`` alike) and only then starts the
    ``gloo:send`` record (its work object), so the receiver can have the data before the record begins:
    in a real 3-stage pipeline (tests/data/gloo_pipeline_3r) receives ended up to 3 ms before their send's
    record started, the issuing op having been descheduled once its receiver woke up.  The issuing op is a
    CPU op the send depends on, on the send's lane, whose span holds the send's start."""
    if g.types[i] != COMM_SEND_NODE:
        return None
    s, lane, ids = g.starts[i], g.lanes[i], g.ids
    for d in g.deps[i]:
        p = bisect_left(ids, d)
        if p < len(ids) and ids[p] == d and g.is_cpu[p] and g.lanes[p] == lane and \
                g.starts[p] <= s <= g.starts[p] + g.durations[p]:
            return (p, s - g.starts[p]) if s > g.starts[p] else None
    return None


def post_leads(c: Coupling, graphs: Sequence[RankGraph], offsets: Sequence[int], skip: Container[int] = ()
               ) -> None:
    """``c.lead``: each send's :func:`post_lead` (lanes mode), but for ``skip`` (records whose transfer
    piece is coupled instead)."""
    for grp, gi in enumerate(c.eager):
        if gi < 0 or gi in skip:
            continue
        r = rank_of(offsets, gi)
        found = post_lead(graphs[r], gi - offsets[r])
        if found is not None:
            c.lead[grp] = found[1]


def couple_transfers(c: Coupling, group_of: MutableSequence[int], transfers: dict[int, tuple[int, float]],
                      gap: list[float], rdur: Sequence[float]) -> None:
    """A coupled record with children on its thread couples its transfer piece, not its lead.

    The child ``k`` that follows the transfer stands in for the record in its group: it arrives when
    its thread reaches the transfer (its gap without the transfer piece), and, once every peer has
    arrived, runs the group's transfer time and then its own duration.  The record itself runs its
    lead like any other node.
    """
    for x, (k, w) in transfers.items():
        grp = group_of[x]
        if grp < 0:
            continue
        members = c.members[grp]
        members[members.index(x)] = k
        if c.eager[grp] == x:
            c.eager[grp] = k
        group_of[k] = grp
        group_of[x] = -1
        gap[k] = max(0.0, gap[k] - w)
        c.after[k] = rdur[k]


def net_durations(c: Coupling, graphs: Sequence[RankGraph], offsets: Sequence[int],
                   durations: Sequence[float], base: Sequence[float]) -> None:
    """``collective="net"``: each participant lasts its own recorded duration minus its recorded wait.

    On the common clock the recorded arrivals are ``start_time_micros + base``; a
    participant that arrived ``w`` µs before the last one waited ``w`` µs inside its
    recording, so its transfer took ``duration - w`` (at least 0).  Ranks of a ring
    collective do not finish together; this keeps each one's recorded finish.
    """
    c.member_dur = []
    for grp, members in enumerate(c.members):
        arr = []
        for m in members:
            ri = rank_of(offsets, m)
            arr.append(graphs[ri].starts[m - offsets[ri]] + base[ri]
                       - (c.lead.get(grp, 0.0) if m == c.eager[grp] else 0.0))
        last = max(arr)
        c.member_dur.append([max(0.0, durations[m] - (last - a)) for m, a in zip(members, arr)])


def rank_of(offsets: Sequence[int], gi: int) -> int:
    """The rank (position in ``offsets``) whose nodes hold global index ``gi`` (an empty rank holds none)."""
    return bisect_right(offsets, gi) - 1


def stall_message(graphs: Sequence[RankGraph], ranks: Sequence[int], offsets: Sequence[int],
                   coupling: Coupling, n_stuck: int) -> str:
    """Explain a whole-job deadlock: which coupled groups are waiting for whom."""
    arrived = coupling.arrived
    parts = [f"replay stalled: {n_stuck} node(s) can never start (the ranks wait for each other)"]
    shown = 0
    for grp, members in enumerate(coupling.members):
        if arrived[grp] == 0 or arrived[grp] == len(members) or shown >= 3:
            continue
        shown += 1
        waiting: list[str] = []
        missing: list[str] = []
        arrived_nodes = set(coupling.waiting.get(grp, ()))
        for m in members:
            ri = rank_of(offsets, m)
            desc = f"rank {ranks[ri]} node {graphs[ri].ids[m - offsets[ri]]}"
            (waiting if m in arrived_nodes else missing).append(desc)
        parts.append(f"{coupling.label[grp]}: waiting: {', '.join(waiting)}; "
                     f"never reached by: {', '.join(missing)}")
    if shown == 0:
        parts.append("no collective is partially reached; check the ranks' collective orders")
    return "; ".join(parts)

