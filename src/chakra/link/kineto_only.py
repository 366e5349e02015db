"""Link a Kineto trace alone: the host ET the linker needs, made from the Kineto trace itself.

Most users hold only what ``torch.profiler`` writes.  Rather than a second linker, this module builds
from the Kineto trace the two things the host-ET path has before its passes run -- a
:class:`~chakra.host.model.HostTrace` and the host op <-> Kineto event matching -- and hands them to the
same passes (:func:`chakra.link.api.link_traces`): GPU attachment, collectives, inter-thread and
synchronisation dependencies and the ET+ writer are those of the host-ET path, so the ET+ has the same
shape and the converter and the replay need no second path.

What the synthetic host ET holds:

- the ops: every ``cpu_op`` and ``user_annotation`` event that starts inside the selected windows
  (every ``ProfilerStep#N`` of the trace; the windows of ``annotation`` when given; the whole trace when
  there is no step), one host node each, matched to that event;
- the tree: a node's parent is the innermost enclosing op on its thread (time nesting, the Kineto
  loader's stack sweep), else the thread's root node; thread roots hang under the process root, id 1;
- the process groups: ``distributedInfo.pg_config`` as a ``## process_group:init ##`` node (the
  METADATA node of the host-ET path) with the JSON payload PyTorch 1.1.0+ writes;
- inputs: Kineto's ``Input type`` / ``Input Dims`` / ``Concrete Inputs`` (``record_shapes=True``) as
  host ET inputs: a tensor ``[0, 0, 0, numel, elem_bytes, ""]`` (no tensor or storage id, no device),
  scalars and lists as their recorded values, anything not recorded as ``None``;
- the collective fields recent PyTorch writes on ``record_param_comms`` (``Collective name``,
  ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name`` ...) as the
  attrs of a 1.1.0 host ET, so :func:`chakra.host.comm.comm_info` reads them as it reads a host ET.

Ids are stable: the same file gives the same ids.  1 is the process root, 2 the process-group node
(when there is one), then the thread roots in the order of their first op, then the ops in start order
(earlier first, the longer first when two start together, then file order); ``rf_id`` is the op's
position in that order, which is what record function ids are (handed out when a call starts).

What a host ET has and a Kineto trace does not (logged at INFO): tensor and storage ids (so no data
dependencies through tensors; the converter's call-order, stream-order, launcher and synchronisation
dependencies remain), outputs, op schemas, and the input shapes unless the profile was taken with
``record_shapes=True``.  A collective's size comes from the collective fields when PyTorch wrote them,
else from the ``nccl:*`` / ``gloo:*`` record's input tensor and the ``c10d::*`` call's tensors.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
from dataclasses import dataclass
from typing import Any

from chakra.device.model import DRIVER, LAUNCH, RUNTIME, SYNC, KinetoEvent, KinetoTrace, StepWindow
from chakra.errors import TraceFormatError, UsageError
from chakra.host.collective_names import is_backend_record
from chakra.host.comm import canonical_collective
from chakra.host.keys import COLLECTIVE_NAME, PG_DESC, PG_NAME, PG_SIZE
from chakra.host.model import METADATA, OP, PG_INIT_NAME, PROCESS_ROOT, THREAD_ROOT, HostOp, HostTrace, IOInfo
from chakra.host.process_groups import group_to_record, groups_from_kineto, infer_world_size
from chakra.link.comm import dtype_bytes
from chakra.link.etplus import CHAKRA
from chakra.link.match import MatchResult
from chakra.link.window import Window, annotation_windows

log = logging.getLogger(__name__)

#: ``link_stats["strategy"]`` of a Kineto-only link.
KINETO_ONLY = "kineto_only"
#: The schema string of the synthetic host ET: the 1.1.x chakra layout, whose record_param_comms attrs
#: (``collective_name``, ``in_msg_nelems`` ...) are those Kineto's collective fields map to.
SCHEMA = "1.1.1-chakra.0.0.4"
PROCESS_ROOT_NAME = "[pytorch|profiler|execution_trace|process]"
THREAD_ROOT_NAME = "[pytorch|profiler|execution_trace|thread]"
#: What a Kineto trace cannot tell, for the log and the ET+ ``kineto_only`` record.
MISSING = ("tensor and storage ids (no data dependencies through tensors)", "outputs", "op schemas")

# Kineto collective args -> (host ET 1.1.0 record_param_comms attr, ET type, converter)
_COMM_ARGS: tuple[tuple[str, str, str], ...] = (
    ("Collective name", COLLECTIVE_NAME, "string"),
    ("dtype", "dtype", "string"),
    ("In msg nelems", "in_msg_nelems", "int64"),
    ("Out msg nelems", "out_msg_nelems", "int64"),
    ("In split size", "in_split_size", "string"),
    ("Out split size", "out_split_size", "string"),
    ("Global rank start", "global_rank_start", "int64"),
    ("Global rank stride", "global_rank_stride", "int64"),
    ("Process Group Name", PG_NAME, "string"),
    ("Process Group Description", PG_DESC, "string"),
    ("Group size", PG_SIZE, "int64"),
)
# Kineto "Input type" entries that are not a tensor's dtype
_NOT_DTYPE = frozenset(("", "Scalar", "ScalarList", "TensorList", "GenericList", "String", "None"))


@dataclass(slots=True)
class KinetoHost:
    """The synthetic host ET of a Kineto trace, its matching and window (see the module doc)."""

    host: HostTrace
    match: MatchResult
    window: Window
    threads: int = 0
    ops_outside: int = 0      # host ops / annotations of the trace outside the windows (not in the ET)
    with_shapes: int = 0      # ops with recorded input types (record_shapes=True)
    with_comm_fields: int = 0  # record_param_comms with Kineto collective fields
    gather_outputs: int = 0   # all_gather records given world-size copies of their input as outputs
    gpu_only: bool = False    # no cpu_op / user_annotation in the trace: the host ops are its runtime calls

    def summary(self) -> dict[str, Any]:
        """The ET+ ``kineto_only`` record: where the host nodes came from and what is missing."""
        return {
            "source": "Kineto trace only (no host ET)" + (
                "; GPU activity only: the host ops are its runtime calls" if self.gpu_only else ""),
            "ops": self.match.matched,
            "threads": self.threads,
            "ops_outside_window": self.ops_outside,
            "ops_with_input_shapes": self.with_shapes,
            "collectives_with_kineto_fields": self.with_comm_fields,
            "all_gather_outputs_from_world_size": self.gather_outputs,
            "missing": list(MISSING),
        }


def kineto_window(kineto: KinetoTrace, annotation: str | None = None) -> Window:
    """The windows a Kineto-only link keeps: every window of ``annotation``, else every
    ``ProfilerStep#N``, else the whole trace (``kineto_span``)."""
    if annotation is not None:
        wins = annotation_windows(kineto, annotation)
        if not wins:
            raise UsageError(f"--annotation {annotation!r}: no CPU op or annotation of that name in "
                             f"{kineto.path}")
        reason = f"annotation {annotation!r} (every window, Kineto only)"
    elif kineto.steps:
        wins = sorted(kineto.steps, key=lambda s: (s.ts, -s.dur))
        reason = "every ProfilerStep of the Kineto trace"
    else:
        return Window("kineto_span", [], reason="no ProfilerStep in the Kineto trace")
    names = list(dict.fromkeys(w.name for w in wins))
    name = "+".join(names) if len(names) <= 4 else f"{names[0]}..{names[-1]} ({len(names)} windows)"
    return Window(name, wins, wins[0].ts, max(w.ts + w.dur for w in wins), reason)


