"""The converter's load (convert.columns.load_columns: columns filled while the ops are built, most ops'
inputs/outputs/attributes serialised at once and the op dropped) against the conversion of the whole
loaded HostTrace (every op kept, serialised at the end): the same columns and the same .et bytes, on linked
traces of both layouts and on random ET+ documents."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CORPUS
from helpers.host_documents import SETTINGS, documents
from hypothesis import given
from hypothesis import strategies as st

import chakra.convert.columns as cc
import chakra.convert.write as cw
from chakra.convert.core import build, stream_serialized
from chakra.errors import TraceFormatError
from chakra.host.loader import load_host_et
from chakra.io.pbstream import encode_varint
from chakra.link import link_files

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
_COMPARED = ("ids", "names", "parents", "kinds", "rf_ids", "threads", "is_gpu", "ts", "dur", "excl", "ts_x",
             "dur_x", "excl_x", "skeys", "xdeps")


def _linked(tmp_path_factory: Any, host: Any, kineto: Any, name: str) -> str:
    out = tmp_path_factory.mktemp(name) / "et_plus.json"
    link_files(host, kineto, out, rank=0)
    return str(out)


@pytest.fixture(scope="module")
def gloo_etplus(tmp_path_factory: Any) -> str:
    """tests/data gloo_mlp_2r rank 0 linked: an ET+ in the chakra layout."""
    d = os.path.join(DATA, "gloo_mlp_2r")
    return _linked(tmp_path_factory, os.path.join(d, "host_et_0.json.gz"),
                   os.path.join(d, "kineto_0.json.gz"), "gloo")


@pytest.fixture(scope="module")
def dlrm_etplus(tmp_path_factory: Any) -> str:
    """dlrm_8r_v100 rank 0 linked: a flat (1.0.1) ET+ with NCCL kernels."""
    if CORPUS is None:
        pytest.skip("no corpus")
    d = CORPUS / "dlrm_8r_v100"
    return _linked(tmp_path_factory, d / "host" / "host_et_0.json.gz", d / "device" / "kineto_0.json.gz",
                   "dlrm")


def _frames(meta: Any, nodes: Any) -> bytes:
    out = io.BytesIO()
    for m in [meta.SerializeToString(), *(n if isinstance(n, bytes) else n.SerializeToString()
                                          for n in nodes)]:
        out.write(encode_varint(len(m)))
        out.write(m)
    return out.getvalue()


def _written(meta: Any, write_nodes: Any) -> bytes:
    """The .et bytes ``stream_serialized``'s writer appends to a file after the GlobalMetadata."""
    with tempfile.TemporaryFile() as fh:
        m = meta.SerializeToString()
        fh.write(encode_varint(len(m)) + m)
        write_nodes(fh, "x.et")
        fh.seek(0)
        return fh.read()


def _both(path: str) -> tuple[bytes, bytes]:
    """The .et bytes of load_columns + stream_serialized, and of load_host_et + build."""
    trace, cols, ser = cc.load_columns(path)
    whole = load_host_et(path)
    ref = cc.columns_from_trace(whole)
    for name in _COMPARED:
        a, b = getattr(cols, name), getattr(ref, name)
        if isinstance(a, array) and isinstance(b, array):
            assert a.tobytes() == b.tobytes(), name   # NaN for untimed ops: compared by their bits
        else:
            assert (a.tolist() if isinstance(a, array) else a) == b, name
    assert [op.index for op in trace.ops] == [i for i, op in enumerate(cols.full) if op is not None]
    assert all(t is None for t, op in zip(cols.tails, cols.full) if op is not None)
    lean = _written(*stream_serialized(trace, columns=cols, serializer=ser)[:2])
    meta, nodes, _ = build(whole)
    return lean, _frames(meta, nodes)


