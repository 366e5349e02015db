"""Host nodes back to their file's own layout, GPU nodes in the same layout.

The host loader keeps every node field (modelled fields, the inputs/outputs text, anything else in
``HostOp.attrs``), so the node can be written back in the layout it was read
in: flat 1.0.1 keys, or the chakra 1.0.2+ layout with ``ctrl_deps``,
``inputs``/``outputs`` objects and an ``attrs`` list.  In the chakra layout an
entry of ``HostOp.attrs`` with a known ET type (``attr_types``) came from the
``attrs`` list and goes back there; one without came from the node itself
(e.g. ET+ timing fields of a file linked before) and goes back as a node key.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import orjson
from orjson import Fragment

from chakra.host import keys as hk
from chakra.host.model import HostOp, IOInfo, IOText
from chakra.io.jsonio import dumps_kept

FLAT = "flat"
CHAKRA = "chakra"

# (name, ET type) of the attrs the host loader models as HostOp fields, in the order PyTorch writes them
_STD_ATTRS: tuple[tuple[str, str], ...] = (
    (hk.RF_ID, "uint64"),
    (hk.FW_PARENT, "uint64"),
    (hk.SEQ_ID, "int64"),
    (hk.SCOPE, "uint64"),
    (hk.TID, "uint64"),
    (hk.FW_TID, "uint64"),
    (hk.OP_SCHEMA, "string"),
)
# keys the linker writes; stale copies from an already linked input are dropped
LINK_KEYS = frozenset(
    (
        "ts",
        "dur",
        "inclusive_dur",
        "exclusive_dur",
        "kineto_tid",
        "inter_thread_dep",
        "sync_dep",
        hk.PG_NAME,
        hk.COLLECTIVE_NAME,
        hk.COMM_SIZE,
        "comm_backend",
    )
)


def _io_chakra(io: IOInfo) -> dict[str, Any]:
    d: dict[str, Any] = {"values": io.values, "shapes": io.shapes, "types": io.types}
    if io.strides is not None:
        d["strides"] = io.strides
    return d


def host_node(op: HostOp, layout: str) -> dict[str, Any]:
    """The node dict of a host op in ``layout`` (without link fields).

    The inputs/outputs of an op loaded from a file are its JSON text (``HostOp.io``), as an
    ``orjson.Fragment`` (:func:`add_io`): the node encodes to the bytes its lists would.  The writer uses
    :func:`host_text`, this dict's text."""
    if layout == FLAT:
        node: dict[str, Any] = {
            "name": op.name,
            "id": op.id,
            hk.RF_ID: op.rf_id,
            "parent": op.parent,
            hk.FW_PARENT: op.fw_parent,
            hk.SEQ_ID: op.seq_id,
            hk.SCOPE: op.scope,
            hk.TID: op.tid,
            hk.FW_TID: op.fw_tid,
            hk.OP_SCHEMA: op.op_schema,
        }
        add_io(node, op, layout)
        io = op.io
        if io is not None:
            if io[3] is not None:
                node["input_strides"] = Fragment(io[3])
            if io[7] is not None:
                node["output_strides"] = Fragment(io[7])
        else:
            if op.inputs.strides is not None:
                node["input_strides"] = op.inputs.strides
            if op.outputs.strides is not None:
                node["output_strides"] = op.outputs.strides
        if op.attrs:
            for k, v in op.attrs.items():
                if k not in LINK_KEYS:
                    node[k] = v
        return node
    node = {"id": op.id, "name": op.name, "ctrl_deps": op.parent}
    add_io(node, op, layout)
    types = op.attr_types
    attrs = []
    for name, default_type in _STD_ATTRS:
        value = getattr(op, name)
        if name == hk.RF_ID and value is None:
            continue
        attrs.append({"name": name, "type": types.get(name, default_type), "value": value})
    node["attrs"] = attrs
    more = op.attrs
    if more:
        for k, v in more.items():
            t = types.get(k)
            if t is not None:
                attrs.append({"name": k, "type": t, "value": v})
            elif k not in LINK_KEYS:
                node[k] = v
    return node


