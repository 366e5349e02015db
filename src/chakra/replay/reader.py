"""The one reader of Chakra ET files (protobuf): a file's nodes as columns, for the replay and `chakra stats`.

:func:`read_columns` decodes a file into :class:`~chakra.replay.etdecode.EtColumns` (file order, nothing
judged; the decoding of a batch of frames is :mod:`chakra.replay.etdecode`'s); :func:`graph_from_columns` is
the one finish step that makes a :class:`~chakra.replay.graph.RankGraph` of them (lanes, id order, the
duplicate-id error, comm info, process groups).  :func:`load_graph` is the two for a path,
:func:`graph_from_protobuf` the two for ``Node`` messages already in memory (they are serialized and read
the same way, so there is one decoding of nodes, whatever their source).  The file comes in batches of a
few thousand frames (:class:`chakra.io.pbstream.FrameFile`), by spans of the file read in separate
processes (:func:`read_columns`).
"""

from __future__ import annotations

import bisect
import logging
import operator
import os
import sys
from collections.abc import Sequence
from itertools import accumulate, chain, compress, count, islice, repeat
from typing import Any, cast

from chakra.errors import TraceFormatError
from chakra.formats import ATTR_TIMING_PIECE
from chakra.job.etfile import groups_from_metadata_node, parse_process_groups
from chakra.replay.etdecode import DEFER, CacheSizes, ColumnBuilder, EtColumns, extras_of
from chakra.replay.graph import (
    COMM_TYPES,
    SPARSE_EXTRAS,
    CommInfo,
    CommTable,
    DepsCSR,
    IntColumn,
    RankGraph,
    SparseColumn,
    graph_for_metadata,
    resolve_deferred_lanes,
)
from chakra.tunables import READER_SPAN_MIN_BYTES

__all__ = ["SPAN_BYTES", "CacheSizes", "EtColumns", "ReadAsWritten", "columns_from_messages",
           "graph_from_columns", "graph_from_protobuf", "load_graph", "load_graphs", "read_columns"]

log = logging.getLogger(__name__)

_first = operator.itemgetter(0)
_NO_ATTRS: dict[str, Any] = {}


# ---- reading -----------------------------------------------------------------------------------------------


# bytes of frames worth a process of their own (about 2,000 nodes of a real trace, ~15 ms of decoding):
# forkmap's min_size for the spans of a file
SPAN_BYTES = READER_SPAN_MIN_BYTES


def read_columns(path: str | os.PathLike[str], *, span_bytes: int = SPAN_BYTES,
                 cache: CacheSizes | None = None) -> EtColumns:
    """The nodes of one Chakra ET file (plain or gzipped), in file order.

    The file is cut into byte spans, one per core (:mod:`chakra.io.forkmap`; ``CHAKRA_PARTS=1``: one span,
    read here); :func:`_read_span` reads the frames that start in a span (each process finds its first
    one itself) into columns, which come back pickled (lists of numbers and shared tuples: cheap to
    pickle) and are joined in file order.  The errors of a damaged file are those
    :func:`chakra.io.pbstream.read_messages` gives (which message, and why; the first in file order); a
    file without nodes gives empty columns.  ``span_bytes``: the least bytes of frames a span holds;
    ``cache``: what the attribute caches hold (the same columns whatever it is)."""
    from chakra.io import gc_paused
    from chakra.io.forkmap import fork_map, split
    from chakra.io.pbstream import FrameFile
    from chakra.schema import GlobalMetadata

    src = FrameFile(path, GlobalMetadata)
    cuts: list[int | None] = [src.start + r.start for r in split(src.size - src.start, span_bytes)]
    cuts[0] = None
    spans = list(zip(repeat(src), cuts, [*cuts[1:], None], repeat(cache)))
    with gc_paused():      # millions of acyclic tuples: the cyclic GC would only rescan them
        pieces = fork_map(_read_span, spans, f"reading {os.fspath(path)}")
        cols = _joined(pieces)
    cols.metadata = src.head
    return cols


def _read_span(span: tuple[Any, int | None, int | None, CacheSizes | None]) -> EtColumns:
    """The columns of the frames that start in one span of the file (``(FrameFile, start, stop)`` byte
    offsets; None: the first, the last), indexed from 0."""
    src, start, stop, cache = span
    cols = EtColumns(path=os.fspath(src.path), metadata=None)
    build = ColumnBuilder(cols, cache)
    for first, frames in src.batches(start, stop):
        build.add_frames(first, frames, src.path)
    build.release()
    return cols


