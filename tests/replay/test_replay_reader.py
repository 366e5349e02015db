"""The replay's reader gives exactly what plain Python over the messages gives.

* ``load_graph`` (the batched reader, :mod:`chakra.replay.reader`) == the plain reading of the file's
  messages one at a time (``tests/replay_oracle.py``, the reader the replay had before), field by field,
  and the same error on a damaged file -- on canonical files (the merged reading) and on files a proto3
  encoder would not write (explicit defaults, a field twice, a varint field sent length-delimited,
  unpacked dependencies, an empty attribute, unknown fields), which the reader must notice and read node
  by node; with tiny chunks and batches, a tiny attribute cache and attributes decoded where they occur.
"""

from __future__ import annotations

import os
import random
from array import array
from collections.abc import Mapping
from pathlib import Path

import pytest
from helpers.replay_oracle import graph_from_protobuf

import chakra.io.forkmap as forkmap
import chakra.io.pbstream as pbstream
import chakra.replay.etdecode as etdecode
from chakra.errors import ChakraError
from chakra.io import read_messages
from chakra.io.naming import rank_from_filename
from chakra.io.pbstream import encode_varint as V
from chakra.replay.graph import DepsCSR, IntColumn
from chakra.replay.reader import CacheSizes, load_graph
from chakra.schema import AttributeProto, GlobalMetadata, Node

FIELDS = ["ids", "names", "types", "durations", "starts", "deps", "is_cpu", "lanes", "comm", "parents",
          "ctrl_parent", "rank", "world_size", "process_groups", "measured_us", "measured_start_us", "path"]
ATTR_NAMES = ["is_cpu_op", "tid", "stream", "device", "pg_name", "comm_src", "comm_dst", "comm_tag", "rf_id",
              "host_tid", "cat", "fw_tid", "wait_on", "thread_depth", "comm_seq", "tail_us", "comm_size"]


def _field(num: int, wire: int, payload: bytes) -> bytes:
    return V((num << 3) | wire) + payload


def _varint_field(num: int, v: int) -> bytes:
    return _field(num, 0, V(v & ((1 << 64) - 1)))


def _bytes_field(num: int, b: bytes) -> bytes:
    return _field(num, 2, V(len(b)) + b)


def _attr(rng: random.Random) -> bytes:
    a = AttributeProto(name=rng.choice(ATTR_NAMES))
    kind = rng.choice(["bool", "i64", "i64", "i32", "str", "dbl", "list"])
    if kind == "bool":
        a.bool_val = rng.random() < 0.7
    elif kind == "i64":
        a.int64_val = rng.choice([0, 1, 2, 7, 10000, -1, rng.randrange(10**6)])
    elif kind == "i32":
        a.int32_val = rng.choice([0, 1, 7, -1])
    elif kind == "str":
        a.string_val = rng.choice(["", "0", "1", "pg", "7"])
    elif kind == "dbl":
        a.double_val = rng.choice([0.0, 1.5, 7.0])
    else:
        a.int64_list.values.extend([1, 2])
    return a.SerializeToString()


