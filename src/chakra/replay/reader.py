"""Read a Chakra ET file straight into the replay's columns, fast.

:func:`read_graph` gives, for a file, what :func:`chakra.replay.graph.graph_from_protobuf` gives for its
``Node`` messages (the same RankGraph, value for value, and the same errors), in about a third of the
time and memory.  Per node, Python does next to nothing: upb (C) decodes and the C loops of
``map``/``itertools`` build the columns.

* The file is read in chunks; its frames come in batches of a few thousand
  (:func:`chakra.io.pbstream.iter_frame_batches`).
* Each frame of a batch is followed by a *sentinel* node, and the batch is decoded as ONE message whose
  ``node`` field is not repeated, so that the occurrences merge:

  - with the real ``Node`` (``FullMerged``): this validates the batch exactly as decoding each message
    would (on a failure the batch is decoded message by message for the error message), and its unknown
    fields show an occurrence of a field with another wire type than declared;
  - with a lean node type whose fields are all ``repeated`` (``MergedBatch``): every field comes out as
    ONE flat list for the batch.  The sentinel holds each field's default value (0, "", an empty
    attribute), which a proto3 encoder never writes for a singular field: a node's values are those
    before its sentinel, none when it has the default.  Splitting the lists there is C loops.

  This is exact when the batch has no unknown field, no node has a singular field twice and no real
  value is a default (counted).  Otherwise the batch is read node by node (:meth:`_Reader.add_nodes`).
* Attributes come as raw bytes and are looked up in a cache: ``is_cpu_op: true`` or ``tid: 7`` are the
  same bytes on every node, so each is decoded once and gets one character; a node's attributes are
  then a short string, which a second cache maps to the node's (is_cpu, lane, ...).  An attribute whose
  bytes do not even contain the name of an attribute the replay reads (``rf_id``, ``correlation``: a new
  value on every node) cannot be one: that is checked once per batch, in bulk.
* A large plain file is read by two processes, each a part of it (see "two processes" below).
"""

from __future__ import annotations

import bisect
import operator
import os
import re
import sys
from itertools import accumulate, chain, compress, count, islice, repeat
from typing import Any

from chakra.errors import TraceFormatError
from chakra.replay.graph import (
    COMM_TYPES,
    EXTRA_ATTRS,
    CommInfo,
    RankGraph,
    _groups_from_metadata_node,
    _int_or_none,
    _scalar,
    extra_by_index,
    graph_for_metadata,
    parse_process_groups,
)
from chakra.schema import METADATA_NODE, AttributeProto, attr_value

_LEAN_PKG = "chakra_replay_lean"

# The sentinel node: every field holds its default value, written out explicitly (0, "", an empty
# attribute).  The encoder of a proto3 file never writes a default value of a singular field, so a 0
# among a batch's ids (or an empty name, ...) is a sentinel; a file that does write one (or has a
# dependency on node 0, or an empty attribute) is seen by counting them, and read node by node.
_SENT_BODY = (b"\x08\x00" b"\x12\x00" b"\x18\x00" b"\x22\x01\x00" b"\x2a\x01\x00" b"\x30\x00" b"\x38\x00"
              b"\x52\x00")
_SENT = bytes((len(_SENT_BODY),)) + _SENT_BODY
_SEP = b"\x0a" + _SENT + b"\x0a"


