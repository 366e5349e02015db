"""ET+ (or a bare host ET) -> Chakra protobuf ``GlobalMetadata`` + ``Node`` list.

The conversion is a handful of passes over flat per-op lists (index = position
of the op in the file), then one loop that builds the protobuf messages (one at a
time when streamed to a file, see :func:`stream`).  The passes read the ops through
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
             child: records of other threads); data = call order per thread
             (by ``ts``, or by record function id when untimed), GPU op after
             its launcher, GPU ops of one stream in order, collectives of one
             process group in order, gloo record after its c10d call, ET+
             ``inter_thread_dep`` and ``sync_dep``.  Only ids that exist; no
             duplicates; nothing is removed.
5. order:    a topological order (Kahn, earliest start first) which doubles as
             the cycle check; a cycle is reported with the ids and names of its
             nodes (see ``_Converter._order`` for which cycles are repaired).

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
record_param_comms and the c10d call (see ``_Converter._fields``).  Where
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
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from chakra import schema as pb
from chakra.convert.attrs import frame_attr, make_attr
from chakra.convert.columns import Columns, columns_from_trace, malformed, raw
from chakra.convert.comm import (
    CommFields,
    PgNames,
    canonical_collective,
    comm_info,
    comm_size_bytes,
    comm_type_of,
    infer_rank,
    is_nccl_kernel,
    kernel_collective,
    op_tensor_bytes,
    pair_gloo_with_c10d,
)
from chakra.convert.graph import CycleError, kahn_order, topological_order
from chakra.convert.serial import GPU_CATS, Serializer, dumps_any, int_attr
from chakra.convert.threads import THREAD_TIMING, ThreadInput, ThreadTiming, thread_timing
from chakra.errors import TraceFormatError
from chakra.host.loader import self_parent_message
from chakra.host.model import METADATA, OP, PROCESS_ROOT, HostOp, HostTrace, is_comm_name
from chakra.io import gc_paused

log = logging.getLogger(__name__)

ET_VERSION = "0.0.4"
__all__ = ["GPU_CATS"]  # re-exported (defined in convert.serial)
_KNOWN_COLLECTIVES = frozenset({"allreduce", "allgather", "reduce_scatter", "broadcast", "all_to_all",
                                "reduce", "gather", "scatter", "barrier", "send", "recv"})
_MAX_COMM_CHAIN = 8
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


_NUM_LIMIT = 1e18  # beyond this (or NaN, inf) a time is corrupt: uint64 µs fields end near 1.8e19


def _num(v: Any) -> bool:
    return (type(v) is int or type(v) is float) and -_NUM_LIMIT < v < _NUM_LIMIT


def _warn(stats: ConvertStats, msg: str) -> None:
    log.warning("%s", msg)
    stats.warnings.append(msg)


_dumps = dumps_any


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
        return _Converter(trace, astrasim_safe=astrasim_safe).run()


def _malformed(trace: HostTrace) -> contextlib.AbstractContextManager[None]:
    return malformed(trace.path)


def stream(trace: HostTrace, *, astrasim_safe: bool = False
           ) -> tuple[pb.GlobalMetadata, Iterator[pb.Node], ConvertStats]:
    """Like :func:`build`, but the nodes come from a generator, built while they are written.

    All checks (references, cycles) run before the first node is yielded.  The
    statistics' per-type counts are complete once the generator is exhausted.
    """
    with gc_paused(), _malformed(trace):
        conv = _Converter(trace, astrasim_safe=astrasim_safe)
        order = conv.plan()
        meta = conv._metadata()

    def gen() -> Iterator[pb.Node]:
        with gc_paused(), _malformed(trace):
            yield from conv.iter_nodes(order)

    return meta, gen(), conv.stats


def stream_serialized(trace: HostTrace, *, astrasim_safe: bool = False, columns: Columns | None = None,
                      serializer: Serializer | None = None
                      ) -> tuple[pb.GlobalMetadata, Iterator[bytes], ConvertStats]:
    """Like :func:`stream`, but the nodes come already serialised (what a file writer needs).

    ``columns`` / ``serializer``: what ``convert.columns.load_columns`` returned with ``trace``
    (default: built from ``trace.ops``).
    """
    with gc_paused(), _malformed(trace):
        conv = _Converter(trace, astrasim_safe=astrasim_safe, columns=columns, serializer=serializer)
        order = conv.plan()
        meta = conv._metadata()

    def gen() -> Iterator[bytes]:
        with gc_paused(), _malformed(trace):
            yield from conv.iter_serialized(order)

    return meta, gen(), conv.stats


class _Converter:
    """One conversion; the attributes are the per-op lists the passes fill."""

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
        self.par = [-1] * n
        self.pos = [0] * n
        self.ts: list[float | None] = [None] * n
        self.start = [0] * n
        self.dur = [0] * n
        self.ntype = [pb.COMP_NODE] * n
        self.comm: dict[int, CommFields] = {}
        self.cpu_comm: set[int] = set()
        self.gloo_pairs: dict[int, int] = {}   # gloo record -> the c10d call it ran (pair_gloo_with_c10d)
        self.gloo_extra: dict[int, int] = {}   # further records of a call that ran as several
        self.data: list[list[int]] = [[] for _ in range(n)]
        self.origin = 0.0
        self.span_end = 0.0
        self.pgn = PgNames(trace.process_groups)
        self.rank: int | None = None
        self.ser = serializer if serializer is not None else Serializer()
        self.soft: set[tuple[int, int]] = set()   # derived edges a cycle may break (see _order)
        self.tt: ThreadTiming | None = None       # per-thread pieces and waits (convert.threads)

    # -- driver -------------------------------------------------------------------------------------
    def plan(self) -> list[int]:
        """Run the passes; return the output order (indices into ``trace.ops``)."""
        self._index()
        self._tree()
        self._timing()
        self._comm()
        self._deps()
        self._threads()
        self.index.clear()   # id -> position is not needed any more (iter_serialized reads ids)
        order = self._order()
        self.stats.nodes = len(order)
        self.stats.rank = self.rank
        return order

    def run(self) -> tuple[pb.GlobalMetadata, list[pb.Node], ConvertStats]:
        order = self.plan()
        nodes = list(self.iter_nodes(order))
        return self._metadata(), nodes, self.stats

    # -- 1. index and tree ----------------------------------------------------------------------------
    def _index(self) -> None:
        index = self.index
        if len(index) == self.n:   # filled by load_columns, which checked for duplicates
            return
        index.clear()
        for i, nid in enumerate(self.ids):
            if nid in index:
                raise TraceFormatError(
                    f"duplicate node id {nid} (positions {index[nid]} and {i})", self.trace.path)
            index[nid] = i

    def _tree(self) -> None:
        ids, index, par, kinds = self.ids, self.index, self.par, self.kinds
        rf_ids = self.cols.rf_ids
        kids: dict[int, list[int]] = {}
        orphans = self_parents = 0
        first = ""
        parents = self.cols.parents
        for i, p in enumerate(map(index.get, parents)):   # the parent's position, looked up in C
            if p == i and kinds[i] != PROCESS_ROOT:
                self_parents += 1
            if p is not None and p != i:
                par[i] = p
                ch = kids.get(p)
                if ch is None:
                    kids[p] = [i]
                else:
                    ch.append(i)
            elif p is None and kinds[i] != PROCESS_ROOT and parents[i] not in (0, ids[i]):
                orphans += 1
                if not first:
                    first = f"node {ids[i]} -> missing parent {parents[i]}"
        if self_parents:
            _warn(self.stats, self_parent_message(self.trace.path, self_parents, self.n))
        if orphans:
            _warn(self.stats, f"{self.trace.path}: {orphans} node(s) name a parent that is not in the trace "
                              f"(e.g. {first}); they keep no control dependency")

        def key(i: int) -> tuple[bool, int, int]:
            rf = rf_ids[i]
            return (rf is None, rf or 0, ids[i])

        pos = self.pos
        seen = [False] * self.n
        counter = 0
        stack = [i for i in range(self.n - 1, -1, -1) if par[i] < 0]
        while stack:
            i = stack.pop()
            if seen[i]:
                continue
            seen[i] = True
            pos[i] = counter
            counter += 1
            ch = kids.get(i)
            if ch:
                if len(ch) > 1:
                    ch.sort(key=key, reverse=True)
                stack.extend(ch)
        if counter < self.n:  # parent cycles: no root reaches them
            loops = [i for i in range(self.n) if not seen[i]]
            _warn(self.stats, f"{self.trace.path}: {len(loops)} node(s) are in a parent cycle "
                              f"(e.g. id {ids[loops[0]]}); "
                              "their control dependencies are dropped")
            for i in loops:
                par[i] = -1
                pos[i] = counter
                counter += 1
        self.preorder = [0] * self.n
        for i, p in enumerate(pos):
            self.preorder[p] = i
        # Call order without timestamps: record function ids are handed out when a call starts, one
        # counter per process, so they order calls across threads too (the ET tree does not: gloo
        # worker-thread records hang under whatever record was open).  An op without rf_id (GPU nodes,
        # some roots) takes its parent's; pre-order breaks ties.
        rfk = self.rfk = [0] * self.n
        for i in self.preorder:
            rf = rf_ids[i]
            if type(rf) is int:
                rfk[i] = rf
            elif par[i] >= 0:
                rfk[i] = rfk[par[i]]

    def _thread(self, i: int) -> Any:
        return self.cols.threads[i]

    # -- 2. timing ------------------------------------------------------------------------------------
    def _timing(self) -> None:
        ts, par, is_gpu, ids, kinds = self.ts, self.par, self.is_gpu, self.ids, self.kinds
        c = self.cols
        raw_ts, raw_dur, raw_excl, threads = c.ts, c.dur, c.excl, c.threads
        ts_x, dur_x, excl_x = c.ts_x, c.dur_x, c.excl_x
        lo = hi = None
        bad: list[int] = []  # ids of nodes whose ts/dur is NaN, infinite, negative or out of range
        L = _NUM_LIMIT
        dur = self.dur
        missing_threads: set[Any] = set()   # threads with a timed op that has no exclusive_dur
        # One pass: validity (for the warning), the span, and the durations (_num inlined throughout: a
        # million calls).  Durations: a GPU op its dur, a CPU op (OP kind) its exclusive_dur, else below.
        for i, t in enumerate(raw_ts):
            if t != t:   # not a float: the raw value (columns.raw)
                t = ts_x.get(i)
            d = raw_dur[i]
            if d != d:
                d = dur_x.get(i)
            tt = type(d)
            d_ok = (tt is float or tt is int) and -L < d < L
            tt = type(t)
            t_ok = (tt is float or tt is int) and -L < t < L
            if t_ok:
                ts[i] = t
                if d_ok:
                    end = t + d
                    if d < 0:
                        bad.append(ids[i])
                else:
                    end = t
                    if d is not None:
                        bad.append(ids[i])
                if lo is None or t < lo:
                    lo = t
                if hi is None or end > hi:
                    hi = end
            elif t is not None:
                bad.append(ids[i])
            e = raw_excl[i]
            if e != e:
                e = excl_x.get(i)
            tt = type(e)
            e_ok = (tt is float or tt is int) and -L < e < L
            if e is not None and not (e_ok and e >= 0):
                bad.append(ids[i])
            if is_gpu[i]:
                if d_ok and d > 0:
                    dur[i] = int(d + 0.5)
            elif kinds[i] == OP:
                if e_ok:
                    if e > 0:
                        dur[i] = int(e + 0.5)
                elif t_ok and d_ok:
                    missing_threads.add(threads[i])
        if bad:
            ids = sorted(set(bad))
            _warn(self.stats, f"{self.trace.path}: {len(ids)} node(s) have a NaN, infinite, negative or "
                              f"out-of-range ts/dur (node ids {ids[:5]}{' ...' if len(ids) > 5 else ''}): "
                              "read as missing or 0")
        self.stats.timed = lo is not None
        if lo is None:
            _warn(self.stats, f"{self.trace.path}: no timing fields (a bare host ET, not ET+): "
                              "every duration is 0")
            for i in range(self.n):
                dur[i] = 0
            return
        measured = self.trace.extra.get("measured")
        origin = lo
        if isinstance(measured, dict) and _num(measured.get("start_us")):
            origin = measured["start_us"]
        self.origin = float(origin)
        self.span_lo, self.span_hi = float(lo), float(hi)
        start = self.start
        for i in self.preorder:
            t = ts[i]
            if t is not None:
                v = t - origin
                start[i] = int(v + 0.5) if v > 0 else 0
            elif par[i] >= 0:
                start[i] = start[par[i]]
        if not missing_threads:
            return
        # Exclusive time by a stack sweep over the timed ops of each thread that lacks some.
        need: dict[Any, list[tuple[float, float, int, int]]] = {th: [] for th in missing_threads}
        pos = self.pos
        for i, t in enumerate(ts):
            if t is None or is_gpu[i] or kinds[i] != OP:
                continue
            items = need.get(threads[i])
            if items is None:
                continue
            d = raw(raw_dur, dur_x, i)
            if _num(d):
                items.append((t, d, pos[i], i))
        for items in need.values():
            for i, x in _exclusive(items).items():
                if not _num(raw(raw_excl, excl_x, i)):
                    dur[i] = int(x + 0.5) if x > 0 else 0

    # -- 3. communication -----------------------------------------------------------------------------
    def _comm_chain(self, j: int) -> list[int]:
        """``j`` and its ancestors while they are host comm ops (record_param_comms, nccl:*, c10d::*...)."""
        names, par, is_gpu = self.names, self.par, self.is_gpu
        chain: list[int] = []
        while j >= 0 and len(chain) < _MAX_COMM_CHAIN and not is_gpu[j] and is_comm_name(names[j]):
            chain.append(j)
            j = par[j]
        return chain

    def _comm(self) -> None:
        full, names, ids, trace = self.full, self.names, self.ids, self.trace
        is_gpu, par = self.is_gpu, self.par
        groups = trace.process_groups
        infos = {}
        for i, op in enumerate(full):
            # a host comm op is kept whole by load_columns (a comm candidate, columns.is_comm_candidate)
            if op is not None and not is_gpu[i] and is_comm_name(names[i]):
                info = comm_info(op, groups)
                if info is not None:
                    infos[i] = info
        self.infos = infos
        self.rank = infer_rank(trace, {ids[i]: v for i, v in infos.items()})
        covered: set[int] = set()
        gpu_children: set[int] = set()
        unknown = 0
        for i, g in enumerate(is_gpu):
            if not g:
                continue
            p = par[i]
            if p >= 0 and p in infos:   # only asked of comm ops below
                gpu_children.add(p)
            op = full[i]
            if op is None:   # load_columns keeps every GPU op that passes the test below
                continue
            coll_attr = op.attrs.get("collective_name")
            if not (is_nccl_kernel(op.name) or (isinstance(coll_attr, str) and coll_attr)):
                continue
            chain = self._comm_chain(self.par[i])
            covered.update(chain)
            f = self._fields(chain, op, None, kernel=True)
            if f is None:
                unknown += 1
                continue
            self._set_comm(i, f)
        if unknown:
            _warn(self.stats, f"{unknown} NCCL kernel(s) with no recognisable collective stay COMP nodes")
        distinct = set(names)
        if any(nm.startswith("gloo:") for nm in distinct) and any(nm.startswith("c10d::") for nm in distinct):
            def nbytes(j: int) -> int:
                op = full[j]
                return op_tensor_bytes(op) if op is not None else -1

            pairs, extra = pair_gloo_with_c10d(names, self.cols.rf_ids, ids, nbytes)
        else:
            pairs, extra = {}, {}   # nothing to pair
        del distinct
        self.gloo_pairs = pairs
        self.gloo_extra = extra
        for i in infos:
            op = full[i]
            if not op.name.startswith(("gloo:", "nccl:")) or i in gpu_children or i in extra:
                continue
            chain = self._comm_chain(i)
            if any(j in covered for j in chain):
                continue
            f = self._fields(chain, op, pairs.get(i), kernel=False)
            if f is None:
                continue
            self._set_comm(i, f)
            self.cpu_comm.add(i)
        ntype = self.ntype
        self.stats.comm_nodes = sum(1 for i in self.comm if ntype[i] != pb.COMP_NODE)
        self.stats.cpu_comm_nodes = sum(1 for i in self.cpu_comm if ntype[i] != pb.COMP_NODE)
        self._warn_world_fallback()

    def _set_comm(self, i: int, f: CommFields) -> None:
        self.comm[i] = f
        if f.collective == "send":
            self.ntype[i] = pb.COMM_SEND_NODE
        elif f.collective == "recv":
            self.ntype[i] = pb.COMM_RECV_NODE
        elif self.astrasim_safe and f.comm_type in UNSIMULATED_COMM_TYPES:
            self.ntype[i] = pb.COMP_NODE   # replayed by its recorded duration (module doc)
            self.stats.comm_as_comp += 1
        else:
            self.ntype[i] = pb.COMM_COLL_NODE

    def _warn_world_fallback(self) -> None:
        """One warning when comm nodes fall back to the whole world ("") although the process-group
        table holds groups of different ranks: the trace does not say which one was meant."""
        groups = [g for g in self.trace.process_groups if g.ranks]
        if len({frozenset(g.ranks) for g in groups}) < 2:
            return
        fallback = sum(1 for f in self.comm.values() if not f.pg_name)
        if not fallback:
            return
        listed = ", ".join(f"{self.pgn.numeric(g.pg_name) or g.pg_name} {list(g.ranks)}" for g in groups)
        _warn(self.stats, f"{self.trace.path}: {fallback} comm node(s) name no process group (gloo records "
                          "do not say which group they used) and get pg_name \"\" (the whole world), "
                          f"though the process groups differ; any of these could have been meant: {listed}")

    def _fields(self, chain: list[int], own: HostOp, c10d_pair: int | None, *, kernel: bool
                ) -> CommFields | None:
        """Comm attributes of the comm node ``own`` (an NCCL kernel, or a gloo/nccl host record).

        Sources, most specific first: the c10d call of a gloo record, ET+'s own annotation
        (``collective_name``/``comm_size``/``pg_name`` on the node), record_param_comms, the backend
        record's name and tensors, the c10d op, the kernel name.
        """
        names, full, infos = self.names, self.full, self.infos
        backend = rpc = c10d = None
        for j in chain:
            name = names[j]
            if backend is None and name.startswith(("nccl:", "gloo:")):
                backend = j
            elif rpc is None and name == "record_param_comms":
                info = infos.get(j)
                if info is not None and canonical_collective(info.collective_name) != "wait":
                    rpc = j
            elif c10d is None and name.startswith("c10d::"):
                c10d = j
        if c10d_pair is not None:
            c10d = c10d_pair
        found: list[str] = []
        if backend is not None and names[backend].startswith("gloo:") and c10d is not None:
            found.append(names[c10d])   # gloo: the c10d call says what the collective really is
        oa = own.attrs
        ca = oa.get("collective_name")
        if isinstance(ca, str) and ca:
            found.append(ca)
        if rpc is not None:
            found.append(infos[rpc].collective_name)
        if backend is not None:
            found.append(names[backend])
        if c10d is not None:
            found.append(names[c10d])
        if kernel:
            found.append(kernel_collective(own.name))
        collective = ""
        for nm in found:
            c = canonical_collective(nm)
            if c in _KNOWN_COLLECTIVES:
                collective = c
                break
            if c == "sendrecv" and not collective:
                collective = "all_to_all"   # SendRecv kernel with no host op naming it: DLRM-style all_to_all
        if not collective:
            return None
        # size: max(input bytes, output bytes) of the collective (module doc, "comm_size"), over every
        # record of it: the backend record has only the input tensor, record_param_comms and the c10d
        # call have both sides, ET+'s comm_size is the linker's max(in, out) of whatever it found.
        size = op_tensor_bytes(full[backend]) if backend is not None else 0
        if _num(oa.get("comm_size")):
            size = max(size, int(oa["comm_size"]))
        if rpc is not None:
            size = max(size, comm_size_bytes(infos[rpc]))
        if c10d is not None and c10d in infos:
            size = max(size, comm_size_bytes(infos[c10d]))
        if not size and kernel:
            size = op_tensor_bytes(own)   # the launcher's tensors, copied onto the GPU node by ET+
        pg = ""
        if rpc is not None:
            pg = infos[rpc].pg_name
        if not pg and isinstance(oa.get("pg_name"), str):
            pg = oa["pg_name"]
        if not pg:
            for j in chain:
                info = infos.get(j)
                if info is not None and info.pg_name:
                    pg = info.pg_name
                    break
        pg = self.pgn.numeric(pg)
        f = CommFields(collective, comm_type_of(collective), size, pg)
        if rpc is not None:
            f.seq = infos[rpc].seq
        if collective in ("send", "recv"):
            info = infos.get(c10d) if c10d is not None else None
            peer = info.peer if info is not None and info.peer is not None else -1
            f.tag = info.tag if info is not None and info.tag is not None else 0
            if peer >= 0:
                peer = self.pgn.global_rank(pg, peer)
            me = self.rank if self.rank is not None else -1
            f.src, f.dst = (me, peer) if collective == "send" else (peer, me)
        return f

    # -- 4. dependencies ------------------------------------------------------------------------------
    def _chain(self, members: list[int]) -> None:
        """Order ``members`` by start (call order when some are untimed); each depends on the previous."""
        ts, pos, rfk, data = self.ts, self.pos, self.rfk, self.data
        starts = list(map(ts.__getitem__, members))
        if None not in starts and len(set(starts)) == len(starts):
            # distinct starts: the first key decides alone (C-level key, no Python call per member)
            members.sort(key=ts.__getitem__)
        elif None not in starts:
            durs, dur_x = self.cols.dur, self.cols.dur_x
            L = _NUM_LIMIT

            def key(i: int) -> tuple[float, float, int]:   # _time_key, with its lookups hoisted
                d = durs[i]
                if d != d:
                    d = dur_x.get(i)
                tt = type(d)
                return (ts[i], -d if (tt is float or tt is int) and -L < d < L else 0.0,  # type: ignore[return-value]
                        pos[i])

            members.sort(key=key)
        else:
            members.sort(key=lambda i: (rfk[i], pos[i]))
        prev = members[0]
        for i in members[1:]:
            data[i].append(prev)
            prev = i

    def _launch_chain(self, members: list[int]) -> None:
        """Chain comm nodes by launch: a GPU node by its launcher's start, a host record by its own; then
        the recorded sequence number; each depends on the previous."""
        par, is_gpu, ts, rfk, data = self.par, self.is_gpu, self.ts, self.rfk, self.data
        comm, called = self.comm, self.gloo_pairs
        # a GPU node: its launching op; a gloo record (run by a worker thread when it gets to it): the c10d
        # call that issued it; any other host record: itself
        launcher = {i: par[i] if is_gpu[i] and par[i] >= 0 else called.get(i, i) for i in members}
        if all(ts[j] is not None for j in launcher.values()):
            def key(i: int) -> tuple[Any, ...]:
                j = launcher[i]
                seq = comm[i].seq
                return (*self._time_key(j), -1 if seq is None else seq, self.pos[i])
        else:
            def key(i: int) -> tuple[Any, ...]:
                j = launcher[i]
                return (rfk[j], self.pos[j], self.pos[i])
        members.sort(key=key)
        for prev, i in zip(members, members[1:]):
            data[i].append(prev)

    def _time_key(self, i: int) -> tuple[float, float, int]:
        """Start order of timed ops: earlier first, then the longer (enclosing) one, then the ET parent."""
        d = self.cols.dur[i]
        if d != d:
            d = self.cols.dur_x.get(i)
        tt = type(d)
        return (self.ts[i], -d if (tt is float or tt is int) and -_NUM_LIMIT < d < _NUM_LIMIT else 0.0,
                self.pos[i])  # type: ignore[return-value]

    def _before(self, p: int, i: int) -> bool:
        """Whether ``p`` starts before ``i`` by the same keys the call-order chains use."""
        if self.ts[p] is not None and self.ts[i] is not None:
            return self._time_key(p) < self._time_key(i)
        return (self.rfk[p], self.pos[p]) < (self.rfk[i], self.pos[i])

    def _deps(self) -> None:
        ids, index, par, is_gpu, kinds = self.ids, self.index, self.par, self.is_gpu, self.kinds
        data, stats = self.data, self.stats
        skeys, thread_of = self.cols.skeys, self.cols.threads
        threads: dict[Any, list[int]] = {}
        streams: dict[tuple[Any, Any], list[int]] = {}
        no_launcher = gpu_ops = cpu_ops = 0
        for i, g in enumerate(is_gpu):
            if g:
                gpu_ops += 1
                p = par[i]
                if p >= 0:
                    data[i].append(p)
                else:
                    no_launcher += 1
                members = streams.get(skeys[i])
                if members is None:
                    streams[skeys[i]] = [i]
                else:
                    members.append(i)
            elif kinds[i] == OP:
                cpu_ops += 1
                members = threads.get(thread_of[i])
                if members is None:
                    threads[thread_of[i]] = [i]
                else:
                    members.append(i)
        stats.gpu_ops += gpu_ops
        stats.cpu_ops += cpu_ops
        if no_launcher:
            _warn(stats, f"{self.trace.path}: {no_launcher} GPU node(s) have no launcher in the trace")
        for members in threads.values():
            self._chain(members)
        for members in streams.values():
            self._chain(members)
        # Collectives of one process group run in the order they were launched, on every rank alike; a
        # GPU collective's own start is the GPU's time, a host record's is the host's (which runs ahead of
        # its GPU by a different amount on each rank), so both are ordered by when the host launched them.
        pgs: dict[str, list[int]] = {}
        for i, f in self.comm.items():
            pgs.setdefault(f.pg_name, []).append(i)
        for members in pgs.values():
            self._launch_chain(members)
        soft = self.soft
        for i, j in self.gloo_pairs.items():
            if i in self.cpu_comm and j not in data[i]:
                data[i].append(j)
                soft.add((i, j))
        for i, j in self.gloo_extra.items():   # the other records of a multi-record call follow it too
            if j not in data[i]:
                data[i].append(j)
                soft.add((i, j))
        bad = 0
        first_bad = ""
        for i, pair in self.cols.xdeps.items():
            for key, dv in zip(("inter_thread_dep", "sync_dep"), pair):
                if dv is None:
                    continue
                for d in dv if isinstance(dv, list) else [dv]:
                    j = index.get(d) if type(d) is int else None
                    if j is None:
                        bad += 1
                        if not first_bad:
                            first_bad = f"node {ids[i]} {key} {d!r}"
                    elif j != i:
                        if j not in data[i]:   # already a call-order/stream/launcher edge: stays hard
                            data[i].append(j)
                            soft.add((i, j))
                        if key == "sync_dep":
                            stats.sync_edges += 1
                        else:
                            stats.inter_thread_edges += 1
        if bad:
            _warn(stats, f"{self.trace.path}: {bad} inter_thread_dep/sync_dep reference(s) to ids not in "
                         f"the trace were skipped (e.g. {first_bad}, missing)")
        # ctrl: the ET parent (not for GPU ops, METADATA, or towards a METADATA node)
        # The ET tree is wrong for records made on other threads (gloo worker records hang under whatever
        # record was open, sometimes one that started later); a parent that starts after its child is not
        # a caller, and such a link would point backwards in time (a cycle waiting to happen).
        ctrl = [-1] * self.n
        backwards = 0
        ts, before = self.ts, self._before
        for i, p in enumerate(par):
            if p >= 0 and not is_gpu[i] and kinds[i] != METADATA and kinds[p] != METADATA:
                tp = ts[p]
                ti = ts[i]
                # _before(p, i); its first key decides unless both are timed and start together
                if tp is not None and ti is not None and tp != ti:
                    ok = tp < ti
                else:
                    ok = before(p, i)
                if not ok:
                    backwards += 1
                    continue
                ctrl[i] = p
        if backwards:
            _warn(stats, f"{backwards} ET parent link(s) point to a record that started later than its child "
                         "(records of other threads); those control dependencies are dropped")
        meta = {i for i, k in enumerate(kinds) if k == METADATA}
        for i in sorted(meta):
            self.ntype[i] = pb.METADATA_NODE
            data[i] = []
            ctrl[i] = -1
        # nothing may depend on a METADATA node
        for i, ds in enumerate(data):
            if ds:
                k = len(ds)
                if k == 1:   # the common cases, without building a set
                    j = ds[0]
                    if j == i or j == ctrl[i] or j in meta:
                        data[i] = []
                    continue
                if k == 2:
                    a, b = ds
                    c = ctrl[i]
                    keep_a = a != i and a != c and a not in meta
                    if keep_a and b != i and b != c and b != a and b not in meta:
                        continue   # both stay
                seen = {i, ctrl[i]}
                out = []
                for j in ds:
                    if j not in seen and j not in meta:
                        seen.add(j)
                        out.append(j)
                data[i] = out
        self.ctrl = ctrl

    # -- 4b. thread timing: work, waiting and idle per host thread (convert.threads) ------------------
    def _threads(self) -> None:
        """Pieces, depths and waits of the host threads; waits become (soft) data dependencies."""
        if not self.stats.timed:
            return
        n, cols, is_gpu, kinds, ts = self.n, self.cols, self.is_gpu, self.kinds, self.ts
        threads, cpu_comm, origin, start = cols.threads, self.cpu_comm, self.origin, self.start
        is_cpu = [not g and (k == METADATA or i not in cpu_comm)
                  for i, (g, k) in enumerate(zip(is_gpu, kinds))]
        host = {t for t, c, k in zip(threads, is_cpu, kinds) if c and k != METADATA}
        # every host op sits on its thread; a thread without CPU ops (a gloo worker whose only records
        # are collectives) is a lane of its own in the replay, with the same kind of timing.  The thread
        # and process roots are not ops: time inside them and in no op is idle time.
        on_thread = [k == OP and not g for k, g in zip(kinds, is_gpu)]
        end: list[int | None] = [None] * n
        raw_dur, dur_x = cols.dur, cols.dur_x
        lane: list[Any] = [None] * n
        skeys = cols.skeys
        keys: dict[Any, Any] = {}
        for i, t in enumerate(ts):
            if kinds[i] != METADATA:
                th = threads[i]
                key = ("gpu", skeys[i]) if is_gpu[i] else ("cpu" if th in host else "host", th)
                lane[i] = keys.setdefault(key, key)
            if t is None:
                continue
            d = raw_dur[i]
            if d != d:
                d = dur_x.get(i)
            if not _num(d) or d < 0:
                d = 0.0
            v = t + d - origin
            e = int(v + 0.5) if v > 0 else 0
            end[i] = e if e > start[i] else start[i]
        sync_lanes: dict[int, set[Any]] = {}
        index = self.index
        for i, (_, sd) in cols.xdeps.items():
            if sd is None:
                continue
            for d in sd if isinstance(sd, list) else [sd]:
                j = index.get(d) if type(d) is int else None
                if j is not None and is_gpu[j]:
                    sync_lanes.setdefault(i, set()).add(lane[j])
        inp = ThreadInput(n=n, start=self.start, end=end, excl=self.dur, thread=threads, on_thread=on_thread,
                          is_cpu=is_cpu, lane=lane, pos=self.pos, deps=self.data, host_comm=cpu_comm,
                          is_gpu=is_gpu, sync_lanes=sync_lanes,
                          launcher=[self.par[i] if is_gpu[i] else -1 for i in range(n)],
                          gpu_comm={i for i in self.comm if is_gpu[i]})
        tt = thread_timing(inp)
        data, ctrl, soft = self.data, self.ctrl, self.soft
        # an op whose synchronize became a wait of the node after it no longer waits itself: its sync_dep
        # (a start dependency on a GPU op that was recorded still running) goes
        for o in tt.synced:
            _, sd = cols.xdeps.get(o, (None, None))
            for d in sd if isinstance(sd, list) else [sd]:
                j = index.get(d) if type(d) is int else None
                if j is not None and (o, j) in soft and j in data[o]:
                    data[o].remove(j)
                    soft.discard((o, j))
        for j, u in tt.wait_on.items():
            if u != ctrl[j] and u not in data[j]:
                data[j].append(u)
                soft.add((j, u))
        self.stats.waits = len(tt.wait_on)
        self.stats.waited_us = tt.waited_us
        self.tt = tt

    # -- 5. order and cycle check ---------------------------------------------------------------------
    def _order(self) -> list[int]:
        """Topological order; also the cycle check.

        A cycle through a dependency that ET+ derived from timing (``sync_dep``,
        ``inter_thread_dep``) or that pairs a gloo record with its c10d call is
        broken by dropping that one edge, with a warning naming the cycle; a cycle
        of call-order, parent, stream or process-group edges is an error naming
        its nodes.
        """
        n = self.n
        ctrl, data, ids, names = self.ctrl, self.data, self.ids, self.names
        prio = self.start if self.stats.timed else self.rfk
        order = kahn_order(data, ctrl, prio)
        if order is not None:
            return order
        for _ in range(1000):   # a cycle: found, repaired or reported by the general code
            deps = [(data[i] + [ctrl[i]]) if ctrl[i] >= 0 else data[i] for i in range(n)]
            try:
                return topological_order(range(n), deps, prio)
            except CycleError as exc:
                cyc = exc.cycle
                desc = " -> ".join(f"{ids[i]} ({names[i][:40]})" for i in cyc[:12])
                more = "" if len(cyc) <= 12 else f" ... ({len(cyc)} nodes)"
                edge = next(((a, b) for a, b in zip(cyc, cyc[1:] + cyc[:1]) if (a, b) in self.soft), None)
                if edge is None:
                    raise TraceFormatError(f"dependency cycle: {desc}{more}", self.trace.path) from None
                a, b = edge
                data[a].remove(b)
                self.soft.discard(edge)
                _warn(self.stats, f"{self.trace.path}: dependency cycle {desc}{more}: dropped the derived "
                                  f"dependency of node {ids[a]} on node {ids[b]}")
        raise TraceFormatError("too many dependency cycles (1000 derived dependencies dropped)",
                               self.trace.path)

    # -- messages -------------------------------------------------------------------------------------
    def iter_nodes(self, order: list[int]) -> Iterator[pb.Node]:
        """The Node messages in ``order``, built one at a time (a writer can stream them)."""
        parse = pb.Node.FromString
        for body in self.iter_serialized(order):
            yield parse(body)

    def iter_serialized(self, order: list[int]) -> Iterator[bytes]:
        """The serialised Node messages in ``order``, one at a time.

        Assembled from pieces, because building a Node with its IOInfo and attribute
        sub-messages costs several times its serialisation: the scalar and dependency
        fields (1-7) come from a small Node serialised by protobuf (which checks their
        ranges), followed by ``inputs`` (8), ``outputs`` (9) and the ``attr`` entries
        (10), each encoded as protobuf would (fields in number order, so the bytes are
        those of the whole message serialised at once; ``convert.serial``).  An op
        ``load_columns`` did not keep whole has its fields 8-10 ready (``Columns.tails``; a
        GPU comm node adds its comm attributes after them).
        """
        ids, names, full = self.ids, self.names, self.full
        tails = self.cols.tails
        ctrl, data, start, dur, ntype = self.ctrl, self.data, self.start, self.dur, self.ntype
        is_gpu, comm, cpu_comm = self.is_gpu, self.comm, self.cpu_comm
        ser = self.ser
        Node = pb.Node
        framed = ser.attr_cache.framed
        op_ios = ser.op_ios
        join = b"".join
        counts: dict[int, int] = {}   # node type -> count, in first-seen order
        stats = self.stats
        thread_attrs = self._thread_attrs()
        ctrl_edges = data_edges = 0
        meta_t = pb.METADATA_NODE

        for i in order:
            t = ntype[i]
            counts[t] = counts.get(t, 0) + 1
            # fields set one by one, defaults left out: the bytes (and the range checks) of
            # Node(id=, name=, type=, ctrl_deps=, data_deps=, start_time_micros=, duration_micros=)
            m = Node()
            m.id = ids[i]
            v = names[i]
            if v:
                m.name = v
            if t:
                m.type = t
            c = ctrl[i]
            if c >= 0:
                m.ctrl_deps.append(ids[c])
                ctrl_edges += 1
            ds = data[i]
            k = len(ds)
            if k == 1:
                m.data_deps.append(ids[ds[0]])
            elif k:
                m.data_deps.extend([ids[j] for j in ds])
            data_edges += k
            v = start[i]
            if v:
                m.start_time_micros = v
            v = dur[i]
            if v:
                m.duration_micros = v
            head = m.SerializeToString()
            f = comm.get(i)
            tail = tails[i] if tails is not None else None
            ta = thread_attrs(i)
            if tail is not None:   # neither METADATA nor a host comm node (those are kept whole)
                if f is None:
                    yield head + tail + ta if ta else head + tail
                else:
                    yield join((head, tail, *[frame_attr(a) for a in _comm_attrs(f, t)], ta))
                continue
            op = full[i]
            if is_gpu[i]:
                attrs = ser.gpu_attrs(op)
            elif t == meta_t:
                attrs = [framed("is_cpu_op", True)]
            else:
                attrs = ser.cpu_attrs(op, cpu=i not in cpu_comm, skip=f is not None)
            if f is not None:
                attrs.extend(frame_attr(a) for a in _comm_attrs(f, t))
            if ta:
                attrs.append(ta)
            if t == meta_t:
                yield join((head, self._meta_io(op), *attrs))
            else:
                yield join((head, *op_ios(op), *attrs))
        stats.by_type = {_TYPE_NAMES[t]: k for t, k in counts.items()}
        stats.ctrl_edges = ctrl_edges
        stats.data_edges = data_edges

    def _thread_attrs(self) -> Any:
        """``i -> bytes``: node ``i``'s thread-timing attributes (convert.threads), framed; b"" if none.

        Built once for the nodes that have any (a framed (name, value) is made once: values repeat)."""
        tt = self.tt
        if tt is None:
            return lambda i: b""
        ids = self.ids
        framed: dict[tuple[str, int], bytes] = {}
        out: dict[int, bytes] = {}
        for (name_field, name), d in ((_DEPTH, tt.depth), (_WORK, tt.work_before), (_TAIL, tt.tail),
                                      (_IDLE, tt.idle_before), (_POST, tt.wait_post)):
            for i, v in d.items():
                if v:
                    b = framed.get((name, v))
                    if b is None:
                        b = framed[(name, v)] = int_attr(name_field, name, v)
                    out[i] = out.get(i, b"") + b
        for i, u in tt.wait_on.items():
            out[i] = out.get(i, b"") + int_attr(_WAIT_ON[0], _WAIT_ON[1], ids[u])
        if tt.frees_thread:
            frees_attr = int_attr(_FREES[0], _FREES[1], 1)
            for i in tt.frees_thread:
                out[i] = out.get(i, b"") + frees_attr
        get = out.get
        return lambda i: get(i, b"")

    def _meta_io(self, op: HostOp) -> bytes:
        """inputs + outputs of the METADATA node: the inputs' values are the process-group table."""
        io = op.inputs
        try:
            inputs = pb.IOInfo(values=str([self._pg_json()]), shapes=orjson.dumps(io.shapes).decode(),
                               types=orjson.dumps(io.types).decode())
            io = op.outputs
            dumps = orjson.dumps
            outputs = pb.IOInfo(values=dumps(io.values).decode(), shapes=dumps(io.shapes).decode(),
                                types=dumps(io.types).decode())
        except TypeError:   # something orjson will not encode (e.g. a huge int): the slow path
            io = op.inputs
            inputs = pb.IOInfo(values=_dumps(io.values), shapes=_dumps(io.shapes), types=_dumps(io.types))
            io = op.outputs
            outputs = pb.IOInfo(values=_dumps(io.values), shapes=_dumps(io.shapes), types=_dumps(io.types))
        return pb.Node(inputs=inputs, outputs=outputs).SerializeToString()

    # -- metadata -------------------------------------------------------------------------------------
    def _pg_records(self) -> list[dict[str, Any]]:
        out = []
        for g in self.trace.process_groups:
            out.append({
                "pg_name": self.pgn.numeric(g.pg_name) or g.pg_name,
                "pg_desc": g.pg_desc,
                "backend_config": g.backend,
                "ranks": list(g.ranks),
                "group_size": g.group_size,
                "group_count": g.group_count,
            })
        return out

    def _pg_json(self) -> str:
        return json.dumps(self._pg_records())

    def _metadata(self) -> pb.GlobalMetadata:
        tr = self.trace
        attrs = [make_attr("schema", tr.schema or "")]
        if tr.pid is not None:
            attrs.append(make_attr("pid", tr.pid))
        if tr.time is not None:
            attrs.append(make_attr("time", tr.time))
        if tr.start_ts is not None:
            attrs.append(make_attr("start_ts", tr.start_ts))
        if tr.finish_ts is not None:
            attrs.append(make_attr("finish_ts", tr.finish_ts))
        attrs.append(make_attr("rank", self.rank if self.rank is not None else -1))
        ws = tr.world_size
        attrs.append(make_attr("world_size", ws if ws is not None else -1))
        attrs.append(pb.AttributeProto(name="process_groups", string_val=self._pg_json()))
        measured = tr.extra.get("measured")
        if isinstance(measured, dict) and _num(measured.get("start_us")):
            m_start = float(measured["start_us"])
            m_dur = float(measured.get("dur_us", 0.0)) if _num(measured.get("dur_us")) else 0.0
            window = str(measured.get("window", ""))
        elif self.stats.timed:
            m_start, m_dur, window = self.span_lo, self.span_hi - self.span_lo, "span"
        else:
            m_start, m_dur, window = 0.0, 0.0, "none"
        attrs.append(pb.AttributeProto(name="measured_start_us", double_val=m_start))
        attrs.append(pb.AttributeProto(name="measured_dur_us", double_val=m_dur))
        attrs.append(pb.AttributeProto(name="measured_window", string_val=window))
        if self.tt is not None:
            attrs.append(pb.AttributeProto(name="thread_timing", string_val=THREAD_TIMING))
        return pb.GlobalMetadata(version=ET_VERSION, attr=attrs)


