"""Load time and peak memory of the host ET and Kineto loaders against ``json.load(gzip.open(...))``.

Runs on the 16 DLRM files of the shared corpus (8 host ETs, 8 Kineto traces):

* time: median of ``--repeat`` warm loads in this process (our loaders vs. the
  plain standard-library baseline, interleaved, same run);
* memory: one cold load per case in a fresh subprocess, reporting the
  tracemalloc peak of the load (Python allocations) and the growth of the
  process's max RSS (``resource.getrusage``).

``--scale N`` additionally builds a synthetic flat host ET of N nodes (the DLRM
rank-0 nodes repeated with fresh ids), writes it gzipped to a temp dir and
measures it the same way: how the loader behaves at a million ops.

Usage: ``python benchmarks/bench_load.py [--corpus DIR] [--repeat 5] [--scale 1000000]``.
Prints a markdown table and the overall ratios.  Never run from the tests.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))


def baseline_load(path: str) -> Any:
    with gzip.open(path) as fh:
        return json.load(fh)


def host_load(path: str) -> Any:
    from chakra.host.loader import load_host_et

    return load_host_et(path)


def kineto_loader() -> Callable[[str], Any] | None:
    """The Kineto loader if it exists yet (written by another helper), else None."""
    try:
        from chakra.device.loader import load_kineto  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - any import problem means "not ready": skip that half
        return None
    return load_kineto


def time_it(fn: Callable[[str], Any], path: str, repeat: int) -> float:
    """Median wall time (s) of ``repeat`` loads after one warm-up load."""
    fn(path)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn(path)
        samples.append(time.perf_counter() - t0)
        del result
    return statistics.median(samples)


_MEM_CHILD = r"""
import json, resource, sys, tracemalloc
sys.path.insert(0, {bench_dir!r})
import bench_load as b
kind, path = sys.argv[1], sys.argv[2]
fn = b.baseline_load if kind == "baseline" else b.host_load if kind == "host" else b.kineto_loader()
if kind == "host":
    import chakra.host.loader  # imports are not part of the load
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
obj = fn(path)
cur, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"peak": peak, "retained": cur, "rss_kb": rss1 - rss0}}))
"""


def measure_memory(kind: str, path: str) -> dict[str, int]:
    code = _MEM_CHILD.format(bench_dir=str(Path(__file__).resolve().parent))
    out = subprocess.run([sys.executable, "-c", code, kind, path], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    return json.loads(out.stdout.strip().splitlines()[-1])


def synth_host_et(src: Path, n_nodes: int, out_dir: Path) -> Path:
    """A flat host ET of ``n_nodes`` nodes: ``src``'s op nodes repeated with fresh, unique ids."""
    with gzip.open(src) as fh:
        data = json.load(fh)
    template = [n for n in data["nodes"] if n["id"] > 2]
    nodes: list[dict[str, Any]] = [dict(data["nodes"][0])]  # a thread root, id 2
    shift = max(n["id"] for n in data["nodes"]) + 10
    round_no = 0
    while len(nodes) < n_nodes - 1:
        base = shift * round_no
        for n in template:
            if len(nodes) >= n_nodes - 1:
                break
            m = dict(n)
            m["id"] = n["id"] + base
            m["parent"] = n["parent"] + base if n["parent"] > 2 else 2
            nodes.append(m)
        round_no += 1
    nodes.append(next(n for n in data["nodes"] if n["id"] == 1))
    data["nodes"] = nodes
    path = out_dir / f"synthetic_{n_nodes}.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as fh:
        json.dump(data, fh)
    return path


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def fmt_mb(b: float) -> str:
    return f"{b / 2**20:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", type=int, default=0, help="also a synthetic host ET of this many nodes")
    ap.add_argument("--no-memory", action="store_true", help="skip the subprocess memory measurements")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(REPO / "src"))
    dlrm = args.corpus / "dlrm_8r_v100"
    if not dlrm.is_dir():
        print(f"corpus not found: {dlrm} (set --corpus or CHAKRA_TRACE_CORPUS)", file=sys.stderr)
        return 2
    host_files = sorted((dlrm / "host").glob("*.json.gz"))
    cases: list[tuple[str, str, Path]] = [("host", "host", p) for p in host_files]
    kin = kineto_loader()
    if kin is None:
        print("note: chakra.device.loader.load_kineto not importable yet; Kineto half skipped\n")
    else:
        cases += [("kineto", "kineto", p) for p in sorted((dlrm / "device").glob("*.json.gz"))]

    tmp: tempfile.TemporaryDirectory[str] | None = None
    if args.scale:
        tmp = tempfile.TemporaryDirectory()
        synth = synth_host_et(dlrm / "host" / "host_et_0.json.gz", args.scale, Path(tmp.name))
        cases.append(("host", f"synthetic {args.scale:,} nodes", synth))

    rows = []
    totals: dict[str, list[float]] = {"host": [0.0, 0.0, 0.0, 0.0], "kineto": [0.0, 0.0, 0.0, 0.0]}
    for kind, label, path in cases:
        ours = host_load if kind == "host" else kin
        assert ours is not None
        repeat = args.repeat if label in ("host", "kineto") else max(1, min(args.repeat, 2))
        t_base = time_it(baseline_load, str(path), repeat)
        t_ours = time_it(ours, str(path), repeat)
        m_base = m_ours = {"peak": 0, "retained": 0, "rss_kb": 0}
        if not args.no_memory:
            m_base = measure_memory("baseline", str(path))
            m_ours = measure_memory(kind, str(path))
        name = path.name if label in ("host", "kineto") else label
        rows.append((kind, name, path.stat().st_size, t_base, t_ours, m_base, m_ours))
        if label in ("host", "kineto"):
            tot = totals[kind]
            tot[0] += t_base
            tot[1] += t_ours
            tot[2] += m_base["peak"]
            tot[3] += m_ours["peak"]

    print("| loader | file | gz KiB | json.load ms | ours ms | time ratio | json.load peak MiB "
          "| ours peak MiB | ours retained MiB | mem ratio | maxRSS +MiB base/ours |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, name, size, tb, to, mb, mo in rows:
        mem_ratio = f"{mo['peak'] / mb['peak']:.2f}" if mb["peak"] else "-"
        print(f"| {kind} | {name} | {size / 1024:.0f} | {fmt_ms(tb)} | {fmt_ms(to)} | {to / tb:.2f} "
              f"| {fmt_mb(mb['peak'])} | {fmt_mb(mo['peak'])} | {fmt_mb(mo['retained'])} | {mem_ratio} "
              f"| {mb['rss_kb'] / 1024:.0f}/{mo['rss_kb'] / 1024:.0f} |")
    print()
    for kind, (tb, to, mb, mo) in totals.items():
        if tb:
            mem = f", peak memory ratio {mo / mb:.2f}" if mb else ""
            print(f"{kind}: total {fmt_ms(tb)} ms json.load vs {fmt_ms(to)} ms ours: "
                  f"time ratio ours/json.load = {to / tb:.2f}{mem}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