def _intervals(steps: list[StepWindow]) -> tuple[list[float], list[float]]:
    """The union of the windows as sorted disjoint ``[start, end)`` intervals (starts, ends)."""
    starts: list[float] = []
    ends: list[float] = []
    for s in sorted(steps, key=lambda w: w.ts):
        end = s.ts + s.dur
        if ends and s.ts <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(s.ts)
            ends.append(end)
    return starts, ends


def build_host(kineto: KinetoTrace, annotation: str | None = None) -> KinetoHost:
    """The synthetic host ET of ``kineto`` (loaded with ``op_args=True`` for shapes and collective
    fields), matched to its events, and the window it covers (see the module doc)."""
    window = kineto_window(kineto, annotation)
    events = kineto.events
    starts, ends = _intervals(window.steps)
    everything = not window.steps

    def inside(ts: float) -> bool:
        if everything:
            return True
        k = bisect.bisect_right(starts, ts) - 1
        return k >= 0 and ts < ends[k]

    chosen: list[int] = []
    outside = 0
    gpu_only = not kineto.op_positions
    for p in runtime_ops(kineto) if gpu_only else kineto.op_positions:
        if inside(events[p].ts):
            chosen.append(p)
        else:
            outside += 1
    if not chosen:
        raise TraceFormatError(
            f"no CPU op or annotation (cat cpu_op / user_annotation) in the window {window.name}"
            + (", and no runtime call either" if gpu_only else "") + ": nothing to link", kineto.path)
    chosen.sort(key=lambda p: (events[p].ts, -events[p].dur, p))

    # thread roots in the order of their first op
    thread_of: dict[tuple[Any, Any], int] = {}
    for p in chosen:
        ev = events[p]
        thread_of.setdefault((ev.pid, ev.tid), len(thread_of))
    groups = groups_from_kineto(kineto.distributed_info, kineto.world_size) if kineto.pg_config else []

    ops: list[HostOp] = []
    root = HostOp(1, PROCESS_ROOT_NAME, 1, PROCESS_ROOT)
    ops.append(root)
    next_id = 2
    metadata_id = None
    if groups:
        metadata_id = next_id
        payload = json.dumps([group_to_record(g) for g in groups])
        ops.append(HostOp(metadata_id, PG_INIT_NAME, 1, METADATA,
                          inputs=IOInfo([payload], [[]], ["String"]), outputs=IOInfo()))
        next_id += 1
    root_ids: dict[tuple[Any, Any], int] = {}
    tids: dict[tuple[Any, Any], int] = {}
    for key, k in thread_of.items():
        tid = key[1] if type(key[1]) is int else k + 1
        tids[key] = tid
        root_ids[key] = next_id
        ops.append(HostOp(next_id, THREAD_ROOT_NAME, 1, THREAD_ROOT, tid=tid))
        next_id += 1

    match = MatchResult(KINETO_ONLY)
    host_of: dict[int, int] = {}   # event position -> host id
    for p in chosen:
        host_of[p] = next_id
        next_id += 1
    shapes = comm_fields = 0
    for rf, p in enumerate(chosen):
        ev = events[p]
        key = (ev.pid, ev.tid)
        parent = _enclosing(events, ev, host_of)
        op = _host_op(ev, host_of[p], parent if parent is not None else root_ids[key], rf, tids[key])
        if "Input type" in ev.args:
            shapes += 1
        if op.attrs.get(COLLECTIVE_NAME):
            comm_fields += 1
        ops.append(op)
        match.add(op.id, p)
    world = kineto.world_size if kineto.world_size is not None else infer_world_size(groups)
    gathers = _gather_outputs(ops, world)
    for i, op in enumerate(ops):
        op.index = i
    match.host_ops = len(chosen)
    match.kineto_candidates = len(chosen)

    host = HostTrace(path=kineto.path, schema=SCHEMA, layout=CHAKRA, ops=ops,
                     by_id={op.id: op for op in ops}, process_groups=groups, metadata_id=metadata_id)
    pids = [k[0] for k in thread_of if type(k[0]) is int]
    host.pid = min(pids) if pids else None
    host.rank = kineto.rank
    host.world_size = world
    return KinetoHost(host, match, window, len(thread_of), outside, shapes, comm_fields, gathers, gpu_only)


