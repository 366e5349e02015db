"""What the replay needs of a Chakra ET, in columns: :class:`RankGraph`, and what builds one by hand.

A graph holds one rank's nodes as a few parallel lists (one entry per node, sorted by node id so that
position order *is* id order and ties between events break by id for free).  The replay never touches
protobuf: :mod:`chakra.replay.reader` reads a file into these lists; a million nodes cost a few hundred MB
instead of a few GB of message objects.

Lanes (the resource a node runs on):
- CPU ops (``is_cpu_op`` true): one lane per thread, ``("cpu", tid)``;
- a non-CPU node with neither ``stream`` nor ``device`` whose ``tid`` is one of the CPU ops' threads:
  that thread (a host-side comm record, gloo, kept in its thread's call order);
- everything else: one lane per GPU stream, ``("gpu", device, stream)``; files written before the
  ``stream`` attribute existed carry the stream in ``tid``;
- a non-CPU node with no ``tid``, ``stream`` or ``device`` at all (ASTRA-sim text workloads, generated
  ETs) is a device op, never a host thread's record (even where CPU ops have no ``tid`` either, as the
  text workloads' weight-update delays): compute on ``("gpu", 0, 0)``, communication on ``("gpu", 0,
  COMM_STREAM)``, the simulator's two resources (a layer's compute runs while the previous layer's
  gradients are reduced);
- METADATA nodes take no lane and no time.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice
from typing import Any, overload

from chakra import formats as wire
from chakra.errors import ChakraError, TraceFormatError
from chakra.job.etfile import int_or_none, job_of_metadata, metadata_info, parse_process_groups
from chakra.schema import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, METADATA_NODE

COMM_TYPES = frozenset((COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE))
COMM_STREAM = -1     # the lane of communication nodes that say nothing of where they ran (module doc)
WORLD_PG_NAMES = frozenset(("", "0"))

# per-node numbers the replay reads when present (RankGraph.extra): the thread timing written by the
# converter (chakra.convert.threads), the size and kind of a collective (the communication model) and the
# size of its process group where the producer recorded it (how many ranks a whole job has)
EXTRA_ATTRS = frozenset((*wire.THREAD_TIMING_ATTRS, wire.ATTR_COMM_TYPE, wire.ATTR_COMM_SIZE,
                         wire.ATTR_PG_SIZE))
# the EXTRA_ATTRS of communication nodes: a read graph holds them as a :class:`SparseColumn` (one value
# per comm node of a generated rank: a dict entry each was ~75 B of a node's ~380); the thread timing
# stays in dicts (read per node on the CPU lanes, where a dict's lookup is the fastest)
SPARSE_EXTRAS = frozenset((wire.ATTR_COMM_TYPE, wire.ATTR_COMM_SIZE, wire.ATTR_PG_SIZE))


class ReplayError(ChakraError):
    """The graph cannot be replayed (cycle, missing dependency, unmatched collective)."""


@dataclass(slots=True)
class NodeSpec:
    """A node written by hand (tests, benchmarks, other front ends) instead of read from protobuf.

    ``lane`` overrides the lane derived from ``is_cpu``/``tid``/``stream``.
    """

    id: int
    duration: float = 0.0
    deps: Sequence[int] = ()
    is_cpu: bool = True
    tid: int = 0
    stream: int = 0
    device: int = 0
    start: float = 0.0          # recorded start, µs since the measured window start
    type: int = 4               # COMP_NODE
    name: str = ""
    pg_name: str = ""
    comm_src: int | None = None
    comm_dst: int | None = None
    comm_tag: int = 0
    lane: Any = None
    # thread timing (see chakra.convert.threads); a graph uses it when any node sets one of these, or
    # graph_from_specs(thread_timing=True)
    depth: int = 0
    work_before: float = 0.0
    tail: float = 0.0
    idle_before: float = 0.0
    wait_on: int | None = None
    wait_post: float = 0.0
    frees_thread: bool = False
    comm_type: int | None = None
    comm_size: int | None = None


@dataclass(slots=True)
class CommInfo:
    """What pairs a communication node with its peers."""

    pg_name: str = ""
    src: int | None = None
    dst: int | None = None
    tag: int = 0
    seq: int | None = None   # the group's collective sequence number (comm_seq), when recorded

    @classmethod
    def from_attrs(cls, raw: dict[str, Any]) -> CommInfo:
        """From the node's comm attributes (name -> value; the one constructor every reader uses).
        A collective's type and size are in ``RankGraph.extra`` (the communication model reads them too)."""
        seq = raw.get(wire.ATTR_COMM_SEQ)
        return cls(pg_name=str(raw.get(wire.ATTR_PG_NAME) or ""),
                   src=int_or_none(raw.get(wire.ATTR_COMM_SRC)), dst=int_or_none(raw.get(wire.ATTR_COMM_DST)),
                   tag=int_or_none(raw.get(wire.ATTR_COMM_TAG)) or 0, seq=seq if type(seq) is int else None)


