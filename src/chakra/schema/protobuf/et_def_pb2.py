"""``chakra.schema.protobuf.et_def_pb2``: the reference toolkit's import path for the protobuf bindings.

An alias, not a second copy: every message class and enum constant here *is* the one of
:mod:`chakra.schema.et_def_pb2` (``Node is chakra.schema.Node``), so messages made through either path mix
freely.  Generated ``*_pb2`` modules also expose each enum as a wrapper with ``Name``/``Value``/``keys``
(``NodeType.Name(4) == "COMP_NODE"``); those two are built here from the same descriptor.
"""

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from chakra.schema.et_def_pb2 import (  # noqa: F401
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    BARRIER,
    BROADCAST,
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    DESCRIPTOR,
    GATHER,
    INVALID_NODE,
    MEM_LOAD_NODE,
    MEM_STORE_NODE,
    METADATA_NODE,
    REDUCE,
    REDUCE_SCATTER,
    REDUCE_SCATTER_BLOCK,
    SCATTER,
    AttributeProto,
    BoolList,
    BytesList,
    DoubleList,
    Fixed32List,
    Fixed64List,
    FloatList,
    GlobalMetadata,
    Int32List,
    Int64List,
    IOInfo,
    Node,
    Sfixed32List,
    Sfixed64List,
    Sint32List,
    Sint64List,
    StringList,
    Tensor,
    Uint32List,
    Uint64List,
)

NodeType = EnumTypeWrapper(DESCRIPTOR.enum_types_by_name["NodeType"])
CollectiveCommType = EnumTypeWrapper(DESCRIPTOR.enum_types_by_name["CollectiveCommType"])
