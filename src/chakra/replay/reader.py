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
"""

from __future__ import annotations

import bisect
import operator
import os
import re
import sys
from itertools import chain, compress, count, islice, repeat
from typing import Any

from chakra.errors import TraceFormatError
from chakra.replay.graph import (
    COMM_TYPES,
    CommInfo,
    RankGraph,
    _groups_from_metadata_node,
    _int_or_none,
    _scalar,
    metadata_info,
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
_SKIP, _IS_CPU, _TID, _STREAM, _DEVICE, _COMM = range(6)
_NAMES = {"is_cpu_op": _IS_CPU, "tid": _TID, "stream": _STREAM, "device": _DEVICE,
          "pg_name": _COMM, "comm_src": _COMM, "comm_dst": _COMM, "comm_tag": _COMM}
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

    def node_info(self, infos: Any) -> tuple[bool, Any, Any, dict | None]:
        """(is_cpu, lane, tid, comm attrs) from a node's attribute entries, in order (the last wins)."""
        is_cpu = False
        tid = stream = device = None
        comm = None
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
            else:
                if comm is None:
                    comm = {}
                comm[name] = value
        if is_cpu:
            self.host_tids_raw.add(tid)
        return (is_cpu, self.lane_of(is_cpu, tid, stream, device), tid, comm)

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
            is_cpu, lane, tid, comm = self.node_info(infos)
            index = len(self.ids)
            nid = n.id
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


def read_graph(path: str | os.PathLike[str], rank: int | None = None) -> RankGraph:
    """The RankGraph of one Chakra ET file (plain or gzipped); what ``graph_from_protobuf`` gives for the
    messages of that file, with the errors ``load_graph`` always gave."""
    global _classes
    from chakra.io.naming import rank_from_filename
    from chakra.io.pbstream import batch_container, batch_frames, iter_frame_batches, parse_batch
    from chakra.schema import GlobalMetadata, Node

    if _classes is None:
        _classes = _lean_classes()
    LeanBatch, FullBatch, LeanNode = _classes[:3]
    metadata, batches = iter_frame_batches(path, GlobalMetadata)
    where = os.fspath(path)
    rd = _Reader()
    g = None
    for first, frames in batches:
        if g is None:
            # as before: message 1 is decoded before the GlobalMetadata is read, the rest after it
            parse_batch(batch_container(frames[:1]), first, FullBatch, Node, path)
            if rank is None:
                rank = rank_from_filename(path)
            g = _graph_head(metadata, rank, where)
        if rd.add_batch(frames, _classes):
            continue
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
        del lean
    if g is None:
        raise TraceFormatError("no nodes after the GlobalMetadata (a trace cut short?)", path)
    return _finish(g, rd, where)


def _graph_head(metadata: Any, rank: int | None, where: str) -> RankGraph:
    g = RankGraph(path=where)
    info = metadata_info(metadata)
    r = _int_or_none(info.get("rank"))
    g.rank = r if r is not None and r >= 0 else rank
    ws = _int_or_none(info.get("world_size"))
    g.world_size = ws if ws and ws > 0 else None
    g.process_groups = parse_process_groups(info.get("process_groups"), g.world_size, where)
    mdur = info.get("measured_dur_us")
    g.measured_us = float(mdur) if isinstance(mdur, (int, float)) and mdur > 0 else None
    mstart = info.get("measured_start_us")
    g.measured_start_us = float(mstart) if isinstance(mstart, (int, float)) else None
    return g


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
            comm[i] = CommInfo(pg_name=str(raw.get("pg_name") or ""),
                               src=_int_or_none(raw.get("comm_src")), dst=_int_or_none(raw.get("comm_dst")),
                               tag=_int_or_none(raw.get("comm_tag")) or 0)

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
    if not g.process_groups and rd.meta_payload:
        groups = _groups_from_metadata_node(rd.meta_payload, where)
        if groups:
            g.process_groups = parse_process_groups(groups, g.world_size, where)
    return g