# host_text's formats: the text orjson writes for host_node's dict when its scalars are plain integers and
# strings (the std attrs with their default types): formatted, not built as dicts and encoded
_STD_TAIL = (b'{"name":"fw_parent","type":"uint64","value":%d},{"name":"seq_id","type":"int64","value":%d},'
             b'{"name":"scope","type":"uint64","value":%d},{"name":"tid","type":"uint64","value":%d},'
             b'{"name":"fw_tid","type":"uint64","value":%d},{"name":"op_schema","type":"string","value":%b}')
_CHAKRA_STD = b'{"name":"rf_id","type":"uint64","value":%d},' + _STD_TAIL
_FLAT_HEAD = (b'{"name":%b,"id":%d,"rf_id":%b,"parent":%d,"fw_parent":%d,"seq_id":%d,"scope":%d,"tid":%d,'
              b'"fw_tid":%d,"op_schema":%b,"inputs":')
_STD_NAMES = frozenset(name for name, _ in _STD_ATTRS)
_NO_EXTRAS = (b"", b"")
_STRINGS: dict[str, bytes] = {}   # names and op schemas -> their JSON text (json_string)
_EXTRAS: dict[int, tuple[dict[str, Any], dict[str, str], str, tuple[bytes, bytes] | None]] = {}
# keys of host_node's dict an attribute of the same name would replace (host_text leaves those to it)
_OWN_KEYS = {
    FLAT: frozenset(("name", "id", hk.RF_ID, "parent", hk.FW_PARENT, hk.SEQ_ID, hk.SCOPE, hk.TID, hk.FW_TID,
                     hk.OP_SCHEMA, "inputs", "input_strides", "output_strides")),
    CHAKRA: frozenset(("id", "name", "ctrl_deps", "inputs", "attrs")),
}


def json_string(s: str) -> bytes:
    """The JSON text of a name (op, kernel, process group ...), kept: names repeat."""
    got = _STRINGS.get(s)
    if got is None:
        if len(_STRINGS) > 100_000:
            _STRINGS.clear()
        got = _STRINGS[s] = dumps_kept(s)
    return got


def _extras(attrs: dict[str, Any], types: dict[str, str], layout: str) -> tuple[bytes, bytes] | None:
    """The text of an op's attributes in ``layout``: the chakra ``attrs`` entries that follow the std ones
    (``,`` + each) and the node keys (``,`` + each ``"key":value``), as host_node writes them; None when
    an attribute would replace one of host_node's own keys, or a std attr has an ET type of its own.
    Cached per dict: loaded ops share them."""
    got = _EXTRAS.get(id(attrs))
    if got is not None and got[0] is attrs and got[1] is types and got[2] == layout:
        return got[3]
    typed = []
    keys = {}
    for k, v in attrs.items():
        t = types.get(k) if layout != FLAT else None
        if t is not None:
            typed.append({"name": k, "type": t, "value": v})
        elif k not in LINK_KEYS:
            keys[k] = v
    text = None
    if _OWN_KEYS[layout].isdisjoint(keys) and (layout == FLAT or _STD_NAMES.isdisjoint(types)):
        text = (b"," + orjson.dumps(typed)[1:-1] if typed else b"",
                b"," + orjson.dumps(keys)[1:-1] if keys else b"")
    if len(_EXTRAS) > 10_000:
        _EXTRAS.clear()
    _EXTRAS[id(attrs)] = (attrs, types, layout, text)
    return text


# the fields host_text formats, read in one call
_TEXT_FIELDS = attrgetter("io", "id", "parent", "rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid",
                          "op_schema")