def _node(rng: random.Random, nid: int, ids: list[int], canonical: bool, damage: bool = True) -> bytes:
    parts = []
    name = rng.choice(["op", "", "kernel", "aten::mm"])
    ntype = rng.choice([4, 4, 4, 7, 5, 6, 1, 0])
    start = rng.choice([0, 0, 5, 10, 30, 100])
    dur = rng.choice([0, 1, 3, 10, 50])
    for num, value, wire in ((1, nid, 0), (2, name, 2), (3, ntype, 0), (6, start, 0), (7, dur, 0)):
        if value or not canonical:
            parts.append(_bytes_field(num, value.encode()) if wire == 2 else _varint_field(num, value))
    ctrl = rng.sample(ids, k=min(len(ids), rng.choice([0, 1, 1, 2])))
    data = rng.sample(ids, k=min(len(ids), rng.choice([0, 0, 1, 2, 3])))
    if ctrl:
        parts.append(_bytes_field(4, b"".join(V(x) for x in ctrl)))
    if data:
        if canonical or rng.random() < 0.5:
            parts.append(_bytes_field(5, b"".join(V(x) for x in data)))
        else:
            parts.extend(_varint_field(5, x) for x in data)          # unpacked
    if ntype == 1 and rng.random() < 0.5:
        parts.append(_bytes_field(8, _bytes_field(1, b"['[{\"pg_name\": \"0\", \"ranks\": [0, 1]}]']")))
    parts.extend(_bytes_field(10, _attr(rng)) for _ in range(rng.choice([0, 1, 2, 3, 5])))
    if damage and rng.random() < 0.004:     # a damaged attribute: a name that is not UTF-8, a truncated value
        parts.append(_bytes_field(10, rng.choice([b"\x0a\x02\xff\xfe", b"\x48", b"\x0a\x03tid\x48"])))
    if not canonical:
        r = rng.random()
        if r < 0.15:
            parts.append(_bytes_field(1, V(5)))          # id with the length-delimited wire type
        elif r < 0.3:
            parts.append(_varint_field(6, 7))            # start twice
        elif r < 0.4:
            parts.append(_bytes_field(10, b""))          # an empty attribute
        elif r < 0.5:
            parts.append(_varint_field(99, 1))           # an unknown field
        if rng.random() < 0.3:
            rng.shuffle(parts)
    return b"".join(parts)


def _write_random_et(rng: random.Random, path: Path, n: int, canonical: bool) -> None:
    ids = list(range(1, n + 1)) if rng.random() < 0.7 else rng.sample(range(0, 3 * n + 3), n)
    if rng.random() < 0.1 and n > 2:
        ids[-1] = ids[0]                                 # a duplicate id
    order = list(ids)
    if rng.random() < 0.3:
        rng.shuffle(order)
    frames = [GlobalMetadata(version="0.0.4").SerializeToString()]
    frames += [_node(rng, nid, ids, canonical) for nid in order]
    if rng.random() < 0.05:
        frames[-1] = frames[-1][:-1] or b"\xff"          # a damaged last message
    data = b"".join(V(len(f)) + f for f in frames)
    if rng.random() < 0.05:
        data = data[:rng.randrange(len(frames[0]) + 2, len(data))]     # a stream cut short
    path.write_bytes(data)


def _old_graph(path: Path):
    try:
        meta, nodes = read_messages(path, GlobalMetadata, Node)
        if not nodes:
            return ("error", "no nodes")
        return graph_from_protobuf(nodes, meta, path=os.fspath(path), rank=rank_from_filename(path))
    except ChakraError as exc:
        return ("error", str(exc))


def _new_graph(path: Path, **how):
    try:
        return load_graph(path, **how)
    except ChakraError as exc:
        return ("error", str(exc) if "no nodes" not in str(exc) else "no nodes")


def _fields(g):
    """The graph's fields, comparable: sets and mappings in a fixed order (two readers fill them in another),
    columns as lists."""
    out = []
    for f in FIELDS:
        v = getattr(g, f)
        if isinstance(v, set):
            v = sorted(v)
        elif isinstance(v, Mapping):
            v = sorted(v.items())
        elif isinstance(v, (DepsCSR, array)):
            v = list(v)
        out.append(repr(v))
    # what a read graph keeps of the file as written (the oracle's file_pos sorts all nodes, the reader's
    # the prefix it moves: the same file order)
    out += [repr(list(g.nctrl)), repr(list(g.no_cpu_attr)), repr(list(g.file_order()))]
    out.append(repr(sorted((name, sorted(d.items())) for name, d in g.extra.items())))
    return out


