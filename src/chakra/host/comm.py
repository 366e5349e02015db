"""Communication fields of host ET ops: ``record_param_comms``, ``nccl:*``, ``c10d::*``, ``gloo:*`` and
the other ops of the collective table (``chakra.host.collective_names``: ``vllm::all_reduce``,
``symm_mem::*`` ...).

Where the fields live depends on the schema:

* 1.1.0+: ``record_param_comms`` carries attrs ``collective_name, dtype,
  in_msg_nelems, out_msg_nelems, in_split_size, out_split_size (JSON text),
  global_rank_start, global_rank_stride, pg_name, pg_desc, pg_size``.
* Older schemas (1.0.1 in the DLRM traces, 1.0.2, 1.0.3) only have the
  positional ``inputs`` of the record function, read off the real traces::

      [tensors?, seq, pg, rank, collective_name, in_split_sizes, out_split_sizes, *tail]

  - ``tensors``: the input tensor (``Tensor(...)``) or tensor list
    (``GenericList[Tensor(...)]``); absent for ``wait`` records.  The output
    tensors are the node's ``outputs``.
  - ``seq``: the collective's sequence number; a later ``wait`` record repeats it.
  - ``pg``: an Int in 1.0.1 (the ProcessGroup object's address, e.g.
    94594108284448; 0 for ``wait``) and 1.0.2 (the ``backend_id`` that the
    ``## process_group:init ##`` record of the group carries); a
    ``Tuple[String,String]`` ``(pg_name, pg_desc)`` from 1.0.3 on.
  - ``rank``: the caller's rank, but the root rank for ``broadcast``.
  - ``tail``: 1.0.2 adds ``[world_size]``; 1.0.3+ adds
    ``[global_rank_start, global_rank_stride, world_size]``.

  The collective-name String sits at index 3 (no tensors) or 4 (with tensors);
  that is how the two shapes are told apart.

* ``nccl:<coll>`` / ``gloo:<coll>``: the backend's own record; name after the
  colon, tensors in ``inputs``.
* ``c10d::<op>``: the dispatcher op; argument names come from ``op_schema``
  (``output*`` arguments are outputs; ``*split_sizes``, ``dst``/``src``,
  ``tag``, ``root_rank``), with positional fallbacks when the schema is empty.
* an op of the table by name (``vllm::all_reduce``, ``symm_mem::multimem_all_gather_out`` ...): the
  collective from the table; the size is its largest tensor, input or output (the buffer an all-reduce
  reduces, the gathered ``out`` of an all-gather, the whole input of a reduce-scatter: max(in, out) as
  for c10d, where an ``out`` argument is not counted as input); the process group is a string argument
  (``group_name`` where the schema names it) that names a group of the trace's process-group table, else
  none (the whole world): a name the table does not hold (vLLM's ``tp:0``) says no ranks.

Element counts are summed over every tensor (nested lists included); a tensor
value is ``[tensor_id, storage_id, offset, num_elem, elem_bytes, device]``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from chakra.host.collective_names import (
    CANONICAL_COLLECTIVES,
    COLLECTIVE_ALIASES,
    OP_NAMES,
    canonical_collective,
    is_comm_kernel_name,
    kernel_collective,
)
from chakra.host.keys import COLLECTIVE_NAME, PG_DESC, PG_NAME, PG_SIZE
from chakra.host.model import CommInfo, HostOp, ProcessGroup, is_comm_name


def comm_type_of(canonical: str) -> int | None:
    """The Chakra ``CollectiveCommType`` enum value of a canonical collective, None if it has none."""
    from chakra import schema

    return {
        "allreduce": schema.ALL_REDUCE,
        "reduce": schema.REDUCE,
        "allgather": schema.ALL_GATHER,
        "gather": schema.GATHER,
        "scatter": schema.SCATTER,
        "broadcast": schema.BROADCAST,
        "all_to_all": schema.ALL_TO_ALL,
        "reduce_scatter": schema.REDUCE_SCATTER,
        "barrier": schema.BARRIER,
    }.get(canonical)


# ---------------------------------------------------------------------------
# Tensor helpers
# ---------------------------------------------------------------------------

def _is_tensor(v: Any) -> bool:
    return (
        isinstance(v, list) and len(v) == 6 and type(v[0]) is int and type(v[3]) is int
        and type(v[4]) is int and isinstance(v[5], str)
    )


def iter_tensors(value: Any) -> Iterator[list[Any]]:
    """Every tensor value in ``value`` (a tensor, or arbitrarily nested lists of tensors)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if _is_tensor(v):
            yield v
        elif isinstance(v, list):
            stack.extend(reversed(v))


