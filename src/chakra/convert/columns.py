"""What the converter keeps of each node: flat per-node columns, and the lean loader that fills them.

The passes of ``core._Converter`` read a few fields of every node (id, name, parent,
times, thread, stream) and everything else of only a few nodes (comm ops, the
METADATA node).  :class:`Columns` holds exactly that: parallel lists indexed by the
node's position in the file, the whole ``HostOp`` only where needed (``full``), and for
every other node its serialised inputs/outputs/attributes (``tails``, see
``convert.serial``).

:func:`load_columns` builds them while the ET+ is parsed a few MB at a time
(``chakra.io.jsonio.iter_json_array``), so the parsed dicts of a chunk die with it: a
million-op ET+ never exists as a million ``HostOp`` objects.  Whatever it does not
expect (a malformed node, duplicate ids, a chunk that does not parse) sends it back to
the host loader (``load_host_et``) and :func:`columns_from_trace`, whose results and
errors are the reference.  The flat (1.0.1) layout is read straight from the node
dicts; the chakra layout goes through the host loader's own parser one chunk at a time.
A large plain file is loaded by two processes (see "a large file loaded by two processes"
below), with the same results and errors.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from array import array
from collections.abc import Iterable, Iterator, MutableSequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from chakra.convert.attrs import frame_attr, make_attr, varint
from chakra.convert.serial import (
    _CORR_NAME,
    _EXT_NAME,
    _I64_MAX,
    _RF_NAME,
    COMM_KEYS,
    CORR_PRE,
    CPU_SKIP,
    EMPTY_IO,
    EXT_PRE,
    FLAT_KEYS,
    GPU_CATS,
    GPU_SKIP,
    IN_TAG,
    OUT_TAG,
    RF_PRE,
    Serializer,
    int_attr,
)
from chakra.host import loader as _hl
from chakra.host.comm import is_nccl_kernel
from chakra.host.model import METADATA, OP, HostOp, HostTrace, IOInfo, is_comm_name
from chakra.io import forked, gc_paused, load_json
from chakra.io.jsonio import (
    guess_item_boundary,
    iter_json_array,
    iter_json_array_range,
    json_array_start,
    top_level_array,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Columns:
    """Per-node fields in file order (index = position); see the module doc."""

    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    parents: MutableSequence[int] = field(default_factory=list)   # array("q") from the lean loader
    kinds: list[str] = field(default_factory=list)
    rf_ids: list[Any] = field(default_factory=list)
    threads: list[Any] = field(default_factory=list)   # ET+ kineto_tid when not None, else the host tid
    is_gpu: list[bool] = field(default_factory=list)
    # ET+ ts / dur / exclusive_dur: a float value as is, anything else (None when absent, an int, NaN, a
    # string ...) as NaN here plus the raw value in the ``*_x`` dict (absent for None); see :func:`raw`.
    ts: array[float] = field(default_factory=lambda: array("d"))
    dur: array[float] = field(default_factory=lambda: array("d"))
    excl: array[float] = field(default_factory=lambda: array("d"))
    ts_x: dict[int, Any] = field(default_factory=dict)
    dur_x: dict[int, Any] = field(default_factory=dict)
    excl_x: dict[int, Any] = field(default_factory=dict)
    skeys: list[Any] = field(default_factory=list)     # GPU ops: (device, stream), the stream chain key
    xdeps: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # index -> (inter_thread_dep, sync_dep)
    full: list[HostOp | None] = field(default_factory=list)   # the op where more than the columns is needed
    tails: list[bytes | None] | None = None             # serialised inputs+outputs+attrs (None: from full)
    index: dict[int, int] = field(default_factory=dict)  # id -> position (filled by the lean loader)


_NAN = float("nan")


def raw(values: array[float], extra: dict[int, Any], i: int) -> Any:
    """The raw value of node ``i`` of a float column (see ``Columns.ts``)."""
    v = values[i]
    return v if v == v else extra.get(i)


def _put(values: array[float], extra: dict[int, Any], i: int, v: Any) -> None:
    if type(v) is float and v == v:
        values.append(v)
    else:
        values.append(_NAN)
        if v is not None:
            extra[i] = v


def is_comm_candidate(gpu: bool, name: str, collective_name: Any) -> bool:
    """Whether a node may become a comm node or take part in finding one (``core._Converter._comm``):
    a GPU node that is an NCCL kernel or carries an ET+ ``collective_name``; a host comm op."""
    if gpu:
        return is_nccl_kernel(name) or (isinstance(collective_name, str) and bool(collective_name))
    return is_comm_name(name)


def _gpu_key(a: dict[str, Any], tid: Any) -> tuple[Any, Any]:
    args = a.get("args") if isinstance(a.get("args"), dict) else {}
    stream = a.get("stream", args.get("stream", a.get("tid", tid)))
    device = a.get("device", args.get("device"))
    return (device, stream)


def _add_op(c: Columns, op: HostOp, ser: Serializer | None, interned: dict[Any, Any]) -> None:
    """Append one HostOp; with ``ser``, keep only its serialised pieces unless the converter needs it."""
    a = op.attrs
    get = a.get
    i = len(c.ids)
    c.ids.append(op.id)
    name = op.name
    c.names.append(interned.setdefault(name, name))
    c.parents.append(op.parent)
    c.kinds.append(op.kind)
    c.rf_ids.append(op.rf_id)
    kt = get("kineto_tid")
    c.threads.append(kt if kt is not None else op.tid)
    gpu = get("cat") in GPU_CATS
    c.is_gpu.append(gpu)
    _put(c.ts, c.ts_x, i, get("ts"))
    _put(c.dur, c.dur_x, i, get("dur"))
    _put(c.excl, c.excl_x, i, get("exclusive_dur"))
    if gpu:
        key = _gpu_key(a, op.tid)
        try:
            key = interned.setdefault(key, key)
        except TypeError:
            pass   # unhashable: the stream pass reports it
        c.skeys.append(key)
    else:
        c.skeys.append(None)
    itd = get("inter_thread_dep")
    sd = get("sync_dep")
    if itd is not None or sd is not None:
        c.xdeps[i] = (itd, sd)
    if ser is None or op.kind == METADATA or is_comm_candidate(gpu, name, get("collective_name")):
        c.full.append(op)
        if c.tails is not None:
            c.tails.append(None)
    else:
        c.full.append(None)
        parts = [ser.op_io(op.inputs, IN_TAG), ser.op_io(op.outputs, OUT_TAG)]
        parts.extend(ser.gpu_attrs(op) if gpu else ser.cpu_attrs(op, True, False))
        c.tails.append(b"".join(parts))  # type: ignore[union-attr]


def columns_from_trace(trace: HostTrace) -> Columns:
    """Columns of a loaded HostTrace: every op kept whole (``full``), nothing pre-serialised."""
    c = Columns()
    interned: dict[Any, Any] = {}
    for op in trace.ops:
        _add_op(c, op, None, interned)
    return c


class _Fallback(Exception):
    """The lean loader met something it leaves to the host loader."""


class _Lean:
    """Fills Columns from raw node dicts (flat layout) or from the host loader's HostOps (chakra layout)."""

    def __init__(self, ser: Serializer) -> None:
        self.ser = ser
        self.c = Columns(tails=[], parents=array("q"))
        self.interned: dict[Any, Any] = {}
        self.kept: list[HostOp] = []
        self.nccl_names: dict[str, bool] = {}   # name -> is_nccl_kernel(name)
        self.comm_names: dict[str, bool] = {}   # name -> is_comm_name(name)

    def chakra_chunk(self, nodes: list[Any]) -> None:
        c = self.c
        base = len(c.ids)
        ops: list[HostOp] = []
        _hl._parse_chakra(nodes, ops, {})
        index = c.index
        for op in ops:
            op.index += base
            if op.id in index:
                raise _Fallback
            index[op.id] = op.index
            _add_op(c, op, self.ser, self.interned)
            if c.full[-1] is not None:
                self.kept.append(op)

    def flat_chunk(self, nodes: list[Any]) -> None:
        """``loader._parse_flat`` + ``_add_op`` for each raw node, without the HostOp (module doc).

        The two node shapes our linker writes (``_GPU_SHAPE``, ``_HOST_SHAPE``: exactly those keys)
        are read with one ``itemgetter`` call and serialised inline; any other node takes the general
        path (``Serializer.flat_tail``), which gives the same bytes for those shapes too.
        """
        c = self.c
        ids, names, parents, kinds, rf_ids = c.ids, c.names, c.parents, c.kinds, c.rf_ids
        threads, is_gpu, skeys = c.threads, c.is_gpu, c.skeys
        ts, dur, excl, ts_x, dur_x, excl_x = c.ts, c.dur, c.excl, c.ts_x, c.dur_x, c.excl_x
        nan = _NAN
        xdeps, full, tails, index = c.xdeps, c.full, c.tails, c.index
        assert tails is not None
        interned = self.interned
        intern = interned.setdefault
        ser = self.ser
        flat_tail = ser.flat_tail
        io = ser.io_field
        gpu_block, cpu_block, fixed_block = ser.gpu_block, ser.cpu_block, ser.fixed_block
        kind_of = _hl._kind
        gpu_cats = GPU_CATS
        gpu_get, host_get = _GPU_GET, _HOST_GET
        nccl_names, comm_names = self.nccl_names, self.comm_names
        corr_pre, ext_pre, rf_pre = CORR_PRE, EXT_PRE, RF_PRE
        join = b"".join
        empty_in, empty_out = EMPTY_IO[IN_TAG], EMPTY_IO[OUT_TAG]
        i = len(ids)
        for n in nodes:
            ln = len(n)
            tail = None
            if ln == 22 and "cat" in n:
                try:
                    (nid, name, cat, _, t, d, _, e, stream, device, tid, args, _, coll, _, parent,
                     inp, ish, ity, outp, osh, oty) = gpu_get(n)
                except KeyError:
                    pass
                else:
                    cand = nccl_names.get(name) if type(name) is str else True
                    if cand is None:
                        cand = nccl_names[name] = is_nccl_kernel(name)
                    if (type(nid) is int and type(parent) is int and type(inp) is list and type(cat) is str
                            and cat in gpu_cats and nid != 1 and name[:1] != "[" and name[:1] != "#"
                            and not cand and not (isinstance(coll, str) and coll)):
                        if not isinstance(args, dict):
                            args = {}
                        # (an IOInfo of falsy parts is the cached empty one: ``x or []`` makes them [])
                        parts = [io(IN_TAG, inp, ish or [], ity or []) if (inp or ish or ity) else empty_in,
                                 io(OUT_TAG, outp or [], osh or [], oty or []) if (outp or osh or oty)
                                 else empty_out, gpu_block(stream, device, cat)]
                        v = args.get("correlation")
                        if type(v) is int:
                            parts.append(corr_pre[len(vb := varint(v))] + vb if 0 <= v <= _I64_MAX else
                                         int_attr(_CORR_NAME, "correlation", v))
                        v = args.get("External id")
                        if type(v) is int:
                            parts.append(ext_pre[len(vb := varint(v))] + vb if 0 <= v <= _I64_MAX else
                                         int_attr(_EXT_NAME, "external_id", v))
                        tail = join(parts)
                        gpu = True
                        kind = OP
                        rf = None
                        thread = tid
                        key = (device, stream)
                        try:
                            key = intern(key, key)
                        except TypeError:
                            pass
            elif ln == 21:
                try:
                    (name, nid, rf, parent, fp, sq, sc, tid, ft, osc, inp, ish, ity, outp, osh, oty,
                     t, d, _, e, kt) = host_get(n)
                except KeyError:
                    pass
                else:
                    cand = comm_names.get(name) if type(name) is str else True
                    if cand is None:
                        cand = comm_names[name] = is_comm_name(name)
                    if (type(nid) is int and type(parent) is int and type(inp) is list
                            and nid != 1 and name[:1] != "[" and name[:1] != "#" and not cand):
                        parts = [io(IN_TAG, inp, ish or [], ity or []) if (inp or ish or ity) else empty_in,
                                 io(OUT_TAG, outp or [], osh or [], oty or []) if (outp or osh or oty)
                                 else empty_out, cpu_block(True, kt, tid)]
                        if rf is not None:
                            if type(rf) is not int:
                                parts.append(frame_attr(make_attr("rf_id", rf)))
                            elif 0 <= rf <= _I64_MAX:
                                parts.append(rf_pre[len(vb := varint(rf))] + vb)
                            else:
                                parts.append(int_attr(_RF_NAME, "rf_id", rf))
                        parts.append(fixed_block(fp, sq, sc, ft, osc))
                        tail = join(parts)
                        gpu = False
                        kind = OP
                        thread = kt if kt is not None else tid
                        key = None
            if tail is None:   # the general path
                get = n.get
                nid = n["id"]
                name = n["name"]
                parent = get("parent", 0)
                if type(nid) is not int or type(name) is not str or type(parent) is not int:
                    raise _Fallback
                if type(get("inputs") or []) is not list:
                    raise _Fallback
                kind = (OP if (nid != 1 and name[:1] != "[" and name[:1] != "#")
                        else kind_of(nid, name, parent))
                tid = get("tid", 0)
                rf = get("rf_id")
                kt = get("kineto_tid")
                thread = kt if kt is not None else tid
                gpu = get("cat") in gpu_cats
                t = get("ts")
                d = get("dur")
                e = get("exclusive_dur")
                if gpu:
                    args = get("args")
                    if not isinstance(args, dict):
                        args = {}
                    key = (n["device"] if "device" in n else args.get("device"),
                           n["stream"] if "stream" in n else args.get("stream", tid))
                    try:
                        key = intern(key, key)
                    except TypeError:
                        pass
                else:
                    key = None
                itd = get("inter_thread_dep")
                sd = get("sync_dep")
                if itd is not None or sd is not None:
                    xdeps[i] = (itd, sd)
                if kind == METADATA or is_comm_candidate(gpu, name, get("collective_name")):
                    op = _flat_op(n, i, kind)
                    self.kept.append(op)
                else:
                    op = None
                    tail = flat_tail(n, gpu, tid)
            else:
                op = None
            if index.setdefault(nid, i) != i:   # a duplicate id: the host loader reports it
                raise _Fallback
            ids.append(nid)
            names.append(intern(name, name))
            parents.append(parent)
            kinds.append(kind)
            rf_ids.append(rf)
            threads.append(thread)
            is_gpu.append(gpu)
            skeys.append(key)
            if type(t) is float and t == t:
                ts.append(t)
            else:
                ts.append(nan)
                if t is not None:
                    ts_x[i] = t
            if type(d) is float and d == d:
                dur.append(d)
            else:
                dur.append(nan)
                if d is not None:
                    dur_x[i] = d
            if type(e) is float and e == e:
                excl.append(e)
            else:
                excl.append(nan)
                if e is not None:
                    excl_x[i] = e
            full.append(op)
            tails.append(tail)
            i += 1