@pytest.mark.parametrize("chunk,batch,values_max,attr_max,span_min", [
    (None, None, None, None, None), (64, 200, None, None, None), (7, 1, None, None, None),
    (None, None, 1, None, None),       # attributes of the names the replay reads decoded where they occur
    (None, 3000, 2, 40, None),         # a cache that fills up
    (None, None, None, None, 64),      # the file read in 3 spans, two of them in other processes
    (40, 300, 2, None, 1),             # 3 spans of tiny chunks and batches (cut anywhere)
    # 3 spans, chunks shorter than a length varint can be (slow, 8-18 s: the quick run has each of the two
    # in (7, 1, None, None, None) and (40, 300, 2, None, 1))
    pytest.param(7, 1, None, None, 1, marks=pytest.mark.slow),
])
def test_reader_equals_the_plain_reading(chunk, batch, values_max, attr_max, span_min, tmp_path: Path,
                                         monkeypatch) -> None:
    how: dict = {}
    if span_min is not None:
        how["span_bytes"] = span_min
        monkeypatch.setenv("CHAKRA_PARTS", "3")
    spans: list[int] = []
    real_map = forkmap.fork_map
    monkeypatch.setattr(forkmap, "fork_map", lambda fn, pieces, what: spans.append(len(pieces))
                        or real_map(fn, pieces, what))
    if chunk is not None:
        monkeypatch.setattr(pbstream, "READ_CHUNK_BYTES", chunk)
    if batch is not None:
        monkeypatch.setattr(pbstream, "DECODE_BATCH_BYTES", batch)
    if values_max is not None or attr_max is not None:
        how["cache"] = CacheSizes(**{k: v for k, v in (("values", values_max), ("attrs", attr_max)) if v})
    outcomes = {"graph": 0, "error": 0}
    for seed in range(120):
        rng = random.Random(seed)
        path = tmp_path / f"t.{seed % 5}.et"
        _write_random_et(rng, path, rng.choice([1, 2, 5, 40, 400]), canonical=rng.random() < 0.6)
        old, new = _old_graph(path), _new_graph(path, **how)
        if isinstance(old, tuple) or isinstance(new, tuple):
            assert old == new, seed
            outcomes["error"] += 1
            continue
        outcomes["graph"] += 1
        assert _fields(old) == _fields(new), seed
    assert outcomes["graph"] > 60 and outcomes["error"] > 5
    assert max(spans) == (1 if span_min is None else 3)


def test_reader_reads_what_a_proto3_encoder_does_not_write(tmp_path: Path) -> None:
    """Values a proto3 encoder never writes: the full ``Node``'s reading of them, worked out by hand.

    Node 2 has its start written twice (the last counts: 3), node 3 an explicit 0 start and a dependency
    on node 0, node 4 an id sent length-delimited (not a uint64 to ``Node``: ignored, id 4 stays), node 5
    an attribute whose name is written out empty (the reader's sentinel) and ``tid`` twice (the last: 8)."""
    def frame(*parts: bytes) -> bytes:
        body = b"".join(parts)
        return V(len(body)) + body

    def node(nid: int, start: int, *extra: bytes) -> bytes:
        cpu = AttributeProto(name="is_cpu_op", bool_val=True).SerializeToString()
        return frame(_varint_field(1, nid), _bytes_field(2, b"op"), _varint_field(3, 4),
                     _varint_field(6, start), _varint_field(7, 2), _bytes_field(10, cpu), *extra)

    def tid(v: int) -> bytes:
        return _bytes_field(10, AttributeProto(name="tid", int64_val=v).SerializeToString())

    meta = GlobalMetadata(version="0.0.4").SerializeToString()
    nodes = [node(1, 10, tid(7)), node(2, 20, tid(7), _varint_field(6, 3)),
             node(3, 0, tid(7), _bytes_field(5, V(0) + V(1)), _varint_field(6, 0)),
             node(4, 40, _bytes_field(1, V(9)), tid(7)),
             node(5, 50, _bytes_field(10, b"\x0a\x00"), tid(7), tid(8))]
    for order in (nodes, nodes[3:4]):         # the odd nodes among others, and one alone
        path = tmp_path / "x.0.et"
        path.write_bytes(V(len(meta)) + meta + b"".join(order))
        g = load_graph(path)
        if len(order) == 1:
            assert g.ids == [4] and g.starts == [40.0] and g.lanes == [("cpu", 7)]
            continue
        assert g.ids == [1, 2, 3, 4, 5]
        assert g.starts == [10.0, 3.0, 0.0, 40.0, 50.0]
        assert g.deps == [(), (), (0, 1), (), ()]
        assert g.lanes == [("cpu", 7)] * 4 + [("cpu", 8)]