class IntColumn(array):
    """An ``array`` of ints that equals the list of the same ints (a read graph's ``ids`` and ``types``:
    8 and 4 bytes a node instead of a list slot and an int object)."""

    __slots__ = ()

    @classmethod
    def of(cls, typecode: str, values: list[int]) -> IntColumn | list[int]:
        """``values`` packed, or the list itself when some value does not fit ``typecode``."""
        try:
            return cls(typecode, values)
        except OverflowError:
            return values

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return len(self) == len(other) and all(map(operator.eq, self, other))
        return array.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None


class DepsCSR(Sequence[tuple[int, ...]]):
    """Each node's dependency ids, in compressed rows: node i's are ``flat[ptr[i]:ptr[i + 1]]``.

    16 bytes a node with one dependency (a list of tuples: ~90).  Reads as the list of tuples it stands
    for: ``deps[i]`` (a tuple), iteration (tuples made in C), ``len``, equality with a sequence."""

    __slots__ = ("ptr", "flat")

    def __init__(self, ptr: array, flat: array) -> None:
        self.ptr = ptr        # array('q'), len = nodes + 1
        self.flat = flat      # array('Q'): the ids, row after row

    @classmethod
    def of(cls, rows: Sequence[tuple[int, ...]]) -> DepsCSR | list[tuple[int, ...]]:
        """The rows in compressed form; the rows themselves (as a list) when an id is no uint64."""
        try:
            flat = array("Q", chain.from_iterable(rows))
        except (OverflowError, TypeError):
            return list(rows)
        return cls(array("q", accumulate(map(len, rows), initial=0)), flat)

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @overload
    def __getitem__(self, i: int) -> tuple[int, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, ...]]: ...

    def __getitem__(self, i: int | slice) -> tuple[int, ...] | list[tuple[int, ...]]:
        if isinstance(i, slice):
            return list(islice(self, *i.indices(len(self))))
        ptr = self.ptr
        if i < 0:
            i += len(ptr) - 1
        if not 0 <= i < len(ptr) - 1:
            raise IndexError("dependency row out of range")
        return tuple(self.flat[ptr[i]:ptr[i + 1]])

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        ptr = self.ptr
        return map(tuple, map(self.flat.__getitem__, map(slice, ptr, islice(ptr, 1, None))))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DepsCSR):
            return self.ptr == other.ptr and self.flat == other.flat
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(map(tuple.__eq__, self, map(tuple, other)))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DepsCSR({list(self)!r})"


class _SortedItems(ItemsView[int, Any]):
    """``items()`` of a :class:`SparseColumn` or :class:`CommTable`: in position order, without a lookup
    per item."""

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return self._mapping.pairs()  # type: ignore[attr-defined]


