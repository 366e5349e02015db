"""The chunked JSON readers (used above STREAM_MIN_BYTES) build exactly the models of the one-piece parse.

(Host ETs and ET+ only: Kineto traces are decoded in one piece at every size, ``chakra.device.decode``.)

No corpus file is large enough to take the chunked path on its own, so these tests force it with 4 KB
blocks (thousands of chunk boundaries per file) and compare every field of every op/event.
"""

from __future__ import annotations

import gzip
import json
import os
from functools import partial
from pathlib import Path

import pytest

from chakra.host import loader as host_loader
from chakra.io import jsonio


def _both(path: Path):
    got = jsonio.iter_json_array(path, "nodes", min_bytes=0, block=4096)
    assert got is not None, "the chunked reader declined a well-formed file"
    top, chunks = got
    whole = jsonio.load_json(path)
    return host_loader._build_streamed(top, chunks, str(path)), host_loader.build_host_trace(whole, str(path))


@pytest.mark.parametrize("rel", [
    "dlrm_8r_v100/host/host_et_3.json.gz",
    "dlrm_8r_v100/et_plus_2023/et_plus_1.json.gz",
    "cpu_gloo/tp_like_2r/host_et_1.json.gz",
    "host_only/resnet_2gpu_rank0_1.1.0-chakra.0.0.4.json.gz",
])
def test_chunked_equals_whole_on_corpus(corpus: Path, rel: str) -> None:
    streamed, whole = _both(corpus / rel)
    assert streamed == whole
    assert len(streamed.ops) > 100


def test_chunked_equals_whole_on_project_data(data_dir: Path, tmp_path: Path) -> None:
    for rank in (0, 1):
        streamed, whole = _both(data_dir / "gloo_collectives_2r" / f"host_et_{rank}.json.gz")
        assert streamed == whole


