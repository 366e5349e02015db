"""`chakra summary` on real traces and on tiny hand-made ones."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from chakra.errors import TraceFormatError
from chakra.tools.summary import summarize


def test_host_summary_tp_like(corpus: Path) -> None:
    s = summarize(corpus / "cpu_gloo/tp_like_2r/host_et_0.json.gz")
    assert s["kind"] == "host_et" and s["layout"] == "chakra"
    # 250 nodes = 1 process root + 3 thread roots + 1 process_group:init + 245 operators
    assert (s["nodes"], s["operators"], s["metadata_nodes"]) == (250, 245, 1)
    assert [(g["pg_name"], g["ranks"]) for g in s["process_groups"]] == [("0", [0, 1]), ("1", [0, 1]),
                                                                       ("2", [0])]
    assert s["comm_ops"]["c10d::allreduce_"] == 5 and s["comm_ops"]["gloo:all_reduce"] == 6


def test_kineto_summary_dlrm_rank0(corpus: Path) -> None:
    s = summarize(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    # counted independently: 245 cudaLaunchKernel + 16 cudaMemcpyAsync launches, 245 kernels, 16 memcpys
    assert s["events_by_kind"]["kernel"] == 245 and s["events_by_kind"]["launch"] == 261
    assert s["events_by_kind"]["memcpy"] == 16
    assert (s["rank"], s["world_size"], s["backend"]) == (0, 8, "nccl")
    assert s["measured"]["window"] == "ProfilerStep#10" and s["measured"]["dur_us"] == 14455


def test_tiny_kineto_and_unknown(tmp_path: Path) -> None:
    k = tmp_path / "k.json.gz"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 14, "dur": 3,
         "args": {"stream": 7, "correlation": 9}},
    ]
    k.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    s = summarize(k)
    assert s["events"] == 2 and s["gpu_streams"] == [7] and s["gpu_busy_us"] == 3
    assert s["measured"]["dur_us"] == 7  # span 10 .. 17 (kernel 14+3): no ProfilerStep
    other = tmp_path / "other.json"
    other.write_text('{"foo": 1}')
    with pytest.raises(TraceFormatError, match="neither a host ET"):
        summarize(other)


def test_cli_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = subprocess.run([sys.executable, "-m", "chakra.cli.main", "summary", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and str(bad) in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "chakra.cli.main", "summary"], capture_output=True, text=True)
    assert r.returncode == 2


# ---- plain words, the device, the ProfilerStep warning, protobuf ETs ----------------------------------

_REPR = ("{'", "[(", "None", "', ", "{\"")


def _text(path: Path) -> str:
    from chakra.tools.summary import render_lines

    return "\n".join(render_lines(summarize(path)))


def test_kineto_text_has_device_and_rounded_numbers(corpus: Path) -> None:
    text = _text(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    # deviceProperties lists the node's 8 V100s; the kernels of rank 0 run on device 0 only
    assert "  device: Tesla V100-SXM2-32GB\n" in text
    assert "  rank 0 of 8, backend nccl" in text
    assert "  measured: 14.5 ms (ProfilerStep#10)" in text       # 14,455 us in the file
    assert "  GPU busy: 6,851 us (47% of the measured time)" in text
    assert "  CPU threads: 2; GPU streams: 7, 22, 24, 84" in text
    assert "warning" not in text and not any(r in text for r in _REPR)


def test_no_profiler_step_warns(corpus: Path) -> None:
    s = summarize(corpus / "simple_add_1r/kineto_0.json.gz")
    assert s["device"] == ["NVIDIA A100-PG509-200"] and s["steps"] == []
    text = _text(corpus / "simple_add_1r/kineto_0.json.gz")
    assert "  warning: no ProfilerStep annotation bounds the window: the measured time (19.8 s)" in text
    assert "backend unknown" in text and not any(r in text for r in _REPR)
    cpu = _text(corpus / "cpu_gloo/single_1r/kineto_0.json.gz")   # no deviceProperties, one ProfilerStep
    assert "  device: none recorded (a CPU-only trace)" in cpu and "warning" not in cpu


def test_amd_device_name(corpus: Path) -> None:
    s = summarize(corpus / "kineto_only/mi300x_bert_small.json.gz")
    assert s["device"] == ["AMD Instinct MI300X VF"]


def test_host_text_is_plain(corpus: Path) -> None:
    text = _text(corpus / "cpu_gloo/tp_like_2r/host_et_0.json.gz")
    assert "  process group 2 (solo_0): cpu:gloo,cuda:gloo, ranks 0" in text
    assert "  most frequent ops: aten::as_strided 17, aten::empty 16, aten::copy_ 15" in text
    assert "  nodes: 250 (245 operators, 1 metadata), threads 1, 2, 3" in text
    assert not any(r in text for r in _REPR)


def test_protobuf_et_summary_matches_an_independent_reader(corpus: Path) -> None:
    from helpers.wire_reader import read_et

    path = corpus / "chakra_et/real_2023_rank0.et.gz"
    s = summarize(path)
    _, _, nodes = read_et(path)
    ids = {n.id for n in nodes}
    coll = [n for n in nodes if n.type == 7]
    gpu = [n for n in nodes if n.type == 4 and n.attrs["is_cpu_op"].value is False]
    assert s["kind"] == "chakra_et" and s["nodes"] == len(nodes) == 3664
    assert s["nodes_by_type"] == {"COMM_COLL_NODE": len(coll), "COMP_NODE": len(nodes) - len(coll)}
    assert s["compute"]["gpu"] == {"nodes": len(gpu), "duration_us": sum(n.duration_micros for n in gpu)}
    assert s["dangling_deps"] == sum(1 for n in nodes for d in n.data_deps + n.ctrl_deps if d not in ids)
    assert s["dangling_deps"] == 1277
    no_type = sum(1 for n in coll if "comm_type" not in n.attrs)
    assert no_type == 14 and f"  warning: {no_type} collectives without a comm_type attribute" in _text(path)
    assert s["collectives"]["ALL_REDUCE"]["nodes"] == sum(
        1 for n in coll if "comm_type" in n.attrs and n.attrs["comm_type"].value == 0)
    text = _text(path)
    assert "  warning: 1,277 dependencies on ids that are not in the file" in text
    assert not any(r in text for r in _REPR)


def test_protobuf_et_from_the_text_converter(tmp_path: Path) -> None:
    from chakra.convert.text import convert_text

    w = tmp_path / "w.txt"
    w.write_text("DATA\n2\na -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 1048576 0\n"
                 "b -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 1048576 0\n")
    convert_text(w, tmp_path / "d", 4, 3)
    s = summarize(tmp_path / "d.2.et")
    # 3 passes x (2 FWD + 2 WG + 1 IG) compute nodes of 1, 3, 2 us; 3 x 2 all-reduces of 1 MiB
    assert s["compute"] == {"gpu": {"nodes": 15, "duration_us": 3 * (1 + 1 + 3 + 3 + 2)}}
    assert s["collectives"] == {"ALL_REDUCE": {"nodes": 6, "bytes": 6 << 20}}
    assert s["metadata"]["rank"] == 2 and s["process_groups"] == ["0"]
    text = _text(tmp_path / "d.2.et")
    assert text.splitlines()[0] == f"{tmp_path / 'd.2.et'}: Chakra protobuf ET, version 0.0.4, rank 2 of 4"
    assert '  ALL_REDUCE: 6 nodes, 6.0 MiB in total' in text
    assert '  process groups used: "0" (world)' in text and "warning" not in text
    r = subprocess.run([sys.executable, "-m", "chakra.cli.main", "summary", str(tmp_path / "d.0.et"),
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["nodes"] == 21
    garbage = tmp_path / "g.et"
    garbage.write_bytes(b"\x05ab")
    r = subprocess.run([sys.executable, "-m", "chakra.cli.main", "summary", str(garbage)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and str(garbage) in r.stderr and "Traceback" not in r.stderr
