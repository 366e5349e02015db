"""Typed decoding of host ETs and ET+ files: the one reader behind the host loader, the linker and the
converter, whatever the file's size or node layout.

A file is decoded by msgspec into the Structs below, which declare the keys some stage reads and nothing
else: the document's top level (:class:`_Top`), then each node (:class:`Node`) one at a time, from the
node's own slice of the input (``nodes`` is first decoded as a list of ``msgspec.Raw``).  One node at a
time keeps the decoded form of only one node alive, so the peak is the input bytes plus what the caller
keeps of each node (:mod:`chakra.host.loader` builds a compact ``HostOp``).  Inputs and outputs stay raw
JSON (``msgspec.Raw`` pieces: values, shapes, types, strides), which the loader copies out as canonical
text (:func:`canonical`) without parsing.

What the typed decoder cannot take goes through the generic route (:func:`node_from_obj`), which builds
the same :class:`Node` from the parsed JSON of the node (or of the whole document), keeping every key in
file order: a node with a key no Struct declares (``Node`` forbids unknown keys so that none is dropped
unnoticed), a field of an unexpected type (the loader then says what is wrong with the node), and a
document msgspec rejects as a whole (bare ``NaN`` / ``Infinity``, which PyTorch writes and Python's json
reads; or not JSON at all: the generic parse names the problem).  Each use of it is logged, with the
reason.  ``build_host_trace`` of already parsed JSON takes the generic route for every node; the tests
compare the two routes on random documents.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
from msgspec import UNSET, Raw, UnsetType

from chakra.errors import TraceFormatError
from chakra.io import read_bytes
from chakra.io.jsonio import GZIP_MAGIC, dumps_kept, parse_json, top_level_array
from chakra.tunables import CUT_SEARCH_BYTES

log = logging.getLogger(__name__)

#: the value of a raw key the node does not have
NO_RAW = Raw(b"")


class Attr(msgspec.Struct, gc=False):
    """One ``{name, type, value}`` entry of a chakra-layout node's ``attrs`` list (other keys dropped)."""

    name: Any
    value: Any
    type: Any = None


class IOPieces(msgspec.Struct, gc=False):
    """A chakra-layout ``inputs`` / ``outputs`` object, each list left raw (other keys dropped)."""

    values: Raw
    shapes: Raw
    types: Raw
    strides: Raw = NO_RAW   # absent


# A node with keys of both layouts and of ET+.  The flat (1.0.1) node keys: name, id, rf_id, parent,
# fw_parent, seq_id, scope, tid, fw_tid, op_schema, inputs / input_shapes / input_types / input_strides
# and the same for outputs, inputs being a list; the chakra (1.0.2+) node keys: id, name, ctrl_deps,
# inputs / outputs objects, attrs.  ET+ (chakra.link) adds ts, dur, inclusive_dur, exclusive_dur,
# kineto_tid, inter_thread_dep, sync_dep, and GPU nodes with cat, ph, stream, device, tid, args, pg_name,
# collective_name, comm_size; gloo host records get comm_backend and the comm fields; ET+ files of the 2023
# linker have pid on GPU nodes.  UNSET: the key is absent.
class Node(msgspec.Struct, gc=False, forbid_unknown_fields=True, rename={"extra": "~chakra~extra~"}):
    """One node as the file has it (see the comment above); ``extra`` is set by the generic route only."""

    id: Any
    name: Any
    parent: Any = UNSET
    ctrl_deps: Any = UNSET
    rf_id: Any = UNSET
    fw_parent: Any = UNSET
    seq_id: Any = UNSET
    scope: Any = UNSET
    tid: Any = UNSET
    fw_tid: Any = UNSET
    op_schema: Any = UNSET
    inputs: IOPieces | list[Raw] | None | UnsetType = UNSET
    outputs: IOPieces | list[Raw] | None | UnsetType = UNSET
    input_shapes: Raw = NO_RAW
    input_types: Raw = NO_RAW
    input_strides: Raw = NO_RAW
    output_shapes: Raw = NO_RAW
    output_types: Raw = NO_RAW
    output_strides: Raw = NO_RAW
    attrs: list[Attr] | None | UnsetType = UNSET
    cat: Any = UNSET
    ph: Any = UNSET
    ts: Any = UNSET
    dur: Any = UNSET
    inclusive_dur: Any = UNSET
    exclusive_dur: Any = UNSET
    kineto_tid: Any = UNSET
    stream: Any = UNSET
    device: Any = UNSET
    pid: Any = UNSET
    args: Any = UNSET
    pg_name: Any = UNSET
    collective_name: Any = UNSET
    comm_size: Any = UNSET
    comm_backend: Any = UNSET
    inter_thread_dep: Any = UNSET
    sync_dep: Any = UNSET
    # generic route: every key outside the layout's own, in file order, with its parsed value
    extra: dict[str, Any] | None = None


