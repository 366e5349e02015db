"""The converter's parallel load (convert.columns._load_parallel): the same columns, trace, warnings, errors
and .et bytes as the sequential load, forced on small files by lowering its thresholds."""

from __future__ import annotations

import glob
import gzip
import logging
import os
import tempfile
from array import array

import orjson
import pytest
from conftest import CORPUS, needs_corpus

import chakra.convert.columns as cc
from chakra.convert import convert_file
from chakra.errors import TraceFormatError
from chakra.io import forked, jsonio
from chakra.link import link_files

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture
def forced(monkeypatch):
    """The parallel path on any file, read in pieces of a few KB (many chunks on both sides)."""
    monkeypatch.setattr(cc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(cc, "_SEGMENTS", 2)
    monkeypatch.setattr(cc, "_BLOCK", 16 << 10)
    monkeypatch.setattr(cc, "_FIRST_BLOCK", 4 << 10)
    monkeypatch.setattr(cc, "_cpus", lambda: 2)
    monkeypatch.setattr(forked, "safe_to_fork", lambda: True)  # whatever threads other tests left
    return monkeypatch


def _plain(src, dst):
    with gzip.open(src) as fh:
        data = fh.read()
    with open(dst, "wb") as out:
        out.write(data)
    return str(dst)


def _dump(path, doc):
    with open(path, "wb") as fh:
        fh.write(orjson.dumps(doc))
    return str(path)


def _linked(tmp_path_factory, host, kineto, name):
    out = tmp_path_factory.mktemp(name) / "et_plus.json"
    link_files(host, kineto, out, rank=0)
    return str(out)


@pytest.fixture(scope="module")
def gloo_etplus(tmp_path_factory):
    """tests/data gloo_mlp_2r rank 0 linked: an ET+ in the chakra layout."""
    d = os.path.join(DATA, "gloo_mlp_2r")
    return _linked(tmp_path_factory, os.path.join(d, "host_et_0.json.gz"),
                   os.path.join(d, "kineto_0.json.gz"), "gloo")


@pytest.fixture(scope="module")
def dlrm_etplus(tmp_path_factory):
    """dlrm_8r_v100 rank 0 linked: a flat (1.0.1) ET+ with the node shapes our linker writes."""
    if CORPUS is None:
        pytest.skip("no corpus")
    d = CORPUS / "dlrm_8r_v100"
    return _linked(tmp_path_factory, d / "host" / "host_et_0.json.gz", d / "device" / "kineto_0.json.gz",
                   "dlrm")


def _state(res):
    """Everything load_columns returns, as comparable values."""
    trace, c, _ = res
    out = {}
    for name in c.__slots__:
        v = getattr(c, name)
        out[name] = v.tobytes() if isinstance(v, array) else v
    out["full"] = [None if op is None else (op.index, op) for op in c.full]
    out["trace"] = {k: getattr(trace, k) for k in trace.__slots__ if k not in ("ops", "by_id")}
    out["kept"] = [(op.index, op) for op in trace.ops]
    return out


def _check_same(path, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    seq = cc._load_sequential(path)
    seq_log = [r.getMessage() for r in caplog.records]
    caplog.clear()
    par = cc._load_parallel(path)
    assert par is not None, "the parallel path fell back"
    assert [r.getMessage() for r in caplog.records] == seq_log
    a, b = _state(seq), _state(par)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k], k
    assert len(par[1].ids) > 2
    # and the whole conversion (convert_file goes through load_columns: parallel here)
    ref = tmp_path / "seq.et"
    out = tmp_path / "par.et"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cc, "PARALLEL_MIN_BYTES", 1 << 60)
        convert_file(path, ref)
    convert_file(path, out)
    assert out.read_bytes() == ref.read_bytes()


def _share(mp, who):
    """Who loads which segments: as they come ("both"), the child all but the first ("child": this
    process takes no more), this process all ("parent": the child takes none)."""
    if who == "child":
        mp.setattr(cc._Claims, "front", lambda self: None)
    elif who == "parent":
        mp.setattr(cc._Claims, "back", lambda self: None)


@pytest.mark.parametrize(("segments", "who"), [(2, "both"), (5, "both"), (5, "child"), (5, "parent"),
                                               (40, "both")])
def test_parallel_same_as_sequential_chakra_layout(gloo_etplus, forced, tmp_path, caplog, segments, who):
    forced.setattr(cc, "_SEGMENTS", segments)
    _share(forced, who)
    _check_same(gloo_etplus, tmp_path, caplog)
    if segments < 10:
        assert cc._STATS["segments"] == segments
    else:   # the guesses skip offsets that fall before the last boundary found
        assert cc._STATS["segments"] >= 10
    if who == "child":
        assert cc._STATS["parent"] == 1
    elif who == "parent":
        assert cc._STATS["child"] == 0


@needs_corpus
@pytest.mark.parametrize(("segments", "who"), [(2, "both"), (6, "child"), (6, "parent"), (13, "both")])
def test_parallel_same_as_sequential_flat_linked(dlrm_etplus, forced, tmp_path, caplog, segments, who):
    forced.setattr(cc, "_SEGMENTS", segments)
    _share(forced, who)
    _check_same(dlrm_etplus, tmp_path, caplog)
    assert cc._STATS["segments"] == segments


