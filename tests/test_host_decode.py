"""chakra.host.decode + loader against the loader they replaced (tests/host_oracle.py), on the corpus and on
random documents of both layouts written in many JSON styles; the canonical text of raw inputs/outputs;
the generic route (unknown keys, NaN) and what it keeps."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import needs_corpus
from host_oracle import node_layout, op_tuple, oracle_ops, same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra.convert.serial import IN_TAG, OUT_TAG, Serializer
from chakra.errors import TraceFormatError
from chakra.host.decode import canonical
from chakra.host.loader import build_host_trace, load_host_et
from chakra.host.model import HostOp
from chakra.link.etplus import host_node, host_text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])

# ---- random JSON -------------------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-05, 1e16, 1.5, 0.1, 2.0 ** 70, 1e-300]),
    st.text(max_size=6),
    st.sampled_from(["<None>", "cuda:0", 'q"u\\o/te', "é\u2028", "a b", "Tensor(float)"]))
_values = st.recursive(_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                      max_size=2),
                       max_leaves=8)
_STD = ["rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema"]
_ETP = ["ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "inter_thread_dep", "sync_dep", "cat",
        "ph", "stream", "device", "pid", "args", "pg_name", "collective_name", "comm_size", "comm_backend"]
_NAMES = st.sampled_from(["aten::mm", "aten::add", "record_param_comms", "nccl:all_reduce", "c10d::send",
                          "[pytorch|profiler|execution_trace|thread]",
                          "[pytorch|profiler|execution_graph|thread]", "ProfilerStep#3", "gloo:all_reduce",
                          "x y", "#weird"])


@st.composite
def _chakra_io(draw: Any) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return None
    d = {"values": draw(_values), "shapes": draw(_values), "types": draw(_values)}
    if draw(st.booleans()):
        d["strides"] = draw(st.one_of(st.none(), _values))
    if draw(st.integers(0, 5)) == 0:
        d["extra"] = 1   # dropped
    return d


@st.composite
def _chakra_node(draw: Any, nid: int) -> dict[str, Any]:
    n: dict[str, Any] = {"id": nid, "name": draw(_NAMES)}
    k = draw(st.integers(0, 6))
    if k < 4:
        n["ctrl_deps"] = draw(st.integers(0, 40))
    elif k == 4:
        n["ctrl_deps"] = draw(st.one_of(st.none(), st.lists(st.integers(0, 40), max_size=2)))
    for key in ("inputs", "outputs"):
        if draw(st.integers(0, 5)):
            n[key] = draw(_chakra_io())
    if draw(st.integers(0, 5)):
        names = list(_STD) if draw(st.booleans()) else draw(st.lists(st.sampled_from(_STD), max_size=7))
        names += draw(st.lists(st.sampled_from(["kernel_backend", "kernel_file", "tensor_range", "pg_name",
                                                "rf_id", "dtype"]), max_size=3))
        attrs = []
        for name in names:
            a: dict[str, Any] = {"name": name}
            if draw(st.integers(0, 3)):
                a["type"] = draw(st.sampled_from(["uint64", "int64", "string", "bool", "double"]))
            a["value"] = draw(_values) if draw(st.integers(0, 3)) == 0 else draw(st.integers(-1, 99))
            attrs.append(a)
        n["attrs"] = attrs
    extras = st.sampled_from(_ETP + ["tid", "rf_id", "future_key"])
    for key in draw(st.lists(extras, max_size=4, unique=True)):
        n[key] = draw(_values)
    return _shuffled(draw, n)


@st.composite
def _flat_node(draw: Any, nid: int) -> dict[str, Any]:
    n: dict[str, Any] = {"name": draw(_NAMES), "id": nid}
    if draw(st.integers(0, 5)):
        n["parent"] = draw(st.integers(0, 40))
    for key in draw(st.lists(st.sampled_from(_STD), max_size=7, unique=True)):
        n[key] = draw(st.integers(-1, 99)) if draw(st.booleans()) else draw(_values)
    for key in ("inputs", "outputs"):
        if draw(st.integers(0, 5)):
            n[key] = draw(st.one_of(st.lists(_values, max_size=4), st.sampled_from([None, [], 0, "", False])))
    for key in ("input_shapes", "input_types", "output_shapes", "output_types", "input_strides",
                "output_strides"):
        if draw(st.integers(0, 2)):
            n[key] = draw(_values)
    for key in draw(st.lists(st.sampled_from(_ETP + ["ctrl_deps", "future_key"]), max_size=4, unique=True)):
        n[key] = draw(_values)
    return _shuffled(draw, n)


def _shuffled(draw: Any, n: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.permutations(list(n)))
    return {k: n[k] for k in keys}


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    layout = draw(st.sampled_from(["flat", "chakra"]))
    ids = draw(st.lists(st.integers(1, 40), min_size=1, max_size=12, unique=True))
    make = _flat_node if layout == "flat" else _chakra_node
    nodes = [draw(make(i)) for i in ids]
    doc: dict[str, Any] = {"schema": draw(st.sampled_from(["1.0.1", "1.1.1-chakra.0.0.4", "9.9.9", None])),
                           "pid": 7, "nodes": nodes}
    if draw(st.booleans()):
        doc["finish_ts"] = 5
    return doc


def _write(path: Path, doc: dict[str, Any], style: int, gz: bool) -> bytes:
    if style == 0:
        text = orjson.dumps(doc)
    elif style == 1:
        text = json.dumps(doc).encode()                       # ", " and ": ", repr floats
    elif style == 2:
        text = json.dumps(doc, indent=2, ensure_ascii=False).encode()
    else:
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode()   # \\u escapes
    path.write_bytes(gzip.compress(text) if gz else text)
    return text


def _check_against_oracle(doc: dict[str, Any], path: Path, style: int, gz: bool) -> None:
    text = _write(path, doc, style, gz)
    data = json.loads(text)
    first = next((n for n in data["nodes"] if isinstance(n, dict)), None)
    layout = node_layout(first)
    try:
        want = oracle_ops(data, layout) if layout else None
        if want is not None and len({t[0] for t in want}) != len(want):
            want = None   # duplicate ids: an error
    except (KeyError, TypeError, AttributeError, IndexError, ValueError):
        want = None
    for load in (lambda: load_host_et(path), lambda: build_host_trace(json.loads(text), str(path))):
        if want is None:
            with pytest.raises(TraceFormatError):
                load()
            continue
        trace = load()
        assert trace.layout == layout
        got = [op_tuple(op) for op in trace.ops]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            # inputs/outputs are kept as canonical JSON text: a NaN reads back as None
            assert same(w[:11] + w[13:], g[:11] + g[13:]), (w, g)
            assert same(w[11:13], g[11:13], nan_is_null=True), (w, g)
        _check_writers(trace)


def _check_writers(trace: Any) -> None:
    """The ET+ node and the .et inputs/outputs fields from an op's text are those from its lists."""
    ser = Serializer()
    for op in trace.ops:
        lists = HostOp(op.id, op.name, op.parent, op.kind, op.rf_id, op.tid, op.fw_parent, op.seq_id,
                       op.scope, op.fw_tid, op.op_schema, op.inputs, op.outputs, op.attrs, op.attr_types,
                       op.index)
        assert lists.io is None and op.io is not None
        want = orjson.dumps(host_node(lists, trace.layout))
        assert orjson.dumps(host_node(op, trace.layout)) == want
        assert host_text(op, trace.layout) + b"}" == want   # what the linker writes
        assert ser.op_ios(op) == (ser.op_io(lists.inputs, IN_TAG), ser.op_io(lists.outputs, OUT_TAG))


