"""AttributeProto construction with the exact value fields consumers read.

ASTRA-sim and Chakra's C++ feeder read each well-known attribute from one
oneof field; any other field reads as 0.  ``FIXED_FIELDS`` is that table
(docs/formats.md, "What consumers read": ASTRA-sim's and this toolkit's).  Every other
attribute follows the ET's declared type when there is one, else the Python
type of its value.
"""

from __future__ import annotations

from typing import Any

import orjson

from chakra import formats as wire
from chakra.formats import I32_MAX, I32_MIN, I64_MAX, I64_MIN, NODE_ATTR, U64_MAX
from chakra.io.pbstream import encode_varint
from chakra.schema import AttributeProto, attr_value  # noqa: F401  (re-exported for callers)

#: attribute name -> the one oneof field consumers read it from
FIXED_FIELDS: dict[str, str] = {
    wire.ATTR_IS_CPU_OP: "bool_val",
    wire.ATTR_NUM_OPS: "int64_val",
    wire.ATTR_TENSOR_SIZE: "uint64_val",
    wire.ATTR_COMM_TYPE: "int64_val",
    wire.ATTR_COMM_PRIORITY: "int32_val",
    wire.ATTR_COMM_SIZE: "int64_val",
    wire.ATTR_COMM_SEQ: "int64_val",
    wire.ATTR_COMM_SRC: "int32_val",
    wire.ATTR_COMM_DST: "int32_val",
    wire.ATTR_COMM_TAG: "int32_val",
    wire.ATTR_PG_NAME: "string_val",
    # this toolkit's own (docs/formats.md, "What consumers read"): host and GPU op attributes
    wire.ATTR_TID: "int64_val",
    wire.ATTR_RF_ID: "int64_val",
    wire.ATTR_STREAM: "int64_val",
    wire.ATTR_DEVICE: "int64_val",
}

#: ET attr type string -> oneof field
_ET_TYPE_FIELDS: dict[str, str] = {
    "uint64": "uint64_val",
    "int64": "int64_val",
    "int32": "int32_val",
    "uint32": "uint32_val",
    "int": "int64_val",
    "bool": "bool_val",
    "string": "string_val",
    "str": "string_val",
    "double": "double_val",
    "float": "double_val",
}


def _coerce(field: str, value: Any) -> Any:
    """Value converted for ``field``; raises ValueError/TypeError if it cannot be."""
    if field == "bool_val":
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes")
        return bool(value)
    if field == "string_val":
        if isinstance(value, str):
            return value
        return orjson.dumps(value).decode()
    if field == "double_val":
        return float(value)
    v = int(value)
    if field in ("int64_val", "sint64_val", "sfixed64_val"):
        if not I64_MIN <= v <= I64_MAX:
            raise ValueError("out of int64 range")
    elif field in ("int32_val", "sint32_val", "sfixed32_val"):
        if not I32_MIN <= v <= I32_MAX:
            raise ValueError("out of int32 range")
    elif field in ("uint64_val", "fixed64_val"):
        if not 0 <= v <= U64_MAX:
            raise ValueError("out of uint64 range")
    elif field in ("uint32_val", "fixed32_val"):
        if not 0 <= v < (1 << 32):
            raise ValueError("out of uint32 range")
    return v


def _field_of_value(value: Any) -> tuple[str, Any]:
    """(field, value) chosen by the Python type of ``value``."""
    t = type(value)
    if t is bool:
        return "bool_val", value
    if t is int:
        if I64_MIN <= value <= I64_MAX:
            return "int64_val", value
        if 0 <= value <= U64_MAX:
            return "uint64_val", value
        return "string_val", str(value)
    if t is float:
        return "double_val", value
    if t is str:
        return "string_val", value
    if t is list and value:
        if all(type(x) is int and I64_MIN <= x <= I64_MAX for x in value):
            return "int64_list", value
        if all(type(x) is str for x in value):
            return "string_list", value
        if all(type(x) in (int, float) and type(x) is not bool for x in value):
            return "double_list", [float(x) for x in value]
    return "string_val", orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def make_attr(name: str, value: Any, et_type: str | None = None) -> AttributeProto:
    """One AttributeProto; the field comes from FIXED_FIELDS, else the ET type, else the value's type."""
    field = FIXED_FIELDS.get(name)
    if field is None and et_type is not None:
        field = _ET_TYPE_FIELDS.get(et_type)
    if field is not None:
        try:
            v = _coerce(field, value)
        except (TypeError, ValueError):
            field, v = _field_of_value(value)
    else:
        field, v = _field_of_value(value)
    if field.endswith("_list"):
        a = AttributeProto(name=name)
        getattr(a, field).values.extend(v)
        return a
    return AttributeProto(name=name, **{field: v})


class AttrCache:
    """Shared AttributeProto instances for repeated (name, value) pairs.

    Building a protobuf message costs about a microsecond; most attributes of a
    trace repeat (``is_cpu_op``, ``scope``, ``tid``, ``op_schema`` ...).  A node
    copies the attributes it is given, so one cached instance serves them all.
    The cache stops growing at ``limit`` entries (unique values such as ids
    would only waste memory).
    """

    __slots__ = ("_d", "_f", "limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._d: dict[tuple[str, Any, Any, str | None], AttributeProto] = {}
        self._f: dict[tuple[str, Any, Any, str | None], bytes] = {}
        self.limit = limit

    def get(self, name: str, value: Any, et_type: str | None = None) -> AttributeProto:
        t = type(value)
        if t is not int and t is not str and t is not bool and t is not float:
            return make_attr(name, value, et_type)
        key = (name, t, value, et_type)
        a = self._d.get(key)
        if a is None:
            a = make_attr(name, value, et_type)
            if len(self._d) < self.limit:
                self._d[key] = a
        return a

    def framed(self, name: str, value: Any, et_type: str | None = None) -> bytes:
        """``get`` serialised as one ``Node.attr`` entry (tag, length, message): see :func:`frame_attr`."""
        t = type(value)
        if t is not int and t is not str and t is not bool and t is not float:
            return frame_attr(make_attr(name, value, et_type))
        key = (name, t, value, et_type)
        b = self._f.get(key)
        if b is None:
            b = frame_attr(make_attr(name, value, et_type))
            if len(self._f) < self.limit:
                self._f[key] = b
        return b


def frame_attr(a: AttributeProto) -> bytes:
    """The bytes ``a`` contributes to a serialised Node as one ``attr`` element."""
    body = a.SerializeToString()
    return NODE_ATTR + varint(len(body)) + body


#: base-128 varint of a non-negative int (one implementation: the stream writer's)
varint = encode_varint