@pytest.mark.parametrize("which", ["gloo_etplus", "dlrm_etplus"])
def test_linked_traces(which: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(which)
    lean, whole = _both(path)
    assert lean == whole and len(lean) > 10_000
    trace, cols, _ = cc.load_columns(path)
    kept = sum(op is not None for op in cols.full)
    assert 0 < kept < len(cols.ids) / 4   # most ops were dropped once serialised
    counts = _same_in_parts(path)
    assert counts[0] == 3 and 0 not in counts   # loaded in three parts cut before reading: no whole read


def test_convert_file_parts(tmp_path: Path, dlrm_etplus: str) -> None:
    """convert_file (what chakra_converter runs) on a real corpus ET+ in one part and in three (loaded and
    written; the file read whole, or cut before it is read): the same .et bytes and statistics."""
    from chakra.convert.driver import convert_file

    got = {}
    for k, cut, calls in ((1, False, [0, 1, 1]), (3, False, [0, 3, 3]), (3, True, [3, 3])):
        with _parts(k, 100, cut) as counts:
            report = convert_file(dlrm_etplus, tmp_path / f"p{k}.et")
        assert counts == calls   # (a whole read, then) loaded and written in k parts
        s = report.summary()
        got[k, cut] = ((tmp_path / f"p{k}.et").read_bytes(),
                       {key: v for key, v in s.items() if not key.endswith("_s") and key != "output"})
    assert got[3, False] == got[1, False] == got[3, True] and got[1, False][1]["comm_nodes"] > 0


def test_pieces_first_error(tmp_path: Path, gloo_etplus: str) -> None:
    """In three pieces, the error reported is the one a single pass meets first: a duplicate of an id of an
    earlier piece before an error of the piece's own, and the other way round."""
    nodes = orjson.loads(Path(gloo_etplus).read_bytes())["nodes"][:30]
    third = len(nodes) // 3
    cases = [(2 * third + 2, 2 * third + 5, "duplicate node id"),
             (2 * third + 5, 2 * third + 2, "non-integer")]
    for dup_at, bad_at, want in cases:
        doc = {"schema": "1.1.1-chakra.0.0.4", "nodes": [dict(n) for n in nodes]}
        doc["nodes"][dup_at]["id"] = doc["nodes"][3]["id"]
        doc["nodes"][bad_at]["id"] = "x"
        path = tmp_path / f"bad{dup_at}.json"
        path.write_bytes(orjson.dumps(doc))
        with _parts(1):
            one = _loaded(path)
        assert isinstance(one, str) and want in one
        if want == "duplicate node id":
            assert f"(indices 3 and {dup_at})" in one
        _same_in_parts(path)


def _cut_run(path: Path) -> tuple[list[int], Any]:
    """What load_columns in two parts, the file cut before it is read, does (see ``_parts``) and gives."""
    with _parts(2, cut=True) as counts:
        got = _loaded(path)
    return counts, got


def test_cut_file_same_as_whole_read(tmp_path: Path, gloo_etplus: str) -> None:
    """A file cut in two before it is read: its parts decoded on their own when the cut is between two
    nodes, else (a cut in a list of objects inside a node, a schema or a list-valued key on the wrong side
    of the nodes, a key in both parts) read whole; the same result as one whole read either way, errors
    included (a duplicate id across the cut, a malformed node after it)."""
    base = orjson.loads(Path(gloo_etplus).read_bytes())
    nodes = base["nodes"][:40]
    schema = base["schema"]
    mid = len(nodes) // 2

    def write(name: str, text: bytes) -> Path:
        path = tmp_path / name
        path.write_bytes(text)
        return path

    def doc(**top: Any) -> bytes:
        return orjson.dumps({"schema": schema, **top, "nodes": nodes, "rank": 0})

    cases: dict[str, tuple[bytes, bool]] = {"plain": (doc(), True)}
    # a node's attribute holding a long list of objects with an "id" key, across the middle of the file
    inner = [dict(n) for n in nodes]
    inner[mid]["attrs"] = [*inner[mid]["attrs"], {"name": "inner", "type": "string",
                                                  "value": [{"id": k, "v": "x" * 20} for k in range(3000)]}]
    cases["cut inside a node"] = (orjson.dumps({"schema": schema, "nodes": inner}), False)
    # the schema after the nodes: the first part found the layout without it
    cases["schema after the nodes"] = (orjson.dumps({"nodes": nodes, "schema": schema}), False)
    # a list-valued key before the nodes: the cut could be in it
    cases["list before the nodes"] = (doc(process_groups=[{"pg_name": "0", "ranks": [0]}]), False)
    # a key on both sides of the nodes (json keeps the last, msgspec may not): read whole
    text = doc(pid=7)
    cases["key on both sides"] = (text[:-1] + b',"pid":8}', False)
    dup = [dict(n) for n in nodes]
    dup[-3]["id"] = dup[2]["id"]
    cases["duplicate id across the cut"] = (orjson.dumps({"schema": schema, "nodes": dup}), False)
    bad = [dict(n) for n in nodes]
    bad[-3]["id"] = "x"
    cases["malformed node after the cut"] = (orjson.dumps({"schema": schema, "nodes": bad}), False)
    for name, (text, parts_kept) in cases.items():
        path = write(name.replace(" ", "_") + ".json", text)
        with _parts(1):
            one = _loaded(path)
        counts, got = _cut_run(path)
        assert got == one, name
        assert counts[0] == 2, name                 # cut in two and decoded in two processes
        assert (0 not in counts) == parts_kept, name    # ... or then read whole
        if "duplicate" in name or "malformed" in name:
            assert isinstance(one, str) and ("duplicate node id" in one or "non-integer" in one), name
        else:
            assert not isinstance(one, str), name


def test_cut_file_layout_warning_said_once(tmp_path: Path, gloo_etplus: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """The layout warnings of a file cut in parts (an unknown schema) are logged once and kept, as a whole
    read does; and once when a part then sends the file to the whole read (a key on both sides)."""
    nodes = orjson.loads(Path(gloo_etplus).read_bytes())["nodes"][:40]
    plain = orjson.dumps({"schema": "1.9.0-chakra.0.0.4", "pid": 7, "nodes": nodes})
    for name, text, whole in (("cut", plain, False), ("whole", plain[:-1] + b',"pid":8}', True)):
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        caplog.clear()
        counts, got = _cut_run(path)
        assert (0 in counts) == whole
        said = [r.getMessage() for r in caplog.records if "unknown schema" in r.getMessage()]
        assert len(said) == 1 and said[0].endswith("loading it with the chakra layout"), name
        assert not isinstance(got, str) and got[3] == [said[0]]   # the trace's warnings


@pytest.mark.slow
@SETTINGS
@given(doc=documents(), timing=st.booleans())
def test_random_etplus(tmp_path: Path, doc: dict[str, Any], timing: bool) -> None:
    if timing:   # ET+ timing on every op (deterministic values)
        for i, n in enumerate(doc["nodes"]):
            n.update(ts=100.0 + 10 * i, dur=5.0, exclusive_dur=2.5, kineto_tid=1)
    path = tmp_path / "et_plus.json"
    path.write_text(json.dumps(doc))
    _same_or_same_error(path)
    _same_in_parts(path, min(3, len(doc["nodes"])))


@pytest.mark.slow
@SETTINGS
@given(doc=documents(), indent=st.sampled_from([None, 1, 4]), k=st.integers(2, 4))
def test_random_file_cut(tmp_path: Path, doc: dict[str, Any], indent: int | None, k: int) -> None:
    """A random document, laid out with or without newlines and indentation, cut in 2-4 parts before it is
    read: what a whole read in one part gives (errors included)."""
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(doc, indent=indent))
    with _parts(1):
        one = _loaded(path)
    with _parts(k, cut=True):
        got = _loaded(path)
    assert got == one


def _same_or_same_error(path: Path) -> None:
    """load_columns gives the bytes of the whole loaded trace, or fails with the same message."""
    try:
        whole = load_host_et(path)
        build(whole)
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError) as got:
            trace, cols, ser = cc.load_columns(path)
            _written(*stream_serialized(trace, columns=cols, serializer=ser)[:2])
        assert got.value.message == exc.message
        return
    lean, ref = _both(str(path))
    assert lean == ref


