"""A minimal protobuf wire-format reader for Chakra ET files, written from the wire-format spec.

Used only by tests, to check our output the way another tool would read it:
without the generated bindings.  It knows the field numbers of docs/formats.md,
"Chakra protobuf ET", and nothing else.

Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# AttributeProto oneof members by field number (docs/formats.md, "Chakra protobuf ET").
ATTR_FIELDS = {
    3: "double_val", 4: "double_list", 5: "float_val", 6: "float_list", 7: "int32_val", 8: "int32_list",
    9: "int64_val", 10: "int64_list", 11: "uint32_val", 12: "uint32_list", 13: "uint64_val",
    14: "uint64_list", 15: "sint32_val", 16: "sint32_list", 17: "sint64_val", 18: "sint64_list",
    19: "fixed32_val", 20: "fixed32_list", 21: "fixed64_val", 22: "fixed64_list", 23: "sfixed32_val",
    24: "sfixed32_list", 25: "sfixed64_val", 26: "sfixed64_list", 27: "bool_val", 28: "bool_list",
    29: "string_val", 30: "string_list", 31: "bytes_val", 32: "bytes_list",
}


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """``(field number, wire type, raw value)`` for every field of one message."""
    out = []
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            v = buf[pos:pos + 8]
            pos += 8
        elif wt == 2:
            ln, pos = varint(buf, pos)
            v = buf[pos:pos + ln]
            if len(v) != ln:
                raise ValueError("truncated length-delimited field")
            pos += ln
        elif wt == 5:
            v = buf[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        out.append((num, wt, v))
    if pos != n:
        raise ValueError("message overruns its length")
    return out


def signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def packed_varints(wt: int, v: Any) -> list[int]:
    if wt == 0:
        return [v]
    out, pos = [], 0
    while pos < len(v):
        x, pos = varint(v, pos)
        out.append(x)
    return out


@dataclass
class Attr:
    name: str
    kind: str          # the oneof member that is set
    value: Any


@dataclass
class WireNode:
    id: int = 0
    name: str = ""
    type: int = 0
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Attr] = field(default_factory=dict)


def parse_attr(buf: bytes) -> Attr:
    name, kind, value = "", "", None
    for num, _wt, v in fields(buf):
        if num == 1:
            name = v.decode()
        elif num == 2:
            continue
        elif num in ATTR_FIELDS:
            kind = ATTR_FIELDS[num]
            if kind in ("string_val",):
                value = v.decode()
            elif kind == "bytes_val":
                value = bytes(v)
            elif kind == "bool_val":
                value = bool(v)
            elif kind == "double_val":
                value = struct.unpack("<d", v)[0]
            elif kind in ("int64_val", "int32_val"):
                value = signed64(v)
            elif kind in ("uint64_val", "uint32_val"):
                value = v
            elif kind.endswith("_list"):
                value = v  # raw list message; tests only look at scalar kinds
            else:
                value = v
    return Attr(name, kind, value)


def parse_io(buf: bytes) -> dict[str, str]:
    names = {1: "values", 2: "shapes", 3: "types"}
    return {names[num]: v.decode() for num, wt, v in fields(buf) if num in names}


def parse_node(buf: bytes) -> WireNode:
    node = WireNode()
    for num, wt, v in fields(buf):
        if num == 1:
            node.id = v
        elif num == 2:
            node.name = v.decode()
        elif num == 3:
            node.type = v
        elif num == 4:
            node.ctrl_deps.extend(packed_varints(wt, v))
        elif num == 5:
            node.data_deps.extend(packed_varints(wt, v))
        elif num == 6:
            node.start_time_micros = v
        elif num == 7:
            node.duration_micros = v
        elif num == 8:
            node.inputs = parse_io(v)
        elif num == 9:
            node.outputs = parse_io(v)
        elif num == 10:
            a = parse_attr(v)
            if a.name in node.attrs:
                raise ValueError(f"node {node.id}: attribute {a.name} twice")
            node.attrs[a.name] = a
    return node


def parse_metadata(buf: bytes) -> tuple[str, dict[str, Attr]]:
    version = ""
    attrs: dict[str, Attr] = {}
    for num, _wt, v in fields(buf):
        if num == 1:
            version = v.decode()
        elif num == 2:
            a = parse_attr(v)
            attrs[a.name] = a
    return version, attrs


def frames(data: bytes) -> list[bytes]:
    out = []
    pos = 0
    while pos < len(data):
        ln, pos = varint(data, pos)
        if ln == 0:
            raise ValueError("zero-length message (readers stop there)")
        out.append(data[pos:pos + ln])
        if len(out[-1]) != ln:
            raise ValueError("truncated message")
        pos += ln
    return out


def read_et(path: str | Path) -> tuple[str, dict[str, Attr], list[WireNode]]:
    """``(version, metadata attrs, nodes)`` of a Chakra ET file (gzip detected by magic)."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    msgs = frames(data)
    version, meta = parse_metadata(msgs[0])
    return version, meta, [parse_node(m) for m in msgs[1:]]
