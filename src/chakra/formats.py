"""The Chakra ET's format values that the generated bindings do not name: the wire tags of the fields that
the fast paths write and read as bytes; the names of the node attributes (``ATTR_*``) and GlobalMetadata
attributes (``META_*``) this toolkit writes or reads, and the values of GlobalMetadata attributes; the
fields of a process-group record (``GROUP_*``) (docs/formats.md).  The node and collective enums are the
generated ones (``chakra.schema``).  A host ET / ET+ node's keys are ``chakra.host.keys``.

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

# -- the names of a .et node's attributes (AttributeProto.name) -------------------------------------------
# Only here: an ET+ / host-ET JSON node's keys are chakra.host.keys, a process-group record's fields below.
#: bool: the node ran on a CPU thread (a COMP node without it, or False, is GPU work)
ATTR_IS_CPU_OP = "is_cpu_op"
#: int64: the operations a compute node stands for (ASTRA-sim's roofline; Text input)
ATTR_NUM_OPS = "num_ops"
#: uint64: the bytes a compute node touches (ASTRA-sim's roofline; Text input)
ATTR_TENSOR_SIZE = "tensor_size"
#: int64: a collective's kind, a ``CollectiveCommType`` value
ATTR_COMM_TYPE = "comm_type"
#: int32: the collective's priority (always 0)
ATTR_COMM_PRIORITY = "comm_priority"
#: int64: the bytes a communication node moves (a collective's max(input, output) bytes per rank)
ATTR_COMM_SIZE = "comm_size"
#: int64: the collective's sequence number in its process group (PyTorch's ``seq``), when recorded
ATTR_COMM_SEQ = "comm_seq"
#: int32: a receive's sender and a send's receiver (global ranks), and the message's tag
ATTR_COMM_SRC, ATTR_COMM_DST, ATTR_COMM_TAG = "comm_src", "comm_dst", "comm_tag"
#: string: the process group of a communication node (the key of GlobalMetadata ``process_groups``)
ATTR_PG_NAME = "pg_name"
#: int64: the size of that process group, as the trace recorded it
ATTR_PG_SIZE = "pg_size"
#: what a node no longer says as communication, kept for information: a collective the simulator does not
#: run, written as a COMP node (its name, kind, bytes, group), and what chakra.job.astrasim rewrote
ATTR_ORIG_COLLECTIVE, ATTR_ORIG_COMM_TYPE = "orig_collective", "orig_comm_type"
ATTR_ORIG_COMM_SIZE, ATTR_ORIG_PG_NAME = "orig_comm_size", "orig_pg_name"
#: string: "send" or "recv", a point-to-point node chakra.job.astrasim wrote as a COMP node
ATTR_ORIG_COMM_NODE = "orig_comm_node"
#: int64: the CPU thread (host op) or the stream (GPU op) the node ran on; int64: its GPU
ATTR_TID, ATTR_STREAM, ATTR_DEVICE = "tid", "stream", "device"
#: the host ET's own node fields, kept on a host op's node: rf_id, fw_parent (int64), seq_id, scope,
#: fw_tid (int64), op_schema (string)
(ATTR_RF_ID, ATTR_FW_PARENT, ATTR_SEQ_ID, ATTR_SCOPE, ATTR_FW_TID,
 ATTR_OP_SCHEMA) = "rf_id", "fw_parent", "seq_id", "scope", "fw_tid", "op_schema"
#: a node an ASTRA-sim experiment added for a piece of recorded time (chakra.replay.materialize): its kind
#: (string) and the id of the node it belongs to (int64)
ATTR_TIMING_PIECE, ATTR_TIMING_OF = "timing_piece", "timing_of"

#: int64: a host op's thread in the host ET, where it differs from the Kineto thread written as ``tid``
ATTR_HOST_TID = "host_tid"
#: a GPU op's Kineto category (string), correlation id and ``External id`` (int64)
ATTR_CAT, ATTR_CORRELATION, ATTR_EXTERNAL_ID = "cat", "correlation", "external_id"
#: string: why chakra.job.astrasim changed the node
ATTR_ASTRASIM_NOTE = "astrasim_note"
#: int64: the thread timing (meaning: chakra.convert.threads): the nesting depth on the thread, the
#: enclosing op's work before the node, the op's own time after its last child, the idle time before it,
#: the node it waited on and the time from that node's end, and whether a communication record lets its
#: thread go on (1)
(ATTR_THREAD_DEPTH, ATTR_WORK_BEFORE_US, ATTR_TAIL_US, ATTR_IDLE_BEFORE_US, ATTR_WAIT_ON, ATTR_WAIT_POST_US,
 ATTR_FREES_THREAD) = ("thread_depth", "work_before_us", "tail_us", "idle_before_us", "wait_on",
                       "wait_post_us", "frees_thread")

# -- the names of GlobalMetadata attributes that the toolkit reads back ---------------------------------
#: int64: the file's rank and the job's world size (-1: not known)
META_RANK, META_WORLD_SIZE = "rank", "world_size"
#: string: the process-group records as JSON text (their fields: GROUP_* below)
META_PROCESS_GROUPS = "process_groups"
#: double: the measured window (µs on the Kineto clock) and string: what it is ("span", "none", ...)
META_MEASURED_START_US, META_MEASURED_DUR_US = "measured_start_us", "measured_dur_us"
META_MEASURED_WINDOW = "measured_window"
#: string: the nodes carry the thread timing (THREAD_TIMING), or an experiment's pieces of time as nodes
META_THREAD_TIMING, META_EXPERIMENT_TIMING = "thread_timing", "experiment_timing"

#: GlobalMetadata ``thread_timing``: the nodes carry the thread-timing attributes (chakra.convert.threads)
THREAD_TIMING = "pieces-1"
#: the attributes of a communication node, as the converter writes them (comm_type: a CollectiveCommType)
COMM_ATTRS = frozenset({ATTR_COMM_TYPE, ATTR_COMM_SIZE, ATTR_PG_NAME, ATTR_COMM_PRIORITY, ATTR_COMM_SRC,
                        ATTR_COMM_DST, ATTR_COMM_TAG, ATTR_COMM_SEQ, ATTR_IS_CPU_OP})
#: the node attributes of the thread timing, as the converter writes them and the replay reads them
THREAD_TIMING_ATTRS = (ATTR_THREAD_DEPTH, ATTR_WORK_BEFORE_US, ATTR_TAIL_US, ATTR_IDLE_BEFORE_US,
                       ATTR_WAIT_ON, ATTR_WAIT_POST_US, ATTR_FREES_THREAD)


def attr_name_field(name: str) -> bytes:
    """``AttributeProto.name`` = ``name`` as encoded: the tag, a one-byte length, the name."""
    b = name.encode()
    assert len(b) < 0x80, name
    return ATTR_NAME + bytes((len(b),)) + b


# -- the fields of a process-group record ----------------------------------------------------------------
# One JSON object per group, in the host ET's ``distributed`` table, Kineto's ``distributedInfo.pg_config``,
# ET+ ``process_groups`` and a .et's GlobalMetadata ``process_groups`` (docs/formats.md).
#: the group's name (a .et communication node's ``pg_name`` names it; "0" is the world group)
GROUP_NAME = "pg_name"
#: what PyTorch calls the group (e.g. "default_pg")
GROUP_DESC = "pg_desc"
#: its global ranks (empty: the whole world)
GROUP_RANKS = "ranks"
#: the backends (e.g. "cpu:gloo,cuda:gloo")
GROUP_BACKEND = "backend_config"
#: its size as the host ET records it; Kineto's record calls it ``pg_size``
GROUP_SIZE, GROUP_PG_SIZE = "group_size", "pg_size"
#: how many groups of that kind the host ET recorded
GROUP_COUNT = "group_count"