@contextlib.contextmanager
def _parts(k: int, min_piece: int = 1, cut: bool = False) -> Iterator[list[int]]:
    """Stages run in ``k`` parts (CHAKRA_PARTS) with pieces as small as ``min_piece`` nodes, the loading
    (convert.columns) and the writing (convert.write); yields the number of pieces of each ``fork_map``
    call made meanwhile, and a 0 for each whole read of the file (``read_document``).  ``cut``: the loading
    cuts the file before reading it (convert.columns._load_parts) however small it is, else never."""
    counts: list[int] = []
    old_env, old_min, old_map = os.environ.get("CHAKRA_PARTS"), cc.DECODE_PIECE_MIN_NODES, cc.fork_map
    old_write_min, old_write_map = cw.ET_WRITE_PIECE_NODES, cw.fork_map
    old_bytes, old_read = cc.DECODE_PART_MIN_BYTES, cc.read_document

    def counted(fn: Any, pieces: Any, what: str, sink: Any = None) -> Any:
        counts.append(len(pieces))
        return old_map(fn, pieces, what, sink)

    def read(path: Any) -> Any:
        counts.append(0)
        return old_read(path)

    os.environ["CHAKRA_PARTS"] = str(k)
    cc.DECODE_PIECE_MIN_NODES, cc.fork_map = min_piece, counted
    cw.ET_WRITE_PIECE_NODES, cw.fork_map = min_piece, counted
    cc.DECODE_PART_MIN_BYTES, cc.read_document = (1 if cut else 1 << 62), read
    try:
        yield counts
    finally:
        cc.DECODE_PIECE_MIN_NODES, cc.fork_map = old_min, old_map
        cw.ET_WRITE_PIECE_NODES, cw.fork_map = old_write_min, old_write_map
        cc.DECODE_PART_MIN_BYTES, cc.read_document = old_bytes, old_read
        if old_env is None:
            del os.environ["CHAKRA_PARTS"]
        else:
            os.environ["CHAKRA_PARTS"] = old_env


