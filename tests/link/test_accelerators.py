"""Accelerators other than CUDA and ROCm, and what the toolkit does not model (issue 30, "Also").

An MTIA rank records its host runtime calls as ``mtia_runtime`` and its device work as ``mtia_ccp_events``
(Kineto's activity types; correlation ids pair them as on CUDA).  Such a trace is made from a corpus
trace by the edit that creates it: a DLRM rank's categories renamed (``cuda_runtime`` -> ``mtia_runtime``,
``kernel`` / ``gpu_memcpy`` -> ``mtia_ccp_events``).  Nothing else changed, so it must give the graph and
the replay of the CUDA trace.  Before, its device work was silently left out ("no GPU ops").  A category
that nothing models is named in a warning and in the link summary, with what it is when that is known
(the CUPTI range-profiler records of the corpus's A100 trace).
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from chakra.convert import convert_file
from chakra.device.loader import load_kineto
from chakra.io import load_json
from chakra.link import link_files
from chakra.replay.api import replay_file

MTIA = {"cuda_runtime": "mtia_runtime", "kernel": "mtia_ccp_events", "gpu_memcpy": "mtia_ccp_events"}


def renamed(src: Path, dst: Path, names: dict[str, str]) -> None:
    with gzip.open(src) as fh:
        doc = json.load(fh)
    for e in doc["traceEvents"]:
        if e.get("cat") in names:
            e["cat"] = names[e["cat"]]
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)


def replayed(tmp: Path, host: Path | None, kineto: Path, name: str) -> tuple[int, float]:
    report = link_files(host, kineto, tmp / f"{name}.json")
    convert_file(tmp / f"{name}.json", tmp / f"{name}.0.et")
    return report.gpu_attached, replay_file(tmp / f"{name}.0.et").replayed_us


@pytest.mark.corpus
@pytest.mark.parametrize("with_host", [True, False], ids=["host_et", "kineto_only"])
def test_mtia_device_work_is_modelled_as_on_cuda(corpus: Path, tmp_path: Path, with_host: bool) -> None:
    src = corpus / "dlrm_8r_v100"
    cuda = src / "device" / "kineto_0.json.gz"
    mtia = tmp_path / "mtia.json.gz"
    renamed(cuda, mtia, MTIA)
    k = load_kineto(mtia)
    # 245 kernels and 16 copies: all device work; 261 launches among the runtime calls
    assert (k.stats["kernel"], k.stats["launch"], k.not_modelled) == (261, 261, {})
    host = src / "host" / "host_et_0.json.gz" if with_host else None
    got = replayed(tmp_path, host, mtia, "mtia")
    assert got == replayed(tmp_path, host, cuda, "cuda")
    assert got[0] == 261 and abs(got[1] - 14455) <= 0.01 * 14455


@pytest.mark.corpus
def test_unknown_device_category_is_named_not_silent(corpus: Path, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    kp = tmp_path / "acme.json.gz"
    renamed(corpus / "dlrm_8r_v100/device/kineto_0.json.gz", kp, {"kernel": "acme_device_events"})
    with caplog.at_level(logging.WARNING):
        report = link_files(None, kp, tmp_path / "e.json")
    assert "events of categories the toolkit does not model" in caplog.text
    assert "245 'acme_device_events'" in caplog.text
    assert report.not_modelled == {"acme_device_events": 245}
    assert report.summary().endswith("; not modelled: 245 acme_device_events events")
    assert load_json(tmp_path / "e.json")["link_stats"]["not_modelled"] == {"acme_device_events": 245}


@pytest.mark.corpus
def test_cupti_range_records_are_named_for_what_they_are(corpus: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """CUPTI range mode writes one ``cuda_profiler_range`` record per kernel with its counters; their times
    are the profiler's (the 77 of the A100 trace all last 121,431 µs, laid end to end over the profiler's
    own span), not the kernels'.  They are not device work to replay: the link says so."""
    kp = corpus / "kineto_only/hta/a100_cupti_profiler_range.json.gz"
    with gzip.open(kp) as fh:
        ranges = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert len(ranges) == 77 and {e["dur"] for e in ranges} == {121431}
    with caplog.at_level(logging.WARNING):
        report = link_files(None, kp, tmp_path / "e.json")
    assert "77 'cuda_profiler_range' (CUPTI range-profiler records" in caplog.text
    assert report.not_modelled == {"cuda_profiler_range": 77} and report.gpu_ops == 0


def test_what_the_profiler_records_beside_the_work_is_not_reported(tmp_path: Path) -> None:
    """Python frames, the profiler's span and overhead, GPU-side annotation mirrors and CUPTI's records of
    synchronisations hold no work of their own: no note for them."""
    events = [{"ph": "X", "cat": cat, "name": "x", "pid": 1, "tid": 1, "ts": 0, "dur": 1} for cat in (
        "python_function", "Trace", "gpu_user_annotation", "overhead", "cuda_sync", "cpu_op")]
    p = tmp_path / "k.json"
    p.write_text(json.dumps({"traceEvents": events}))
    assert load_kineto(p).not_modelled == {}
