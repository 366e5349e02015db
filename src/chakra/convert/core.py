"""ET+ (or a bare host ET) -> Chakra protobuf ``GlobalMetadata`` + ``Node`` list.

The conversion is a handful of passes over flat per-op lists (index = position
of the op in the file), then one loop that builds the protobuf messages (serialised from
their pieces when written to a file, see :func:`stream_serialized`).  The passes read the ops through
``convert.columns.Columns``: built from ``HostTrace.ops``, or, by ``convert_file``,
while the file is loaded (``load_columns``: no HostOp kept for most ops, their
inputs/outputs/attributes already serialised, see ``convert.serial``):

1. tree:     parent index, pre-order position, and a call-order key per op
             (the record function id, which PyTorch hands out when a call
             starts, one counter per process), all iterative.
2. timing:   start (µs since the measured window, clamped >= 0) and duration:
             a CPU op runs its *exclusive* time (ET+ ``exclusive_dur``, else a
             stack sweep per thread over ``ts``/``dur``), a GPU op its ``dur``,
             roots and METADATA 0.  A wrapper whose time is all in its
             children keeps its node with duration 0.  Without any timing (a
             bare host ET) every duration is 0, with a warning.
3. comm:     which nodes are COMM nodes and their attributes (see ``comm.py``).
4. deps:     ctrl = the ET parent (dropped when the "parent" started after the
             child, or is a collective's record launched after the child in
             its process group: records of other threads); data = call order
             per thread (by ``ts``, or by record function id when untimed), GPU
             op after its launcher, GPU ops of one stream in order, collectives
             of one process group in launch order, gloo record after its c10d
             call, ET+ ``inter_thread_dep`` and ``sync_dep``.  Only ids that
             exist; no duplicates.
5. order:    a topological order (Kahn, earliest start first) which doubles as
             the cycle check; a cycle that a derived edge or the launch order
             closes is broken (with a warning naming the nodes), any other is
             reported with the ids and names of its nodes (``deps.output_order``).

``comm_size`` (one convention for every source): the per-rank byte count of the
collective's *larger* buffer, max(input bytes, output bytes) — all_gather: the
gathered output (group size x the input), reduce_scatter: the full input,
all_reduce / broadcast / send / recv: the one buffer, all_to_all(v): the larger
of the bytes sent and received.  Why: ASTRA-sim's collective algorithms take the
node's ``comm_size`` as the whole buffer and cut it into one chunk per rank (a
ring all_gather of S bytes moves S/N per step), so the per-rank input of an
all_gather would undercount its traffic N times; it is also what
``record_param_comms`` (in/out element counts), the c10d call and the linker's
ET+ ``comm_size`` (``host.comm.comm_size_bytes``) give.  A ``nccl:*`` /
``gloo:*`` record carries only its input tensor, so the size is the maximum
over every record of the collective: that record, ET+ ``comm_size``,
record_param_comms and the c10d call (see ``collectives.comm_fields``).  Where
in == out (all_reduce, balanced all_to_all) every source agrees.

``pg_name`` limitation: gloo traces record no process group for a collective
(no record_param_comms; the c10d call's group is an opaque ``<Object>``), so
gloo comm nodes get ``""`` (the whole world) even when the METADATA lists
sub-groups; that cannot be recovered from the trace.  When the process-group
table holds more than one distinct rank set, one warning names the file, how
many comm nodes fell back to ``""`` and the groups that could have been meant.

``astrasim_safe`` (off by default): the simulator runs only ALL_REDUCE,
ALL_TO_ALL, ALL_GATHER, REDUCE_SCATTER (and BROADCAST, by duration); with the
flag, REDUCE, GATHER, SCATTER, BARRIER and REDUCE_SCATTER_BLOCK collectives are
written as COMP nodes (``is_cpu_op`` false) that run their recorded duration,
their comm fields kept as ``orig_collective``, ``orig_comm_type``,
``orig_comm_size`` and ``orig_pg_name``.  Send/recv are unaffected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, BinaryIO

from chakra import schema as pb
from chakra.convert.collectives import find_comm
from chakra.convert.columns import Columns, malformed
from chakra.convert.deps import add_deps, add_thread_timing, output_order
from chakra.convert.plan import ET_VERSION, UNSIMULATED_COMM_TYPES, Comm, ConvertStats, Deps, Plan, Timing
from chakra.convert.serial import GPU_CATS, Serializer
from chakra.convert.tree import build_tree, compute_timing, index_ops
from chakra.convert.write import FrameReader, SerialNodes, iter_nodes, metadata
from chakra.host.model import HostTrace
from chakra.io import gc_paused

__all__ = ["ET_VERSION", "GPU_CATS", "UNSIMULATED_COMM_TYPES", "ConvertStats", "Plan", "build",
           "convert_trace", "run_passes", "stream_serialized"]


def run_passes(cv: Plan) -> tuple[list[int], Timing, Comm, Deps]:
    """Run the passes over ``cv``; return the output order (indices into ``trace.ops``) and what the writer
    reads of the passes' results: the timing, the comm nodes and the dependencies."""
    index_ops(cv)
    tree = build_tree(cv)
    tm = compute_timing(cv, tree)
    cm = find_comm(cv, tree)
    dp = add_deps(cv, tree, tm, cm)
    dp.tt = add_thread_timing(cv, tree, tm, cm, dp)
    cv.index.clear()   # id -> position is not needed any more (the writer reads ids)
    order = output_order(cv, tree, tm, cm, dp)
    cv.stats.nodes = len(order)
    cv.stats.rank = cm.rank
    return order, tm, cm, dp


