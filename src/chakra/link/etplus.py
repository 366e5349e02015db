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

from typing import Any

from orjson import Fragment

from chakra.host.model import HostOp, IOInfo

FLAT = "flat"
CHAKRA = "chakra"

# (name, ET type) of the attrs the host loader models as HostOp fields, in the order PyTorch writes them
_STD_ATTRS: tuple[tuple[str, str], ...] = (
    ("rf_id", "uint64"),
    ("fw_parent", "uint64"),
    ("seq_id", "int64"),
    ("scope", "uint64"),
    ("tid", "uint64"),
    ("fw_tid", "uint64"),
    ("op_schema", "string"),
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
        "pg_name",
        "collective_name",
        "comm_size",
        "comm_backend",
    )
)


def _io_chakra(io: IOInfo) -> dict[str, Any]:
    d: dict[str, Any] = {"values": io.values, "shapes": io.shapes, "types": io.types}
    if io.strides is not None:
        d["strides"] = io.strides
    return d


def host_node(op: HostOp, layout: str, text: bool = True) -> dict[str, Any]:
    """The node dict of a host op in ``layout`` (without link fields).

    With ``text``, the inputs/outputs of an op loaded from a file are its JSON text (``HostOp.io``),
    as an ``orjson.Fragment`` (:func:`add_io`): the node encodes to the bytes its lists would; without,
    they are its lists (a document for Python code rather than for a file)."""
    if layout == FLAT:
        node: dict[str, Any] = {
            "name": op.name,
            "id": op.id,
            "rf_id": op.rf_id,
            "parent": op.parent,
            "fw_parent": op.fw_parent,
            "seq_id": op.seq_id,
            "scope": op.scope,
            "tid": op.tid,
            "fw_tid": op.fw_tid,
            "op_schema": op.op_schema,
        }
        add_io(node, op, layout, text)
        io = op.io
        if io is not None and text:
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
    types = op.attr_types
    if types and not _STD_NAMES.isdisjoint(types):   # a std attr with a type of its own
        attrs = []
        for name, default_type in _STD_ATTRS:
            value = getattr(op, name)
            if name == "rf_id" and value is None:
                continue
            attrs.append({"name": name, "type": types.get(name, default_type), "value": value})
    else:   # (the usual case, written out: a million nodes)
        attrs = [{"name": "fw_parent", "type": "uint64", "value": op.fw_parent},
                 {"name": "seq_id", "type": "int64", "value": op.seq_id},
                 {"name": "scope", "type": "uint64", "value": op.scope},
                 {"name": "tid", "type": "uint64", "value": op.tid},
                 {"name": "fw_tid", "type": "uint64", "value": op.fw_tid},
                 {"name": "op_schema", "type": "string", "value": op.op_schema}]
        if op.rf_id is not None:
            attrs.insert(0, {"name": "rf_id", "type": "uint64", "value": op.rf_id})
    node = {"id": op.id, "name": op.name, "ctrl_deps": op.parent}
    add_io(node, op, layout, text)
    node["attrs"] = attrs
    if op.attrs:
        typed, untyped = _split_attrs(op.attrs, types)
        attrs.extend(typed)
        for k in untyped:
            node[k] = op.attrs[k]
    return node


_STD_NAMES = frozenset(name for name, _ in _STD_ATTRS)
_SPLIT: dict[int, tuple[dict[str, Any], dict[str, str], list[dict[str, Any]], list[str]]] = {}


def _split_attrs(attrs: dict[str, Any], types: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``attrs`` entries of an op's attributes (those with an ET type), and the names of the other
    attributes written as node keys (not LINK_KEYS).  Cached per dict: loaded ops share them."""
    got = _SPLIT.get(id(attrs))
    if got is not None and got[0] is attrs and got[1] is types:
        return got[2], got[3]
    typed = []
    untyped = []
    for k, v in attrs.items():
        t = types.get(k)
        if t is not None:
            typed.append({"name": k, "type": t, "value": v})
        elif k not in LINK_KEYS:
            untyped.append(k)
    if len(_SPLIT) > 10_000:
        _SPLIT.clear()
    _SPLIT[id(attrs)] = (attrs, types, typed, untyped)
    return typed, untyped


def add_io(node: dict[str, Any], op: HostOp, layout: str, text: bool = True) -> None:
    """Add the op's inputs/outputs keys to ``node`` (in place): with ``text``, its text (:func:`io_text`)
    as the value of ``inputs`` when it has one, else its lists.  A GPU node gets its launcher's this way
    too."""
    io = op.io
    if io is not None and text:
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


def io_text(io: tuple[bytes | None, ...], layout: str) -> bytes:
    """The JSON text that follows ``"inputs":`` in a node of ``layout``, up to the last inputs/outputs key:
    the value of ``inputs`` and then the other input/output keys with their values, from the canonical
    pieces of ``HostOp.io``.  As the value of ``"inputs"`` in an ``orjson.Fragment`` it makes the node
    encode exactly as with the lists themselves (flat strides are keys of their own, after these)."""
    iv, ish, ity, ist, ov, osh, oty, ost = io
    if layout == FLAT:
        return b"".join((iv, b',"input_shapes":', ish, b',"input_types":', ity, b',"outputs":', ov,
                         b',"output_shapes":', osh, b',"output_types":', oty))
    return b"".join((b'{"values":', iv, b',"shapes":', ish, b',"types":', ity,   # type: ignore[arg-type]
                     b',"strides":' if ist is not None else b"", ist or b"",
                     b'},"outputs":{"values":', ov, b',"shapes":', osh, b',"types":', oty,
                     b',"strides":' if ost is not None else b"", ost or b"", b"}"))
