"""What the converter keeps of each node: flat per-node columns, filled from the loaded ops.

The passes of a conversion (``convert.core.run_passes``) read a few fields of every node (id, name, parent,
times, thread, stream) and everything else of only a few nodes (comm ops, the
METADATA node).  :class:`Columns` holds exactly that: parallel lists indexed by the
node's position in the file, the whole ``HostOp`` only where needed (``full``), and for
every other node its serialised inputs/outputs/attributes (``tails``, see
``convert.serial``).

:func:`load_columns` fills them one node at a time, so a million-op ET+ never exists as a million
``HostOp`` objects: every node is read by the host loader (``chakra.host.loader.Records.record``: the
decoded node and its core fields, its inputs/outputs left raw) and goes straight into the columns
(:class:`_Filler`); the few that the converter needs whole (comm candidates, METADATA) or whose attribute
dict holds more than the node's own keys are built as HostOps (``_Builder.host_op``) and added by
:func:`_add_op`, which :func:`columns_from_trace` uses for every op of a loaded HostTrace (every op kept
whole).  The tests compare the two on random documents (tests/convert/test_convert_columns.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from array import array
from collections.abc import Callable, Iterator, MutableSequence
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any

from msgspec import UNSET

from chakra.convert.attrs import frame_attr, make_attr, varint
from chakra.convert.serial import (
    CPU_SKIP,
    EMPTY_IO,
    GPU_CATS,
    GPU_SKIP,
    IN_TAG,
    OUT_TAG,
    RF_NAME,
    Serializer,
    int_attr,
    io_tail,
    kineto_ids,
)
from chakra.errors import ChakraError, TraceFormatError
from chakra.formats import ATTR_IS_CPU_OP, ATTR_RF_ID, COMM_ATTRS, IO_VALUES
from chakra.host import keys as hk
from chakra.host.comm import is_comm_kernel_name
from chakra.host.decode import Node, canonical, node_cuts, read_document
from chakra.host.loader import Records, make_trace, part_links, part_records, parts_top
from chakra.host.model import EMPTY_IO as MODEL_EMPTY_IO
from chakra.host.model import METADATA, HostOp, HostTrace, is_comm_name
from chakra.io import gc_paused
from chakra.io.forkmap import fork_map, parts, split
from chakra.io.pbstream import varint_table
from chakra.tunables import (
    ATTR_ENTRIES_CACHE_MAX,
    DECODE_PART_MIN_BYTES,
    DECODE_PIECE_MIN_NODES,
    IO_TAILS_CACHE_MAX,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Columns:
    """Per-node fields in file order (index = position); see the module doc."""

    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    parents: MutableSequence[int] = field(default_factory=list)   # array("q") from load_columns
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
    index: dict[int, int] = field(default_factory=dict)  # id -> position (filled by load_columns)


_NAN = float("nan")


def raw(values: array[float], extra: dict[int, Any], i: int) -> Any:
    """The raw value of node ``i`` of a float column (see ``Columns.ts``)."""
    v = values[i]
    return v if v == v else extra.get(i)


def _put(values: array[float], extra: dict[int, Any], i: int, v: Any) -> None:
    """Append ``v`` to a float column (see ``Columns.ts``); absent (None, UNSET) is NaN alone."""
    if type(v) is float and v == v:
        values.append(v)
    else:
        values.append(_NAN)
        if v is not None and v is not UNSET:
            extra[i] = v


def is_comm_candidate(gpu: bool, name: str, collective_name: Any) -> bool:
    """Whether a node may become a comm node or take part in finding one (``collectives.find_comm``):
    a GPU node that is a communication kernel (``chakra.host.collective_names``) or carries an ET+
    ``collective_name``; a host comm op."""
    if gpu:
        return is_comm_kernel_name(name) or (isinstance(collective_name, str) and bool(collective_name))
    return is_comm_name(name)


def _gpu_key(a: dict[str, Any], tid: Any) -> tuple[Any, Any]:
    args = a.get("args")
    if not isinstance(args, dict):
        args = {}
    stream = a.get("stream", args.get("stream", a.get("tid", tid)))
    device = a.get("device", args.get("device"))
    return (device, stream)


def _add_op(c: Columns, op: HostOp, ser: Serializer | None, interned: dict[Any, Any], i: int) -> None:
    """Append one HostOp, node ``i`` of the file; with ``ser``, keep only its serialised pieces unless the
    converter needs it."""
    a = op.attrs
    get = a.get
    c.parents.append(op.parent)   # first: an id beyond int64 fails here, before anything is appended
    c.ids.append(op.id)
    name = op.name
    c.names.append(interned.setdefault(name, name))
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
    if ser is None or op.kind == METADATA or is_comm_candidate(gpu, name, get(hk.COLLECTIVE_NAME)):
        c.full.append(op)
        if c.tails is not None:
            c.tails.append(None)
    else:
        c.full.append(None)
        parts = list(ser.op_ios(op))
        parts.extend(ser.gpu_attrs(op) if gpu else ser.cpu_attrs(op, True, False))
        c.tails.append(b"".join(parts))  # type: ignore[union-attr]


def columns_from_trace(trace: HostTrace) -> Columns:
    """Columns of a loaded HostTrace: every op kept whole (``full``), nothing pre-serialised."""
    c = Columns()
    interned: dict[Any, Any] = {}
    for i, op in enumerate(trace.ops):
        _add_op(c, op, None, interned, i)
    return c


@contextlib.contextmanager
def malformed(path: str) -> Iterator[None]:
    """A field of an unexpected type deep in a pass (a list where an id belongs, a string for a size) is
    the input's fault: a TraceFormatError naming the file, the original error chained for ``--debug``."""
    try:
        yield
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        raise TraceFormatError(
            f"a node field has an unexpected type or value ({type(exc).__name__}: {str(exc)[:120]}); "
            "--debug shows where", path) from exc


