"""Load a PyTorch host execution trace (ET) into the typed model of ``chakra.host.model``.

Two node layouts exist (FORMATS.md section 1), one parser each:

* ``flat`` (schema 1.0.1): ``parent``, ``rf_id``, ... as node keys; ``inputs`` /
  ``input_shapes`` / ``input_types`` as parallel lists.
* ``chakra`` (1.0.2-chakra.0.0.4 ... 1.1.1-chakra.1.0.0): ``ctrl_deps`` is the
  parent, ``inputs``/``outputs`` are ``{values, shapes, types[, strides]}`` and
  the scalar fields live in an ``attrs`` list of ``{name, type, value}``.

The layout is decided by the schema string and checked against the shape of the
first node; the node shape wins (with a warning) when the two disagree, and an
unknown (newer) schema string loads with a warning when its nodes have a known
shape.  Both parsers are single loops with no per-node dict copies: the JSON
lists are adopted as they are, and anything not modelled (ET+ timing fields,
``kernel_backend``, ...) goes verbatim into ``HostOp.attrs``.  Malformed nodes
are diagnosed only after the fast loop fails, so valid files pay nothing for the
error messages.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from itertools import chain
from typing import Any

from chakra.errors import TraceFormatError
from chakra.host.model import (
    METADATA,
    OP,
    PG_INIT_NAME,
    PROCESS_ROOT,
    THREAD_ROOT,
    HostOp,
    HostTrace,
    IOInfo,
)
from chakra.host.process_groups import PayloadError, infer_world_size, parse_pg_init
from chakra.io import gc_paused, load_json
from chakra.io.jsonio import iter_json_array, top_level_array

log = logging.getLogger(__name__)

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

# Node keys each parser consumes; any other key of a node goes into HostOp.attrs.
_FLAT_KEYS = frozenset({
    "name", "id", "rf_id", "parent", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema",
    "inputs", "input_shapes", "input_types", "input_strides",
    "outputs", "output_shapes", "output_types", "output_strides",
})
_CHAKRA_KEYS = frozenset({"id", "name", "ctrl_deps", "inputs", "outputs", "attrs"})

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


def _detect_layout(schema: Any, nodes: list[Any], path: str, warnings: list[str], *,
                   emit: bool = True) -> str:
    """The node layout of a file (see the module doc); warnings are appended to ``warnings`` and, with
    ``emit``, logged (the converter's lean loader logs them itself once it has kept the result)."""
    warn = _warn if emit else _append
    by_schema = schema_layout(schema)
    first = next((n for n in nodes if isinstance(n, dict)), None)
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


def _append(warnings: list[str], msg: str) -> None:
    warnings.append(msg)


def _parse_flat(nodes: list[Any], ops: list[HostOp], by_id: dict[int, HostOp]) -> None:
    keys = _FLAT_KEYS
    kind = _kind
    append = ops.append
    for index, n in enumerate(nodes):
        get = n.get
        nid = n["id"]
        name = n["name"]
        parent = get("parent", 0)
        inputs = get("inputs") or []
        if type(nid) is not int or type(name) is not str or type(parent) is not int:
            raise TypeError
        if type(inputs) is not list:
            raise TypeError
        # every other key is an attribute, in file order (ET+ adds a dozen to each GPU node)
        attrs = {k: v for k, v in n.items() if k not in keys} if len(n) > 16 or not n.keys() <= keys else {}
        op = HostOp(
            nid, name, parent,
            OP if (nid != 1 and name[:1] != "[" and name[:1] != "#") else kind(nid, name, parent),
            get("rf_id"), get("tid", 0), get("fw_parent", 0), get("seq_id", -1), get("scope", 0),
            get("fw_tid", 0), get("op_schema", ""),
            IOInfo(inputs, get("input_shapes") or [], get("input_types") or [],
                   get("input_strides")),
            IOInfo(get("outputs") or [], get("output_shapes") or [], get("output_types") or [],
                   get("output_strides")),
            attrs, {}, index,
        )
        append(op)
        by_id[nid] = op


def _parse_chakra(nodes: list[Any], ops: list[HostOp], by_id: dict[int, HostOp]) -> None:
    keys = _CHAKRA_KEYS
    kind = _kind
    append = ops.append
    for index, n in enumerate(nodes):
        get = n.get
        nid = n["id"]
        name = n["name"]
        parent = get("ctrl_deps", 0)
        if type(parent) is not int:
            parent = _coerce_parent(parent)
        if type(nid) is not int or type(name) is not str:
            raise TypeError
        rf_id = None
        tid = fw_parent = scope = fw_tid = 0
        seq_id = -1
        op_schema = ""
        attrs: dict[str, Any] = {}
        types: dict[str, str] = {}
        for a in get("attrs") or ():
            an = a["name"]
            v = a["value"]
            if an == "rf_id":
                rf_id = v
            elif an == "tid":
                tid = v
            elif an == "fw_parent":
                fw_parent = v
            elif an == "seq_id":
                seq_id = v
            elif an == "scope":
                scope = v
            elif an == "fw_tid":
                fw_tid = v
            elif an == "op_schema":
                op_schema = v
            else:
                attrs[an] = v
                t = a.get("type")
                if t is not None:
                    types[an] = t
        d = get("inputs")
        inputs = IOInfo(d["values"], d["shapes"], d["types"], d.get("strides")) if d is not None else IOInfo()
        d = get("outputs")
        outputs = (IOInfo(d["values"], d["shapes"], d["types"], d.get("strides"))
                   if d is not None else IOInfo())
        if len(n) > 6 or not n.keys() <= keys:
            extra = n.keys() - keys
            for k in n:  # file order
                if k in extra:
                    attrs[k] = n[k]
        k = OP if (nid != 1 and name[:1] != "[" and name[:1] != "#") else kind(nid, name, parent)
        op = HostOp(nid, name, parent, k, rf_id, tid, fw_parent, seq_id, scope,
                    fw_tid, op_schema, inputs, outputs, attrs, types, index)
        append(op)
        by_id[nid] = op


def _coerce_parent(p: Any) -> int:
    """Some writers emit ``ctrl_deps`` as a one-element list; None means no parent."""
    if p is None:
        return 0
    if isinstance(p, list) and all(type(x) is int for x in p):
        return p[0] if p else 0
    raise TypeError


def _diagnose(nodes: list[Any], layout: str, path: str) -> TraceFormatError:
    """Find the first malformed node after the fast parser failed; say what is wrong with it."""
    for index, n in enumerate(nodes):
        if not isinstance(n, dict):
            return TraceFormatError(
                f"node at index {index} is a {type(n).__name__}, expected an object", path)
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
    return TraceFormatError("malformed node (could not locate it)", path)


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


def no_nodes_message(data: Any) -> str:
    """Why a document without ``nodes`` is not a host ET; for a Kineto trace, the command that takes it."""
    if isinstance(data, dict) and "traceEvents" in data:
        return ("no 'nodes' list: this is a Kineto trace, not a host ET or ET+; link it first, alone if "
                "there is no host ET: chakra_trace_link --kineto-only --kineto-file KINETO --output-file ET+")
    return "no 'nodes' list: not a PyTorch host execution trace"


def build_host_trace(data: Any, path: str = "<memory>") -> HostTrace:
    """Build a HostTrace from already parsed JSON (the loader's work minus the file read)."""
    nodes = top_level_array(data, "nodes", no_nodes_message(data), path)
    schema = data.get("schema")
    warnings: list[str] = []
    layout = _detect_layout(schema, nodes, path, warnings)
    ops: list[HostOp] = []
    by_id: dict[int, HostOp] = {}
    try:
        (_parse_flat if layout == FLAT else _parse_chakra)(nodes, ops, by_id)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError):
        raise _diagnose(nodes, layout, path) from None
    if len(by_id) != len(ops):
        raise _duplicate_error(ops, path)
    return _make_trace(data, schema, layout, ops, by_id, warnings, path)