#: the node shapes of our linker's flat ET+ (key sets; see _Lean.flat_chunk)
_GPU_SHAPE = ("id", "name", "cat", "ph", "ts", "dur", "inclusive_dur", "exclusive_dur", "stream", "device",
              "tid", "args", "pg_name", "collective_name", "comm_size", "parent", "inputs", "input_shapes",
              "input_types", "outputs", "output_shapes", "output_types")
_HOST_SHAPE = ("name", "id", "rf_id", "parent", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema",
               "inputs", "input_shapes", "input_types", "outputs", "output_shapes", "output_types",
               "ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid")
_GPU_GET, _HOST_GET = itemgetter(*_GPU_SHAPE), itemgetter(*_HOST_SHAPE)
# The inline serialisation copies no attribute: every key of the two shapes is a HostOp field or skipped.
assert not [k for k in _GPU_SHAPE if k not in FLAT_KEYS and k not in GPU_SKIP and k not in COMM_KEYS]
assert not [k for k in _HOST_SHAPE if k not in FLAT_KEYS and k not in CPU_SKIP and k != "is_cpu_op"]


def _flat_op(n: dict[str, Any], index: int, kind: str) -> HostOp:
    """The HostOp ``loader._parse_flat`` builds of ``n``."""
    get = n.get
    return HostOp(
        n["id"], n["name"], get("parent", 0), kind,
        get("rf_id"), get("tid", 0), get("fw_parent", 0), get("seq_id", -1), get("scope", 0),
        get("fw_tid", 0), get("op_schema", ""),
        IOInfo(get("inputs") or [], get("input_shapes") or [], get("input_types") or [],
               get("input_strides")),
        IOInfo(get("outputs") or [], get("output_shapes") or [], get("output_types") or [],
               get("output_strides")),
        {k: v for k, v in n.items() if k not in FLAT_KEYS}, {}, index,
    )