def test_chunk_boundary_inside_strings_and_escapes(tmp_path: Path) -> None:
    # names with escaped quotes, brackets and unicode straddling the 4 KB block boundaries
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1,
              "inputs": {"values": [], "shapes": [], "types": []},
              "outputs": {"values": [], "shapes": [], "types": []}, "attrs": []}]
    for i in range(2, 400):
        nodes.append({"id": i, "name": f'op "{i}" ]}}[{{ \\ é ' + "x" * (i % 37), "ctrl_deps": 1,
                      "inputs": {"values": [], "shapes": [], "types": []},
                      "outputs": {"values": [], "shapes": [], "types": []},
                      "attrs": [{"name": "rf_id", "type": "uint64", "value": i}]})
    p = tmp_path / "et.json.gz"
    doc = {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": nodes}
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    streamed, whole = _both(p)
    assert streamed == whole and whole.by_id[5].name.startswith('op "5" ]}')


def _link_both(tmp_path: Path, host: Path, kineto: Path,
               monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    """ET+ bytes from the one-piece load and from the linker's chunked load with inputs/outputs as text
    (chakra.link.hostio; forced with a 0-byte threshold and 4 KB blocks)."""
    from chakra.link import hostio, link_files

    link_files(host, kineto, tmp_path / "whole.json")
    monkeypatch.setattr(hostio, "iter_json_array", partial(jsonio.iter_json_array, min_bytes=0, block=4096))
    trace, texts = hostio.load_host_for_link(host)
    assert texts is not None and len(texts) == len(trace.ops), "the chunked path was not taken"
    assert [op.index for op in trace.ops] == list(range(len(trace.ops)))
    link_files(host, kineto, tmp_path / "lean.json")
    return (tmp_path / "whole.json").read_bytes(), (tmp_path / "lean.json").read_bytes()


def test_linker_lean_host_load_writes_the_same_et_plus(data_dir: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # chakra layout (1.1.1-chakra), gloo collectives (their records keep their inputs as lists)
    d = data_dir / "gloo_collectives_2r"
    whole, lean = _link_both(tmp_path, d / "host_et_1.json.gz", d / "kineto_1.json.gz", monkeypatch)
    assert whole == lean
    assert b'"comm_backend":"gloo"' in lean


def test_linker_lean_host_load_on_dlrm(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # flat 1.0.1 layout, NCCL kernels whose nodes copy their launcher's inputs/outputs
    d = corpus / "dlrm_8r_v100"
    whole, lean = _link_both(tmp_path, d / "host" / "host_et_2.json.gz", d / "device" / "kineto_2.json.gz",
                             monkeypatch)
    assert whole == lean
    assert lean.count(b'"cat":"kernel"') > 200


@pytest.mark.parametrize("name", ["gloo_collectives_2r", "gloo_mlp_2r"])
def test_host_loaded_in_a_child_process_is_the_same(data_dir: Path, name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The linker's parallel host load (a forked child sends columns back) rebuilds exactly the ops and
    texts of the in-process chunked load."""
    from chakra.link import hostio

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(hostio, "iter_json_array", partial(jsonio.iter_json_array, min_bytes=0, block=4096))
    path = data_dir / name / "host_et_0.json.gz"
    here, here_texts = hostio.load_host_for_link(path)
    pending = hostio.HostLoad(path, parallel=True)
    assert pending.started, "no child was started"
    child, child_texts = pending.result()
    assert here_texts is not None and child_texts == here_texts
    assert child.ops == here.ops and len(child.ops) > 100
    assert child.by_id.keys() == here.by_id.keys()
    assert child.process_groups == here.process_groups and child.process_groups
    assert (child.schema, child.layout, child.pid, child.rank, child.world_size) == \
        (here.schema, here.layout, here.pid, here.rank, here.world_size)
    comm = [op for op in child.ops if op.is_comm]
    assert comm and all(op.inputs.values for op in comm if op.name == "record_param_comms")


def test_host_load_child_failure_falls_back_to_the_in_process_error(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from chakra.errors import TraceFormatError
    from chakra.link import hostio

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(hostio, "iter_json_array", partial(jsonio.iter_json_array, min_bytes=0, block=4096))
    bad = tmp_path / "host.json"
    nodes = [{"id": i, "name": "aten::add", "parent": 1, "inputs": [], "input_shapes": [], "input_types": [],
              "outputs": [], "output_shapes": [], "output_types": []} for i in range(2, 300)]
    nodes.append(dict(nodes[5]))  # a duplicate id
    bad.write_text(json.dumps({"schema": "1.0.1", "nodes": nodes}))
    with pytest.raises(TraceFormatError, match="duplicate node id 7"):
        hostio.HostLoad(bad, parallel=True).result()


@pytest.mark.parametrize("where", ["data", "dlrm"])
def test_link_with_the_host_loaded_in_a_child_writes_the_same_et_plus(
        where: str, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """link_files with the host ET read by a forked child (columns, inputs/outputs texts and each host
    node's text without link fields written by the child) gives the bytes of the one-process link."""
    from chakra.link import hostio, link_files

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    if where == "data":
        host, kineto = data_dir / "gloo_collectives_2r" / "host_et_0.json.gz", \
            data_dir / "gloo_collectives_2r" / "kineto_0.json.gz"
    else:
        d = request.getfixturevalue("corpus") / "dlrm_8r_v100"
        host, kineto = d / "host" / "host_et_5.json.gz", d / "device" / "kineto_5.json.gz"
    link_files(host, kineto, tmp_path / "one.json")
    monkeypatch.setattr(hostio, "iter_json_array", partial(jsonio.iter_json_array, min_bytes=0, block=4096))
    monkeypatch.setattr(hostio, "_large", lambda path: True)
    monkeypatch.setattr(hostio, "may_fork", lambda: True)
    started: list[bool] = []
    real = hostio.HostLoad.result

    def result(self):  # type: ignore[no-untyped-def]
        started.append(self.started)
        got = real(self)
        started.append(self.node_texts is not None)
        return got

    monkeypatch.setattr(hostio.HostLoad, "result", result)
    link_files(host, kineto, tmp_path / "two.json")
    assert started == [True, True], "the child path was not taken"
    assert (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes()
