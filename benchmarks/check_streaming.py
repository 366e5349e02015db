"""Check that the Kineto loader's chunked JSON reader builds exactly the model of the one-piece parse.

    python benchmarks/check_streaming.py [FILE ...]     # default: every Kineto trace of the corpus

Large Kineto traces are parsed a chunk at a time (``chakra.io.jsonio.iter_json_array``, files above
``STREAM_MIN_BYTES``); the corpus files are all below that threshold, so this script forces the chunked path
with tiny blocks (4 KB: thousands of chunk boundaries per file) and compares the resulting ``KinetoTrace``
with ``build_kineto_trace`` of the whole document (dataclass equality: every field of every event, warnings
included).  Exit status 1 on any difference.  (Host ETs and ET+ files have one reader for every size,
``chakra.host.decode``; ``tests/test_host_decode.py`` holds it to the reader it replaced.)
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from chakra.device import loader as kineto_loader  # noqa: E402
from chakra.io import jsonio  # noqa: E402

CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))


def check(path: str, block: int = 4096) -> bool:
    got = jsonio.iter_json_array(path, "traceEvents", min_bytes=0, block=block)
    if got is None:
        print(f"{path}: chunked reader declined (layout not recognised)")
        return False
    top, chunks = got
    whole = jsonio.load_json(path)
    a = kineto_loader._build_streamed(top, chunks, path, None)
    b = kineto_loader.build_kineto_trace(whole, path)
    ok = a == b
    print(f"{'ok  ' if ok else 'DIFF'} {path} ({len(a.events)} events)")
    return ok


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    files = argv or sorted(str(p) for p in CORPUS.rglob("*.json*") if p.name.startswith("kineto"))
    bad = [f for f in files if not check(f)]
    print(f"{len(files) - len(bad)}/{len(files)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