def _loaded(path: Any) -> tuple[Any, ...] | str:
    """Everything load_columns returns that the conversion reads, and the .et bytes; or the error message."""
    try:
        trace, cols, ser = cc.load_columns(path)
        et = _written(*stream_serialized(trace, columns=cols, serializer=ser)[:2])
    except TraceFormatError as exc:
        return exc.message
    fields = []
    for name in (*_COMPARED, "tails", "index"):
        v = getattr(cols, name)
        fields.append((type(v), v.tobytes() if isinstance(v, array) else v))
    return (fields, [(op.index, op.id) for op in cols.full if op is not None],
            [(op.index, op.id) for op in trace.ops], trace.warnings, et)


def _same_in_parts(path: Any, min_pieces: int = 3) -> list[int]:
    """load_columns in one piece and in three, the file read whole and cut before it is read: the same
    columns, kept ops, warnings and .et bytes (or the same error); the three-piece run of the whole read
    really made ``min_pieces`` pieces (unless the file failed before its nodes were read).  Returns what
    the cut run did (see ``_parts``)."""
    with _parts(1):
        one = _loaded(path)
    with _parts(3) as counts:
        three = _loaded(path)
    assert counts[:2] == [0, min_pieces] if len(counts) > 1 else isinstance(three, str)
    assert three == one
    with _parts(3, cut=True) as cut_counts:
        cut = _loaded(path)
    assert cut == one
    return cut_counts


def test_duplicate_id_message(tmp_path: Path, gloo_etplus: str) -> None:
    doc = orjson.loads(Path(gloo_etplus).read_bytes())
    doc["nodes"].append(dict(doc["nodes"][3]))
    path = tmp_path / "dup.json"
    path.write_bytes(orjson.dumps(doc))
    want = f"duplicate node id {doc['nodes'][3]['id']} .indices 3 and {len(doc['nodes']) - 1}"
    with pytest.raises(TraceFormatError, match=want):
        cc.load_columns(path)
    with pytest.raises(TraceFormatError, match=want):
        load_host_et(path)


# ---- ET+ nodes as the linker writes them, perturbed: columns without a HostOp (convert.columns._Filler) ----

_SMALL_VALUES = st.one_of(st.integers(-2, 5), st.sampled_from([0.0, 1.0, 2.5, "", "x", None, True, [1], {}]))
_REST_NAMES = ["kernel_backend", "kernel_file", "tensor_range", "dtype", "is_cpu_op", "ts", "rf_id",
               "comm_type", "stream"]


