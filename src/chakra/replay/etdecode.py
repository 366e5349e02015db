"""The decoding of batches of Chakra ET frames into columns (:class:`EtColumns`), for
:mod:`chakra.replay.reader`.

Why it is fast: per node, Python does next to nothing; upb (C) decodes and the C loops of
``map``/``itertools`` build the columns.

* Each frame of a batch is followed by a *sentinel* node and the batch is decoded as ONE message whose
  ``node`` field is not repeated, so that the occurrences merge:

  - with the real ``Node`` (``FullMerged``): this validates the batch exactly as decoding each message
    would (on a failure the messages are decoded one by one, to name the first damaged one), and its
    unknown fields show an occurrence of a field with another wire type than declared;
  - with a lean node type whose fields are all ``repeated`` (``MergedBatch``): every field comes out as
    ONE flat list for the batch.  The sentinel holds each singular field's default value (0, "", an empty
    attribute), which a proto3 encoder never writes for a singular field, and in the dependencies the
    largest uint64 (:data:`DEP_SENTINEL`; a dependency on node 0 is written): a node's values are those
    before its sentinel, none when it has the default.  Splitting the lists there is C loops.

  This is exact when the batch has no unknown field, no node has a singular field twice and no real value
  is a default (all counted).  Otherwise (files a proto3 encoder does not write) the batch is re-encoded
  as a proto3 encoder writes it (:func:`_canonical`) and, where a dependency on node 2^64-1 or an empty
  attribute still hides a sentinel, split in halves: for one node the split is exact (its values are
  those before the last sentinel).  There is one way from frames to columns.
* Attributes come as raw bytes and are looked up in a cache (:class:`_Keys`): ``is_cpu_op: true`` or
  ``tid: 7`` are the same bytes on every node, so each is decoded once and gets one character; a node's
  attributes are then a short string, which a second cache maps to what they say (CPU side, lane, comm
  attributes, the per-node numbers of ``EXTRA_ATTRS``).  Bytes not in the cache are looked at where the
  dict misses them (``__missing__``, :meth:`ColumnBuilder.key_of`): one whose first name (``0A <len> name``)
  the replay does not read is skipped without decoding it, and cached while that name has had few values
  (``fw_parent: 0``); a name with ever new values (``rf_id``, ``correlation``) is then recognised by its
  encoded name alone.  A batch's skipped attributes are checked, in one search, for the encoded name of
  one the replay reads (a second name field, which would win): found, the batch is re-encoded.
  A name the replay reads whose values keep changing (``wait_on`` holds a node id; more than
  ``CacheSizes.values`` values) is not cached any more: its attributes are decoded where they occur, in bulk,
  all those of a batch concatenated into one message (``AttrAll``), so the cache never fills up.
"""

from __future__ import annotations

import operator
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain, compress, count, islice, repeat
from typing import Any, cast

from chakra import formats as wire
from chakra.errors import TraceFormatError
from chakra.job.etfile import int_or_none
from chakra.replay.graph import EXTRA_ATTRS, positions, scalar
from chakra.schema import METADATA_NODE, AttributeProto, attr_value
from chakra.tunables import READER_ATTR_STRINGS_MAX, READER_ATTRS_MAX, READER_SKIPS_MAX, READER_VALUES_MAX

# ---- the lean message types ------------------------------------------------------------------------------

_LEAN_PKG = "chakra_replay_lean"

# The sentinel node: every singular field holds its default value, written out explicitly (0, "", an
# empty attribute).  The encoder of a proto3 file never writes a default value of a singular field, so a
# 0 among a batch's ids (or an empty name, ...) is a sentinel.  The dependencies are repeated fields, in
# which an encoder writes every value, 0 too (a dependency on node 0, which every generated file and most
# converted ones have): their sentinel is the largest uint64 instead, which no node id of a real file
# is.  A file that does write a default (or has a dependency on that id, or an empty attribute) is seen
# by counting them, and its batch re-encoded (:func:`_canonical`) and, if need be, split: for one node,
# the last values are the sentinel's.
DEP_SENTINEL = wire.U64_MAX
_DEP_SENT = bytes((wire.VARINT_MAX,)) + b"\xff" * (wire.VARINT_MAX - 1) + b"\x01"   # packed: DEP_SENTINEL
_SENT_BODY = b"".join((wire.NODE_ID, b"\x00", wire.NODE_NAME, b"\x00", wire.NODE_TYPE, b"\x00",
                       wire.NODE_CTRL_DEPS, _DEP_SENT, wire.NODE_DATA_DEPS, _DEP_SENT,
                       wire.NODE_START, b"\x00", wire.NODE_DURATION, b"\x00", wire.NODE_ATTR, b"\x00"))