class SparseColumn(Mapping[int, Any]):
    """Node index -> value for the nodes that have one: the positions ascending (``array('q')``) and the
    values (an ``array('q')`` when all are ints, ``array('d')`` when all are floats, else a list; the
    value read back is the one stored, of the same type).  16 bytes an entry (a dict: ~75)."""

    __slots__ = ("pos", "vals")

    def __init__(self, pos: array, vals: Sequence[Any]) -> None:
        self.pos = pos
        self.vals = vals

    @classmethod
    def of(cls, d: Mapping[int, Any]) -> SparseColumn:
        keys = sorted(d)
        vals: list[Any] = list(map(d.__getitem__, keys))
        kinds = set(map(type, vals))
        col: Sequence[Any] = vals
        try:
            if kinds == {int}:
                col = array("q", vals)
            elif kinds == {float}:
                col = array("d", vals)
        except OverflowError:
            pass
        return cls(array("q", keys), col)

    # (the lookups are written out in each method: they are called once per communication node)
    def __getitem__(self, i: int) -> Any:
        pos = self.pos
        k = bisect_left(pos, i)
        if k < len(pos) and pos[k] == i:
            return self.vals[k]
        raise KeyError(i)

    def get(self, i: int, default: Any = None) -> Any:
        pos = self.pos
        k = bisect_left(pos, i)
        return self.vals[k] if k < len(pos) and pos[k] == i else default

    def __contains__(self, i: object) -> bool:
        pos = self.pos
        k = bisect_left(pos, i)
        return k < len(pos) and pos[k] == i

    def __iter__(self) -> Iterator[int]:
        return iter(self.pos)

    def __len__(self) -> int:
        return len(self.pos)

    def items(self) -> _SortedItems:
        return _SortedItems(self)

    def pairs(self) -> Iterator[tuple[int, Any]]:
        return zip(self.pos, self.vals)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.pairs())!r})"


class CommTable(SparseColumn):
    """Node index -> :class:`CommInfo` of the communication nodes: positions ascending and, per node, the
    index of its info in a table of the distinct ones (equal infos are one object: nodes read from the
    same attributes share it).  12 bytes a node (a dict of an info per node: ~150)."""

    __slots__ = ("infos",)

    def __init__(self, pos: array, which: array, infos: list[CommInfo]) -> None:
        super().__init__(pos, which)
        self.infos = infos

    @classmethod
    def of(cls, d: Mapping[int, Any]) -> CommTable:
        """From index -> info (equal infos stored once)."""
        keys = sorted(d)
        table: dict[tuple[Any, ...], int] = {}
        infos: list[CommInfo] = []
        which = array("l")
        for k in keys:
            info = d[k]
            key = (info.pg_name, info.src, info.dst, info.tag, info.seq)
            j = table.get(key)
            if j is None:
                j = table[key] = len(infos)
                infos.append(info)
            which.append(j)
        return cls(array("q", keys), which, infos)

    def __getitem__(self, i: int) -> CommInfo:
        pos = self.pos
        k = bisect_left(pos, i)
        if k < len(pos) and pos[k] == i:
            return self.infos[self.vals[k]]
        raise KeyError(i)

    def get(self, i: int, default: Any = None) -> Any:
        pos = self.pos
        k = bisect_left(pos, i)
        return self.infos[self.vals[k]] if k < len(pos) and pos[k] == i else default

    def pairs(self) -> Iterator[tuple[int, CommInfo]]:
        return zip(self.pos, map(self.infos.__getitem__, self.vals))