def _joined(pieces: list[EtColumns]) -> EtColumns:
    """The columns of consecutive spans as one (the first piece's lists, extended).  Names are interned
    and equal lanes made one tuple again (a piece read in another process comes back with copies)."""
    cols = pieces[0]
    if len(pieces) == 1:
        return cols
    seen: dict[Any, Any] = {DEFER: DEFER, None: None}
    for lane in set(cols.lanes):      # (equal lanes of one piece are one tuple already)
        seen.setdefault(lane, lane)
    for c in pieces[1:]:
        base = len(cols.ids)
        cols.ids += c.ids
        cols.names += map(sys.intern, c.names)
        cols.types += c.types
        cols.durs += c.durs
        cols.starts += c.starts
        cols.deps += c.deps
        cols.nctrl += c.nctrl
        cols.cpu += c.cpu
        same = {lane: seen.setdefault(lane, lane) for lane in set(c.lanes)}
        cols.lanes += map(same.__getitem__, c.lanes)
        cols.xpairs += c.xpairs
        cols.comm.update(zip(map(base.__add__, c.comm), c.comm.values()))
        for name, d in c.extra.items():
            cols.extra.setdefault(name, {}).update(zip(map(base.__add__, d), d.values()))
        cols.deferred += [(base + k, tid) for k, tid in c.deferred]
        cols.host_tids |= c.host_tids
        if cols.meta_payload is None:
            cols.meta_payload = c.meta_payload
        for key, lane in c.lane_cache.items():
            cols.lane_cache.setdefault(key, seen.setdefault(lane, lane))
    return cols


def columns_from_messages(nodes: Any, metadata: Any = None, path: str | None = None) -> EtColumns:
    """:func:`read_columns` of ``Node`` messages already in memory (serialized and read the same way)."""
    from chakra.io.pbstream import encode_varint

    cols = EtColumns(path=path, metadata=metadata)
    build = ColumnBuilder(cols)
    frames: list[bytes] = []
    first = 1
    for node in nodes:
        body = node.SerializeToString()
        frames.append(encode_varint(len(body)) + body)
        if len(frames) >= 4096:
            build.add_frames(first, frames, path)
            first += len(frames)
            frames = []
    if frames:
        build.add_frames(first, frames, path)
    build.release()
    return cols


def graph_from_columns(cols: EtColumns, rank: int | None = None, *, strict: bool = True) -> RankGraph:
    """The one finish step: a file's columns -> the RankGraph the replay runs (index order = id order).

    Lanes of the non-CPU nodes without ``stream`` or ``device`` are decided here (a host thread's if
    their ``tid`` is one, see :mod:`chakra.replay.graph`); a repeated id is an error naming the message
    (``strict`` False: the nodes are kept, in file order, and ``RankGraph.repeated`` names the first).
    Takes the columns' lists over (they are sorted in place)."""
    from chakra.io.naming import rank_from_filename

    where = cols.path
    if rank is None and where is not None:
        rank = rank_from_filename(where)
    g = graph_for_metadata(cols.metadata, where, rank)
    ids, types, lanes = cols.ids, cols.types, cols.lanes
    cpu = list(map(bool, cols.cpu)) if None in cols.cpu else cast(list[bool], cols.cpu)
    unset: list[int] = []            # the nodes without an is_cpu_op attribute
    if cpu is not cols.cpu:
        unset = list(compress(count(), map(operator.is_, cols.cpu, repeat(None))))
    if cols.deferred:
        resolve_deferred_lanes(lanes, types, cols.deferred, cols.host_tids, cols.lane_cache.values())
    comm: dict[int, CommInfo] = {}
    if not COMM_TYPES.isdisjoint(types):
        raw = cols.comm
        made: dict[int, CommInfo] = {}      # id of an attribute dict (cached ones are shared) -> its info
        for i in compress(count(), map(COMM_TYPES.__contains__, types)):
            attrs = raw.get(i, _NO_ATTRS)
            if ATTR_TIMING_PIECE not in attrs:
                info = made.get(id(attrs))
                if info is None:
                    info = made[id(attrs)] = CommInfo.from_attrs(attrs)
                comm[i] = info
    direct = cols.extra
    # the ctrl_deps of CPU ops: their parents (by id: display, critical path, finish waits)
    deps, nctrl = cols.deps, cols.nctrl
    sel = list(map(operator.and_, map(bool, cpu), map(bool, nctrl)))
    if any(sel):
        firsts = list(map(_first, compress(deps, sel)))        # (most have one ctrl_dep: no slices)
        g.ctrl_parent = dict(zip(compress(ids, sel), firsts))
        parents = set(firsts)
        del firsts
        for k in compress(count(), map(operator.and_, sel, map((1).__lt__, nctrl))):
            parents.update(deps[k][:nctrl[k]])
        g.parents = parents
    del sel
    xpairs = cols.xpairs
    cols_l: list[list[Any]] = [ids, cols.names, types, cols.durs, cols.starts, deps, cpu, lanes, xpairs,
                               nctrl]
    perm, g.repeated = _id_order(ids, where, strict)
    if perm is not None:
        m = len(perm)
        for col in cols_l:
            col[:m] = list(map(col.__getitem__, perm))   # (a short prefix when few nodes are out of place)
        new = list(range(len(ids)))                      # old index -> new index
        any(map(new.__setitem__, perm, range(m)))
        comm = dict(zip(map(new.__getitem__, comm), comm.values()))
        direct = {name: dict(zip(map(new.__getitem__, d), d.values())) for name, d in direct.items()}
        unset = sorted(map(new.__getitem__, unset))
        g.file_pos = IntColumn.of("I", perm)      # (4 B a node moved)
    ids, names, types, durs, starts, deps, cpu, lanes, xpairs, nctrl = cols_l
    g.no_cpu_attr = IntColumn.of("I", unset)
    g.nctrl = IntColumn.of("B", nctrl) if not nctrl or max(nctrl) < 256 else IntColumn.of("q", nctrl)
    g.ids, g.types = IntColumn.of("Q", ids), IntColumn.of("i", types)   # (8 and 4 B a node; a list: 36, 8)
    g.names, g.durations, g.starts = names, durs, starts
    g.is_cpu, g.lanes = cpu, lanes
    g.deps = DepsCSR.of(deps)
    g.comm = CommTable.of(comm)
    del deps, comm
    g.extra = {name: SparseColumn.of(d) if name in SPARSE_EXTRAS else d
               for name, d in extras_of(xpairs, direct).items()}   # (made in id order)
    if not g.process_groups and cols.meta_payload:
        groups = groups_from_metadata_node(cols.meta_payload, where)
        if groups:
            g.process_groups = parse_process_groups(groups, g.world_size, where)
    return g


