"""Which nodes are communication nodes, and their Chakra comm attributes.

Which ops and kernels are collectives is the table's (``chakra.host.collective_names``: roles ``record``,
``call``, ``run`` and communication kernels); two kinds of comm node come of it:

* GPU collectives: the communication kernel (``ncclKernel_*`` / ``ncclDevKernel_*``, vLLM's
  ``cross_device_reduce_1stage``, symmetric memory's ``multimem_all_reduce_kernel`` ...) is the COMM
  node; its collective, size and process group come from the host comm ops above its launcher
  (``nccl:<coll>`` < ``record_param_comms`` < ``c10d::*``; ``symm_mem::*`` < ``vllm::all_reduce``).
  The host ops stay COMP CPU ops, so each collective is counted once.
* Collectives without a kernel (gloo, MPI, a host ET without GPU nodes): the ``run`` record
  (``gloo:<coll>``, ``nccl:<coll>``, ``symm_mem::*`` ...; a ``vllm::*`` call with no comm op under it,
  as vLLM's pynccl records it) becomes the COMM node with
  ``is_cpu_op = false`` (the simulator rejects CPU comm nodes).  It keeps its id,
  its place in its thread's call order and its exclusive duration; its
  ``c10d::*`` wrapper stays a COMP node (usually ~0 exclusive time, since the
  time is in the backend record) and the comm node depends on it.

gloo records (and those of the other CPU backends, MPI and UCC) are not children of their ``c10d::*`` op
in the ET (they hang under the step, often on a gloo worker thread), so they are paired by record
function id: a gloo record belongs to the latest ``c10d::*`` op started before
it that has no gloo record yet.  The c10d op gives the real collective (gloo
implements ``_reduce_scatter_base_`` with an ``all_reduce`` record) and the
send/recv peer and tag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chakra.host.collective_names import is_cpu_record
from chakra.host.comm import (
    canonical_collective,
    comm_info,
    comm_size_bytes,
    comm_type_of,
    is_comm_kernel_name,
    iter_tensors,
    kernel_collective,
)
from chakra.host.model import CommInfo, HostOp, HostTrace, ProcessGroup


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


@dataclass(frozen=True, slots=True)
class TensorSize:
    """An op's tensors, for telling which call a gloo record ran: bytes and elements of the larger side,
    and whether every tensor's element size is known (a Kineto-only trace records a ``TensorList``,
    the c10d calls' argument, without a dtype: element size 0)."""

    nbytes: int
    numel: int
    known: bool = True

    def same(self, other: TensorSize) -> bool:
        """Whether the two are the same size: the bytes where both know them, else the elements."""
        if self.known and other.known:
            return self.nbytes == other.nbytes
        return self.numel == other.numel


def op_tensor_size(op: HostOp) -> TensorSize:
    """:class:`TensorSize` of an op (bytes as :func:`op_tensor_bytes`)."""
    ins = list(iter_tensors(op.inputs.values))
    outs = list(iter_tensors(op.outputs.values))
    return TensorSize(max(sum(t[3] * t[4] for t in ins), sum(t[3] * t[4] for t in outs)),
                      max(sum(t[3] for t in ins), sum(t[3] for t in outs)),
                      all(t[4] > 0 for t in ins) and all(t[4] > 0 for t in outs))


def pair_gloo_with_c10d(names: Sequence[str], rf_ids: Sequence[Any], ids: Sequence[int],
                        size_of: Callable[[int], TensorSize] | None = None
                        ) -> tuple[dict[int, int], dict[int, int]]:
    """``({gloo op index: c10d op index}, {extra gloo op index: c10d op index})`` by record function id
    order (see module doc).

    The ops are given as columns (``names[i]``, ``rf_ids[i]``, ``ids[i]`` of op index ``i``).  When
    several c10d calls are pending (async collectives issued back to back, run by gloo's worker
    threads in either order), a gloo record goes to the one whose collective it can be (gloo runs a
    reduce_scatter as an all_reduce record), then, with ``size_of`` (op index -> :class:`TensorSize`),
    to one of its size (its bytes; its elements where a side's element size is unknown, as a
    Kineto-only trace records the calls' tensor lists), then to the latest.

    Some calls run as several gloo records (a list-form ``reduce_scatter_`` is one all_reduce record per
    chunk, on different worker threads): a record that finds no pending call but can belong to the
    latest call is an *extra* record of it: part of that one collective, not a collective of its own."""
    seq: list[tuple[int, int, int]] = []  # (rf_id, kind 0=c10d 1=gloo, index)
    kinds: dict[str, int] = {}   # name -> 0 (c10d), 1 (gloo), 2 (other)
    for i, name in enumerate(names):
        kind = kinds.get(name)
        if kind is None:
            kind = kinds[name] = 0 if name.startswith("c10d::") else 1 if is_cpu_record(name) else 2
        if kind == 2:
            continue
        rf = rf_ids[i] if rf_ids[i] is not None else ids[i]
        seq.append((rf, kind, i))
    seq.sort()
    pending: list[int] = []
    out: dict[int, int] = {}
    extra: dict[int, int] = {}
    latest = -1
    for _, kind, i in seq:
        if kind == 0:
            pending.append(i)
            latest = i
        elif not pending:
            if latest >= 0 and canonical_collective(names[latest]) in _GLOO_EXTRA.get(
                    canonical_collective(names[i].partition(":")[2]), ()):
                extra[i] = latest
        elif len(pending) == 1:
            out[i] = pending.pop()
        elif pending:
            mine = canonical_collective(names[i].partition(":")[2])
            fits = _GLOO_RUNS.get(mine, (mine,))
            size = size_of(i) if size_of is not None else None
            best = max(range(len(pending)), key=lambda k: (
                canonical_collective(names[pending[k]]) in fits,   # noqa: B023 (used at once, in this loop)
                size is not None and size.same(size_of(pending[k])),   # type: ignore[misc]  # noqa: B023
                k))
            out[i] = pending.pop(best)
    return out, extra


#: the c10d collectives a ``gloo:<name>`` record can stand for (gloo runs reduce_scatter as all_reduce)
_GLOO_RUNS = {"allreduce": ("allreduce", "reduce_scatter")}
# (an extra all_reduce record after an all_reduce is a collective of its own: only multi-record calls join)
_GLOO_EXTRA = {"allreduce": ("reduce_scatter",)}


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
    "is_comm_kernel_name",
    "kernel_collective",
    "op_tensor_bytes",
    "op_tensor_size",
    "pair_gloo_with_c10d",
    "tensor_bytes",
]
