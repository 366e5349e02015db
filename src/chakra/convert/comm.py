"""Which nodes are communication nodes, and their Chakra comm attributes.

Two sources of collectives:

* GPU traces (NCCL): the ``ncclKernel_*`` / ``ncclDevKernel_*`` GPU node is the
  COMM node; its collective, size and process group come from the host comm ops
  above its launcher (``nccl:<coll>`` < ``record_param_comms`` < ``c10d::*``).
  The host ops stay COMP CPU ops, so each collective is counted once.
* CPU-only collectives (gloo, or a host ET without GPU nodes): the backend's own
  record (``gloo:<coll>`` or ``nccl:<coll>``) becomes the COMM node with
  ``is_cpu_op = false`` (the simulator rejects CPU comm nodes).  It keeps its id,
  its place in its thread's call order and its exclusive duration; its
  ``c10d::*`` wrapper stays a COMP node (usually ~0 exclusive time, since the
  time is in the backend record) and the comm node depends on it.

gloo records are not children of their ``c10d::*`` op in the ET (they hang
under the step, often on a gloo worker thread), so they are paired by record
function id: a gloo record belongs to the latest ``c10d::*`` op started before
it that has no gloo record yet.  The c10d op gives the real collective (gloo
implements ``_reduce_scatter_base_`` with an ``all_reduce`` record) and the
send/recv peer and tag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chakra.host.comm import (
    canonical_collective,
    comm_info,
    comm_size_bytes,
    comm_type_of,
    is_nccl_kernel,
    iter_tensors,
    kernel_collective,
)
from chakra.host.model import CommInfo, HostOp, HostTrace, ProcessGroup

P2P = ("send", "recv")


@dataclass(slots=True)
class CommFields:
    """The Chakra attributes of one comm node."""

    collective: str        # canonical name (host.comm): allreduce, all_to_all, send, ...
    comm_type: int | None  # CollectiveCommType for COMM_COLL, None for send/recv
    size: int              # bytes
    pg_name: str
    src: int = -1
    dst: int = -1
    tag: int = 0
    seq: int | None = None  # the process group's collective sequence number (record_param_comms), if recorded


def tensor_bytes(values: Any) -> int:
    """Sum of num_elem * elem_bytes over every tensor value in ``values`` (nested lists included)."""
    return sum(t[3] * t[4] for t in iter_tensors(values))


def op_tensor_bytes(op: HostOp) -> int:
    """Bytes of the larger side of an op's tensors: max(input bytes, output bytes).

    A ``nccl:*`` / ``gloo:*`` record carries only its input tensor, so for an
    all_gather this is the per-rank input; the caller completes it from the
    record_param_comms / c10d records of the same collective (see ``core._fields``).
    """
    return max(tensor_bytes(op.inputs.values), tensor_bytes(op.outputs.values))


def pair_gloo_with_c10d(names: Sequence[str], rf_ids: Sequence[Any], ids: Sequence[int]) -> dict[int, int]:
    """``{gloo op index: c10d op index}`` by record function id order (see module doc).

    The ops are given as columns (``names[i]``, ``rf_ids[i]``, ``ids[i]`` of op index ``i``)."""
    seq: list[tuple[int, int, int]] = []  # (rf_id, kind 0=c10d 1=gloo, index)
    kinds: dict[str, int] = {}   # name -> 0 (c10d), 1 (gloo), 2 (other)
    for i, name in enumerate(names):
        kind = kinds.get(name)
        if kind is None:
            kind = kinds[name] = 0 if name.startswith("c10d::") else 1 if name.startswith("gloo:") else 2
        if kind == 2:
            continue
        rf = rf_ids[i] if rf_ids[i] is not None else ids[i]
        seq.append((rf, kind, i))
    seq.sort()
    pending: list[int] = []
    out: dict[int, int] = {}
    for _, kind, i in seq:
        if kind == 0:
            pending.append(i)
        elif pending:
            out[i] = pending.pop()
    return out


def infer_rank(trace: HostTrace, infos: dict[int, CommInfo]) -> int | None:
    """The trace's rank: ET+ ``rank``, else the ``rank`` input most record_param_comms agree on,
    else the one rank common to all its process groups.

    record_param_comms records the caller's rank, except for rooted collectives
    (broadcast, reduce, ...) where it is the root; those are not counted.
    """
    if trace.rank is not None:
        return trace.rank
    votes: Counter[int] = Counter()
    for info in infos.values():
        if info.rank is None or info.rank < 0:
            continue
        canon = canonical_collective(info.collective_name)
        if canon in ("broadcast", "reduce", "gather", "scatter", "wait", ""):
            continue
        votes[info.rank] += 1
    if votes:
        return votes.most_common(1)[0][0]
    # A rank's process-group table lists the groups it belongs to; when they share exactly one rank
    # (e.g. a one-rank group among them), that is this rank.
    common: set[int] | None = None
    for g in trace.process_groups:
        if g.ranks:
            common = set(g.ranks) if common is None else common & set(g.ranks)
    if common is not None and len(common) == 1:
        return next(iter(common))
    return None


class PgNames:
    """Process-group names as the simulator wants them: numeric strings, "" for the whole world."""

    def __init__(self, groups: list[ProcessGroup]) -> None:
        self.groups = groups
        self.by_name = {g.pg_name: g for g in groups}
        self.by_desc = {g.pg_desc: g for g in groups if g.pg_desc}
        self.number: dict[str, str] = {}
        used = {g.pg_name for g in groups if g.pg_name.isdigit()}
        free = 0
        for g in groups:
            if g.pg_name.isdigit():
                self.number[g.pg_name] = g.pg_name
                continue
            while str(free) in used:
                free += 1
            self.number[g.pg_name] = str(free)   # a non-numeric name gets the first unused number
            used.add(str(free))

    def numeric(self, name: str) -> str:
        if not name or name.isdigit():
            return name
        hit = self.number.get(name)
        if hit is None and name in self.by_desc:
            hit = self.number.get(self.by_desc[name].pg_name)
        return hit if hit is not None else ""

    def global_rank(self, pg_name: str, group_rank: int) -> int:
        g = self.by_name.get(pg_name)
        if g is not None and 0 <= group_rank < len(g.ranks):
            return g.ranks[group_rank]
        return group_rank


__all__ = [
    "CommFields",
    "PgNames",
    "canonical_collective",
    "comm_info",
    "comm_size_bytes",
    "comm_type_of",
    "infer_rank",
    "is_nccl_kernel",
    "kernel_collective",
    "op_tensor_bytes",
    "pair_gloo_with_c10d",
    "tensor_bytes",
]
