"""The typed model of a PyTorch host execution trace (ET).

Kept small on purpose: every later stage (link, convert, stats) reads these
objects and nothing else of the raw JSON, so the loaders are the only place that
knows the schema families.  ``__slots__`` keeps a million ops in well under a GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass(slots=True)
class HostOp:
    """One node of the host ET."""

    id: int
    name: str
    parent: int            # ctrl_deps (1.0.2+) or parent (1.0.1); the process root is its own parent
    kind: str = OP
    rf_id: int | None = None
    tid: int = 0
    fw_parent: int = 0
    seq_id: int = -1
    scope: int = 0
    fw_tid: int = 0
    op_schema: str = ""
    inputs: IOInfo = field(default_factory=IOInfo)
    outputs: IOInfo = field(default_factory=IOInfo)
    attrs: dict[str, Any] = field(default_factory=dict)  # every other attribute, name -> value
    attr_types: dict[str, str] = field(default_factory=dict)  # name -> ET type string where known
    index: int = 0         # position in the file's node list

    @property
    def is_comm(self) -> bool:
        return is_comm_name(self.name)


def is_comm_name(name: str) -> bool:
    """Communication ops: record_param_comms, nccl:*, c10d::*, gloo:*."""
    return (
        name == "record_param_comms"
        or name.startswith("nccl:")
        or name.startswith("c10d::")
        or name.startswith("gloo:")
    )


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
