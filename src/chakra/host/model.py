"""The typed model of a PyTorch host execution trace (ET).

Kept small on purpose: every later stage (link, convert, stats) reads these
objects and nothing else of the raw JSON, so the loaders are the only place that
knows the schema families.  ``__slots__`` keeps a million ops in well under a GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

import orjson

from chakra.host.collective_names import is_comm_op_name

# HostOp.kind values
OP = "op"                    # an operator / record_function
THREAD_ROOT = "thread_root"  # [pytorch|profiler|execution_trace|thread]
PROCESS_ROOT = "process_root"  # [pytorch|profiler|execution_trace|process], id 1
METADATA = "metadata"        # ## process_group:init ##

PG_INIT_NAME = "## process_group:init ##"


@dataclass(slots=True)
class IOInfo:
    """Inputs or outputs of a node as the ET records them (parallel lists)."""

    values: list[Any] = field(default_factory=list)
    shapes: list[Any] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    strides: list[Any] | None = None


#: ``HostOp.io``: the input values, shapes, types and strides, then the outputs' (strides None when absent)
IOText = tuple[bytes, bytes, bytes, bytes | None, bytes, bytes, bytes, bytes | None]

#: ``HostOp.io`` of an op without inputs and outputs (the flat layout's lists all empty)
EMPTY_IO: IOText = (b"[]", b"[]", b"[]", None, b"[]", b"[]", b"[]", None)


class _LazyIO:
    """``HostOp.inputs`` / ``outputs``: parsed from the op's ``io`` text on first use, then kept; assigning
    one drops the text (the other is parsed first, so both stay what they were)."""

    def __init__(self, slot: str, at: int) -> None:
        self.slot = slot
        self.at = at

    @overload
    def __get__(self, op: None, owner: type | None = None) -> _LazyIO: ...

    @overload
    def __get__(self, op: HostOp, owner: type | None = None) -> IOInfo: ...

    def __get__(self, op: HostOp | None, owner: type | None = None) -> IOInfo | _LazyIO:
        if op is None:
            return self
        value = getattr(op, self.slot)
        if value is None:
            assert op.io is not None   # (an op has its lists or its text)
            value = _parse_io(op.io, self.at)
            setattr(op, self.slot, value)
        return value

    def __set__(self, op: HostOp, value: IOInfo) -> None:
        if op.io is not None:
            HostOp.inputs.__get__(op)
            HostOp.outputs.__get__(op)
            op.io = None
        setattr(op, self.slot, value)


class HostOp:
    """One node of the host ET (or ET+).

    ``io``: the node's inputs and outputs as the JSON text they have in the file, canonical (what orjson
    writes for their parsed value), eight pieces: the input values, shapes, types and strides, then the
    same for the outputs (strides None when the node has none).  The writers copy the pieces and never
    parse them; ``inputs`` / ``outputs`` are parsed from them on first use only (comm ops, the
    process-group node), which is what keeps a million loaded ops small.  An op built from lists
    (``inputs=IOInfo(...)``) has ``io`` None; assigning ``inputs`` / ``outputs`` drops ``io``.

    ``attrs`` / ``attr_types`` of ops loaded from a file may be shared between ops with the same
    attributes: treat them as read-only (assign a new dict to change them).
    """

    __slots__ = ("id", "name", "parent", "kind", "rf_id", "tid", "fw_parent", "seq_id", "scope", "fw_tid",
                 "op_schema", "_inputs", "_outputs", "attrs", "attr_types", "index", "io")

    def __init__(self, id: int, name: str, parent: int, kind: str = "op", rf_id: int | None = None,
                 tid: int = 0, fw_parent: int = 0, seq_id: int = -1, scope: int = 0, fw_tid: int = 0,
                 op_schema: str = "", inputs: IOInfo | None = None, outputs: IOInfo | None = None,
                 attrs: dict[str, Any] | None = None, attr_types: dict[str, str] | None = None,
                 index: int = 0, io: IOText | None = None) -> None:
        self.id = id
        self.name = name
        self.parent = parent          # ctrl_deps (1.0.2+) or parent (1.0.1); the process root is its own
        self.kind = kind
        self.rf_id = rf_id
        self.tid = tid
        self.fw_parent = fw_parent
        self.seq_id = seq_id
        self.scope = scope
        self.fw_tid = fw_tid
        self.op_schema = op_schema
        self.io = io
        self._inputs = inputs if inputs is not None or io is not None else IOInfo()
        self._outputs = outputs if outputs is not None or io is not None else IOInfo()
        self.attrs = attrs if attrs is not None else {}       # every other attribute, name -> value
        self.attr_types = attr_types if attr_types is not None else {}  # name -> ET type where known
        self.index = index            # position in the file's node list

    inputs = _LazyIO("_inputs", 0)    # (parsed from ``io`` on first use)
    outputs = _LazyIO("_outputs", 4)

    @property
    def is_comm(self) -> bool:
        return is_comm_name(self.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HostOp):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in _COMPARED)

    __hash__ = None  # type: ignore[assignment]  # (mutable, compared by value: unhashable)

    def __repr__(self) -> str:
        return f"HostOp({', '.join(f'{k}={getattr(self, k)!r}' for k in _COMPARED)})"


_COMPARED = ("id", "name", "parent", "kind", "rf_id", "tid", "fw_parent", "seq_id", "scope", "fw_tid",
             "op_schema", "inputs", "outputs", "attrs", "attr_types", "index")


def _parse_io(io: IOText, at: int) -> IOInfo:
    loads = orjson.loads
    values, shapes, types, strides = io[at:at + 4]
    assert values is not None and shapes is not None and types is not None   # (only strides may be None)
    return IOInfo(loads(values), loads(shapes), loads(types), loads(strides) if strides is not None else None)


def is_comm_name(name: str) -> bool:
    """Communication ops of every implementation the table names (``chakra.host.collective_names``):
    record_param_comms, c10d::*, nccl:*, gloo:*, mpi:*, vllm::all_reduce, symm_mem::* collectives ..."""
    return is_comm_op_name(name)


@dataclass(slots=True)
class ProcessGroup:
    """One process group from ``## process_group:init ##`` or Kineto ``distributedInfo``."""

    pg_name: str
    pg_desc: str = ""
    backend: str = ""
    ranks: tuple[int, ...] = ()   # global ranks; an empty list in the trace is resolved to all ranks
    group_size: int = 0
    group_count: int = 0
    backend_id: int | None = None  # 1.0.2 payloads: the id record_param_comms carries instead of a pg name