def _lean_classes() -> tuple[Any, ...]:
    """(LeanBatch, FullBatch, LeanNode, MergedBatch, FullMerged) classes, in a private descriptor pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from chakra.schema.et_def_pb2 import build_file_descriptor

    F = descriptor_pb2.FieldDescriptorProto
    full = build_file_descriptor()
    fd = descriptor_pb2.FileDescriptorProto(name="chakra_replay_lean.proto", package=_LEAN_PKG,
                                            syntax="proto3", dependency=[full.name])

    def add(msg: Any, name: str, number: int, ftype: int, repeated: bool = False,
            type_name: str = "") -> None:
        f = msg.field.add(name=name, number=number, type=ftype,
                          label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
        if type_name:
            f.type_name = type_name

    io = fd.message_type.add(name="LeanIO")
    add(io, "values", 1, F.TYPE_STRING)
    node = fd.message_type.add(name="LeanNode")
    add(node, "id", 1, F.TYPE_UINT64)
    add(node, "name", 2, F.TYPE_STRING)
    add(node, "type", 3, F.TYPE_INT32)          # an open enum in proto3: the same integer
    add(node, "ctrl_deps", 4, F.TYPE_UINT64, repeated=True)
    add(node, "data_deps", 5, F.TYPE_UINT64, repeated=True)
    add(node, "start_time_micros", 6, F.TYPE_UINT64)
    add(node, "duration_micros", 7, F.TYPE_UINT64)
    add(node, "inputs", 8, F.TYPE_MESSAGE, type_name=f".{_LEAN_PKG}.LeanIO")
    add(node, "attr", 10, F.TYPE_BYTES, repeated=True)
    add(fd.message_type.add(name="LeanBatch"), "nodes", 1, F.TYPE_MESSAGE, repeated=True,
        type_name=f".{_LEAN_PKG}.LeanNode")
    add(fd.message_type.add(name="FullBatch"), "nodes", 1, F.TYPE_MESSAGE, repeated=True,
        type_name=".ChakraProtoMsg.Node")
    # every field repeated: the merged occurrences of all nodes of a batch, in order
    allf = fd.message_type.add(name="LeanNodeAll")
    add(allf, "id", 1, F.TYPE_UINT64, repeated=True)
    add(allf, "name", 2, F.TYPE_STRING, repeated=True)
    add(allf, "type", 3, F.TYPE_INT32, repeated=True)
    add(allf, "ctrl_deps", 4, F.TYPE_UINT64, repeated=True)
    add(allf, "data_deps", 5, F.TYPE_UINT64, repeated=True)
    add(allf, "start_time_micros", 6, F.TYPE_UINT64, repeated=True)
    add(allf, "duration_micros", 7, F.TYPE_UINT64, repeated=True)
    add(allf, "attr", 10, F.TYPE_BYTES, repeated=True)
    add(fd.message_type.add(name="MergedBatch"), "node", 1, F.TYPE_MESSAGE,
        type_name=f".{_LEAN_PKG}.LeanNodeAll")
    # the real Node, merged over a batch: validates the batch in one call, and its unknown fields show
    # an occurrence of a field with another wire type than declared (which Node ignores, and the
    # all-repeated LeanNodeAll would not: a varint field sent length-delimited reads as packed values)
    add(fd.message_type.add(name="FullMerged"), "node", 1, F.TYPE_MESSAGE, type_name=".ChakraProtoMsg.Node")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(full)
    pool.Add(fd)

    def cls(name: str) -> Any:
        desc = pool.FindMessageTypeByName(f"{_LEAN_PKG}.{name}")
        get = getattr(message_factory, "GetMessageClass", None)
        if get is not None:
            return get(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)  # pragma: no cover - protobuf 4.21

    return cls("LeanBatch"), cls("FullBatch"), cls("LeanNode"), cls("MergedBatch"), cls("FullMerged")


_classes: tuple[Any, ...] | None = None

# Attribute codes (the first item of an attribute's cache entry)
_SKIP, _IS_CPU, _TID, _STREAM, _DEVICE, _COMM, _EXTRA = range(7)
_NAMES = {"is_cpu_op": _IS_CPU, "tid": _TID, "stream": _STREAM, "device": _DEVICE,
          "pg_name": _COMM, "comm_src": _COMM, "comm_dst": _COMM, "comm_tag": _COMM, "comm_seq": _COMM,
          **{name: _EXTRA for name in sorted(EXTRA_ATTRS)}}
# An attribute's name is in its bytes, literally: bytes without any of these names are none of them
# (no name contains a NUL byte, so a match never spans two attributes joined with one).
_MAYBE_NEEDED = re.compile(b"|".join(re.escape(n.encode()) for n in _NAMES)).search
_NAME_BYTES = tuple(n.encode() for n in _NAMES)
_ATTR_MAX = 0xD800         # distinct attributes cached (one character each, below the surrogates)
_NODE_MAX = 1 << 16        # distinct attribute tuples cached
_DEFER = ("defer",)        # lane marker: a non-CPU node without stream/device (maybe on a host thread)


def _classify(raw: bytes) -> tuple[int, Any, Any]:
    """(code, value, name) of one serialized AttributeProto, as graph_from_protobuf reads it."""
    a = AttributeProto.FromString(raw)
    name = a.name
    code = _NAMES.get(name, _SKIP)
    if code == _SKIP:
        return (_SKIP, None, None)
    if code == _IS_CPU:
        return (code, bool(getattr(a, a.WhichOneof("value") or "bool_val")), name)
    if code == _COMM:
        return (code, attr_value(a), name)
    if code == _EXTRA:
        v = _scalar(attr_value(a))
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return (_SKIP, None, None)
        return (code, v, name)
    return (code, _scalar(getattr(a, a.WhichOneof("value") or "int64_val")), name)


class _Reader:
    """The columns of one file being read, and the caches."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.names: list[str] = []
        self.types: list[int] = []
        self.durs: list[float] = []
        self.starts: list[float] = []
        self.deps: list[tuple[int, ...]] = []
        self.cpu: list[bool] = []
        self.lanes: list[Any] = []
        self.comm_raw: dict[int, dict[str, Any]] = {}
        self.extra: dict[str, dict[int, Any]] = {}   # EXTRA_ATTRS: name -> {node id: value}
        self.parents: set[int] = set()
        self.ctrl_parent: dict[int, int] = {}
        self.deferred: list[tuple[int, Any]] = []   # (index, tid) of _DEFER lanes
        self.meta_cpu_tids: set[Any] = set()
        self.meta_payload: str | None = None
        self.host_tids_raw: set[Any] = set()
        # attribute bytes -> key (one character: chr(index in self.kinfo)); a node's keys -> node info
        self.kcache: dict[bytes, str] = {}
        self.kinfo: list[tuple[int, Any, Any]] = []
        self.ncache: dict[str, tuple] = {}
        self.kcache[b""] = "\x00"    # the sentinel
        self.kinfo.append((_SKIP, None, None))
        self.warmup = 2
        self.lane_cache: dict[Any, Any] = {}
        self.fdur = _Floats()     # durations repeat: one float object per value

    # -- per node: what its attributes say ---------------------------------------------------------------

    def lane_of(self, is_cpu: bool, tid: Any, stream: Any, device: Any) -> Any:
        if is_cpu:
            key: Any = ("c", tid)
        elif stream is None and device is None:
            return _DEFER
        else:
            key = ("g", device, stream if stream is not None else tid)
        lane = self.lane_cache.get(key)
        if lane is None:
            if is_cpu:
                lane = ("cpu", tid if type(tid) is int else (_int_or_none(tid) or 0))
            else:
                lane = ("gpu", _int_or_none(device) or 0, _int_or_none(key[2]) or 0)
            for other in self.lane_cache.values():   # equal lanes share one tuple
                if other == lane:
                    lane = other
                    break
            self.lane_cache[key] = lane
        return lane

    def node_info(self, infos: Any) -> tuple[bool, Any, Any, dict | None, tuple | None]:
        """(is_cpu, lane, tid, comm attrs, extra (name, value) pairs) from a node's attribute entries,
        in order (the last wins)."""
        is_cpu = False
        tid = stream = device = None
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
            self.host_tids_raw.add(tid)
        return (is_cpu, self.lane_of(is_cpu, tid, stream, device), tid, comm,
                tuple(extra.items()) if extra else None)

    def add_extra(self, nid: int, pairs: tuple) -> None:
        extra = self.extra
        for name, value in pairs:
            d = extra.get(name)
            if d is None:
                d = extra[name] = {}
            d[nid] = value

    def learn(self, raw: bytes) -> bool:
        """Give one attribute's bytes a key; False when no key is left."""
        if raw in self.kcache:
            return True
        k = len(self.kinfo)
        if k >= _ATTR_MAX:
            return False
        self.kcache[raw] = chr(k)
        self.kinfo.append(_classify(raw))
        return True

    # -- a batch -------------------------------------------------------------------------------------------

    def add_batch(self, frames: list[bytes], classes: tuple[Any, ...]) -> bool:
        """Validate a batch of frames and append its columns; False if it must be read node by node
        (that reading then reports the error of a damaged message)."""
        try:
            from google.protobuf.unknown_fields import UnknownFieldSet
        except ImportError:  # pragma: no cover - protobuf < 4.22: node by node
            return False
        _, _, LeanNode, MergedBatch, FullMerged = classes
        merged = b"\x0a" + _SEP.join(frames) + b"\x0a" + _SENT
        try:
            check = FullMerged.FromString(merged).node
        except Exception:  # noqa: BLE001 - the node-by-node reading says which message and why
            return False
        if len(UnknownFieldSet(check)):
            return False
        del check
        m = MergedBatch.FromString(merged).node
        del merged
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
        attrs = list(m.attr)
        del m
        infos = self.attr_infos(attrs, n)
        del attrs
        if infos is None:
            return False
        base = len(self.ids)
        cpu = list(map(_first, infos))
        lanes = list(map(_second, infos))
        # the node-by-node reader's side tables
        sel = list(map(operator.and_, cpu, map(bool, ctrl)))
        if any(sel):
            chosen = list(compress(ctrl, sel))
            self.ctrl_parent.update(zip(compress(ids, sel), map(_first, chosen)))
            self.parents.update(chain.from_iterable(chosen))
        if METADATA_NODE in types:
            k = -1
            while True:
                try:
                    k = types.index(METADATA_NODE, k + 1)
                except ValueError:
                    break
                lanes[k] = None
                if cpu[k]:
                    self.meta_cpu_tids.add(infos[k][2])
                if self.meta_payload is None:
                    frame = frames[k]
                    _, start = _decode_varint(frame, 0)
                    v = LeanNode.FromString(frame[start:]).inputs.values
                    if v:
                        self.meta_payload = v
        if _DEFER in lanes:
            k = -1
            while True:
                try:
                    k = lanes.index(_DEFER, k + 1)
                except ValueError:
                    break
                self.deferred.append((base + k, infos[k][2]))
        if any(map(_fourth, infos)):
            for k in compress(count(), map(_fourth, infos)):
                self.comm_raw[base + k] = infos[k][3]
        if any(map(_fifth, infos)):
            for k in compress(count(), map(_fifth, infos)):
                self.add_extra(ids[k], infos[k][4])
        self.ids += ids
        self.types += types
        self.starts += map(float, starts)
        self.durs += map(self.fdur.__getitem__, durs)
        self.names += map(sys.intern, names)
        self.deps += map(operator.add, ctrl, data)
        self.cpu += cpu
        self.lanes += lanes
        return True

    def attr_infos(self, attrs: list[bytes], n: int) -> list[tuple] | None:
        """Per node (is_cpu, lane, tid, comm) from the batch's (validated) merged attributes, a sentinel
        after each node's; None when the batch is to be read node by node.

        Each cached attribute is one character: a node's attributes are a short string."""
        kcache = self.kcache
        keys = list(map(kcache.get, attrs, repeat("")))
        text = "".join(keys)
        if len(text) != len(attrs):
            unknown = list(compress(attrs, map(operator.not_, keys)))
            joined = b"\x00".join(unknown)
            if any(map(joined.__contains__, _NAME_BYTES)):
                maybe = _MAYBE_NEEDED
                for raw in unknown:
                    if maybe(raw) is not None and not self.learn(raw):
                        return None
                relearn = True
            else:
                relearn = False
            if self.warmup and len(unknown) > n:
                # attributes the replay does not read that repeat (``fw_parent: 0``): cached too, so
                # that only the ones with a new value on every node are left to check
                self.warmup -= 1
                seen: set[bytes] = set()
                for raw in unknown:
                    if raw in seen:
                        if not self.learn(raw):
                            break
                        relearn = True
                    else:
                        seen.add(raw)
            if relearn:
                keys = list(map(kcache.get, attrs, repeat("")))
                text = "".join(keys)
        del keys
        parts = text.split("\x00")      # the sentinel (b"", the only attribute keyed "\x00") ends a node
        if len(parts) != n + 1:
            return None                  # an empty attribute in the file
        ncache = self.ncache
        out = list(map(ncache.get, islice(parts, n)))
        if None in out:
            kinfo = self.kinfo
            k = -1
            while True:
                try:
                    k = out.index(None, k + 1)
                except ValueError:
                    break
                key = parts[k]
                info = ncache.get(key)
                if info is None:
                    info = self.node_info([kinfo[ord(c)] for c in key])
                    if len(ncache) < _NODE_MAX:
                        ncache[key] = info
                out[k] = info
        return out

    def add_nodes(self, nodes: Any) -> None:
        """Append decoded LeanNode messages one by one (a batch the merged reading does not cover)."""
        kcache, kinfo = self.kcache, self.kinfo
        for n in nodes:
            infos = []
            for raw in n.attr:
                k = kcache.get(raw)
                if k is None:
                    if _MAYBE_NEEDED(raw) is None:
                        continue
                    if not self.learn(raw):
                        infos.append(_classify(raw))
                        continue
                    k = kcache[raw]
                infos.append(kinfo[ord(k)])
            is_cpu, lane, tid, comm, extra = self.node_info(infos)
            index = len(self.ids)
            nid = n.id
            if extra:
                self.add_extra(nid, extra)
            ntype = n.type
            cd = tuple(n.ctrl_deps)
            dd = tuple(n.data_deps)
            if is_cpu and cd:
                self.parents.update(cd)
                self.ctrl_parent[nid] = cd[0]
            if ntype == METADATA_NODE:
                lane = None
                if is_cpu:
                    self.meta_cpu_tids.add(tid)
                if self.meta_payload is None and n.inputs.values:
                    self.meta_payload = n.inputs.values
            elif lane is _DEFER:
                self.deferred.append((index, tid))
            if comm is not None:
                self.comm_raw[index] = comm
            self.ids.append(nid)
            self.names.append(sys.intern(n.name))
            self.types.append(ntype)
            self.durs.append(float(n.duration_micros))
            self.starts.append(float(n.start_time_micros))
            self.deps.append(cd + dd if dd else cd)
            self.cpu.append(is_cpu)
            self.lanes.append(lane)