_SENT = bytes((len(_SENT_BODY),)) + _SENT_BODY
_SEP = wire.REPEATED_1 + _SENT + wire.REPEATED_1


def _lean_classes() -> tuple[Any, Any, Any, Any]:
    """(MergedBatch, FullMerged, AttrAll, NodeBatch) message classes, in a private descriptor pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from chakra.schema.et_def_pb2 import build_file_descriptor

    F = descriptor_pb2.FieldDescriptorProto
    full = build_file_descriptor()
    fd = descriptor_pb2.FileDescriptorProto(name="chakra_replay_lean.proto", package=_LEAN_PKG,
                                            syntax="proto3", dependency=[full.name])

    def add(msg: Any, name: str, number: int, ftype: int, type_name: str = "",
            repeated: bool = True) -> None:
        f = msg.field.add(name=name, number=number, type=ftype,
                          label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
        if type_name:
            f.type_name = type_name

    # every field the replay reads, repeated: the merged occurrences of all nodes of a batch, in order
    allf = fd.message_type.add(name="LeanNodeAll")
    add(allf, "id", 1, F.TYPE_UINT64)
    add(allf, "name", 2, F.TYPE_STRING)
    add(allf, "type", 3, F.TYPE_INT32)          # an open enum in proto3: the same integer
    add(allf, "ctrl_deps", 4, F.TYPE_UINT64)
    add(allf, "data_deps", 5, F.TYPE_UINT64)
    add(allf, "start_time_micros", 6, F.TYPE_UINT64)
    add(allf, "duration_micros", 7, F.TYPE_UINT64)
    add(allf, "attr", 10, F.TYPE_BYTES)
    add(fd.message_type.add(name="MergedBatch"), "node", 1, F.TYPE_MESSAGE, f".{_LEAN_PKG}.LeanNodeAll",
        repeated=False)
    # the real Node, merged over a batch: validates the batch in one call, and its unknown fields show
    # an occurrence of a field with another wire type than declared (which Node ignores, and the
    # all-repeated LeanNodeAll would not: a varint field sent length-delimited reads as packed values)
    add(fd.message_type.add(name="FullMerged"), "node", 1, F.TYPE_MESSAGE, ".ChakraProtoMsg.Node",
        repeated=False)
    # AttributeProto with every field repeated: attributes concatenated (each a whole message) merge into
    # one list per field
    # the real Node, repeated: a batch's messages one by one (re-encoded by :func:`_canonical`)
    add(fd.message_type.add(name="NodeBatch"), "node", 1, F.TYPE_MESSAGE, ".ChakraProtoMsg.Node")
    attr_all = fd.message_type.add(name="AttrAll")
    for f in next(m for m in full.message_type if m.name == "AttributeProto").field:
        add(attr_all, f.name, f.number, f.type, f.type_name)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(full)
    pool.Add(fd)

    def cls(name: str) -> Any:
        desc = pool.FindMessageTypeByName(f"{_LEAN_PKG}.{name}")
        get = getattr(message_factory, "GetMessageClass", None)
        if get is not None:
            return get(desc)
        factory: Any = message_factory.MessageFactory(pool)   # (the newer runtime's stubs lack GetPrototype)
        return factory.GetPrototype(desc)  # pragma: no cover - protobuf 4.21

    return cls("MergedBatch"), cls("FullMerged"), cls("AttrAll"), cls("NodeBatch")


_classes: tuple[Any, Any, Any, Any] | None = None


def _lean() -> tuple[Any, Any, Any, Any]:
    global _classes
    if _classes is None:
        _classes = _lean_classes()
    return _classes


def _merged(frames: list[bytes]) -> bytes:
    """The frames as one message of the merged types: each frame followed by the sentinel node."""
    return wire.REPEATED_1 + _SEP.join(frames) + wire.REPEATED_1 + _SENT


def _validated(first: int, frames: list[bytes], merged: bytes, path: Any) -> bool:
    """Check a batch of frames (message ``first`` on; ``merged``: as the merged reading joins them) as
    ``Node`` messages, in one decoding of them all merged: a damaged one raises the error
    :func:`chakra.io.pbstream.read_messages` gives for it.  True when some node has a field the lean
    reading would take otherwise (another wire type than declared) or does not know."""
    from google.protobuf.message import DecodeError

    try:
        check = _lean()[1].FromString(merged).node
    except (DecodeError, RuntimeError, ValueError):
        from chakra.io.pbstream import decode_varint
        from chakra.schema import Node

        for i, frame in enumerate(frames, first):      # the first damaged message, and why
            try:
                Node.FromString(frame[decode_varint(frame, 0)[1]:])
            except (DecodeError, RuntimeError, ValueError) as exc:
                raise TraceFormatError(f"message {i} is not a valid protobuf ({exc})", path) from None
        return True                  # (each alone is valid: read as re-encoded, one by one)
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet
    except ImportError:  # pragma: no cover - protobuf < 4.22: every batch re-encoded
        return True
    return len(UnknownFieldSet(check)) > 0


def _canonical(frames: list[bytes]) -> list[bytes]:
    """Valid frames as a proto3 encoder writes them: each field once, no default value, no unknown field,
    dependencies packed, each attribute's name once (the values the full ``Node`` reads, as the merged
    reading takes them).  A dependency on node :data:`DEP_SENTINEL` may still need the batch split."""
    from chakra.io.pbstream import encode_varint

    batch = _lean()[3].FromString(wire.REPEATED_1 + wire.REPEATED_1.join(frames))
    batch.DiscardUnknownFields()
    bodies = [node.SerializeToString() for node in batch.node]
    return [encode_varint(len(b)) + b for b in bodies]


# ---- what one attribute says -------------------------------------------------------------------------------

# attribute codes (the first item of an attribute's classification)
_SKIP, _IS_CPU, _TID, _STREAM, _DEVICE, _COMM, _EXTRA = range(7)
# (``timing_piece``: a node an ASTRA-sim experiment added for a piece of time, chakra.replay.materialize: a
# COMM node that is not communication)
_COMM_ATTRS = (wire.ATTR_PG_NAME, wire.ATTR_COMM_SRC, wire.ATTR_COMM_DST, wire.ATTR_COMM_TAG,
               wire.ATTR_COMM_SEQ, wire.ATTR_TIMING_PIECE)
_NAMES = {wire.ATTR_IS_CPU_OP: _IS_CPU, wire.ATTR_TID: _TID, wire.ATTR_STREAM: _STREAM,
          wire.ATTR_DEVICE: _DEVICE,
          **{name: _COMM for name in _COMM_ATTRS},
          **{name: _EXTRA for name in sorted(EXTRA_ATTRS)}}
# The name field of an attribute the replay reads, as encoded (tag 0x0A, a one-byte length, the name):
# every encoding of such an attribute holds it, so bytes without it are none of them.  (``fw_tid`` holds
# the bytes "tid", not "\x0a\x03tid".)  Matches never span two attributes joined with b"\xff".
_NEEDED = re.compile(b"|".join(re.escape(wire.attr_name_field(n)) for n in _NAMES))
_NAMES_B = {name.encode(): name for name in _NAMES}
# AttributeProto fields that hold one number (a name and one of them: decoded in bulk)
_NUMBER_FIELDS = frozenset(("double_val", "float_val", "int32_val", "int64_val", "uint32_val", "uint64_val",
                            "sint32_val"))
# key characters: the sentinel's attribute, an attribute the replay does not read, one decoded where
# it occurs; the cached attributes the replay reads have the characters from _FIRST_KEY on
_SENT_KEY, _SKIP_KEY, _DIRECT_KEY = "\x00", "\x01", "\x02"
_FIRST_KEY = 3
DEFER = ("defer",)        # lane marker: a non-CPU node without stream/device (maybe on a host thread)


def _classify(a: Any) -> tuple[int, Any, Any]:
    """(code, value, name) of one AttributeProto, as the replay reads it."""
    name = a.name
    code = _NAMES.get(name, _SKIP)
    if code == _SKIP:
        return (_SKIP, None, None)
    if code == _IS_CPU:
        return (code, bool(getattr(a, a.WhichOneof("value") or "bool_val")), name)
    if code == _COMM:
        return (code, attr_value(a), name)
    if code == _EXTRA:
        v = scalar(attr_value(a))
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return (_SKIP, None, None)
        return (code, v, name)
    return (code, scalar(getattr(a, a.WhichOneof("value") or "int64_val")), name)


def _classify_bytes(raw: bytes) -> tuple[int, Any, Any]:
    return _classify(AttributeProto.FromString(raw))


def _bulk_infos(raws: list[bytes]) -> list[tuple[int, Any, Any]]:
    """The classifications of attributes (of the names decoded where they occur), in one decoding when each
    holds a name and one number in the same field (checked: nothing else), else one by one.

    Every attribute is a whole, valid message (the batch was validated), so their concatenation decodes
    as each of them in turn, the values in order."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    m = _lean()[2].FromString(b"".join(raws))
    k = len(raws)
    fields = m.ListFields()
    if len(fields) == 2 and len(m.name) == k and not len(UnknownFieldSet(m)):
        fd, values = fields[1]
        if fd.name in _NUMBER_FIELDS and len(values) == k:
            names = list(map(sys.intern, m.name))
            return list(zip(map(_NAMES.__getitem__, names), values, names))
    return list(map(_classify_bytes, raws))


