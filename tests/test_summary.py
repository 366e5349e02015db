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
