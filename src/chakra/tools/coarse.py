"""The coarse view of a graph: what ran together, one box per phase of a thread or stream.

A *lane* is where an op runs, as the replay has it (:mod:`chakra.replay.graph`): one CPU thread or one GPU
stream.  The ops are walked in an order of their dependencies and of each lane's (start, id) order that
takes the ready op of smallest (start, id) (the replay's lane order), and each lane's ops are cut into
*phases*, runs of its consecutive ops; a phase starts at

- the lane's first op;
- a communication op (collective, send, recv), which is a box of its own, and the op after it;
- a *sync point*: the op depends on an op of another lane that ended after the lane's earlier ops had
  ended, so the lane waited for it (a synchronize on a kernel, a stream waiting for an event of another
  stream, a thread waiting for another).  A GPU op's dependency on a CPU op is its launch, which does not
  make the stream wait for the thread: not a sync point;
- an *idle gap*: the op starts after the lane's earlier ops had ended.  Each lane has a share of the box
  budget (``boxes`` times its share of the ops, at least 1); what the cuts above leave of it goes to its
  longest gaps;
- an op that would otherwise close a cycle of boxes (a dependency of it lies in a box that already depends
  on the lane's current phase): the boxes stay a DAG, drawn in time order.

"The lane's earlier ops had ended": a CPU op's recorded duration is its exclusive time, so an op ends at
the latest end of itself and the ops under it (its ctrl parent on the same thread); an op recorded inside
another (``ProfilerStep#N`` around a whole step) is measured from the end of its previous sibling, or from
the enclosing op's start when it is the first.

Without start times (generated ETs, the 2023 converter's) there are neither waits nor gaps to see: each
lane's share is made of runs of equal length between its communication ops, and boxes may depend on each
other both ways.  Nodes that ran nowhere are left out: METADATA nodes (no lane) and the call tree's roots.

Edges between boxes are the dependencies between their ops on different lanes (ctrl, or data when there is
no ctrl one); those within a lane follow from its order (:attr:`Coarse.lane_edges`, consecutive boxes).
:func:`_rows` gives the rows the boxes are drawn in, time running down.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chakra.replay.graph import COMM_STREAM
from chakra.tools.stats import ROOT_PREFIX, GraphNode
from chakra.tunables import COARSE_NAME_MAX, COARSE_TOP_NAMES


@dataclass(slots=True)
class Box:
    """One phase of one lane (or one communication op)."""

    lane: Any
    why: str                     # what started it: first, comm, after comm, sync, idle, cycle
    members: list[int] = field(default_factory=list)    # node indices, in walk order
    gap: float = 0.0             # idle time before it (µs; the idle cuts)


@dataclass(slots=True)
class Coarse:
    """The boxes, which box each node is in, and the edges between boxes (box indices)."""

    boxes: list[Box]
    box_of: list[int]                      # node index -> box index
    ctrl_edges: list[tuple[int, int]]
    data_edges: list[tuple[int, int]]
    lane_edges: list[tuple[int, int]]      # consecutive boxes of one lane
    lanes: dict[Any, list[int]]            # lane -> its boxes in order (CPU threads first, then by first op)
    rows: list[list[int]] = field(default_factory=list)   # boxes drawn side by side, in order of start
    nodes: list[GraphNode] = field(default_factory=list)  # the nodes boxed (box members index these)
    left_out: int = 0                                      # nodes that ran nowhere (coarsen_graph)


def lane_name(lane: Any) -> str:
    """As the replay's timeline names it (a gloo worker thread's collectives are a device lane there too)."""
    if lane[0] == "cpu":
        return f"CPU thread {lane[1]}"
    stream = "communication" if lane[2] == COMM_STREAM else f"stream {lane[2]}"
    return f"GPU {lane[1]} {stream}"


def _is_cpu_lane(lane: Any) -> bool:
    return lane[0] == "cpu"


class _Walk:
    """The per-node facts the cuts are made from (indices into ``nodes``)."""

    def __init__(self, nodes: Sequence[GraphNode], ctrl: Sequence[tuple[int, int]],
                 data: Sequence[tuple[int, int]]) -> None:
        n = len(nodes)
        index = {node.id: i for i, node in enumerate(nodes)}
        self.lanes = [node.lane for node in nodes]
        self.deps: list[list[int]] = [[] for _ in range(n)]
        for a, b in dict.fromkeys([*ctrl, *data]):
            self.deps[index[b]].append(index[a])
        self.ctrl = {(index[a], index[b]) for a, b in ctrl}
        self.starts = [node.start for node in nodes]
        by_start = sorted(range(n), key=lambda i: (nodes[i].start, nodes[i].id))
        self.timed = any(self.starts)
        self.comm = [node.comm is not None for node in nodes]
        self.end = self._ends(nodes, index, by_start)
        self.order = self._order(by_start)

    def _order(self, by_start: list[int]) -> list[int]:
        """The walk: an order of the dependencies and of each lane's ops by (start, id) that takes the ready
        op of smallest (start, id) (a synchronize that began before the kernel it waits for comes after
        it).  Where a cycle stalls it, the first op left in (start, id) order goes next."""
        n = len(by_start)
        rank = [0] * n
        for k, i in enumerate(by_start):
            rank[i] = k
        succ: list[list[int]] = [[] for _ in range(n)]
        left = [0] * n
        last: dict[Any, int] = {}
        for i in by_start:
            preds = set(self.deps[i])
            p = last.get(self.lanes[i])
            if p is not None:
                preds.add(p)
            last[self.lanes[i]] = i
            preds.discard(i)
            left[i] = len(preds)
            for a in preds:
                succ[a].append(i)
        ready = [rank[i] for i in range(n) if not left[i]]
        heapq.heapify(ready)
        placed = bytearray(n)
        order: list[int] = []
        k = 0
        while len(order) < n:
            if ready:
                i = by_start[heapq.heappop(ready)]
                if placed[i]:
                    continue
            else:     # a cycle: the first op not placed yet goes next
                while placed[by_start[k]]:
                    k += 1
                i = by_start[k]
            placed[i] = 1
            order.append(i)
            for b in succ[i]:
                left[b] -= 1
                if not left[b] and not placed[b]:
                    heapq.heappush(ready, rank[b])
        return order

    def _ends(self, nodes: Sequence[GraphNode], index: dict[int, int], by_start: list[int]) -> list[float]:
        """start + duration; a CPU op's end is at least the end of the ops under it on its thread."""
        end = [node.start + node.dur for node in nodes]
        lanes = self.lanes
        for i in reversed(by_start):
            lane = lanes[i]
            if not _is_cpu_lane(lane):
                continue
            for d in nodes[i].ctrl_deps:
                p = index.get(d)
                if p is not None and lanes[p] == lane and nodes[p].start <= nodes[i].start:
                    if end[i] > end[p]:
                        end[p] = end[i]
                    break
        return end

    def cuts(self) -> tuple[dict[int, str], list[tuple[float, int]]]:
        """The cuts every view has (node -> why) and the idle gaps, (gap, node), that may be cuts."""
        lanes, deps, end, comm = self.lanes, self.deps, self.end, self.comm
        lane_state: dict[Any, _Lane] = {}
        walked = bytearray(len(lanes))
        must: dict[int, str] = {}
        gaps: list[tuple[float, int]] = []
        for i in self.order:
            lane = lanes[i]
            state = lane_state.get(lane)
            why = ""
            if state is None:
                why = "comm" if comm[i] else "first"
                state = lane_state[lane] = _Lane()
                before = self.starts[i]
            else:
                before = state.busy_until(self.starts[i])
                if comm[i]:
                    why = "comm"
                elif state.last_comm:
                    why = "after comm"
                elif self.timed and any(self.waits(lane, d, before) for d in deps[i] if walked[d]):
                    why = "sync"
            if why:
                must[i] = why
            elif self.starts[i] > before:
                gaps.append((self.starts[i] - before, i))
            walked[i] = 1
            state.last_comm = comm[i]
            state.open.append((end[i], self.starts[i]))
        return must, gaps

    def waits(self, lane: Any, d: int, before: float) -> bool:
        """Whether an op of ``lane`` waited for its dependency ``d``: ``d`` is on another lane, is not its
        launch (CPU op -> GPU op) and ended after the lane's earlier ops (``before``)."""
        other = self.lanes[d]
        if other == lane or (_is_cpu_lane(other) and not _is_cpu_lane(lane)):
            return False
        return self.end[d] > before


