"""Serialised pieces of a ``Node``: its ``inputs`` / ``outputs`` IOInfo and its ``attr`` entries.

A Node message is written as the concatenation of a small protobuf-serialised head
(fields 1-7) and these pieces (fields 8, 9, 10, in number order, so the bytes are those
of the whole message serialised at once; see ``write.SerialNodes``).  The
pieces of an op depend on the op alone (plus, for a CPU op, whether it became a comm
node), so ``convert.columns`` builds them while the op is alive and keeps only the bytes.
The inputs/outputs IOInfo strings are the op's JSON text as loaded (``HostOp.io``), copied,
or for an op built from lists, the text orjson writes for them: the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from chakra import formats as wire
from chakra.convert.attrs import AttrCache, frame_attr, make_attr, varint
from chakra.formats import (
    ATTR_INT64,
    COMM_ATTRS,
    I64_MAX,
    I64_MIN,
    IO_SHAPES,
    IO_TYPES,
    IO_VALUES,
    NODE_ATTR,
    NODE_INPUTS,
    NODE_OUTPUTS,
    attr_name_field,
)
from chakra.host.keys import COLLECTIVE_NAME, COMM_SIZE, PG_NAME, TID
from chakra.host.model import HostOp, IOInfo
from chakra.tunables import ATTR_BLOCKS_CACHE_MAX, IO_TAILS_CACHE_MAX

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

# ET+ keys that are turned into node fields or dependencies, not copied as attributes.
CPU_SKIP = frozenset({"ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "inter_thread_dep",
                      "sync_dep"})
GPU_SKIP = CPU_SKIP | frozenset({"cat", "ph", "args", "pid", TID, "stream", "device", "parent",
                                 "ctrl_deps", PG_NAME, COLLECTIVE_NAME, COMM_SIZE})

_CPU_ENTRY_SKIP = CPU_SKIP | {wire.ATTR_IS_CPU_OP}
_GPU_ENTRY_SKIP = GPU_SKIP | COMM_ATTRS
IN_TAG, OUT_TAG = NODE_INPUTS, NODE_OUTPUTS
#: an IOInfo of three empty lists as the inputs / outputs field of a Node
EMPTY_IO = {tag: tag + b"\x0c" + IO_VALUES + b"\x02[]" + IO_SHAPES + b"\x02[]" + IO_TYPES + b"\x02[]"
            for tag in (IN_TAG, OUT_TAG)}


def dumps_any(v: Any) -> str:
    try:
        return orjson.dumps(v).decode()
    except TypeError:
        return json.dumps(v, default=str)


def int_attr(name_field: bytes, name: str, v: int) -> bytes:
    """``make_attr(name, v)`` as a Node.attr entry for an int ``v`` (``name_field``: the serialised name).

    In the int64 range this is ``int64_val`` (field 9), which both the fixed field of ``rf_id`` and the
    value-typed fields of the others choose; anything else takes the general path.
    """
    if 0 <= v <= I64_MAX:
        vb = varint(v)
    elif v == -1:   # (seq_id of most ops: the ten bytes made once)
        vb = _MINUS_ONE
    elif I64_MIN <= v < 0:
        vb = varint(v + (1 << 64))
    else:
        return frame_attr(make_attr(name, v))
    heads = _INT_HEADS.get(name_field)
    if heads is None:   # tag, length, name, int64_val tag: one per name and value length (1-10 bytes)
        heads = _INT_HEADS[name_field] = [b"".join((NODE_ATTR, varint(len(name_field) + 1 + k), name_field,
                                                    ATTR_INT64)) for k in range(11)]
    return heads[len(vb)] + vb


_INT_HEADS: dict[bytes, list[bytes]] = {}
_MINUS_ONE = varint((1 << 64) - 1)   # -1 as an int64 varint (two's complement, ten bytes)


def io_tail(shapes: bytes, types: bytes) -> bytes:
    """Fields 2 (shapes) and 3 (types) of a serialised IOInfo."""
    return b"".join((IO_SHAPES, varint(len(shapes)), shapes, IO_TYPES, varint(len(types)), types))


# the name fields, as encoded, of the host op's fields a CPU node carries and of a GPU node's Kineto ids
RF_NAME, _FP_NAME, _SQ_NAME, _SC_NAME, _FT_NAME, _CORR_NAME, _EXT_NAME = map(attr_name_field, (
    wire.ATTR_RF_ID, wire.ATTR_FW_PARENT, wire.ATTR_SEQ_ID, wire.ATTR_SCOPE, wire.ATTR_FW_TID,
    wire.ATTR_CORRELATION, wire.ATTR_EXTERNAL_ID))


class Serializer:
    """The per-conversion caches (values are pure functions of their keys) and the piece builders."""

    __slots__ = ("attr_cache", "blocks", "cpu_keys", "gpu_keys", "tails")

    def __init__(self) -> None:
        self.attr_cache = AttrCache()
        # runs of fixed attributes (values) -> their serialised Node.attr entries
        self.blocks: dict[tuple[Any, ...], bytes] = {}
        # attribute key tuple (+ skip flag) -> the keys copied as attributes, in order
        self.cpu_keys: dict[tuple[tuple[str, ...], bool], tuple[str, ...]] = {}
        self.gpu_keys: dict[tuple[str, ...], tuple[str, ...]] = {}
        # serialised (shapes, types) -> IOInfo fields 2 and 3
        self.tails: dict[tuple[bytes, bytes], bytes] = {}

    # -- inputs / outputs ------------------------------------------------------------------------------
    def io_text(self, tag: bytes, vb: bytes, sb: bytes, tb: bytes) -> bytes:
        """inputs (field 8) / outputs (field 9): IOInfo {values=1, shapes=2, types=3} of JSON texts
        (never empty, so all three are present); the shapes+types tail repeats, so it is cached."""
        tails = self.tails
        tail = tails.get((sb, tb))
        if tail is None:
            if len(tails) > IO_TAILS_CACHE_MAX:
                tails.clear()
            tail = tails[(sb, tb)] = io_tail(sb, tb)
        vn = varint(len(vb))
        return b"".join((tag, varint(1 + len(vn) + len(vb) + len(tail)), IO_VALUES, vn, vb, tail))

    def io_field(self, tag: bytes, v: Any, sh: Any, ty: Any) -> bytes:
        """:meth:`io_text` of lists (encoded by orjson, as the loader's text is)."""
        if not (v or sh or ty) and type(v) is list and type(sh) is list and type(ty) is list:
            return EMPTY_IO[tag]
        dumps = orjson.dumps
        try:
            vb, sb, tb = dumps(v), dumps(sh), dumps(ty)
        except TypeError:   # something orjson will not encode (e.g. a huge int): the slow path
            vb, sb, tb = dumps_any(v).encode(), dumps_any(sh).encode(), dumps_any(ty).encode()
        return self.io_text(tag, vb, sb, tb)

    def op_ios(self, op: HostOp) -> tuple[bytes, bytes]:
        """The op's inputs and outputs fields: from its loaded text, else from its lists."""
        io = op.io
        if io is None:
            return self.op_io(op.inputs, IN_TAG), self.op_io(op.outputs, OUT_TAG)
        return self.op_ios_text(io)

    def op_ios_text(self, io: tuple[bytes | None, ...]) -> tuple[bytes, bytes]:
        """The inputs and outputs fields of ``HostOp.io`` text."""
        text = self.io_text
        return text(IN_TAG, io[0], io[1], io[2]), text(OUT_TAG, io[4], io[5], io[6])  # type: ignore[arg-type]

    def op_io(self, io: IOInfo, tag: bytes) -> bytes:
        return self.io_field(tag, io.values, io.shapes, io.types)

    # -- attributes of a HostOp ------------------------------------------------------------------------
    def cpu_attrs(self, op: HostOp, cpu: bool, skip: bool) -> list[bytes]:
        cached = self.attr_cache.framed
        a = op.attrs
        out = [self.cpu_block(cpu, a.get("kineto_tid"), op.tid)]
        rf = op.rf_id
        if rf is not None:
            out.append(int_attr(RF_NAME, wire.ATTR_RF_ID, rf) if type(rf) is int else
                       frame_attr(make_attr(wire.ATTR_RF_ID, rf)))
        out.append(self.fixed_block(op.fw_parent, op.seq_id, op.scope, op.fw_tid, op.op_schema))
        if a:
            keys = tuple(a)
            kept = self.cpu_keys.get((keys, skip))
            if kept is None:
                kept = self.cpu_keys[(keys, skip)] = tuple(k for k in keys if not (
                    k in CPU_SKIP or k == wire.ATTR_IS_CPU_OP or (skip and k in COMM_ATTRS)))
            if kept:
                types = op.attr_types
                for k in kept:
                    out.append(cached(k, a[k], types.get(k)))
        return out

    def attr_entries(self, attrs: dict[str, Any], types: dict[str, str], gpu: bool) -> bytes:
        """The attribute entries of ``attrs`` (a node's attrs list entries, none of them an ET+ key) that a
        CPU / GPU node that is not a comm node writes, in order: what ``cpu_attrs`` / ``gpu_attrs`` add
        after their blocks (the converter's load caches them per distinct entries)."""
        cached = self.attr_cache.framed
        skip = _GPU_ENTRY_SKIP if gpu else _CPU_ENTRY_SKIP
        return b"".join([cached(k, v, types.get(k)) for k, v in attrs.items() if k not in skip])

    def cpu_block(self, cpu: bool, kt: Any, htid: Any) -> bytes:
        """is_cpu_op, tid (the Kineto tid when an int, else the host tid), [host_tid]: one cached block
        when the values are plain ints."""
        blocks = self.blocks
        if type(kt) is not int:
            kt = None
        key: tuple[Any, ...] | None = (cpu, kt, htid) if type(htid) is int else None
        b = blocks.get(key) if key is not None else None
        if b is None:
            cached = self.attr_cache.framed
            tid = kt if kt is not None else htid
            b = cached(wire.ATTR_IS_CPU_OP, cpu) + cached(wire.ATTR_TID, tid)
            if kt is not None and kt != htid:
                b += cached(wire.ATTR_HOST_TID, htid)
            if key is not None:
                _keep(blocks, key, b)
        return b

    def fixed_block(self, fp: Any, sq: Any, sc: Any, ft: Any, osc: Any) -> bytes:
        """fw_parent, seq_id, scope, fw_tid, op_schema.  fw_parent and seq_id are unique to many ops (no cache
        helps: int attributes without a protobuf message); scope, fw_tid and op_schema repeat, one cached
        block when the values are plain (a cache keyed by all five filled up with one-off blocks)."""
        if type(fp) is int and type(sq) is int and type(sc) is int and type(ft) is int and type(osc) is str:
            key = ("fixed", sc, ft, osc)
            blocks = self.blocks
            b = blocks.get(key)
            if b is None:
                b = int_attr(_SC_NAME, wire.ATTR_SCOPE, sc) + int_attr(_FT_NAME, wire.ATTR_FW_TID, ft) \
                    + self.attr_cache.framed(wire.ATTR_OP_SCHEMA, osc)
                _keep(blocks, key, b)
            return int_attr(_FP_NAME, wire.ATTR_FW_PARENT, fp) + int_attr(_SQ_NAME, wire.ATTR_SEQ_ID, sq) + b
        cached = self.attr_cache.framed
        return b"".join([int_attr(nf, name, v) if type(v) is int else cached(name, v)
                         for nf, name, v in ((_FP_NAME, wire.ATTR_FW_PARENT, fp),
                                             (_SQ_NAME, wire.ATTR_SEQ_ID, sq),
                                             (_SC_NAME, wire.ATTR_SCOPE, sc),
                                             (_FT_NAME, wire.ATTR_FW_TID, ft))]) \
            + cached(wire.ATTR_OP_SCHEMA, osc)

    def gpu_block(self, stream: Any, device: Any, cat: Any) -> bytes:
        stream = stream if type(stream) is int else 0
        if type(device) is not int:
            device = None
        if type(cat) is not str:
            cat = cat if isinstance(cat, str) else None
        # is_cpu_op, stream, [device], [cat]: one cached block
        key = ("gpu", stream, device, cat)
        blocks = self.blocks
        b = blocks.get(key)
        if b is None:
            cached = self.attr_cache.framed
            b = cached(wire.ATTR_IS_CPU_OP, False) + cached(wire.ATTR_STREAM, stream)
            if device is not None:
                b += cached(wire.ATTR_DEVICE, device)
            if cat is not None:
                b += cached("cat", cat)
            _keep(blocks, key, b)
        return b

    def gpu_attrs(self, op: HostOp) -> list[bytes]:
        cached = self.attr_cache.framed
        a = op.attrs
        args = a.get("args")
        if not isinstance(args, dict):
            args = {}
        stream = a.get("stream", args.get("stream", a.get(TID, op.tid)))
        device = a.get("device", args.get("device"))
        out = [self.gpu_block(stream, device, a.get("cat"))]
        kineto_ids(args, out)
        keys = tuple(a)
        kept = self.gpu_keys.get(keys)
        if kept is None:
            kept = self.gpu_keys[keys] = tuple(k for k in keys if k not in GPU_SKIP and k not in COMM_ATTRS)
        if kept:
            types = op.attr_types
            for k in kept:
                out.append(cached(k, a[k], types.get(k)))
        return out


def _keep(blocks: dict[tuple[Any, ...], bytes], key: tuple[Any, ...], b: bytes) -> None:
    """Cache a block; a full cache starts again (values unique to one op fill it: seq_id, fw_parent), so
    that the blocks that repeat stay cached at any size."""
    if len(blocks) >= ATTR_BLOCKS_CACHE_MAX:
        blocks.clear()
    blocks[key] = b


def kineto_ids(args: dict[str, Any], out: list[bytes]) -> None:
    """A GPU node's ``correlation`` and ``external_id`` attributes, from its Kineto args (ints only)."""
    v = args.get("correlation")
    if type(v) is int:
        out.append(int_attr(_CORR_NAME, wire.ATTR_CORRELATION, v))
    v = args.get("External id")
    if type(v) is int:
        out.append(int_attr(_EXT_NAME, wire.ATTR_EXTERNAL_ID, v))