class _Keys(dict):
    """Attribute bytes -> key character (:class:`ColumnBuilder`), filled while a batch's keys are made:
    ``dict`` calls ``__missing__`` for an attribute not cached.  One of a name the replay does not read whose
    values keep changing (``rf_id``) is skipped right here, without decoding it (and listed in ``new_skips``,
    to be checked for a second name); any other goes to :meth:`ColumnBuilder.key_of`."""

    __slots__ = ("key_of", "volatile", "new_skips", "skip")

    def __init__(self, key_of: Any) -> None:
        super().__init__({b"": _SENT_KEY})
        self.key_of = key_of
        self.volatile: tuple[bytes, ...] = ()   # encoded names (tag, length, name) not read, no longer cached
        self.new_skips: list[bytes] = []         # this batch's attributes skipped by their first name
        self.skip = self.new_skips.append

    def __missing__(self, raw: bytes) -> str:
        if raw.startswith(self.volatile):
            self.skip(raw)
            return _SKIP_KEY
        return self.key_of(raw)


@dataclass(frozen=True)
class CacheSizes:
    """What the attribute caches of a reading hold.  The defaults suit any trace; smaller caches give the
    same columns, taking the uncached ways sooner (decoded where they occur; a full cache emptied)."""

    attrs: int = READER_ATTRS_MAX   # distinct attributes cached (at most READER_ATTRS_MAX)
    values: int = READER_VALUES_MAX   # distinct values cached per name; beyond: decoded where they occur