def _name_field(name: str) -> tuple[bytes, str]:
    b = name.encode()
    return b"\x0a" + bytes((len(b),)) + b, name


_DEPTH = _name_field("thread_depth")
_WORK = _name_field("work_before_us")
_TAIL = _name_field("tail_us")
_IDLE = _name_field("idle_before_us")
_POST = _name_field("wait_post_us")
_WAIT_ON = _name_field("wait_on")
_FREES = _name_field("frees_thread")


def _comm_attrs(f: CommFields, t: int) -> list[pb.AttributeProto]:
    A = pb.AttributeProto
    if t == pb.COMP_NODE:   # a collective the simulator does not run (astrasim_safe): kept for information
        out = [A(name="orig_collective", string_val=f.collective)]
        if f.comm_type is not None:
            out.append(A(name="orig_comm_type", int64_val=f.comm_type))
        out.append(A(name="orig_comm_size", int64_val=f.size))
        out.append(A(name="orig_pg_name", string_val=f.pg_name))
        return out
    out = []
    if t == pb.COMM_COLL_NODE and f.comm_type is not None:
        out.append(A(name="comm_type", int64_val=f.comm_type))
    out.append(A(name="comm_size", int64_val=f.size))
    out.append(A(name="pg_name", string_val=f.pg_name))
    out.append(A(name="comm_priority", int32_val=0))
    if f.seq is not None:
        out.append(A(name="comm_seq", int64_val=f.seq))
    if t in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
        out.append(A(name="comm_src", int32_val=f.src))
        out.append(A(name="comm_dst", int32_val=f.dst))
        out.append(A(name="comm_tag", int32_val=f.tag))
    return out


def _exclusive(items: list[tuple[float, float, int, int]]) -> dict[int, float]:
    """Exclusive time per op of one thread by time nesting: ``(ts, dur, pos, index)`` -> ``{index: µs}``.

    Sorted by start (longer first, then call order); a stack holds the open
    ops; each op's time is taken off the op directly enclosing it (clipped to
    that op's end, so a child that overruns its parent by a rounding error
    does not make the parent negative).
    """
    items.sort(key=lambda x: (x[0], -x[1], x[2]))
    excl: dict[int, float] = {}
    stack: list[tuple[float, int]] = []
    for t, d, _, i in items:
        end = t + d
        while stack and stack[-1][0] <= t:
            stack.pop()
        excl[i] = d
        if stack:
            pend, pi = stack[-1]
            excl[pi] -= min(end, pend) - t
        stack.append((end, i))
    return excl
