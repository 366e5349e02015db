"""Chakra protobuf ET <-> JSON, losslessly.

The JSON document is ``{"format": "chakra_et_json", "version": 1, "global_metadata": {...},
"nodes": [{...}, ...]}``; each message uses the protobuf JSON mapping with the
proto field names kept (``ctrl_deps``, ``int64_val``, ...), so the attribute value
field says exactly which oneof member was set, and 64-bit integers are strings
as that mapping prescribes (no precision lost in JSON readers).  Reading the
JSON back gives field-identical messages; serialising them gives the same
bytes whenever the original writer serialised canonically (as protobuf
libraries do).

Direction is chosen from the input's content: a JSON document (optionally
gzipped) is turned back into a protobuf ET, anything else is read as a
length-delimited protobuf stream.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import orjson

from chakra.errors import TraceFormatError, UsageError
from chakra.io import atomic_output, read_bytes, read_messages, write_messages
from chakra.schema import GlobalMetadata, Node

log = logging.getLogger(__name__)

FORMAT = "chakra_et_json"
VERSION = 1


@dataclass(slots=True)
class JsonizeReport:
    input_path: str
    output_path: str
    direction: str      # "et->json" or "json->et"
    nodes: int
    unknown_fields: int = 0


def message_to_dict(msg: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def node_to_dict(node: Node) -> dict[str, Any]:
    """One node; ``id``, ``name`` and ``type`` are always there.

    proto3's JSON mapping leaves out fields holding their default, so node 0 came out without its ``id``
    (and an INVALID_NODE without ``type``): a reader doing ``node["id"]`` failed on the very first node of
    many ETs.  The three are written whatever their value (as the mapping writes them: a 64-bit ``id`` is a
    string); reading them back sets the same defaults, so the protobuf bytes do not change.
    """
    d = message_to_dict(node)
    kind = Node.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number.get(node.type)
    head: dict[str, Any] = {"id": str(node.id), "name": node.name,
                            "type": kind.name if kind is not None else node.type}
    head.update(d)
    return head


def et_to_dict(meta: GlobalMetadata | None, nodes: list[Node]) -> dict[str, Any]:
    """The JSON document of a decoded ET."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "global_metadata": message_to_dict(meta) if meta is not None else None,
        "nodes": [node_to_dict(n) for n in nodes],
    }


def dict_to_et(doc: Any, path: str | os.PathLike[str] | None = None) -> tuple[GlobalMetadata, list[Node]]:
    """Messages from a JSON document made by :func:`et_to_dict` (a bare list of nodes is accepted too)."""
    from google.protobuf import json_format

    if isinstance(doc, list):
        doc = {"global_metadata": {}, "nodes": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise TraceFormatError("not a Chakra ET JSON document (expected an object with a 'nodes' list)", path)
    meta = GlobalMetadata()
    try:
        json_format.ParseDict(doc.get("global_metadata") or {}, meta)
    except json_format.ParseError as exc:
        raise TraceFormatError(f"global_metadata: {exc}", path) from None
    if not meta.ByteSize():
        # a zero-length first message would end the stream for every reader: give it the version
        meta.version = "0.0.4"
        log.warning("%s: no global_metadata; writing version 0.0.4", path)
    nodes = []
    for i, d in enumerate(doc["nodes"]):
        n = Node()
        try:
            json_format.ParseDict(d, n)
        except json_format.ParseError as exc:
            raise TraceFormatError(f"nodes[{i}]: {exc}", path) from None
        if not n.ByteSize():
            raise TraceFormatError(f"nodes[{i}] is empty (id 0, no fields): a zero-length message would end "
                                   "the stream for other readers", path)
        nodes.append(n)
    return meta, nodes


def _is_json(data: bytes) -> bool:
    head = data[:64].lstrip()
    return head[:1] in (b"{", b"[")


def _count_unknown(msgs: list[Any]) -> int:
    total = 0
    for m in msgs:
        try:
            from google.protobuf.unknown_fields import UnknownFieldSet

            total += len(UnknownFieldSet(m))
        except (ImportError, TypeError, AttributeError):  # older protobuf
            return 0
    return total


def _check_output_name(output_path: str | os.PathLike[str], to_et: bool) -> None:
    """Refuse a protobuf ET named .json and JSON named .et (the other direction was asked for by mistake)."""
    name = os.fspath(output_path)
    if name.endswith((".json", ".json.gz") if to_et else (".et", ".et.gz")):
        raise UsageError(f"{name}: the output is " + (
            "a protobuf ET (the input is JSON): give it a name that does not end in .json" if to_et else
            "JSON (the input is a protobuf ET): give it a name ending in .json (or .json.gz)"))


def jsonize_file(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str], *,
                 reverse: bool | None = None, indent: bool = True) -> JsonizeReport:
    """ET -> JSON, or (``reverse=True``, or a JSON input when ``reverse`` is None) JSON -> ET.

    A ``.gz`` output name gets gzip-compressed JSON.
    """
    data = read_bytes(input_path)
    if not data:
        raise TraceFormatError("file is empty", input_path)
    to_et = _is_json(data) if reverse is None else reverse
    if to_et:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(f"not valid JSON ({exc})", input_path) from None
        if isinstance(doc, dict) and "schema" in doc and "global_metadata" not in doc:
            raise TraceFormatError("a PyTorch host ET or ET+, not a Chakra ET written as JSON: convert it "
                                   "with chakra convert", input_path)
        meta, nodes = dict_to_et(doc, input_path)
        _check_output_name(output_path, to_et)
        write_messages(output_path, [meta, *nodes])
        return JsonizeReport(os.fspath(input_path), os.fspath(output_path), "json->et", len(nodes))
    meta, nodes = read_messages(input_path, GlobalMetadata, Node)
    _check_output_name(output_path, to_et)
    unknown = _count_unknown([meta, *nodes])
    if unknown:
        log.warning("%s: %d unknown protobuf field(s) are not representable in JSON and are dropped",
                    input_path, unknown)
    payload = orjson.dumps(et_to_dict(meta, nodes), option=orjson.OPT_INDENT_2 if indent else 0)
    if os.fspath(output_path).endswith(".gz"):
        import gzip

        payload = gzip.compress(payload, compresslevel=6, mtime=0)
    with atomic_output(output_path) as fh:
        fh.write(payload)
    return JsonizeReport(os.fspath(input_path), os.fspath(output_path), "et->json", len(nodes), unknown)