def _nelems(values: Iterable[Any]) -> tuple[int, int]:
    """(sum of num_elem, elem_bytes of the first tensor) over tensor values."""
    total = 0
    elem = 0
    for v in values:
        for t in iter_tensors(v):
            total += t[3]
            if not elem:
                elem = t[4]
    return total, elem


_TENSOR_DTYPE_RE = re.compile(r"Tensor\(([^()]*)\)")


def _dtype_of(types: Iterable[str]) -> str:
    for t in types:
        if isinstance(t, str):
            m = _TENSOR_DTYPE_RE.search(t)
            if m:
                return m.group(1)
    return ""


def _int_list(v: Any) -> list[int]:
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else []
        except ValueError:
            return []
    if isinstance(v, list):
        return [x for x in v if type(x) is int]
    return []


def _opt_int(v: Any) -> int | None:
    return v if type(v) is int else None


# ---------------------------------------------------------------------------
# Per-family extraction
# ---------------------------------------------------------------------------

def _from_rpc_attrs(op: HostOp, info: CommInfo) -> None:
    a = op.attrs
    info.source = "attrs"
    info.collective_name = str(a.get(COLLECTIVE_NAME, ""))
    info.dtype = str(a.get("dtype", ""))
    info.in_msg_nelems = _opt_int(a.get("in_msg_nelems")) or 0
    info.out_msg_nelems = _opt_int(a.get("out_msg_nelems")) or 0
    info.in_split_size = _int_list(a.get("in_split_size"))
    info.out_split_size = _int_list(a.get("out_split_size"))
    info.global_rank_start = _opt_int(a.get("global_rank_start"))
    info.global_rank_stride = _opt_int(a.get("global_rank_stride"))
    info.pg_name = str(a.get(PG_NAME, ""))
    info.pg_desc = str(a.get(PG_DESC, ""))
    info.pg_size = _opt_int(a.get(PG_SIZE))
    # The positional inputs still carry seq, rank and the tensors' element size.
    _from_rpc_inputs(op, info, fill_only=True)


def _from_rpc_inputs(op: HostOp, info: CommInfo, fill_only: bool = False) -> None:
    values = op.inputs.values
    types = op.inputs.types
    if len(values) >= 5 and isinstance(values[4], str) and not isinstance(values[3], str):
        off = 1
    elif len(values) >= 4 and isinstance(values[3], str):
        off = 0
    else:
        return
    if not fill_only:
        info.source = "inputs"
    seq, pg, rank, name = values[off], values[off + 1], values[off + 2], values[off + 3]
    info.seq = _opt_int(seq)
    info.rank = _opt_int(rank)
    if not info.collective_name:
        info.collective_name = name
    if isinstance(pg, list) and len(pg) == 2 and all(isinstance(x, str) for x in pg):
        info.pg_name = info.pg_name or pg[0]
        info.pg_desc = info.pg_desc or pg[1]
    elif type(pg) is int and pg != 0:
        info.pg_id = pg
    if len(values) > off + 5 and not info.in_split_size:
        info.in_split_size = _int_list(values[off + 4])
        info.out_split_size = _int_list(values[off + 5])
    tail = values[off + 6:]
    if len(tail) >= 3:
        if info.global_rank_start is None:
            info.global_rank_start = _opt_int(tail[0])
        if info.global_rank_stride is None:
            info.global_rank_stride = _opt_int(tail[1])
        info.world_size = _opt_int(tail[2])
    elif len(tail) == 1:
        info.world_size = _opt_int(tail[0])
    in_n, in_b = _nelems(values[:off])
    out_n, out_b = _nelems(op.outputs.values)
    if not fill_only or not info.in_msg_nelems:
        info.in_msg_nelems = in_n
    if not fill_only or not info.out_msg_nelems:
        info.out_msg_nelems = out_n
    info.elem_bytes = info.elem_bytes or in_b or out_b
    if not info.dtype:
        info.dtype = _dtype_of(types[:off]) or _dtype_of(op.outputs.types)
    if info.pg_size is None and info.world_size is not None and info.world_size > 0:
        # the trailing Int is the group's size in the process group of this collective
        info.pg_size = info.world_size


