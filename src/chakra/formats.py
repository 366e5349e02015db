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


#: Node: id 1, name 2, type 3, ctrl_deps 4, data_deps 5 (both packed), start_time_micros 6, duration_micros 7,
#: inputs 8, outputs 9, attr 10 (0x08, 0x12, 0x18, 0x22, 0x2a, 0x30, 0x38, 0x42, 0x4a, 0x52)
(NODE_ID, NODE_NAME, NODE_TYPE, NODE_CTRL_DEPS, NODE_DATA_DEPS, NODE_START, NODE_DURATION, NODE_INPUTS,
 NODE_OUTPUTS, NODE_ATTR) = (_tag(number, wire) for number, wire in enumerate(
    (VARINT, LEN, VARINT, LEN, LEN, VARINT, VARINT, LEN, LEN, LEN), start=1))
#: AttributeProto: name 1 (0x0a), int64_val 9 (0x48)
ATTR_NAME, ATTR_INT64 = _tag(1, LEN), _tag(9, VARINT)
#: IOInfo: values 1, shapes 2, types 3 (0x0a, 0x12, 0x1a)
IO_VALUES, IO_SHAPES, IO_TYPES = _tag(1, LEN), _tag(2, LEN), _tag(3, LEN)
#: GlobalMetadata: version 1, attr 2 (0x0a, 0x12)
META_VERSION, META_ATTR = _tag(1, LEN), _tag(2, LEN)
#: field 1, length-delimited: in front of each frame of a length-delimited stream it makes the frames a
#: ``repeated <message> = 1`` field of a container message (chakra.io.pbstream, chakra.replay.reader)
REPEATED_1 = _tag(1, LEN)             # 0x0a

VARINT_MAX = 10          # bytes of the longest varint (a uint64)
U64_MAX = (1 << 64) - 1  # the largest uint64 field value
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1   # the int64 fields' range
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1   # the int32 fields' range

#: GlobalMetadata ``thread_timing``: the nodes carry the thread-timing attributes (chakra.convert.threads)
THREAD_TIMING = "pieces-1"
#: the attributes of a communication node, as the converter writes them (comm_type: a CollectiveCommType)
COMM_ATTRS = frozenset({"comm_type", "comm_size", "pg_name", "comm_priority", "comm_src", "comm_dst",
                        "comm_tag", "comm_seq", "is_cpu_op"})
#: the node attributes of the thread timing, as the converter writes them and the replay reads them
THREAD_TIMING_ATTRS = ("thread_depth", "work_before_us", "tail_us", "idle_before_us", "wait_on",
                       "wait_post_us", "frees_thread")


def attr_name_field(name: str) -> bytes:
    """``AttributeProto.name`` = ``name`` as encoded: the tag, a one-byte length, the name."""
    b = name.encode()
    assert len(b) < 0x80, name
    return ATTR_NAME + bytes((len(b),)) + b