def load_columns(path: str | os.PathLike[str]) -> tuple[HostTrace, Columns, Serializer]:
    """Load an ET+ / host ET for the converter: ``(trace, columns, serializer)``.

    ``trace`` is the HostTrace of ``load_host_et`` (same top-level fields, process groups,
    warnings) except that its ``ops`` are only the ops kept whole (``columns.full``) and
    ``by_id`` is empty.  Errors are those of ``load_host_et``.

    Each node is read by the host loader (``Records.record``) and goes straight into the columns
    (:class:`_Filler`); a node that needs its HostOp (a comm candidate, METADATA, a key that becomes an
    attribute) is built as one (``_Builder.host_op``) and added by :func:`_add_op`.  Both give the same
    columns and bytes (tests/convert/test_convert_columns.py).

    The nodes are decoded in contiguous pieces, one per core (``chakra.io.forkmap``: the pieces after the
    first in forked children, which send back their columns: arrays, lists of ints and of the tails'
    bytes, a few HostOps), and :func:`_join` puts the pieces together as one pass over the file would
    have filled them: the same columns, the same first error (tests/convert/test_convert_columns.py
    compares 1 and 3 parts).  A large uncompressed file is cut between two nodes before it is read, and
    each piece reads and scans its own part of it (:func:`_load_parts`); any other file is read and
    scanned whole here first.
    """
    with gc_paused():
        ser = Serializer()
        spans = node_cuts(path, parts(), DECODE_PART_MIN_BYTES)
        if spans:
            got = _load_parts(os.fspath(path), spans, ser)
            if got is not None:
                return (*got, ser)
        doc = read_document(path)
        records = Records(doc)
        what = f"decoding the nodes of {doc.path}"
        pieces = fork_map(partial(_load_piece, doc, records, ser), split(len(doc), DECODE_PIECE_MIN_NODES),
                          what)
        c, kept = _join(pieces, doc.path)
        records.warnings.extend(w for p in pieces for w in p.warnings)
        trace = make_trace(doc.top, records.builder.layout, kept, {}, records.warnings, doc.path)
    return trace, c, ser