# ---- the columns -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class EtColumns:
    """The nodes of one ET file as parallel lists, in file order (index k: the file's message k + 1).

    Nothing is judged yet: ids may repeat, dependencies may point anywhere.  ``lanes`` holds the lane of
    each node (None: a METADATA node; ``DEFER``: decided by :func:`graph_from_columns`, see
    :mod:`chakra.replay.graph`).
    """

    path: str | None
    metadata: Any                                   # the GlobalMetadata message (None: none given)
    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    durs: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    deps: list[tuple[int, ...]] = field(default_factory=list)   # ctrl_deps then data_deps
    nctrl: list[int] = field(default_factory=list)              # how many of deps are ctrl_deps
    cpu: list[bool | None] = field(default_factory=list)        # is_cpu_op (None: no such attribute)
    lanes: list[Any] = field(default_factory=list)
    comm: dict[int, dict[str, Any]] = field(default_factory=dict)    # index -> comm attributes (name: value)
    # EXTRA_ATTRS: per node the (name, value) pairs of its cached attributes (tuples shared by the nodes
    # that have the same: None without any), and name -> {index: value} of those decoded where they occur
    # (see :meth:`extras`)
    xpairs: list[tuple | None] = field(default_factory=list)
    extra: dict[str, dict[int, Any]] = field(default_factory=dict)
    deferred: list[tuple[int, Any]] = field(default_factory=list)    # (index, tid) of the DEFER lanes
    host_tids: set[Any] = field(default_factory=set)            # tid of every CPU node, as read
    meta_payload: str | None = None                 # inputs.values of the first METADATA node that has one
    lane_cache: dict[Any, Any] = field(default_factory=dict)    # lane key -> lane tuple (shared tuples)

    def __len__(self) -> int:
        return len(self.ids)

    def extras(self) -> dict[str, dict[int, Any]]:
        """EXTRA_ATTRS: name -> {index: value}, every node's."""
        return extras_of(self.xpairs, self.extra)

    def copy(self) -> EtColumns:
        """Columns that :func:`graph_from_columns` may take over while these stay as they are."""
        return EtColumns(path=self.path, metadata=self.metadata, ids=list(self.ids), names=list(self.names),
                         types=list(self.types), durs=list(self.durs), starts=list(self.starts),
                         deps=list(self.deps), nctrl=list(self.nctrl), cpu=list(self.cpu),
                         lanes=list(self.lanes), comm=dict(self.comm), xpairs=list(self.xpairs),
                         extra={name: dict(d) for name, d in self.extra.items()},
                         deferred=list(self.deferred), host_tids=set(self.host_tids),
                         meta_payload=self.meta_payload, lane_cache=dict(self.lane_cache))