@SETTINGS
@given(doc=documents(), style=st.integers(0, 3), gz=st.booleans())
def test_random_documents_load_as_the_old_loader_did(tmp_path: Path, doc: dict[str, Any], style: int,
                                                      gz: bool) -> None:
    _check_against_oracle(doc, tmp_path / "et.json", style, gz)


@needs_corpus
@pytest.mark.parametrize("rel", [
    "dlrm_8r_v100/host/host_et_1.json.gz", "dlrm_8r_v100/et_plus_2023/et_plus_3.json.gz",
    "simple_add_1r/host_et_0.json.gz", "cpu_gloo/tp_like_2r/host_et_0.json.gz",
    "cpu_gloo/fsdp_2r/host_et_1.json.gz", "host_only/ddp_2gpu_rank0_1.0.2-chakra.0.0.4.json.gz",
    "host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz",
])
def test_corpus_loads_as_the_old_loader_did(corpus: Path, rel: str, tmp_path: Path) -> None:
    with gzip.open(corpus / rel) as fh:
        doc = json.load(fh)
    for style in (0, 1):   # compact canonical, and Python's ", " style with repr floats
        _check_against_oracle(doc, tmp_path / f"{style}.json", style, gz=False)
    trace = load_host_et(corpus / rel)   # as handed over: PyTorch's own formatting ("0.000000")
    want = oracle_ops(doc, trace.layout)
    assert all(same(w[:11] + w[13:], op_tuple(o)[:11] + op_tuple(o)[13:]) for w, o in zip(want, trace.ops))
    assert all(same(w[11:13], op_tuple(o)[11:13]) for w, o in zip(want, trace.ops))


# ---- canonical text ----------------------------------------------------------------------------------------

