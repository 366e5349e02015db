"""The linker's ET+ node text (etplus.host_text, GPU nodes) against the node dicts it stands for."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import needs_corpus

from chakra.host.model import HostOp
from chakra.io.ranks import find_ranks
from chakra.link import api
from chakra.link.api import link_files
from chakra.link.etplus import CHAKRA, FLAT, host_node, host_text

_IO = (b"[[1,2]]", b"[[2]]", b'["Tensor(float)"]', None, b"[]", b"[]", b"[]", b"[]")


def _op(**kw: object) -> HostOp:
    fields: dict[str, object] = dict(id=5, name="aten::mm", parent=4, rf_id=9, tid=1, fw_parent=0, seq_id=-1,
                                     scope=0, fw_tid=0, op_schema="aten::mm(Tensor self) -> Tensor", io=_IO)
    fields.update(kw)
    return HostOp(**fields)  # type: ignore[arg-type]


def test_chakra_text_worked_out_by_hand() -> None:
    op = _op(attrs={"kernel_backend": "", "cat": "cpu_op", "ts": 3.5},
             attr_types={"kernel_backend": "string"})
    want = (b'{"id":5,"name":"aten::mm","ctrl_deps":4,'
            b'"inputs":{"values":[[1,2]],"shapes":[[2]],"types":["Tensor(float)"]},'
            b'"outputs":{"values":[],"shapes":[],"types":[],"strides":[]},'
            b'"attrs":[{"name":"rf_id","type":"uint64","value":9},{"name":"fw_parent","type":"uint64","value":0},'
            b'{"name":"seq_id","type":"int64","value":-1},{"name":"scope","type":"uint64","value":0},'
            b'{"name":"tid","type":"uint64","value":1},{"name":"fw_tid","type":"uint64","value":0},'
            b'{"name":"op_schema","type":"string","value":"aten::mm(Tensor self) -> Tensor"},'
            b'{"name":"kernel_backend","type":"string","value":""}],"cat":"cpu_op"')   # "ts": a link key
    assert host_text(op, CHAKRA) == want


def test_flat_text_worked_out_by_hand() -> None:
    op = _op(rf_id=None, attrs={"cat": "cpu_op", "dur": 1})
    want = (b'{"name":"aten::mm","id":5,"rf_id":null,"parent":4,"fw_parent":0,"seq_id":-1,"scope":0,"tid":1,'
            b'"fw_tid":0,"op_schema":"aten::mm(Tensor self) -> Tensor","inputs":[[1,2]],"input_shapes":[[2]],'
            b'"input_types":["Tensor(float)"],"outputs":[],"output_shapes":[],"output_types":[],'
            b'"output_strides":[],"cat":"cpu_op"')
    assert host_text(op, FLAT) == want


@pytest.mark.parametrize("layout", [FLAT, CHAKRA])
@pytest.mark.parametrize("kw", [
    {},
    {"rf_id": None},
    {"scope": 1.5},                                   # not an integer: orjson's text of it
    {"seq_id": True},                                 # a bool is not written as 1
    {"op_schema": 'q"uote\\é\u2028'},
    {"name": "x\ny"},
    {"attrs": {"name": "other"}, "attr_types": {}},   # an untyped attribute replacing a key of the node
    {"attrs": {"inputs": 1}, "attr_types": {}},
    {"attrs": {"tid": 3}, "attr_types": {"tid": "int32"}},   # a std attr with a type of its own
    {"attrs": {"x": [1, {"a": None}]}, "attr_types": {"x": "string"}},
    {"io": None},
])
def test_text_is_the_node_dicts_text(layout: str, kw: dict[str, object]) -> None:
    op = _op(**kw)
    assert host_text(op, layout) + b"}" == orjson.dumps(host_node(op, layout))
    assert host_text(op, layout, b',"ts":1}') == orjson.dumps({**host_node(op, layout), "ts": 1})


def _counted(made: dict[str, int], name: str, real: Callable[..., Any], *args: Any) -> Any:
    made[name] += 1
    return real(*args)


def _dict_nodes_text(monkeypatch: pytest.MonkeyPatch, host: Path, kineto: Path, out: Path) -> bytes:
    """The ET+ written with every node going through its dict (the route for unusual values); every host
    node's dict is made (``host_node``) and every GPU node's with a launcher gets its inputs (``add_io``)."""
    made = {"host_node": 0, "add_io": 0}
    for name in made:
        monkeypatch.setattr(api, name, partial(_counted, made, name, getattr(api, name)))
    link_files(host, kineto, out, node_text=False)
    monkeypatch.undo()
    nodes = orjson.loads(out.read_bytes())["nodes"]
    gpu = [n for n in nodes if n.get("ph") == "X"]
    assert made == {"host_node": len(nodes) - len(gpu), "add_io": len(gpu) - sum(
        1 for n in gpu if n.get("parent", n.get("ctrl_deps")) is None)}, made
    return out.read_bytes()


@needs_corpus
@pytest.mark.parametrize("folder,rank", [("dlrm_8r_v100", 1), ("cpu_gloo/tp_like_2r", 0),
                                         ("simple_add_1r", 0)])
def test_linked_text_is_the_node_dicts_text(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           folder: str, rank: int) -> None:
    ((host, kineto),) = [(h, k) for r, h, k in find_ranks(corpus / folder) if r == rank]
    link_files(host, kineto, tmp_path / "text.json")
    text = (tmp_path / "text.json").read_bytes()
    assert text == _dict_nodes_text(monkeypatch, host, kineto, tmp_path / "dicts.json")
    nodes = orjson.loads(text)["nodes"]
    assert any("ts" in n for n in nodes)   # host nodes with link fields
    assert any(n.get("ph") == "X" for n in nodes) == (folder != "cpu_gloo/tp_like_2r")   # GPU nodes
