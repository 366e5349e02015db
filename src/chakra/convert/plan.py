"""The state of one conversion and the results its passes hand on.

A conversion is a sequence of passes (``chakra.convert.core.run_passes``): ``tree`` (index, parents,
pre-order, call-order keys: returns a :class:`Tree`; timing: returns a :class:`Timing`), ``collectives``
(comm nodes and their fields: returns a :class:`Comm`), ``deps`` (dependencies, thread timing, output
order), then ``write`` serialises the nodes.  A pass takes the :class:`Plan` and the results of the
passes before it (the deps pass returns :class:`Deps`).  Every result is declared here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from chakra import schema as pb
from chakra.convert.columns import Columns, columns_from_trace
from chakra.convert.comm import CommFields, PgNames
from chakra.convert.serial import Serializer, dumps_any
from chakra.convert.threads import ThreadTiming
from chakra.host.model import HostTrace
from chakra.tunables import CORRUPT_TIME_US

log = logging.getLogger(__name__)

ET_VERSION = "0.0.4"
_KNOWN_COLLECTIVES = frozenset({"allreduce", "allgather", "reduce_scatter", "broadcast", "all_to_all",
                                "reduce", "gather", "scatter", "barrier", "send", "recv"})
#: Collective types the simulator does not run; ``astrasim_safe`` writes them as COMP nodes.
UNSIMULATED_COMM_TYPES = frozenset({pb.REDUCE, pb.GATHER, pb.SCATTER, pb.BARRIER, pb.REDUCE_SCATTER_BLOCK})


@dataclass(slots=True)
class ConvertStats:
    """What a conversion produced; ``ConvertReport`` adds file names and timings."""

    nodes: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    cpu_ops: int = 0
    gpu_ops: int = 0
    comm_nodes: int = 0
    cpu_comm_nodes: int = 0
    comm_as_comp: int = 0       # collectives written as COMP nodes (astrasim_safe)
    ctrl_edges: int = 0
    data_edges: int = 0
    sync_edges: int = 0
    inter_thread_edges: int = 0
    waits: int = 0              # blocking waits taken out of exclusive/idle time, now dependencies
    waited_us: int = 0          # ... and how much time they were
    timed: bool = False
    rank: int | None = None
    warnings: list[str] = field(default_factory=list)


_TYPE_NAMES = {
    pb.METADATA_NODE: "METADATA_NODE", pb.COMP_NODE: "COMP_NODE", pb.COMM_COLL_NODE: "COMM_COLL_NODE",
    pb.COMM_SEND_NODE: "COMM_SEND_NODE", pb.COMM_RECV_NODE: "COMM_RECV_NODE",
}


def _num(v: Any) -> bool:
    return (type(v) is int or type(v) is float) and -CORRUPT_TIME_US < v < CORRUPT_TIME_US


def _warn(stats: ConvertStats, msg: str) -> None:
    log.warning("%s", msg)
    stats.warnings.append(msg)


_dumps = dumps_any


class Plan:
    """One conversion's input: the trace, its columns (per-op lists, index = position of the op in the
    file), the serializer and the statistics the passes add to; the passes return their own results
    (:class:`Tree`, :class:`Timing`, :class:`Comm`, :class:`Deps`)."""

    def __init__(self, trace: HostTrace, *, astrasim_safe: bool = False, columns: Columns | None = None,
                 serializer: Serializer | None = None) -> None:
        self.trace = trace
        self.astrasim_safe = astrasim_safe
        cols = columns if columns is not None else columns_from_trace(trace)
        self.cols = cols
        self.ids = cols.ids
        self.names = cols.names
        self.kinds = cols.kinds
        self.full = cols.full   # the HostOp where needed (all of them unless load_columns made cols)
        self.stats = ConvertStats()
        n = len(cols.ids)
        self.n = n
        self.index: dict[int, int] = cols.index
        self.is_gpu = cols.is_gpu
        self.pgn = PgNames(trace.process_groups)
        self.ser = serializer if serializer is not None else Serializer()


class Tree(NamedTuple):
    """What the tree pass (``tree.build_tree``) gives the later ones, per op (index: position in the file)."""

    par: list[int]        # the parent's position (-1: none)
    pos: list[int]        # the position in ET pre-order
    preorder: list[int]   # the ops in ET pre-order
    rfk: list[int]        # call-order key (the record function id, else the parent's)


class Timing(NamedTuple):
    """What the timing pass (``tree.compute_timing``) gives the later ones."""

    ts: list[float | None]   # the ET+ ts (µs) of a timed op, else None
    start: list[int]         # start, µs since ``origin``
    dur: list[int]           # the duration it runs (µs): exclusive for a CPU op
    origin: float            # the measured window's start (µs), else the first start
    span_lo: float           # the trace's first start and last end (µs)
    span_hi: float


@dataclass(slots=True)
class Comm:
    """What the collectives pass (``collectives.find_comm``) gives the later ones."""

    ntype: list[int]                 # per op: its Node type (deps adds METADATA_NODE)
    infos: dict[int, Any]            # host comm op -> its CommInfo
    rank: int | None                 # the trace's rank (``comm.infer_rank``)
    comm: dict[int, CommFields] = field(default_factory=dict)   # comm node -> its fields
    cpu_comm: set[int] = field(default_factory=set)             # the comm nodes that are host records
    gloo_pairs: dict[int, int] = field(default_factory=dict)    # gloo record -> the c10d call it ran
    gloo_extra: dict[int, int] = field(default_factory=dict)    # further records of a call run as several


@dataclass(slots=True)
class Deps:
    """What the deps pass (``deps.add_deps``, ``deps.add_thread_timing``) gives ``deps.output_order`` and
    the writer."""

    data: list[list[int]]     # per op: the ops it waits for (data dependencies)
    ctrl: list[int] = field(default_factory=list)   # per op: the kept ET parent (-1: none)
    soft: set[tuple[int, int]] = field(default_factory=set)   # derived edges a cycle may break (output_order)
    # (comm node, the one launched before it in its process group): the launch-order edges; and per comm
    # node (its process group's chain, its place in it) -- see deps.chain_by_launch
    launch: set[tuple[int, int]] = field(default_factory=set)
    launch_at: dict[int, tuple[int, int]] = field(default_factory=dict)
    tt: ThreadTiming | None = None   # per-thread pieces and waits (convert.threads)