class ColumnBuilder:
    """Appends batches of frames to an :class:`EtColumns`, with the attribute caches."""

    def __init__(self, cols: EtColumns, sizes: CacheSizes | None = None) -> None:
        self.cols = cols
        self.sizes = sizes or CacheSizes()
        self.direct_names: set[str] = set()   # names decoded where they occur (their values keep changing)
        # the batch being keyed: the attributes decoded where they occur (bytes, or their classification);
        # a failure
        self.direct: list[Any] = []
        self.failed = False
        self.fdur = _Floats()                 # durations repeat: one float object per value
        self.clear()

    def clear(self) -> None:
        """Empty attribute caches (at the start, and when no key is left)."""
        # attribute bytes -> key (one character: chr(index in self.kinfo)); a node's keys -> node info.
        self.kcache = _Keys(self.key_of)
        self.kinfo: list[tuple[int, Any, Any]] = [(_SKIP, None, None)] * _FIRST_KEY
        self.ncache: dict[str, tuple] = {}
        self.values: dict[str, int] = {}      # attribute name -> distinct values cached
        self.skipped: dict[bytes, int] = {}   # name not read -> distinct values cached (as _SKIP_KEY)

    def release(self) -> None:
        """Once the columns are made: the key cache no longer calls back into this builder (a reference
        cycle, left to the cyclic GC otherwise, which a command's process runs without)."""
        self.kcache.key_of = None

    # -- what a node's attributes say ------------------------------------------------------------------

    def lane_of(self, is_cpu: Any, tid: Any, stream: Any, device: Any) -> Any:
        if is_cpu:
            key: Any = ("c", tid)
        elif stream is None and device is None:
            return DEFER
        else:
            key = ("g", device, stream if stream is not None else tid)
        cache = self.cols.lane_cache
        lane = cache.get(key)
        if lane is None:
            if is_cpu:
                lane = ("cpu", tid if type(tid) is int else (int_or_none(tid) or 0))
            else:
                lane = ("gpu", int_or_none(device) or 0, int_or_none(key[2]) or 0)
            for other in cache.values():   # equal lanes share one tuple
                if other == lane:
                    lane = other
                    break
            cache[key] = lane
        return lane

    def node_info(self, infos: Any) -> tuple[Any, Any, Any, dict | None, tuple | None]:
        """(is_cpu, lane, tid, comm attributes, extra (name, value) pairs) from a node's attribute
        classifications, in order (the last of a name wins); is_cpu None without an ``is_cpu_op``."""
        is_cpu = tid = stream = device = None
        comm = None
        extra: Any = None
        for code, value, name in infos:
            if code == _SKIP:
                continue
            if code == _IS_CPU:
                is_cpu = value
            elif code == _TID:
                tid = value
            elif code == _STREAM:
                stream = value
            elif code == _DEVICE:
                device = value
            elif code == _EXTRA:
                if extra is None:
                    extra = {}
                extra[name] = value
            else:
                if comm is None:
                    comm = {}
                comm[name] = value
        if is_cpu:
            self.cols.host_tids.add(tid)
        return (is_cpu, self.lane_of(is_cpu, tid, stream, device), tid, comm,
                tuple(extra.items()) if extra else None)

    def learn(self, raw: bytes, info: tuple[int, Any, Any]) -> bool:
        """Give one attribute's bytes a key; False when no key is left."""
        k = len(self.kinfo)
        if k >= min(self.sizes.attrs, READER_ATTRS_MAX):
            return False
        self.kcache[raw] = chr(k)
        self.kinfo.append(info)
        return True

    # -- a batch, merged -------------------------------------------------------------------------------

    def add_frames(self, first: int, frames: list[bytes], path: Any) -> None:
        """Append a batch of frames (message ``first`` on), validated: a damaged message raises the error
        :func:`chakra.io.pbstream.read_messages` gives for it.  A batch the merged reading cannot split
        exactly (a file a proto3 encoder does not write) is re-encoded as one would, and split in halves
        until it can (a single node always can)."""
        merged = _merged(frames)
        if not _validated(first, frames, merged, path) and self.add_batch(frames, merged):
            return
        parts = [_canonical(frames)]
        while parts:
            part = parts.pop()
            if not self.add_batch(part, _merged(part)):
                half = len(part) // 2 or 1      # (one node: once more, after a cache was emptied)
                parts += filter(None, (part[half:], part[:half]))

    def add_batch(self, frames: list[bytes], merged: bytes) -> bool:
        """Append the columns of a batch of valid frames (``merged``: joined with sentinels) whose lean
        reading is the full ``Node``'s; False (nothing appended) if the merged reading is not exact for
        it."""
        m = _lean()[0].FromString(merged).node
        n = len(frames)
        ids = _singular(list(m.id), n)
        types = _singular(list(m.type), n)
        starts = _singular(list(m.start_time_micros), n)
        durs = _singular(list(m.duration_micros), n)
        names = _singular(list(m.name), n)
        ctrl = _grouped(list(m.ctrl_deps), n)
        data = _grouped(list(m.data_deps), n)
        if ids is None or types is None or starts is None or durs is None or names is None \
                or ctrl is None or data is None:
            return False
        cols = self.cols
        base = len(cols.ids)
        # (the attributes straight from the message: each bytes object is dropped once looked up, unless
        # the cache keeps it)
        read = self.attr_infos(m.attr, n, base)
        del m
        if read is None:
            return False
        infos, direct = read
        cpu = list(map(_first, infos))
        lanes = list(map(_second, infos))
        if METADATA_NODE in types:
            for k in positions(types, METADATA_NODE):
                lanes[k] = None
                if cols.meta_payload is None:
                    self.read_payload(frames[k])
        if DEFER in lanes:
            cols.deferred += [(base + k, infos[k][2]) for k in positions(lanes, DEFER)]
        if any(map(_fourth, infos)):
            for k in compress(count(), map(_fourth, infos)):
                cols.comm[base + k] = infos[k][3]
        cols.xpairs += map(_fifth, infos)
        for index, code, name, value in direct:
            if code == _EXTRA:
                cols.extra.setdefault(name, {})[index] = value
            else:
                cols.comm[index] = {**cols.comm.get(index, {}), name: value}   # (cached dicts are shared)
        cols.ids += ids
        cols.types += types
        if any(starts):
            cols.starts += map(float, starts)
        else:               # (no recorded times, as in generated files: one float object for all)
            cols.starts += repeat(0.0, n)
        cols.durs += map(self.fdur.__getitem__, durs)
        cols.names += map(sys.intern, names)
        cols.deps += map(operator.add, ctrl, data)
        cols.nctrl += map(len, ctrl)
        cols.cpu += cpu
        cols.lanes += lanes
        return True

    def key_of(self, raw: bytes) -> str:
        """The key of an attribute not in the cache (caching it when it may repeat).

        An attribute whose (first) name the replay does not read is skipped without decoding it, and
        cached while its name has had few values (``fw_parent: 0`` repeats, ``rf_id`` does not); the
        batch's new ones are checked for the name of one it reads afterwards (a name written twice: the
        last one counts).  One of a name the replay reads is decoded and cached, or, for a name whose
        values keep changing (``wait_on`` holds a node id), decoded where it occurs, in bulk."""
        name_b = None
        if len(raw) > 1 and raw[0] == wire.ATTR_NAME[0] and raw[1] < 0x80:
            name_b = raw[2:2 + raw[1]]
            if name_b not in _NAMES_B:
                kcache = self.kcache
                kcache.new_skips.append(raw)
                seen = self.skipped.get(name_b, 0)
                if seen < READER_SKIPS_MAX:
                    self.skipped[name_b] = seen + 1
                    kcache[raw] = _SKIP_KEY
                else:
                    kcache.volatile += (raw[:2 + raw[1]],)
                return _SKIP_KEY
            if _NAMES_B[name_b] in self.direct_names:
                self.direct.append(raw)
                return _DIRECT_KEY
        info = _classify_bytes(raw)
        code, _, name = info
        if code == _SKIP:                # (a value the replay does not read, a foreign encoding)
            key_b = b"" if name_b is None else name_b
            seen = self.skipped.get(key_b, 0)
            if seen < self.sizes.values:
                self.skipped[key_b] = seen + 1
                self.kcache[raw] = _SKIP_KEY
            return _SKIP_KEY
        if code in (_EXTRA, _COMM):
            v = self.values.get(name, 0)
            if v >= self.sizes.values or not self.learn(raw, info):
                self.direct_names.add(name)
                self.direct.append(info)
                return _DIRECT_KEY
            self.values[name] = v + 1
        elif not self.learn(raw, info):
            self.failed = True           # a lane attribute left out would change the lanes: read again
            return _SKIP_KEY
        return self.kcache[raw]

    def attr_infos(self, attrs: Iterable[bytes], n: int, base: int) -> tuple[list[tuple], list[tuple]] | None:
        """(per node: :meth:`node_info`, [(node index, code, name, value) of the attributes decoded where
        they occur]) from a batch's merged attributes (a sentinel after each node's); None when the batch
        is to be read again (re-encoded: an attribute named twice; a cache full of lane values, emptied;
        a name cached and decoded where it occurs in one node, no longer cached)."""
        kcache = self.kcache
        new_skips = kcache.new_skips
        new_skips.clear()
        self.direct = []
        self.failed = False
        text = "".join(map(kcache.__getitem__, attrs))     # one character per attribute
        direct = self.direct
        if self.failed:
            self.clear()
            return None
        if new_skips and _NEEDED.search(b"\xff".join(new_skips)) is not None:
            for raw in new_skips:          # (an attribute named twice)
                kcache.pop(raw, None)
            new_skips.clear()
            return None
        new_skips.clear()
        if _SKIP_KEY in text:
            text = text.replace(_SKIP_KEY, "")
        # node k's keys: the k-th piece between sentinels (one node: all but the last, its sentinel's)
        if n == 1:
            pieces = [text[:-1], ""]
            keyed = [pieces[0].replace(_DIRECT_KEY, ""), ""]
        else:
            pieces = text.split(_SENT_KEY)
            if len(pieces) != n + 1:
                return None              # an empty attribute in the file: split
            keyed = text.replace(_DIRECT_KEY, "").split(_SENT_KEY) if direct else pieces
        ncache = self.ncache
        out: list[Any] = list(map(ncache.get, islice(keyed, n)))   # each node's info (None: made below)
        if None in out:
            kinfo = self.kinfo
            for k in positions(out, None):
                key = keyed[k]
                info = ncache.get(key)
                if info is None:
                    info = self.node_info([kinfo[ord(c)] for c in key])
                    if len(ncache) < READER_ATTR_STRINGS_MAX:
                        ncache[key] = info
                out[k] = info
        found_direct: list[tuple] = []
        if direct:
            raws = [x for x in direct if type(x) is bytes]
            if raws:
                decoded = iter(_bulk_infos(raws))
                direct = [next(decoded) if type(x) is bytes else x for x in direct]
            owners = chain.from_iterable(map(repeat, count(), map(operator.methodcaller("count", _DIRECT_KEY),
                                                                  pieces)))
            for k, (code, value, name) in zip(owners, direct):
                if code == _SKIP:        # (only names of _EXTRA or _COMM are decoded where they occur)
                    continue
                pairs = out[k][4] if code == _EXTRA else out[k][3]
                if pairs and name in (dict(pairs) if code == _EXTRA else pairs):
                    self.uncache(name)   # the name twice in one node, cached and not (which is last?)
                    return None
                found_direct.append((base + k, code, name, value))
        return out, found_direct

    def uncache(self, name: str) -> None:
        """Attributes of ``name`` are no longer cached (all decoded where they occur)."""
        kinfo = self.kinfo
        for raw, key in list(self.kcache.items()):
            if key >= chr(_FIRST_KEY) and kinfo[ord(key)][2] == name:
                del self.kcache[raw]

    def read_payload(self, frame: bytes) -> None:
        """The METADATA node's ``inputs.values`` (ASTRA-sim's process-group table), if any."""
        from chakra.io.pbstream import decode_varint
        from chakra.schema import Node

        _, start = decode_varint(frame, 0)
        values = Node.FromString(frame[start:]).inputs.values
        if values:
            self.cols.meta_payload = values