class _Floats(dict):
    """int -> float(int), each float made once."""

    def __missing__(self, key: int) -> float:
        if len(self) > 1 << 16:
            return float(key)
        value = self[key] = float(key)
        return value


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_fourth = operator.itemgetter(3)
_fifth = operator.itemgetter(4)


def _decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    from chakra.io.pbstream import decode_varint

    return decode_varint(buf, pos)


def _singular(values: list, n: int) -> list | None:
    """One value per node from a merged singular field (each node's occurrence if any, then the
    sentinel, a falsy default): the node's value or the default; None if some node has two occurrences
    or a real value is a default."""
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
    """A tuple per node from a merged repeated field (its values, then a sentinel 0)."""
    if values.count(0) != n:
        return None
    if len(values) == 2 * n and not any(values[1::2]):
        return list(zip(values[0::2]))         # one value per node
    if len(values) == n:
        return [()] * n
    is_sent = list(map(operator.not_, values))
    before = list(compress(chain((0,), values), is_sent))
    if len(values) - n == n - before.count(0):      # none or one value per node
        return list(map(_NO_DEP.get, before, zip(before)))
    pos = list(compress(count(), is_sent))
    firsts = chain((0,), map(operator.add, pos, repeat(1)))
    return list(map(operator.getitem, repeat(tuple(values)), map(slice, firsts, pos)))


