"""The replay's fast paths give exactly what the plain ones give.

* ``load_graph`` (batched reader, :mod:`chakra.replay.reader`) == ``graph_from_protobuf`` over the
  file's messages, field by field, and the same error on a damaged file -- on canonical files (the
  merged reading) and on files a proto3 encoder would not write (explicit defaults, a field twice, a
  varint field sent length-delimited, unpacked dependencies, an empty attribute, unknown fields),
  which the reader must notice and read node by node; with tiny chunks and batches too.
* the one-pass replay of one rank (``engine._simulate_one``) == the event loop, bit for bit.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import chakra.io.pbstream as pbstream
from chakra.errors import ChakraError
from chakra.io import read_messages
from chakra.io.naming import rank_from_filename
from chakra.io.pbstream import encode_varint as V
from chakra.replay import engine
from chakra.replay.graph import NodeSpec, graph_from_protobuf, graph_from_specs, load_graph
from chakra.schema import AttributeProto, GlobalMetadata, Node

FIELDS = ["ids", "names", "types", "durations", "starts", "deps", "is_cpu", "lanes", "comm", "parents",
          "ctrl_parent", "rank", "world_size", "process_groups", "measured_us", "measured_start_us", "path"]
ATTR_NAMES = ["is_cpu_op", "tid", "stream", "device", "pg_name", "comm_src", "comm_dst", "comm_tag", "rf_id",
              "host_tid", "cat"]


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
    path.write_bytes(b"".join(V(len(f)) + f for f in frames))


def _old_graph(path: Path):
    try:
        meta, nodes = read_messages(path, GlobalMetadata, Node)
        if not nodes:
            return ("error", "no nodes")
        return graph_from_protobuf(nodes, meta, path=os.fspath(path), rank=rank_from_filename(path))
    except ChakraError as exc:
        return ("error", str(exc))


def _new_graph(path: Path):
    try:
        return load_graph(path)
    except ChakraError as exc:
        return ("error", str(exc) if "no nodes" not in str(exc) else "no nodes")


@pytest.mark.parametrize("chunk,batch", [(None, None), (64, 200), (7, 1)])
def test_reader_equals_graph_from_protobuf(chunk, batch, tmp_path: Path, monkeypatch) -> None:
    if chunk is not None:
        monkeypatch.setattr(pbstream, "_CHUNK", chunk)
        monkeypatch.setattr(pbstream.iter_frame_batches, "__defaults__", (batch,))
    outcomes = {"graph": 0, "error": 0}
    for seed in range(120):
        rng = random.Random(seed)
        path = tmp_path / f"t.{seed % 5}.et"
        _write_random_et(rng, path, rng.choice([1, 2, 5, 40, 400]), canonical=rng.random() < 0.6)
        old, new = _old_graph(path), _new_graph(path)
        if isinstance(old, tuple) or isinstance(new, tuple):
            assert old == new, seed
            outcomes["error"] += 1
            continue
        outcomes["graph"] += 1
        for f in FIELDS:
            assert repr(getattr(old, f)) == repr(getattr(new, f)), (seed, f)
    assert outcomes["graph"] > 60 and outcomes["error"] > 5


def test_reader_takes_both_paths(tmp_path: Path, monkeypatch) -> None:
    """A canonical batch is read merged; one with a field twice is read node by node (same result)."""
    import chakra.replay.reader as reader

    taken = []
    real = reader._Reader.add_batch

    def spy(self, frames, classes):
        ok = real(self, frames, classes)
        taken.append(ok)
        return ok

    monkeypatch.setattr(reader._Reader, "add_batch", spy)
    rng = random.Random(5)
    for canonical in (True, False):
        path = tmp_path / "x.0.et"
        frames = [GlobalMetadata(version="0.0.4").SerializeToString()]
        frames += [_node(rng, nid, list(range(1, nid)), True, damage=False) for nid in range(1, 30)]
        if not canonical:
            frames[5] += _varint_field(6, 3)    # start_time_micros written twice: the last one counts
        path.write_bytes(b"".join(V(len(f)) + f for f in frames))
        g = load_graph(path)
        assert g.starts[4] == (3.0 if not canonical else g.starts[4])
        assert taken[-1] is canonical


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
    # node 3: not a CPU op, no stream or device, tid 0: the thread of a CPU op without a tid (the METADATA
    # node 4), so a host-thread record on ("cpu", 0)
    assert g.lanes == [("cpu", 3), ("gpu", 0, 7), ("cpu", 0), None]
    assert list(g.comm) == [1] and g.comm[1].pg_name == ""
    assert g.rank == 2


def _random_specs(rng: random.Random) -> list[NodeSpec]:
    n = rng.choice([2, 5, 20, 100, 300])
    ids = rng.sample(range(1, 3 * n), n)
    specs = []
    for k, nid in enumerate(ids):
        deps = rng.sample(ids[:k], min(k, rng.choice([0, 1, 1, 2, 3])))
        if rng.random() < 0.03 and k + 1 < n:
            deps.append(ids[k + 1])          # a dependency recorded later: the lane order is not the sort
        if rng.random() < 0.003:
            deps.append(nid)                 # a cycle
        start = rng.randrange(0, 10 * n) if rng.random() < 0.9 else 0
        dur = rng.choice([0, 1, 2, 5, 10, 50, 200])
        kind = rng.random()
        if kind < 0.5:
            specs.append(NodeSpec(id=nid, duration=dur, deps=deps, tid=rng.choice([1, 2]), start=start))
        elif kind < 0.6:                     # a gloo-like record on a host thread
            specs.append(NodeSpec(id=nid, duration=dur, deps=deps, is_cpu=False, start=start,
                                  lane=("cpu", rng.choice([1, 2]))))
        elif kind < 0.95:
            specs.append(NodeSpec(id=nid, duration=dur, deps=deps, is_cpu=False, stream=rng.choice([7, 8]),
                                  start=start, type=rng.choice([4, 4, 7])))
        else:
            specs.append(NodeSpec(id=nid, duration=dur, deps=deps, type=1, start=start))
    if rng.random() < 0.3:
        for s in specs:
            s.start = 0
    return specs


def _simulate(g, fast: bool, monkeypatch, **kw):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(engine, "_exact", lambda g: False)
        try:
            out = engine.simulate([g], **kw)
        except ChakraError as exc:
            return ("error", str(exc))
    return repr(out.starts), repr(out.ends), out.lane_order


def test_one_pass_replay_equals_event_loop(monkeypatch) -> None:
    compared = 0
    for seed in range(300):
        g = graph_from_specs(_random_specs(random.Random(seed)))
        assert engine._exact(g)
        for gaps in (True, False):
            for missing in ("error", "ignore"):
                fast = _simulate(g, True, monkeypatch, gaps=gaps, missing=missing)
                assert fast == _simulate(g, False, monkeypatch, gaps=gaps, missing=missing), (seed, gaps)
                compared += 1
    assert compared == 1200


def test_inexact_times_take_the_event_loop() -> None:
    """Fractional or huge times could round differently in another order: the general path replays them."""
    assert not engine._exact(graph_from_specs([NodeSpec(id=1, duration=1.5)]))
    assert not engine._exact(graph_from_specs([NodeSpec(id=1, duration=2.0**60)]))
    assert engine._exact(graph_from_specs([NodeSpec(id=1, duration=2.0), NodeSpec(id=2, start=9)]))


# ---- a large file read by two processes (reader._read_parallel) ----------------------------------------


@pytest.fixture
def parallel(monkeypatch):
    """Every file read by two processes; records whether the two-process reading delivered."""
    import chakra.io.forked as forked
    import chakra.replay.reader as reader

    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(reader, "PARALLEL_MAX_RSS", 1 << 60)
    monkeypatch.setattr(forked, "may_fork", lambda: True)
    delivered: list[bool] = []
    real = reader._read_parallel

    def spy(*args):
        g = real(*args)
        delivered.append(g is not None)
        return g

    monkeypatch.setattr(reader, "_read_parallel", spy)
    return delivered


def _graph_repr(path: Path):
    """The graph's fields (a set in order: two processes add the same elements in another order)."""
    g = _new_graph(path)
    if isinstance(g, tuple):
        return g
    return [repr(sorted(v) if isinstance(v, set) else v) for v in (getattr(g, f) for f in FIELDS)]