def runtime_ops(kineto: KinetoTrace) -> list[int]:
    """The host ops of a GPU-only trace (recorded with the CUDA / ROCm activity alone, e.g.
    ``activities=[ProfilerActivity.CUDA]``: no ``cpu_op`` or ``user_annotation`` event): its runtime and
    driver calls, the launches and synchronising calls among them, in file order.

    Each becomes a host op of its thread, so that a kernel hangs under the call that launched it, and
    each gets its exclusive time anew: its duration less its directly nested calls, which are host ops
    too (the loader takes only operators and synchronising calls off)."""
    events = kineto.events
    out = [p for p, ev in enumerate(events) if ev.kind in _RUNTIME_KINDS]
    covered: dict[int, float] = {}
    for p in out:
        ev = events[p]
        q = ev.parent
        if q is not None:
            end = min(ev.ts + ev.dur, events[q].ts + events[q].dur)
            if end > ev.ts:
                covered[q] = covered.get(q, 0.0) + (end - ev.ts)
    for p in out:
        ev = events[p]
        ev.excl_dur = max(0.0, ev.dur - covered.get(p, 0.0))
    return out


_RUNTIME_KINDS = frozenset((RUNTIME, LAUNCH, SYNC, DRIVER))


def _gather_outputs(ops: list[HostOp], world: int | None) -> int:
    """Give each backend's all_gather record (``gloo:all_gather``, ``nccl:all_gather``, ``mpi:*`` ...)
    ``world`` copies of its input as its outputs; return how many were given.

    An all_gather's size is its gathered output (``chakra.convert.core``, "comm_size").  A host ET has it
    in the ``c10d::allgather_`` call's output list; Kineto records that list as nothing (``Input type``
    ``""``), only the backend record's input tensor.  A gloo collective names no process group, and
    the converter gives it the whole world (``pg_name ""``); the output of the world's all_gather is
    world-size inputs.  An ``nccl:all_gather`` under a ``record_param_comms`` with Kineto's collective
    fields is left alone: ``Out msg nelems`` of its own group says the size.
    """
    if not world or world < 1:
        return 0
    by_id = {op.id: op for op in ops}
    n = 0
    for op in ops:
        if op.kind != OP or op.outputs.values or not is_backend_record(op.name):
            continue
        if canonical_collective(op.name) != "allgather":
            continue
        parent = by_id.get(op.parent)
        if parent is not None and parent.name == "record_param_comms" and COLLECTIVE_NAME in parent.attrs:
            continue
        ins = op.inputs
        tensors = [(v, sh, t) for v, sh, t in zip(ins.values, ins.shapes, ins.types)
                   if isinstance(v, list) and len(v) == 6]
        if not tensors:
            continue
        op.outputs = IOInfo([[list(v) for _ in range(world)] for v, _, _ in tensors],
                            [[sh] * world for _, sh, _ in tensors],
                            ["GenericList[" + ",".join([t] * world) + "]" for _, _, t in tensors])
        n += 1
    return n