def _from_backend_op(op: HostOp, info: CommInfo) -> None:
    """``nccl:<coll>`` / ``gloo:<coll>``: name after the colon, tensors in inputs (outputs if any)."""
    info.source = "op"
    info.collective_name = op.name.split(":", 1)[1]
    info.in_msg_nelems, info.elem_bytes = _nelems(op.inputs.values)
    out_n, out_b = _nelems(op.outputs.values)
    info.out_msg_nelems = out_n or info.in_msg_nelems
    info.elem_bytes = info.elem_bytes or out_b
    info.dtype = _dtype_of(op.inputs.types) or _dtype_of(op.outputs.types)


def _from_named_op(op: HostOp, info: CommInfo, collective: str, groups: Iterable[ProcessGroup] | None
                   ) -> None:
    """An op of the table by name (module doc): the table's collective, its largest tensor, the group its
    string argument names."""
    info.source = "op"
    info.collective_name = collective
    best = (0, 0, 0)   # (bytes, num_elem, elem_bytes)
    for side in (op.inputs.values, op.outputs.values):
        for t in iter_tensors(side):
            cand = (t[3] * t[4], t[3], t[4])
            if cand > best:
                best = cand
    info.in_msg_nelems = info.out_msg_nelems = best[1]
    info.elem_bytes = best[2]
    info.dtype = _dtype_of(op.inputs.types) or _dtype_of(op.outputs.types)
    info.pg_name = _named_group(op, groups)


def _named_group(op: HostOp, groups: Iterable[ProcessGroup] | None) -> str:
    """The pg_name of the process group an op's string argument names (its ``group_name`` argument where
    the op schema says which that is), "" when none names a group of ``groups``."""
    groups = list(groups) if groups is not None else []
    if not groups:
        return ""
    names = {g.pg_name: g.pg_name for g in groups}
    for g in groups:
        if g.pg_desc:
            names.setdefault(g.pg_desc, g.pg_name)
    values = op.inputs.values
    args = schema_arg_names(op.op_schema)
    if len(args) == len(values) and "group_name" in args:
        values = [values[args.index("group_name")]]
    for v in values:
        if isinstance(v, str) and v in names:
            return names[v]
    return ""


_SCHEMA_ARGS_RE = re.compile(r"^[^(]*\((.*)\)\s*->")


@functools.lru_cache(maxsize=1024)
def schema_arg_names(op_schema: str) -> tuple[str, ...]:
    """Argument names of an op schema string (``c10d::send(Tensor[] tensors, ..., int dst, int tag)``);
    remembered per string (a trace's collectives share a few schemas, and every kernel of one looks its
    launcher's up again)."""
    m = _SCHEMA_ARGS_RE.match(op_schema or "")
    if not m:
        return ()
    names = []
    depth = 0
    cur: list[str] = []
    for ch in m.group(1) + ",":
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            arg = "".join(cur).strip()
            cur = []
            if arg == "*" or not arg:
                continue
            decl = arg.split("=", 1)[0].strip()
            names.append(decl.rsplit(" ", 1)[-1] if " " in decl else decl)
        else:
            cur.append(ch)
    return tuple(names)


# Positional argument names of the c10d ops whose op_schema is empty in old traces (1.0.1).
_C10D_FALLBACK_ARGS: dict[str, list[str]] = {
    "allreduce": ["tensors", "process_group", "reduce_op", "timeout"],
    "allgather": ["output_tensors", "input_tensors", "process_group", "timeout"],
    "allgather_base": ["output_tensor", "input_tensor", "process_group", "timeout"],
    "reduce_scatter": ["output_tensors", "input_tensors", "process_group", "reduce_op", "timeout"],
    "reduce_scatter_base": ["output_tensor", "input_tensor", "process_group", "reduce_op", "timeout"],
    "alltoall_base": ["output", "input", "process_group", "output_split_sizes", "input_split_sizes",
                      "timeout"],
    "alltoall": ["output_tensors", "input_tensors", "process_group", "timeout"],
    "broadcast": ["tensors", "process_group", "root_rank", "root_tensor", "timeout"],
    "reduce": ["tensors", "process_group", "reduce_op", "root_rank", "root_tensor", "timeout"],
    "send": ["tensors", "process_group", "dst", "tag"],
    "recv": ["tensors", "process_group", "src", "tag"],
    "barrier": ["tensor", "process_group", "device_ids", "timeout"],
}


