"""Collective fields of GPU nodes and gloo ops, and the ET+ process-group table.

NCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``) get ``pg_name``,
``collective_name`` and ``comm_size`` (bytes) from, in order:

1. the kernel's own Kineto args (newer PyTorch): ``Process Group Name``,
   ``Collective name``, ``In msg nelems`` / ``Out msg nelems`` x ``dtype`` size;
2. the launching host op and its host ancestors (at most a few levels: the
   launch sits in ``nccl:*`` whose parent is ``record_param_comms``), through
   ``chakra.host.comm.comm_info`` — the first op that yields a collective name
   wins, later ones only fill what is missing;
3. the kernel name (``ncclDevKernel_AllReduce_Sum_f16_RING_LL`` -> ``allreduce``).

``collective_name`` is the canonical spelling of ``chakra.host.comm``
(``allreduce``, ``all_to_all``, ...).  ``comm_size`` follows
``comm_size_bytes``: max(in, out) elements x element size.

gloo collectives run on CPU: a ``c10d::*`` op enqueues the work, a ``gloo:*``
record does it (often on a gloo worker thread).  The linker recognises the
``gloo:*`` host ops and annotates them with the same three fields plus
``comm_backend: "gloo"`` so the converter can make communication nodes of them.
"""

from __future__ import annotations

from typing import Any

from chakra.device.model import KinetoEvent
from chakra.host.comm import (
    canonical_collective,
    comm_info,
    comm_size_bytes,
    is_nccl_kernel,
    kernel_collective,
)
from chakra.host.model import CommInfo, HostOp, HostTrace, ProcessGroup
from chakra.host.process_groups import (
    group_to_record,
    groups_from_kineto,
    merge_process_groups,
    resolve_ranks,
)

_MAX_UP = 4  # host ancestors searched for comm info

# bytes per element of the dtype names Kineto and the host ET write
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "int64": 8,
    "long": 8,
    "long int": 8,
    "int16": 2,
    "short": 2,
    "int8": 1,
    "uint8": 1,
    "unsigned char": 1,
    "char": 1,
    "bool": 1,
    "byte": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "complexfloat": 8,
    "complexdouble": 16,
}


def is_comm_kernel(ev: KinetoEvent) -> bool:
    """A communication kernel: NCCL/RCCL by name, or any kernel Kineto labels with a collective."""
    return is_nccl_kernel(ev.name) or ev.collective


def dtype_bytes(dtype: Any) -> int:
    if not isinstance(dtype, str):
        return 0
    key = dtype.strip().lower()
    if key.startswith("torch."):
        key = key[6:]
    if key.startswith("c10::"):
        key = key[5:]
    return _DTYPE_BYTES.get(key, 0)


def _int(v: Any) -> int:
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return 0
    return 0


class CommResolver:
    """Memoised comm_info lookups over one host trace."""

    def __init__(self, host: HostTrace) -> None:
        self.host = host
        self._info: dict[int, CommInfo | None] = {}

    def info(self, op: HostOp) -> CommInfo | None:
        hit = self._info.get(op.id, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        info = comm_info(op, self.host.process_groups) if op.is_comm else None
        self._info[op.id] = info
        return info

    def up_chain(self, host_id: int) -> list[CommInfo]:
        """CommInfo of the op and its host ancestors that are comm ops (innermost first)."""
        out: list[CommInfo] = []
        by_id = self.host.by_id
        op = by_id.get(host_id)
        for _ in range(_MAX_UP):
            if op is None:
                break
            info = self.info(op)
            if info is not None and canonical_collective(info.collective_name) != "wait":
                out.append(info)
            parent = by_id.get(op.parent)
            if parent is None or parent is op:
                break
            op = parent
        return out

    def gpu_fields(self, ev: KinetoEvent, launcher: int) -> tuple[str, str, int]:
        """(pg_name, collective_name, comm_size bytes) of a GPU op; ("", "", 0) when not a collective."""
        if not is_comm_kernel(ev):
            return "", "", 0
        args = ev.args
        pg = args.get("Process Group Name")
        pg_name = str(pg) if pg is not None else ""
        coll = args.get("Collective name")
        coll_name = canonical_collective(str(coll)) if coll else ""
        size = 0
        nbytes = dtype_bytes(args.get("dtype"))
        if nbytes:
            size = max(_int(args.get("In msg nelems")), _int(args.get("Out msg nelems"))) * nbytes
        for info in self.up_chain(launcher):
            if not coll_name and info.collective_name:
                coll_name = canonical_collective(info.collective_name)
            if not pg_name and info.pg_name:
                pg_name = info.pg_name
            size = max(size, comm_size_bytes(info))  # an nccl:* record holds only its input tensor
        if not coll_name:
            coll_name = kernel_collective(ev.name)
        return pg_name, coll_name, size


def gloo_fields(resolver: CommResolver, op: HostOp) -> dict[str, Any] | None:
    """ET+ fields of a ``gloo:*`` host op (None for any other op)."""
    if not op.name.startswith("gloo:"):
        return None
    info = resolver.info(op)
    coll = canonical_collective(op.name)
    pg_name = ""
    size = 0
    if info is not None:
        size = comm_size_bytes(info)
        pg_name = info.pg_name
    # the enqueueing c10d op (host parent when the ET records it so) may know more
    parent = resolver.host.by_id.get(op.parent)
    if parent is not None and parent.name.startswith("c10d::"):
        pinfo = resolver.info(parent)
        if pinfo is not None:
            pg_name = pg_name or pinfo.pg_name
            size = max(size, comm_size_bytes(pinfo))  # the gloo record holds only its input tensor
    return {"pg_name": pg_name, "collective_name": coll, "comm_size": size, "comm_backend": "gloo"}


def process_groups(
    host: HostTrace, kineto_dist_info: dict[str, Any] | None, world_size: int | None
) -> list[dict[str, Any]]:
    """ET+ ``process_groups``: host ``## process_group:init ##`` merged with Kineto ``distributedInfo``."""
    primary: list[ProcessGroup] = list(host.process_groups)
    secondary = groups_from_kineto(kineto_dist_info or None, world_size) if kineto_dist_info else []
    merged = merge_process_groups(primary, secondary)
    resolve_ranks(merged, world_size)
    return [group_to_record(g) for g in merged]