def test_attributes_with_ever_new_values_are_not_cached(tmp_path: Path, monkeypatch) -> None:
    """wait_on holds a node id: after _VALUES_MAX values it is decoded where it occurs, in bulk, and the cache
    stays small; fw_tid (which holds the bytes "tid") is never taken for a tid."""
    import chakra.replay.reader as reader

    n = CacheSizes().values + 3000
    frames = [GlobalMetadata(version="0.0.4")]
    for k in range(1, n + 1):
        node = Node(id=k, name="op", type=4, start_time_micros=k, duration_micros=1,
                    data_deps=[k - 1] if k > 1 else [])
        node.attr.extend([AttributeProto(name="is_cpu_op", bool_val=True),
                          AttributeProto(name="fw_tid", int64_val=9), AttributeProto(name="tid", int64_val=2),
                          AttributeProto(name="rf_id", int64_val=k)])
        if k > 1:
            node.attr.append(AttributeProto(name="wait_on", int64_val=k - 1))
        frames.append(node)
    path = tmp_path / "w.0.et"
    path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString() for m in frames))
    monkeypatch.setattr(pbstream, "DECODE_BATCH_BYTES", 20_000)     # ~500 nodes a batch
    decoded = []
    real = etdecode._classify_bytes
    monkeypatch.setattr(etdecode, "_classify_bytes", lambda raw: decoded.append(raw) or real(raw))
    bulk = []
    real_bulk = etdecode._bulk_infos
    monkeypatch.setattr(etdecode, "_bulk_infos", lambda raws: bulk.append(len(raws)) or real_bulk(raws))
    cols = reader.read_columns(path)
    assert cols.extras()["wait_on"] == {k: k for k in range(1, n)}      # index k: node k + 1 waits on node k
    assert set(cols.lanes) == {("cpu", 2)} and cols.cpu == [True] * n
    # each wait_on value decoded alone up to the batch where the name turned out to change all the time,
    # in bulk after that
    assert len(decoded) < CacheSizes().values + 600 and sum(bulk) > 2000
    assert n - 1 == sum(bulk) + sum(b"wait_on" in raw for raw in decoded)


def test_reader_sorts_nodes_by_id(tmp_path: Path) -> None:
    """A METADATA node written first (id 4 before 1, 2, 3): index order is id order, comm info follows."""
    def node(nid: int, ntype: int, *attrs: AttributeProto) -> Node:
        n = Node(id=nid, name=f"n{nid}", type=ntype, duration_micros=nid)
        n.attr.extend(attrs)
        return n

    cpu = AttributeProto(name="is_cpu_op", bool_val=True)
    gpu = AttributeProto(name="is_cpu_op", bool_val=False)
    tid3 = AttributeProto(name="tid", int64_val=3)
    stream7 = AttributeProto(name="stream", int64_val=7)
    world = AttributeProto(name="pg_name", string_val="")
    frames = [GlobalMetadata(version="0.0.4"), node(4, 1, cpu), node(1, 4, cpu, tid3),
              node(2, 7, gpu, stream7, world), node(3, 4, gpu)]
    path = tmp_path / "s.2.et"
    path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString() for m in frames))
    g = load_graph(path)
    assert g.ids == [1, 2, 3, 4]
    assert g.durations == [1.0, 2.0, 3.0, 4.0]
    # node 3: not a CPU op, no tid, stream or device: a device op (compute), although a CPU op (the
    # METADATA node 4) has no tid either
    assert g.lanes == [("cpu", 3), ("gpu", 0, 7), ("gpu", 0, 0), None]
    assert list(g.comm) == [1] and g.comm[1].pg_name == ""
    assert g.rank == 2


