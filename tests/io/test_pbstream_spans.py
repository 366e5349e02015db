"""FrameFile: spans cut at any byte offsets hold every frame of the stream exactly once, in order (a frame
belongs to the span where it starts), for a plain file read in chunks and for a gzipped one in memory."""

from __future__ import annotations

import gzip
import random

import pytest

from chakra.errors import TraceFormatError
from chakra.io.pbstream import FrameFile
from chakra.io.pbstream import encode_varint as V
from chakra.schema import GlobalMetadata


def _stream(rng: random.Random, n: int) -> tuple[bytes, list[bytes]]:
    head = GlobalMetadata(version="0.0.4").SerializeToString()
    bodies = [rng.randbytes(rng.choice([1, 5, 120, 200, 20000])) for _ in range(n)]
    return b"".join(V(len(b)) + b for b in [head, *bodies]), bodies


@pytest.mark.parametrize("gz", [False, True])
def test_spans_hold_every_frame_once(gz, tmp_path) -> None:
    # chunks of 4096 bytes, batches of 700: frames cross chunk and batch ends
    for seed in range(30):
        rng = random.Random(seed)
        data, bodies = _stream(rng, rng.choice([1, 3, 40]))
        path = tmp_path / "s.et"
        path.write_bytes(gzip.compress(data) if gz else data)
        src = FrameFile(path, GlobalMetadata, chunk_bytes=4096, batch_bytes=700)
        assert (src.data is not None) == (gz or len(data) < 4096)
        cuts = sorted(rng.sample(range(src.start, src.size + 5), rng.choice([1, 2, 5])))
        got: list[tuple[int, bytes]] = []
        for a, b in zip([None, *cuts], [*cuts, None]):
            for first, frames in src.batches(a, b):
                assert sum(map(len, frames[:-1])) < 700     # a batch ends at the first frame past 700 bytes
                got += enumerate(frames, first)
        assert [i for i, _ in got] == list(range(1, len(bodies) + 1))
        assert [f for _, f in got] == [V(len(b)) + b for b in bodies]


def test_a_span_after_damage_is_empty_and_the_span_holding_it_reports_it(tmp_path) -> None:
    data, _ = _stream(random.Random(1), 40)
    last = V(20000) + bytes(20000)
    path = tmp_path / "s.et"
    path.write_bytes(data + last[:-10])          # message 41 cut short
    src = FrameFile(path, GlobalMetadata)
    assert src.frame_at(len(data) + 5) is None
    assert list(src.batches(len(data) + 5, None)) == []
    with pytest.raises(TraceFormatError, match="message 41 is truncated: needs 20000 bytes, 19990 left"):
        list(src.batches(None, len(data) + 5))