def test_parallel_reading_equals_one_reader(tmp_path: Path, monkeypatch, parallel) -> None:
    """Random files (canonical or not, damaged, ids out of order or repeated), split at every kind of place:
    the graph (or the error) of the reading alone."""
    import chakra.replay.reader as reader

    compared = 0
    for seed in range(60):
        rng = random.Random(1000 + seed)
        path = tmp_path / f"p.{seed % 3}.et"
        _write_random_et(rng, path, rng.choice([2, 40, 400, 1500]), canonical=rng.random() < 0.7)
        for share in (0.5, rng.random()):
            monkeypatch.setattr(reader, "_SHARE", share)
            del parallel[:]
            new = _graph_repr(path)
            assert parallel, seed
            with monkeypatch.context() as m:
                m.setattr(reader, "PARALLEL_MIN_BYTES", 1 << 60)
                alone = _graph_repr(path)
            assert new == alone, (seed, share)
            compared += parallel[0]
    assert compared > 40      # most random files are read by two processes (the others: an error, ...)


def test_parallel_reading_merges_interleaved_ids(tmp_path: Path, parallel, monkeypatch) -> None:
    """CPU ops 1..n and their kernels 10^6.. interleaved (a converter's order): merged by slices (4 here),
    and by one sort when the parts alternate too often; equal to the reading alone both ways."""
    import chakra.replay.reader as reader

    cpu = AttributeProto(name="is_cpu_op", bool_val=True)
    gpu = AttributeProto(name="is_cpu_op", bool_val=False)
    stream = AttributeProto(name="stream", int64_val=7)
    frames = [GlobalMetadata(version="0.0.4")]
    for k in range(1, 2001):
        n = Node(id=k, name="op", type=4, start_time_micros=k, duration_micros=1,
                 ctrl_deps=[k - 1] if k > 1 else [])
        n.attr.append(cpu)
        frames.append(n)
        n = Node(id=10**6 + k, name="kernel", type=4, start_time_micros=k, duration_micros=2, data_deps=[k])
        n.attr.extend([gpu, stream])
        frames.append(n)
    path = tmp_path / "i.0.et"
    path.write_bytes(b"".join(V(len(m.SerializeToString())) + m.SerializeToString() for m in frames))
    blocks = []
    real = reader._merge_blocks
    monkeypatch.setattr(reader, "_merge_blocks", lambda a, b: blocks.append(real(a, b)) or blocks[-1])
    new = _graph_repr(path)
    assert parallel == [True] and len(blocks[0]) == 4
    monkeypatch.setattr(reader, "_INSERT_BLOCKS", 2)       # copied slice by slice
    assert _graph_repr(path) == new and len(blocks[1]) == 4 and parallel == [True, True]
    monkeypatch.setattr(reader, "_MAX_BLOCKS", 2)          # one sort
    assert _graph_repr(path) == new and blocks[2] is None and parallel == [True, True, True]
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 1 << 60)
    assert _graph_repr(path) == new
    g = load_graph(path)
    assert g.ids[1999:2001] == [2000, 10**6 + 1] and g.durations[1999:2001] == [1.0, 2.0]
    assert g.lanes[1999:2001] == [("cpu", 0), ("gpu", 0, 7)]