def test_dependencies_on_node_0_keep_the_merged_reading(tmp_path: Path, monkeypatch) -> None:
    """Node 0 is a dependency of nodes 1 and 3 (as in every generated ET): the batch is read merged, never
    re-encoded (a dependency is written even when 0, so 0 cannot be the dependencies' sentinel; it was:
    every such batch was re-encoded and split in halves, 1.9x the reading of a 20k-node generated rank).
    A dependency on the sentinel itself (2^64-1) is still read, re-encoded and split."""
    def node(nid: int, ctrl: list[int], data: list[int]) -> Node:
        n = Node(id=nid, name=f"n{nid}", type=4, duration_micros=nid + 1, ctrl_deps=ctrl, data_deps=data)
        n.attr.append(AttributeProto(name="is_cpu_op", bool_val=False))
        return n

    top = (1 << 64) - 1
    ok = [node(0, [], []), node(1, [], [0]), node(2, [], []), node(3, [0], [1, 2]), node(4, [3], [])]
    odd = [node(0, [], []), node(1, [], [top]), node(2, [0], [1])]
    canon = etdecode._canonical
    called: list[int] = []
    monkeypatch.setattr(etdecode, "_canonical", lambda frames: called.append(len(frames)) or canon(frames))
    for nodes, want_deps, want_called in ((ok, [(), (0,), (), (0, 1, 2), (3,)], []),
                                          (odd, [(), (top,), (0, 1)], [3])):
        called.clear()
        frames = [GlobalMetadata(version="0.0.4"), *nodes]
        path = tmp_path / "d.0.et"
        path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString() for m in frames))
        g = load_graph(path, span_bytes=1 << 20)
        assert g.ids == list(range(len(nodes)))
        assert g.deps == want_deps
        assert g.durations == [float(k + 1) for k in range(len(nodes))]
        assert called == want_called


def test_read_graph_holds_columns_that_read_like_lists_and_dicts(tmp_path: Path) -> None:
    """A read graph's ids and types are arrays (IntColumn), its dependencies rows of one array (DepsCSR),
    its comm infos one table of the distinct ones (CommTable: the collectives of one group share an
    info), and comm_type/comm_size sparse arrays: each reads back what the lists and dicts held (same
    values, same types)."""
    def node(nid: int, ntype: int, deps: list[int], *attrs: AttributeProto) -> Node:
        n = Node(id=nid, name=f"n{nid}", type=ntype, duration_micros=3, data_deps=deps)
        n.attr.extend(attrs)
        return n

    gpu = AttributeProto(name="is_cpu_op", bool_val=False)
    pg = AttributeProto(name="pg_name", string_val="tp")
    coll = [AttributeProto(name="comm_type", int64_val=0),
            AttributeProto(name="comm_size", int64_val=1 << 40)]
    dp = [AttributeProto(name="pg_name", string_val="dp"), AttributeProto(name="comm_size", double_val=2.5)]
    frames = [GlobalMetadata(version="0.0.4"), node(0, 4, [], gpu),
              node(1, 7, [0], gpu, pg, *coll), node(2, 4, [0, 1], gpu),
              node(3, 7, [2], gpu, pg, *coll), node(4, 7, [3], gpu, *dp)]
    path = tmp_path / "c.0.et"
    path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString() for m in frames))
    g = load_graph(path)
    assert isinstance(g.ids, IntColumn) and isinstance(g.types, IntColumn)
    assert g.ids == [0, 1, 2, 3, 4] and not g.ids != [0, 1, 2, 3, 4] and g.ids != [0, 1, 2, 3]
    assert g.types == [4, 7, 4, 7, 7] and g.ids.index(3) == 3 and type(g.ids[1]) is int
    assert IntColumn.of("Q", [1, -1]) == [1, -1]          # (not uint64: kept as the list)
    assert isinstance(g.deps, DepsCSR)
    assert g.deps == [(), (0,), (0, 1), (2,), (3,)] and g.deps[2] == (0, 1) and g.deps[-1] == (3,)
    assert list(g.deps) == [(), (0,), (0, 1), (2,), (3,)] and len(g.deps) == 5
    assert list(g.comm) == [1, 3, 4] and 2 not in g.comm and g.comm.get(2) is None
    assert g.comm[1] is g.comm[3] and g.comm[1].pg_name == "tp" and g.comm[4].pg_name == "dp"
    assert dict(g.comm.items()) == {1: g.comm[1], 3: g.comm[1], 4: g.comm[4]}
    assert dict(g.extra["comm_type"].items()) == {1: 0, 3: 0}
    sizes = g.extra["comm_size"]
    assert [(i, v, type(v)) for i, v in sizes.items()] == [(1, 1 << 40, int), (3, 1 << 40, int),
                                                           (4, 2.5, float)]
    assert sizes.get(2, 0) == 0 and 4 in sizes and sizes[4] == 2.5
    assert DepsCSR.of([(1,), (-1,)]) == [(1,), (-1,)]     # (not uint64: kept as the list of rows)


