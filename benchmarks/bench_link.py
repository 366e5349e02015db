"""Link time and peak memory: every DLRM rank of the corpus, and synthetic traces of growing size.

Each measurement runs in a fresh subprocess (clean heap, honest max RSS):

The stages are timed as ``link_files`` runs them (cyclic GC paused): host ET load, Kineto load, the
passes (``link s``: window, matching, GPU attachment, collectives, dependencies; median of ``--repeat``),
the ET+ write (``write s``: the nodes are made while they are written, in parts up to 100k nodes:
``link.api.NodeRanges``; median), the tracemalloc peak of one passes + write (this process only), the
process max RSS.

* DLRM: per rank;
* synthetic (``benchmarks/synth.py``): ``--sizes`` host ops (default 10k, 100k,
  1M) with kernels on several streams, two threads and collectives on three
  process groups, 0.1% of the Kineto ops dropped and 0.1% extra ones added so
  the tolerant alignment path is exercised; the table shows link time per host
  op and the growth factor against the previous size, to show near-linear growth.

* ``--inputs DIR ...``: ready-made folders holding ``host_et_0.json`` and ``kineto_0.json`` (e.g. the
  real-weight traces of ``benchmarks/synth.py N DIR --weight real``), one row each, stage by stage; "both
  loads as link_files" is ``load_pair`` (the Kineto trace in a forked child while the host ET loads, with
  two or more parts: ``CHAKRA_PARTS=1`` for one core), the total counts it instead of the two loads.

Usage: ``python benchmarks/bench_link.py [--corpus DIR] [--sizes 10000 100000 1000000] [--repeat 3]
[--skip-dlrm] [--skip-synth] [--inputs DIR ...] [--keep DIR]``.  Prints markdown tables.  Never run
from the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))

_CHILD = r"""
import gc, json, resource, statistics, sys, time, tracemalloc
sys.path.insert(0, {src!r})
from chakra.host.loader import load_host_et
from chakra.device.loader import load_kineto
from chakra.io import gc_paused
from chakra.io.jsonio import dump_json_ranges
from chakra.link.api import _prepare, load_pair
from chakra.tunables import INTER_THREAD_GAP_US
host_path, kineto_path, out_path, repeat, trace_mem = {args!r}
with gc_paused():   # as link_files runs the stages
    t = time.perf_counter()
    pair = load_pair(host_path, kineto_path)   # as link_files loads: the Kineto trace in a child (2 parts)
    t_pair = time.perf_counter() - t
    del pair
    t = time.perf_counter()
    host = load_host_et(host_path)
    t_host = time.perf_counter() - t
    t = time.perf_counter()
    kineto = load_kineto(kineto_path)
    t_kineto = time.perf_counter() - t
    times = []
    writes = []
    for _ in range(repeat):
        t = time.perf_counter()
        doc, nodes = _prepare(host, kineto, None, None, INTER_THREAD_GAP_US)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        dump_json_ranges(out_path, doc, "nodes", nodes.pieces(), nodes.make)   # made while written
        writes.append(time.perf_counter() - t)
    peak = None
    if trace_mem:
        del nodes
        gc.collect()
        tracemalloc.start()
        doc, nodes = _prepare(host, kineto, None, None, INTER_THREAD_GAP_US)
        dump_json_ranges(out_path, doc, "nodes", nodes.pieces(), nodes.make)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