#: the keys of :class:`Node` that the typed decoder reads as raw JSON (their values are copied, not parsed)
RAW_KEYS = frozenset(("input_shapes", "input_types", "input_strides", "output_shapes", "output_types",
                      "output_strides"))
#: every key :class:`Node` declares, as the JSON has it
NODE_KEYS = tuple(f for f in Node.__struct_fields__ if f != "extra")


class _Top(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """The top level of a host ET / ET+, nodes left raw; any other key -> the generic top level."""

    nodes: list[Raw] | UnsetType = UNSET
    schema: Any = UNSET
    pid: Any = UNSET
    time: Any = UNSET
    start_ts: Any = UNSET
    finish_ts: Any = UNSET
    rank: Any = UNSET
    world_size: Any = UNSET
    process_groups: Any = UNSET
    measured: Any = UNSET
    link_stats: Any = UNSET


_TOP_DECODER = msgspec.json.Decoder(_Top)
_TOP_ANY = msgspec.json.Decoder(dict[str, Raw])
_RAWS = msgspec.json.Decoder(list[Raw])
_NODE_DECODER = msgspec.json.Decoder(Node)
_TOP_FIELDS = tuple(f for f in _Top.__struct_fields__ if f != "nodes")


@dataclass(slots=True)
class Document:
    """A decoded host ET / ET+: its top-level keys (``nodes`` mapped to None, in its place) and its nodes.

    ``nodes`` holds each node's raw JSON (typed route) or parsed JSON (generic route); :meth:`node`
    decodes one.  Only the caller decides what to keep of each."""

    path: str
    top: dict[str, Any]
    raw_nodes: list[Any]
    generic: bool = False            # every node is parsed JSON (the whole document took the generic route)
    notes: list[str] = field(default_factory=list)
    source: bytes | None = None      # the file's bytes (typed route), for the message when a node is not JSON

    def __len__(self) -> int:
        return len(self.raw_nodes)

    def node(self, index: int) -> Node:
        """Node ``index``; raises :class:`NodeError` when it is not an object with the keys' types."""
        item = self.raw_nodes[index]
        if not self.generic:
            try:
                return _NODE_DECODER.decode(item)
            except msgspec.ValidationError as exc:
                _note_generic(self, index, str(exc))
                item = self.obj(index)
            except msgspec.DecodeError as exc:   # e.g. invalid UTF-8 in a string (skipped, not checked)
                self._invalid(exc)
        return node_from_obj(item, index)

    def _invalid(self, exc: Exception) -> None:
        """A node is not valid JSON: the message of the plain JSON parse of the whole file."""
        if self.source is not None:
            parse_json(self.source, self.path)
        raise TraceFormatError(f"not valid JSON ({exc})", self.path)

    def obj(self, index: int) -> Any:
        """The parsed JSON of node ``index`` (for messages about it)."""
        item = self.raw_nodes[index]
        if self.generic:
            return item
        try:
            return orjson.loads(memoryview(item))
        except orjson.JSONDecodeError as exc:
            self._invalid(exc)

    def generic_node(self, index: int) -> Node:
        """Node ``index`` by the generic route (every key also in ``extra``, parsed)."""
        return node_from_obj(self.obj(index), index)


class NodeError(Exception):
    """A node the generic route cannot build (not an object, a value of the wrong type): the loader
    diagnoses it with its layout's words."""

    def __init__(self, index: int, obj: Any, why: str) -> None:
        super().__init__(why)
        self.index = index
        self.obj = obj


def _note_generic(doc: Document, index: int, why: str) -> None:
    if len(doc.notes) < 5:
        msg = f"{doc.path}: node at index {index} read by the generic JSON route ({why})"
        doc.notes.append(msg)
        log.info("%s", msg)


def read_document(path: str | os.PathLike[str]) -> Document:
    """Decode a host ET / ET+ file (``.json`` or gzip, by magic bytes).

    Raises TraceFormatError naming the file when it cannot be read, is not JSON, is not an object, or has
    no ``nodes`` list (with the words of :func:`no_nodes_message`)."""
    spath = os.fspath(path)
    raw = read_bytes(spath)
    if not raw.strip():
        raise TraceFormatError("file is empty", spath)
    try:
        top = _TOP_DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        return _generic_top(spath, raw, str(exc))
    except msgspec.DecodeError as exc:
        return _generic_document(spath, raw, str(exc))
    if top.nodes is UNSET:
        return _generic_document(spath, raw, "no nodes")
    return Document(spath, {**_keys_of(top), "nodes": None}, top.nodes, source=raw)


def _keys_of(top: _Top) -> dict[str, Any]:
    """The top-level keys a decoded ``_Top`` has, other than ``nodes``, in the order a Document gives them."""
    return {k: v for k in _TOP_FIELDS if (v := getattr(top, k)) is not UNSET}


# ---- a file read in parts -------------------------------------------------------------------------------
#
# A large uncompressed file can be read and scanned in parts, each in the process that decodes its nodes
# (``chakra.convert.columns``), instead of whole in one process first.  The parts are cut between two nodes,
# where the text is ``}``, a comma, ``{`` and the next node's first key, ``"id"`` (as the linker and
# PyTorch's chakra layout write it; not the flat layout, whose nodes start with ``"name"`` like the entries of
# a chakra node's ``attrs``), with any whitespace between.  In valid JSON that text stands only between two
# objects of an array: a quote inside a string is escaped, and a string's closing quote cannot be followed
# by ``id":``.  The array may still be another one than ``nodes`` (a list of objects inside a node):
# :func:`read_part` then refuses a part, and the caller reads the file whole.
_NODE_GAP = re.compile(rb'\}\s*,\s*(\{)\s*"id"\s*:')


def node_cuts(path: str | os.PathLike[str], k: int, min_bytes: int) -> list[tuple[int, int]]:
    """Where to cut a file into up to ``k`` parts of about equal size, each at least ``min_bytes``, between
    two nodes (see above): the ``(start, stop)`` byte range of each part, the first starting at 0, the last
    ending at the file's end.  Empty (read it whole) for a file left in one part, a compressed file, one
    that is not a regular file or cannot be read (the whole read says why), or one without a node boundary
    past the first cut's target."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            k = min(k, size // max(1, min_bytes))
            if k < 2 or not stat.S_ISREG(st.st_mode) or fh.read(2) == GZIP_MAGIC:
                return []
            spans: list[tuple[int, int]] = []
            start = 0
            for q in range(1, k):
                at = max(size * q // k, start)
                while True:
                    fh.seek(at)
                    chunk = fh.read(CUT_SEARCH_BYTES)
                    m = _NODE_GAP.search(chunk)
                    if m is not None or len(chunk) < CUT_SEARCH_BYTES:
                        break
                    at += CUT_SEARCH_BYTES - 64   # (a gap across two reads is found in the second)
                if m is None:
                    break
                spans.append((start, at + m.start() + 1))
                start = at + m.start(1)
            if not spans:
                return []
            spans.append((start, size))
            return spans
    except OSError:
        return []


def read_part(path: str, start: int, stop: int, first: bool, last: bool) -> Document | None:
    """Bytes ``start`` to ``stop`` of a file cut by :func:`node_cuts`, framed as a document of their own
    (the first part closed by ``]}``, the others opened by ``{"nodes":[``) and decoded: the part's top-level
    keys and its nodes (raw).  None when the part is not such a document: its text does not decode, or
    the array it was cut in is not the ``nodes`` list (a key of the first part holds a list or an object, a
    middle part has a key other than ``nodes``); the whole file then takes the one-part route, which says
    what is wrong with it."""
    pre = b"" if first else b'{"nodes":['
    post = b"" if last else b"]}"
    n = stop - start
    buf = bytearray(len(pre) + n + len(post))
    buf[:len(pre)] = pre
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            if fh.readinto(memoryview(buf)[len(pre):len(pre) + n]) != n:
                return None
    except OSError:
        return None
    buf[len(pre) + n:] = post
    try:
        top = _TOP_DECODER.decode(buf)
    except msgspec.DecodeError:   # (ValidationError included)
        return None
    if top.nodes is UNSET or not top.nodes:
        return None
    head = _keys_of(top)
    if first and any(isinstance(v, (list, dict)) for v in head.values()):
        return None
    if head and not first and not last:
        return None
    head["nodes"] = None
    return Document(path, head, top.nodes)


def joined_top(heads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The top-level keys of a file read in parts (:func:`read_part`), as :func:`read_document` gives them;
    None when a key stands in two parts (which one a whole read keeps is the decoder's choice)."""
    top: dict[str, Any] = {}
    for k in _TOP_FIELDS:
        found = [h[k] for h in heads if k in h]
        if len(found) > 1:
            return None
        if found:
            top[k] = found[0]
    top["nodes"] = None
    return top


def _generic_top(path: str, raw: bytes, why: str) -> Document:
    """Top-level keys _Top does not declare (or of other types): every key, in file order, the nodes still
    decoded one at a time."""
    try:
        items = _TOP_ANY.decode(raw)
        nodes = _RAWS.decode(items["nodes"]) if "nodes" in items else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _generic_document(path, raw, why)
    if nodes is None:
        return _generic_document(path, raw, why)
    head = {k: (None if k == "nodes" else msgspec.json.decode(v)) for k, v in items.items()}
    return Document(path, head, nodes, source=raw)


def _generic_document(path: str, raw: bytes, why: str) -> Document:
    """The whole document parsed as plain JSON: its error messages, or the nodes as parsed objects."""
    data = parse_json(raw, path)
    doc = document_from_data(data, path)
    if doc.raw_nodes:
        msg = f"{path}: read by the generic JSON route ({why})"
        doc.notes.append(msg)
        log.info("%s", msg)
    return doc


def document_from_data(data: Any, path: str = "<memory>") -> Document:
    """A Document of already parsed JSON (every node takes the generic route)."""
    nodes = top_level_array(data, "nodes", no_nodes_message(data), path)
    head = {k: (None if k == "nodes" else v) for k, v in data.items()}
    return Document(path, head, nodes, generic=True)


def no_nodes_message(data: Any) -> str:
    """Why a document without ``nodes`` is not a host ET; for a Kineto trace, the command that takes it."""
    if isinstance(data, dict) and "traceEvents" in data:
        return ("no 'nodes' list: this is a Kineto trace, not a host ET or ET+; link it first, alone if "
                "there is no host ET: chakra_trace_link --kineto-only --kineto-file KINETO --output-file ET+")
    return "no 'nodes' list: not a PyTorch host execution trace"


# ---- the generic route ------------------------------------------------------------------------------------

_SCALAR_KEYS = frozenset(NODE_KEYS) - RAW_KEYS - {"inputs", "outputs", "attrs"}


def node_from_obj(n: Any, index: int) -> Node:
    """The :class:`Node` of one parsed node: raw pieces re-encoded canonically, every key outside the
    Struct's scalar fields also kept in ``extra`` in file order (the loader takes the layout's own keys
    from the fields and the rest from ``extra``)."""
    if not isinstance(n, dict):
        raise NodeError(index, n, "not an object")
    nid = n.get("id")
    name = n.get("name")
    if type(nid) is not int or type(name) is not str:
        raise NodeError(index, n, "id/name")
    node = Node(nid, name)
    extra: dict[str, Any] = {}
    for k, v in n.items():
        if k in _SCALAR_KEYS:
            setattr(node, k, v)
        elif k in RAW_KEYS:
            setattr(node, k, Raw(dumps_canonical(v)))
        elif k == "inputs" or k == "outputs":
            setattr(node, k, _io_from_obj(v))
        elif k == "attrs":
            node.attrs = _attrs_from_obj(v)
        if k not in ("id", "name"):
            extra[k] = v
    node.extra = extra
    return node


def _io_from_obj(v: Any) -> Any:
    if isinstance(v, dict):
        try:
            return IOPieces(Raw(dumps_canonical(v["values"])), Raw(dumps_canonical(v["shapes"])),
                            Raw(dumps_canonical(v["types"])),
                            Raw(dumps_canonical(v["strides"])) if "strides" in v else NO_RAW)
        except KeyError:
            return _BadIO(v)
    if isinstance(v, list):
        return [Raw(dumps_canonical(x)) for x in v]
    if v is None:
        return None
    return _BadIO(v)


class _BadIO:
    """An inputs/outputs value neither layout has (the loader reports it, or keeps it as a flat extra)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _attrs_from_obj(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, list):
        return _BadIO(v)
    out = []
    for a in v:
        if not isinstance(a, dict) or "name" not in a or "value" not in a:
            return _BadIO(v)
        out.append(Attr(a["name"], a["value"], a.get("type")))
    return out


# ---- canonical JSON text ------------------------------------------------------------------------------
#
# The writers copy the raw inputs/outputs text into ET+ and into the .et IOInfo strings; both must be the
# bytes orjson writes for the parsed value (what the loaders wrote before they kept the text), so text that
# could differ is parsed and re-encoded: any whitespace outside strings, an escape other than orjson's, a
# number that is not a plain integer (orjson writes floats its own way: "0.000000" is "0.0"), a "-0".
# Text free of the bytes below is canonical as it is; anything else is re-encoded (most of it was not needed,
# e.g. "1.5", and comes back the same).

_SUSPECT = b" \t\n\r\\.E"
_EXPONENT = re.compile(rb"[0-9]e")
_MINUS_ZERO = re.compile(rb"-0(?![.0-9eE])")
# text without any of these bytes passes the three tests above: one scan decides for most text
_NOT_PLAIN = _SUSPECT + b"e-"


def canonical(raw: Any) -> bytes:
    """The canonical text of a raw JSON value (see above)."""
    b = bytes(raw)
    if len(b.translate(None, _NOT_PLAIN)) == len(b) or (len(b.translate(None, _SUSPECT)) == len(b) and (
            b"e" not in b or not _EXPONENT.search(b)) and (b"-0" not in b or not _MINUS_ZERO.search(b))):
        return b
    try:
        value = orjson.loads(b)
    except orjson.JSONDecodeError:
        value = json.loads(b)   # NaN / Infinity / an integer beyond 64 bits: Python's reader takes them
    return dumps_canonical(value)


def dumps_canonical(value: Any) -> bytes:
    """orjson's text of a parsed value; what orjson cannot encode (an integer beyond 64 bits) as the
    standard library writes it, non-JSON values as their str (as the converter always wrote them)."""
    try:
        return dumps_kept(value)   # (kept: the loaders hold these texts)
    except TypeError:
        return json.dumps(value, default=str).encode()


FALSY = frozenset((b"null", b"false", b"0", b"0.0", b"-0.0", b'""', b"[]", b"{}"))