def _load_parts(path: str, spans: list[tuple[int, int]], ser: Serializer) -> tuple[HostTrace, Columns] | None:
    """:func:`load_columns` of a file cut in parts (``chakra.host.decode.node_cuts``): each part is read,
    scanned and decoded in its own process (``fork_map``, ``chakra.host.loader.part_records``), instead of
    the whole file read and scanned here first (1.3 GB: 2.5 s).  None when a part cannot be read on its own
    or any error is met: the whole file then takes the one-part route, which gives the same result and raises
    the error with the words (and positions) of a whole read."""
    with part_links(len(spans)) as links:
        got = fork_map(partial(_load_part, path, spans, links, ser), list(range(len(spans))),
                       f"decoding the nodes of {path}")
    if None in got:
        log.info("%s: read whole (cut in %d parts, a part could not be decoded on its own)", path, len(spans))
        return None
    pieces, tops, layouts, layout_warnings = zip(*got)
    try:
        c, kept = _join(list(pieces), path)
    except ChakraError:
        log.info("%s: read whole (an error: the whole read reports it)", path)
        return None
    top = parts_top(path, list(tops), layout_warnings[0])
    if top is None:
        return None
    warnings = layout_warnings[0] + [w for p in pieces for w in p.warnings]
    return make_trace(top, layouts[0], kept, {}, warnings, path), c


def _load_part(path: str, spans: list[tuple[int, int]], links: list[tuple[int, int]], ser: Serializer,
               j: int) -> tuple[_Piece, dict[str, Any], str, list[str]] | None:
    """Part ``j`` of :func:`_load_parts`: its piece, its top-level keys, the layout and its warnings (part
    0's: detected there); None when it cannot be read on its own or meets an error."""
    got = part_records(path, spans, links, j)
    if got is None:
        return None
    records, first = got
    piece = _load_piece(records.doc, records, ser, range(first, len(records.doc)))
    if piece.error is not None:
        return None
    return piece, records.doc.top, records.layout, records.warnings


@dataclass(slots=True)
class _Piece:
    """What :func:`_load_piece` made of nodes ``start`` .. ``stop - 1``: their columns (``index`` filled
    only for the piece starting at 0, which the join extends), the strings and stream keys interned, the
    ops kept whole, the loader's warnings, and the error that stopped it at node ``stop`` (None: all done)."""

    start: int
    stop: int
    cols: Columns
    interned: dict[Any, Any]
    kept: list[HostOp]
    warnings: list[str]
    error: ChakraError | None = None


def _load_piece(doc: Any, records: Records, ser: Serializer, nodes: range) -> _Piece:
    """The columns of ``nodes`` (a range of node positions), one node at a time (see :func:`load_columns`).

    An input error (duplicate id, malformed node) is returned with the columns of the nodes before it, not
    raised: an earlier piece's ids may make a duplicate before it (:func:`_join` decides)."""
    builder = records.builder
    c = Columns(tails=[], parents=array("q"))
    interned: dict[Any, Any] = {}
    kept: list[HostOp] = []
    index = c.index
    builder.raw_io = True
    filler = _Filler(c, ser, interned, builder.extra_names, builder.piece, doc.path)
    add = filler.add
    record = records.record
    seen = len(records.warnings)
    i = nodes.start
    error: ChakraError | None = None
    try:
        with malformed(doc.path):
            for i in nodes:
                n, core = record(i)
                try:
                    if add(n, core, i):
                        continue
                except OverflowError:   # a parent id beyond int64: a plain list holds it (nothing appended)
                    c.parents = list(c.parents)
                    filler.parents = c.parents.append
                    if add(n, core, i):
                        continue
                op = builder.host_op(i, n, core)
                at = index.setdefault(op.id, i)
                if at != i:
                    raise _duplicate(op.id, at, i, doc.path)
                try:
                    _add_op(c, op, ser, interned, i)
                except OverflowError:
                    c.parents = list(c.parents)
                    filler.parents = c.parents.append
                    _add_op(c, op, ser, interned, i)
                if c.full[-1] is not None:
                    kept.append(op)
            i = nodes.stop
    except ChakraError as exc:
        error = exc
    warnings = records.warnings[seen:]
    del records.warnings[seen:]   # the join adds every piece's, in order
    if nodes.start:
        c.index = {}   # rebuilt from the ids by the join (cheaper than pickling it)
    return _Piece(nodes.start, i, c, interned, kept, warnings, error)