def test_parallel_reading_falls_back(tmp_path: Path, parallel, monkeypatch) -> None:
    """A child that fails, a child part that does not start where this process stops, an id in both parts,
    a damaged message in either part: the reading alone (same graph, same error)."""
    import chakra.io.forked as forked
    import chakra.replay.reader as reader

    rng = random.Random(3)
    path = tmp_path / "f.1.et"
    frames = [GlobalMetadata(version="0.0.4").SerializeToString()]
    frames += [_node(rng, nid, list(range(1, nid)), True, damage=False) for nid in range(1, 401)]
    path.write_bytes(b"".join(V(len(f)) + f for f in frames))
    with monkeypatch.context() as m:
        m.setattr(reader, "PARALLEL_MIN_BYTES", 1 << 60)
        alone = _graph_repr(path)
    assert not isinstance(alone, tuple)
    assert _graph_repr(path) == alone and parallel == [True]
    # the child dies
    with monkeypatch.context() as m:
        m.setattr(reader, "_read_part", lambda *a: os._exit(3))
        assert _graph_repr(path) == alone and parallel[-1] is False
    # the child's part starts elsewhere
    with monkeypatch.context() as m:
        real = reader._read_part
        m.setattr(reader, "_read_part", lambda *a: (lambda r: (r[0] + 1, r[1]))(real(*a)))
        assert _graph_repr(path) == alone and parallel[-1] is False
    # no fork
    with monkeypatch.context() as m:
        m.setattr(forked.ForkedCall, "started", property(lambda self: False))
        assert _graph_repr(path) == alone and parallel[-1] is False
    # damaged messages and repeated ids, early or late in the file
    data = path.read_bytes()
    head = pbstream.decode_varint(data, 0)
    starts = [head[1] + head[0]]
    while starts[-1] < len(data):
        length, start = pbstream.decode_varint(data, starts[-1])
        starts.append(start + length)
    for k in (1, 100, 300, 399):
        bad = data[:starts[k]] + V(3) + b"\x08\xff\xff" + data[starts[k]:]       # a truncated id varint
        path.write_bytes(bad)
        with monkeypatch.context() as m:
            m.setattr(reader, "PARALLEL_MIN_BYTES", 1 << 60)
            expected = _graph_repr(path)
        assert isinstance(expected, tuple) and f"message {k + 1} " in expected[1]
        assert _graph_repr(path) == expected and parallel[-1] is False
        node = Node(id=rng.choice([1, 200, 400]), name="again")
        body = node.SerializeToString()
        dup = data[:starts[k]] + V(len(body)) + body + data[starts[k]:]
        path.write_bytes(dup)
        with monkeypatch.context() as m:
            m.setattr(reader, "PARALLEL_MIN_BYTES", 1 << 60)
            expected = _graph_repr(path)
        assert isinstance(expected, tuple) and "appears twice" in expected[1]
        assert _graph_repr(path) == expected and parallel[-1] is False