def convert_trace(trace: HostTrace, *, astrasim_safe: bool = False
                  ) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """Convert a loaded ET+ / host ET into the Chakra GlobalMetadata and node list (topological order).

    ``astrasim_safe``: collectives the simulator does not run become COMP nodes (see the module doc).
    """
    meta, nodes, _ = build(trace, astrasim_safe=astrasim_safe)
    return meta, nodes


def build(trace: HostTrace, *, astrasim_safe: bool = False
          ) -> tuple[pb.GlobalMetadata, list[pb.Node], ConvertStats]:
    """``convert_trace`` plus the statistics of the conversion."""
    with gc_paused(), _malformed(trace):
        cv = Plan(trace, astrasim_safe=astrasim_safe)
        order, tm, cm, dp = run_passes(cv)
        nodes = list(iter_nodes(cv, order, tm, cm, dp))
        return metadata(cv, tm, cm, dp), nodes, cv.stats


def _malformed(trace: HostTrace) -> contextlib.AbstractContextManager[None]:
    return malformed(trace.path)


def stream_serialized(trace: HostTrace, *, astrasim_safe: bool = False, columns: Columns | None = None,
                      serializer: Serializer | None = None
                      ) -> tuple[pb.GlobalMetadata, Callable[..., list[Any] | None], ConvertStats]:
    """Like :func:`stream`, for a file writer: the GlobalMetadata, a function that appends the nodes to an
    open file (framed, serialised over the cores: ``write.SerialNodes.write_parts``; its arguments: the file,
    its name and an optional reader of the frames), and the statistics (complete once the nodes are
    written).

    ``columns`` / ``serializer``: what ``convert.columns.load_columns`` returned with ``trace``
    (default: built from ``trace.ops``).
    """
    with gc_paused(), _malformed(trace):
        cv = Plan(trace, astrasim_safe=astrasim_safe, columns=columns, serializer=serializer)
        order, tm, cm, dp = run_passes(cv)
        meta = metadata(cv, tm, cm, dp)

    def write_nodes(fh: BinaryIO, path: str, reader: FrameReader[Any] | None = None) -> list[Any] | None:
        with gc_paused(), _malformed(trace):
            return SerialNodes(cv, order, tm, cm, dp).write_parts(fh, path, reader)

    return meta, write_nodes, cv.stats