def _join(pieces: list[_Piece], path: str) -> tuple[Columns, list[HostOp]]:
    """The pieces' columns as one (the first piece's, extended) and the ops kept whole, or the first input
    error in file order: a piece's own error, or an id that repeats one of an earlier piece (which one
    pass would have met first)."""
    c = pieces[0].cols
    index = c.index
    interned = pieces[0].interned
    kept = list(pieces[0].kept)
    for k, p in enumerate(pieces):
        if k:
            ids = p.cols.ids[:p.stop - p.start]
            if not index.keys().isdisjoint(ids):
                for pos, nid in enumerate(ids, p.start):
                    if nid in index:
                        raise _duplicate(nid, index[nid], pos, path)
            index.update(zip(ids, range(p.start, p.stop)))
        if p.error is not None:
            raise p.error
        if k:
            _extend(c, p.cols, interned)
            kept.extend(p.kept)
    return c, kept


def _extend(c: Columns, more: Columns, interned: dict[Any, Any]) -> None:
    """Append the columns of the next piece to ``c`` (names and stream keys interned with ``c``'s)."""
    if type(c.parents) is not type(more.parents):   # a parent id beyond int64 in one of them: plain lists
        c.parents = list(c.parents)
        more.parents = list(more.parents)
    c.parents.extend(more.parents)
    c.ids.extend(more.ids)
    intern = interned.setdefault
    c.names.extend([intern(x, x) for x in more.names])
    c.kinds.extend(more.kinds)
    c.rf_ids.extend(more.rf_ids)
    c.threads.extend(more.threads)
    c.is_gpu.extend(more.is_gpu)
    for name in ("ts", "dur", "excl"):
        getattr(c, name).extend(getattr(more, name))
        getattr(c, name + "_x").update(getattr(more, name + "_x"))
    skeys = c.skeys
    for key in more.skeys:
        if key is not None:
            try:
                key = intern(key, key)
            except TypeError:
                pass   # unhashable: the stream pass reports it
        skeys.append(key)
    c.xdeps.update(more.xdeps)
    c.full.extend(more.full)
    c.tails.extend(more.tails)  # type: ignore[union-attr, arg-type]


def _duplicate(nid: int, at: int, i: int, path: str) -> TraceFormatError:
    return TraceFormatError(f"duplicate node id {nid} (indices {at} and {i})", path)


# ---- the columns of a node from its core fields ---------------------------------------------------------

#: node keys the columns read: an ``attrs`` entry of one of these names (the HostOp's attribute dict would
#: give it to the columns) or a std name out of place makes :class:`_Filler` build the HostOp
_NODE_KEYS = frozenset(("cat", "ph", "ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "stream",
                        "device", hk.TID, "pid", "args", hk.PG_NAME, hk.COLLECTIVE_NAME, hk.COMM_SIZE,
                        "comm_backend", "inter_thread_dep", "sync_dep", "parent", "ctrl_deps", hk.RF_ID,
                        hk.FW_PARENT, hk.SEQ_ID, hk.SCOPE, hk.FW_TID, hk.OP_SCHEMA))
_IN_EMPTY, _OUT_EMPTY = EMPTY_IO[IN_TAG], EMPTY_IO[OUT_TAG]


