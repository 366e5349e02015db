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
from helpers.host_documents import (
    SETTINGS,
    documents,
    json_values,
)
from helpers.host_oracle import node_layout, op_tuple, oracle_ops, same
from helpers.memory import traced_bytes_per_object
from hypothesis import given
from hypothesis import strategies as st

from chakra.convert.serial import IN_TAG, OUT_TAG, Serializer
from chakra.errors import TraceFormatError
from chakra.host.decode import canonical
from chakra.host.loader import build_host_trace, load_host_et
from chakra.host.model import HostOp
from chakra.link.etplus import host_node, host_text

# ---- random JSON -------------------------------------------------------------------------------------------













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
    pytest.param("host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz", marks=pytest.mark.slow),
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
@given(value=json_values, style=st.integers(0, 3))
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


def test_canonical_text_of_pytorch_spacing_holds_its_own_size() -> None:
    # PyTorch writes ", " between items: such text is re-encoded, and kept by the loaders
    assert canonical(b'[[5, 6, 0, 100, 4, "cpu"]]') == b'[[5,6,0,100,4,"cpu"]]'
    assert traced_bytes_per_object(lambda i: canonical(b'[[%d, 6, 0, 100, 4, "cpu"]]' % i)) < 200


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
