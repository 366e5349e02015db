"""What the converter keeps of each node: flat per-node columns, filled from the loaded ops.

The passes of a conversion (``convert.core.run_passes``) read a few fields of every node (id, name, parent,
times, thread, stream) and everything else of only a few nodes (comm ops, the
METADATA node).  :class:`Columns` holds exactly that: parallel lists indexed by the
node's position in the file, the whole ``HostOp`` only where needed (``full``), and for
every other node its serialised inputs/outputs/attributes (``tails``, see
``convert.serial``).

:func:`load_columns` fills them one node at a time, so a million-op ET+ never exists as a million
``HostOp`` objects: most nodes are decoded by the converter's own Structs (the keys a plain ET+ node has,
nothing parsed that is not read) and go straight into the columns (:class:`_Plain`); the others (comm
candidates, METADATA, roots, unusual keys or values) are built as HostOps by the host loader
(:meth:`chakra.host.loader.Records.record`) and added by :func:`_add_op`, which
:func:`columns_from_trace` uses for every op of a loaded HostTrace (every op kept whole).  The tests
compare the two routes on random documents (tests/test_convert_columns.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from array import array
from collections.abc import Iterator, MutableSequence
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any

import msgspec
from msgspec import UNSET, Raw, UnsetType

from chakra.convert.attrs import frame_attr, make_attr, varint
from chakra.convert.serial import (
    _CORR_NAME,
    _EXT_NAME,
    EMPTY_IO,
    GPU_CATS,
    IN_TAG,
    OUT_TAG,
    RF_NAME,
    Serializer,
    int_attr,
    io_tail,
)
from chakra.errors import ChakraError, TraceFormatError
from chakra.formats import IO_VALUES
from chakra.host.comm import is_comm_kernel_name
from chakra.host.decode import FALSY, NO_RAW, Attr, IOPieces, Node, canonical, node_cuts, read_document
from chakra.host.loader import FLAT, Records, make_trace, part_links, part_records, parts_top
from chakra.host.model import METADATA, OP, HostOp, HostTrace, is_comm_name
from chakra.io import gc_paused
from chakra.io.forkmap import fork_map, parts, split
from chakra.tunables import DECODE_PART_MIN_BYTES, DECODE_PIECE_MIN_NODES, IO_TAILS_CACHE_MAX

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
    args = a.get("args") if isinstance(a.get("args"), dict) else {}
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
    if ser is None or op.kind == METADATA or is_comm_candidate(gpu, name, get("collective_name")):
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

    Each node is decoded by a Struct (chakra layout: the converter's own ``_ChakraNode``, the keys a
    plain node has, nothing parsed that is not read; flat layout: the host loader's ``Node``) and goes
    straight into the columns (:class:`_Plain`); a node that is not plain (a comm candidate, METADATA, a
    root, a key or value the plain route does not take) is built as a HostOp by the host loader
    (``Records.record``) and added by :func:`_add_op`.  Both give the same columns and bytes
    (tests/test_convert_columns.py).

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
    plain = _Plain(c, ser, interned, builder, doc.path)
    add = plain.flat if builder.layout == FLAT else plain.chakra
    record = records.record
    raws = doc.raw_nodes
    generic = doc.generic   # every node already parsed: the host route for all
    seen = len(records.warnings)
    i = nodes.start
    error: ChakraError | None = None
    try:
        with malformed(doc.path):
            for i in nodes:
                try:
                    if not generic and add(raws[i], i):
                        continue
                except OverflowError:   # a parent id beyond int64: a plain list holds it (nothing appended)
                    c.parents = list(c.parents)
                    plain.parents = c.parents.append
                    if add(raws[i], i):
                        continue
                n, core = record(i)
                op = builder.host_op(i, n, core)
                at = index.setdefault(op.id, i)
                if at != i:
                    raise _duplicate(op.id, at, i, doc.path)
                try:
                    _add_op(c, op, ser, interned, i)
                except OverflowError:
                    c.parents = list(c.parents)
                    plain.parents = c.parents.append
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
    c.parents.extend(more.parents)   # type: ignore[arg-type]
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


# ---- the plain route -----------------------------------------------------------------------------------

class _IO(msgspec.Struct, gc=False):
    """A chakra-layout ``inputs`` / ``outputs`` object: the three lists the .et keeps, raw (strides and any
    other key skipped)."""

    values: Raw
    shapes: Raw
    types: Raw


class _Args(msgspec.Struct, gc=False):
    """The Kineto ``args`` of a GPU node: the keys the converter reads (the others skipped)."""

    stream: Any = UNSET
    device: Any = UNSET
    correlation: Any = UNSET
    external_id: Any = msgspec.field(default=UNSET, name="External id")


# ET+ keys of a GPU node (the ``cat`` of a CPU node is an attribute: the host route)
_GPU_KEYS = ("ph", "stream", "device", "tid", "pid", "args", "pg_name", "collective_name", "comm_size")
_CPU_PLAIN = attrgetter(*_GPU_KEYS)
_ALL_UNSET = (UNSET,) * len(_GPU_KEYS)


# A plain node of the chakra layout: its own keys and the ET+ keys the converter reads or skips (Kineto args
# reduced to the keys read, the other ET+ keys as parsed).  Any other key (``comm_backend``, a flat-layout
# key, an unknown one) is refused: the host route.  (A flat node, rarer, is decoded by the host loader's
# ``Node``.)
_ETPLUS_KEYS = ("cat", "ph", "ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "stream", "device",
                "tid", "pid", "pg_name", "collective_name", "comm_size", "inter_thread_dep", "sync_dep")
_ChakraNode = msgspec.defstruct(
    "_ChakraNode",
    [("id", Any), ("name", Any), ("ctrl_deps", Any, UNSET), ("inputs", _IO | None | UnsetType, UNSET),
     ("outputs", _IO | None | UnsetType, UNSET), ("attrs", list[Attr] | None | UnsetType, UNSET),
     ("args", _Args | UnsetType, UNSET), *((k, Any, UNSET) for k in _ETPLUS_KEYS)],
    gc=False, forbid_unknown_fields=True)


_FLAT_GPU_KEYS = ("ph", "stream", "device", "pid", "args", "pg_name", "collective_name", "comm_size")
_FLAT_CPU_PLAIN = attrgetter(*_FLAT_GPU_KEYS)
_FLAT_ALL_UNSET = (UNSET,) * len(_FLAT_GPU_KEYS)
_CHAKRA_DECODE = msgspec.json.Decoder(_ChakraNode).decode
# a flat-layout node: the host loader's Struct (its flat keys); the keys the plain route refuses are checked
_FLAT_DECODE = msgspec.json.Decoder(Node).decode
_FLAT_REFUSED = attrgetter("attrs", "ctrl_deps", "comm_backend")
_FLAT_NONE_REFUSED = (UNSET,) * 3
_STD_ORDER = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema")   # PyTorch's order
_STD_NAMES = frozenset(_STD_ORDER)
#: node keys read into the columns: an ``attrs`` entry of one of these names takes the host route (the
#: HostOp's attribute dict would give it to the columns)
_NODE_KEYS = frozenset(("cat", "ph", "ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "stream",
                        "device", "tid", "pid", "args", "pg_name", "collective_name", "comm_size",
                        "comm_backend", "inter_thread_dep", "sync_dep", "parent", "ctrl_deps", "rf_id",
                        "fw_parent", "seq_id", "scope", "fw_tid", "op_schema"))
_encode = msgspec.json.encode
_NAN = float("nan")
_IN_EMPTY, _OUT_EMPTY = EMPTY_IO[IN_TAG], EMPTY_IO[OUT_TAG]


class _Plain:
    """Columns and tail of a plain node straight from its decoded Struct: what ``_add_op`` appends for the
    HostOp of the same node (no HostOp, no attribute dict).  ``chakra`` / ``flat`` return False, having
    appended nothing, for a node that is not plain: a comm candidate (``is_comm_candidate``), a root or
    METADATA node (id 1, names starting with ``[`` or ``#``), a key or value type the Structs refuse, a
    CPU node with an ET+ key that becomes an attribute, an ``attrs`` list whose std entries are not first in
    PyTorch's order or whose other entries name a node key."""

    def __init__(self, c: Columns, ser: Serializer, interned: dict[Any, Any], builder: Any,
                 path: str) -> None:
        self.c = c
        self.path = path
        self.ser = ser
        self.interned = interned
        self.parents = c.parents.append
        self.appends = (c.ids.append, c.names.append, c.kinds.append, c.rf_ids.append, c.threads.append,
                        c.is_gpu.append, c.skeys.append, c.full.append, c.tails.append)  # type: ignore[union-attr]
        self.piece = builder.piece
        self.io_tails: dict[tuple[bytes, bytes], bytes] = {}   # raw (shapes, types) -> IOInfo fields 2, 3
        self.comm_names: dict[str, bool] = {}
        # encoded attrs entries after the std ones -> (CPU bytes, GPU bytes), or None: not plain
        self.rests: dict[bytes, tuple[bytes, bytes] | None] = {}

    # -- the two layouts ----------------------------------------------------------------------------------
    def chakra(self, raw: Any, i: int) -> bool:
        try:
            n = _CHAKRA_DECODE(raw)
        except msgspec.DecodeError:   # (ValidationError included) the host route says what it is
            return False
        parent = n.ctrl_deps
        if parent is UNSET:
            parent = 0
        gpu = _plain_kind(n, parent, _CPU_PLAIN, _ALL_UNSET)
        if gpu is None:
            return False
        alist = n.attrs
        rest = b""
        if alist is UNSET or alist is None or not alist:
            rf, fp, sq, sc, tid, ft, osc = None, 0, -1, 0, 0, 0, ""
        elif len(alist) >= 7:
            a0, a1, a2, a3, a4, a5, a6 = alist[:7]
            if (a0.name, a1.name, a2.name, a3.name, a4.name, a5.name, a6.name) != _STD_ORDER:
                return False
            rf, fp, sq, sc, tid, ft, osc = a0.value, a1.value, a2.value, a3.value, a4.value, a5.value, \
                a6.value
            if len(alist) > 7:
                rest = _encode(alist[7:])
        else:
            return False
        io = self.io_field
        ins = io(IN_TAG, n.inputs)
        outs = io(OUT_TAG, n.outputs)
        return self.append(n, i, n.id, n.name, parent, gpu, rf, tid, (fp, sq, sc, ft, osc), rest, ins, outs,
                           n.args)

    def flat(self, raw: Any, i: int) -> bool:
        try:
            n = _FLAT_DECODE(raw)
        except msgspec.DecodeError:
            return False
        parent = n.parent
        if parent is UNSET:
            parent = 0
        if _FLAT_REFUSED(n) != _FLAT_NONE_REFUSED or type(n.inputs) is IOPieces or \
                type(n.outputs) is IOPieces:
            return False
        gpu = _plain_kind(n, parent, _FLAT_CPU_PLAIN, _FLAT_ALL_UNSET)
        if gpu is None:
            return False
        args = n.args
        if gpu and args is not UNSET:   # the host Struct keeps args as parsed: the keys read, as _Args
            if type(args) is not dict:
                return False
            get = args.get
            args = _Args(get("stream", UNSET), get("device", UNSET), get("correlation", UNSET),
                         get("External id", UNSET))
        v = n.rf_id
        rf = None if v is UNSET else v
        v = n.tid
        tid = 0 if v is UNSET else v
        fixed = tuple(d if v is UNSET else v for v, d in zip(_FLAT_FIXED(n), _FLAT_FIXED_DEFAULTS))
        falsy = self.falsy
        text = self.ser.io_text
        ins = text(IN_TAG, _flat_list(n.inputs), falsy(n.input_shapes), falsy(n.input_types))
        outs = text(OUT_TAG, _flat_list(n.outputs), falsy(n.output_shapes), falsy(n.output_types))
        return self.append(n, i, n.id, n.name, parent, gpu, rf, tid, fixed, b"", ins, outs, args)

    # -- pieces -------------------------------------------------------------------------------------------
    def io_field(self, tag: bytes, d: Any) -> bytes:
        """A chakra ``inputs`` / ``outputs`` object as the Node's field 8 / 9: ``Serializer.io_text`` of its
        canonical pieces (the shapes+types tail cached by their raw text; the values, mostly unique, are
        not kept)."""
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
        vn = varint(len(vb))
        return b"".join((tag, varint(1 + len(vn) + len(vb) + len(tail)), IO_VALUES, vn, vb, tail))

    def falsy(self, raw: Any) -> bytes:
        """A flat key read as ``value or []``."""
        if raw is NO_RAW:
            return b"[]"
        b = self.piece(raw)
        return b"[]" if b in FALSY else b

    def rest_bytes(self, rest: bytes, alist: list[Attr]) -> tuple[bytes, bytes] | None:
        """The attribute entries of a node's ``attrs`` after the std ones (CPU, GPU), as
        ``Serializer.attr_entries`` writes them; None when they name a std or node key (the host route)."""
        got = self.rests.get(rest, False)
        if got is not False:
            return got   # type: ignore[return-value]
        attrs: dict[str, Any] = {}
        types: dict[str, Any] = {}
        out: tuple[bytes, bytes] | None = None
        for a in alist[7:]:
            an = a.name
            if type(an) is not str or an in _STD_NAMES or an in _NODE_KEYS:
                break
            attrs[an] = a.value
            if a.type is not None:
                types[an] = a.type
        else:
            entries = self.ser.attr_entries
            out = (entries(attrs, types, False), entries(attrs, types, True))
        if len(self.rests) > 10_000:
            self.rests.clear()
        self.rests[rest] = out
        return out

    # -- the columns and the tail -------------------------------------------------------------------------
    def append(self, n: Any, i: int, nid: int, name: str, parent: int, gpu: bool, rf: Any, tid: Any,
               fixed: tuple[Any, ...], rest: bytes, ins: bytes, outs: bytes, args: Any) -> bool:
        """Append node ``i`` (decoded ``n``; its core fields and Kineto ``args`` given) unless it is not plain
        after all."""
        if gpu:
            coll = n.collective_name
            if (type(coll) is str and coll) or is_comm_kernel_name(name):
                return False
        else:
            comm = self.comm_names.get(name)
            if comm is None:
                comm = self.comm_names[name] = is_comm_name(name)
            if comm:
                return False
        if rest:
            got = self.rest_bytes(rest, n.attrs)
            if got is None:
                return False
            tail_attrs = got[1] if gpu else got[0]
        else:
            tail_attrs = b""
        c = self.c
        self.parents(parent)   # first: an id beyond int64 fails here, before anything is appended
        at = c.index.setdefault(nid, i)
        if at != i:
            raise _duplicate(nid, at, i, self.path)
        ids, names, kinds, rf_ids, threads, is_gpu, skeys, full, tails = self.appends
        ids(nid)
        names(self.interned.setdefault(name, name))
        kinds(OP)
        rf_ids(rf)
        kt = n.kineto_tid
        if kt is UNSET:
            kt = None
        threads(kt if kt is not None else tid)
        is_gpu(gpu)
        _put(c.ts, c.ts_x, i, n.ts)
        _put(c.dur, c.dur_x, i, n.dur)
        _put(c.excl, c.excl_x, i, n.exclusive_dur)
        ser = self.ser
        if gpu:
            stream = n.stream
            if stream is UNSET:
                if args is not UNSET and args.stream is not UNSET:
                    stream = args.stream
                else:
                    stream = n.tid
                    if stream is UNSET:
                        stream = tid
            device = n.device
            if device is UNSET:
                device = None if args is UNSET or args.device is UNSET else args.device
            key = (device, stream)
            try:
                key = self.interned.setdefault(key, key)
            except TypeError:
                pass   # unhashable: the stream pass reports it
            skeys(key)
            if args is UNSET:
                tail = b"".join((ins, outs, ser.gpu_block(stream, device, n.cat), tail_attrs))
            else:
                parts = [ins, outs, ser.gpu_block(stream, device, n.cat)]
                v = args.correlation
                if type(v) is int:
                    parts.append(int_attr(_CORR_NAME, "correlation", v))
                v = args.external_id
                if type(v) is int:
                    parts.append(int_attr(_EXT_NAME, "external_id", v))
                parts.append(tail_attrs)
                tail = b"".join(parts)
        else:
            skeys(None)
            rfb = b"" if rf is None else (int_attr(RF_NAME, "rf_id", rf) if type(rf) is int else
                                          frame_attr(make_attr("rf_id", rf)))
            tail = b"".join((ins, outs, ser.cpu_block(True, kt, tid), rfb, ser.fixed_block(*fixed),
                             tail_attrs))
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


def _plain_kind(n: Any, parent: Any, cpu_plain: Any, none: tuple[Any, ...]) -> bool | None:
    """Whether a decoded node is a GPU op (True) or a CPU op (False) of the plain route; None when it is not
    plain: an id, name or parent of another type, a root or METADATA node (id 1, a name starting with
    ``[`` or ``#``), a ``cat`` that is not a GPU one, or a CPU node with a GPU key (``cpu_plain(n)`` is not
    ``none``: an attribute of its HostOp)."""
    nid = n.id
    name = n.name
    if type(nid) is not int or type(name) is not str or type(parent) is not int or nid == 1 or \
            name[:1] == "[" or name[:1] == "#":
        return None
    cat = n.cat
    if cat is UNSET:
        return False if cpu_plain(n) == none else None
    if type(cat) is str and cat in GPU_CATS:
        return True
    return None


_FLAT_FIXED = attrgetter("fw_parent", "seq_id", "scope", "fw_tid", "op_schema")
_FLAT_FIXED_DEFAULTS = (0, -1, 0, 0, "")


def _flat_list(v: Any) -> bytes:
    """A flat ``inputs`` / ``outputs`` value read as ``value or []`` (a list of raw items), canonical."""
    if v is UNSET or v is None or not v:
        return b"[]"
    return canonical(b"[" + b",".join(v) + b"]")