class _Filler:
    """Appends a node to the columns from the host loader's reading of it (``Records.record``: the decoded
    ``Node`` and its core fields), without a HostOp: what :func:`_add_op` appends for the HostOp the builder
    would make of it.  :meth:`add` returns False, having appended nothing, where that HostOp is needed
    (METADATA, a comm candidate) or its attribute dict would hold more than the node's own keys give the
    columns (a node read by the generic route, an ``attrs`` entry named as a node key, a node key that
    becomes an attribute of this kind of node): :func:`_load_piece` then builds it and calls ``_add_op``."""

    def __init__(self, c: Columns, ser: Serializer, interned: dict[Any, Any], extra_names: tuple[str, ...],
                 piece: Callable[[Any], bytes], path: str) -> None:
        self.c = c
        self.ser = ser
        self.interned = interned
        self.path = path
        self.parents = c.parents.append
        self.appends = (c.ids.append, c.names.append, c.kinds.append, c.rf_ids.append, c.threads.append,
                        c.is_gpu.append, c.skeys.append, c.full.append, c.tails.append)  # type: ignore[union-attr]
        # the node keys outside the layout's own that would be attributes of a CPU / GPU node
        cpu = [k for k in extra_names if k not in CPU_SKIP and k != ATTR_IS_CPU_OP]
        gpu = [k for k in extra_names if k not in GPU_SKIP and k not in COMM_ATTRS]
        self.cpu_more, self.cpu_none = _getter(cpu)
        self.gpu_more, self.gpu_none = _getter(gpu)
        self.comm_names: dict[str, bool] = {}
        self.piece = piece
        self.io_tails: dict[tuple[bytes, bytes], bytes] = {}   # raw (shapes, types) -> IOInfo fields 2, 3
        self.varints = varint_table()
        # id of a (shared) attrs dict of the builder -> (the dict, its CPU entries, its GPU entries), or None
        # when it holds a node key
        self.entries: dict[int, tuple[dict[str, Any], bytes, bytes] | None] = {}

    def add(self, n: Node, core: tuple[Any, ...], i: int) -> bool:
        """Append node ``i`` unless it needs its HostOp (see the class doc)."""
        (nid, name, parent, kind, rf, tid, fp, sq, sc, ft, osc, attrs, types, io) = core
        if n.extra is not None or kind == METADATA:
            return False
        cat = n.cat
        if cat is UNSET:
            gpu = False
            if self.cpu_more(n) != self.cpu_none:
                return False
            comm = self.comm_names.get(name)
            if comm is None:
                comm = self.comm_names[name] = is_comm_name(name)
            if comm:
                return False
        elif type(cat) is str and cat in GPU_CATS:
            gpu = True
            coll = n.collective_name
            if self.gpu_more(n) != self.gpu_none or (type(coll) is str and coll) or is_comm_kernel_name(name):
                return False
        else:
            return False
        if attrs:
            got = self.entries.get(id(attrs))
            if got is None or got[0] is not attrs:
                got = self.attr_entries(attrs, types)
                if got is None:
                    return False
            entries = got[2] if gpu else got[1]
        else:
            entries = b""
        c = self.c
        self.parents(parent)   # first: an id beyond int64 fails here, before anything is appended
        at = c.index.setdefault(nid, i)
        if at != i:
            raise _duplicate(nid, at, i, self.path)
        ids, names, kinds, rf_ids, threads, is_gpu, skeys, full, tails = self.appends
        ids(nid)
        names(self.interned.setdefault(name, name))
        kinds(kind)
        rf_ids(rf)
        kt = n.kineto_tid
        if kt is UNSET:
            kt = None
        threads(kt if kt is not None else tid)
        is_gpu(gpu)
        ts, dur, excl = n.ts, n.dur, n.exclusive_dur
        if type(ts) is float and type(dur) is float and type(excl) is float and ts == ts and dur == dur \
                and excl == excl:   # (nearly every node: _put's float case, the three at once)
            c.ts.append(ts)
            c.dur.append(dur)
            c.excl.append(excl)
        else:
            _put(c.ts, c.ts_x, i, ts)
            _put(c.dur, c.dur_x, i, dur)
            _put(c.excl, c.excl_x, i, excl)
        ser = self.ser
        if len(io) == 2:   # the builder's raw_io
            io_field = self.io_field
            ins, outs = io_field(IN_TAG, io[0]), io_field(OUT_TAG, io[1])
        elif io is MODEL_EMPTY_IO:
            ins, outs = _IN_EMPTY, _OUT_EMPTY
        else:
            ins, outs = ser.op_ios_text(io)
        if gpu:
            key, tail = self.gpu(n, tid, ins, outs, entries)
            skeys(key)
        else:
            skeys(None)
            rfb = b"" if rf is None else (int_attr(RF_NAME, ATTR_RF_ID, rf) if type(rf) is int else
                                          frame_attr(make_attr(ATTR_RF_ID, rf)))
            tail = b"".join((ins, outs, ser.cpu_block(True, kt, tid), rfb,
                             ser.fixed_block(fp, sq, sc, ft, osc), entries))
        itd = n.inter_thread_dep
        sd = n.sync_dep
        if itd is UNSET:
            itd = None
        if sd is UNSET:
            sd = None
        if itd is not None or sd is not None:
            c.xdeps[i] = (itd, sd)
        full(None)
        tails(tail)
        return True

    def io_field(self, tag: bytes, d: Any) -> bytes:
        """A chakra ``inputs`` / ``outputs`` object (``IOPieces``, None or UNSET) as the Node's field 8 / 9:
        ``Serializer.io_text`` of its canonical pieces, the shapes+types tail cached by their raw text."""
        if d is None or d is UNSET:
            return _IN_EMPTY if tag is IN_TAG else _OUT_EMPTY
        vb = canonical(bytes(d.values))   # (mostly unique: not interned)
        key = (bytes(d.shapes), bytes(d.types))
        tails = self.io_tails
        tail = tails.get(key)
        if tail is None:
            if len(tails) > IO_TAILS_CACHE_MAX:
                tails.clear()
            piece = self.piece
            tail = tails[key] = io_tail(piece(key[0]), piece(key[1]))
        n = len(vb)
        small = self.varints
        vn = small[n] if n < 16384 else varint(n)
        n += 1 + len(vn) + len(tail)
        return b"".join((tag, small[n] if n < 16384 else varint(n), IO_VALUES, vn, vb, tail))

    def attr_entries(self, attrs: dict[str, Any], types: dict[str, str]
                     ) -> tuple[dict[str, Any], bytes, bytes] | None:
        """The serialised entries of a builder's attrs dict for a CPU and a GPU node (``Serializer.
        attr_entries``), cached by the dict (which equal ``attrs`` lists share); None when a key is a node
        key."""
        got: tuple[dict[str, Any], bytes, bytes] | None = None
        if _NODE_KEYS.isdisjoint(attrs):
            entries = self.ser.attr_entries
            got = (attrs, entries(attrs, types, False), entries(attrs, types, True))
        cache = self.entries
        if len(cache) > ATTR_ENTRIES_CACHE_MAX:
            cache.clear()
        if got is not None:
            cache[id(attrs)] = got   # (the dict kept alive with its id)
        return got

    def gpu(self, n: Node, tid: Any, ins: bytes, outs: bytes, entries: bytes) -> tuple[Any, bytes]:
        """A GPU node's stream key (device, stream), interned, and its tail: ``_gpu_key`` and
        ``Serializer.gpu_attrs`` of its HostOp."""
        args = n.args
        if type(args) is not dict:
            args = {}
        stream = n.stream
        if stream is UNSET:
            stream = args.get("stream", tid if n.tid is UNSET else n.tid)
        device = n.device
        if device is UNSET:
            device = args.get("device")
        key = (device, stream)
        try:
            key = self.interned.setdefault(key, key)
        except TypeError:
            pass   # unhashable: the stream pass reports it
        parts = [ins, outs, self.ser.gpu_block(stream, device, n.cat)]
        if args:
            kineto_ids(args, parts)
        parts.append(entries)
        return key, b"".join(parts)


def _getter(keys: list[str]) -> tuple[Callable[[Any], Any], Any]:
    """A getter of ``keys`` of a Node and what it returns when none is set."""
    if not keys:
        return (lambda n: ()), ()
    get = attrgetter(*keys)
    return get, (UNSET,) * len(keys) if len(keys) > 1 else UNSET