@dataclass(slots=True)
class RankGraph:
    """One rank's nodes as parallel columns, index order = id order.

    A graph read from a file (:mod:`chakra.replay.reader`) holds ``ids`` and ``types`` as
    :class:`IntColumn`, ``deps`` as a :class:`DepsCSR`, ``comm`` as a :class:`CommTable` and the
    :data:`SPARSE_EXTRAS` of ``extra`` as :class:`SparseColumn`: each reads like the list or dict it
    replaces; one built by hand (:func:`graph_from_specs`) holds lists and dicts."""

    ids: Sequence[int] = field(default_factory=list)        # (read: an IntColumn)
    names: list[str] = field(default_factory=list)
    types: Sequence[int] = field(default_factory=list)      # (read: an IntColumn)
    durations: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)       # recorded start_time_micros
    deps: Sequence[tuple[int, ...]] = field(default_factory=list)  # dependency node ids (ctrl + data)
    is_cpu: list[bool] = field(default_factory=list)
    lanes: list[Any] = field(default_factory=list)           # None for METADATA nodes
    comm: Mapping[int, CommInfo] = field(default_factory=dict)  # index -> comm info (COMM_* nodes only)
    parents: set[int] = field(default_factory=set)  # ids of CPU ops that are the ctrl_dep of a CPU op
    ctrl_parent: dict[int, int] = field(default_factory=dict)  # CPU op id -> its parent's id (display only)
    rank: int | None = None
    world_size: int | None = None
    process_groups: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pg_name -> ranks (() = world)
    measured_us: float | None = None
    measured_start_us: float | None = None
    path: str | None = None
    # index -> value of the EXTRA_ATTRS a node carries, per attribute name (absent: 0 / none)
    extra: dict[str, Mapping[int, Any]] = field(default_factory=dict)
    thread_timing: bool = False   # the nodes carry the thread timing (idle, pieces, waits) as data
    # what-if (chakra.replay.whatif), per node index: multiplies all of a node's own time / adds to it
    factor: list[float] | None = None
    delay: list[float] | None = None
    # what a read graph keeps of the file as written (chakra stats, the drawings; the replay reads none):
    # per node, how many of its ``deps`` are ctrl_deps (the rest: data_deps; read: an IntColumn, 1 B a
    # node; None: not known, a graph built by hand)
    nctrl: Sequence[int] | None = None
    # the file index of nodes 0 .. len(file_pos) - 1 (the prefix the id order moved: the nodes after it
    # are at their own file index; empty: the file lists the nodes in id order)
    file_pos: Sequence[int] = ()
    # the indices of the nodes without an ``is_cpu_op`` attribute (their ``is_cpu`` is False), ascending
    no_cpu_attr: Sequence[int] = ()
    # (id, message) of the first repeated id of a file read as it is (reader.load_graph(strict=False));
    # a graph that has one is not replayed (its nodes of one id are next to each other, in file order)
    repeated: tuple[int, int] | None = None

    @property
    def timed(self) -> bool:
        """Whether the nodes carry recorded start times (any non-zero ``start_time_micros``)."""
        return any(self.starts)

    def __len__(self) -> int:
        return len(self.ids)

    def comm_lookups(self) -> tuple[dict[int, CommInfo], dict[int, Any], dict[int, Any]]:
        """``comm`` and the ``comm_type`` / ``comm_size`` extras as plain dicts, for a pass that looks them
        up per communication node (a read graph's are sorted columns: a lookup in one is a bisection in
        Python)."""
        return (dict(self.comm.items()), dict(self.extra.get(wire.ATTR_COMM_TYPE, {}).items()),
                dict(self.extra.get(wire.ATTR_COMM_SIZE, {}).items()))

    def file_order(self) -> Sequence[int]:
        """The node indices in the order of the file's messages."""
        fpos = self.file_pos
        if not fpos:
            return range(len(self.ids))
        order = list(range(len(self.ids)))
        any(map(order.__setitem__, fpos, range(len(fpos))))
        return order


def resolve_deferred_lanes(lanes: list[Any], types: Sequence[int], deferred: Iterable[tuple[int, Any]],
                           host_tids: Iterable[Any], known: Iterable[Any]) -> None:
    """Set ``lanes[i]`` of the nodes a reader left open, ``deferred`` (index, tid): non-CPU nodes without
    ``stream`` or ``device`` run on a host thread when their ``tid`` is one of ``host_tids``, else on a GPU
    stream (module doc); equal lanes are one tuple (``known``: the lanes made so far)."""
    threads = {int_or_none(t) or 0 for t in host_tids}
    interned = {lane: lane for lane in known}
    lane: tuple[str, int] | tuple[str, int, int]   # a host thread's, or a GPU stream's
    for i, tid in deferred:
        if tid is None:    # nothing says where it ran: a device op, communication apart from compute
            lane = ("gpu", 0, COMM_STREAM if types[i] in COMM_TYPES else 0)
        else:
            t = tid if type(tid) is int else (int_or_none(tid) or 0)
            lane = ("cpu", t) if t in threads else ("gpu", 0, int_or_none(tid) or 0)
        lanes[i] = interned.setdefault(lane, lane)