def test_a_file_read_as_it_is_keeps_its_order_repeats_and_split(tmp_path: Path) -> None:
    """Messages 1-4 are nodes 3, 1, 2, 1: node 1 twice (message 4 repeats it), node 2 with ctrl_deps
    [1] and data_deps [3, 1], node 3 without an ``is_cpu_op``.  Read strictly it is an error; read as it
    is, the graph is in id order with the two nodes 1 in file order (durations 1 then 4), the file
    order and the ctrl/data split are kept, and node 3 (index 3) is the one without ``is_cpu_op``."""
    cpu = AttributeProto(name="is_cpu_op", bool_val=True)

    def node(nid: int, dur: int, ctrl: list[int], data: list[int], *attrs: AttributeProto) -> Node:
        return Node(id=nid, name=f"n{nid}", type=4, duration_micros=dur, ctrl_deps=ctrl, data_deps=data,
                    attr=list(attrs))

    frames = [GlobalMetadata(version="0.0.4"), node(3, 3, [], []), node(1, 1, [], [], cpu),
              node(2, 2, [1], [3, 1], cpu), node(1, 4, [], [], cpu)]
    path = tmp_path / "r.0.et"
    path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString() for m in frames))
    with pytest.raises(ChakraError, match=r"node id 1 appears twice \(message 4\)"):
        load_graph(path)
    g = load_graph(path, strict=False)
    assert g.ids == [1, 1, 2, 3] and g.durations == [1.0, 4.0, 2.0, 3.0]
    assert g.repeated == (1, 4)
    assert [g.ids[i] for i in g.file_order()] == [3, 1, 2, 1]
    assert [g.durations[i] for i in g.file_order()] == [3.0, 1.0, 2.0, 4.0]
    assert g.deps[2] == (1, 3, 1) and list(g.nctrl) == [0, 0, 1, 0]
    assert list(g.no_cpu_attr) == [3] and g.is_cpu == [True, True, True, False]
    # a file in id order keeps no file positions; one without nodes is an empty graph
    path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString()
                              for m in [frames[0], frames[2], frames[3]]))
    g = load_graph(path)
    assert list(g.file_pos) == [] and list(g.file_order()) == [0, 1] and g.repeated is None
    path.write_bytes(V(len(frames[0].SerializeToString())) + frames[0].SerializeToString())
    assert len(load_graph(path, strict=False)) == 0
    with pytest.raises(ChakraError, match="no nodes"):
        load_graph(path)