def load_columns(path: str | os.PathLike[str]) -> tuple[HostTrace, Columns, Serializer]:
    """Load an ET+ / host ET for the converter: ``(trace, columns, serializer)``.

    ``trace`` is the HostTrace of ``load_host_et`` (same top-level fields, process groups,
    warnings) except that its ``ops`` are only the ops kept whole (``columns.full``) and
    ``by_id`` is empty.  Anything the lean path does not handle falls back to
    ``load_host_et`` (module doc), whose errors are then the ones raised.
    """
    with gc_paused():
        return _load_columns(os.fspath(path))


def _load_columns(spath: str) -> tuple[HostTrace, Columns, Serializer]:
    if _use_parallel(spath):
        res = _load_parallel(spath)
        if res is not None:
            return res
    return _load_sequential(spath)


def _load_sequential(spath: str) -> tuple[HostTrace, Columns, Serializer]:
    ser = Serializer()
    streamed = iter_json_array(spath, "nodes")
    if streamed is not None:
        top, chunks = streamed
        try:
            res = _lean(top, chunks, spath, ser)
        except Exception as exc:  # noqa: BLE001 (the host loader decides, see the module doc)
            log.debug("%s: lean load left to the host loader (%r)", spath, exc)
            res = None
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        if res is None:
            trace = _hl.load_host_et(spath)
            return trace, columns_from_trace(trace), ser
    else:
        data = load_json(spath)
        nodes = top_level_array(data, "nodes", _hl.no_nodes_message(data), spath)
        try:
            res = _lean(data, iter([nodes]), spath, ser)
        except Exception as exc:  # noqa: BLE001
            log.debug("%s: lean load left to the host loader (%r)", spath, exc)
            res = None
        if res is None:
            trace = _hl.build_host_trace(data, spath)
            return trace, columns_from_trace(trace), ser
        del nodes
    top, layout, lean, warnings = res
    for w in warnings:
        log.warning("%s", w)
    trace = _hl._make_trace(top, top.get("schema"), layout, lean.kept, {}, warnings, spath)
    return trace, lean.c, ser