_NO_DEP = {0: ()}


# Reading a large file in two processes (see read_graph)
PARALLEL_MIN_BYTES = 4 << 20     # smaller files are read here alone (at 4 MB two processes take 2/3 the time)
PARALLEL_MAX_RSS = 256 << 20     # nor when this process is large already: the pages a child shares with it
                                 # would count twice in the memory of the process tree
_SHARE = 0.515                   # of the node bytes, read by this process (the rest by the child, which
                                 # also pickles them)


def read_graph(path: str | os.PathLike[str], rank: int | None = None) -> RankGraph:
    """The RankGraph of one Chakra ET file (plain or gzipped); what ``graph_from_protobuf`` gives for the
    messages of that file, with the errors ``load_graph`` always gave.

    A large plain file is read by two processes when a second core is free (:func:`_read_parallel`); the
    result is the same, and anything unexpected (an error in the file, no child) falls back to reading it
    here alone, which then says what is wrong."""
    global _classes
    if _classes is None:
        _classes = _lean_classes()
    plan = _parallel_plan(path)
    if plan is not None:
        g = _read_parallel(path, rank, *plan)
        if g is not None:
            return g
    return _read_sequential(path, rank)


def _read_sequential(path: str | os.PathLike[str], rank: int | None) -> RankGraph:
    from chakra.io.pbstream import batch_container, iter_frame_batches, parse_batch
    from chakra.schema import GlobalMetadata, Node

    assert _classes is not None
    FullBatch = _classes[1]
    metadata, batches = iter_frame_batches(path, GlobalMetadata)
    where = os.fspath(path)
    rd = _Reader()
    g = None
    for first, frames in batches:
        if g is None:
            # as before: message 1 is decoded before the GlobalMetadata is read, the rest after it
            parse_batch(batch_container(frames[:1]), first, FullBatch, Node, path)
            g = _graph_head(metadata, rank, path)
        _add_frames(rd, first, frames, path)
    if g is None:
        raise TraceFormatError("no nodes after the GlobalMetadata (a trace cut short?)", path)
    return _finish(g, rd, where)