def _enclosing(events: list[KinetoEvent], ev: KinetoEvent, host_of: dict[int, int]) -> int | None:
    """Host id of the innermost kept op enclosing ``ev`` on its thread, or None."""
    p = ev.parent
    while p is not None:
        hid = host_of.get(p)
        if hid is not None:
            return hid
        p = events[p].parent
    return None


def _host_op(ev: KinetoEvent, oid: int, parent: int, rf_id: int, tid: int) -> HostOp:
    args = ev.args
    seq = args.get("Sequence number")
    fw_tid = args.get("Fwd thread id")
    attrs: dict[str, Any] = {}
    types: dict[str, str] = {}
    if "Collective name" in args:
        for key, name, et_type in _COMM_ARGS:
            v = args.get(key)
            if v is None:
                continue
            if et_type == "string":
                attrs[name] = str(v)
            else:
                n = _as_int(v)
                if n is None:
                    continue
                attrs[name] = n
            types[name] = et_type
    return HostOp(
        oid, ev.name, parent, OP, rf_id=rf_id, tid=tid,
        seq_id=seq if type(seq) is int else -1,
        fw_tid=fw_tid if type(fw_tid) is int else 0,
        inputs=kineto_inputs(args), outputs=IOInfo(), attrs=attrs, attr_types=types,
    )