@needs_corpus
@pytest.mark.parametrize("rel", ["dlrm_8r_v100/et_plus_2023/et_plus_3.json.gz",
                                 "host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz"])
def test_parallel_same_as_sequential_corpus(rel, forced, tmp_path, caplog):
    """The 2023 reference ET+ (flat, general node shapes) and a bare chakra-layout host ET."""
    path = _plain(CORPUS / rel, tmp_path / "in.json")
    _check_same(path, tmp_path, caplog)


def test_parallel_same_warnings_no_schema(gloo_etplus, forced, tmp_path, caplog):
    doc = orjson.loads(open(gloo_etplus, "rb").read())
    del doc["schema"]
    path = _dump(tmp_path / "noschema.json", doc)
    _check_same(path, tmp_path, caplog)
    assert any("no schema string" in r.getMessage() for r in caplog.records)


def test_parallel_keys_after_the_list(gloo_etplus, forced, tmp_path, caplog):
    """The top-level keys after ``nodes`` (read by the child) reach the trace, in file order."""
    doc = orjson.loads(open(gloo_etplus, "rb").read())
    keys = list(doc)
    assert keys.index("nodes") < keys.index("process_groups")   # the linker writes them after the nodes
    path = _dump(tmp_path / "in.json", doc)
    _check_same(path, tmp_path, caplog)
    trace = cc._load_parallel(path)[0]
    assert trace.rank == 0
    assert trace.process_groups == cc._load_sequential(path)[0].process_groups


def _stringy(tmp_path):
    """An ET+ where a name holds ``}, {`` text and an arg holds a list of objects: the boundaries a guess
    may land on that are not between two nodes."""
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_graph|thread]", "parent": 0, "tid": 1,
              "inputs": [], "input_shapes": [], "input_types": [], "outputs": [], "output_shapes": [],
              "output_types": []}]
    for i in range(2, 60):
        nodes.append({"id": i, "name": 'aten::x"}, {"' * (i % 3), "parent": 1, "tid": 1, "ts": float(i),
                      "dur": 1.0, "inputs": [], "input_shapes": [], "input_types": [], "outputs": [],
                      "output_shapes": [], "output_types": [], "extra": [{"a": i}, {"b": i}]})
    doc = {"schema": "1.0.1", "pid": 1, "time": "t", "start_ts": 0, "finish_ts": 1, "nodes": nodes,
           "rank": 0, "world_size": 1, "process_groups": [], "link_stats": {"x": [{"y": 1}, {"z": 2}]}}
    return _dump(tmp_path / "stringy.json", doc)


@pytest.mark.parametrize("where", ["string", "nested", "after"])
def test_wrong_boundary_falls_back(forced, tmp_path, caplog, where):
    """A guessed boundary inside a string, inside a nested value, or past the list: this process's part
    does not parse up to it, so the sequential load decides (same result)."""
    path = _stringy(tmp_path)
    raw = open(path, "rb").read()
    needle = {"string": b'x\\"}, {\\"', "nested": b'{"a":30},{"b"', "after": b'{"y":1},{"z"'}[where]
    at = raw.index(needle)
    if where == "string":
        at += 3
        end, nxt = at + 1, raw.index(b"{", at)
    else:
        end = raw.index(b"}", at) + 1
        nxt = raw.index(b"{", end)
    assert raw[end - 1:end] == b"}" and raw[end:nxt].strip() == b","
    forced.setattr(cc, "guess_item_boundary", lambda p, near, **kw: (end, nxt))
    assert cc._load_parallel(path) is None
    # load_columns still gives the sequential result
    a = _state(cc.load_columns(path))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cc, "PARALLEL_MIN_BYTES", 1 << 60)
        b = _state(cc.load_columns(path))
    assert a == b
    ids = a["ids"]
    assert ids == list(range(1, 60))


def test_real_boundary_in_stringy_file(forced, tmp_path, caplog):
    """The same file split at a real node boundary: the parallel path is taken and agrees."""
    path = _stringy(tmp_path)
    raw = open(path, "rb").read()
    at = raw.index(b'{"id":31,')
    forced.setattr(cc, "guess_item_boundary", lambda p, near, **kw: (at - 1, at))
    _check_same(path, tmp_path, caplog)


def _leftovers():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "chakra-convert-*.pickle")))


def test_failing_child_same_result(gloo_etplus, forced, tmp_path):
    """The child fails (here: raises before writing anything): the file is loaded again here."""
    before = _leftovers()

    def boom(*args):
        raise RuntimeError("child failed")

    forced.setattr(cc._Child, "_run", staticmethod(boom))
    assert cc._load_parallel(gloo_etplus) is None
    assert _state(cc.load_columns(gloo_etplus)) == _state(cc._load_sequential(gloo_etplus))
    assert _leftovers() == before