def _add_frames(rd: _Reader, first: int, frames: list[bytes], path: Any) -> None:
    """Append the nodes of a batch of frames (message ``first`` on) to the columns, or raise the error of
    the first damaged one."""
    from chakra.io.pbstream import batch_container, batch_frames, parse_batch
    from chakra.schema import Node

    assert _classes is not None
    if rd.add_batch(frames, _classes):
        return
    LeanBatch, FullBatch, LeanNode = _classes[:3]
    container = batch_container(frames)
    lean = None
    if parse_batch(container, first, FullBatch, Node, path) is not None:
        try:
            lean = LeanBatch.FromString(container).nodes
        except Exception:  # noqa: BLE001 - decoded message by message below
            lean = None
    if lean is None:
        lean = [LeanNode.FromString(f) for f in batch_frames(container)]
    rd.add_nodes(lean)


# ---- two processes ----------------------------------------------------------------------------------------
#
# The frames of a file are cheap to find (a length varint each); decoding them is the work.  A byte
# position ``stop`` divides the node messages: those that start before it are read here, the others by a
# forked child (chakra.io.forked).  The child steps over the frames before ``stop`` (reading only their
# lengths), reads its part into its own columns, puts them in id order and sends them back (lists and
# arrays of ints, floats, strings and shared tuples: quick to pickle) with its side tables; this process
# does the same with its part meanwhile, then merges the two id-sorted parts (a few slices when their ids
# come in long runs, as they do).  The result is what one reader gives for the whole file: the columns
# are put in id order and the ids are distinct (or it is an error), so that order is the same however it
# is reached; the caches of a reader change how fast it reads, never what.  Any error, in either part, or
# a child that does not deliver: the file is read again here alone, so errors and their messages are
# those of one reader.

