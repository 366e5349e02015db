"""`chakra stats`: what a trace holds and where its time goes, per rank and across ranks.

Reads Chakra protobuf ETs (the converter's output) and, more lightly, ET+ JSON (the linker's output).
For each file: node counts by type, the top GPU ops ("kernels", collectives included) and the top CPU ops by
total duration, communication volume (sum of ``comm_size``) per process group and per collective type, and
the critical path and the ops that make it up.  Several files give one section per rank and a section across
ranks.  ``--json`` prints the same figures for machines.

The critical path respects the resources as the replay does: the ops of one CPU thread, and those of one GPU
stream, run one at a time.  A chain over the dependencies alone (what ``dependency_only_us`` gives) can be far
shorter than any run of the trace (82 ms on the 2023 reference ET of the corpus, whose GPU stream 7 alone
holds 293 ms of kernels: 312 ms with the streams), because much of what orders a trace is that its ops queue
on a thread or a stream.  So the path is read off the replay's schedule
(:func:`chakra.replay.api.replay_rank`, lanes mode, without the recorded idle gaps: the ops alone) by
:func:`chakra.replay.critical.critical_path`: from the node that ends last, walk back through whatever
released each node -- the dependency that ended then, the op before it on its thread or stream, the op it
was recorded starting inside of (a kernel that started before its launch call returned: it starts that long
after the launch call does), or, when its end was bound by an op it was blocked on (a synchronize, a
``wait()``: it ends that long after the op does), that op -- down to time 0.  Its length is that replay's
time.  Each op is credited only the part of its time that lies on the path (a launch call until its kernel
started, a synchronize after the kernel ended), so no op holds more of the path than it ran; the rest of the
path is time no op holds, listed under its own rows (``between_ops_us``, :data:`BETWEEN_LABELS`): the time a
thread spends in enclosing ops around their children (the replay keeps those pieces between the children),
the recorded latency between a waited op's end and the waiter resuming, a parent's tail after the last op.
The op rows and those sum to the length.

``dependency_only_us`` is that replay without the queues (every node still starts and ends by the replay's
rules: dependencies, waits, the start and end bounds of an op recorded running while a dependency finished),
so it is never longer than the path.  Taking every dependency as end-to-start instead counts the overlap of
a kernel with its launch call, and a synchronize's wait, twice, and can exceed every run of the trace: a
graph the replay refuses (a repeated id) has no critical path (``length_us`` null), with a warning.

Choices worth knowing:
- A node's CPU/GPU side is its ``is_cpu_op`` attribute; without one, COMM nodes count as GPU (the simulator
  rejects CPU comm nodes) and the others as CPU; the record of a collective a CPU backend ran (gloo, MPI,
  UCC: ``gloo:all_reduce`` on a worker thread, written ``is_cpu_op`` false for the simulator) is a CPU op.
  METADATA nodes are neither.
- Communication is counted per process group, per collective type and per implementation
  (``chakra.host.collective_names``: NCCL/RCCL, gloo, vLLM custom all-reduce, torch symmetric memory ...;
  "other" for a name the table does not hold).
- Op names are grouped after removing a trailing ``(N)`` index, which the 2023 converter appended to every
  node name (``aten::mm(3)``); other names are kept as they are.
- Dependencies on ids that are not in the file are ignored for the critical path and counted as dangling.
  Dependency cycles (the 2023 sample has some) are reported; the path is then computed without the
  dependencies that point to later nodes of the file, and flagged as approximate.
- Op counts separate timed ops from untimed ones (duration 0: roots, ops the linker could not match), which
  add nothing to the times.
- ET+ JSON has no dependency graph (only the call tree), so its critical path is ``null``; CPU op time
  there is the exclusive (self) time so that nested ops are not counted twice.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from chakra.errors import ChakraError, TraceFormatError
from chakra.formats import ATTR_COMM_SIZE, ATTR_COMM_TYPE
from chakra.host import keys as hk
from chakra.host.collective_names import (
    implementation_of,
    is_comm_kernel_name,
    is_cpu_record,
    kernel_collective,
)
from chakra.host.model import is_comm_name
from chakra.io import load_json
from chakra.io.naming import rank_from_filename
from chakra.schema import (
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    METADATA_NODE,
)
from chakra.schema.et_def_pb2 import COLLECTIVE_TYPES, NODE_TYPES

if TYPE_CHECKING:
    from chakra.replay.graph import RankGraph

COMM_TYPES = (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE)
_INDEX_SUFFIX = re.compile(r"\(\d+\)$")
_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset"}
ROOT_PREFIX = "[pytorch|profiler|execution_"   # the call tree's roots ([...|execution_trace|thread])

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GraphNode:
    """A node as the statistics and the drawings see it: an ET+ file's, or a .et's for the drawings
    (:func:`graph_nodes`; the statistics of a .et read its graph's columns)."""

    id: int
    name: str
    kind: str                 # NodeType name for protobuf ETs; a category for ET+
    is_cpu: bool | None       # None: neither side (metadata, roots)
    dur: float                # µs
    ctrl_deps: tuple[int, ...] = ()
    data_deps: tuple[int, ...] = ()
    comm: str | None = None   # collective type name, "SEND"/"RECV", or None for non-comm nodes
    comm_size: int = 0
    pg_name: str = ""
    start: float = 0.0
    lane: Any = None          # ("cpu", tid) or ("gpu", device, stream) as the replay has it; None: no lane


@dataclass(slots=True)
class EtGraph:
    """One loaded file."""

    path: str
    format: str               # "et" (protobuf), "et+" (JSON) or "host ET" (JSON without timing)
    rank: int | None
    nodes: list[GraphNode] = field(default_factory=list)   # ET+; a .et's: :func:`graph_nodes`
    has_deps: bool = True     # False for ET+ (no dependency graph to walk)
    graph: RankGraph | None = None   # protobuf ETs: the replay's graph of the file, read as it is


# ------------------------------------------------------------------------------------------------ loading
rank_from_name = rank_from_filename  # the name this module has always exported


def base_name(name: str) -> str:
    """Strip the ``(N)`` index the 2023 converter appended to node names."""
    return _INDEX_SUFFIX.sub("", name)


def load_et(path: str | os.PathLike[str]) -> EtGraph:
    """Read a Chakra protobuf ET (``.et`` or gzipped) into the replay's graph, as it is
    (:func:`chakra.replay.reader.load_graph` not ``strict``): nothing is judged here (repeated ids,
    dangling dependencies and cycles are reported by :func:`warn_graph_problems`)."""
    from chakra.replay.reader import load_graph as read_graph

    g = read_graph(path, strict=False)
    return EtGraph(str(path), "et", g.rank, has_deps=True, graph=g)


# (index, kind, CPU side, name, duration, comm, pg_name, comm_size) of a node, as the statistics count it
Row = tuple[int, str, bool | None, str, float, str | None, str, int]


def et_rows(g: RankGraph, which: Iterable[int] | None = None) -> Iterator[Row]:
    """The nodes of a read ET in file order (``which``: these node indices, in this order), as the
    statistics count them (see the module docstring)."""
    no_attr = set(g.no_cpu_attr)
    comm_types = g.extra.get(ATTR_COMM_TYPE, {})
    comm_sizes = g.extra.get(ATTR_COMM_SIZE, {})
    types, names, durs, cpu = g.types, g.names, g.durations, g.is_cpu
    for i in g.file_order() if which is None else which:
        ntype, name = types[i], names[i]
        kind = NODE_TYPES[ntype] if 0 <= ntype < len(NODE_TYPES) else f"TYPE_{ntype}"
        is_cpu: bool | None
        if ntype == METADATA_NODE:
            is_cpu = None
        elif i in no_attr:
            is_cpu = ntype not in COMM_TYPES
        else:
            # a collective of a CPU backend (gloo) ran on a CPU thread: is_cpu_op false is for the simulator
            is_cpu = cpu[i] or is_cpu_record(base_name(name))
        if ntype not in COMM_TYPES:
            yield i, kind, is_cpu, name, durs[i], None, "", 0
            continue
        if ntype == COMM_SEND_NODE:
            comm = "SEND"
        elif ntype == COMM_RECV_NODE:
            comm = "RECV"
        else:
            ct = comm_types.get(i)
            comm = COLLECTIVE_TYPES[ct] if isinstance(ct, int) and 0 <= ct < len(COLLECTIVE_TYPES) \
                else "UNKNOWN"
        info = g.comm.get(i)
        yield (i, kind, is_cpu, name, durs[i], comm, info.pg_name if info is not None else "",
               int(comm_sizes.get(i, 0)))


def graph_nodes(graph: EtGraph, which: Sequence[int] | None = None) -> list[GraphNode]:
    """A loaded file's nodes in file order (a .et's made from its graph, once: for the drawings);
    ``which``: only those at these positions of the file order."""
    g = graph.graph
    if g is None:
        return graph.nodes if which is None else list(map(graph.nodes.__getitem__, which))
    if which is None and graph.nodes:
        return graph.nodes
    order = g.file_order()
    # (many nodes: all the tuples made at once, in C)
    deps = list(g.deps) if which is None or 8 * len(which) > len(order) else g.deps
    nctrl = g.nctrl if g.nctrl is not None else [len(d) for d in deps]
    ids, starts, lanes = g.ids, g.starts, g.lanes
    out = [GraphNode(ids[i], name, kind, is_cpu, dur, deps[i][:nctrl[i]], deps[i][nctrl[i]:], comm, size, pg,
                     starts[i], lanes[i])
           for i, kind, is_cpu, name, dur, comm, pg, size in et_rows(
               g, order if which is None else map(order.__getitem__, which))]
    if which is None:
        graph.nodes = out
    return out


def id_names(graph: EtGraph) -> Iterator[tuple[int, str]]:
    """(id, name) of a loaded file's nodes, in file order (a .et's read off its graph's columns)."""
    if (g := graph.graph) is None:
        return ((n.id, n.name) for n in graph.nodes)
    order = g.file_order()
    return zip(map(g.ids.__getitem__, order), map(g.names.__getitem__, order))


def _rows(graph: EtGraph) -> Iterable[Row]:
    if graph.graph is not None:
        return et_rows(graph.graph)
    return ((k, n.kind, n.is_cpu, n.name, n.dur, n.comm, n.pg_name, n.comm_size)
            for k, n in enumerate(graph.nodes))


def load_etplus(path: str | os.PathLike[str]) -> EtGraph:
    """Read an ET+ JSON (linker output, or a 2023 reference ET+ file)."""
    data = load_json(path)
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        raise TraceFormatError("no 'nodes' list at the top level (not an ET+ / host ET file)", path)
    rank = data.get(hk.RANK)
    if not isinstance(rank, int) or rank < 0:
        rank = rank_from_name(path)
    out: list[GraphNode] = []
    for i, n in enumerate(raw_nodes):
        if not isinstance(n, dict) or not isinstance(n.get("id"), int) or isinstance(n["id"], bool):
            raise TraceFormatError(f"node at index {i} is not an object with an integer 'id'", path)
        name = str(n.get("name", ""))
        cat = n.get("cat")
        comm: str | None = None
        comm_size = 0
        pg_name = ""
        if cat in _GPU_CATS:
            is_cpu: bool | None = False
            dur = _num(n.get("dur"))
            coll = str(n.get(hk.COLLECTIVE_NAME) or "")
            if coll or is_comm_kernel_name(name):
                kind = "gpu_comm"
                comm = collective_type_name(coll or kernel_collective(name) or name)
                comm_size = int(_num(n.get(hk.COMM_SIZE)))
                pg_name = str(n.get(hk.PG_NAME) or "")
            else:
                kind = _GPU_CATS[cat]
        else:
            if name.startswith(ROOT_PREFIX):
                kind, is_cpu = "root", None
            elif name.startswith("## process_group:init"):
                kind, is_cpu = "metadata", None
            elif is_comm_name(name):
                kind, is_cpu = "host_comm", True
            else:
                kind, is_cpu = "host_op", True
            dur = _num(n.get("exclusive_dur", n.get("dur")))
        parent = n.get("ctrl_deps", n.get("parent"))
        ctrl = (int(parent),) if isinstance(parent, int) and parent != n["id"] else ()
        out.append(GraphNode(int(n["id"]), name, kind, is_cpu, dur, ctrl, (), comm, comm_size, pg_name,
                             _num(n.get("ts")), _etplus_lane(n, is_cpu)))
    timed = any(isinstance(n, dict) and ("dur" in n or "exclusive_dur" in n) for n in raw_nodes)
    if not timed and raw_nodes:
        log.warning("%s: a host ET without timing (not linked with its Kineto trace): every time is 0; "
                    "link it first (chakra link) for times", path)
    return EtGraph(str(path), "et+" if timed else "host ET", rank, out, False)


def _etplus_lane(n: dict[str, Any], is_cpu: bool | None) -> Any:
    """An ET+ node's lane: its host thread, its GPU stream (device 0 when it names none), None for roots."""
    if is_cpu is None:
        return None
    if is_cpu:
        tid = n.get(hk.TID)
        return ("cpu", tid if isinstance(tid, int) else 0)
    device, stream = n.get("device"), n.get("stream")
    return ("gpu", device if isinstance(device, int) else 0, stream if isinstance(stream, int) else 0)


_COLL_WORDS = (  # checked in this order: longer words first
    ("reducescatter", "REDUCE_SCATTER"), ("allreduce", "ALL_REDUCE"), ("allgather", "ALL_GATHER"),
    ("alltoall", "ALL_TO_ALL"), ("broadcast", "BROADCAST"), ("sendrecv", "SENDRECV"), ("send", "SEND"),
    ("recv", "RECV"), ("barrier", "BARRIER"), ("gather", "GATHER"), ("scatter", "SCATTER"),
    ("reduce", "REDUCE"),
)


def collective_type_name(text: str) -> str:
    """``all_reduce`` / ``allreduce`` / ``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``ALL_REDUCE``."""
    key = text.lower().replace("_", "").replace("ncclkernel", "").replace("nccldevkernel", "")
    key = key.split("(")[0]
    for word, name in _COLL_WORDS:
        if key.startswith(word) or (word in key and len(word) > 6):
            return name
    return "UNKNOWN"


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _peek(path: str | os.PathLike[str], size: int = 64) -> bytes:
    """The first bytes of a file, gunzipped when it is gzip (without reading the whole file)."""
    import gzip

    try:
        with open(path, "rb") as fh:
            head = fh.read(size)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as gz:
                head = gz.read(size)
    except FileNotFoundError:
        raise TraceFormatError("file not found", path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, expected a file", path) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"cannot read ({exc})", path) from None
    return head


_JSON_START = re.compile(rb"^\s*\{\s*[\"}]")


def load_graph(path: str | os.PathLike[str]) -> EtGraph:
    """Protobuf ET or ET+ JSON: by the name's suffix (``.et``/``.json``, optionally ``.gz``), else by content.

    The content test needs care: a protobuf stream whose metadata is 123 bytes long starts with ``{`` too,
    so JSON is recognised by ``{`` followed (after whitespace) by ``"`` or ``}``.
    """
    name = Path(path).name.lower().removesuffix(".gz")
    if name.endswith(".json"):
        return load_etplus(path)
    if name.endswith(".et"):
        return load_et(path)
    if _JSON_START.match(_peek(path)):
        return load_etplus(path)
    return load_et(path)


# -------------------------------------------------------------------------------------------- computing
def graph_checks(ids: Sequence[int], deps: Iterable[Sequence[int]], starts: Sequence[float]
                 ) -> dict[str, int]:
    """What is wrong with a file's dependencies (its nodes' ids, dependencies and start times, in file
    order): ``dangling_deps`` (dependencies on ids not in the file), ``cycle_blocked_nodes`` (nodes on a
    cycle or behind one: the replay's lane order cannot place them, :func:`chakra.replay.engine.lane_order`)
    and, when there are such nodes, ``dropped_back_edges`` (the dependencies on a node not earlier in the
    file, which the critical path then leaves out)."""
    from chakra.replay.engine import lane_order

    index = {nid: i for i, nid in enumerate(ids)}
    dangling = 0
    rows: list[tuple[int, ...]] = []
    for d in deps:
        found = [index.get(x) for x in d]
        dangling += found.count(None)
        rows.append(tuple(dict.fromkeys(j for j in found if j is not None)))
    placed = len(lane_order(list(starts), rows))
    blocked = len(ids) - placed
    dropped = sum(j >= i for i, d in enumerate(rows) for j in d) if blocked else 0
    return {"dangling_deps": dangling, "cycle_blocked_nodes": blocked, "dropped_back_edges": dropped}


def _checks(graph: EtGraph) -> dict[str, int]:
    """:func:`graph_checks` of a loaded file."""
    g = graph.graph
    if g is None:
        nodes = graph.nodes
        return graph_checks([n.id for n in nodes], (n.ctrl_deps + n.data_deps for n in nodes),
                            [n.start for n in nodes])
    if not g.file_pos:
        return graph_checks(g.ids, g.deps, g.starts)
    order = g.file_order()
    deps = list(g.deps)      # (tuples made in C; then in file order)
    return graph_checks(list(map(g.ids.__getitem__, order)), map(deps.__getitem__, order),
                        list(map(g.starts.__getitem__, order)))


def _top(totals: dict[str, list[float]], top: int) -> list[dict[str, Any]]:
    rows = sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top]
    return [{"name": name, "count": int(c), "total_us": t} for name, (c, t) in rows]


def _add(totals: dict[str, list[float]], name: str, dur: float) -> None:
    slot = totals.get(name)
    if slot is None:
        totals[name] = [1, dur]
    else:
        slot[0] += 1
        slot[1] += dur


@dataclass(slots=True)
class _Totals:
    """Sums that add up across ranks."""

    kinds: Counter[str] = field(default_factory=Counter)
    gpu: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    by_pg: dict[str, list[int]] = field(default_factory=dict)
    by_type: dict[str, list[int]] = field(default_factory=dict)
    by_impl: dict[str, list[int]] = field(default_factory=dict)
    nodes: int = 0
    cpu_us: float = 0.0
    gpu_us: float = 0.0
    cpu_untimed: int = 0      # ops of duration 0: roots, ops without a measured time
    gpu_untimed: int = 0

    def feed(self, rows: Iterable[Row]) -> None:
        for _, kind, is_cpu, name, dur, comm, pg_name, comm_size in rows:
            self.nodes += 1
            self.kinds[kind] += 1
            if is_cpu is True:
                _add(self.cpu, base_name(name), dur)
                self.cpu_us += dur
                self.cpu_untimed += not dur
            elif is_cpu is False:
                _add(self.gpu, base_name(name), dur)
                self.gpu_us += dur
                self.gpu_untimed += not dur
            if comm is not None:
                for table, key in ((self.by_pg, pg_name), (self.by_type, comm),
                                   (self.by_impl, comm_implementation(name))):
                    slot = table.setdefault(key, [0, 0])
                    slot[0] += 1
                    slot[1] += comm_size

    def merge(self, other: _Totals) -> None:
        self.nodes += other.nodes
        self.cpu_us += other.cpu_us
        self.gpu_us += other.gpu_us
        self.cpu_untimed += other.cpu_untimed
        self.gpu_untimed += other.gpu_untimed
        self.kinds.update(other.kinds)
        for mine, theirs in ((self.gpu, other.gpu), (self.cpu, other.cpu)):
            for k, (c, t) in theirs.items():
                slot = mine.setdefault(k, [0, 0.0])
                slot[0] += c
                slot[1] += t
        for mine_i, theirs_i in ((self.by_pg, other.by_pg), (self.by_type, other.by_type),
                                 (self.by_impl, other.by_impl)):
            for k, (c, b) in theirs_i.items():
                slot_i = mine_i.setdefault(k, [0, 0])
                slot_i[0] += c
                slot_i[1] += b

    def report(self, top: int) -> dict[str, Any]:
        comm_nodes = sum(c for c, _ in self.by_type.values())
        comm_bytes = sum(b for _, b in self.by_type.values())
        cpu_ops = sum(int(c) for c, _ in self.cpu.values())
        gpu_ops = sum(int(c) for c, _ in self.gpu.values())
        return {
            "nodes": self.nodes,
            "node_types": dict(sorted(self.kinds.items())),
            "cpu_ops": cpu_ops,
            "gpu_ops": gpu_ops,
            "cpu_ops_timed": cpu_ops - self.cpu_untimed,
            "cpu_ops_untimed": self.cpu_untimed,
            "gpu_ops_timed": gpu_ops - self.gpu_untimed,
            "gpu_ops_untimed": self.gpu_untimed,
            "cpu_total_us": self.cpu_us,
            "gpu_total_us": self.gpu_us,
            "top_kernels": _top(self.gpu, top),
            "top_cpu_ops": _top(self.cpu, top),
            "comm": {
                "nodes": comm_nodes,
                "bytes": comm_bytes,
                "by_pg": _counts(self.by_pg),
                "by_type": _counts(self.by_type),
                "by_implementation": _counts(self.by_impl),
            },
        }


def _counts(table: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    return {k: {"count": c, "bytes": b} for k, (c, b) in sorted(table.items())}


def comm_implementation(name: str) -> str:
    """The implementation of a comm node by its name (a kernel's or a host record's, as the converter
    names it: ``chakra.host.collective_names``), "other" when the table does not name it."""
    name = base_name(name)
    return implementation_of(name, kernel=True) or implementation_of(name, kernel=False) or "other"


def graph_stats(graph: EtGraph, top: int = 10) -> dict[str, Any]:
    """The figures of one file (see the module docstring)."""
    totals = _Totals()
    totals.feed(_rows(graph))
    rep: dict[str, Any] = {"path": graph.path, "format": graph.format, "rank": graph.rank}
    rep.update(totals.report(top))
    rep["critical_path"] = _critical_report(graph, top) if graph.has_deps else None
    rep["_totals"] = totals
    return rep


def scheduled_path(graph: EtGraph, forward_only: bool = False) -> dict[str, Any] | None:
    """The critical path on the replay's schedule (see the module docstring), or None without messages.

    The walk is the replay's own (:func:`chakra.replay.critical.critical_path`, the one the what-if report
    uses): from the op that completes last, back through whatever released it -- a dependency, the op before
    it on its thread or stream, the op it was recorded starting inside of, or, for an op whose end was bound
    by an op it was blocked on, that op.  Returns ``{"length_us", "path": [ids, first to last], "adds": [the
    µs each node holds on the path: only the part of its time that lies on it], "between": {what the rest
    of the path is, µs: see BETWEEN_LABELS}, "lane_links", "dep_links", "start_links", "end_links",
    "dependency_only_us"}``; ``adds`` and ``between`` sum to the length.  The links count the steps of the
    path by kind: "waited for the op before on its thread / stream", "waited for a dependency's end",
    "started while an op it depends on ran", "ended after an op it was blocked on".
    ``dependency_only_us`` is the same replay without the one-at-a-time queues
    (:func:`chakra.replay.critical.dependency_only_us`).  ``forward_only``: only the dependencies that point
    to an earlier node of the file (a graph with cycles).
    """
    g = graph.graph
    if g is None:
        return None
    from dataclasses import replace

    from chakra.replay.api import replay_rank
    from chakra.replay.critical import critical_path as replay_critical_path
    from chakra.replay.critical import dependency_only_us
    from chakra.replay.reader import repeated_text

    if g.repeated is not None:
        raise TraceFormatError(repeated_text(*g.repeated), g.path)
    n = len(g.file_pos)
    fpos = dict(zip(g.ids, chain(g.file_pos, range(n, len(g)))))    # id -> its file index
    deps = [tuple(d for d in deps if d in fpos and (not forward_only or fpos[d] < fpos[nid]))
            for nid, deps in zip(g.ids, g.deps)]
    res = replay_rank(replace(g, deps=deps), gaps=False, missing="ignore", keep_plan=True)
    cp = replay_critical_path(res)
    links = Counter(cp.links)
    return {"length_us": cp.total_us, "path": list(cp.nodes), "adds": list(cp.charges),
            "between": dict(cp.between), "lane_links": links["lane"], "dep_links": links["dep"],
            "start_links": links["start"], "end_links": links["end"],
            "dependency_only_us": dependency_only_us(res)}


# the parts of a critical path that no op holds (chakra.replay.critical.BETWEEN), as the table names them
BETWEEN_LABELS = {
    "start": "(before the first op)",
    "thread": "(thread: parent ops around their children)",
    "latency": "(recorded wait latency after an op)",
    "end": "(parent ops' tails after the last op)",
    "slack": "(start later than any release found)",
}


def _critical_report(graph: EtGraph, top: int) -> dict[str, Any]:
    checks = _checks(graph)
    warn_graph_problems(graph, checks)
    out: dict[str, Any] = {"length_us": None, **checks, "dependency_only_us": None, "model": None}
    try:
        sched = scheduled_path(graph, forward_only=bool(checks["cycle_blocked_nodes"]))
    except ChakraError as exc:          # a graph the replay refuses (a repeated id)
        log.warning("%s: no critical path (%s)", graph.path, exc)
        sched = None
    path: list[int] = []
    adds: list[float] = []
    between: dict[str, float] = {}
    if sched is not None:
        path, adds = sched["path"], sched["adds"]
        between = {k: v for k, v in sched["between"].items() if v > 1e-6}
        out.update(length_us=sched["length_us"], lane_links=sched["lane_links"],
                   dep_links=sched["dep_links"], start_links=sched["start_links"],
                   end_links=sched["end_links"], dependency_only_us=sched["dependency_only_us"],
                   model="one op at a time per CPU thread and GPU stream (the replay's schedule, no "
                         "idle gaps)")
    contrib: dict[str, list[float]] = {}
    g = graph.graph
    if g is not None and path:     # (a graph with a path has no repeated id: one node per id)
        name_of = dict(zip(g.ids, g.names))
        for nid, add in zip(path, adds):
            _add(contrib, base_name(name_of[nid]), add)
    length = out["length_us"] or 0.0
    rows = _top(contrib, top)
    for r in rows:
        r["share"] = (r["total_us"] / length) if length else 0.0
    out.update(nodes=len(path), first_id=path[0] if path else None, last_id=path[-1] if path else None,
               top=rows, between_ops_us=between)
    return out


def warn_graph_problems(graph: EtGraph, checks: dict[str, int] | None = None) -> None:
    """Log (warning) duplicate ids, dependencies on missing nodes and cycles of ``graph``.

    Stats and drawings of a broken graph are still made (they are how one looks into it), but the user
    hears why they are approximate.  ``checks``: an already computed :func:`graph_checks` of the file.
    """
    cp = _checks(graph) if checks is None else checks
    dup = None
    if graph.graph is not None:
        dup = graph.graph.repeated[0] if graph.graph.repeated is not None else None
    else:
        ids: set[int] = set()
        for n in graph.nodes:
            if n.id in ids:
                dup = n.id
                break
            ids.add(n.id)
    if dup is not None:
        log.warning("%s: duplicate node id %d: dependencies on it are ambiguous", graph.path, dup)
    if not (len(graph.graph) if graph.graph is not None else graph.nodes):
        log.warning("%s: no nodes", graph.path)
    if cp["dangling_deps"]:
        log.warning("%s: %d dependencies point to node ids missing from the file (ignored)", graph.path,
                    cp["dangling_deps"])
    if cp["cycle_blocked_nodes"]:
        log.warning("%s: dependency cycle: %d node(s) are on or behind a cycle; the critical path ignores "
                    "the %d backward dependencies", graph.path, cp["cycle_blocked_nodes"],
                    cp["dropped_back_edges"])


def compute_stats(paths: Sequence[str | os.PathLike[str]], top: int = 10,
                  progress: bool = False) -> dict[str, Any]:
    """Load every file, compute per-file figures and, for several files, the figures across ranks."""
    if not paths:
        raise TraceFormatError("no input file given")
    per: list[dict[str, Any]] = []
    items: Iterable[str | os.PathLike[str]] = paths
    if progress and len(paths) > 1:
        from rich.progress import track

        items = track(paths, description="reading ETs", transient=True)
    for p in items:
        per.append(graph_stats(load_graph(p), top))
    per.sort(key=lambda r: (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["path"]))
    report: dict[str, Any] = {"files": per, "all": None}
    if len(per) > 1:
        total = _Totals()
        for r in per:
            total.merge(r["_totals"])
        agg = total.report(top)
        lengths = {_label(r, i): r["critical_path"]["length_us"] for i, r in enumerate(per)
                   if r["critical_path"] is not None and r["critical_path"]["length_us"] is not None}
        if lengths:
            worst = max(lengths, key=lambda k: lengths[k])
            agg["critical_path"] = {"max_us": lengths[worst], "rank": worst, "per_rank": lengths}
        else:
            agg["critical_path"] = None
        agg["ranks"] = [_label(r, i) for i, r in enumerate(per)]
        report["all"] = agg
    for r in per:
        del r["_totals"]
    return report


def _label(rep: dict[str, Any], i: int) -> str:
    return str(rep["rank"]) if rep["rank"] is not None else f"file{i}"


# ---------------------------------------------------------------------------------------------- showing
def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def _ops_text(rep: dict[str, Any], side: str) -> str:
    """``CPU ops 249: 245 timed (16,491.0 µs), 4 untimed (duration 0)``, ``no GPU ops``."""
    total, untimed = rep[f"{side}_ops"], rep[f"{side}_ops_untimed"]
    timed, us = rep[f"{side}_ops_timed"], rep[f"{side}_total_us"]
    if not total:
        return f"no {side.upper()} ops"
    text = f"{side.upper()} ops {total:,}: {timed:,} timed ({us:,.1f} µs)"
    return text + (f", {untimed:,} untimed (duration 0)" if untimed else "")


def render(report: dict[str, Any], file: IO[str] | None = None, width: int | None = None) -> None:
    """Rich tables for a human."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, width=width)
    files = report["files"]
    if len(files) > 1:
        t = Table(title="per rank", title_justify="left")
        for col in ("rank", "nodes", "CPU ops", "GPU ops", "comm", "comm bytes", "crit. path µs"):
            t.add_column(col, justify="right", no_wrap=True, min_width=len(col))
        t.add_column("file", overflow="ellipsis", no_wrap=True, max_width=28)
        for i, r in enumerate(files):
            cp = r["critical_path"]
            cpv = "n/a" if cp is None or cp["length_us"] is None else f"{cp['length_us']:,.1f}"
            t.add_row(_label(r, i), str(r["nodes"]), str(r["cpu_ops"]), str(r["gpu_ops"]),
                      str(r["comm"]["nodes"]), f"{r['comm']['bytes']:,}", cpv, Path(r["path"]).name)
        console.print(t)
    for i, r in enumerate(files):
        _section(console, r, f"rank {_label(r, i)}: {r['path']} ({r['format']})")
    if report["all"] is not None:
        _section(console, report["all"], f"all ranks ({len(files)} files)")


def _ops_table(title: str, rows: list[dict[str, Any]], share: bool = False,
               others: Sequence[dict[str, Any]] = ()) -> Any:
    """``others``: rows after a line (time on the critical path that no op holds)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("op", overflow="ellipsis", max_width=40 if share else 48, no_wrap=True)
    t.add_column("count", justify="right", no_wrap=True, min_width=5)
    t.add_column("total µs", justify="right", no_wrap=True, min_width=10)
    if share:
        t.add_column("share", justify="right", no_wrap=True, min_width=6)
    for k, r in enumerate([*rows, *others]):
        if k == len(rows) and rows:
            t.add_section()
        cells = [r["name"], str(r["count"]), f"{r['total_us']:,.1f}"]
        if share:
            cells.append(f"{100 * r['share']:.1f}%")
        t.add_row(*cells)
    return t


def _comm_table(title: str, table: dict[str, dict[str, int]], key: str) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column(key)
    t.add_column("nodes", justify="right")
    t.add_column("bytes", justify="right")
    t.add_column("size", justify="right")
    for k, v in table.items():
        t.add_row(k if k else "(none)", str(v["count"]), f"{v['bytes']:,}", _fmt_bytes(v["bytes"]))
    return t


def _section(console: Any, rep: dict[str, Any], title: str) -> None:
    """One file's figures (or the figures across ranks)."""
    console.rule(title)
    kinds = ", ".join(f"{k} {v}" for k, v in rep["node_types"].items())
    console.print(f"{rep['nodes']} nodes: {kinds}")
    console.print(f"{_ops_text(rep, 'cpu')}; {_ops_text(rep, 'gpu')}")
    if rep["top_kernels"]:
        console.print(_ops_table("top GPU ops by total duration", rep["top_kernels"]))
    if rep["top_cpu_ops"]:
        console.print(_ops_table("top CPU ops by total duration", rep["top_cpu_ops"]))
    comm = rep["comm"]
    if comm["nodes"]:
        impls = ", ".join(f"{k} {v['count']:,}" for k, v in comm["by_implementation"].items())
        console.print(f"communication: {comm['nodes']} nodes ({impls}), {comm['bytes']:,} bytes "
                      f"({_fmt_bytes(comm['bytes'])})")
        console.print(_comm_table("per process group", comm["by_pg"], "pg_name"))
        console.print(_comm_table("per collective type", comm["by_type"], "type"))
    else:
        console.print("communication: none")
    cp = rep.get("critical_path")
    if cp is None:
        console.print("critical path: n/a (no dependency graph in this file)")
    elif "per_rank" in cp:
        per = ", ".join(f"{k}: {v:,.1f}" for k, v in cp["per_rank"].items())
        console.print(f"critical path: longest {cp['max_us']:,.1f} µs on rank {cp['rank']} "
                      f"(µs per rank: {per})")
    else:
        _critical_section(console, cp)


def _critical_section(console: Any, cp: dict[str, Any]) -> None:
    """One file's critical path: its length, how its steps were released, its top contributors."""
    extra = f", {cp['dangling_deps']} dangling deps ignored" if cp["dangling_deps"] else ""
    if cp["cycle_blocked_nodes"]:
        console.print(f"[yellow]warning:[/] the dependencies hold cycles "
                      f"({cp['cycle_blocked_nodes']} nodes on or behind one); the path below ignores "
                      f"the {cp['dropped_back_edges']} dependencies on later nodes of the file "
                      "(approximate)")
    if cp["length_us"] is None:
        console.print(f"critical path: n/a (the replay refused the graph, see the warning){extra}")
        return
    console.print(f"critical path: {cp['length_us']:,.1f} µs over {cp['nodes']} nodes "
                  f"(ids {cp['first_id']} -> {cp['last_id']}){extra}")
    if "lane_links" in cp:
        more = "".join(f", {cp[k]} {text}" for k, text in (
            ("start_links", "start while an op they depend on runs"),
            ("end_links", "end after an op they were blocked on")) if cp.get(k))
        console.print(f"  {cp['model']}: {cp['lane_links']} steps wait for the op before on the "
                      f"thread or stream, {cp['dep_links']} for a dependency{more}; over the "
                      f"dependencies alone {cp['dependency_only_us']:,.1f} µs")
    if cp["top"]:
        length = cp["length_us"] or 0.0
        extra_rows = [{"name": BETWEEN_LABELS.get(k, k), "count": "", "total_us": v,
                       "share": v / length if length else 0.0}
                      for k, v in cp.get("between_ops_us", {}).items()]
        console.print(_ops_table("critical path: top contributors (their time on it)", cp["top"],
                                 share=True, others=extra_rows))


def run_stats(paths: Sequence[str | os.PathLike[str]], as_json: bool = False, top: int = 10,
              file: IO[str] | None = None, progress: bool = False) -> dict[str, Any]:
    """What the CLI calls: compute, then print a table or JSON; returns the report."""
    report = compute_stats(paths, top, progress)
    out = file or sys.stdout
    if as_json:
        import json

        out.write(json.dumps(report, indent=2) + "\n")
    else:
        render(report, out)
    return report