def test_crashing_child_same_result(gloo_etplus, forced, tmp_path):
    def crash(*args):
        os._exit(9)

    forced.setattr(cc._Child, "_run", staticmethod(crash))
    assert cc._load_parallel(gloo_etplus) is None
    assert _state(cc.load_columns(gloo_etplus)) == _state(cc._load_sequential(gloo_etplus))


def _error(path, parallel, tmp_path):
    with pytest.MonkeyPatch.context() as mp:
        if not parallel:
            mp.setattr(cc, "PARALLEL_MIN_BYTES", 1 << 60)
        out = tmp_path / ("p.et" if parallel else "s.et")
        with pytest.raises(TraceFormatError) as ei:
            convert_file(path, out)
        assert not out.exists()
        return str(ei.value)


@pytest.mark.parametrize("case", ["dup_second_half", "dup_across_halves", "bad_id_second_half"])
@pytest.mark.parametrize("who", ["both", "child", "parent"])
def test_bad_node_same_error(gloo_etplus, forced, tmp_path, case, who):
    """A duplicate id (in the child's half, or one in each half) or a malformed node in the child's half:
    the parallel path gives up and the error is the sequential one."""
    doc = orjson.loads(open(gloo_etplus, "rb").read())
    nodes = doc["nodes"]
    n = len(nodes)
    if case == "dup_second_half":
        nodes[n - 2]["id"] = nodes[n - 5]["id"]
    elif case == "dup_across_halves":
        nodes[n - 2]["id"] = nodes[3]["id"]
    else:
        nodes[n - 2]["id"] = "seven"
    path = _dump(tmp_path / "bad.json", doc)
    forced.setattr(cc, "_SEGMENTS", 4)
    _share(forced, who)
    seq = _error(path, False, tmp_path)
    par = _error(path, True, tmp_path)
    assert par == seq
    assert ("duplicate" in seq) if case.startswith("dup") else ("seven" in seq or "id" in seq)


def test_sequential_paths_kept(gloo_etplus, tmp_path, monkeypatch):
    """Gzip, small files and one core do not fork."""
    calls = []
    monkeypatch.setattr(cc, "_load_parallel", lambda p: calls.append(p))
    monkeypatch.setattr(forked, "safe_to_fork", lambda: True)
    gz = tmp_path / "in.json.gz"
    gz.write_bytes(gzip.compress(open(gloo_etplus, "rb").read()))
    cc.load_columns(gloo_etplus)            # small
    monkeypatch.setattr(cc, "PARALLEL_MIN_BYTES", 0)
    assert jsonio.json_array_start(gz, "nodes", min_bytes=0) is None   # gzip: never split
    monkeypatch.setattr(cc, "_cpus", lambda: 1)
    cc.load_columns(gloo_etplus)            # one core
    assert calls == []
    monkeypatch.setattr(cc, "_cpus", lambda: 2)
    cc.load_columns(gloo_etplus)
    assert calls == [gloo_etplus]


def test_range_reader(tmp_path):
    """iter_json_array_range: the items between two offsets, and to the end with the keys after the list."""
    doc = {"a": 1, "nodes": [{"i": i, "s": "},{" * (i % 3)} for i in range(40)], "b": [{"c": 2}], "d": 3}
    path = _dump(tmp_path / "d.json", doc)
    raw = open(path, "rb").read()
    top, start = jsonio.json_array_start(path, "nodes", min_bytes=0)
    assert top == {"a": 1, "nodes": None}
    assert raw[start - 1:start] == b"["
    cut = raw.index(b'{"i":17,')
    got = [x for part in jsonio.iter_json_array_range(path, start, cut - 1, block=64, first_block=16)
           for x in part]
    assert got == doc["nodes"][:17]
    rest = {}
    got = [x for part in jsonio.iter_json_array_range(path, cut, None, rest, block=64) for x in part]
    assert got == doc["nodes"][17:]
    assert rest == {"b": [{"c": 2}], "d": 3}
    # a stop inside a string does not parse
    bad = raw.index(b'},{"', raw.index(b'{"i":5,')) + 1
    with pytest.raises(jsonio.StreamFallback):
        list(jsonio.iter_json_array_range(path, start, bad, block=64))
    # the guess: the first `}` `,` `{` after the offset from which the window parses (not those in item
    # 16's string)
    assert raw.index(b'{"i":16,"s":"},{"}') < cut
    assert jsonio.guess_item_boundary(path, raw.index(b'{"i":16,') + 1) == (cut - 1, cut)
    assert jsonio.guess_item_boundary(path, cut - 2) == (cut - 1, cut)
    assert jsonio.guess_item_boundary(path, cut - 1) != (cut - 1, cut)
    assert jsonio.guess_item_boundary(path, raw.index(b'{"i":16,') + 1, accept=lambda items: False) is None


def test_no_fork_beside_other_threads(gloo_etplus, monkeypatch):
    """A thread running (a forked child could inherit a lock it holds): the load stays in one process."""
    import threading

    calls = []
    monkeypatch.setattr(cc, "_load_parallel", lambda p: calls.append(p))
    monkeypatch.setattr(cc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(cc, "_cpus", lambda: 2)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        cc.load_columns(gloo_etplus)
    finally:
        stop.set()
        t.join()
    assert calls == []