@dataclass(slots=True)
class CommInfo:
    """Communication fields of a comm op (record_param_comms attrs or inputs)."""

    collective_name: str = ""
    pg_name: str = ""
    pg_desc: str = ""
    dtype: str = ""
    in_msg_nelems: int = 0
    out_msg_nelems: int = 0
    in_split_size: list[int] = field(default_factory=list)
    out_split_size: list[int] = field(default_factory=list)
    global_rank_start: int | None = None
    global_rank_stride: int | None = None
    pg_size: int | None = None
    elem_bytes: int = 0
    # Added by the host loader (chakra.host.comm); all optional.
    seq: int | None = None         # record_param_comms sequence number (pairs a collective with its wait)
    rank: int | None = None        # record_param_comms "rank" input: own rank, or the root (broadcast)
    pg_id: int | None = None       # 1.0.1/1.0.2: process-group pointer / backend id instead of a pg name
    peer: int | None = None        # send: dst, recv: src (c10d::send / c10d::recv_)
    tag: int | None = None         # send/recv tag
    root: int | None = None        # broadcast/reduce/gather/scatter root rank (c10d ops)
    world_size: int | None = None  # record_param_comms trailing world-size input (1.0.2+)
    source: str = ""               # where the fields came from: "attrs", "inputs" or "op"


@dataclass(slots=True)
class HostTrace:
    """A loaded host ET."""

    path: str
    schema: str
    layout: str                      # "flat" (1.0.1) or "chakra" (1.0.2+)
    pid: int | None = None
    time: str | None = None
    start_ts: int | None = None
    finish_ts: int | None = None
    ops: list[HostOp] = field(default_factory=list)  # file order
    by_id: dict[int, HostOp] = field(default_factory=dict)
    process_groups: list[ProcessGroup] = field(default_factory=list)
    metadata_id: int | None = None   # id of ## process_group:init ##, if any
    extra: dict[str, Any] = field(default_factory=dict)  # other top-level keys, kept verbatim
    warnings: list[str] = field(default_factory=list)
    # Added by the host loader: top-level "rank"/"world_size" of ET+ files, else world size from the
    # default process group's group_size.
    rank: int | None = None
    world_size: int | None = None
