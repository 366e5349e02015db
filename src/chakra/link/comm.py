"""Collective fields of GPU nodes and CPU-run records, and the ET+ process-group table.

Communication kernels (the table's, ``chakra.host.collective_names``: ``ncclKernel_*``,
``ncclDevKernel_*``, vLLM's custom all-reduce, torch symmetric memory, NVSHMEM, DeepEP; or any kernel
Kineto labels with a ``Collective name``) get ``pg_name``, ``collective_name`` and ``comm_size`` (bytes)
from, in order:

1. the kernel's own Kineto args (newer PyTorch): ``Process Group Name``,
   ``Collective name``, ``In msg nelems`` / ``Out msg nelems`` x ``dtype`` size;
2. the launching host op and its host ancestors (at most a few levels: the
   launch sits in ``nccl:*`` whose parent is ``record_param_comms``, or in ``symm_mem::*`` under
   ``vllm::all_reduce``), through
   ``chakra.host.comm.comm_info`` — the first op that yields a collective name
   wins, later ones only fill what is missing;
3. the kernel name (``ncclDevKernel_AllReduce_Sum_f16_RING_LL`` -> ``allreduce``,
   ``cross_device_reduce_1stage`` -> ``allreduce``).

``collective_name`` is the canonical spelling of ``chakra.host.comm``
(``allreduce``, ``all_to_all``, ...).  ``comm_size`` follows
``comm_size_bytes``: max(in, out) elements x element size.

gloo collectives run on CPU: a ``c10d::*`` op enqueues the work, a ``gloo:*``
record does it (often on a gloo worker thread); so do MPI's ``mpi:*`` and UCC's ``ucc:*``.  The linker
recognises these records and annotates them with the same three fields plus
``comm_backend`` (``"gloo"``, ``"mpi"``, ``"ucc"``) so the converter can make communication nodes of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from chakra.device.model import KinetoEvent, KinetoTrace
from chakra.host.collective_names import (
    CPU_RECORD_PREFIXES,
    NCCL,
    implementation_of,
    is_comm_kernel_name,
    is_cpu_record,
)
from chakra.host.comm import (
    canonical_collective,
    comm_info,
    comm_size_bytes,
    kernel_collective,
)
from chakra.host.keys import COLLECTIVE_NAME, COMM_SIZE, PG_NAME
from chakra.host.model import CommInfo, HostOp, HostTrace, ProcessGroup
from chakra.host.process_groups import (
    group_to_record,
    groups_from_kineto,
    merge_process_groups,
    resolve_ranks,
)
from chakra.tunables import COMM_ANCESTORS_MAX

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
    """A communication kernel: one the table names, or any kernel Kineto labels with a collective."""
    return ev.collective or is_comm_kernel_name(ev.name)


def count_collectives(host: HostTrace, kineto: KinetoTrace, gpu_ops: Sequence[Any]) -> dict[str, Any]:
    """The ET+ ``link_stats`` counts of collectives: ``nccl_kernels`` (NCCL/RCCL kernels and any other kernel
    Kineto labels with a collective), ``gloo_collectives`` (gloo records), and, only when there are any,
    ``collectives_other``: ``{implementation: count}`` of the communication kernels and CPU-run records
    of every other implementation of the table (vLLM custom all-reduce, torch symmetric memory, MPI ...)."""
    events = kineto.events
    nccl = 0
    other: Counter[str] = Counter()
    for g in gpu_ops:
        ev = events[g.pos]
        if not is_comm_kernel(ev):
            continue
        impl = implementation_of(ev.name, kernel=True)
        if impl in ("", NCCL):
            nccl += 1
        else:
            other[impl] += 1
    gloo = 0
    for op in host.ops:
        if op.name.startswith(CPU_RECORD_PREFIXES):
            impl = implementation_of(op.name, kernel=False)
            if impl == "gloo":
                gloo += 1
            else:
                other[impl] += 1
    out: dict[str, Any] = {"nccl_kernels": nccl, "gloo_collectives": gloo}
    if other:
        out["collectives_other"] = dict(sorted(other.items()))
    return out


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
        for _ in range(COMM_ANCESTORS_MAX):
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
    """ET+ fields of a record that runs its collective on a CPU thread (``gloo:*``, ``mpi:*``, ``ucc:*``;
    None for any other op)."""
    if not is_cpu_record(op.name):
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
    return {PG_NAME: pg_name, COLLECTIVE_NAME: coll, COMM_SIZE: size,
            "comm_backend": op.name.partition(":")[0]}


def process_groups(
    host: HostTrace, kineto_dist_info: dict[str, Any] | None, world_size: int | None
) -> list[dict[str, Any]]:
    """ET+ ``process_groups``: host ``## process_group:init ##`` merged with Kineto ``distributedInfo``."""
    primary: list[ProcessGroup] = list(host.process_groups)
    secondary = groups_from_kineto(kineto_dist_info or None, world_size) if kineto_dist_info else []
    merged = merge_process_groups(primary, secondary)
    resolve_ranks(merged, world_size)
    return [group_to_record(g) for g in merged]
