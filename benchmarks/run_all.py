"""One command for the whole benchmark suite: every stage, every real trace, synthetic traces up to 1M ops.

    python benchmarks/run_all.py                       # DLRM 8 ranks, cpu_gloo jobs, synthetic 10k/100k/1M
    python benchmarks/run_all.py --quick               # DLRM rank 0, cpu_gloo single_1r, synthetic 10k
    python benchmarks/run_all.py --sizes 10000,100000 --out /tmp/bench

Every measurement runs in a fresh subprocess (clean heap; its own peak RSS, read from ``VmHWM`` in
``/proc/self/status`` at the end of the child, falling back to ``getrusage(RUSAGE_SELF)``).  Wall time is
measured inside the child around the one call (interpreter start-up and imports excluded).  Stages:

* ``read``      baseline: read + gunzip the bytes of the host ET and the Kineto trace (the floor);
* ``json.load`` baseline: the standard library's ``json.loads`` of both files (what a naive tool does);
* ``load_host`` ``chakra.host.loader.load_host_et``; ``load_kineto`` ``chakra.device.loader.load_kineto``;
* ``link``      ``chakra.link.link_files`` (load both, link, write the ET+ JSON);
* ``convert``   ``chakra.convert.convert_file`` (ET+ -> Chakra protobuf ``.et``);
* ``replay``    ``chakra.replay.replay_file`` (one rank on its own).

Ratios (never absolute limits): load stages against ``json.load`` of the same file, every stage against the
read floor of its inputs, and for the synthetic traces the growth of the link -> convert -> replay total
from one size to the next.  Writes ``results.md`` and ``results.json`` into ``--out``.
Synthetic inputs (``benchmarks/synth.py``, about one GPU op per host op: ``kernels_per_leaf=2.3``, kernels
on 4 streams, 2 CPU threads, all_reduce on 3 process groups, 0.1% Kineto ops dropped / 0.1% added) are
cached in ``--work`` (default ``/tmp/chakra_bench``) and reused when present.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))
STAGES = ("read", "json.load", "load_host", "load_kineto", "link", "convert", "replay")
PIPELINE = ("link", "convert", "replay")
KERNELS_PER_LEAF = 2.3
TARGET_S = 60.0
TARGET_MB = 3 * 1024.0
TARGET_GROWTH = 12.0


# ---- child side ---------------------------------------------------------------------------------------

def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_kb(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _tree_rss_kb(pid: int) -> tuple[int, int]:
    """(RSS of ``pid`` plus all its descendants in kB, number of descendants)."""
    total, n = _rss_kb(str(pid)), 0
    todo = _children(pid)
    while todo:
        c = todo.pop()
        n += 1
        total += _rss_kb(str(c))
        todo += _children(c)
    return total, n


def child(stage: str, host: str, kineto: str, etplus: str, et: str) -> None:
    """Run one stage in this (fresh) process; print its measurements as one JSON line and exit."""
    import logging

    logging.disable(logging.WARNING)
    sys.path.insert(0, str(REPO / "src"))
    info: dict[str, Any] = {}
    if stage == "read":
        from chakra.io import read_bytes

        t = time.perf_counter()
        info["bytes"] = len(read_bytes(host)) + len(read_bytes(kineto))
    elif stage == "json.load":
        from chakra.io import read_bytes

        t = time.perf_counter()
        docs = [json.loads(read_bytes(p)) for p in (host, kineto)]  # kept, like the loaders' models
        info["documents"] = len(docs)
    elif stage == "load_host":
        from chakra.host.loader import load_host_et

        t = time.perf_counter()
        trace: Any = load_host_et(host)  # kept: freeing it is not part of loading
        info["host_ops"] = len(trace.ops)
    elif stage == "load_kineto":
        from chakra.device.loader import load_kineto

        t = time.perf_counter()
        trace = load_kineto(kineto)
        info["kineto_events"] = len(trace.events)
    elif stage == "link":
        from chakra.link import link_files

        t = time.perf_counter()
        r = link_files(host, kineto, etplus)
        info.update(host_ops=r.host_ops, matched=r.matched, gpu_ops=r.gpu_ops, gpu_attached=r.gpu_attached)
    elif stage == "convert":
        from chakra.convert import convert_file

        t = time.perf_counter()
        info["nodes"] = convert_file(etplus, et).nodes
    elif stage == "replay":
        from chakra.replay import replay_file

        t = time.perf_counter()
        r = replay_file(et)
        info.update(nodes=r.num_nodes, replayed_us=r.replayed_us)
    else:
        raise SystemExit(f"unknown stage {stage}")
    info["seconds"] = time.perf_counter() - t
    info["peak_mb"] = _peak_mb()
    import resource

    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if child_kb:
        info["child_peak_mb"] = child_kb / 1024.0
    print(json.dumps(info), flush=True)
    os._exit(0)  # no teardown of millions of objects: it is not part of any stage


# ---- parent side --------------------------------------------------------------------------------------

def measure(stage: str, host: Path, kineto: Path, etplus: Path, et: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, str(host), str(kineto),
           str(etplus), str(et)]
    # The stage may fork helpers (the linker reads a large host ET in a child while it reads the Kineto
    # trace): sampled from here every 20 ms, the largest RSS sum over the stage's process tree is its peak
    # when it exceeds the stage process's own high-water mark.
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        import threading

        tree_peak_kb, helpers = 0, 0
        done = threading.Event()

        def sample() -> None:
            nonlocal tree_peak_kb, helpers
            while not done.wait(0.02):
                kb, n = _tree_rss_kb(proc.pid)
                if n:
                    helpers = max(helpers, n)
                    tree_peak_kb = max(tree_peak_kb, kb)

        sampler = threading.Thread(target=sample, daemon=True)
        if os.path.isdir(f"/proc/{proc.pid}"):
            sampler.start()
        out, err = proc.communicate()
        done.set()
        if sampler.is_alive():
            sampler.join()
    if proc.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-5:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    info = json.loads(out.strip().splitlines()[-1])
    if helpers:
        info["process_peak_mb"] = info["peak_mb"]
        info["tree_peak_mb"] = tree_peak_kb / 1024.0
        info["peak_mb"] = max(info["peak_mb"], tree_peak_kb / 1024.0)
    return info


def real_cases(quick: bool) -> list[tuple[str, str, Path, Path]]:
    """(group, case name, host ET, Kineto) of the corpus traces."""
    cases = []
    dlrm = CORPUS / "dlrm_8r_v100"
    for r in range(1 if quick else 8):
        cases.append(("dlrm_8r_v100", f"dlrm rank {r}", dlrm / "host" / f"host_et_{r}.json.gz",
                      dlrm / "device" / f"kineto_{r}.json.gz"))
    jobs = ["single_1r"] if quick else ["ddp_mlp_4r", "fsdp_2r", "tp_like_2r", "single_1r"]
    for job in jobs:
        d = CORPUS / "cpu_gloo" / job
        for hp in sorted(d.glob("host_et_*.json.gz")):
            r = hp.name.split("_")[2].split(".")[0]
            cases.append(("cpu_gloo", f"{job} rank {r}", hp, d / f"kineto_{r}.json.gz"))
    return [c for c in cases if c[2].exists() and c[3].exists()]


def synthetic_case(n: int, work: Path) -> tuple[str, str, Path, Path]:
    d = work / f"synth_{n}"
    hp, kp = d / "host_et_0.json", d / "kineto_0.json"
    marker = d / f"done_k{KERNELS_PER_LEAF}"
    if not marker.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from synth import generate

        print(f"generating synthetic {n} host ops in {d} ...", file=sys.stderr, flush=True)
        generate(n, d, ranks=1, seed=0, drop_rate=0.001, extra_rate=0.001, kernels_per_leaf=KERNELS_PER_LEAF)
        marker.touch()
    return ("synthetic", f"synthetic {n:,}", hp, kp)


def run_case(group: str, name: str, host: Path, kineto: Path, work: Path, log: bool) -> dict[str, Any]:
    tmp = work / "out" / name.replace(" ", "_").replace(",", "")
    tmp.mkdir(parents=True, exist_ok=True)
    etplus, et = tmp / "et_plus.json", tmp / "trace.et"
    row: dict[str, Any] = {"group": group, "case": name, "host": str(host), "kineto": str(kineto),
                           "stages": {}}
    for stage in STAGES:
        m = measure(stage, host, kineto, etplus, et)
        row["stages"][stage] = m
        if log:
            what = m.get("error") or f"{m['seconds']:.2f} s, {m['peak_mb']:.0f} MB"
            print(f"  {name:>22} {stage:>11}: {what}", file=sys.stderr, flush=True)
    for p in (etplus, et):
        if group == "synthetic" and p.exists():
            p.unlink()   # hundreds of MB each at 1M
    return row


def _s(row: dict[str, Any], stage: str, key: str = "seconds") -> float | None:
    m = row["stages"].get(stage) or {}
    return m.get(key)


def summarise(row: dict[str, Any]) -> None:
    st = row["stages"]
    if all("seconds" in st.get(s, {}) for s in PIPELINE):
        row["pipeline_s"] = sum(st[s]["seconds"] for s in PIPELINE)
        row["pipeline_peak_mb"] = max(st[s]["peak_mb"] for s in PIPELINE)
    link = st.get("link", {})
    row["host_ops"] = link.get("host_ops") or st.get("load_host", {}).get("host_ops")
    row["gpu_ops"] = link.get("gpu_ops")
    row["kineto_events"] = st.get("load_kineto", {}).get("kineto_events")
    row["nodes"] = st.get("convert", {}).get("nodes")


def fmt(v: float | None, spec: str = ".2f") -> str:
    if v is None:
        return "-"
    if spec == ".2f" and v < 0.1:
        spec = ".3f"
    return format(v, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [f"# Benchmark results ({meta['date']}, {meta['machine']})", ""]
    out.append(
        "Per stage: seconds inside a fresh process / that process's peak RSS in MB. `loads vs json` = "
        "(load_host + load_kineto) time / stdlib `json.loads` of both files; `total` = link + convert + "
        "replay (each stage in its own process; peak = the largest of the three); `vs read` = total / "
        "read+gunzip of the two input files (the floor).  Link, convert and replay fork one helper "
        "process for large inputs (the second core loads part of the input): a stage's peak is the larger "
        "of its own high-water mark and the largest RSS sum over its process tree, sampled every 20 ms "
        "(`results.json` has both, and the helper's own peak)."
    )
    out.append("")
    cols = ["case", "host ops", "Kineto events", "GPU ops", "ET nodes", "read s", "json.loads s",
            "load_host", "load_kineto", "loads vs json", "link", "convert", "replay", "total s",
            "peak MB", "vs read"]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "---|" * len(cols))
    for r in rows:
        st = r["stages"]
        if any("error" in m for m in st.values()):
            errs = "; ".join(f"{k}: {m['error']}" for k, m in st.items() if "error" in m)
            out.append(f"| {r['case']} | error: {errs[:200]} |" + " |" * (len(cols) - 2))
            continue

        def sm(stage: str, r: dict[str, Any] = r) -> str:
            return f"{fmt(_s(r, stage))} s / {fmt(_s(r, stage, 'peak_mb'), '.0f')}"

        both = (_s(r, "load_host") or 0) + (_s(r, "load_kineto") or 0)
        cells = [r["case"], r.get("host_ops"), r.get("kineto_events"), r.get("gpu_ops"), r.get("nodes"),
                 fmt(_s(r, "read")), fmt(_s(r, "json.load")), sm("load_host"), sm("load_kineto"),
                 ratio(both, _s(r, "json.load")), sm("link"), sm("convert"), sm("replay"),
                 fmt(r.get("pipeline_s")), fmt(r.get("pipeline_peak_mb"), ".0f"),
                 ratio(r.get("pipeline_s"), _s(r, "read"))]
        out.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    synth = [r for r in rows if r["group"] == "synthetic" and r.get("pipeline_s")]
    if synth:
        out += ["", "## Synthetic scaling and targets", "",
                "| host ops | GPU ops | link+convert+replay s | growth (time / size) | peak MB | "
                f"< {TARGET_S:.0f} s | < {TARGET_MB / 1024:.0f} GB | growth <= {TARGET_GROWTH:.0f} per 10x |",
                "|---|---|---|---|---|---|---|---|"]
        prev = None
        for r in synth:
            growth, ok_g = "-", "-"
            if prev is not None:
                g = r["pipeline_s"] / prev["pipeline_s"]
                size = r["host_ops"] / prev["host_ops"]
                growth = f"{g:.1f}x / {size:.1f}x"
                ok_g = "yes" if g <= TARGET_GROWTH * size / 10 else "no"
            big = r["host_ops"] >= 900_000
            ok_t = ("yes" if r["pipeline_s"] < TARGET_S else "no") if big else "-"
            ok_m = ("yes" if r["pipeline_peak_mb"] < TARGET_MB else "no") if big else "-"
            out.append(f"| {r['host_ops']:,} | {r['gpu_ops']:,} | {r['pipeline_s']:.1f} | {growth} | "
                       f"{r['pipeline_peak_mb']:.0f} | {ok_t} | {ok_m} | {ok_g} |")
            prev = r
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(*argv[1:6])  # prints its result and exits
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="DLRM rank 0, cpu_gloo single_1r, synthetic 10k")
    ap.add_argument("--sizes", default=None, help="synthetic host-op counts, comma separated "
                                                   "(default 10000,100000,1000000; --quick: 10000)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--work", type=Path, default=Path("/tmp/chakra_bench"))
    ap.add_argument("--no-real", action="store_true", help="skip the corpus traces")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in (a.sizes or ("10000" if a.quick else "10000,100000,1000000")).split(",") if x]
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    cases = [] if a.no_real else real_cases(a.quick)
    cases += [synthetic_case(n, a.work) for n in sizes]
    rows = []
    t0 = time.perf_counter()
    for group, name, hp, kp in cases:
        row = run_case(group, name, hp, kp, a.work, log=True)
        summarise(row)
        rows.append(row)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine, "wall_s": time.perf_counter() - t0,
            "sizes": sizes}
    md = markdown(rows, meta)
    (a.out / "results.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
