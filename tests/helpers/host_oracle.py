"""The host loader before the typed decoder (chakra.host.loader at 74002c7, the one-piece parse), kept as
the reference the tests hold chakra.host.decode + loader to: a plain loop over parsed node dicts, every
field read with ``dict.get``.  It returns plain tuples, one per op; :func:`op_tuple` gives the same tuple
of a loaded ``HostOp``."""

from __future__ import annotations

import math
from typing import Any

_FLAT_KEYS = frozenset({
    "name", "id", "rf_id", "parent", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema",
    "inputs", "input_shapes", "input_types", "input_strides",
    "outputs", "output_shapes", "output_types", "output_strides",
})
_CHAKRA_KEYS = frozenset({"id", "name", "ctrl_deps", "inputs", "outputs", "attrs"})
_ROOTS = ("[pytorch|profiler|execution_trace|", "[pytorch|profiler|execution_graph|")


def _kind(nid: int, name: str, parent: int) -> str:
    if name == "## process_group:init ##":
        return "metadata"
    if name in {p + "thread]" for p in _ROOTS}:
        return "thread_root"
    if name in {p + "process]" for p in _ROOTS}:
        return "process_root"
    if nid == 1 and parent == 1:
        return "process_root"
    return "op"


def node_layout(node: Any) -> str | None:
    if not isinstance(node, dict):
        return None
    if isinstance(node.get("attrs"), list) or "ctrl_deps" in node or isinstance(node.get("inputs"), dict):
        return "chakra"
    if "parent" in node or isinstance(node.get("inputs"), list) or "input_types" in node:
        return "flat"
    return None


def _flat(n: dict[str, Any], index: int) -> tuple[Any, ...]:
    get = n.get
    nid, name, parent = n["id"], n["name"], get("parent", 0)
    inputs = get("inputs") or []
    if type(nid) is not int or type(name) is not str or type(parent) is not int or type(inputs) is not list:
        raise TypeError
    attrs = {k: v for k, v in n.items() if k not in _FLAT_KEYS}
    return (nid, name, parent, _kind(nid, name, parent), get("rf_id"), get("tid", 0), get("fw_parent", 0),
            get("seq_id", -1), get("scope", 0), get("fw_tid", 0), get("op_schema", ""),
            (inputs, get("input_shapes") or [], get("input_types") or [], get("input_strides")),
            (get("outputs") or [], get("output_shapes") or [], get("output_types") or [],
             get("output_strides")),
            attrs, {}, index)


def _chakra(n: dict[str, Any], index: int) -> tuple[Any, ...]:
    get = n.get
    nid, name, parent = n["id"], n["name"], get("ctrl_deps", 0)
    if type(parent) is not int:
        if parent is None:
            parent = 0
        elif isinstance(parent, list) and all(type(x) is int for x in parent):
            parent = parent[0] if parent else 0
        else:
            raise TypeError
    if type(nid) is not int or type(name) is not str:
        raise TypeError
    std = {"rf_id": None, "fw_parent": 0, "seq_id": -1, "scope": 0, "tid": 0, "fw_tid": 0, "op_schema": ""}
    attrs: dict[str, Any] = {}
    types: dict[str, Any] = {}
    for a in get("attrs") or ():
        an, v = a["name"], a["value"]
        if an in std:
            std[an] = v
        else:
            attrs[an] = v
            if a.get("type") is not None:
                types[an] = a["type"]
    io = []
    for key in ("inputs", "outputs"):
        d = get(key)
        io.append((d["values"], d["shapes"], d["types"], d.get("strides")) if d is not None
                  else ([], [], [], None))
    for k in n:
        if k not in _CHAKRA_KEYS:
            attrs[k] = n[k]
    return (nid, name, parent, _kind(nid, name, parent), std["rf_id"], std["tid"], std["fw_parent"],
            std["seq_id"], std["scope"], std["fw_tid"], std["op_schema"], io[0], io[1], attrs, types, index)


def oracle_ops(data: dict[str, Any], layout: str) -> list[tuple[Any, ...]]:
    """The ops of a parsed host ET / ET+ in ``layout`` (TypeError/KeyError/... on a malformed node)."""
    parse = _flat if layout == "flat" else _chakra
    return [parse(n, i) for i, n in enumerate(data["nodes"])]


def op_tuple(op: Any) -> tuple[Any, ...]:
    i, o = op.inputs, op.outputs
    return (op.id, op.name, op.parent, op.kind, op.rf_id, op.tid, op.fw_parent, op.seq_id, op.scope,
            op.fw_tid, op.op_schema, (i.values, i.shapes, i.types, i.strides),
            (o.values, o.shapes, o.types, o.strides), op.attrs, op.attr_types, op.index)


def same(a: Any, b: Any, nan_is_null: bool = False) -> bool:
    """Deep equality where NaN equals NaN (and, with ``nan_is_null``, None: inputs/outputs are kept as
    the JSON text the writers copy, in which a NaN is null)."""
    if isinstance(a, float) and math.isnan(a):
        return (isinstance(b, float) and math.isnan(b)) or (nan_is_null and b is None)
    if isinstance(a, (list, tuple)):
        return (isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(same(x, y, nan_is_null) for x, y in zip(a, b)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k], nan_is_null) for k in a)
    return type(a) is type(b) and a == b