def host_text(op: HostOp, layout: str, tail: bytes = b"") -> bytes:
    """The JSON text of ``host_node(op, layout)`` without its closing ``}``, followed by ``tail`` (the
    linker's fields and the ``}``): formatted directly for an op loaded from a file whose fields are plain
    integers and strings, encoded from the dict otherwise."""
    io, nid, parent, rf, fw, seq, sc, tid, ftid, schema = _TEXT_FIELDS(op)
    if (io is None or not (type(nid) is type(parent) is type(fw) is type(seq) is type(sc) is type(tid)
                           is type(ftid) is int)
            or type(schema) is not str or (rf is not None and type(rf) is not int)):
        return orjson.dumps(host_node(op, layout))[:-1] + tail
    attrs = op.attrs
    types = op.attr_types
    if attrs or types:
        got = _EXTRAS.get(id(attrs))
        if got is not None and got[0] is attrs and got[1] is types and got[2] == layout:
            extras = got[3]
        else:
            extras = _extras(attrs, types, layout)
        if extras is None:
            return orjson.dumps(host_node(op, layout))[:-1] + tail
        entries, more = extras
    else:
        entries = more = b""
    strings = _STRINGS
    name = strings.get(op.name) or json_string(op.name)
    schema = strings.get(schema) or json_string(schema)
    iv, ish, ity, ist, ov, osh, oty, ost = io
    if layout == FLAT:
        return b"".join((_FLAT_HEAD % (name, nid, b"null" if rf is None else b"%d" % rf, parent, fw, seq, sc,
                                       tid, ftid, schema),
                         iv, b',"input_shapes":', ish, b',"input_types":', ity, b',"outputs":', ov,
                         b',"output_shapes":', osh, b',"output_types":', oty,
                         b',"input_strides":' if ist is not None else b"", ist or b"",
                         b',"output_strides":' if ost is not None else b"", ost or b"", more, tail))
    if rf is None:
        std = _STD_TAIL % (fw, seq, sc, tid, ftid, schema)
    else:
        std = _CHAKRA_STD % (rf, fw, seq, sc, tid, ftid, schema)
    return b"".join((b'{"id":%d,"name":%b,"ctrl_deps":%d,"inputs":{"values":' % (nid, name, parent),
                     iv, b',"shapes":', ish, b',"types":', ity,
                     b',"strides":' if ist is not None else b"", ist or b"",
                     b'},"outputs":{"values":', ov, b',"shapes":', osh, b',"types":', oty,
                     b',"strides":' if ost is not None else b"", ost or b"",
                     b'},"attrs":[', std, entries, b"]", more, tail))


def add_io(node: dict[str, Any], op: HostOp, layout: str) -> None:
    """Add the op's inputs/outputs keys to ``node`` (in place): its text (:func:`io_text`) as the value of
    ``inputs`` when it has one, else its lists.  A GPU node gets its launcher's this way too."""
    io = op.io
    if io is not None:
        node["inputs"] = Fragment(io_text(io, layout))
    elif layout == FLAT:
        i = op.inputs
        o = op.outputs
        node["inputs"] = i.values
        node["input_shapes"] = i.shapes
        node["input_types"] = i.types
        node["outputs"] = o.values
        node["output_shapes"] = o.shapes
        node["output_types"] = o.types
    else:
        node["inputs"] = _io_chakra(op.inputs)
        node["outputs"] = _io_chakra(op.outputs)


def io_text(io: IOText, layout: str) -> bytes:
    """The JSON text that follows ``"inputs":`` in a node of ``layout``, up to the last inputs/outputs key:
    the value of ``inputs`` and then the other input/output keys with their values, from the canonical
    pieces of ``HostOp.io``.  As the value of ``"inputs"`` in an ``orjson.Fragment`` it makes the node
    encode exactly as with the lists themselves (flat strides are keys of their own, after these)."""
    iv, ish, ity, ist, ov, osh, oty, ost = io
    if layout == FLAT:
        return b"".join((iv, b',"input_shapes":', ish, b',"input_types":', ity, b',"outputs":', ov,
                         b',"output_shapes":', osh, b',"output_types":', oty))
    return b"".join((b'{"values":', iv, b',"shapes":', ish, b',"types":', ity,
                     b',"strides":' if ist is not None else b"", ist or b"",
                     b'},"outputs":{"values":', ov, b',"shapes":', osh, b',"types":', oty,
                     b',"strides":' if ost is not None else b"", ost or b"", b"}"))