@st.composite
def _rest_attrs(draw: Any) -> list[dict[str, Any]]:
    out = []
    for name in draw(st.lists(st.sampled_from(_REST_NAMES), max_size=3)):
        a: dict[str, Any] = {"name": name, "value": draw(_SMALL_VALUES)}
        if draw(st.booleans()):
            a["type"] = draw(st.sampled_from(["string", "uint64", "int", "bool", "double"]))
        out.append(a)
    return out


@st.composite
def _plain_io(draw: Any) -> dict[str, Any] | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    k = draw(st.integers(0, 2))
    values = [[draw(st.integers(1, 3)), 2, 0, 4, 4, "cuda:0"]] * k + draw(st.lists(_SMALL_VALUES, max_size=2))
    return {"values": values, "shapes": [[64, draw(st.sampled_from([1, 64]))]] * k,
            "types": ["Tensor(float)"] * k, "strides": [[1]] * k}


# (no NaN: a bare NaN sends the whole document down the generic route, test_random_etplus has those)
_TIMES = st.one_of(st.floats(0, 1e6, allow_nan=False), st.integers(0, 1000), st.none(),
                   st.sampled_from([-1.0, 1e300, "1"]))


@st.composite
def _plain_node(draw: Any, nid: int, parent: int, flat: bool) -> dict[str, Any]:
    gpu = draw(st.integers(0, 2)) == 0
    name = draw(st.sampled_from(["aten::mm", "aten::add", "kernel_a", "ncclDevKernel_AllReduce_Sum_f32",
                                 "nccl:all_reduce", "[weird]", "#x"])) if draw(st.integers(0, 4)) == 0 \
        else ("kernel_a" if gpu else "aten::mm")
    n: dict[str, Any] = {"id": nid, "name": name}
    std = {"rf_id": nid + 100, "fw_parent": draw(st.integers(0, 2)), "seq_id": draw(st.integers(-1, 3)),
           "scope": 0, "tid": draw(st.integers(1, 2)), "fw_tid": 0,
           "op_schema": draw(st.sampled_from(["", "aten::mm(Tensor self) -> Tensor"]))}
    if draw(st.integers(0, 9)) == 0:
        std["seq_id"] = draw(_SMALL_VALUES)   # an unusual value
    if flat:
        n["parent"] = parent
        n.update({k: v for k, v in std.items() if draw(st.integers(0, 9))})
        for key in ("inputs", "outputs"):
            io = draw(_plain_io())
            if io is not None:
                n[key] = io["values"]
                n[key[:-1] + "_shapes"] = io["shapes"]
                n[key[:-1] + "_types"] = io["types"]
    else:
        n["ctrl_deps"] = parent
        for key in ("inputs", "outputs"):
            if draw(st.integers(0, 9)):
                n[key] = draw(_plain_io())
        if not gpu or draw(st.integers(0, 4)) == 0:
            attrs = [{"name": k, "type": "uint64", "value": v} for k, v in std.items()]
            if draw(st.integers(0, 9)) == 0:
                attrs = attrs[:draw(st.integers(0, 7))]   # short, or out of PyTorch's order
                attrs.reverse()
            n["attrs"] = attrs + draw(_rest_attrs())
    n.update(ts=draw(_TIMES), dur=draw(_TIMES), inclusive_dur=1.0, exclusive_dur=draw(_TIMES))
    if gpu:
        n.update(cat=draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"])), ph="X")
        for key in ("stream", "device", "tid"):
            if draw(st.integers(0, 3)):
                n[key] = draw(st.one_of(st.integers(0, 20), _SMALL_VALUES))
        if draw(st.integers(0, 4)):
            args: dict[str, Any] = {"queued": 0, "grid": [1, 2, 3]}
            for key in ("stream", "device", "correlation", "External id"):
                if draw(st.booleans()):
                    args[key] = draw(st.one_of(st.integers(0, 1 << 40), _SMALL_VALUES))
            n["args"] = args
        n.update(pg_name="", collective_name=draw(st.sampled_from(["", "", "allreduce"])), comm_size=0)
    else:
        n["kineto_tid"] = draw(st.one_of(st.integers(1, 3), st.none()))
        if draw(st.integers(0, 9)) == 0:
            n["sync_dep"] = draw(st.one_of(st.integers(1, 30), st.lists(st.integers(1, 30), max_size=2)))
        if draw(st.integers(0, 9)) == 0:
            n["inter_thread_dep"] = draw(st.integers(1, 30))
    if draw(st.integers(0, 14)) == 0:   # a key that makes it an attribute / unknown: the host route
        n[draw(st.sampled_from(["comm_backend", "future_key", "cat", "pid", "stream", "args"]))] = \
            draw(_SMALL_VALUES)
    return n


@st.composite
def _plain_documents(draw: Any) -> dict[str, Any]:
    flat = draw(st.booleans())
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|process]", ("parent" if flat else
                                                                            "ctrl_deps"): 1}]
    for nid in range(2, draw(st.integers(3, 25))):
        nodes.append(draw(_plain_node(nid, draw(st.integers(1, nid - 1)), flat)))
    return {"schema": "1.0.1" if flat else "1.1.1-chakra.0.0.4", "pid": 7, "nodes": nodes}


