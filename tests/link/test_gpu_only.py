"""GPU-only Kineto traces (issue 30, class 5): recorded with the CUDA / ROCm activity alone
(``activities=[ProfilerActivity.CUDA]``): runtime calls and kernels, no ``cpu_op`` or ``user_annotation``.

Such a trace is made from a corpus trace by the edit that creates it: its ``cpu_op``, ``user_annotation``
and ``python_function`` events removed (a DLRM rank for CUDA, the MI300X BERT trace for HIP).  The runtime
calls are then the host ops of their thread, each kernel hangs under the call that launched it (the call
whose correlation it carries), and the window is the trace's span (first event's start to last event's
end), which is also what the replay must give: the recording is unchanged.  Before the fix the link was
refused: "no CPU op or annotation ... nothing to link".
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from chakra.convert import convert_file
from chakra.io import load_json
from chakra.link import link_files
from chakra.pipeline import run_pipeline
from chakra.replay.api import replay_file

RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_only(src: Path, dst: Path) -> list[dict[str, Any]]:
    """Write ``src`` without its cpu_op, user_annotation and python_function events; return its X events."""
    with gzip.open(src) as fh:
        doc = json.load(fh)
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") not in ("cpu_op", "user_annotation", "python_function")]
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


CASES = {  # name: (corpus file, runtime calls, GPU ops, span µs read off the trace)
    "dlrm_rank0_cuda": ("dlrm_8r_v100/device/kineto_0.json.gz", 525, 261, 13394.0),
    "mi300x_bert_hip": ("kineto_only/mi300x_bert_small.json.gz", 161, 61, 4024.799),
}


@pytest.mark.corpus
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_only_trace_links_converts_and_replays_its_span(corpus: Path, tmp_path: Path, case: str) -> None:
    src, n_runtime, n_gpu, span = CASES[case]
    kp = tmp_path / "gpu_only.json.gz"
    xs = gpu_only(corpus / src, kp)
    runtime = [e for e in xs if e.get("cat") in RUNTIME_CATS]
    gpu = [e for e in xs if e.get("cat") in GPU_CATS]
    lo = min(e["ts"] for e in runtime + gpu)
    hi = max(e["ts"] + e["dur"] for e in runtime + gpu)
    assert (len(runtime), len(gpu), round(hi - lo, 3)) == (n_runtime, n_gpu, span)

    report = link_files(None, kp, tmp_path / "e.json")
    doc = load_json(tmp_path / "e.json")
    assert (report.host_ops, report.gpu_attached, report.gpu_ops_in_window) == (n_runtime, n_gpu, n_gpu)
    assert doc["measured"]["window"] == "kineto_span"
    assert doc["measured"]["start_us"] == lo and doc["measured"]["dur_us"] == pytest.approx(hi - lo)
    assert doc["kineto_only"]["source"].endswith("GPU activity only: the host ops are its runtime calls")
    # every GPU op hangs under the runtime call that launched it: the call of its correlation id
    nodes = {n["id"]: n for n in doc["nodes"]}
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in runtime if "correlation" in e["args"]}
    for n in doc["nodes"]:
        if "cat" in n:
            parent = nodes[n["ctrl_deps"]]
            assert parent["ts"] == launch_ts[n["args"]["correlation"]]
    conv = convert_file(tmp_path / "e.json", tmp_path / "g.0.et")
    assert conv.stats.gpu_ops == n_gpu
    rep = replay_file(tmp_path / "g.0.et")
    assert rep.measured_us == pytest.approx(span)
    assert abs(rep.replayed_us - span) <= 0.01 * span


@pytest.mark.corpus
def test_pipeline_takes_a_gpu_only_folder(corpus: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    gpu_only(corpus / CASES["mi300x_bert_hip"][0], folder / "kineto_0.json.gz")
    res = run_pipeline(folder, tmp_path / "out", jobs=1)   # no host ET: linked Kineto-only
    (row,) = res.summary["ranks"]
    assert (row["host_ops"], row["gpu_ops_attached"], row["gpu_ops_in_window"]) == (161, 61, 61)
    assert abs(row["error_pct"]) <= 1.0