def _id_order(ids: list[int], where: str | None, strict: bool = True
              ) -> tuple[list[int] | None, tuple[int, int] | None]:
    """(None when ``ids`` increase; else the order of the prefix ``ids[:m]`` that sorts them (the nodes
    after it are in place), the first repeated id and its message (None: none)).  A repeated id is an
    error naming the message that repeats it, unless not ``strict`` (the sort keeps the file order of
    the nodes of one id)."""
    descents = list(compress(count(), map(operator.ge, ids, islice(ids, 1, None))))
    if not descents:
        return None, None
    # ids[k:] is sorted; the nodes before k go in among the first m (those up to the largest of them)
    k = descents[-1] + 1
    m = bisect.bisect_right(ids, max(islice(ids, k)), k)
    perm = sorted(range(m), key=ids.__getitem__)
    sid = list(map(ids.__getitem__, perm))
    if not all(map(operator.lt, sid, islice(sid, 1, None))) or (m < len(ids) and sid[-1] >= ids[m]):
        seen: set[int] = set()
        for index, nid in enumerate(ids):
            if nid in seen:
                if strict:
                    raise TraceFormatError(repeated_text(nid, index + 1), where)
                return perm, (nid, index + 1)
            seen.add(nid)
    return perm, None


def repeated_text(nid: int, message: int) -> str:
    """The error of a file whose message ``message`` repeats node id ``nid``."""
    return f"node id {nid} appears twice (message {message})"


def load_graph(path: str | os.PathLike[str], rank: int | None = None, *, strict: bool = True,
               **how: Any) -> RankGraph:
    """Read one Chakra ET file (plain or gzipped) into the RankGraph the replay runs (``how``: the
    keywords of :func:`read_columns`).  ``strict`` False reads a file as it is, to look into it (``chakra
    stats``): a repeated id is kept (see :func:`graph_from_columns`), a file without nodes is an empty
    graph."""
    from chakra.io import gc_paused

    with gc_paused():      # the finish step builds millions of tuples too: no GC rescans of them
        return _graph(read_columns(path, **how), rank, strict)


