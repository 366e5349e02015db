"""Chakra protobuf schema bindings (see ``schema/protobuf/et_def.proto``)."""

from typing import Any

from chakra.schema import et_def_pb2
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
    GlobalMetadata,
    IOInfo,
    Node,
    Tensor,
)

#: each collective type by its name (lower case, words joined by ``_``)
COLLECTIVE_TYPES: dict[str, int] = {
    "all_reduce": ALL_REDUCE, "all_gather": ALL_GATHER, "reduce_scatter": REDUCE_SCATTER,
    "all_to_all": ALL_TO_ALL, "broadcast": BROADCAST, "reduce": REDUCE, "gather": GATHER, "scatter": SCATTER,
    "barrier": BARRIER,
}
#: each CollectiveCommType value -> its name (lower case)
COLLECTIVE_NAMES: dict[int, str] = {k: name.lower() for k, name in enumerate(et_def_pb2.COLLECTIVE_TYPES)}


def attr_value(attr: Any) -> Any:
    """The Python value of an AttributeProto, whichever oneof field is set (lists as lists, None if unset)."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    if which.endswith("_list"):
        return list(value.values)
    return value