@pytest.mark.slow
@SETTINGS
@given(doc=_plain_documents())
def test_plain_route(tmp_path: Path, doc: dict[str, Any]) -> None:
    """Mostly plain ET+ nodes (the linker's shape, values of unusual types now and then): the columns and
    bytes of load_columns are those of the whole loaded trace, or both fail with one message."""
    path = tmp_path / "et_plus.json"
    path.write_bytes(orjson.dumps(doc))
    _same_or_same_error(path)
    _same_in_parts(path, min(3, len(doc["nodes"])))


def test_plain_route_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The linker's CPU and GPU nodes of both layouts and the roots go into the columns without a HostOp; a
    comm candidate and a node with a key that becomes an attribute are built as HostOps (``host_op``)."""
    from chakra.host.loader import _Builder

    asked: list[int] = []
    host_op = _Builder.host_op

    def spy(self: _Builder, index: int, n: Any, core: Any) -> Any:
        asked.append(index)
        return host_op(self, index, n, core)

    monkeypatch.setattr(_Builder, "host_op", spy)
    for flat in (False, True):
        par = "parent" if flat else "ctrl_deps"
        cpu: dict[str, Any] = {"id": 2, "name": "aten::mm", par: 1, "ts": 1.0, "dur": 2.0,
                               "exclusive_dur": 2.0, "kineto_tid": 3}
        if flat:
            cpu.update(rf_id=5, tid=1, inputs=[[7, 8, 0, 4, 4, "cuda:0"]], input_shapes=[[2]],
                       input_types=["Tensor(float)"])
        else:
            cpu["attrs"] = [{"name": k, "type": "uint64", "value": 1} for k in
                            ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")] + \
                [{"name": "op_schema", "type": "string", "value": ""},
                 {"name": "kernel_file", "type": "string", "value": ""}]
            cpu["inputs"] = {"values": [[7, 8, 0, 4, 4, "cuda:0"]], "shapes": [[2]],
                             "types": ["Tensor(float)"], "strides": [[1]]}
        gpu = {"id": 3, "name": "k", "cat": "kernel", "ph": "X", "ts": 1.5, "dur": 1.0, "inclusive_dur": 1.0,
               "exclusive_dur": 1.0, "stream": 7, "device": 0, "tid": 7,
               "args": {"correlation": 9, "External id": 4, "grid": [1, 1, 1]}, "pg_name": "",
               "collective_name": "", "comm_size": 0, par: 2}
        nccl = dict(gpu, id=4, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        odd = dict(cpu, id=5, comm_backend="gloo")
        root = {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", par: 1}
        doc = {"schema": "1.0.1" if flat else "1.1.1-chakra.0.0.4", "nodes": [root, cpu, gpu, nccl, odd]}
        path = tmp_path / f"p{flat}.json"
        path.write_bytes(orjson.dumps(doc))
        asked.clear()
        cc.load_columns(path)
        assert asked == [3, 4]
        lean, ref = _both(str(path))
        assert lean == ref