s = doc["link_stats"]
print(json.dumps({{
    "host_load_s": t_host, "kineto_load_s": t_kineto, "load_s": t_host + t_kineto, "pair_load_s": t_pair,
    "link_s": statistics.median(times), "write_s": statistics.median(writes), "link_peak_bytes": peak,
    "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "host_ops": s["host_ops"], "matched": s["matched"], "gpu_ops": s["gpu_ops"],
    "gpu_attached": s["gpu_attached"], "kineto_events": len(kineto.events), "strategy": s["strategy"],
    "sync_deps": s["sync_deps"], "inter_thread_deps": s["inter_thread_deps"],
}}))
"""


def measure(host: Path, kineto: Path, out: Path, repeat: int, trace_mem: bool) -> dict[str, Any]:
    code = _CHILD.format(src=str(REPO / "src"), args=(str(host), str(kineto), str(out), repeat, trace_mem))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"measurement failed for {host}:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def bench_dlrm(corpus: Path, repeat: int, tmp: Path) -> None:
    folder = corpus / "dlrm_8r_v100"
    if not folder.is_dir():
        print(f"(no DLRM corpus at {folder}: skipped)")
        return
    print("## DLRM (dlrm_8r_v100), one subprocess per rank\n")
    print(
        "| rank | host ops | matched | GPU ops | attached | load s | link s | write s | "
        "link peak MiB (tracemalloc) | max RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rank in range(8):
        r = measure(
            folder / "host" / f"host_et_{rank}.json.gz",
            folder / "device" / f"kineto_{rank}.json.gz",
            tmp / f"et_plus_{rank}.json",
            repeat,
            True,
        )
        print(
            f"| {rank} | {r['host_ops']} | {r['matched']} | {r['gpu_ops']} | {r['gpu_attached']} | "
            f"{r['load_s']:.3f} | {r['link_s']:.3f} | {r['write_s']:.3f} | {mib(r['link_peak_bytes'])} | "
            f"{mib(r['max_rss_bytes'])} |"
        )
    print()


def bench_synth(sizes: list[int], repeat: int, tmp: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synth import generate

    print("## Synthetic traces (benchmarks/synth.py, drop 0.1%, extra 0.1%)\n")
    print(
        "| host ops | Kineto events | GPU ops | matched | attached | load s | link s | µs per host op | "
        "growth vs previous (time / size) | write s | link peak MiB | max RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    prev: tuple[int, float] | None = None
    for n in sizes:
        d = tmp / f"synth_{n}"
        ((hp, kp),) = generate(n, d, ranks=1, seed=0, drop_rate=0.001, extra_rate=0.001)
        r = measure(hp, kp, d / "et_plus_0.json", repeat if n < 1_000_000 else 1, n <= 100_000)
        per_op = r["link_s"] / r["host_ops"] * 1e6
        growth = "-"
        if prev is not None:
            growth = f"{r['link_s'] / prev[1]:.1f}x / {r['host_ops'] / prev[0]:.1f}x"
        prev = (r["host_ops"], r["link_s"])
        print(
            f"| {r['host_ops']} | {r['kineto_events']} | {r['gpu_ops']} | {r['matched']} | "
            f"{r['gpu_attached']} | "
            f"{r['load_s']:.2f} | {r['link_s']:.2f} | {per_op:.1f} | {growth} | {r['write_s']:.2f} | "
            f"{mib(r['link_peak_bytes'])} | {mib(r['max_rss_bytes'])} |"
        )
        for p in d.iterdir():
            if p.suffix == ".json" and n >= 1_000_000:
                p.unlink()
    print()


def bench_inputs(dirs: list[Path], repeat: int, tmp: Path) -> None:
    print("## Ready-made inputs, stage by stage (seconds)\n")
    print("| inputs | host ops | GPU ops | host load | Kineto load | both loads as link_files | "
          "link (passes) | write | total | max RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        r = measure(d / "host_et_0.json", d / "kineto_0.json", tmp / "et_plus.json", repeat, False)
        total = r["pair_load_s"] + r["link_s"] + r["write_s"]
        print(f"| {d} | {r['host_ops']} | {r['gpu_ops']} | {r['host_load_s']:.2f} | "
              f"{r['kineto_load_s']:.2f} | {r['pair_load_s']:.2f} | {r['link_s']:.2f} | {r['write_s']:.2f} | "
              f"{total:.2f} | "
              f"{mib(r['max_rss_bytes'])} |")
        (tmp / "et_plus.json").unlink(missing_ok=True)
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-dlrm", action="store_true")
    ap.add_argument("--skip-synth", action="store_true")
    ap.add_argument("--inputs", type=Path, nargs="+", default=[],
                    help="folders with host_et_0.json + kineto_0.json (then DLRM and synth are skipped)")
    ap.add_argument("--keep", type=Path, default=None, help="work directory to keep (default: a temp dir)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_link_") as tmpname:
        tmp = a.keep or Path(tmpname)
        tmp.mkdir(parents=True, exist_ok=True)
        if a.inputs:
            bench_inputs(a.inputs, a.repeat, tmp)
            return 0
        if not a.skip_dlrm:
            bench_dlrm(a.corpus, a.repeat, tmp)
        if not a.skip_synth:
            bench_synth(a.sizes, a.repeat, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
