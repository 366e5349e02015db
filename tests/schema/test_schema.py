"""The runtime-built bindings must equal what protoc makes of schema/protobuf/et_def.proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from chakra.schema import AttributeProto, GlobalMetadata, Node, et_def_pb2

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "schema" / "protobuf" / "et_def.proto"


def _protoc_descriptor(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev extra) provides protoc")
    out = tmp_path / "et_def.desc"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}",
         f"--descriptor_set_out={out}", PROTO.name],
        check=True,
    )
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert len(fds.file) == 1
    return fds.file[0]


def test_bindings_equal_protoc_descriptor(tmp_path: Path) -> None:
    expected = _protoc_descriptor(tmp_path)
    ours = et_def_pb2.build_file_descriptor()
    # protoc fills json_name only when asked; compare with it stripped on both sides.
    for fd in (expected, ours):
        for msg in fd.message_type:
            for f in msg.field:
                f.ClearField("json_name")
    assert ours == expected


def test_enum_numbers_from_formats_md() -> None:
    # docs/formats.md, "Chakra protobuf ET"
    assert et_def_pb2.METADATA_NODE == 1 and et_def_pb2.COMP_NODE == 4 and et_def_pb2.COMM_COLL_NODE == 7
    assert et_def_pb2.ALL_TO_ALL == 6 and et_def_pb2.REDUCE_SCATTER == 7 and et_def_pb2.BARRIER == 9
    nt = et_def_pb2.DESCRIPTOR.enum_types_by_name["NodeType"]
    assert [(v.name, v.number) for v in nt.values][-1] == ("COMM_COLL_NODE", 7)


def test_wire_bytes_of_a_node_by_hand() -> None:
    n = Node(id=3, name="x", type=et_def_pb2.COMM_COLL_NODE, duration_micros=300)
    n.ctrl_deps.append(1)
    n.attr.add(name="comm_type", int64_val=0)
    # field 1 varint 3 | field 2 len 1 'x' | field 3 varint 7 | field 4 packed [1]
    # | field 7 varint 300 (0xac 0x02) | field 10 len 13 (name 'comm_type', int64_val=0 -> 'H\x00')
    assert n.SerializeToString() == (
        b"\x08\x03\x12\x01x\x18\x07\x22\x01\x01\x38\xac\x02R\x0d\n\tcomm_typeH\x00"
    )


def test_oneof_value_field_is_exact() -> None:
    a = AttributeProto(name="is_cpu_op", bool_val=False)
    assert a.WhichOneof("value") == "bool_val"
    a = AttributeProto(name="pg_name", string_val="")
    assert a.WhichOneof("value") == "string_val"
    lst = AttributeProto(name="l")
    lst.int64_list.values.extend([1, -2])
    assert AttributeProto.FromString(lst.SerializeToString()).int64_list.values == [1, -2]
    gm = GlobalMetadata(version="0.0.4")
    assert GlobalMetadata.FromString(gm.SerializeToString()).version == "0.0.4"
