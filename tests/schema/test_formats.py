"""chakra.formats writes the wire tags by field number (it is imported where protobuf is not loaded): each
must be the key the generated bindings encode for its field."""

from __future__ import annotations

from chakra import formats
from chakra import schema as pb

# tag name -> (message, field, a value that the encoder writes)
_FIELDS = {
    "NODE_ID": (pb.Node, "id", 3),
    "NODE_NAME": (pb.Node, "name", "x"),
    "NODE_TYPE": (pb.Node, "type", pb.COMP_NODE),
    "NODE_CTRL_DEPS": (pb.Node, "ctrl_deps", [3]),
    "NODE_DATA_DEPS": (pb.Node, "data_deps", [3]),
    "NODE_START": (pb.Node, "start_time_micros", 3),
    "NODE_DURATION": (pb.Node, "duration_micros", 3),
    "NODE_INPUTS": (pb.Node, "inputs", pb.IOInfo(values="[]")),
    "NODE_OUTPUTS": (pb.Node, "outputs", pb.IOInfo(values="[]")),
    "NODE_ATTR": (pb.Node, "attr", [pb.AttributeProto(name="a")]),
    "ATTR_NAME": (pb.AttributeProto, "name", "x"),
    "ATTR_INT64": (pb.AttributeProto, "int64_val", 3),
    "IO_VALUES": (pb.IOInfo, "values", "x"),
    "IO_SHAPES": (pb.IOInfo, "shapes", "x"),
    "IO_TYPES": (pb.IOInfo, "types", "x"),
    "META_VERSION": (pb.GlobalMetadata, "version", "x"),
    "META_ATTR": (pb.GlobalMetadata, "attr", [pb.AttributeProto(name="a")]),
}


def _encoded_key(message, field, value) -> bytes:
    m = message()
    if isinstance(value, list):
        getattr(m, field).extend(value)
    elif hasattr(value, "SerializeToString"):
        getattr(m, field).CopyFrom(value)
    else:
        setattr(m, field, value)
    return m.SerializeToString()[:1]


def test_every_tag_is_the_key_the_bindings_write():
    got = {name: getattr(formats, name) for name in _FIELDS}
    assert got == {name: _encoded_key(*spec) for name, spec in _FIELDS.items()}
    assert got["NODE_ATTR"] == b"\x52" and got["ATTR_INT64"] == b"\x48" and got["NODE_INPUTS"] == b"\x42"


def test_an_attribute_name_field_is_the_prefix_of_the_encoded_attribute():
    a = pb.AttributeProto(name="rf_id", int64_val=7)
    assert a.SerializeToString().startswith(formats.attr_name_field("rf_id"))
    assert formats.attr_name_field("rf_id") == b"\x0a\x05rf_id"


def test_collective_names_follow_the_schema_enum():
    assert pb.COLLECTIVE_NAMES[pb.REDUCE_SCATTER_BLOCK] == "reduce_scatter_block"
    assert pb.COLLECTIVE_NAMES[pb.BARRIER] == "barrier"
    assert {pb.COLLECTIVE_NAMES[v]: v for v in pb.COLLECTIVE_TYPES.values()} == pb.COLLECTIVE_TYPES
