#!/usr/bin/env python3
"""The visualizer on real GPU ranks: a whole rank's ``.dot`` text, and the ``--coarse`` PNG.

    python benchmarks/bench_visualizer.py                       # this checkout
    python benchmarks/bench_visualizer.py --src /work/main/src  # another checkout's code, same inputs
    python benchmarks/bench_visualizer.py --repeat 3            # the fastest of 3 runs per case

Inputs (made once into ``--work`` by this checkout's CLI, from the corpus at ../shared/traces or
``CHAKRA_TRACE_CORPUS``):

* ``dlrm0``: ``chakra pipeline dlrm_8r_v100``, rank 0 (1,936 nodes, 8 collectives; host ET + Kineto);
* ``a100``: ``kineto_only/hta/a100_rank3_of_8_nccl`` linked Kineto-only (50,223 nodes, 6 steps), and
  ``a100_step``: the same linked with ``--step 1010`` (8,373 nodes, 10 collectives);
* ``v100``: ``kineto_only/hta/v100_rank1_of_2_nccl`` linked Kineto-only (81,008 nodes, 2,020 collectives),
  and ``v100_6k``: its step 3 (``--step 3``, 16,204 nodes) cut to the 6,000 nodes that start from the
  4,400th on (the node-range cut, in time order: CPU and GPU ops of the same stretch, 66 collectives;
  dependencies on the nodes cut away are dropped).

Each case is ``chakra visualize`` in a fresh process (start-up and imports included, as a user runs it;
graphviz's ``dot`` included for drawings): wall seconds and CPU seconds (user + system of the process and
its children: on a machine shared with other jobs the wall time moves with their load, the CPU time much
less), the PNG's width and height read off its header, and what the drawing holds (boxes, collective boxes:
counted in the ``.dot`` text of the same view).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))
HTA = CORPUS / "kineto_only" / "hta"


def _chakra(args: list[str], src: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, "-m", "chakra.cli.main", *args], env=env, capture_output=True,
                          text=True, check=check)


def _cut(src: Path, dst: Path, first: int, count: int) -> None:
    """The nodes of ``src`` in (start, id) order from position ``first``, ``count`` of them, in file order;
    dependencies on the others dropped."""
    sys.path.insert(0, str(REPO / "src"))
    from chakra.io import read_messages, write_messages
    from chakra.schema import GlobalMetadata, Node

    meta, nodes = read_messages(src, GlobalMetadata, Node)
    order = sorted(nodes, key=lambda n: (n.start_time_micros, n.id))
    keep = {n.id for n in order[first:first + count]}
    kept = []
    for n in nodes:
        if n.id in keep:
            ctrl = [d for d in n.ctrl_deps if d in keep]
            data = [d for d in n.data_deps if d in keep]
            del n.ctrl_deps[:], n.data_deps[:]
            n.ctrl_deps.extend(ctrl)
            n.data_deps.extend(data)
            kept.append(n)
    write_messages(dst, [meta[0] if isinstance(meta, list) else meta, *kept])


def prepare(work: Path) -> dict[str, Path]:
    """The input ETs (made once)."""
    src = REPO / "src"
    work.mkdir(parents=True, exist_ok=True)
    out = {"dlrm0": work / "dl" / "dlrm_8r_v100.0.et"}
    if not out["dlrm0"].exists():
        _chakra(["pipeline", str(CORPUS / "dlrm_8r_v100"), "-o", str(work / "dl"), "-q"], src)
    a100, v100 = "a100_rank3_of_8_nccl", "v100_rank1_of_2_nccl"
    for name, trace, step in (("a100", a100, None), ("a100_step", a100, 1010), ("v100", v100, None),
                              ("v100_step", v100, 3)):
        et = out[name] = work / f"{name}.et"
        if et.exists():
            continue
        etplus = work / f"{name}.json"
        _chakra(["link", "--kineto-only", "--chakra-device-trace", str(HTA / f"{trace}.json.gz"), "-o",
                 str(etplus), *(["--step", str(step)] if step else []), "-q"], src)
        _chakra(["convert", "PyTorch", "--input", str(etplus), "--output", str(et)], src)
        etplus.unlink()
    out["v100_6k"] = work / "v100_6k.et"
    if not out["v100_6k"].exists():
        _cut(out["v100_step"], out["v100_6k"], 4400, 6000)
    return out


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk (bytes 16-24)."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def run_case(et: Path, out: Path, extra: list[str], src: Path) -> dict[str, object]:
    out.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = _chakra(["visualize", str(et), "-o", str(out), *extra], src, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res: dict[str, object] = {"wall_s": wall, "cpu_s": cpu, "rc": proc.returncode}
    if proc.returncode:
        res["error"] = proc.stderr.strip().splitlines()[-1][:160] if proc.stderr.strip() else ""
    elif out.suffix == ".png":
        res["width"], res["height"] = png_size(out)
    return res


def drawn(et: Path, extra: list[str], src: Path, tmp: Path) -> str:
    """Boxes and collective boxes of the coarse view (its .dot text)."""
    dot = tmp / "view.dot"
    if _chakra(["visualize", str(et), "-o", str(dot), *extra, "--max-nodes", "100000"], src,
               check=False).returncode:
        return "?"
    text = dot.read_text()
    boxes = re.findall(r"^  n\d+ \[label=.*fillcolor=(\w+)", text, flags=re.M)
    return f"{len(boxes)} boxes, {boxes.count('orange')} collective"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the package source to measure")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "chakra_bench_viz")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (the fastest is shown)")
    args = ap.parse_args()
    if not HTA.is_dir():
        raise SystemExit(f"the corpus is not at {CORPUS} (set CHAKRA_TRACE_CORPUS)")
    inputs = prepare(args.work)
    cases = [
        ("a100 whole rank, .dot", "a100", "dot", []),
        ("v100 whole rank, .dot", "v100", "dot", []),
        ("dlrm0 --coarse, .png", "dlrm0", "png", ["--coarse"]),
        ("a100 step 1010 --coarse, .png", "a100_step", "png", ["--coarse"]),
        ("v100 6k cut --coarse, .png", "v100_6k", "png", ["--coarse"]),
    ]
    _chakra(["visualize", "--help"], args.src)      # byte-code caches written before the timed runs
    print(f"code: {args.src}")
    print(f"{'case':32} {'wall s':>7} {'cpu s':>7}  {'PNG w x h':>13}  drawn")
    for label, key, suffix, extra in cases:
        out = args.work / f"out_{key}.{suffix}"
        runs = [run_case(inputs[key], out, extra, args.src) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: float(r["wall_s"]))    # type: ignore[arg-type]
        size = f"{best['width']:,} x {best['height']:,}" if "width" in best else ""
        what = drawn(inputs[key], extra, args.src, args.work) if extra else ""
        status = f"exit {best['rc']}: {best.get('error', '')}" if best["rc"] else what
        if suffix == "dot" and not best["rc"]:
            status = f"{out.stat().st_size / 2**20:.1f} MB of dot text"
        print(f"{label:32} {best['wall_s']:7.2f} {best['cpu_s']:7.2f}  {size:>13}  {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
