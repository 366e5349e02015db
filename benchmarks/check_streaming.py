"""Check that the chunked JSON readers build exactly the models of the one-piece parse.

    python benchmarks/check_streaming.py [FILE ...]     # default: every .json(.gz) of the trace corpus

Large host ETs / ET+ files are parsed a chunk at a time (``chakra.io.jsonio.
iter_json_array``, files above ``STREAM_MIN_BYTES``); the corpus files are all below that threshold, so this
script forces the chunked path with tiny blocks (4 KB: thousands of chunk boundaries per file) and compares
the resulting ``HostTrace`` with ``build_host_trace`` of the whole document (dataclass equality: every
field of every op, warnings included).  Exit status 1 on any difference.  (Kineto traces are decoded in
one piece at every size: nothing to check here.)
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from chakra.host import loader as host_loader  # noqa: E402
from chakra.io import jsonio  # noqa: E402

CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))


def check(path: str, block: int = 4096) -> bool:
    got = jsonio.iter_json_array(path, "nodes", min_bytes=0, block=block)
    if got is None:
        print(f"{path}: chunked reader declined (layout not recognised)")
        return False
    top, chunks = got
    whole = jsonio.load_json(path)
    a = host_loader._build_streamed(top, chunks, path)
    b = host_loader.build_host_trace(whole, path)
    ok = a == b
    print(f"{'ok  ' if ok else 'DIFF'} {path} ({len(a.ops)} ops)")
    return ok


def main(argv: list[str]) -> int:
    logging.disable(logging.WARNING)
    files = argv or sorted(str(p) for p in CORPUS.rglob("*.json*") if "et_plus" in p.name or
                           p.name.startswith("host_et") or p.parent.name == "host_only")
    bad = [f for f in files if not check(f)]
    print(f"{len(files) - len(bad)}/{len(files)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
