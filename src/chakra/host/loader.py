"""Load a PyTorch host execution trace (ET) or an ET+ into the model of ``chakra.host.model``.

The file is decoded by :mod:`chakra.host.decode` (msgspec, one node at a time) and every node becomes a
compact ``HostOp`` here, by one builder per node layout (docs/formats.md, "Host execution trace"):

* ``flat`` (schema 1.0.1): ``parent``, ``rf_id``, ... as node keys; ``inputs`` /
  ``input_shapes`` / ``input_types`` as parallel lists.
* ``chakra`` (1.0.2-chakra.0.0.4 ... 1.1.1-chakra.1.0.0): ``ctrl_deps`` is the
  parent, ``inputs``/``outputs`` are ``{values, shapes, types[, strides]}`` and
  the scalar fields live in an ``attrs`` list of ``{name, type, value}``.

The layout is decided by the schema string and checked against the shape of the
first node; the node shape wins (with a warning) when the two disagree, and an
unknown (newer) schema string loads with a warning when its nodes have a known
shape.  Inputs and outputs are kept as their canonical JSON text (``HostOp.io``),
parsed only when an op's ``inputs`` / ``outputs`` are read; anything not modelled
(ET+ timing fields, ``kernel_backend``, ...) goes into ``HostOp.attrs``: the
``attrs`` list entries first, then the other node keys, in file order when the
node took the generic route and in the order the linker writes them otherwise.
Ops with the same attributes share one dict.  A malformed node is diagnosed when
it fails to build, with a message naming it.

The same builder serves the linker (:func:`load_host_et`), the converter
(:class:`Records`, one node at a time) and already parsed JSON (:func:`build_host_trace`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any

import msgspec
from msgspec import UNSET

from chakra.errors import ChakraError, TraceFormatError
from chakra.host import keys as hk
from chakra.host.decode import (
    FALSY,
    NO_RAW,
    Document,
    IOPieces,
    Node,
    NodeError,
    canonical,
    document_from_data,
    dumps_canonical,
    joined_top,
    no_nodes_message,
    read_document,
    read_part,
)
from chakra.host.model import (
    EMPTY_IO,
    METADATA,
    OP,
    PG_INIT_NAME,
    PROCESS_ROOT,
    THREAD_ROOT,
    HostOp,
    HostTrace,
)
from chakra.host.process_groups import PayloadError, infer_world_size, parse_pg_init
from chakra.io import gc_paused
from chakra.tunables import HOST_PIECES_CACHE_MAX

log = logging.getLogger(__name__)

__all__ = ["Records", "build_host_trace", "load_host_et", "make_trace", "no_nodes_message",
           "self_parent_message"]

FLAT = "flat"
CHAKRA = "chakra"

#: Schema strings this loader was written against, and their layout.
KNOWN_SCHEMAS: dict[str, str] = {
    "1.0.1": FLAT,
    "1.0.2-chakra.0.0.4": CHAKRA,
    "1.0.3-chakra.0.0.4": CHAKRA,
    "1.0.4": CHAKRA,
    "1.0.4-chakra.0.0.4": CHAKRA,
    "1.1.0-chakra.0.0.4": CHAKRA,
    "1.1.1-chakra.0.0.4": CHAKRA,
    "1.1.1-chakra.1.0.0": CHAKRA,
}

_VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)\.(\d+)")

# Top-level keys modelled by HostTrace fields; everything else goes to trace.extra.
_TOP_KEYS = frozenset({"schema", "pid", "time", "start_ts", "finish_ts", "nodes"})

# Node keys each layout models; any other key of a node goes into HostOp.attrs.
_FLAT_KEYS = frozenset({
    "name", "id", hk.RF_ID, "parent", hk.FW_PARENT, hk.SEQ_ID, hk.SCOPE, hk.TID, hk.FW_TID, hk.OP_SCHEMA,
    "inputs", "input_shapes", "input_types", "input_strides",
    "outputs", "output_shapes", "output_types", "output_strides",
})
_CHAKRA_KEYS = frozenset({"id", "name", "ctrl_deps", "inputs", "outputs", "attrs"})

# The other node keys the typed decoder knows, in the order the linker writes them (ET+), which is the
# order they take in HostOp.attrs when the node did not take the generic route.
_EXTRA_ORDER = ("cat", "ph", "ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "stream",
                "device", hk.TID, "pid", "args", hk.PG_NAME, hk.COLLECTIVE_NAME, hk.COMM_SIZE, "comm_backend",
                "inter_thread_dep", "sync_dep", "parent", "ctrl_deps", hk.RF_ID, hk.FW_PARENT, hk.SEQ_ID,
                hk.SCOPE, hk.FW_TID, hk.OP_SCHEMA)
_FLAT_EXTRAS = tuple(k for k in _EXTRA_ORDER if k not in _FLAT_KEYS)
_CHAKRA_EXTRAS = tuple(k for k in _EXTRA_ORDER if k not in _CHAKRA_KEYS)
_GET_FLAT_EXTRAS = attrgetter(*_FLAT_EXTRAS)
# the flat-only raw keys: in a chakra node they are extras, taken from the generic route
_FLAT_RAW = ("input_shapes", "input_types", "input_strides", "output_shapes", "output_types",
             "output_strides")
_GET_CHAKRA_EXTRAS = attrgetter(*_CHAKRA_EXTRAS)
_GET_FLAT_RAW = attrgetter(*_FLAT_RAW)
_N_FLAT_RAW = len(_FLAT_RAW)

_ROOT_PREFIXES = ("[pytorch|profiler|execution_trace|", "[pytorch|profiler|execution_graph|")
_PROCESS_ROOT_NAMES = frozenset(p + "process]" for p in _ROOT_PREFIXES)
_THREAD_ROOT_NAMES = frozenset(p + "thread]" for p in _ROOT_PREFIXES)


def _kind(nid: int, name: str, parent: int) -> str:
    """Node kind from its name (and the process root's self-parenting id 1); no tree walk."""
    if name == PG_INIT_NAME:
        return METADATA
    if name[:1] == "[":
        if name in _THREAD_ROOT_NAMES:
            return THREAD_ROOT
        if name in _PROCESS_ROOT_NAMES:
            return PROCESS_ROOT
    if nid == 1 and parent == 1:
        return PROCESS_ROOT
    return OP


def schema_layout(schema: str | None) -> str | None:
    """Layout implied by a schema string: exact known strings, else by version number / suffix."""
    if not isinstance(schema, str):
        return None
    known = KNOWN_SCHEMAS.get(schema)
    if known:
        return known
    if "chakra" in schema:
        return CHAKRA
    m = _VERSION_RE.match(schema)
    if not m:
        return None
    version = tuple(int(x) for x in m.groups())
    if version <= (1, 0, 1):
        return FLAT
    return CHAKRA


def node_layout(node: Any) -> str | None:
    """Layout implied by the shape of one node, or None if it fits neither."""
    if not isinstance(node, dict):
        return None
    if isinstance(node.get("attrs"), list) or "ctrl_deps" in node or isinstance(node.get("inputs"), dict):
        return CHAKRA
    if "parent" in node or isinstance(node.get("inputs"), list) or "input_types" in node:
        return FLAT
    return None


def _detect_layout(schema: Any, first: Any, path: str, warnings: list[str], quiet: bool = False) -> str:
    """The node layout of a file (see the module doc); warnings are logged (unless ``quiet``) and appended to
    ``warnings``."""
    warn = _warn if not quiet else list.append
    by_schema = schema_layout(schema)
    by_shape = node_layout(first) if first is not None else None
    if first is not None and by_shape is None:
        raise TraceFormatError(
            f"unknown node layout (schema {schema!r}); first node has keys {sorted(first)[:12]}", path
        )
    layout = by_shape or by_schema
    if layout is None:
        raise TraceFormatError(f"unknown schema {schema!r} and no nodes to recognise the layout by", path)
    if schema is None:
        warn(warnings, f"{path}: no schema string; nodes have the {layout} layout")
    elif schema not in KNOWN_SCHEMAS:
        warn(warnings, f"{path}: unknown schema {schema!r}; loading it with the {layout} layout")
    elif by_schema != layout:
        warn(warnings, f"{path}: schema {schema!r} implies the {by_schema} layout "
                       f"but the nodes have the {layout} layout; following the nodes")
    return layout


def self_parent_message(path: str, count: int, total: int) -> str:
    """What the linker and the converter say about nodes that are their own parent.

    In a host ET only the process root is its own parent; a tool that writes ``parent == id`` for other
    nodes (all of them, in some exports) has lost the call tree, and every such node then counts as a
    top-level op: no parent -> child control dependency, no nesting to take the children's time out of.
    """
    return (f"{path}: {count:,} of {total:,} nodes are their own parent (only the process root should be): "
            "the call tree is missing, so they are taken as top-level ops, without parent/child control "
            "dependencies")


def _warn(warnings: list[str], msg: str) -> None:
    log.warning("%s", msg)
    warnings.append(msg)


# ---- nodes -> HostOps ----------------------------------------------------------------------------------

class _Rebuild(Exception):
    """A typed node whose value the builder needs as parsed JSON (a flat node with an ``attrs`` list, an
    inputs object in a flat node, a flat key in a chakra node): built again from the generic route."""


class _Builder:
    """Builds the HostOps of one file (see the module doc); holds the caches that let ops share text and
    attribute dicts."""

    def __init__(self, layout: str) -> None:
        self.layout = layout
        self.pieces: dict[bytes, bytes] = {}   # raw inputs/outputs text -> its canonical text, interned
        self.shared: dict[bytes, tuple[dict[str, Any], dict[str, str]]] = {}   # attrs text -> (attrs, types)
        self.empty: tuple[dict[str, Any], dict[str, str]] = ({}, {})
        # the layout's core-fields method, unbound (a bound one kept here would be a reference cycle)
        self.core: Callable[[_Builder, Node], tuple[Any, ...]] = _Builder.flat if layout == FLAT else \
            _Builder.chakra
        self.extra_names = _FLAT_EXTRAS if layout == FLAT else _CHAKRA_EXTRAS
        self.get_extras = _GET_FLAT_EXTRAS if layout == FLAT else _GET_CHAKRA_EXTRAS
        # a chakra node's inputs / outputs objects left as decoded (a pair ``(inputs, outputs)`` for the io
        # field, made into HostOp.io by :meth:`host_op`): for a reader that serialises them itself (the
        # converter's columns) and builds a HostOp for a few nodes only
        self.raw_io = False

    # -- text ---------------------------------------------------------------------------------------------
    def piece(self, raw: Any) -> bytes:
        """Canonical text of an inputs/outputs piece; equal texts are one object (two thirds of the pieces of
        a real-weight trace repeat one seen before, values included)."""
        b = bytes(raw)
        pieces = self.pieces
        got = pieces.get(b)
        if got is None:
            if len(pieces) > HOST_PIECES_CACHE_MAX:
                pieces.clear()
            c = canonical(b)
            got = pieces[b] = pieces.setdefault(c, c)   # raw variants of one text share its object
        return got

    def falsy_piece(self, raw: Any) -> bytes:
        """A flat key read as ``value or []``."""
        if raw is NO_RAW:
            return b"[]"
        b = self.piece(raw)
        return b"[]" if b in FALSY else b

    def strides(self, raw: Any) -> bytes | None:
        """Strides: absent or null -> None."""
        if raw is NO_RAW:
            return None
        b = self.piece(raw)
        return None if b == b"null" else b

    def flat_list(self, v: Any) -> bytes:
        """A flat ``inputs`` / ``outputs`` value read as ``value or []`` (a list of raw items)."""
        if v is UNSET or v is None:
            return b"[]"
        if type(v) is list:
            if not v:
                return b"[]"
            return canonical(b"[" + b",".join(v) + b"]")
        raise _Rebuild

    def io4(self, d: Any) -> tuple[bytes | None, ...]:
        """values, shapes, types, strides of a chakra ``inputs`` / ``outputs`` object: canonical text,
        interned (strides None when absent or null)."""
        if type(d) is not IOPieces:
            if d is None or d is UNSET:
                return _NO_IO4
            raise TypeError
        get = self.pieces.get
        piece = self.piece
        vb = bytes(d.values)
        vb = get(vb) or piece(vb)
        sb = bytes(d.shapes)
        sb = get(sb) or piece(sb)
        tb = bytes(d.types)
        tb = get(tb) or piece(tb)
        st = d.strides
        if st is NO_RAW:
            return (vb, sb, tb, None)
        stb = bytes(st)
        stb = get(stb) or piece(stb)
        return (vb, sb, tb, None if stb == b"null" else stb)

    def io8(self, ins: Any, outs: Any) -> tuple[bytes | None, ...]:
        """:meth:`io4` of a chakra node's inputs and outputs objects, the usual ones in one call."""
        if type(ins) is not IOPieces or type(outs) is not IOPieces or ins.strides is NO_RAW \
                or outs.strides is NO_RAW:
            io = self.io4(ins) + self.io4(outs)
            return EMPTY_IO if io == EMPTY_IO else io
        get = self.pieces.get
        piece = self.piece
        a = bytes(ins.values)
        b = bytes(ins.shapes)
        c = bytes(ins.types)
        d = bytes(ins.strides)
        e = bytes(outs.values)
        f = bytes(outs.shapes)
        g = bytes(outs.types)
        h = bytes(outs.strides)
        io = (get(a) or piece(a), get(b) or piece(b), get(c) or piece(c), get(d) or piece(d),
              get(e) or piece(e), get(f) or piece(f), get(g) or piece(g), get(h) or piece(h))
        if io[3] == b"null" or io[7] == b"null":
            io = (*io[:3], None if io[3] == b"null" else io[3], *io[4:7], None if io[7] == b"null" else io[7])
        return EMPTY_IO if io == EMPTY_IO else io

    # -- the two layouts: the core fields of a node -------------------------------------------------------
    #
    # ``(id, name, parent, kind, rf_id, tid, fw_parent, seq_id, scope, fw_tid, op_schema, attrs, types, io)``:
    # the HostOp fields except ``index``; ``attrs`` / ``types`` hold the chakra ``attrs`` entries other than
    # the std ones (shared between ops with equal entries), without the node's other keys, which
    # :meth:`extras` gives.

    def flat(self, n: Node) -> tuple[Any, ...]:
        nid = n.id
        name = n.name
        parent = n.parent
        if parent is UNSET:
            parent = 0
        if type(nid) is not int or type(name) is not str or type(parent) is not int:
            raise TypeError
        extra = n.extra
        if extra is None:
            if n.attrs is not UNSET or isinstance(n.outputs, IOPieces):
                raise _Rebuild
            ins = self.flat_list(n.inputs)
            outs = self.flat_list(n.outputs)
        else:
            v = extra.get("inputs") or []
            if type(v) is not list:
                raise TypeError
            ins = dumps_canonical(v)
            outs = dumps_canonical(extra.get("outputs") or [])
        falsy = self.falsy_piece
        io = (ins, falsy(n.input_shapes), falsy(n.input_types), self.strides(n.input_strides),
              outs, falsy(n.output_shapes), falsy(n.output_types), self.strides(n.output_strides))
        if io == EMPTY_IO:
            io = EMPTY_IO
        kind = OP if (nid != 1 and name[:1] != "[" and name[:1] != "#") else _kind(nid, name, parent)
        # rf_id, tid, fw_parent, seq_id, scope, fw_tid, op_schema: the node's, or the default
        std = [d if v is UNSET else v for v, d in zip(_GET_FLAT_STD(n), _STD_DEFAULTS)]
        return (nid, name, parent, kind, *std, *self.empty, io)

    def chakra(self, n: Node) -> tuple[Any, ...]:
        nid = n.id
        name = n.name
        parent = n.ctrl_deps
        if type(parent) is not int:
            parent = 0 if parent is UNSET else _coerce_parent(parent)
        if type(nid) is not int or type(name) is not str:
            raise TypeError
        if n.extra is None and _GET_FLAT_RAW(n).count(NO_RAW) != _N_FLAT_RAW:
            raise _Rebuild   # a flat inputs/outputs key, an extra here: its value is wanted parsed
        # rf_id, tid, fw_parent, seq_id, scope, fw_tid, op_schema (HostOp's order): the attrs list's, or the
        # default
        std = _STD_DEFAULTS
        alist = n.attrs
        rest: Any = ()
        if alist is not UNSET and alist is not None:
            if type(alist) is not list:
                raise TypeError
            rest = alist
            if len(alist) >= 7:
                a0, a1, a2, a3, a4, a5, a6 = alist[:7]
                if (a0.name, a1.name, a2.name, a3.name, a4.name, a5.name, a6.name) == _STD_ORDER:
                    # PyTorch's own order: the seven std attrs first
                    std = (a0.value, a4.value, a1.value, a2.value, a3.value, a5.value, a6.value)
                    rest = alist[7:]
        # the other entries; ops with the same ones (compared as JSON text: 1, 1.0 and true differ) share
        # one pair of dicts
        if not rest:
            attrs, types = self.empty
        else:
            key = _encode(rest)
            shared = self.shared.get(key)
            if shared is not None:
                attrs, types = shared
            else:
                attrs = {}
                types = {}
                moved: list[Any] | None = None   # std entries out of PyTorch's order
                for a in rest:
                    an = a.name
                    at = _STD_AT.get(an) if type(an) is str else None
                    if at is not None:
                        if moved is None:
                            moved = list(std)
                        moved[at] = a.value
                    else:
                        attrs[an] = a.value
                        t = a.type
                        if t is not None:
                            types[an] = t
                if moved is not None:
                    std = tuple(moved)
                else:   # (a shared pair would skip std entries: only without them)
                    if len(self.shared) > HOST_PIECES_CACHE_MAX:
                        self.shared.clear()
                    self.shared[key] = (attrs, types)
        ins = n.inputs
        outs = n.outputs
        if self.raw_io and (type(ins) is IOPieces or ins is None or ins is UNSET) and \
                (type(outs) is IOPieces or outs is None or outs is UNSET):
            io: tuple[Any, ...] = (ins, outs)
        else:
            io = self.io8(ins, outs)
        kind = OP if (nid != 1 and name[:1] != "[" and name[:1] != "#") else _kind(nid, name, parent)
        return (nid, name, parent, kind, *std, attrs, types, io)

    def extras(self, n: Node) -> dict[str, Any] | None:
        """The node's keys outside its layout's own (ET+ fields ...), in file order when it took the generic
        route, else in the order the linker writes them; None when it has none."""
        extra = n.extra
        if extra is not None:
            core = _FLAT_KEYS if self.layout == FLAT else _CHAKRA_KEYS
            more = {k: v for k, v in extra.items() if k not in core}
            return more or None
        values = self.get_extras(n)
        if values.count(UNSET) == len(values):
            return None
        return {k: v for k, v in zip(self.extra_names, values) if v is not UNSET}

    def host_op(self, index: int, n: Node, core: tuple[Any, ...]) -> HostOp:
        """The HostOp of a node and its core fields."""
        attrs = core[11]
        more = self.extras(n)
        if more is not None:
            attrs = {**attrs, **more} if attrs else more
        io = core[13]
        if len(io) == 2:   # raw_io
            io = self.io8(*io)
        # (one argument tuple: the core fields' count is not in their type)
        return HostOp(*(core[:11] + (None, None, attrs, core[12], index, io)))


_NO_IO4 = (b"[]", b"[]", b"[]", None)
_STD_NAMES = (hk.RF_ID, hk.TID, hk.FW_PARENT, hk.SEQ_ID, hk.SCOPE, hk.FW_TID, hk.OP_SCHEMA)   # HostOp's order
_GET_FLAT_STD = attrgetter(*_STD_NAMES)
_STD_DEFAULTS = (None, 0, 0, -1, 0, 0, "")
_STD_AT = {name: i for i, name in enumerate(_STD_NAMES)}
_encode = msgspec.json.encode
_STD_ORDER = (hk.RF_ID, hk.FW_PARENT, hk.SEQ_ID, hk.SCOPE, hk.TID, hk.FW_TID, hk.OP_SCHEMA)


def _coerce_parent(p: Any) -> int:
    """Some writers emit ``ctrl_deps`` as a one-element list; None means no parent."""
    if p is None:
        return 0
    if isinstance(p, list) and all(type(x) is int for x in p):
        return p[0] if p else 0
    raise TypeError


class Records:
    """The nodes of a Document in file order, one at a time: as core fields (:meth:`records`, what the
    converter reads) or as HostOps (iterating it).  The layout is detected (and its warnings logged) on
    construction (``quiet``: its warnings kept, not logged), unless ``layout`` gives it (a later part of a
    file read in parts: the first part's)."""

    def __init__(self, doc: Document, layout: str | None = None, quiet: bool = False) -> None:
        self.doc = doc
        self.path = path = doc.path
        self.warnings: list[str] = []
        self.schema = doc.top.get("schema")
        if layout is None:
            layout = _detect_layout(self.schema, _first_object(doc), path, self.warnings, quiet)
        self.layout = layout
        self.builder = _Builder(layout)

    def records(self) -> Iterator[tuple[int, Node, tuple[Any, ...]]]:
        """``(index, node, core fields)`` of every node (:meth:`_Builder.flat` / ``chakra``), in file order;
        a malformed node raises TraceFormatError saying what is wrong with it."""
        record = self.record
        for index in range(len(self.doc)):
            yield index, *record(index)

    def record(self, index: int) -> tuple[Node, tuple[Any, ...]]:
        """Node ``index`` and its core fields (what :meth:`records` yields for it; the converter asks for the
        few nodes it does not read itself)."""
        doc = self.doc
        builder = self.builder
        core = builder.core
        try:
            n = doc.node(index)
            try:
                return n, core(builder, n)
            except _Rebuild:
                n = doc.generic_node(index)
                return n, core(builder, n)
        except NodeError as exc:
            raise _diagnose(exc.index, exc.obj, self.layout, self.path) from None
        except (KeyError, TypeError, AttributeError, IndexError, ValueError):
            raise _diagnose(index, doc.obj(index), self.layout, self.path) from None

    def __iter__(self) -> Iterator[HostOp]:
        host_op = self.builder.host_op
        for index, n, fields in self.records():
            yield host_op(index, n, fields)


def _first_object(doc: Document) -> Any:
    """The first node that is a JSON object (it decides the layout), or None."""
    for i in range(len(doc)):
        obj = doc.obj(i)
        if isinstance(obj, dict):
            return obj
    return None



def _diagnose(index: int, n: Any, layout: str, path: str) -> TraceFormatError:
    """What is wrong with the node at ``index`` (parsed JSON ``n``), which failed to build."""
    if not isinstance(n, dict):
        return TraceFormatError(f"node at index {index} is a {type(n).__name__}, expected an object", path)
    nid = n.get("id")
    if "id" not in n or type(nid) is not int:
        what = "has no id" if "id" not in n else f"has a non-integer id {nid!r}"
        return TraceFormatError(f"node at index {index} {what}", path)
    where = f"node id {nid} (index {index})"
    if type(n.get("name")) is not str:
        what = "has no name" if "name" not in n else "has a non-string name"
        return TraceFormatError(f"{where} {what}", path)
    if layout == FLAT:
        if type(n.get("parent", 0)) is not int:
            return TraceFormatError(f"{where}: parent is not an integer", path)
        for k in ("inputs", "input_shapes", "input_types", "outputs", "output_shapes", "output_types"):
            if n.get(k) is not None and not isinstance(n[k], list):
                return TraceFormatError(f"{where}: {k} is not a list (not the 1.0.1 flat layout)", path)
    else:
        try:
            if type(n.get("ctrl_deps", 0)) is not int:
                _coerce_parent(n["ctrl_deps"])
        except TypeError:
            return TraceFormatError(f"{where}: ctrl_deps is not a node id", path)
        for k in ("inputs", "outputs"):
            d = n.get(k)
            if d is None:
                continue
            if not isinstance(d, dict):
                return TraceFormatError(
                    f"{where}: {k} is a {type(d).__name__}, expected {{values, shapes, types}} "
                    "(not the chakra layout)", path)
            missing = [f for f in ("values", "shapes", "types") if f not in d]
            if missing:
                return TraceFormatError(f"{where}: {k} lacks {', '.join(missing)}", path)
        attrs = n.get("attrs")
        if attrs is not None:
            if not isinstance(attrs, list):
                return TraceFormatError(f"{where}: attrs is not a list", path)
            for a in attrs:
                if not isinstance(a, dict) or "name" not in a or "value" not in a:
                    return TraceFormatError(f"{where}: attrs entry {a!r:.80} lacks name/value", path)
    return TraceFormatError(f"{where}: malformed node", path)


def _duplicate_error(ops: list[HostOp], path: str) -> TraceFormatError:
    seen: dict[int, int] = {}
    for op in ops:
        if op.id in seen:
            return TraceFormatError(
                f"duplicate node id {op.id} (indices {seen[op.id]} and {op.index})", path)
        seen[op.id] = op.index
    return TraceFormatError("duplicate node ids", path)


def _opt_int(v: Any) -> int | None:
    return v if type(v) is int else None


def _trace(doc: Document) -> HostTrace:
    records = Records(doc)
    host_op = records.builder.host_op
    ops = [host_op(index, n, fields) for index, n, fields in records.records()]
    by_id = {op.id: op for op in ops}
    if len(by_id) != len(ops):
        raise _duplicate_error(ops, doc.path)
    return make_trace(doc.top, records.layout, ops, by_id, records.warnings, doc.path)


def build_host_trace(data: Any, path: str = "<memory>") -> HostTrace:
    """Build a HostTrace from already parsed JSON (the loader's work minus the file read)."""
    with gc_paused():
        return _trace(document_from_data(data, path))


def load_host_et(path: str | os.PathLike[str]) -> HostTrace:
    """Load a host ET or ET+ (``.json`` or gzip JSON, detected by magic bytes) into a HostTrace.

    Raises TraceFormatError naming the file (and node id) on: unreadable or
    non-JSON input, truncated gzip, missing ``nodes``, ``nodes`` not a list, a
    node without id or name, duplicate node ids, an unrecognisable layout, or a
    process-group payload that cannot be parsed.
    """
    with gc_paused():
        return _trace(read_document(path))


# ---- a file read in parts (chakra.host.decode.node_cuts / read_part) -------------------------------------
#
# Each part is read, scanned and decoded by the process that keeps its nodes' result.  A part's first node
# position is the count of the nodes before it, and the layout is decided by the file's first node: each part
# learns both from the part before it, through a pipe, and tells the part after it, as soon as it has read
# its own.  A part that cannot be read on its own (the cut was not between two nodes of the ``nodes`` list),
# or that meets any error, makes the whole file take the one-part route, which reports what is wrong with the
# words and positions of a whole read.

@contextlib.contextmanager
def part_links(n: int) -> Iterator[list[tuple[int, int]]]:
    """The pipes between ``n`` parts (part j tells part j + 1 through ``links[j]``), closed after."""
    links = [os.pipe() for _ in range(n - 1)]
    try:
        yield links
    finally:
        for r, w in links:
            os.close(r)
            os.close(w)


def part_records(path: str, spans: list[tuple[int, int]], links: list[tuple[int, int]], j: int
                 ) -> tuple[Records, int] | None:
    """Part ``j`` of a file cut at ``spans`` (``node_cuts``), decoded (``read_part``): its Records (node
    positions those of the file; the layout warnings of part 0 kept, not logged: :func:`parts_top` logs them
    once the parts are known to join) and the position of its first node.  None when this part, or one
    before it, cannot be read on its own."""
    start, stop = spans[j]
    last = j == len(spans) - 1
    doc = read_part(path, start, stop, j == 0, last)
    records: Records | None = None
    first = 0
    if j == 0:
        if doc is not None:
            try:
                records = Records(doc, quiet=True)
            except ChakraError:
                pass
    else:
        told = pickle.loads(os.read(links[j - 1][0], 4096))   # (one message of a few bytes: written whole)
        if told is not None and doc is not None:
            first, layout = told
            doc.raw_nodes = [None] * first + doc.raw_nodes
            records = Records(doc, layout)
    if not last:
        os.write(links[j][1], pickle.dumps(None if records is None else (len(records.doc), records.layout)))
    return None if records is None else (records, first)


def parts_top(path: str, tops: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any] | None:
    """The top-level keys of a file read in parts (the parts' own, ``Document.top``), as a whole read gives
    them, having logged the layout ``warnings`` of part 0; None (said at INFO level) when they do not join: a
    key stands in two parts, or the schema stands after part 0 (whose layout was decided without it)."""
    top = joined_top(tops)
    if top is None or any("schema" in t for t in tops[1:]):
        log.info("%s: read whole (cut in %d parts, its top-level keys are not where the cut expects them)",
                 path, len(tops))
        return None
    for w in warnings:
        log.warning("%s", w)
    return top


def make_trace(top: dict[str, Any], layout: str, ops: list[HostOp], by_id: dict[int, HostOp],
               warnings: list[str], path: str) -> HostTrace:
    """The HostTrace of a document's top level and (some of) its ops: process groups, rank, world size."""
    schema = top.get("schema")
    trace = HostTrace(
        path=path,
        schema=schema if isinstance(schema, str) else "",
        layout=layout,
        pid=_opt_int(top.get("pid")),
        time=top.get("time") if isinstance(top.get("time"), str) else None,
        start_ts=_opt_int(top.get("start_ts")),
        finish_ts=_opt_int(top.get("finish_ts")),
        ops=ops,
        by_id=by_id,
        extra={k: v for k, v in top.items() if k not in _TOP_KEYS},
        warnings=warnings,
    )
    trace.rank = _opt_int(top.get(hk.RANK))
    trace.world_size = _opt_int(top.get(hk.WORLD_SIZE))
    _attach_process_groups(trace, top, path)
    return trace


def _attach_process_groups(trace: HostTrace, data: dict[str, Any], path: str) -> None:
    meta = [op for op in trace.ops if op.kind == METADATA]
    if meta:
        op = meta[0]
        trace.metadata_id = op.id
        if len(meta) > 1:
            _warn(trace.warnings, f"{path}: {len(meta)} '{PG_INIT_NAME}' nodes (ids "
                                  f"{[m.id for m in meta]}); using the first, id {op.id}")
        values = op.inputs.values
        if not values:
            _warn(trace.warnings, f"{path}: node id {op.id} '{PG_INIT_NAME}' has no payload")
        else:
            try:
                trace.process_groups = parse_pg_init(values[0], trace.world_size)
            except PayloadError as exc:
                raise TraceFormatError(f"node id {op.id} '{PG_INIT_NAME}': {exc}", path) from None
    elif isinstance(data.get(hk.PROCESS_GROUPS), list):
        # An ET+ file written by our linker without the init node: its resolved table.
        try:
            trace.process_groups = parse_pg_init(data[hk.PROCESS_GROUPS], trace.world_size)
        except PayloadError as exc:
            raise TraceFormatError(f"top-level process_groups: {exc}", path) from None
    if trace.world_size is None and trace.process_groups:
        trace.world_size = infer_world_size(trace.process_groups)