class _Floats(dict):
    """int -> float(int), each float made once."""

    def __missing__(self, key: int) -> float:
        if len(self) > 1 << 16:
            return float(key)
        value = self[key] = float(key)
        return value


def extras_of(xpairs: list[tuple | None], direct: dict[str, dict[int, Any]]) -> dict[str, dict[int, Any]]:
    """name -> {index: value} of the EXTRA_ATTRS: the nodes with the same pairs (cached attributes) at
    once, then those decoded where they occur (``direct``; never a name a node also has cached).

    Grouped by the pairs' identity, not equality: ``("tail_us", 0)`` equals ``("tail_us", 0.0)``."""
    groups: dict[int, list[int]] = {}
    kept: dict[int, tuple] = {}
    for k, pairs in zip(compress(count(), xpairs), filter(None, xpairs)):
        g = groups.get(id(pairs))
        if g is None:
            groups[id(pairs)] = [k]
            kept[id(pairs)] = pairs
        else:
            g.append(k)
    extra: dict[str, dict[int, Any]] = {}
    for key, where in groups.items():
        for name, value in kept[key]:
            d = extra.get(name)
            if d is None:
                d = extra[name] = {}
            d.update(zip(where, repeat(value)))
    for name, d in direct.items():
        if d:
            extra.setdefault(name, {}).update(d)
    return extra


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_fourth = operator.itemgetter(3)
_fifth = operator.itemgetter(4)