def _from_c10d(op: HostOp, info: CommInfo) -> None:
    info.source = "op"
    opname = op.name.split("::", 1)[1]
    info.collective_name = opname
    values = op.inputs.values
    types = op.inputs.types
    names: Sequence[str] = schema_arg_names(op.op_schema)
    if len(names) != len(values):
        names = _C10D_FALLBACK_ARGS.get(opname.strip("_"), [])
        if len(names) > len(values):
            names = names[: len(values)]
    canon = canonical_collective(opname)
    in_vals: list[Any] = []
    out_vals: list[Any] = []
    for i, v in enumerate(values):
        arg = names[i] if i < len(names) else ""
        if arg.startswith("output") and not arg.endswith("split_sizes"):
            out_vals.append(v)
        elif arg in ("output_split_sizes",):
            info.out_split_size = _int_list(v)
        elif arg in ("input_split_sizes",):
            info.in_split_size = _int_list(v)
        elif arg in ("dst", "src", "srcRank", "dstRank"):
            info.peer = _opt_int(v)
        elif arg == "tag":
            info.tag = _opt_int(v)
        elif arg == "root_rank":
            info.root = _opt_int(v)
        elif canon == "barrier":
            continue  # the barrier's dummy tensor moves no data worth counting
        else:
            in_vals.append(v)
    info.in_msg_nelems, in_b = _nelems(in_vals)
    out_n, out_b = _nelems(out_vals)
    if not out_vals:
        out_n, out_b = _nelems(op.outputs.values)
    if not out_vals and not out_n:
        # in-place collectives and send/recv: the buffer is both what goes in and what comes out
        out_n = info.in_msg_nelems
    info.out_msg_nelems = out_n
    info.elem_bytes = in_b or out_b
    info.dtype = _dtype_of(types) or _dtype_of(op.outputs.types)


def comm_info(op: HostOp, process_groups: Iterable[ProcessGroup] | None = None) -> CommInfo | None:
    """Communication fields of a comm op; None for any other op.

    ``process_groups`` (optional, e.g. ``trace.process_groups``) resolves the
    1.0.2 ``backend_id`` that old ``record_param_comms`` carry into a pg name.
    ``collective_name`` keeps the trace's own spelling; use
    :func:`canonical_collective` for the canonical one.
    """
    name = op.name
    if not is_comm_name(name):
        return None
    info = CommInfo()
    if name == "record_param_comms":
        if COLLECTIVE_NAME in op.attrs:
            _from_rpc_attrs(op, info)
        else:
            _from_rpc_inputs(op, info)
        if not info.pg_name and info.pg_id is not None and process_groups is not None:
            for g in process_groups:
                if g.backend_id is not None and g.backend_id == info.pg_id:
                    info.pg_name = g.pg_name
                    info.pg_desc = info.pg_desc or g.pg_desc
                    break
    elif name.startswith("c10d::"):
        _from_c10d(op, info)
    elif name in OP_NAMES:
        _from_named_op(op, info, OP_NAMES[name][2], process_groups)
    else:
        _from_backend_op(op, info)
    return info


def comm_size_bytes(info: CommInfo) -> int:
    """Bytes a collective moves per rank by the usual convention: max(in, out) elements x element size."""
    return max(info.in_msg_nelems, info.out_msg_nelems) * info.elem_bytes


def comm_infos(ops: Iterable[HostOp], process_groups: Iterable[ProcessGroup] | None = None,
               ) -> dict[int, CommInfo]:
    """``{op id: CommInfo}`` for every comm op of ``ops`` (one pass)."""
    groups = list(process_groups) if process_groups is not None else None
    out: dict[int, CommInfo] = {}
    for op in ops:
        if is_comm_name(op.name):
            info = comm_info(op, groups)
            if info is not None:
                out[op.id] = info
    return out


__all__ = [
    "CANONICAL_COLLECTIVES",
    "COLLECTIVE_ALIASES",
    "canonical_collective",
    "comm_info",
    "comm_infos",
    "comm_size_bytes",
    "comm_type_of",
    "is_comm_kernel_name",
    "iter_tensors",
    "kernel_collective",
    "schema_arg_names",
]
