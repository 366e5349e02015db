"""JSON(.gz) reading, atomic writes and the length-delimited stream."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import orjson
import pytest
from helpers.memory import traced_bytes_per_object

from chakra.errors import TraceFormatError
from chakra.io import (
    atomic_output,
    decode_varint,
    dump_json,
    encode_varint,
    jsonio,
    load_json,
    read_messages,
    write_messages,
)
from chakra.io.jsonio import dump_json_ranges, dumps_kept
from chakra.schema import GlobalMetadata, Node


def test_gzip_detected_by_magic_not_name(tmp_path: Path) -> None:
    p = tmp_path / "trace.json"  # gzip bytes under a .json name
    p.write_bytes(gzip.compress(b'{"a": 1}'))
    assert load_json(p) == {"a": 1}
    q = tmp_path / "plain.json.gz"  # plain bytes under a .gz name
    q.write_bytes(b'{"b": [1, 2.5]}')
    assert load_json(q) == {"b": [1, 2.5]}


@pytest.mark.parametrize(
    "payload, needle",
    [
        (b"", "empty"),
        (b"{\"nodes\": [", "not valid JSON"),
        (gzip.compress(b'{"nodes": []}')[:-9], "gzip"),
        (b"[1, 2]", "expected a JSON object"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)
def test_bad_json_names_file(tmp_path: Path, payload: bytes, needle: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(payload)
    with pytest.raises(TraceFormatError) as exc:
        load_json(p)
    assert str(p) in str(exc.value) and needle in str(exc.value)


def test_nan_tolerated(tmp_path: Path) -> None:
    p = tmp_path / "nan.json"
    p.write_bytes(b'{"dur": NaN}')
    d = load_json(p)
    assert d["dur"] != d["dur"]


def test_dump_json_gz_roundtrip_and_atomic(tmp_path: Path) -> None:
    out = tmp_path / "o.json.gz"
    dump_json(out, {"x": [1, 2]})
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert load_json(out) == {"x": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["o.json.gz"]


def test_atomic_output_keeps_old_file_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "keep.et"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_output(out) as fh:
            fh.write(b"new partial")
            raise RuntimeError("boom")
    assert out.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["keep.et"]


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"),
                                            (128, b"\x80\x01"), (300, b"\xac\x02"),
                                            (2**32, b"\x80\x80\x80\x80\x10")])
def test_varint(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_stream_roundtrip_and_truncation(tmp_path: Path) -> None:
    out = tmp_path / "a.et"
    nodes = [Node(id=i, name=f"n{i}") for i in range(1, 4)]
    assert write_messages(out, [GlobalMetadata(version="0.0.4"), *nodes]) == 4
    gm, back = read_messages(out, GlobalMetadata, Node)
    assert gm.version == "0.0.4" and [n.id for n in back] == [1, 2, 3]
    data = out.read_bytes()
    cut = tmp_path / "cut.et"
    cut.write_bytes(data[:-2])
    with pytest.raises(TraceFormatError, match="message 3 is truncated"):
        read_messages(cut, GlobalMetadata, Node)


def test_refuses_empty_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty message"):
        write_messages(tmp_path / "e.et", [GlobalMetadata()])
    assert not (tmp_path / "e.et").exists()


def test_atomic_output_honours_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with atomic_output(tmp_path / "m.json") as fh:
            fh.write(b"{}")
    finally:
        os.umask(old)
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o644




@pytest.mark.parametrize("name", ["items.json", "items.json.gz"])
def test_dump_json_ranges_one_piece_is_the_documents_bytes(tmp_path: Path, name: str) -> None:
    # several batches (3 items each), items as dicts and as pre-encoded text
    items = [{"id": i, "x": [i, 0.5]} if i % 2 else orjson.Fragment(b'{"id":%d}' % i) for i in range(10)]
    data = {"schema": "s", "nodes": None, "tail": {"k": 1}}
    out = tmp_path / name
    dump_json_ranges(out, data, "nodes", [range(0)], lambda _: iter(items), batch=3)   # one piece
    want = orjson.dumps({**data, "nodes": items})
    assert want.startswith(b'{"schema":"s","nodes":[{"id":0},{"id":1,"x":[1,0.5]},')
    if name.endswith(".gz"):
        assert out.read_bytes() == gzip.compress(want, compresslevel=6, mtime=0)
    else:
        assert out.read_bytes() == want


def _numbered(r: range) -> object:
    # the items of positions r, made in whichever process runs the piece
    return ({"id": i, "pid": 0} if i % 2 else orjson.Fragment(b'{"id":%d}' % i) for i in r)


@pytest.mark.parametrize("name", ["items.json", "items.json.gz"])
def test_dump_json_ranges_is_the_documents_bytes_for_any_pieces(tmp_path: Path, name: str) -> None:
    # 23 items in batches of 3, in one piece, two and three (each after the first in a child of its own)
    data = {"schema": "s", "nodes": None, "tail": {"k": 1}}
    want = orjson.dumps({**data, "nodes": list(_numbered(range(23)))})
    assert want.startswith(b'{"schema":"s","nodes":[{"id":0},{"id":1,"pid":0},{"id":2},')
    for cuts in ([0, 23], [0, 4, 23], [0, 1, 20, 23]):
        pieces = [range(a, b) for a, b in zip(cuts, cuts[1:])]
        out = tmp_path / f"{len(pieces)}-{name}"
        jsonio.dump_json_ranges(out, data, "nodes", pieces, _numbered, batch=3)
        got = gzip.decompress(out.read_bytes()) if name.endswith(".gz") else out.read_bytes()
        assert got == want, cuts


def test_dump_json_ranges_forks_before_its_writer_thread_starts(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # a process forked while another thread runs may inherit a lock that thread held (Python 3.12 warns)
    threads_at_fork: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        threads_at_fork.append(threading.active_count())
        return real_fork()

    monkeypatch.setattr(os, "fork", fork)
    for name in ("f.json", "f.json.gz"):
        jsonio.dump_json_ranges(tmp_path / name, {"nodes": None}, "nodes",
                                [range(0, 5), range(5, 9), range(9, 23)], _numbered)
    assert threads_at_fork == [1, 1, 1, 1]
    assert orjson.loads(gzip.decompress((tmp_path / "f.json.gz").read_bytes())) == \
        orjson.loads((tmp_path / "f.json").read_bytes()) == {"nodes": orjson.loads(orjson.dumps(
            list(_numbered(range(23)))))}


def test_kept_json_text_holds_its_own_size_not_orjsons_buffer() -> None:
    # orjson.dumps returns its write buffer (~4 KB in orjson 3.10/3.11) however short the text; a kept
    # text must not
    value = [[5, 6, 0, 100, 4, "cpu"], "<None>"]
    assert dumps_kept(value) == orjson.dumps(value) == b'[[5,6,0,100,4,"cpu"],"<None>"]'
    assert traced_bytes_per_object(lambda i: dumps_kept([i, value])) < 200


def test_write_frames_shows_each_batch_as_written() -> None:
    import chakra.io.pbstream as pbstream

    bodies = [bytes([k % 251 + 1]) * (k * 37 % 300 + 1) for k in range(200)] + [b"x" * 20_000]
    written: list[bytes] = []
    seen: list[tuple[int, list[bytes]]] = []
    count = pbstream.write_frames(written.append, bodies, "f.et", 5,
                                  lambda i, frames: seen.append((i, frames)), batch_bytes=1000)
    assert count == len(bodies)
    assert len(seen) == len(written) > 10                 # one observation per write, after it
    assert [b"".join(frames) for _, frames in seen] == written
    frames = [f for _, fs in seen for f in fs]
    assert [i for i, _ in seen] == [5 + sum(len(fs) for _, fs in seen[:k]) for k in range(len(seen))]
    assert list(pbstream.iter_frames(b"".join(frames))) == bodies   # each a whole frame: varint + body
    assert frames[-1][:3] == pbstream.encode_varint(20_000)         # (a length of three bytes)
