"""The Chakra ET's format values that the generated bindings do not name: the wire tags of the fields that
the fast paths write and read as bytes, the attribute names they encode, and the values of GlobalMetadata
attributes (docs/formats.md).  The node and collective enums are the generated ones (``chakra.schema``).

The field numbers are those of ``schema/protobuf/et_def.proto``; tests/schema/test_formats.py checks each
against the generated descriptor.  They are not read off it here because this module is imported by
``chakra.io`` and the linker, which do not load protobuf (80 ms).
"""

from __future__ import annotations

VARINT, LEN = 0, 2   # the two wire types the schema's fields use (repeated numbers are packed: LEN)


def _tag(number: int, wire: int) -> bytes:
    """The one-byte key of field ``number`` with wire type ``wire``."""
    assert 0 < number < 16, number
    return bytes(((number << 3) | wire,))


NODE_ID = _tag(1, VARINT)             # Node.id: 0x08
NODE_NAME = _tag(2, LEN)              # Node.name: 0x12
NODE_TYPE = _tag(3, VARINT)           # Node.type: 0x18
NODE_CTRL_DEPS = _tag(4, LEN)         # Node.ctrl_deps (packed): 0x22
NODE_DATA_DEPS = _tag(5, LEN)         # Node.data_deps (packed): 0x2a
NODE_START = _tag(6, VARINT)          # Node.start_time_micros: 0x30
NODE_DURATION = _tag(7, VARINT)       # Node.duration_micros: 0x38
NODE_INPUTS = _tag(8, LEN)            # Node.inputs: 0x42
NODE_OUTPUTS = _tag(9, LEN)           # Node.outputs: 0x4a
NODE_ATTR = _tag(10, LEN)             # Node.attr: 0x52
ATTR_NAME = _tag(1, LEN)              # AttributeProto.name: 0x0a
ATTR_INT64 = _tag(9, VARINT)          # AttributeProto.int64_val: 0x48
IO_VALUES = _tag(1, LEN)              # IOInfo.values: 0x0a
IO_SHAPES = _tag(2, LEN)              # IOInfo.shapes: 0x12
IO_TYPES = _tag(3, LEN)               # IOInfo.types: 0x1a
META_VERSION = _tag(1, LEN)           # GlobalMetadata.version: 0x0a
META_ATTR = _tag(2, LEN)              # GlobalMetadata.attr: 0x12
#: field 1, length-delimited: in front of each frame of a length-delimited stream it makes the frames a
#: ``repeated <message> = 1`` field of a container message (chakra.io.pbstream, chakra.replay.reader)
REPEATED_1 = _tag(1, LEN)             # 0x0a

VARINT_MAX = 10          # bytes of the longest varint (a uint64)
U64_MAX = (1 << 64) - 1  # the largest uint64 field value
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1   # the int64 fields' range
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1   # the int32 fields' range

#: GlobalMetadata ``thread_timing``: the nodes carry the thread-timing attributes (chakra.convert.threads)
THREAD_TIMING = "pieces-1"
#: the node attributes of the thread timing, as the converter writes them and the replay reads them
THREAD_TIMING_ATTRS = ("thread_depth", "work_before_us", "tail_us", "idle_before_us", "wait_on",
                       "wait_post_us", "frees_thread")


def attr_name_field(name: str) -> bytes:
    """``AttributeProto.name`` = ``name`` as encoded: the tag, a one-byte length, the name."""
    b = name.encode()
    assert len(b) < 0x80, name
    return ATTR_NAME + bytes((len(b),)) + b