def load_graphs(paths: Sequence[str | os.PathLike[str]],
                ranks: Sequence[int | None] | None = None) -> list[RankGraph]:
    """:func:`load_graph` of several files (``ranks``: each one's ``rank`` argument), the files spread over
    the cores: a job's ranks are cut into :func:`chakra.io.forkmap.parts` runs of consecutive files of
    about equal bytes, each run read file after file (each file in one span) in a process of its own,
    the graphs coming back pickled (their columns are arrays: pickled as bytes).  One file, or one part:
    :func:`load_graph` of each (a file's spans spread over the cores).  The error of a file that cannot
    be read is the one :func:`load_graph` gives, the first in file order."""
    from chakra.io import gc_paused
    from chakra.io.forkmap import fork_map, parts

    todo = list(zip(paths, ranks if ranks is not None else repeat(None)))
    k = min(parts(), len(todo))
    if k <= 1:
        return [load_graph(path, rank) for path, rank in todo]
    upto = list(accumulate(os.stat(path).st_size for path, _ in todo))   # bytes of the files up to each
    total = upto[-1] or 1
    ends = [bisect.bisect_left(upto, total * j / k) + 1 for j in range(1, k)]
    cuts = sorted({0, *ends, len(todo)})
    runs = [todo[a:b] for a, b in zip(cuts, cuts[1:]) if a < b]
    with gc_paused():      # (unpickling builds as many objects as reading does)
        pieces = fork_map(_load_run, runs, f"reading {len(todo)} ranks")
    return list(chain.from_iterable(pieces))


def _load_run(run: list[tuple[str | os.PathLike[str], int | None]]) -> list[RankGraph]:
    """The graphs of consecutive files, read one after the other, each in one span (this is one of the
    processes :func:`load_graphs` spreads them over)."""
    return [load_graph(path, rank, span_bytes=sys.maxsize) for path, rank in run]    # (one span a file)


def _graph(cols: EtColumns, rank: int | None, strict: bool = True) -> RankGraph:
    if not cols.ids and strict:
        raise TraceFormatError("no nodes after the GlobalMetadata (a trace cut short?)", cols.path)
    return graph_from_columns(cols, rank, strict=strict)


class ReadAsWritten:
    """The reading of an ET file done while it is written (``chakra_converter --simulate``): the writer
    (``chakra.convert.write.SerialNodes.write_parts``) gives each batch of frames it writes to
    :meth:`piece`'s reader, in the process that writes them, and the file's name, the pieces' columns and
    the GlobalMetadata to :meth:`written`;
    :meth:`graph` is then what :func:`load_graph` of the file gives (the same bytes, decoded by the same
    :class:`ColumnBuilder`, joined as :func:`read_columns` joins the spans of a file), without reading it
    back.  A piece whose reading failed does not stop the writing: the file is then read back, and its
    error (if it has one) is that of :func:`load_graph`."""

    def __init__(self) -> None:
        self.cols: EtColumns | None = None
        self.path: str | None = None
        self.failed: str | None = None

    def piece(self, path: str) -> _PieceReader:
        return _PieceReader(path)

    def written(self, path: str, pieces: list[EtColumns | str], metadata: Any) -> None:
        self.path = path
        self.failed = next((p for p in pieces if isinstance(p, str)), None)
        if self.failed is None:
            cols = _joined(pieces)   # type: ignore[arg-type]
            cols.metadata = metadata
            self.cols = cols

    def graph(self, rank: int | None = None) -> RankGraph:
        """The RankGraph of the file written (once: the columns are taken over)."""
        from chakra.io import gc_paused

        cols, self.cols = self.cols, None
        if self.failed is not None and self.path is not None:
            log.warning("%s: reading it as it was written failed (%s); reading it "
                        "back", self.path, self.failed)
            self.failed = None
            return load_graph(self.path, rank)
        if cols is None:
            raise ValueError("nothing written yet (or the graph was already made)")
        with gc_paused():
            return _graph(cols, rank)


class _PieceReader:
    """The columns of one piece of an ET being written (:class:`ReadAsWritten`); the error of a failed
    reading as text (it stops only this reading)."""

    def __init__(self, path: str) -> None:
        self.cols = EtColumns(path=path, metadata=None)
        self.builder = ColumnBuilder(self.cols)
        self.error: str | None = None

    def add(self, first: int, frames: list[bytes]) -> None:
        if self.error is None:
            try:
                self.builder.add_frames(first, frames, self.cols.path)
            except Exception as exc:   # noqa: BLE001 - said by ReadAsWritten.graph, which reads the file
                self.error = f"{type(exc).__name__}: {exc}"

    def result(self) -> EtColumns | str:
        self.builder.release()
        return self.cols if self.error is None else self.error


def graph_from_protobuf(nodes: Any, metadata: Any = None, *, path: str | None = None,
                        rank: int | None = None) -> RankGraph:
    """Read protobuf ``Node`` messages (and the ``GlobalMetadata``) into a RankGraph."""
    from chakra.io import gc_paused

    with gc_paused():
        return graph_from_columns(columns_from_messages(nodes, metadata, path), rank)