class _Lane:
    """A lane's ops that are still running (their end, start) and the latest end of those that ended."""

    __slots__ = ("open", "closed", "last_comm")

    def __init__(self) -> None:
        self.open: list[tuple[float, float]] = []
        self.closed = -math.inf
        self.last_comm = False

    def busy_until(self, start: float) -> float:
        """Until when the lane was busy before an op that starts at ``start``: the end of the ops that had
        ended, or the start of the innermost op still running around it (it runs inside that one)."""
        stack = self.open
        while stack and stack[-1][0] <= start:
            e = stack.pop()[0]
            if e > self.closed:
                self.closed = e
        if stack and stack[-1][1] > self.closed:
            return stack[-1][1]
        return self.closed


def coarsen_graph(nodes: Sequence[GraphNode], ctrl: Sequence[tuple[int, int]],
                  data: Sequence[tuple[int, int]], boxes: int) -> Coarse:
    """Cut the nodes into phases (module doc), about ``boxes`` of them unless the required cuts are more.

    Nodes that ran nowhere are left out (:attr:`Coarse.left_out`): those without a lane (METADATA) and the
    call tree's roots (``[pytorch|profiler|execution_trace|thread]``: no time, the parent of every top-level
    op of a thread, recorded under another thread id by host ETs)."""
    kept = [n for n in nodes if n.lane is not None and not n.name.startswith(ROOT_PREFIX)]
    if len(kept) < len(nodes):
        ids = {n.id for n in kept}
        ctrl = [(a, b) for a, b in ctrl if a in ids and b in ids]
        data = [(a, b) for a, b in data if a in ids and b in ids]
    walk = _Walk(kept, ctrl, data)
    must, gaps = walk.cuts()
    cut: dict[int, tuple[str, float]] = {i: (why, 0.0) for i, why in must.items()}
    lanes = walk.lanes
    cuts = Counter(lanes[i] for i in must)
    # each lane's share of the boxes (by its op count), less the cuts it has already
    room = {lane: max(1, round(boxes * count / len(lanes))) - cuts[lane]
            for lane, count in Counter(lanes).items()}
    if walk.timed:
        by_lane: dict[Any, list[tuple[float, int]]] = {}
        for gap, i in gaps:
            by_lane.setdefault(lanes[i], []).append((gap, i))
        for lane, lane_gaps in by_lane.items():
            if room[lane] > 0:
                for gap, i in heapq.nsmallest(room[lane], lane_gaps, key=lambda g: (-g[0], g[1])):
                    cut[i] = ("idle", gap)
    else:     # no gaps to see: runs of equal length
        seqs: dict[Any, list[int]] = {}
        for i in walk.order:
            seqs.setdefault(lanes[i], []).append(i)
        for lane, seq in seqs.items():
            for k in range(1, room[lane] + 1):
                cut.setdefault(seq[k * len(seq) // (room[lane] + 1)], ("run", 0.0))
    c = _rows(_assign(walk, cut))
    c.nodes, c.left_out = kept, len(nodes) - len(kept)
    return c


def _assign(walk: _Walk, cut: dict[int, tuple[str, float]]) -> Coarse:
    """Put each node in its lane's current box, or a new one at a cut or where joining would close a cycle.

    ``anc[b]`` is the set of boxes that box b depends on (bits), through edges and lane order."""
    lanes, deps = walk.lanes, walk.deps
    n = len(lanes)
    box_of = [-1] * n
    boxes: list[Box] = []
    anc: list[int] = []
    current: dict[Any, int] = {}
    lane_edges: list[tuple[int, int]] = []
    for i in walk.order:
        lane = lanes[i]
        b = current.get(lane, -1)
        dep_boxes = {box_of[d] for d in deps[i] if box_of[d] >= 0} - {b}
        why, gap = cut.get(i, ("", 0.0))
        if not why and b >= 0 and walk.timed and any(anc[x] >> b & 1 for x in dep_boxes):
            why = "cycle"
        if why or b < 0:
            prev = b
            b = len(boxes)
            boxes.append(Box(lane, why or "first", gap=gap))
            anc.append(0 if prev < 0 else anc[prev] | 1 << prev)
            if prev >= 0:
                lane_edges.append((prev, b))
            current[lane] = b
        boxes[b].members.append(i)
        box_of[i] = b
        new = 0
        for x in dep_boxes:
            new |= anc[x] | 1 << x
        new &= ~anc[b]
        if new:     # b and every box that depends on it now depend on these too
            bit = 1 << b
            for y in range(len(anc)):
                if y == b or anc[y] & bit:
                    anc[y] |= new
    return _edges(walk, boxes, box_of, lane_edges)


def _edges(walk: _Walk, boxes: list[Box], box_of: list[int], lane_edges: list[tuple[int, int]]) -> Coarse:
    lanes = walk.lanes
    ctrl: dict[tuple[int, int], None] = {}
    data: dict[tuple[int, int], None] = {}
    for i, ds in enumerate(walk.deps):
        for d in ds:
            a, b = box_of[d], box_of[i]
            if a == b or lanes[d] == lanes[i]:
                continue
            (ctrl if (d, i) in walk.ctrl else data)[(a, b)] = None
    data_edges = [e for e in data if e not in ctrl]
    order: dict[Any, list[int]] = {}
    for b, box in enumerate(boxes):
        order.setdefault(box.lane, []).append(b)
    lane_list = sorted(order, key=lambda lane: (not _is_cpu_lane(lane), order[lane][0]))
    by_lane = {lane: order[lane] for lane in lane_list}
    return Coarse(boxes, box_of, list(ctrl), data_edges, lane_edges, by_lane)


def box_label(box: Box, nodes: Sequence[GraphNode], origin: float | None) -> str:
    """Three or four short lines (a wide label makes a wide drawing, a tall one a tall drawing): what the
    box holds (a collective's type, size, group and kernel; a phase's op count, busy time and two heaviest
    op names), when it ran (ms after ``origin``; None: untimed) and, for a phase, what started it."""
    members = [nodes[i] for i in box.members]
    first = members[0]
    busy = sum(n.dur for n in members)
    when = ""
    if origin is not None:
        end = max(n.start + n.dur for n in members)
        when = f"{(first.start - origin) / 1000:,.3f}-{(end - origin) / 1000:,.3f} ms"
    if first.comm is not None and len(members) == 1:
        size = f" {_bytes(first.comm_size)}" if first.comm_size else ""
        pg = f" pg {first.pg_name}" if first.pg_name else ""
        return "\n".join([f"{first.comm}{size}{pg}", _short(first.name), f"{busy:,.0f} µs" + (
            f", {when}" if when else "")])
    heavy: dict[str, float] = {}   # name -> busy time (as Counter.most_common orders it: ties by first seen)
    for n in members:
        name = _short(n.name)
        heavy[name] = heavy.get(name, 0) + (n.dur or 1e-4)
    lines = [f"{len(members)} op{'s' if len(members) > 1 else ''}, {busy:,.0f} µs busy"]
    lines += sorted(heavy, key=heavy.__getitem__, reverse=True)[:COARSE_TOP_NAMES]
    why = {"idle": f"(idle {box.gap:,.0f} µs)", "sync": "(waited)", "cycle": "(waited)"}.get(box.why, "")
    last = " ".join(x for x in (when, why) if x)
    if last:
        lines.append(last)
    return "\n".join(lines)


def _short(name: str) -> str:
    return name if len(name) <= COARSE_NAME_MAX else name[:COARSE_NAME_MAX - 1] + "…"


def _bytes(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _rows(c: Coarse) -> Coarse:
    """Rows of boxes, drawn one below the other: time runs down and every edge points down.

    In order of their first op's start (box order), a box goes in the last row unless its lane or a box it
    depends on is there already (then it opens the next row); then a box that depends on a box of its row
    or a later one (a stream's phase fed by launches that began after it did) moves to the row after that
    box's, in an order of the box graph (a DAG: :func:`_assign`)."""
    n = len(c.boxes)
    preds: list[set[int]] = [set() for _ in range(n)]
    for a, b in [*c.ctrl_edges, *c.data_edges, *c.lane_edges]:
        preds[b].add(a)
    row = [0] * n
    lanes_in: set[Any] = set()      # the lanes and the boxes of the last row
    boxes_in: set[int] = set()
    k = 0
    for b in range(n):
        lane = c.boxes[b].lane
        if b and (lane in lanes_in or not boxes_in.isdisjoint(preds[b])):
            k += 1
            lanes_in, boxes_in = set(), set()
        row[b] = k
        lanes_in.add(lane)
        boxes_in.add(b)
    for b in _topological(preds):
        for a in preds[b]:
            if row[a] >= row[b]:
                row[b] = row[a] + 1
    rows: dict[int, list[int]] = {}
    for b in range(n):
        rows.setdefault(row[b], []).append(b)
    c.rows = [rows[r] for r in sorted(rows)]
    return c


def _topological(preds: list[set[int]]) -> list[int]:
    """The boxes in an order where each comes after those it depends on (Kahn's, smallest index first);
    boxes on a cycle (dependencies the walk met out of order) follow in index order."""
    n = len(preds)
    succ: list[list[int]] = [[] for _ in range(n)]
    left = [len(p) for p in preds]
    for b, ps in enumerate(preds):
        for a in ps:
            succ[a].append(b)
    ready = [b for b in range(n) if not left[b]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        a = heapq.heappop(ready)
        order.append(a)
        for b in succ[a]:
            left[b] -= 1
            if not left[b]:
                heapq.heappush(ready, b)
    if len(order) < n:
        placed = set(order)
        order += [b for b in range(n) if b not in placed]
    return order
