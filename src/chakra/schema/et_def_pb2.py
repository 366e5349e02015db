"""Python bindings for ``ChakraProtoMsg`` built at import time, without protoc.

Why not protoc output: generated ``*_pb2.py`` files are tied to the protobuf
runtime that generated them (newer gencode refuses older runtimes and the other
way round), which was the most reported installation failure of the original
toolkit.  Building the ``FileDescriptorProto`` from a small table here and asking
the runtime for message classes works on every protobuf runtime from 4.21 to the
newest.  ``tests/schema/test_schema.py`` proves that this table equals the descriptor
protoc produces from ``schema/protobuf/et_def.proto``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_PKG = "ChakraProtoMsg"
_FILE_NAME = "et_def.proto"

# (proto scalar name, FieldDescriptorProto type, list message name)
_SCALARS: list[tuple[str, int, str]] = [
    ("double", _F.TYPE_DOUBLE, "DoubleList"),
    ("float", _F.TYPE_FLOAT, "FloatList"),
    ("int32", _F.TYPE_INT32, "Int32List"),
    ("int64", _F.TYPE_INT64, "Int64List"),
    ("uint32", _F.TYPE_UINT32, "Uint32List"),
    ("uint64", _F.TYPE_UINT64, "Uint64List"),
    ("sint32", _F.TYPE_SINT32, "Sint32List"),
    ("sint64", _F.TYPE_SINT64, "Sint64List"),
    ("fixed32", _F.TYPE_FIXED32, "Fixed32List"),
    ("fixed64", _F.TYPE_FIXED64, "Fixed64List"),
    ("sfixed32", _F.TYPE_SFIXED32, "Sfixed32List"),
    ("sfixed64", _F.TYPE_SFIXED64, "Sfixed64List"),
    ("bool", _F.TYPE_BOOL, "BoolList"),
    ("string", _F.TYPE_STRING, "StringList"),
    ("bytes", _F.TYPE_BYTES, "BytesList"),
]

NODE_TYPES = [
    "INVALID_NODE",
    "METADATA_NODE",
    "MEM_LOAD_NODE",
    "MEM_STORE_NODE",
    "COMP_NODE",
    "COMM_SEND_NODE",
    "COMM_RECV_NODE",
    "COMM_COLL_NODE",
]
COLLECTIVE_TYPES = [
    "ALL_REDUCE",
    "REDUCE",
    "ALL_GATHER",
    "GATHER",
    "SCATTER",
    "BROADCAST",
    "ALL_TO_ALL",
    "REDUCE_SCATTER",
    "REDUCE_SCATTER_BLOCK",
    "BARRIER",
]


def _field(msg, name: str, number: int, ftype: int, *, repeated: bool = False,
           type_name: str = "", json_name: str = "", oneof: int | None = None) -> None:
    f = msg.field.add()
    f.name = name
    f.number = number
    f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    f.type = ftype
    if type_name:
        f.type_name = f".{_PKG}.{type_name}"
    f.json_name = json_name or _camel(name)
    if oneof is not None:
        f.oneof_index = oneof


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def build_file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The descriptor of et_def.proto, in the declaration order of the .proto file."""
    fd = descriptor_pb2.FileDescriptorProto(name=_FILE_NAME, package=_PKG, syntax="proto3")

    attr = fd.message_type.add(name="AttributeProto")
    _field(attr, "name", 1, _F.TYPE_STRING)
    _field(attr, "doc_string", 2, _F.TYPE_STRING)
    attr.oneof_decl.add(name="value")
    number = 3
    for scalar, ftype, list_name in _SCALARS:
        _field(attr, f"{scalar}_val", number, ftype, oneof=0)
        _field(attr, f"{scalar}_list", number + 1, _F.TYPE_MESSAGE, type_name=list_name, oneof=0)
        number += 2

    for _scalar, ftype, list_name in _SCALARS:
        lst = fd.message_type.add(name=list_name)
        _field(lst, "values", 1, ftype, repeated=True)

    for enum_name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COLLECTIVE_TYPES)):
        enum = fd.enum_type.add(name=enum_name)
        for i, v in enumerate(values):
            enum.value.add(name=v, number=i)

    gm = fd.message_type.add(name="GlobalMetadata")
    _field(gm, "version", 1, _F.TYPE_STRING)
    _field(gm, "attr", 2, _F.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")

    node = fd.message_type.add(name="Node")
    _field(node, "id", 1, _F.TYPE_UINT64)
    _field(node, "name", 2, _F.TYPE_STRING)
    _field(node, "type", 3, _F.TYPE_ENUM, type_name="NodeType")
    _field(node, "ctrl_deps", 4, _F.TYPE_UINT64, repeated=True)
    _field(node, "data_deps", 5, _F.TYPE_UINT64, repeated=True)
    _field(node, "start_time_micros", 6, _F.TYPE_UINT64)
    _field(node, "duration_micros", 7, _F.TYPE_UINT64)
    _field(node, "inputs", 8, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "outputs", 9, _F.TYPE_MESSAGE, type_name="IOInfo")
    _field(node, "attr", 10, _F.TYPE_MESSAGE, repeated=True, type_name="AttributeProto")

    io = fd.message_type.add(name="IOInfo")
    for i, n in enumerate(("values", "shapes", "types"), start=1):
        _field(io, n, i, _F.TYPE_STRING)

    tensor = fd.message_type.add(name="Tensor")
    for i, n in enumerate(("tensor_id", "storage_id", "offset", "num_elem", "elem_bytes"), start=1):
        _field(tensor, n, i, _F.TYPE_UINT64)
    _field(tensor, "device", 6, _F.TYPE_STRING)
    return fd


# A private pool: never collides with another copy of et_def.proto loaded by
# some other package into the default pool.
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(build_file_descriptor())
DESCRIPTOR = _POOL.FindFileByName(_FILE_NAME)


def _message_class(name: str) -> Any:
    """The message class ``name``: Any to a type checker, whose fields are made here at run time."""
    desc = _POOL.FindMessageTypeByName(f"{_PKG}.{name}")
    get = getattr(message_factory, "GetMessageClass", None)
    if get is not None:  # protobuf >= 4.22
        return get(desc)
    factory: Any = message_factory.MessageFactory(_POOL)   # (the newer runtime's stubs lack GetPrototype)
    return factory.GetPrototype(desc)  # protobuf 4.21


AttributeProto = _message_class("AttributeProto")
GlobalMetadata = _message_class("GlobalMetadata")
Node = _message_class("Node")
IOInfo = _message_class("IOInfo")
Tensor = _message_class("Tensor")
DoubleList = _message_class("DoubleList")
FloatList = _message_class("FloatList")
Int32List = _message_class("Int32List")
Int64List = _message_class("Int64List")
Uint32List = _message_class("Uint32List")
Uint64List = _message_class("Uint64List")
Sint32List = _message_class("Sint32List")
Sint64List = _message_class("Sint64List")
Fixed32List = _message_class("Fixed32List")
Fixed64List = _message_class("Fixed64List")
Sfixed32List = _message_class("Sfixed32List")
Sfixed64List = _message_class("Sfixed64List")
BoolList = _message_class("BoolList")
StringList = _message_class("StringList")
BytesList = _message_class("BytesList")

(INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE, COMM_SEND_NODE,
 COMM_RECV_NODE, COMM_COLL_NODE) = range(8)
(ALL_REDUCE, REDUCE, ALL_GATHER, GATHER, SCATTER, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER,
 REDUCE_SCATTER_BLOCK, BARRIER) = range(10)