def _as_int(v: Any) -> int | None:
    if type(v) is int:
        return v
    try:
        return int(str(v).strip())
    except ValueError:
        return None


def _scalar(text: Any) -> Any:
    """A ``Concrete Inputs`` entry as a value: bool, int, float, a JSON list, else the text."""
    if not isinstance(text, str):
        return text
    t = text.strip()
    if t in ("True", "False"):
        return t == "True"
    try:
        return int(t)
    except ValueError:
        pass
    try:
        f = float(t)
        if math.isfinite(f):
            return f
    except ValueError:
        pass
    if t.startswith("[") and t.endswith("]"):
        try:
            return json.loads(t)
        except ValueError:
            return text
    return text


def _type_of(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Int"
    if isinstance(value, float):
        return "Double"
    if isinstance(value, list):
        return "GenericList[" + ",".join(_type_of(v) for v in value) + "]"
    return "String"


def _numel(dims: Any) -> int | None:
    if not isinstance(dims, list) or not all(type(d) is int for d in dims):
        return None
    n = 1
    for d in dims:
        n *= d
    return n


def _tensor(numel: int, elem: int) -> list[Any]:
    """A host ET tensor value without ids or device: ``[tensor_id, storage_id, offset, numel,
    elem_bytes, device]``."""
    return [0, 0, 0, numel, elem, ""]


def kineto_inputs(args: dict[str, Any]) -> IOInfo:
    """Host ET inputs from a Kineto op's ``Input type`` / ``Input Dims`` / ``Concrete Inputs``.

    A dtype type is a tensor of the recorded shape; ``TensorList`` a list of tensors of the recorded
    shapes, whose element size is the op's ``dtype`` arg when there is one (Kineto writes no dtype for
    a list); a scalar or a list its recorded value; anything unrecorded ``None``."""
    types = args.get("Input type")
    if not isinstance(types, list):
        return IOInfo()
    dims = args.get("Input Dims")
    dims = dims if isinstance(dims, list) else []
    concrete = args.get("Concrete Inputs")
    concrete = concrete if isinstance(concrete, list) else []
    list_elem = dtype_bytes(args.get("dtype"))
    values: list[Any] = []
    shapes: list[Any] = []
    out_types: list[str] = []
    for i, t in enumerate(types):
        t = t if isinstance(t, str) else ""
        d = dims[i] if i < len(dims) else []
        c = concrete[i] if i < len(concrete) else None
        if t == "TensorList" and isinstance(d, list):
            tensors = []
            for sub in d:
                n = _numel(sub)
                if n is not None:
                    tensors.append(_tensor(n, list_elem))
            values.append(tensors)
            shapes.append(d)
            inner = f"Tensor({args['dtype']})" if list_elem else "Tensor"
            out_types.append("GenericList[" + ",".join([inner] * len(tensors)) + "]")
        elif t not in _NOT_DTYPE and _numel(d) is not None:
            values.append(_tensor(_numel(d) or 0, dtype_bytes(t)))
            shapes.append(d)
            out_types.append(f"Tensor({t})")
        else:
            v = _scalar(c) if c is not None else None
            values.append(v)
            shapes.append([])
            out_types.append(_type_of(v))
    return IOInfo(values, shapes, out_types)


def missing_note(kh: KinetoHost) -> str:
    """One line for the log: what this ET+ lacks compared with one linked from a host ET."""
    parts = list(MISSING)
    if kh.with_shapes == 0:
        parts.append("input shapes (the profile was taken without record_shapes=True)")
    if kh.gather_outputs:
        parts.append(f"the gathered output of {kh.gather_outputs} all_gather record(s), taken as world-size "
                     "copies of the input")
    source = ("runtime calls (a GPU-only trace: no cpu_op / user_annotation event)" if kh.gpu_only
              else "cpu_op / user_annotation events")
    return ("linked from the Kineto trace alone: " + f"{kh.match.matched} host nodes from its {source} "
            f"on {kh.threads} thread(s); missing compared with a host ET: " + "; ".join(parts))

