"""The Kineto loader's chunked JSON reader (used above STREAM_MIN_BYTES) builds exactly the model of the
one-piece parse.  (Host ETs have no chunked reader any more: chakra.host.decode reads every size alike.)

No corpus file is large enough to take the chunked path on its own, so these tests force it with 4 KB
blocks (thousands of chunk boundaries per file) and compare every field of every event.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chakra.device import loader as kineto_loader
from chakra.io import jsonio


def _both(path: Path):
    got = jsonio.iter_json_array(path, "traceEvents", min_bytes=0, block=4096)
    assert got is not None, "the chunked reader declined a well-formed file"
    top, chunks = got
    whole = jsonio.load_json(path)
    return (kineto_loader._build_streamed(top, chunks, str(path), None),
            kineto_loader.build_kineto_trace(whole, str(path)))


@pytest.mark.parametrize("rel", ["dlrm_8r_v100/device/kineto_3.json.gz",
                                 "cpu_gloo/tp_like_2r/kineto_1.json.gz"])
def test_chunked_equals_whole_on_corpus(corpus: Path, rel: str) -> None:
    streamed, whole = _both(corpus / rel)
    assert streamed == whole
    assert len(streamed.events) > 100


def test_chunked_equals_whole_on_project_data(data_dir: Path) -> None:
    for rank in (0, 1):
        streamed, whole = _both(data_dir / "gloo_collectives_2r" / f"kineto_{rank}.json.gz")
        assert streamed == whole