def _make_trace(data: dict[str, Any], schema: Any, layout: str, ops: list[HostOp], by_id: dict[int, HostOp],
                warnings: list[str], path: str) -> HostTrace:
    trace = HostTrace(
        path=path,
        schema=schema if isinstance(schema, str) else "",
        layout=layout,
        pid=_opt_int(data.get("pid")),
        time=data.get("time") if isinstance(data.get("time"), str) else None,
        start_ts=_opt_int(data.get("start_ts")),
        finish_ts=_opt_int(data.get("finish_ts")),
        ops=ops,
        by_id=by_id,
        extra={k: v for k, v in data.items() if k not in _TOP_KEYS},
        warnings=warnings,
    )
    trace.rank = _opt_int(data.get("rank"))
    trace.world_size = _opt_int(data.get("world_size"))
    _attach_process_groups(trace, data, path)
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
    elif isinstance(data.get("process_groups"), list):
        # An ET+ file written by our linker without the init node: its resolved table.
        try:
            trace.process_groups = parse_pg_init(data["process_groups"], trace.world_size)
        except PayloadError as exc:
            raise TraceFormatError(f"top-level process_groups: {exc}", path) from None
    if trace.world_size is None and trace.process_groups:
        trace.world_size = infer_world_size(trace.process_groups)


def load_host_et(path: str | os.PathLike[str]) -> HostTrace:
    """Load a host ET (``.json`` or gzip JSON, detected by magic bytes) into a HostTrace.

    Raises TraceFormatError naming the file (and node id) on: unreadable or
    non-JSON input, truncated gzip, missing ``nodes``, ``nodes`` not a list, a
    node without id or name, duplicate node ids, an unrecognisable layout, or a
    process-group payload that cannot be parsed.
    """
    spath = os.fspath(path)
    with gc_paused():
        # Large files: nodes parsed a few MB at a time, each chunk's dicts freed once its ops are built
        # (the parsed document of a million-node ET is about 2 GB on top of the model).  Anything
        # unexpected on that path falls back to the one-piece parse, so errors and results are exactly
        # those of build_host_trace.
        streamed = iter_json_array(spath, "nodes")
        if streamed is not None:
            try:
                return _build_streamed(streamed[0], streamed[1], spath)
            except Exception:  # noqa: BLE001 (see above: the one-piece path decides)
                pass
        data = load_json(spath)
        return build_host_trace(data, spath)


def _chunks_from(held: list[list[Any]], chunks: Iterator[list[Any]]) -> Iterator[list[Any]]:
    yield held.pop()
    yield from chunks


def _build_streamed(top: dict[str, Any], chunks: Iterator[list[Any]], path: str) -> HostTrace:
    first = next(chunks, [])
    schema = top.get("schema")
    warnings: list[str] = []
    layout = _detect_layout(schema, first, path, warnings)
    ops: list[HostOp] = []
    by_id: dict[int, HostOp] = {}
    held = [first]
    del first  # each chunk (its parsed dicts) is released once its ops are built
    (_parse_flat if layout == FLAT else _parse_chakra)(chain.from_iterable(_chunks_from(held, chunks)), ops,
                                                        by_id)
    if len(by_id) != len(ops):
        raise ValueError("duplicate ids")
    return _make_trace(top, schema, layout, ops, by_id, warnings, path)
