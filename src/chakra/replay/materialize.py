"""Write a replayed job as ASTRA-sim graphs that reproduce it: the time the simulator cannot see, as nodes.

ASTRA-sim runs a node when its dependencies are done and its resource is free -- per rank one CPU op, one
GPU compute op and one communication op -- for its
``duration_micros``, or, for a collective, the time its network gives.  It knows nothing of the idle time
and framework overhead between a thread's ops, of a thread waking after what it waited for, of a parent op's
work between its children, of a synchronize blocked on a kernel, or of the CPU time of a gloo collective on
its worker thread; and a rank's many threads and streams share its three resources.  Run as converted, a
job's step comes out 20-50% off in the simulator although every op is in the file.

This pass takes the lanes-mode replay of the job (whose every rule -- segments, gaps, waits, finish waits,
transfers -- reproduces the measured steps) and the plan it ran, and writes each rank so that the
simulator's own rules give the same times:

* **pieces as nodes**: the replay's delays become COMP nodes on the resource of the lane they delay (a
  CPU thread's gap before its next op; a thread's wake-up after the op it waited for; a lane's offset from
  the window start; the start-to-start bound of a finish wait; the end bound of a synchronize after the
  kernel it waited for, as an extra node its dependents also wait for; the lead of a gloo record whose
  transfer is coupled later on its thread).  On the communication resource they are BROADCAST nodes:
  the simulator times a BROADCAST by its ``duration_micros`` without waiting for the peers (what it does
  with MEM nodes depends on a remote-memory configuration, which a user's ``run.sh`` may not pass).  Every
  piece carries ``timing_piece`` (its kind) and ``timing_of`` (the node it belongs to); this toolkit's
  readers do not take a piece for communication;
* **a collective's own time**: the network gives each collective its model time; what the rank's transfer
  took beyond it (gloo reducing on the CPU, NCCL's kernel around the transfer) follows it as a piece
  on the communication resource.  A transfer shorter than the model keeps the model's time (counted);
* **the ranks' clocks**: a rank whose measured window began later than the first rank's starts after a
  node of that offset, so that collectives meet as they did (the simulator's time of a rank counts from
  the job's start; :attr:`Materialized.offset_us` is what to subtract);
* **one order per resource**: the nodes of each resource of a rank are chained in the order in which the
  replay ends them, each lasting from the later of its start and its predecessor's end to its own end.
  Where two threads (or a thread and its gaps) overlapped on one resource, their time is thereby told
  once, and each node still ends when it did in the replay.  Collectives of a group end in the same
  order on every rank (their transfers start together), so the chains agree across ranks.

Every node then ends in the simulator where it ended in the replay, up to the integer µs of
``duration_micros`` and the network model's error on the collectives
(``chakra replay --mode astrasim`` on the written files checks this rule set against the simulator).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chakra import formats as wire
from chakra import schema as pb
from chakra.job.network import Network, ring_finish, ring_steps
from chakra.replay.api import JobResult, ReplayResult
from chakra.replay.coupling import post_lead
from chakra.replay.graph import COMM_TYPES, RankGraph
from chakra.replay.whatif import group_size

log = logging.getLogger(__name__)

CPU, GPU, COMM = 0, 1, 2
EXPERIMENT_TIMING = "astrasim-timed-1"    # GlobalMetadata ``experiment_timing`` of the written files


@dataclass(slots=True)
class Materialized:
    """One rank as the simulator should read it."""

    rank: int
    metadata: Any
    nodes: list[Any]
    offset_us: float                           # where the rank starts on the job's clock
    short_transfers: int = 0                   # transfers shorter than the network model
    pieces: dict[str, int] = field(default_factory=dict)      # piece kind -> nodes added


@dataclass(slots=True)
class _Rank:
    """The rank being written: its graph, replay, the network, and the nodes made so far."""

    g: RankGraph
    rep: ReplayResult
    net: Network
    job_ranks: int
    next_id: int
    new: list[Any] = field(default_factory=list)
    resource: dict[int, int] = field(default_factory=dict)   # written node id -> its resource
    index: dict[int, int] = field(default_factory=dict)      # the file's node id -> its position
    pieces: dict[str, int] = field(default_factory=dict)

    def node_resource(self, i: int) -> int:
        g = self.g
        if g.is_cpu[i]:
            return CPU
        lane = g.lanes[i]
        if g.types[i] in COMM_TYPES:
            return COMM
        if lane is not None and lane[0] == "cpu":
            return CPU
        return GPU

    def piece(self, kind: str, dur_us: float, deps: Sequence[int], resource: int, of: int) -> int:
        """A node of ``dur_us`` on ``resource`` after ``deps``: a piece of time of node ``of``."""
        nid = self.next_id
        self.next_id += 1
        dur = max(0.0, dur_us)
        if resource == COMM:     # (module doc: a BROADCAST is a timed node of the communication resource)
            nd = pb.Node(id=nid, name=f"chakra:{kind}", type=pb.COMM_COLL_NODE)
            nd.attr.append(pb.AttributeProto(name=wire.ATTR_COMM_TYPE, int64_val=pb.BROADCAST))
            nd.attr.append(pb.AttributeProto(name=wire.ATTR_COMM_SIZE, int64_val=0))
            nd.attr.append(pb.AttributeProto(name=wire.ATTR_PG_NAME, string_val=""))
        else:
            nd = pb.Node(id=nid, name=f"chakra:{kind}", type=pb.COMP_NODE)
        nd.duration_micros = int(round(dur))
        nd.data_deps.extend(sorted(set(deps)))
        nd.attr.append(pb.AttributeProto(name=wire.ATTR_IS_CPU_OP, bool_val=resource == CPU))
        nd.attr.append(pb.AttributeProto(name=wire.ATTR_TIMING_PIECE, string_val=kind))
        nd.attr.append(pb.AttributeProto(name=wire.ATTR_TIMING_OF, uint64_val=of))
        self.new.append(nd)
        self.resource[nid] = resource
        self.pieces[kind] = self.pieces.get(kind, 0) + 1
        return nid


def materialize_job(job: JobResult, originals: dict[int, tuple[Any, list[Any]]], net: Network
                    ) -> list[Materialized]:
    """Every rank of ``job`` (a coupled lanes-mode replay with its plans kept) as nodes the simulator
    reproduces it with.  ``originals``: rank -> (GlobalMetadata, nodes) of the files that were replayed."""
    for rep in job:
        if rep.plan is None:
            raise ValueError("materialize_job needs the replay's plans (replay_job(..., keep_plan=True))")
    finish = _ring_finishes(job, net)
    out = []
    for rep in job:
        md, nodes = originals[rep.rank]   # type: ignore[index]
        out.append(_materialize_rank(rep, md, nodes, net, len(job.ranks), finish))
    return out


def _ring_finishes(job: JobResult, net: Network) -> dict[tuple[int, int], float]:
    """(rank, written comm node id) -> when the simulator ends that rank's part of the collective, on the
    job's clock: around the ring from the replay's arrivals (:func:`chakra.job.network.ring_finish`)."""
    out: dict[tuple[int, int], float] = {}
    index = {r: {nid: i for i, nid in enumerate(rep.graph.ids)} for r, rep in job.ranks.items()}
    comm_of = {r: {k: x for x, (k, _w) in rep.plan.transfer.items()} for r, rep in job.ranks.items()}
    n_ranks = len(job.ranks)
    for members in job.groups_members:
        arrivals, written = [], []
        model = steps = None
        for rank, nid in members:
            rep = job.ranks[rank]
            i = index[rank][nid]
            comm = comm_of[rank].get(i, i)
            g = rep.graph
            posted = post_lead(g, i) if comm == i else None
            arrivals.append(rep.starts[i] + rep.clock_offset - (posted[1] if posted is not None else 0.0))
            written.append((rank, g.ids[comm]))
            if model is None:
                ctype = g.extra.get(wire.ATTR_COMM_TYPE, {}).get(comm)
                n = group_size(g, comm, n_ranks)
                size = g.extra.get(wire.ATTR_COMM_SIZE, {}).get(comm, 0)
                model = net.time_us(ctype, g.types[comm], size, n)
                steps = ring_steps(ctype, g.types[comm], len(members)) if g.types[comm] == pb.COMM_COLL_NODE \
                    else 0
        if model is None:
            continue
        ends = ring_finish(arrivals, steps, model) if steps else [max(arrivals) + model] * len(arrivals)
        out.update(zip(written, ends))
    return out


def _materialize_rank(rep: ReplayResult, md: Any, nodes: list[Any], net: Network, job_ranks: int,
                      finish: dict[tuple[int, int], float]) -> Materialized:
    g, plan = rep.graph, rep.plan
    n = len(g.ids)
    ids = g.ids
    R = _Rank(g, rep, net, job_ranks, next_id=(max(ids) + 1 if ids else 1),
              index={nid: i for i, nid in enumerate(ids)})
    base = rep.clock_offset
    ends: list[list[int]] = [[nid] for nid in ids]      # the written nodes whose end is node i's end
    head: dict[int, int] = {}                            # node -> the written node that takes its start
    coupled = {R.index[nid]: w for nid, w in rep.comm_wait.items()}
    stand_in = {k: x for x, (k, _w) in plan.transfer.items() if k in coupled}
    comm_time, pin, after_k, posted, short = _transfers(R, finish, coupled, stand_in, ends, head)
    first_node = R.piece("rank_start", base, [], CPU, 0) if base >= 0.5 else None
    head_deps: list[list[int]] = [[] for _ in range(n)]
    comm_deps: dict[int, list[int]] = {}
    own_deps: dict[int, list[int]] = {}                 # a node's written deps, where not its head's
    for i in range(n):
        d = [e for j in plan.deps[i] for e in ends[j]]
        res = R.node_resource(i)
        p = plan.lane_prev[i]
        if p >= 0:
            rel = plan.release.get(p)
            src = [R.piece("runs_on", rel, head_deps[p], R.node_resource(p), ids[p])] if rel is not None \
                else ends[p]
            gap = plan.gap[i] - (plan.transfer[stand_in[i]][1] if i in stand_in else 0.0)
            if gap >= 0.5:
                src = [R.piece("gap", gap, src, res, ids[i])]
            d += src
        elif g.lanes[i] is not None:
            f = plan.first.get(i, 0.0)
            src = [first_node] if first_node is not None else []
            if f >= 0.5:
                src = [R.piece("lane_start", f, src, res, ids[i])]
            d += src
        for u, delay in plan.after.get(i, ()):
            d += [R.piece("wake", delay, ends[u], res, ids[i])] if delay >= 0.5 else ends[u]
        for u, tail, _off in plan.waits.get(i, ()):
            # (a coupled node's end is its transfer's, written as its own time: a finish wait of it would
            # hold its resource a second time)
            if tail is not None and i not in coupled:
                ends[i] = ends[i] + [R.piece("finish_wait", tail, ends[u], res, ids[i])]
        if i in stand_in:
            comm_deps[stand_in[i]] = d
            d = after_k[i]
        head_deps[i] = d
        if i in posted:                 # the send node starts with the op that posted it
            own_deps[i] = list(head_deps[posted[i]])
    for i, pairs in plan.waits.items():       # the start-to-start halves of the finish waits
        for u, _tail, off in pairs:
            if off >= 0.5:
                head_deps[i].append(R.piece("since", off, head_deps[u], R.node_resource(i), ids[i]))
            else:
                head_deps[i].extend(head_deps[u])
    written = _rewrite(R, nodes, {**dict(enumerate(head_deps)), **own_deps}, head, comm_deps, comm_time, plan)
    allnodes = sorted(written + R.new, key=lambda z: z.id)
    start, end, pos = _dependency_times(allnodes, pin)
    tail = base + rep.replayed_us - max(end.values(), default=0.0)
    if tail >= 0.5:                   # parents' tails after the last op (the replay's closes)
        last = max(end, key=end.__getitem__)
        nid = R.piece("tail", tail, [last], R.resource.get(last, CPU), last)
        allnodes.append(R.new[-1])
        start[nid] = end[last]
        end[nid] = end[last] + tail
        pos[nid] = len(pos)
    _chain_resources(allnodes, R.resource, start, end, pos)
    return Materialized(rank=rep.rank if rep.rank is not None else 0, metadata=_metadata(md), nodes=allnodes,
                        offset_us=base, short_transfers=short,
                        pieces=R.pieces)


def _transfers(R: _Rank, finish: dict[tuple[int, int], float], coupled: dict[int, float],
               stand_in: dict[int, int], ends: list[list[int]], head: dict[int, int]
               ) -> tuple[dict[int, float], dict[int, float], dict[int, list[int]], dict[int, int], int]:
    """The coupled nodes of a rank as the simulator should run them (module doc, "a collective's own
    time"): each comm node's written duration, when the simulator ends it, the pieces after a record's
    transfer, the sends posted before their record (-> the issuing op), and how many transfers were shorter
    than the network model.  ``ends`` and ``head`` are updated in place."""
    rep, g, plan, ids = R.rep, R.g, R.rep.plan, R.g.ids
    assert plan is not None
    base = rep.clock_offset
    comm_time: dict[int, float] = {}                     # comm node -> duration written (µs)
    pin: dict[int, float] = {}                           # written comm node -> when the simulator ends it
    after_k: dict[int, list[int]] = {}
    posted: dict[int, int] = {}                          # a send posted before its record -> the issuing op
    short = 0
    for i, w in coupled.items():
        transfer = rep.ends[i] - (rep.starts[i] + w)
        x = stand_in.get(i)
        comm = x if x is not None else i
        if x is not None:
            transfer -= plan.rd[i]          # the child after the transfer runs its own time after it
        model = _model_us(R, comm)
        cs = rep.starts[i] + w + base
        found = post_lead(g, i) if x is None else None
        if found is not None:           # its transfer starts where it was posted (the replay's rule)
            posted[i] = found[0]
            cs -= found[1]
            transfer += found[1]
        if g.extra.get(wire.ATTR_COMM_TYPE, {}).get(comm) == pb.BROADCAST or g.types[comm] not in COMM_TYPES:
            # timed by its duration in the simulator, which does not make it wait for its peers: it
            # lasts from its arrival to its end
            comm_time[comm] = rep.ends[i] - rep.starts[i] - (plan.rd[i] if x is not None else 0.0)
            continue
        comm_time[comm] = model
        f = finish.get((rep.rank, ids[comm]), cs + model)    # type: ignore[arg-type]
        pin[ids[comm]] = f
        left = cs + transfer - f          # the rank's transfer after the simulator's part of it
        if left < -0.5:
            short += 1
        own = R.piece("own_time", left, [ids[comm]], COMM, ids[comm]) if left >= 0.5 else ids[comm]
        if x is not None:
            lead = R.piece("record_lead", plan.rd[x], [], CPU, ids[x])   # (the record's own CPU time)
            head[x] = lead
            ends[x] = [lead]
            after_k[i] = [own]
        else:
            ends[i] = [own]
    return comm_time, pin, after_k, posted, short


def _model_us(R: _Rank, i: int) -> float:
    g = R.g
    size = g.extra.get(wire.ATTR_COMM_SIZE, {}).get(i, 0)
    n = group_size(g, i, R.job_ranks)
    return R.net.time_us(g.extra.get(wire.ATTR_COMM_TYPE, {}).get(i), g.types[i], size, n)


def _rewrite(R: _Rank, nodes: list[Any], head_deps: dict[int, list[int]], head: dict[int, int],
             comm_deps: dict[int, list[int]], comm_time: dict[int, float], plan: Any) -> list[Any]:
    """The file's own nodes with their new dependencies and durations."""
    g = R.g
    index = R.index
    by_id = {nd.id: nd for nd in R.new}
    out = []
    for o in nodes:
        i = index.get(o.id)
        if i is None:
            continue
        nd = pb.Node()
        nd.CopyFrom(o)
        del nd.ctrl_deps[:]
        del nd.data_deps[:]
        if i in comm_deps:           # a record coupled later on its thread: its lead took its place
            lead = head[i]
            by_id[lead].data_deps.extend(sorted(set(head_deps[i]) - {lead}))
            nd.data_deps.extend(sorted(set(comm_deps[i]) | {lead}))
        else:
            nd.data_deps.extend(sorted(set(head_deps[i]) - {o.id}))
        if g.types[i] in COMM_TYPES:
            nd.duration_micros = int(round(comm_time.get(i, g.durations[i])))
        else:
            nd.duration_micros = int(round(plan.ff_min.get(i, plan.rd[i])))
        out.append(nd)
        R.resource[nd.id] = R.node_resource(i)
    return out


def _dependency_times(nodes: list[Any], pin: dict[int, float]
                      ) -> tuple[dict[int, float], dict[int, float], dict[int, int]]:
    """Start and end of every written node with its dependencies alone (no resource): what the replay
    gave.  A coupled collective ends when the simulator ends it (``pin``: :func:`_ring_finishes`).  Also each
    node's position in the topological order that found them (ties between equal times break by it)."""
    succ: dict[int, list[int]] = {nd.id: [] for nd in nodes}
    indeg = dict.fromkeys(succ, 0)
    dur = {nd.id: float(nd.duration_micros) for nd in nodes}
    deps = {nd.id: list(nd.data_deps) for nd in nodes}
    for nid, ds in deps.items():
        for d in set(ds):
            indeg[nid] += 1
            succ[d].append(nid)
    ready = [nid for nid, k in indeg.items() if k == 0]
    heapq.heapify(ready)
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    pos: dict[int, int] = {}
    while ready:
        nid = heapq.heappop(ready)
        pos[nid] = len(pos)
        s = max((end[d] for d in deps[nid]), default=0.0)
        start[nid] = s
        p = pin.get(nid)
        end[nid] = max(s, p) if p is not None else s + dur[nid]
        for j in succ[nid]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(end) != len(nodes):
        stuck = sorted(set(succ) - set(end))[:5]
        raise ValueError(f"the written graph has a cycle (nodes {stuck} ...)")
    return start, end, pos


def _chain_resources(nodes: list[Any], resource: dict[int, int], start: dict[int, float],
                     end: dict[int, float], pos: dict[int, int]) -> None:
    """Each resource's nodes in the order the replay ends them, each after the previous one and lasting
    from the later of its start and that end to its own end (module doc, "one order per resource").
    Integer µs are taken of the end times, so that rounding does not add up along a chain."""
    lanes: dict[int, list[Any]] = {}
    for nd in nodes:
        lanes.setdefault(resource[nd.id], []).append(nd)
    for ndl in lanes.values():
        ndl.sort(key=lambda z: (end[z.id], start[z.id], pos[z.id]))
        prev_end = 0.0
        prev_id = None
        for nd in ndl:
            s = max(start[nd.id], prev_end)
            e = end[nd.id]
            timed = nd.type != pb.COMM_COLL_NODE and nd.type not in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)
            if timed or _is_broadcast(nd):
                nd.duration_micros = max(0, round(e) - round(s))
            if prev_id is not None and prev_id not in nd.data_deps:
                nd.data_deps.append(prev_id)
            nd.start_time_micros = int(round(s))
            prev_id = nd.id
            prev_end = max(prev_end, e)


def _is_broadcast(nd: Any) -> bool:
    return nd.type == pb.COMM_COLL_NODE and any(a.name == wire.ATTR_COMM_TYPE and a.int64_val == pb.BROADCAST
                                                 for a in nd.attr)


def _metadata(md: Any) -> Any:
    """The rank's GlobalMetadata without the thread timing (the pieces are nodes now), saying so; and
    without ``measured_start_us``: a written comm node starts when it arrives and lasts the network
    model's time, so start + duration is not where it ended, and the rank's offset on the job's clock is
    a node (``rank_start``).  With the recorded window start kept, readers that match by end times paired
    a pipeline's sends with the next micro-batch's receives, and a lanes replay offset a rank twice."""
    out = pb.GlobalMetadata()
    out.CopyFrom(md)
    keep = [a for a in out.attr if a.name not in (wire.META_THREAD_TIMING, wire.META_EXPERIMENT_TIMING,
                                                   wire.META_MEASURED_START_US)]
    del out.attr[:]
    out.attr.extend(keep)
    out.attr.append(pb.AttributeProto(name=wire.META_EXPERIMENT_TIMING, string_val=EXPERIMENT_TIMING))
    return out
