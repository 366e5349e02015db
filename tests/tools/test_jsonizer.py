"""chakra_jsonizer: protobuf ET -> JSON -> protobuf ET without loss."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import CORPUS, needs_corpus

from chakra.cli.jsonizer import main as jsonizer_main
from chakra.errors import TraceFormatError
from chakra.io import read_bytes, read_messages, write_messages
from chakra.schema import AttributeProto, GlobalMetadata, Node
from chakra.tools.jsonizer import jsonize_file

SAMPLES = (sorted(str(p.relative_to(CORPUS)) for p in (CORPUS / "chakra_et").rglob("*.et*"))
           if CORPUS is not None else [])


@needs_corpus
def test_sample_list():
    assert len(SAMPLES) == 17


@needs_corpus
@pytest.mark.parametrize("rel", SAMPLES)
def test_samples_round_trip_byte_identical(corpus, rel, tmp_path):
    src = corpus / rel
    js = tmp_path / "et.json"
    back = tmp_path / "back.et"
    r1 = jsonize_file(src, js)
    r2 = jsonize_file(js, back)
    assert (r1.direction, r2.direction) == ("et->json", "json->et")
    assert r1.nodes == r2.nodes
    assert read_bytes(back) == read_bytes(src)       # gunzipped when the sample is .gz
    m1, n1 = read_messages(src, GlobalMetadata, Node)
    m2, n2 = read_messages(back, GlobalMetadata, Node)
    assert m1 == m2 and n1 == n2


@needs_corpus
def test_json_names_every_field(corpus, tmp_path):
    out = tmp_path / "ar.json"
    assert jsonizer_main(["--input_filename", str(corpus / "chakra_et/astrasim_microbench/"
                                                  "all_reduce_4npus_1MB.0.et"),
                          "--output_filename", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    node = doc["nodes"][0]
    assert node["name"] == "all_reduce_4npus_1MB" and node["type"] == "COMM_COLL_NODE"
    assert node["attr"] == [{"name": "is_cpu_op", "bool_val": False},
                            {"name": "comm_type", "int64_val": "0"},
                            {"name": "comm_size", "int64_val": "1048576"}]
    assert doc["global_metadata"] == {"version": "0.0.4"}


@needs_corpus
def test_real_2023_et_to_gzipped_json(corpus, tmp_path):
    out = tmp_path / "real.json.gz"
    r = jsonize_file(corpus / "chakra_et/real_2023_rank0.et.gz", out)
    assert r.nodes == 3664
    doc = json.loads(gzip.decompress(out.read_bytes()))
    by_id = {n["id"]: n for n in doc["nodes"]}
    k = by_id["435"]
    assert k["name"].startswith("ncclKernel_Broadcast") and k["ctrl_deps"] == ["434"]
    attrs = {a["name"]: a for a in k["attr"]}
    assert attrs["comm_size"] == {"name": "comm_size", "int64_val": "212480"}
    assert attrs["involved_dim"] == {"name": "involved_dim", "bool_list": {"values": [True]}}
    assert {a["name"]: a for a in doc["global_metadata"]["attr"]}["pid"]["uint64_val"] == "114598"


def test_every_attribute_kind_round_trips(tmp_path):
    a = [AttributeProto(name="d", double_val=1.5), AttributeProto(name="f", float_val=0.25),
         AttributeProto(name="i32", int32_val=-3), AttributeProto(name="i64", int64_val=-(1 << 62)),
         AttributeProto(name="u64", uint64_val=(1 << 64) - 1), AttributeProto(name="s32", sint32_val=-7),
         AttributeProto(name="fx", fixed64_val=9), AttributeProto(name="b", bool_val=False),
         AttributeProto(name="s", string_val="x'\"y"), AttributeProto(name="by", bytes_val=b"\x00\xff"),
         AttributeProto(name="z", int64_val=0)]
    a.append(AttributeProto(name="sl"))
    a[-1].string_list.values.extend(["a", "b"])
    a.append(AttributeProto(name="il"))
    a[-1].int64_list.values.extend([1, -2])
    node = Node(id=5, name="n", type=7, ctrl_deps=[1], data_deps=[2, 3], start_time_micros=4,
                duration_micros=6, attr=a)
    src = tmp_path / "in.et"
    write_messages(src, [GlobalMetadata(version="0.0.4"), Node(id=1), Node(id=2), Node(id=3), node])
    js = tmp_path / "x.json"
    back = tmp_path / "back.et"
    jsonize_file(src, js)
    doc = json.loads(js.read_text())
    kinds = [next(k for k in x if k != "name") for x in doc["nodes"][3]["attr"]]
    assert kinds == ["double_val", "float_val", "int32_val", "int64_val", "uint64_val", "sint32_val",
                     "fixed64_val", "bool_val", "string_val", "bytes_val", "int64_val", "string_list",
                     "int64_list"]
    jsonize_file(js, back)
    assert back.read_bytes() == src.read_bytes()


def test_reverse_forced_and_bad_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": 3}')
    with pytest.raises(TraceFormatError):
        jsonize_file(bad, tmp_path / "o.et")
    assert not (tmp_path / "o.et").exists()
    assert jsonizer_main(["-i", str(bad), "-o", str(tmp_path / "o.et"), "--reverse", "-q"]) == 1


def test_node_zero_keeps_its_id(tmp_path):
    """proto3's JSON mapping leaves default fields out: node 0 lost its "id" (issue 16)."""
    src = tmp_path / "z.0.et"
    write_messages(src, [GlobalMetadata(version="0.0.4"), Node(id=0, name="first", type=7),
                         Node(id=1, type=0), Node(id=2, name="x", type=4, ctrl_deps=[0])])
    out = tmp_path / "z.json"
    assert jsonizer_main(["-i", str(src), "-o", str(out)]) == 0
    nodes = json.loads(out.read_text())["nodes"]
    assert [(n["id"], n["name"], n["type"]) for n in nodes] == [
        ("0", "first", "COMM_COLL_NODE"), ("1", "", "INVALID_NODE"), ("2", "x", "COMP_NODE")]
    assert nodes[2]["ctrl_deps"] == ["0"]
    back = tmp_path / "back.et"
    assert jsonizer_main(["-i", str(out), "-o", str(back)]) == 0
    assert read_bytes(back) == read_bytes(src)          # the explicit defaults change no byte


@needs_corpus
def test_astrasim_microbench_node_zero(tmp_path):
    src = CORPUS / "chakra_et" / "astrasim_microbench" / "all_reduce_4npus_1MB.0.et"
    jsonize_file(src, tmp_path / "a.json")
    (node,) = json.loads((tmp_path / "a.json").read_text())["nodes"]
    assert node["id"] == "0" and node["type"] == "COMM_COLL_NODE"