def _lean(top: dict[str, Any], chunks: Iterator[list[Any]], path: str, ser: Serializer
          ) -> tuple[dict[str, Any], str, _Lean, list[str]]:
    first = next(chunks, [])
    warnings: list[str] = []
    layout = _hl._detect_layout(top.get("schema"), first, path, warnings, emit=False)
    lean = _Lean(ser)
    add = lean.flat_chunk if layout == _hl.FLAT else lean.chakra_chunk
    held: list[list[Any]] = [first]
    del first   # each chunk (its parsed dicts) is released once its columns are filled
    it = _chunks_from(held, chunks)
    while True:
        chunk = next(it, None)
        if chunk is None:
            break
        add(chunk)
        del chunk   # before the next one is parsed
    return top, layout, lean, warnings


def _chunks_from(held: list[list[Any]], chunks: Iterable[list[Any]]) -> Iterator[list[Any]]:
    yield held.pop()
    yield from chunks


# ---- a large file loaded by two processes ----------------------------------------------------------------
#
# Loading is most of a conversion's time and uses one core.  For a large plain file, the ``nodes`` list is
# cut into ``_SEGMENTS`` byte ranges at item boundaries guessed near equal offsets.  A forked child takes
# segments from the end, this process from the start (a shared claim counter, so whichever runs faster does
# more), until they meet.  The child fills separate columns per segment and pickles each to a temporary
# file as soon as it is done (columns are plain lists of ints / strings / bytes and arrays: they pickle
# fast); this process then appends them after its own, in file order, shifting what is positional
# (``HostOp.index`` of the kept ops, the keys of ``*_x`` / ``xdeps``, ``index``).  Every segment but the
# last is read up to its end with ``iter_json_array_range``, which fails unless the text parses as whole
# items up to it: the first segment starts at the list, so all of them parsing proves every guessed
# boundary right, one after the other.  The layout is detected here on the first piece, before the fork,
# with the same warnings.  Whenever anything is not as expected (a boundary, the child failing or
# crashing, a duplicate id between segments, any exception) the whole file is loaded again by
# ``_load_sequential``, so results and errors are exactly the sequential ones.  Gzip and small files, and
# machines without fork or with one core, take the sequential path.