_MAX_BLOCKS = 4096       # merging two sorted parts by slices; more alternations: one sort
_INSERT_BLOCKS = 64      # up to this many slices, the second part's go in between the first part's


def _parallel_plan(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(offset of message 1, stop) when the file is worth reading in two processes, else None."""
    from chakra.io.forked import may_fork
    from chakra.io.pbstream import decode_varint

    try:
        size = os.path.getsize(path)
        if size < PARALLEL_MIN_BYTES or not may_fork() or _rss() > PARALLEL_MAX_RSS:
            return None
        with open(path, "rb") as fh:
            head = fh.read(16)
        if head[:2] == b"\x1f\x8b":
            return None      # gzip: read in one piece anyway
        length, start = decode_varint(head, 0)
    except (OSError, ValueError):
        return None          # read_graph says what is wrong
    offset = start + length
    if offset >= size:
        return None
    return offset, offset + max(1, int((size - offset) * _SHARE))


def _rss() -> int:
    """Resident memory of this process in bytes (0 when unknown)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def _read_part(path: str, offset: int, stop: int) -> tuple[int, tuple]:
    """(child) (byte offset where its part begins, the part in id order: :func:`_sorted_part`): the messages
    from the first one that starts at byte ``stop`` or later (``offset``: where message 1 starts)."""
    from array import array

    from chakra.io.pbstream import iter_frame_batches_from

    # the frames before stop are stepped over (only their lengths are read): a guess of where a message
    # starts, without that walk, could take the end of a message for a run of messages
    _, at, batches = iter_frame_batches_from(path, offset, 1, stop)
    rd = _Reader()
    for k, frames in batches:
        _add_frames(rd, k, frames, path)
    del batches
    part = _sorted_part(rd)
    del rd
    cols = part[0]
    cols[0] = array("Q", cols[0])      # pickled (and read back) as one block each
    cols[2] = array("q", cols[2])
    cols[3] = array("d", cols[3])
    cols[4] = array("d", cols[4])
    cols[5] = _pickled_without_memo(cols[5])
    return at, part


def _pickled_without_memo(deps: list[tuple]) -> bytes:
    """The pickle of a list of distinct tuples of ints made without the memo of objects already written
    (nothing to share there): several times quicker to write than a plain pickle, and to read."""
    import io
    import pickle

    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        pickler.fast = True  # (no memo; a shared object would be written twice, which is still right)
    except AttributeError:  # pragma: no cover - a Python without it: a plain pickle
        pass
    pickler.dump(deps)
    return buf.getvalue()


def _sorted_part(rd: _Reader) -> tuple:
    """([ids, names, types, durs, starts, deps, cpu, lanes] in id order, [(id, CommInfo) of the comm
    nodes], [(id, tid) of the nodes with a deferred lane], parents, ctrl_parent, meta_cpu_tids,
    meta_payload, host_tids_raw, lane_cache) of a reader; ValueError when an id repeats."""
    ids, types = rd.ids, rd.types
    comm_raw = rd.comm_raw
    comm = []
    for i in compress(count(), map(COMM_TYPES.__contains__, types)):
        raw = comm_raw.get(i, {})
        comm.append((ids[i], CommInfo.from_attrs(raw)))
    deferred = [(ids[i], tid) for i, tid in rd.deferred]
    cols = [ids, rd.names, types, rd.durs, rd.starts, rd.deps, rd.cpu, rd.lanes]
    descents = list(compress(count(), map(operator.ge, ids, islice(ids, 1, None))))
    if descents:
        k = descents[-1] + 1
        m = bisect.bisect_right(ids, max(islice(ids, k)), k)
        perm = sorted(range(m), key=ids.__getitem__)
        sid = list(map(ids.__getitem__, perm))
        if not all(map(operator.lt, sid, islice(sid, 1, None))) or (m < len(ids) and sid[-1] >= ids[m]):
            raise ValueError("an id repeats")
        del sid
        for c, col in enumerate(cols):
            new = list(map(col.__getitem__, perm))    # (new lists: fewer reference count updates)
            if m < len(col):
                new += col[m:]
            cols[c] = new
        del perm
    return (cols, comm, deferred, rd.parents, rd.ctrl_parent, rd.meta_cpu_tids, rd.meta_payload,
            rd.host_tids_raw, rd.lane_cache, rd.extra)


def _merge_blocks(a: Any, b: Any) -> list[tuple[int, int, int]] | None:
    """How two increasing sequences interleave: (0 for a / 1 for b, lo, hi) slices in merged order;
    None when they alternate more than _MAX_BLOCKS times, ValueError when they share a value."""
    find = bisect.bisect_left
    blocks: list[tuple[int, int, int]] = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        if a[i] < b[j]:
            k = find(a, b[j], i)
            blocks.append((0, i, k))
            i = k
        elif b[j] < a[i]:
            k = find(b, a[i], j)
            blocks.append((1, j, k))
            j = k
        else:
            raise ValueError("a value in both")
        if len(blocks) > _MAX_BLOCKS:
            return None
    if i < na:
        blocks.append((0, i, na))
    if j < nb:
        blocks.append((1, j, nb))
    return blocks


def _read_parallel(path: str | os.PathLike[str], rank: int | None, offset: int, stop: int
                   ) -> RankGraph | None:
    """The graph read by two processes, or None (then read it alone)."""
    from chakra.io.forked import ForkedCall
    from chakra.io.pbstream import batch_container, iter_frame_batches, parse_batch
    from chakra.schema import GlobalMetadata, Node

    where = os.fspath(path)
    child = ForkedCall(_read_part, where, offset, stop)
    if not child.started:
        return None
    try:
        assert _classes is not None
        FullBatch = _classes[1]
        metadata, batches = iter_frame_batches(path, GlobalMetadata)
        rd = _Reader()
        g = None
        cut = None
        try:
            for first, frames in batches:
                if g is None:
                    parse_batch(batch_container(frames[:1]), first, FullBatch, Node, path)
                    g = _graph_head(metadata, rank, path)
                end = offset + sum(map(len, frames))
                if end >= stop:
                    # the first frame that starts at stop or later is the child's
                    starts = list(accumulate(map(len, frames), initial=offset))
                    k = bisect.bisect_left(starts, stop)
                    cut = starts[k]
                    frames = frames[:k]
                if frames:
                    _add_frames(rd, first, frames, path)
                if cut is not None:
                    break
                offset = end
        finally:
            batches.close()
        if g is None or cut is None:
            return None
        mine = _sorted_part(rd)
        del rd
        theirs = child.result()
        if theirs is None or theirs[0] != cut:
            return None
        return _finish_parts(g, mine, theirs[1], where)
    except Exception:  # noqa: BLE001 - read alone, which says what is wrong
        return None
    finally:
        child.cancel()


def _finish_parts(g: RankGraph, mine: tuple, theirs: tuple, where: str) -> RankGraph | None:
    """:func:`_finish` for two parts in id order (:func:`_sorted_part`, the first one of this process);
    None when an id is in both."""
    cols_a, comm_a, deferred_a, parents, ctrl_parent, meta_cpu_tids, meta_payload, host_tids_raw, \
        lane_cache, extra = mine
    cols_b, comm_b, deferred_b, parents_b, ctrl_parent_b, meta_cpu_tids_b, meta_payload_b, \
        host_tids_raw_b, lane_cache_b, extra_b = theirs
    import pickle

    cols_b[5] = pickle.loads(cols_b[5])
    ids_a, ids_b = cols_a[0], cols_b[0]
    try:
        blocks = _merge_blocks(ids_a, ids_b)
    except ValueError:
        return None          # an id in both parts: an error, which the reading alone reports
    if blocks is None:
        cols = [list(chain(ca, cb)) for ca, cb in zip(cols_a, cols_b)]
        del cols_a, cols_b
        ids = cols[0]
        perm = sorted(range(len(ids)), key=ids.__getitem__)   # two runs: a merge
        cols[0] = ids = list(map(ids.__getitem__, perm))
        if not all(map(operator.lt, ids, islice(ids, 1, None))):
            return None      # an id in both parts
        for col in cols[1:]:
            col[:] = list(map(col.__getitem__, perm))
        del perm
    elif len(blocks) <= _INSERT_BLOCKS:
        # a's lists stay where they are; b's slices go in between (a memmove of what follows each)
        cols = cols_a
        for col, col_b in zip(cols_a, cols_b):
            at = 0
            for src, lo, hi in blocks:
                if src:
                    col[at:at] = col_b[lo:hi]
                at += hi - lo
        del cols_b
    else:
        parts = (cols_a, cols_b)
        cols = []
        for c in range(len(cols_a)):
            col: list = []
            for src, lo, hi in blocks:
                col += parts[src][c][lo:hi]
            cols.append(col)
        del parts, cols_a, cols_b
    ids, names, types, durs, starts, deps_l, cpu_l, lanes = cols
    for key, lane in lane_cache_b.items():
        lane_cache.setdefault(key, lane)
    parents |= parents_b
    ctrl_parent.update(ctrl_parent_b)
    meta_cpu_tids |= meta_cpu_tids_b
    host_tids_raw |= host_tids_raw_b
    if meta_payload is None:
        meta_payload = meta_payload_b
    find = bisect.bisect_left
    deferred = deferred_a + deferred_b
    if deferred:
        host_tids = {_int_or_none(t) or 0 for t in host_tids_raw | meta_cpu_tids}
        interned = {lane: lane for lane in lane_cache.values()}
        for nid, tid in deferred:
            t = tid if type(tid) is int else (_int_or_none(tid) or 0)
            lane = ("cpu", t) if t in host_tids else ("gpu", 0, _int_or_none(tid) or 0)
            lanes[find(ids, nid)] = interned.setdefault(lane, lane)
    g.parents = parents
    g.ctrl_parent = ctrl_parent
    comm = {find(ids, nid): c for nid, c in chain(comm_a, comm_b)}
    g.ids, g.names, g.types, g.durations, g.starts = ids, names, types, durs, starts
    g.deps, g.is_cpu, g.lanes, g.comm = deps_l, cpu_l, lanes, comm
    for name, d in extra_b.items():
        extra.setdefault(name, {}).update(d)
    if extra:
        g.extra = extra_by_index(extra, ids)
    if not g.process_groups and meta_payload:
        groups = _groups_from_metadata_node(meta_payload, where)
        if groups:
            g.process_groups = parse_process_groups(groups, g.world_size, where)
    return g


def _graph_head(metadata: Any, rank: int | None, path: str | os.PathLike[str]) -> RankGraph:
    from chakra.io.naming import rank_from_filename

    if rank is None:
        rank = rank_from_filename(path)
    return graph_for_metadata(metadata, os.fspath(path), rank)


def _finish(g: RankGraph, rd: _Reader, where: str) -> RankGraph:
    ids, names, types, durs, starts = rd.ids, rd.names, rd.types, rd.durs, rd.starts
    deps_l, cpu_l, lanes = rd.deps, rd.cpu, rd.lanes
    if rd.deferred:
        host_tids = {_int_or_none(t) or 0 for t in rd.host_tids_raw | rd.meta_cpu_tids}
        interned = {lane: lane for lane in rd.lane_cache.values()}
        for i, tid in rd.deferred:
            t = tid if type(tid) is int else (_int_or_none(tid) or 0)
            lane = ("cpu", t) if t in host_tids else ("gpu", 0, _int_or_none(tid) or 0)
            lanes[i] = interned.setdefault(lane, lane)
    g.parents = rd.parents
    g.ctrl_parent = rd.ctrl_parent

    comm = {}
    if not COMM_TYPES.isdisjoint(types):
        comm_raw = rd.comm_raw
        for i in compress(count(), map(COMM_TYPES.__contains__, types)):
            raw = comm_raw.get(i, {})
            comm[i] = CommInfo.from_attrs(raw)

    # Index order must be id order: ids strictly increasing -> nothing to do
    n = len(ids)
    descents = list(compress(count(), map(operator.ge, ids, islice(ids, 1, None))))
    if not descents:
        g.ids, g.names, g.types, g.durations, g.starts = ids, names, types, durs, starts
        g.deps, g.is_cpu, g.lanes, g.comm = deps_l, cpu_l, lanes, comm
    else:
        # ids[k:] is sorted; the nodes before k go in among the first m (those up to the largest of them)
        k = descents[-1] + 1
        m = bisect.bisect_right(ids, max(islice(ids, k)), k)
        perm = sorted(range(m), key=ids.__getitem__)
        sid = list(map(ids.__getitem__, perm))
        if not all(map(operator.lt, sid, islice(sid, 1, None))) or (m < n and sid[-1] >= ids[m]):
            seen: set[int] = set()
            for index, nid in enumerate(ids):
                if nid in seen:
                    raise TraceFormatError(f"node id {nid} appears twice (message {index + 1})", where)
                seen.add(nid)
        comm_ids = [ids[i] for i in comm]
        ids[:m] = sid
        del sid
        # when only a few nodes are out of place (a METADATA node written first) this is a short prefix
        for col in (names, types, durs, starts, deps_l, cpu_l, lanes):
            col[:m] = list(map(col.__getitem__, perm))
        del perm
        g.ids, g.names, g.types, g.durations, g.starts = ids, names, types, durs, starts
        g.deps, g.is_cpu, g.lanes = deps_l, cpu_l, lanes
        find = bisect.bisect_left
        g.comm = {find(ids, nid): c for nid, c in zip(comm_ids, comm.values())}
    if rd.extra:
        g.extra = extra_by_index(rd.extra, g.ids)
    if not g.process_groups and rd.meta_payload:
        groups = _groups_from_metadata_node(rd.meta_payload, where)
        if groups:
            g.process_groups = parse_process_groups(groups, g.world_size, where)
    return g
