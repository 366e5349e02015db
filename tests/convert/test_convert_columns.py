"""The converter's load (convert.columns.load_columns: columns filled while the ops are built, most ops'
inputs/outputs/attributes serialised at once and the op dropped) against the conversion of the whole
loaded HostTrace (every op kept, serialised at the end): the same columns and the same .et bytes, on linked
traces of both layouts and on random ET+ documents."""

from __future__ import annotations

import io
import json
import os
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CORPUS
from helpers.host_documents import SETTINGS, documents
from hypothesis import given
from hypothesis import strategies as st

import chakra.convert.columns as cc
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
    meta, gen, _ = stream_serialized(trace, columns=cols, serializer=ser)
    lean = _frames(meta, gen)
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


@SETTINGS
@given(doc=documents(), timing=st.booleans())
def test_random_etplus(tmp_path: Path, doc: dict[str, Any], timing: bool) -> None:
    if timing:   # ET+ timing on every op (deterministic values)
        for i, n in enumerate(doc["nodes"]):
            n.update(ts=100.0 + 10 * i, dur=5.0, exclusive_dur=2.5, kineto_tid=1)
    path = tmp_path / "et_plus.json"
    path.write_text(json.dumps(doc))
    try:
        whole = load_host_et(path)
        meta, nodes, _ = build(whole)
    except TraceFormatError as exc:
        with pytest.raises(TraceFormatError) as got:
            trace, cols, ser = cc.load_columns(path)
            meta, gen, _ = stream_serialized(trace, columns=cols, serializer=ser)
            list(gen)
        assert got.value.message == exc.message
        return
    lean, ref = _both(str(path))
    assert lean == ref


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