#: plain files at least this large are loaded by two processes
PARALLEL_MIN_BYTES = 64 << 20
#: the number of byte ranges the list is cut into (the imbalance at the end is at most about one)
_SEGMENTS = 48
#: the first read of this process's part: small, so that the fork copies little
_FIRST_BLOCK = 1 << 20
#: the later reads of both parts (as ``iter_json_array``)
_BLOCK = 8 << 20
_STATS: dict[str, Any] = {}   # what the last parallel load did (for the debug log and the tests)


def _cpus() -> int:
    return forked.usable_cpus()


def _use_parallel(spath: str) -> bool:
    if not hasattr(os, "fork") or _cpus() < 2 or not forked.safe_to_fork():
        return False
    try:
        return os.path.getsize(spath) >= PARALLEL_MIN_BYTES
    except OSError:
        return False


# the Columns fields the child sends as they are (positional keys shifted by the parent); ``full`` and
# ``index`` are rebuilt by the parent from the kept ops and the ids
_LISTS = ("ids", "names", "parents", "kinds", "rf_ids", "threads", "is_gpu", "ts", "dur", "excl", "skeys",
          "tails")
_SHIFTED = ("ts_x", "dur_x", "excl_x", "xdeps")


def _segments(spath: str, start: int, size: int) -> list[tuple[int, int | None]]:
    """``(start, stop)`` byte ranges of the list: guessed boundaries near equal offsets; stop None: to the
    list's end."""
    bounds: list[tuple[int, int]] = []
    step = (size - start) / _SEGMENTS
    for k in range(1, _SEGMENTS):
        near = start + int(step * k)
        if bounds and near <= bounds[-1][1]:
            continue
        window = min(1 << 20, max(1 << 16, int(step)))
        cut = guess_item_boundary(spath, near, window=window, accept=_all_nodes)
        if cut is not None and (not bounds or cut[0] > bounds[-1][1]):
            bounds.append(cut)
    out: list[tuple[int, int | None]] = []
    begin = start
    for end, nxt in bounds:
        out.append((begin, end))
        begin = nxt
    out.append((begin, None))
    return out