def test_frame_batches_from_a_byte_position(tmp_path: Path, monkeypatch) -> None:
    """iter_frame_batches_from(stop=...) starts at the first message that starts at stop or later, with its
    number."""
    from chakra.io.pbstream import iter_frame_batches_from

    monkeypatch.setattr(pbstream, "_CHUNK", 50)
    bodies = [b"\x08" + bytes([0xC0 + k]) * (k % 7 + 1) for k in range(1, 40)]
    bodies += [b"\x08" + b"x" * 300, b"\x08\x01"]
    data = b"".join(V(len(b)) + b for b in bodies)
    path = tmp_path / "s.et"
    path.write_bytes(data)
    starts = [0]
    for b in bodies:
        starts.append(starts[-1] + len(V(len(b))) + len(b))
    for stop in range(0, len(data) + 2):
        k = next((i for i, s in enumerate(starts) if s >= stop), len(bodies))
        index, at, batches = iter_frame_batches_from(path, 0, 0, stop)
        got = [f for _, frames in batches for f in frames]
        assert (index, at) == (k, starts[min(k, len(bodies))]), stop
        assert got == [V(len(b)) + b for b in bodies[k:]], stop
    # a frame cut short after the stop: the error of the whole reading, from the batches
    path.write_bytes(data[:-1])
    _, _, batches = iter_frame_batches_from(path, 0, 0, starts[5])
    with pytest.raises(ChakraError, match="message 40 is truncated: needs 2 bytes, 1 left"):
        list(batches)


def test_parallel_plan_rules(tmp_path: Path, monkeypatch) -> None:
    """Two processes only for a plain file of PARALLEL_MIN_BYTES or more, with fork, in a small process;
    the stop divides the node bytes by _SHARE."""
    import gzip

    import chakra.io.forked as forked
    import chakra.replay.reader as reader

    monkeypatch.setattr(forked, "may_fork", lambda: True)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 1000)
    monkeypatch.setattr(reader, "PARALLEL_MAX_RSS", 1 << 60)
    monkeypatch.setattr(reader, "_SHARE", 0.5)
    head = GlobalMetadata(version="0.0.4").SerializeToString()            # 7 bytes
    body = Node(id=1, name="x" * 1000).SerializeToString()
    path = tmp_path / "p.0.et"
    path.write_bytes(V(len(head)) + head + V(len(body)) + body)
    size = path.stat().st_size
    assert reader._parallel_plan(path) == (8, 8 + (size - 8) // 2)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", size + 1)
    assert reader._parallel_plan(path) is None
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 10)
    monkeypatch.setattr(reader, "PARALLEL_MAX_RSS", 1 << 20)              # this process is larger
    assert reader._parallel_plan(path) is None
    monkeypatch.setattr(reader, "PARALLEL_MAX_RSS", 1 << 60)
    monkeypatch.setattr(forked, "may_fork", lambda: False)
    assert reader._parallel_plan(path) is None
    monkeypatch.setattr(forked, "may_fork", lambda: True)
    gz = tmp_path / "p.0.et.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert reader._parallel_plan(gz) is None
    path.write_bytes(V(len(head)) + head)                                  # no nodes
    assert reader._parallel_plan(path) is None
