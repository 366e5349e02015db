"""The reference's module paths are aliases of ours: same classes, same bytes, our readers agree, and the
simulator runs what a reference-style script writes."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.astrasim import needs_astrasim, run

import chakra.schema as ours
from chakra.errors import TraceFormatError
from chakra.io import read_messages, write_messages
from chakra.schema.protobuf import et_def_pb2 as ref
from chakra.src.third_party.utils import protolib

HERE = Path(__file__).resolve().parent


def test_same_classes_and_constants() -> None:
    for name in ("Node", "GlobalMetadata", "AttributeProto", "IOInfo", "Tensor", "COMP_NODE",
                 "COMM_COLL_NODE", "METADATA_NODE", "ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER",
                 "REDUCE_SCATTER", "BARRIER"):
        assert getattr(ref, name) is getattr(ours, name), name
    assert ref.NodeType.Name(4) == "COMP_NODE" and ref.NodeType.Value("COMM_RECV_NODE") == 6
    assert ref.CollectiveCommType.Name(7) == "REDUCE_SCATTER" and len(ref.CollectiveCommType.keys()) == 10
    from chakra import schema as pb  # the project's own spelling still works beside the new package

    assert pb.Node is ref.Node and callable(pb.attr_value)


def test_protolib_and_our_writer_agree_byte_for_byte(tmp_path: Path) -> None:
    meta = ours.GlobalMetadata(version="0.0.4")
    nodes = [ours.Node(id=i, name=f"n{i}", type=ours.COMP_NODE, duration_micros=i * 300,
                       data_deps=[i - 1] if i else []) for i in range(200)]   # frames of 1- and 2-byte length
    nodes[5].name = "x" * 300
    ours_path = tmp_path / "ours.et"
    write_messages(ours_path, [meta, *nodes])
    buf = io.BytesIO()
    for m in [meta, *nodes]:
        protolib.encodeMessage(buf, m)
    assert buf.getvalue() == ours_path.read_bytes()
    with protolib.openFileRd(ours_path) as fh:
        gm, node, back = ours.GlobalMetadata(), ours.Node(), []
        assert protolib.decodeMessage(fh, gm) and gm.version == "0.0.4"
        while protolib.decodeMessage(fh, node):
            back.append(node.SerializeToString())
    assert back == [n.SerializeToString() for n in nodes]


def test_truncated_and_missing_files(tmp_path: Path) -> None:
    good = tmp_path / "g.et"
    write_messages(good, [ours.GlobalMetadata(version="0.0.4"),
                          ours.Node(id=1, name="a", type=ours.COMP_NODE)])
    cut = tmp_path / "cut.et"
    cut.write_bytes(good.read_bytes()[:-2])
    with protolib.openFileRd(cut) as fh:
        assert protolib.decodeMessage(fh, ours.GlobalMetadata())
        with pytest.raises(TraceFormatError, match=r"cut\.et: a message of \d+ bytes is cut off"):
            protolib.decodeMessage(fh, ours.Node())
    with pytest.raises(FileNotFoundError, match="nope.et"):
        protolib.openFileRd(tmp_path / "nope.et")
    gz = tmp_path / "g.et.bin"   # gzip told by the bytes, not the name
    gz.write_bytes(gzip.compress(good.read_bytes()))
    with protolib.openFileRd(gz) as fh:
        node = ours.Node()
        assert protolib.decodeMessage(fh, ours.GlobalMetadata()) and protolib.decodeMessage(fh, node)
        assert node.name == "a" and not protolib.decodeMessage(fh, node)


def test_reference_script_runs_unchanged_as_a_script(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(HERE / "test_reference_api.py"), str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    meta, nodes = read_messages(tmp_path / "tiny.1.et", ours.GlobalMetadata, ours.Node)
    assert meta.attr[0].int64_val == 1 and [n.name for n in nodes] == ["COMP_NODE", "ALL_REDUCE"]


@needs_astrasim
def test_what_the_reference_style_script_writes_runs_in_astrasim(tmp_path: Path) -> None:
    sys.path.insert(0, str(HERE))
    try:
        import test_reference_api as script
    finally:
        sys.path.remove(str(HERE))
    for r in range(4):
        script.write_tiny_et(str(tmp_path / f"tiny.{r}.et"), r)
    times = run(tmp_path / "tiny", 4)
    # 5 us of compute (5,000 ns), then a 64 KiB all-reduce over 4 ranks: the same on every rank
    assert len(set(times.values())) == 1 and times[0] > 5000