def _load_parallel(spath: str) -> tuple[HostTrace, Columns, Serializer] | None:
    """The parallel load (see above), or None when it cannot give the sequential result."""
    head = json_array_start(spath, "nodes", min_bytes=PARALLEL_MIN_BYTES)
    if head is None:
        return None
    top, start = head
    try:
        segs = _segments(spath, start, os.path.getsize(spath))
    except OSError:
        return None
    if len(segs) < 2:
        return None
    _STATS.clear()
    t0 = time.perf_counter()
    parts = iter_json_array_range(spath, segs[0][0], segs[0][1], block=_BLOCK, first_block=_FIRST_BLOCK)
    child: _Child | None = None
    try:
        first = next(parts, None)
        if not first or not isinstance(first[0], dict):
            return None   # the sequential path decides (it fails on a non-dict node)
        warnings: list[str] = []
        layout = _hl._detect_layout(top.get("schema"), first, spath, warnings, emit=False)
        ser = Serializer()
        child = _Child(spath, segs, layout, ser)
        if not child.started:
            return None
        lean = _Lean(ser)
        add = lean.flat_chunk if layout == _hl.FLAT else lean.chakra_chunk
        add(first)
        del first
        for chunk in parts:
            add(chunk)
            del chunk
        mine = 1
        rest: dict[str, Any] = {}
        while True:
            k = child.claims.front()
            if k is None:
                break
            a, b = segs[k]
            for chunk in iter_json_array_range(spath, a, b, rest, block=_BLOCK):
                add(chunk)
                del chunk
            mine += 1
        t1 = time.perf_counter()
        got = child.result()
        t2 = time.perf_counter()
        child = None
        if got is None or [g[0] for g in got] != list(range(mine, len(segs))):
            return None
        got.reverse()
        while got:   # each segment's lists die once appended
            _, seg_rest, kept, cols = got.pop()
            _append_part(lean, kept, cols)
            del cols
            rest.update(seg_rest)
        top.update(rest)
    except Exception as exc:  # noqa: BLE001 (the sequential load decides, see above)
        log.debug("%s: parallel load left to the sequential one (%r)", spath, exc)
        return None
    finally:
        parts.close()
        if child is not None:
            child.cancel()
    _STATS.update(segments=len(segs), parent=mine, child=len(segs) - mine, wait_read_s=t2 - t1,
                  own_s=t1 - t0, join_s=time.perf_counter() - t2)
    log.debug("%s: parallel load: %s", spath, _STATS)
    for w in warnings:
        log.warning("%s", w)
    trace = _hl._make_trace(top, top.get("schema"), layout, lean.kept, {}, warnings, spath)
    return trace, lean.c, ser