def graph_for_metadata(metadata: Any, path: str | None, rank: int | None) -> RankGraph:
    """An empty RankGraph with what the ``GlobalMetadata`` says: rank (else ``rank``), world size,
    process groups, measured window."""
    info = metadata_info(metadata)
    g = RankGraph(path=path)
    g.rank, g.world_size, g.process_groups = job_of_metadata(info, rank, path)
    mdur = info.get(wire.META_MEASURED_DUR_US)
    g.measured_us = float(mdur) if isinstance(mdur, (int, float)) and mdur > 0 else None
    mstart = info.get(wire.META_MEASURED_START_US)
    g.measured_start_us = float(mstart) if isinstance(mstart, (int, float)) else None
    g.thread_timing = info.get(wire.META_THREAD_TIMING) == wire.THREAD_TIMING
    return g


def graph_from_specs(specs: Iterable[NodeSpec], *, rank: int | None = None, world_size: int | None = None,
                     process_groups: Any = None, measured_us: float | None = None,
                     path: str | None = None, thread_timing: bool | None = None) -> RankGraph:
    """Build a RankGraph from hand-written NodeSpecs.

    ``thread_timing`` (None: when some node sets depth, work_before, tail, idle_before or wait_on) makes
    the replay take the thread timing from the nodes instead of from their start times."""
    g = RankGraph(rank=rank, world_size=world_size, measured_us=measured_us, path=path)
    if process_groups:
        g.process_groups = (dict(process_groups) if isinstance(process_groups, dict)
                            else parse_process_groups(process_groups, world_size, path))
    seen: set[int] = set()
    ids: list[int] = []
    types: list[int] = []
    comm: dict[int, CommInfo] = {}
    deps: list[tuple[int, ...]] = []
    extra: dict[str, dict[int, Any]] = {}
    g.ids, g.types, g.comm, g.deps = ids, types, comm, deps
    g.extra = extra  # type: ignore[assignment]   # (dict is invariant: these dicts are Mappings)
    for s in sorted(specs, key=lambda s: s.id):
        if s.id in seen:
            raise TraceFormatError(f"node id {s.id} appears twice", path)
        seen.add(s.id)
        if s.lane is not None:
            lane = s.lane
        elif s.type == METADATA_NODE:
            lane = None
        elif s.is_cpu:
            lane = ("cpu", s.tid)
        else:
            lane = ("gpu", s.device, s.stream)
        if s.type in COMM_TYPES:
            comm[len(ids)] = CommInfo(s.pg_name, s.comm_src, s.comm_dst, s.comm_tag)
        ids.append(s.id)
        g.names.append(s.name or f"node{s.id}")
        types.append(s.type)
        g.durations.append(float(s.duration))
        g.starts.append(float(s.start))
        deps.append(tuple(s.deps))
        g.is_cpu.append(bool(s.is_cpu))
        g.lanes.append(lane)
        k = len(ids) - 1
        for name, v in ((wire.ATTR_THREAD_DEPTH, s.depth), (wire.ATTR_WORK_BEFORE_US, s.work_before),
                        (wire.ATTR_TAIL_US, s.tail), (wire.ATTR_IDLE_BEFORE_US, s.idle_before),
                        (wire.ATTR_WAIT_ON, s.wait_on), (wire.ATTR_WAIT_POST_US, s.wait_post),
                        (wire.ATTR_FREES_THREAD, int(s.frees_thread)),
                        (wire.ATTR_COMM_TYPE, s.comm_type),
                        (wire.ATTR_COMM_SIZE, s.comm_size)):
            if v or (name == wire.ATTR_COMM_TYPE and v is not None):
                extra.setdefault(name, {})[k] = v
    if thread_timing is None:
        thread_timing = any(name in g.extra for name in (wire.ATTR_THREAD_DEPTH, wire.ATTR_WORK_BEFORE_US,
                                                         wire.ATTR_TAIL_US, wire.ATTR_IDLE_BEFORE_US,
                                                         wire.ATTR_WAIT_ON))
    g.thread_timing = thread_timing
    return g


def scalar(v: Any) -> Any:
    """A lane key from an attribute: a list-valued tid/stream/device (a foreign writer) reads as unknown."""
    return v if isinstance(v, (int, float, str, bytes)) else None


def positions(seq: Sequence[Any], value: Any) -> list[int]:
    """Indices of ``value`` in ``seq`` (meant for few of them: found with ``list.index``, in C)."""
    out: list[int] = []
    k = -1
    while True:
        try:
            k = seq.index(value, k + 1)
        except ValueError:
            return out
        out.append(k)
