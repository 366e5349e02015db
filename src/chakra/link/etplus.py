"""Host nodes back to their file's own layout, GPU nodes in the same layout.

The host loader keeps every node field (modelled fields, plus anything else in
``HostOp.attrs``), so the node can be written back in the layout it was read
in: flat 1.0.1 keys, or the chakra 1.0.2+ layout with ``ctrl_deps``,
``inputs``/``outputs`` objects and an ``attrs`` list.  In the chakra layout an
entry of ``HostOp.attrs`` with a known ET type (``attr_types``) came from the
``attrs`` list and goes back there; one without came from the node itself
(e.g. ET+ timing fields of a file linked before) and goes back as a node key.
"""

from __future__ import annotations

from typing import Any

import orjson

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


def host_node(op: HostOp, layout: str, io: Any = None) -> dict[str, Any]:
    """The node dict of a host op in ``layout`` (without link fields).

    ``io``: an ``orjson.Fragment`` holding the op's inputs/outputs as JSON text (see
    :func:`io_fragment_text`), written in place of its lists: the node then encodes to the same bytes."""
    if layout == FLAT:
        i = op.inputs
        o = op.outputs
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
        if io is not None:  # add_io, inline: a million calls on large traces
            node["inputs"] = io
        else:
            add_io(node, op, layout)
        if i.strides is not None:
            node["input_strides"] = i.strides
        if o.strides is not None:
            node["output_strides"] = o.strides
        if op.attrs:
            for k, v in op.attrs.items():
                if k not in LINK_KEYS:
                    node[k] = v
        return node
    attrs: list[dict[str, Any]] = []
    types = op.attr_types
    for name, default_type in _STD_ATTRS:
        value = getattr(op, name)
        if name == "rf_id" and value is None:
            continue
        attrs.append({"name": name, "type": types.get(name, default_type), "value": value})
    node = {"id": op.id, "name": op.name, "ctrl_deps": op.parent}
    add_io(node, op, layout, io)
    node["attrs"] = attrs
    for k, v in op.attrs.items():
        t = types.get(k)
        if t is not None:
            attrs.append({"name": k, "type": t, "value": v})
        elif k not in LINK_KEYS:
            node[k] = v
    return node


def add_io(node: dict[str, Any], op: HostOp, layout: str, io: Any = None) -> None:
    """Add the op's inputs/outputs keys to ``node`` (in place, in :func:`io_fields` order); with ``io`` (an
    ``orjson.Fragment`` of :func:`io_fragment_text`) that one key stands for all of them."""
    if io is not None:
        node["inputs"] = io
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


def io_fragment_text(op: HostOp, layout: str) -> bytes:
    """The op's inputs/outputs as the JSON text that follows ``"inputs":`` in its node: the value of
    ``inputs`` and then the other input/output keys with their values (:func:`io_fields` order).  Held in
    an ``orjson.Fragment`` as the value of ``"inputs"``, it makes the node encode exactly as with the
    lists themselves."""
    return orjson.dumps(io_fields(op, layout))[_INPUTS_KEY_LEN:-1]


_INPUTS_KEY_LEN = len(b'{"inputs":')


def io_fields(op: HostOp, layout: str) -> dict[str, Any]:
    """The launcher's inputs/outputs, copied onto its GPU nodes (in the file's layout)."""
    if layout == FLAT:
        return {
            "inputs": op.inputs.values,
            "input_shapes": op.inputs.shapes,
            "input_types": op.inputs.types,
            "outputs": op.outputs.values,
            "output_shapes": op.outputs.shapes,
            "output_types": op.outputs.types,
        }
    return {"inputs": _io_chakra(op.inputs), "outputs": _io_chakra(op.outputs)}