def _all_nodes(items: list[Any]) -> bool:
    """Whether parsed items look like nodes (for ``guess_item_boundary``; attributes have no id)."""
    return bool(items) and all(type(n) is dict and "id" in n for n in items)


def _append_part(lean: _Lean, kept: list[HostOp], cols: dict[str, Any]) -> None:
    """Append the columns of a segment the child loaded (``_Child._run``) after those so far."""
    c = lean.c
    base = len(c.ids)
    ids = cols["ids"]
    n = len(ids)
    index = c.index
    index.update(zip(ids, range(base, base + n)))
    if len(index) != base + n:
        raise _Fallback   # an id seen before: the host loader reports it
    for name in _LISTS:
        getattr(c, name).extend(cols[name])
    for name in _SHIFTED:
        getattr(c, name).update({i + base: v for i, v in cols[name].items()})
    full = c.full
    full.extend([None] * n)
    for op in kept:
        op.index += base
        full[op.index] = op
    lean.kept.extend(kept)
    if any(len(getattr(c, name)) != base + n for name in _LISTS):
        raise _Fallback


class _Claims:
    """The segments not taken yet, ``[front, back)``, shared by this process and the child."""

    def __init__(self, n: int) -> None:
        import mmap
        import multiprocessing

        self._lock = multiprocessing.get_context("fork").Lock()
        self._mem = mmap.mmap(-1, 16)
        self._mem[:16] = struct.pack("qq", 1, n)   # segment 0 is this process's

    def _take(self, back: bool) -> int | None:
        if not self._lock.acquire(timeout=10):
            return None   # (a process died holding it: nothing is taken any more)
        try:
            f, b = struct.unpack("qq", self._mem[:16])
            if f >= b:
                return None
            if back:
                b -= 1
                k = b
            else:
                k = f
                f += 1
            self._mem[:16] = struct.pack("qq", f, b)
            return k
        finally:
            self._lock.release()

    def front(self) -> int | None:
        return self._take(False)

    def back(self) -> int | None:
        return self._take(True)


class _Child:
    """A forked child (:class:`chakra.io.forked.ForkedCall`) loading segments from the end (``_run``)."""

    def __init__(self, path: str, segs: list[tuple[int, int | None]], layout: str, ser: Serializer) -> None:
        self.call: forked.ForkedCall | None = None
        try:
            self.claims = _Claims(len(segs))
        except (OSError, ImportError):
            return
        self.call = forked.ForkedCall(_Child._run, path, segs, layout, ser, self.claims, stream=True)

    @staticmethod
    def _run(path: str, segs: list[tuple[int, int | None]], layout: str, ser: Serializer,
             claims: _Claims) -> Iterator[tuple[int, dict[str, Any], list[HostOp], dict[str, Any]]]:
        """Take segments from the end while some are left; ``(k, rest, kept, columns)`` of each."""
        shared = _Lean(ser)
        while True:
            k = claims.back()
            if k is None:
                break
            lean = _Lean(ser)
            lean.interned = shared.interned
            lean.nccl_names = shared.nccl_names
            lean.comm_names = shared.comm_names
            add = lean.flat_chunk if layout == _hl.FLAT else lean.chakra_chunk
            rest: dict[str, Any] = {}
            a, b = segs[k]
            for chunk in iter_json_array_range(path, a, b, rest, block=_BLOCK):
                add(chunk)
                del chunk
            c = lean.c
            yield k, rest, lean.kept, {name: getattr(c, name) for name in _LISTS + _SHIFTED}
            del lean, c

    @property
    def started(self) -> bool:
        return self.call is not None and self.call.started

    def result(self) -> list[tuple[int, dict[str, Any], list[HostOp], dict[str, Any]]] | None:
        """``(segment, rest, kept, columns)`` of the segments the child loaded, in file order; None if it
        failed."""
        call, self.call = self.call, None
        if call is None:
            return None
        t = time.perf_counter()
        got = call.result()
        _STATS["wait_and_read_s"] = time.perf_counter() - t
        if got is None:
            return None
        got.sort(key=itemgetter(0))
        return got

    def cancel(self) -> None:
        """Stop the child (this process gave up)."""
        call, self.call = self.call, None
        if call is not None:
            call.cancel()