def _singular(values: list, n: int) -> list | None:
    """One value per node from a merged singular field (each node's occurrence if any, then the
    sentinel, a falsy default): the node's value or the default; None if some node has two occurrences
    or a real value is a default.  Exact for one node: its last occurrence (the last counts), if any."""
    if n == 1:
        return values[-2:-1] or values
    if len(values) == 2 * n:
        vals = values[0::2]
        if values.count(values[-1]) == n and not any(values[1::2]) and all(vals):
            return vals
        return None
    sentinel = values[-1]     # the last sentinel (0, "" or b"")
    if values.count(sentinel) != n:
        return None
    before = list(compress(chain((sentinel,), values), map(operator.not_, values)))
    if len(values) - n != n - before.count(sentinel):
        return None          # some node has two occurrences
    return before


def _grouped(values: list, n: int) -> list[tuple] | None:
    """A tuple per node from a merged repeated field (its values, then :data:`DEP_SENTINEL`); None if a
    value is the sentinel's (the node's: not told from a sentinel, but for one node)."""
    if n == 1:
        return [tuple(values[:-1])]
    if values.count(DEP_SENTINEL) != n:
        return None
    if len(values) == n:
        return [()] * n
    if len(values) == 2 * n and values[1::2].count(DEP_SENTINEL) == n:
        return list(zip(values[0::2]))         # one value per node
    is_sent = list(map(DEP_SENTINEL.__eq__, values))
    before = list(compress(chain((DEP_SENTINEL,), values), is_sent))
    if len(values) - n == n - before.count(DEP_SENTINEL):      # none or one value per node
        return list(map(_NO_DEP.get, before, zip(before)))
    pos = list(compress(count(), is_sent))
    firsts = chain((0,), map(operator.add, pos, repeat(1)))
    # (map cannot pick getitem's slice overload: a tuple's slice is a tuple)
    piece = cast(Callable[[tuple[Any, ...], slice], tuple[Any, ...]], operator.getitem)
    return list(map(piece, repeat(tuple(values)), map(slice, firsts, pos)))


_NO_DEP = {DEP_SENTINEL: ()}
