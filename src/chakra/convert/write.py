"""The messages of a conversion: GlobalMetadata and the nodes, serialised piece by piece in the output
order."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, BinaryIO, Protocol, TypeVar

import orjson

from chakra import formats as wire
from chakra import schema as pb
from chakra.convert.attrs import frame_attr, make_attr, varint
from chakra.convert.comm import (
    CommFields,
)
from chakra.convert.plan import (
    _TYPE_NAMES,
    ET_VERSION,
    Comm,
    Deps,
    Plan,
    Timing,
    _dumps,
    _num,
)
from chakra.convert.serial import int_attr
from chakra.convert.threads import ThreadTiming
from chakra.formats import (
    NODE_CTRL_DEPS,
    NODE_DATA_DEPS,
    NODE_DURATION,
    NODE_ID,
    NODE_NAME,
    NODE_START,
    NODE_TYPE,
    THREAD_TIMING,
    attr_name_field,
)
from chakra.host.model import HostOp
from chakra.io.forkmap import Sink, fork_map, split
from chakra.io.pbstream import write_frames
from chakra.tunables import ET_WRITE_PIECE_NODES, ET_WRITE_READ_PIECE_NODES

log = logging.getLogger(__name__)


# -- messages -------------------------------------------------------------------------------------
def iter_nodes(cv: Plan, order: list[int], tm: Timing, cm: Comm, dp: Deps) -> Iterator[pb.Node]:
    """The Node messages in ``order``, built one at a time (a writer can stream them)."""
    parse = pb.Node.FromString
    for body in iter_serialized(cv, order, tm, cm, dp):
        yield parse(body)


def iter_serialized(cv: Plan, order: list[int], tm: Timing, cm: Comm, dp: Deps) -> Iterator[bytes]:
    """The serialised Node messages in ``order``, one at a time (:class:`SerialNodes`); the statistics'
    counts are set once the last one is made."""
    nodes = SerialNodes(cv, order, tm, cm, dp)
    edges = [0, 0]
    yield from nodes.bodies(range(len(order)), edges)
    nodes.count(edges)


R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class PieceReader(Protocol[R_co]):
    """Reads the frames of one range of the nodes, in the process that writes that range."""

    def add(self, first: int, frames: list[bytes]) -> None:
        """``frames``: the next framed nodes written, the first of them message ``first`` of the file."""

    def result(self) -> R_co:
        """What the reading of the range made (sent back to the writing process: it must pickle)."""
        ...


class FrameReader(Protocol[R]):
    """Reads an ET's node frames while they are written (``chakra_converter --simulate``: the replay's
    ``chakra.replay.reader.ReadAsWritten``): a :class:`PieceReader` for each range written, then the
    file's name, the ranges' results in order and the GlobalMetadata once the file is in place."""

    def piece(self, path: str) -> PieceReader[R]: ...

    def written(self, path: str, pieces: list[R], metadata: Any) -> None: ...


#: what appends the nodes to an open ET file (:func:`chakra.convert.core.stream_serialized`'s): the file, its
#: name and a reader of the frames; the reader's results
WriteNodes = Callable[[BinaryIO, str, "FrameReader[Any] | None"], "list[Any] | None"]


class SerialNodes:
    """The Node messages of a plan in output order, serialised.

    Assembled from pieces, because building a Node with its IOInfo and attribute
    sub-messages costs several times its serialisation: the scalar and dependency
    fields (1-7) encoded here as protobuf would (proto3: zero values left out, the
    dependencies packed, uint64 range checked with protobuf's error), followed by
    ``inputs`` (8), ``outputs`` (9) and the ``attr`` entries (10), each encoded as
    protobuf would (fields in number order, so the bytes are those of the whole message
    serialised at once; ``convert.serial``).  An op ``load_columns`` did not keep whole
    has its fields 8-10 ready (``Columns.tails``; a GPU comm node adds its comm attributes
    after them).

    What all nodes share (every id, start and duration as a varint, the thread-timing
    attributes) is made once, here, so that ranges of the order can be serialised apart:
    :meth:`write_parts` writes them over the cores (:mod:`chakra.io.forkmap`).
    """

    def __init__(self, cv: Plan, order: list[int], tm: Timing, cm: Comm, dp: Deps) -> None:
        self.cv = cv
        self.order = order
        self.ta_of = thread_attrs(cv, dp.tt)
        # every id as a varint, once (a node's own field 1, the dependencies on it); the starts, durations
        self.vid = uint64_varints(cv.ids)
        self.vstart = uint64_varints(tm.start)
        self.vdur = uint64_varints(tm.dur)
        self.start, self.dur = tm.start, tm.dur
        self.cm = cm
        self.dp = dp

    def write_parts(self, fh: Sink, path: str, reader: FrameReader[R] | None = None) -> list[R] | None:
        """Append the framed nodes to the file ``fh`` (``path``: its name, in messages), the ranges of the
        order serialised over the cores, then set the statistics' counts.

        ``reader``: something that reads the frames as they are written (``reader.piece(path)`` in the
        process that writes a range, with its ``add(index, frames)`` and ``result()``: the replay's reader,
        for ``chakra_converter --simulate``); the ranges' results in order (None without a reader)."""
        pieces = split(len(self.order), ET_WRITE_PIECE_NODES if reader is None else ET_WRITE_READ_PIECE_NODES)
        done = fork_map(partial(self.write_range, path, reader), pieces, f"writing {path}", sink=fh)
        self.count([sum(e[0] for e in done), sum(e[1] for e in done)])
        return None if reader is None else [r for e in done for r in e[2]]

    def write_range(self, path: str, reader: FrameReader[R] | None, piece: range,
                    write: Callable[[bytes], Any]) -> tuple[int, int, list[R]]:
        """Give ``write`` the framed nodes of ``order[piece]`` (``path``: the file they go to, named in
        errors); (ctrl, data) dependencies written, and what ``reader`` (if any) made of the frames (a list
        of that one result, empty without a reader)."""
        edges = [0, 0]
        got = None if reader is None else reader.piece(path)
        write_frames(write, self.bodies(piece, edges), path, piece.start + 1,
                     None if got is None else got.add)
        return edges[0], edges[1], [] if got is None else [got.result()]

    def count(self, edges: list[int]) -> None:
        """The statistics' counts, given the dependencies written (ctrl, data)."""
        stats = self.cv.stats
        # node type -> count, in first-seen order
        counts = Counter(map(self.cm.ntype.__getitem__, self.order))
        stats.by_type = {_TYPE_NAMES[t]: k for t, k in counts.items()}
        stats.ctrl_edges, stats.data_edges = edges

    def bodies(self, piece: range, edges: list[int]) -> Iterator[bytes]:
        """The serialised nodes of ``order[piece]``; adds the dependencies written to ``edges`` (ctrl, data)
        once the last is made."""
        cv = self.cv
        order = self.order[piece.start:piece.stop]
        ids, names, full = cv.ids, cv.names, cv.full
        tails = cv.cols.tails
        cm = self.cm
        ctrl, data, start, dur, ntype = self.dp.ctrl, self.dp.data, self.start, self.dur, cm.ntype
        is_gpu, comm, cpu_comm = cv.is_gpu, cm.comm, cm.cpu_comm
        ser = cv.ser
        framed = ser.attr_cache.framed
        op_ios = ser.op_ios
        join = b"".join
        ta_of = self.ta_of
        ctrl_edges = data_edges = 0
        meta_t = pb.METADATA_NODE
        vid, vstart, vdur = self.vid, self.vstart, self.vdur
        name_fields: dict[str, bytes] = {"": b""}
        type_fields = {t: (NODE_TYPE + bytes((t,)) if t else b"") for t in _TYPE_NAMES}
        small = _SMALL
        empty = b""
        if tails is None:
            tails = [None] * cv.n

        for i in order:
            t = ntype[i]
            name = names[i]
            nf = name_fields.get(name)
            if nf is None:
                nb = name.encode()
                nf = name_fields[name] = NODE_NAME + varint(len(nb)) + nb
            c = ctrl[i]
            if c >= 0:
                v = vid[c]
                cf = NODE_CTRL_DEPS + small[len(v)] + v
                ctrl_edges += 1
            else:
                cf = empty
            ds = data[i]
            if ds:
                k = len(ds)
                if k == 1:
                    v = vid[ds[0]]
                    df = NODE_DATA_DEPS + small[len(v)] + v
                else:
                    v = join([vid[j] for j in ds])
                    df = NODE_DATA_DEPS + varint(len(v)) + v
                data_edges += k
            else:
                df = empty
            sf = NODE_START + vstart[i] if start[i] else empty
            uf = NODE_DURATION + vdur[i] if dur[i] else empty
            idf = NODE_ID + vid[i] if ids[i] else empty
            tail = tails[i]
            if tail is not None:   # neither METADATA nor a host comm node (those are kept whole)
                f = comm.get(i) if comm else None
                if f is None:
                    yield join((idf, nf, type_fields[t], cf, df, sf, uf, tail, ta_of[i]))
                else:
                    yield join((idf, nf, type_fields[t], cf, df, sf, uf, tail,
                                *[frame_attr(a) for a in _comm_attrs(f, t)], ta_of[i]))
                continue
            f = comm.get(i)
            op = full[i]
            assert op is not None   # (a node kept whole is loaded with its op)
            if is_gpu[i]:
                attrs = ser.gpu_attrs(op)
            elif t == meta_t:
                attrs = [framed(wire.ATTR_IS_CPU_OP, True)]
            else:
                attrs = ser.cpu_attrs(op, cpu=i not in cpu_comm, skip=f is not None)
            if f is not None:
                attrs.extend(frame_attr(a) for a in _comm_attrs(f, t))
            attrs.append(ta_of[i])
            head = (idf, nf, type_fields[t], cf, df, sf, uf)
            if t == meta_t:
                yield join((*head, meta_io(cv, op), *attrs))
            else:
                yield join((*head, *op_ios(op), *attrs))
        edges[0] += ctrl_edges
        edges[1] += data_edges


_SMALL = [bytes((i,)) for i in range(128)]
_VARINT_END = re.compile(rb"[\x80-\xff]*[\x00-\x7f]")


def uint64_varints(values: list[int]) -> list[bytes]:
    """Each of ``values`` as a uint64 varint, encoded by protobuf in one call: the packed ``data_deps`` field
    of a Node holding them all, split at the varints' last bytes (protobuf's range checks and errors)."""
    if not values:
        return []
    m = pb.Node()
    m.data_deps.extend(values)
    b = m.SerializeToString()
    k = 1   # after the tag: the field's length, a varint
    while b[k] & 0x80:
        k += 1
    return _VARINT_END.findall(b, k + 1)


def thread_attrs(cv: Plan, tt: ThreadTiming | None) -> list[bytes]:
    """Node ``i``'s thread-timing attributes (convert.threads), framed, at ``[i]``; b"" if none.

    Built once for the nodes that have any (a framed (name, value) is made once: values repeat)."""
    out = [b""] * cv.n
    if tt is None:
        return out
    ids = cv.ids
    framed: dict[tuple[str, int], bytes] = {}
    for (name_field, name), d in ((_DEPTH, tt.depth), (_WORK, tt.work_before), (_TAIL, tt.tail),
                                  (_IDLE, tt.idle_before), (_POST, tt.wait_post)):
        for i, v in d.items():
            if v:
                b = framed.get((name, v))
                if b is None:
                    b = framed[(name, v)] = int_attr(name_field, name, v)
                out[i] += b
    for i, u in tt.wait_on.items():
        out[i] += int_attr(_WAIT_ON[0], _WAIT_ON[1], ids[u])
    if tt.frees_thread:
        frees_attr = int_attr(_FREES[0], _FREES[1], 1)
        for i in tt.frees_thread:
            out[i] += frees_attr
    return out


def meta_io(cv: Plan, op: HostOp) -> bytes:
    """inputs + outputs of the METADATA node: the inputs' values are the process-group table."""
    io = op.inputs
    try:
        inputs = pb.IOInfo(values=str([pg_json(cv)]), shapes=orjson.dumps(io.shapes).decode(),
                           types=orjson.dumps(io.types).decode())
        io = op.outputs
        dumps = orjson.dumps
        outputs = pb.IOInfo(values=dumps(io.values).decode(), shapes=dumps(io.shapes).decode(),
                            types=dumps(io.types).decode())
    except TypeError:   # something orjson will not encode (e.g. a huge int): the slow path
        io = op.inputs
        inputs = pb.IOInfo(values=_dumps(io.values), shapes=_dumps(io.shapes), types=_dumps(io.types))
        io = op.outputs
        outputs = pb.IOInfo(values=_dumps(io.values), shapes=_dumps(io.shapes), types=_dumps(io.types))
    return pb.Node(inputs=inputs, outputs=outputs).SerializeToString()


# -- metadata -------------------------------------------------------------------------------------
def pg_records(cv: Plan) -> list[dict[str, Any]]:
    out = []
    for g in cv.trace.process_groups:
        out.append({
            wire.GROUP_NAME: cv.pgn.numeric(g.pg_name) or g.pg_name,
            wire.GROUP_DESC: g.pg_desc,
            wire.GROUP_BACKEND: g.backend,
            wire.GROUP_RANKS: list(g.ranks),
            wire.GROUP_SIZE: g.group_size,
            wire.GROUP_COUNT: g.group_count,
        })
    return out


def pg_json(cv: Plan) -> str:
    return json.dumps(pg_records(cv))


def metadata(cv: Plan, tm: Timing, cm: Comm, dp: Deps) -> pb.GlobalMetadata:
    tr = cv.trace
    attrs = [make_attr("schema", tr.schema or "")]
    if tr.pid is not None:
        attrs.append(make_attr("pid", tr.pid))
    if tr.time is not None:
        attrs.append(make_attr("time", tr.time))
    if tr.start_ts is not None:
        attrs.append(make_attr("start_ts", tr.start_ts))
    if tr.finish_ts is not None:
        attrs.append(make_attr("finish_ts", tr.finish_ts))
    attrs.append(make_attr(wire.META_RANK, cm.rank if cm.rank is not None else -1))
    ws = tr.world_size
    attrs.append(make_attr(wire.META_WORLD_SIZE, ws if ws is not None else -1))
    attrs.append(pb.AttributeProto(name=wire.META_PROCESS_GROUPS, string_val=pg_json(cv)))
    measured = tr.extra.get("measured")
    if isinstance(measured, dict) and _num(measured.get("start_us")):
        m_start = float(measured["start_us"])
        m_dur = float(measured.get("dur_us", 0.0)) if _num(measured.get("dur_us")) else 0.0
        window = str(measured.get("window", ""))
    elif cv.stats.timed:
        m_start, m_dur, window = tm.span_lo, tm.span_hi - tm.span_lo, "span"
    else:
        m_start, m_dur, window = 0.0, 0.0, "none"
    attrs.append(pb.AttributeProto(name=wire.META_MEASURED_START_US, double_val=m_start))
    attrs.append(pb.AttributeProto(name=wire.META_MEASURED_DUR_US, double_val=m_dur))
    attrs.append(pb.AttributeProto(name=wire.META_MEASURED_WINDOW, string_val=window))
    if dp.tt is not None:
        attrs.append(pb.AttributeProto(name=wire.META_THREAD_TIMING, string_val=THREAD_TIMING))
    return pb.GlobalMetadata(version=ET_VERSION, attr=attrs)



def _name_field(name: str) -> tuple[bytes, str]:
    return attr_name_field(name), name


_DEPTH, _WORK, _TAIL, _IDLE, _WAIT_ON, _POST, _FREES = map(_name_field, wire.THREAD_TIMING_ATTRS)


def _comm_attrs(f: CommFields, t: int) -> list[pb.AttributeProto]:
    A = pb.AttributeProto
    if t == pb.COMP_NODE:   # a collective the simulator does not run (astrasim_safe): kept for information
        out = [A(name=wire.ATTR_ORIG_COLLECTIVE, string_val=f.collective)]
        if f.comm_type is not None:
            out.append(A(name=wire.ATTR_ORIG_COMM_TYPE, int64_val=f.comm_type))
        out.append(A(name=wire.ATTR_ORIG_COMM_SIZE, int64_val=f.size))
        out.append(A(name=wire.ATTR_ORIG_PG_NAME, string_val=f.pg_name))
        return out
    out = []
    if t == pb.COMM_COLL_NODE and f.comm_type is not None:
        out.append(A(name=wire.ATTR_COMM_TYPE, int64_val=f.comm_type))
    out.append(A(name=wire.ATTR_COMM_SIZE, int64_val=f.size))
    out.append(A(name=wire.ATTR_PG_NAME, string_val=f.pg_name))
    out.append(A(name=wire.ATTR_COMM_PRIORITY, int32_val=0))
    if f.seq is not None:
        out.append(A(name=wire.ATTR_COMM_SEQ, int64_val=f.seq))
    if t in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
        out.append(A(name=wire.ATTR_COMM_SRC, int32_val=f.src))
        out.append(A(name=wire.ATTR_COMM_DST, int32_val=f.dst))
        out.append(A(name=wire.ATTR_COMM_TAG, int32_val=f.tag))
    return out