@SETTINGS
@given(value=_values, style=st.integers(0, 3))
def test_canonical_is_what_orjson_writes(value: Any, style: int) -> None:
    text = [orjson.dumps(value), json.dumps(value).encode(), json.dumps(value, indent=1).encode(),
            json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()][style]
    want = orjson.dumps(json.loads(text)) if abs_ints_fit(value) else json.dumps(json.loads(text)).encode()
    assert canonical(text) == want


def abs_ints_fit(v: Any) -> bool:
    if isinstance(v, int) and not isinstance(v, bool):
        return -(2 ** 63) <= v < 2 ** 64
    if isinstance(v, list):
        return all(abs_ints_fit(x) for x in v)
    if isinstance(v, dict):
        return all(abs_ints_fit(x) for x in v.values())
    return True


def test_canonical_examples() -> None:
    assert canonical(b"[0.000000,1.000000]") == b"[0.0,1.0]"        # PyTorch's floats
    assert canonical(b'[1, "a b"]') == b'[1,"a b"]'
    assert canonical(b"[1e-05,1E2,-0]") == b"[0.00001,100.0,0]"
    assert canonical(b'["\\u00e9\\/"]') == '["é/"]'.encode()
    plain = b'[[6,7,0,65536,4,"cuda:0"],"<None>",true]'
    assert canonical(plain) == plain


# ---- the generic route -------------------------------------------------------------------------------------

def _node(nid: int, **extra: Any) -> dict[str, Any]:
    return {"id": nid, "name": "aten::mm", "ctrl_deps": 1,
            "inputs": {"values": [], "shapes": [], "types": []},
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": nid}], **extra}


def test_unknown_key_takes_the_generic_route_in_file_order(tmp_path: Path, caplog: Any) -> None:
    nodes = [_node(2, dur=3.0, my_key={"a": 1}, ts=9.5), _node(3, ts=1.0, dur=2.0)]
    path = tmp_path / "et.json"
    path.write_bytes(orjson.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}))
    caplog.set_level(logging.INFO, logger="chakra.host.decode")
    trace = load_host_et(path)
    assert list(trace.ops[0].attrs.items()) == [("dur", 3.0), ("my_key", {"a": 1}), ("ts", 9.5)]  # file order
    assert list(trace.ops[1].attrs) == ["ts", "dur"]    # typed: the linker's order
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "index 0" in notes[0] and "my_key" in notes[0]


def test_nan_document_keeps_nan_timing(tmp_path: Path) -> None:
    path = tmp_path / "et.json"
    path.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": [
        _node(2, ts=float("nan"), dur=float("inf")),
        {**_node(3), "inputs": {"values": [float("nan"), 1.5], "shapes": [[], []],
                                "types": ["Double", "Double"]}}]}))
    trace = load_host_et(path)
    ts = trace.ops[0].attrs["ts"]
    assert ts != ts and trace.ops[0].attrs["dur"] == float("inf")
    assert trace.ops[1].io[0] == b"[null,1.5]"          # written as orjson writes a NaN
    assert trace.ops[1].inputs.values == [None, 1.5]


def test_a_non_utf8_node_is_not_valid_json(tmp_path: Path) -> None:
    path = tmp_path / "et.json"
    path.write_bytes(b'{"schema":"1.0.1","nodes":[{"id":1,"name":"a\xff","parent":1}]}')
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        load_host_et(path)


def test_loaded_ops_share_text_and_attributes(corpus: Path) -> None:
    trace = load_host_et(corpus / "cpu_gloo/fsdp_2r/host_et_0.json.gz")
    ops = [op for op in trace.ops if op.attrs]
    assert len(ops) > 1000 and len({id(op.attrs) for op in ops}) < 10
    shapes = {op.io[1] for op in trace.ops}
    assert len({id(op.io[1]) for op in trace.ops}) == len(shapes)


@needs_corpus
@pytest.mark.parametrize("rel", ["dlrm_8r_v100/host/host_et_0.json.gz",
                                 "dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz",
                                 "cpu_gloo/fsdp_2r/host_et_0.json.gz",
                                 "host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz"])
def test_real_traces_take_the_typed_route(corpus: Path, rel: str, tmp_path: Path) -> None:
    """The generic route is for unusual nodes: a real trace (or our own ET+ of it) never needs it, so a
    typed Struct that stopped fitting them would show here, not as a quiet slowdown."""
    from chakra.host.decode import read_document
    from chakra.host.loader import Records
    from chakra.link import link_files

    paths = [corpus / rel]
    if rel.startswith("cpu_gloo"):
        paths.append(tmp_path / "et_plus.json")
        link_files(corpus / rel, corpus / rel.replace("host_et", "kineto"), paths[-1])
    for path in paths:
        doc = read_document(path)
        assert not doc.generic and len(doc) > 100
        assert len(list(Records(doc))) == len(doc)
        assert not doc.notes
