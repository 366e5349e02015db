#!/usr/bin/env python3
"""Reading Chakra ETs into the replay's graph (``chakra.replay.reader.load_graph``): CPU seconds.

    python benchmarks/bench_read.py ET [ET ...]                      # these files
    python benchmarks/bench_read.py ET --grow 1000000                # + ET's nodes repeated to ~1M nodes
    python benchmarks/bench_read.py ET --src ../main/src --src src   # two checkouts, same session

Each case runs in a fresh process with ``CHAKRA_PARTS=1`` (one span, read in that process, so its CPU
time is the whole reading); the best of ``--repeat`` runs is printed, per ``--src`` (the ``src/`` of a
checkout, put first on ``PYTHONPATH``), the rounds interleaved so that a loaded machine weighs on all
alike, with the bytes a node of the graphs holds once read (``tracemalloc``'s traced memory with the
graphs alive, in a run of its own).  ``--grow N`` writes (in a temporary directory) a file of about N
nodes: the first ET's nodes again and again with fresh ids (dependencies shifted alike), a synthetic
trace with the attributes, names and dependency shapes of a real one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def grow(src: Path, out: Path, n: int) -> int:
    """Write ``out``: ``src``'s GlobalMetadata, its nodes, then its non-METADATA nodes again with ids
    shifted past the last copy's, until about ``n`` nodes are written.  Returns how many were."""
    from chakra.io import read_messages
    from chakra.io.pbstream import encode_varint
    from chakra.schema import METADATA_NODE, GlobalMetadata, Node

    meta, nodes = read_messages(src, GlobalMetadata, Node)
    nodes = list(nodes)
    span = max(node.id for node in nodes) + 1
    written = 0
    with open(out, "wb") as fh:
        body = meta.SerializeToString()
        fh.write(encode_varint(len(body)) + body)
        copy = 0
        while written < n:
            off = copy * span
            for node in nodes:
                if copy and node.type == METADATA_NODE:
                    continue
                m = Node()
                m.CopyFrom(node)
                m.id += off
                m.ctrl_deps[:] = [d + off for d in m.ctrl_deps]
                m.data_deps[:] = [d + off for d in m.data_deps]
                body = m.SerializeToString()
                fh.write(encode_varint(len(body)) + body)
                written += 1
            copy += 1
    return written


def _one(paths: list[str]) -> None:
    """(in the child) CPU and wall seconds of reading ``paths``, and their nodes."""
    from chakra.replay.reader import load_graph

    cpu, wall = time.process_time(), time.perf_counter()
    n = sum(len(load_graph(p)) for p in paths)
    print(time.process_time() - cpu, time.perf_counter() - wall, n)


def _held(paths: list[str]) -> None:
    """(in the child) the bytes the graphs of ``paths`` hold once read, and their nodes."""
    import tracemalloc

    from chakra.replay.reader import load_graph

    tracemalloc.start()
    graphs = [load_graph(p) for p in paths]
    print(tracemalloc.get_traced_memory()[0], sum(map(len, graphs)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("et", nargs="+", help="Chakra ET files (read together: one case)")
    ap.add_argument("--grow", type=int, default=0, help="also N nodes grown from the first ET")
    ap.add_argument("--src", action="append", default=[], help="a checkout's src/ (repeat to compare)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--held", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        (_held if args.held else _one)(args.et)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(f"{len(args.et)} file(s)", args.et)]
        if args.grow:
            grown = Path(tmp) / "grown.0.et"
            n = grow(Path(args.et[0]), grown, args.grow)
            cases.append((f"{n:,} nodes grown", [str(grown)]))
        srcs = args.src or [""]
        for label, paths in cases:
            best: dict[str, tuple[float, float, int]] = {}
            for _ in range(args.repeat):
                for src in srcs:
                    env = dict(os.environ, CHAKRA_PARTS="1")
                    if src:
                        env["PYTHONPATH"] = os.path.abspath(src)
                    out = subprocess.run([sys.executable, __file__, "--child", *paths], env=env,
                                         capture_output=True, text=True, check=True).stdout.split()
                    got = (float(out[0]), float(out[1]), int(out[2]))
                    if src not in best or got[0] < best[src][0]:
                        best[src] = got
            first = best[srcs[0]][0]
            for src in srcs:
                cpu, wall, n = best[src]
                env = dict(os.environ, CHAKRA_PARTS="1")
                if src:
                    env["PYTHONPATH"] = os.path.abspath(src)
                held = int(subprocess.run([sys.executable, __file__, "--child", "--held", *paths], env=env,
                                          capture_output=True, text=True, check=True).stdout.split()[0])
                print(f"{label}: {src or 'installed'}: {n:,} nodes, {cpu:.3f} CPU s ({wall:.3f} s wall), "
                      f"{n / cpu:,.0f} nodes/s, x{cpu / first:.3f} of the first; "
                      f"{held / n:,.1f} B a node held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
