"""One command for the whole benchmark suite: every stage, every real trace, synthetic traces up to 1M ops.

    python benchmarks/run_all.py              # corpus, real-weight synthetic 10k/100k/1M, the 5k-op CLI case
    python benchmarks/run_all.py --quick      # DLRM rank 0, cpu_gloo single_1r, real-weight 10k, CLI once
    python benchmarks/run_all.py --no-real --sizes 100000,1000000 --out /tmp/bench
    python benchmarks/run_all.py --no-real --sizes '' --light-sizes 10000,100000,1000000  # old light nodes

Every measurement runs in a fresh subprocess (clean heap; its own peak RSS, read from ``VmHWM`` in
``/proc/self/status`` at the end of the child, falling back to ``getrusage(RUSAGE_SELF)``).  Wall time is
measured inside the child around the one call (interpreter start-up and imports excluded).  Stages:

* ``read``                baseline: read + gunzip the bytes of the host ET and the Kineto trace (the floor);
* ``json.loads host|kineto``   baseline: the standard library's ``json.loads`` of one file (read included);
* ``orjson.loads host|kineto`` baseline: ``orjson.loads`` of one file (read included);
* ``load_host`` ``chakra.host.loader.load_host_et``; ``load_kineto`` ``chakra.device.loader.load_kineto``;
* ``link``      ``chakra.link.link_files`` (load both, link, write the ET+ JSON);
* ``convert``   ``chakra.convert.convert_file`` (ET+ -> Chakra protobuf ``.et``);
* ``replay``    ``chakra.replay.replay_file`` (one rank on its own).

Throughput: MB/s of each stage's input (uncompressed host ET + Kineto JSON for the link, the ET+ JSON for
the converter, the ``.et`` for the replay; MB = 2**20 bytes) beside nodes/s (host ops for the link, ET
nodes for the converter and the replay).  Ratios (never absolute limits): load stages against
``json.loads`` of the same files, every stage against the read floor of its inputs, and for the synthetic
traces the growth of the link -> convert -> replay total from one size to the next.

Synthetic inputs come from ``benchmarks/synth.py`` and are cached in ``--work`` (default
``/tmp/chakra_bench``), reused when present:

* ``--sizes`` (default 10k, 100k, 1M host ops): **real-weight** nodes (1.1.1-chakra.0.0.4, ten attrs,
  op_schema, tensors with shapes and strides, Record function id; ``kernels_per_leaf=1.3``: about one GPU op
  per three host ops, as in the issue's 5k-op trace);
* ``--spacing pytorch``: the real-weight JSON spaced as PyTorch's execution-trace writer and Kineto space
  it (the same values; cached in ``synth_real_pytorch_N``); default compact, as orjson writes it;
* ``--light-sizes`` (default none): the original light nodes (flat 1.0.1, ``kernels_per_leaf=2.3``: about
  one GPU op per host op, 0.1% Kineto ops dropped / 0.1% added), byte-identical to the earlier runs'.

The **CLI case** (``--cli-ops``, default 14,000 real-weight host ops: ~14.8k host nodes, ~4.8k GPU ops,
~24.6k Kineto X events, "the 5k-op trace" of issue 13) runs ``chakra_trace_link`` and then
``chakra_converter ... --simulate`` as two fresh processes, as a user would: wall time of each process
from the outside (interpreter start-up and imports included) and its peak RSS (``wait4``), ``--cli-repeat``
times.  ``--repeat N`` runs every case N times in a row (the machine is shared: the same code swings by
10-25 % within minutes): the tables give the run with the smallest link + convert + replay total, its peak
the largest of all the runs', and the scaling table lists every run's total.  Writes ``results.md`` and
``results.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("CHAKRA_TRACE_CORPUS", REPO.parent / "shared" / "traces"))
STAGES = ("read", "json.loads host", "json.loads kineto", "orjson.loads host", "orjson.loads kineto",
          "load_host", "load_kineto", "link", "convert", "replay")
PIPELINE = ("link", "convert", "replay")
#: kernels_per_leaf of the synthetic traces, by node weight (see the module doc)
KERNELS_PER_LEAF = {"real": 1.3, "light": 2.3}
CLI_OPS = 14_000
TARGET_S = 60.0
TARGET_MB = 3 * 1024.0
#: growth target per 10x: issue 13 for the real-weight nodes, issue 7 for the light ones
TARGET_GROWTH = {"real": 11.0, "light": 12.0}
MB = float(1 << 20)


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


def _proc_kb(pid: int, name: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            for line in fh:
                if line.startswith(key):
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


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


class TreePeak:
    """The peak memory of a stage's process tree, sampled from outside.

    A forked child shares every page of its parent until one side writes it; RSS counts such a page in
    both processes, PSS (``/proc/PID/smaps_rollup``) splits it between them, so a PSS sum is what the tree
    really occupies (an RSS sum counts the parent's loaded trace twice: 3988 vs 2737 MB for the 1M
    convert).  Reading ``smaps_rollup`` walks the page tables (~30 ms for a 2 GB process, under the lock
    that page faults take): done every 20 ms it slowed the 1M stages by a quarter.  So the RSS sum
    (``status``, ~0.1 ms) is sampled every 20 ms and the PSS sum only when the RSS sum reaches a new high
    while the process has children, at most twice a second.  ``VmRSS`` stands in for PSS on kernels without
    ``smaps_rollup`` (before Linux 4.14).
    """

    PSS_EVERY_S = 0.5

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_kb = self.pss_kb = self.helpers = 0
        self._last_pss = float("-inf")
        self._rss_at_pss = 0

    def sample(self) -> None:
        procs = _tree(self.pid)
        if len(procs) < 2:
            return
        self.helpers = max(self.helpers, len(procs) - 1)
        rss = sum(_proc_kb(p, "status", "VmRSS:") for p in procs)
        self.rss_kb = max(self.rss_kb, rss)
        now = time.monotonic()
        if rss > self._rss_at_pss and now - self._last_pss >= self.PSS_EVERY_S:
            self._last_pss, self._rss_at_pss = now, rss
            self.pss_kb = max(self.pss_kb, sum(_proc_kb(p, "smaps_rollup", "Pss:")
                                               or _proc_kb(p, "status", "VmRSS:") for p in procs))


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
    elif stage.startswith(("json.loads ", "orjson.loads ")):
        import orjson

        from chakra.io import read_bytes

        loads = json.loads if stage.startswith("json.") else orjson.loads
        path = host if stage.endswith(" host") else kineto
        t = time.perf_counter()
        data = read_bytes(path)
        doc = loads(data)  # kept, like the loaders' models
        info["bytes"] = len(data)
        info["items"] = len(doc.get("nodes") or doc.get("traceEvents") or ())
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
    # The stage may fork parts (chakra.io.forkmap): the largest PSS sum over its process tree (TreePeak) is
    # its peak when it exceeds the stage process's own high-water mark.
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        import threading

        peak = TreePeak(proc.pid)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                peak.sample()

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
    if peak.helpers:
        info["process_peak_mb"] = info["peak_mb"]
        info["tree_peak_mb"] = peak.pss_kb / 1024.0
        info["tree_rss_sum_peak_mb"] = peak.rss_kb / 1024.0
        info["peak_mb"] = max(info["peak_mb"], peak.pss_kb / 1024.0)
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


def synthetic_case(n: int, work: Path, weight: str = "real", spacing: str = "compact"
                   ) -> tuple[str, str, Path, Path]:
    """(group, name, host ET, Kineto) of a synthetic one-rank trace of ``n`` host ops, made when missing
    (``spacing``: see ``synth.generate``; real weight only)."""
    kpl = KERNELS_PER_LEAF[weight]
    if weight == "light":  # the directory and marker of the earlier runs: their cached inputs stay valid
        d, marker_name = work / f"synth_{n}", f"done_k{kpl}"
        extra: dict[str, Any] = {"drop_rate": 0.001, "extra_rate": 0.001}
    elif spacing == "compact":
        d, marker_name = work / f"synth_real_{n}", f"done_real_k{kpl}"
        extra = {}
    else:
        d, marker_name = work / f"synth_real_{spacing}_{n}", f"done_real_k{kpl}"
        extra = {"spacing": spacing}
    hp, kp = d / "host_et_0.json", d / "kineto_0.json"
    marker = d / marker_name
    if not marker.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from synth import generate

        print(f"generating synthetic {weight} {n} host ops in {d} ...", file=sys.stderr, flush=True)
        generate(n, d, ranks=1, seed=0, weight=weight, kernels_per_leaf=kpl, **extra)
        marker.touch()
    return (f"synthetic {weight}", f"{weight} {n:,}", hp, kp)


def run_case(group: str, name: str, host: Path, kineto: Path, work: Path, log: bool,
             skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    tmp = work / "out" / name.replace(" ", "_").replace(",", "")
    tmp.mkdir(parents=True, exist_ok=True)
    etplus, et = tmp / "et_plus.json", tmp / "trace.et"
    row: dict[str, Any] = {"group": group, "case": name, "host": str(host), "kineto": str(kineto),
                           "stages": {}}
    for stage in STAGES:
        if stage in skip or stage.split(" ")[0] in skip:
            continue
        m = measure(stage, host, kineto, etplus, et)
        row["stages"][stage] = m
        if stage == "link" and etplus.exists():
            row["etplus_bytes"] = etplus.stat().st_size
        if stage == "convert" and et.exists():
            row["et_bytes"] = et.stat().st_size
        if log:
            what = m.get("error") or f"{m['seconds']:.2f} s, {m['peak_mb']:.0f} MB"
            print(f"  {name:>22} {stage:>19}: {what}", file=sys.stderr, flush=True)
    for p in (etplus, et):
        if group.startswith("synthetic") and p.exists():
            p.unlink()   # hundreds of MB each at 1M
    return row


_CLI_CODE = """\
import atexit, os, sys
def _peak():  # this process's own high-water mark and its forked parts' largest, once main() is done
    import resource
    with open("/proc/self/status") as fh:
        kb = next((ln.split()[1] for ln in fh if ln.startswith("VmHWM:")), "0")
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(os.environ["CHAKRA_BENCH_PEAK_FILE"], "w") as out:
        out.write(f"{{kb}} {{kids}}")
atexit.register(_peak)
try:
    from {module} import console   # what the installed command runs ([project.scripts])
except ImportError:   # revisions before chakra.cli.entry (benchmarks/ab_cli.py runs them too)
    from {module} import main
    def console():
        sys.exit(main())
console()
"""


def _cli(module: str, args: list[str], peak_file: Path, src: Path = REPO / "src"
         ) -> tuple[float, float, int, float]:
    """Run ``python -c 'module.console()' args`` as a user would: (wall s, peak RSS MB, exit code, the largest
    peak RSS MB of the parts the command forked (``chakra.io.forkmap``; 0 when none)).

    The peak is the process's own ``VmHWM`` written at exit (``wait4``'s ``ru_maxrss`` would report this
    benchmark's own RSS, inherited through the fork).  Byte-code caching is on, as after ``pip install``
    (``PYTHONDONTWRITEBYTECODE`` dropped; :func:`run_cli_case` runs once unmeasured to write the caches).
    ``src``: the package to run (another revision's, ``benchmarks/ab_cli.py``).
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src),
                                                                     os.environ.get("PYTHONPATH")])),
           "CHAKRA_NO_PROGRESS": "1", "CHAKRA_BENCH_PEAK_FILE": str(peak_file)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if peak_file.exists():
        peak_file.unlink()
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CLI_CODE.format(module=module), *args], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    own, kids = ((peak_file.read_text().split() + ["0", "0"])[:2] if peak_file.exists() else ("nan", "nan"))
    return wall, float(own) / 1024.0, proc.returncode, float(kids) / 1024.0


def cli_pair(hp: Path, kp: Path, tmp: Path, src: Path = REPO / "src"
             ) -> tuple[tuple[float, float, int, float], tuple[float, float, int, float]]:
    """``chakra_trace_link`` then ``chakra_converter --simulate`` of ``hp`` + ``kp``, outputs in ``tmp``
    (removed first): :func:`_cli` of each."""
    etplus, et, sim_log = tmp / "et_plus.json", tmp / "trace.0.et", tmp / "simulate.log"
    for p in (etplus, et, sim_log):
        p.unlink(missing_ok=True)
    link = _cli("chakra.cli.trace_link", ["--chakra-host-trace", str(hp), "--chakra-device-trace", str(kp),
                                          "--output-file", str(etplus)], tmp / "peak", src)
    conv = _cli("chakra.cli.converter", ["--log-filename", str(sim_log), "PyTorch", "--input", str(etplus),
                                         "--output", str(et), "--simulate"], tmp / "peak", src)
    return link, conv


def run_cli_case(n: int, work: Path, repeat: int, log: bool, spacing: str = "compact") -> dict[str, Any]:
    """``chakra_trace_link`` then ``chakra_converter --simulate`` on a real-weight trace of ``n`` host ops."""
    _, name, hp, kp = synthetic_case(n, work, "real", spacing)
    tmp = work / "out" / f"cli_{n}"
    tmp.mkdir(parents=True, exist_ok=True)
    etplus, et, sim_log = tmp / "et_plus.json", tmp / "trace.0.et", tmp / "simulate.log"   # (cli_pair's)
    runs = []
    for k in range(repeat + 1):   # run 0 writes the byte-code caches (a user's pip install has them)
        link, conv = cli_pair(hp, kp, tmp)
        run = {"link_s": link[0], "link_peak_mb": link[1], "link_rc": link[2], "link_parts_peak_mb": link[3],
               "convert_s": conv[0], "convert_peak_mb": conv[1], "convert_rc": conv[2],
               "convert_parts_peak_mb": conv[3], "total_s": link[0] + conv[0]}
        if k == 0:
            continue
        runs.append(run)
        if log:
            print(f"  {'cli ' + name:>22}: link {link[0]:.2f} s / {link[1]:.0f} MB (exit {link[2]}), "
                  f"convert --simulate {conv[0]:.2f} s / {conv[1]:.0f} MB (exit {conv[2]})",
                  file=sys.stderr, flush=True)
    # the floor of the two processes: interpreter start-up and the imports of each command's stages
    floor = []
    for mods in ("chakra.cli.trace_link, chakra.link", "chakra.cli.converter, chakra.convert, chakra.replay"):
        t = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-c", f"import {mods}"], check=False, env=env)
        floor.append(time.perf_counter() - t)
    info: dict[str, Any] = {"case": name, "host_ops_requested": n, "runs": runs, "startup_imports_s": floor,
                            "input_bytes": hp.stat().st_size + kp.stat().st_size}
    if etplus.exists():
        import orjson

        doc = orjson.loads(etplus.read_bytes())
        ls = doc.get("link_stats") or {}
        info.update(host_ops=ls.get("host_ops"), gpu_ops=ls.get("gpu_ops"),
                    kineto_x_events=sum(1 for e in orjson.loads(kp.read_bytes())["traceEvents"]
                                        if e.get("ph") == "X"),
                    etplus_bytes=etplus.stat().st_size)
        del doc
    if sim_log.exists():
        info["completion_lines"] = sum(1 for ln in sim_log.open() if " completed at " in ln)
    for p in (etplus, et, sim_log):
        if p.exists():
            p.unlink()
    return info


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
    row["input_bytes"] = st.get("read", {}).get("bytes")
    for base in ("json.loads", "orjson.loads"):
        parts = [st.get(f"{base} {w}", {}) for w in ("host", "kineto")]
        if all("seconds" in m for m in parts):
            row[f"{base}_s"] = sum(m["seconds"] for m in parts)
            row[f"{base}_peak_mb"] = max(m["peak_mb"] for m in parts)


def best_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of a case with the smallest link + convert + replay total (the first one when none has a
    total), with every run's total (``run_totals_s``) and the largest of their peaks."""
    timed = [r for r in runs if r.get("pipeline_s") is not None]
    if len(runs) == 1 or not timed:
        return runs[0]
    best = dict(min(timed, key=lambda r: r["pipeline_s"]))
    best["run_totals_s"] = [r.get("pipeline_s") for r in runs]
    best["best_run_peak_mb"] = best["pipeline_peak_mb"]
    best["pipeline_peak_mb"] = max(r["pipeline_peak_mb"] for r in timed)
    return best


def fmt(v: float | None, spec: str = ".2f") -> str:
    if v is None:
        return "-"
    if spec == ".2f" and v < 0.1:
        spec = ".3f"
    return format(v, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def _rate(amount: float | None, seconds: float | None, spec: str = ".1f") -> str:
    return "-" if not amount or not seconds else format(amount / seconds, spec)


def _kilo(v: float | None) -> str:
    """A rate in thousands (nodes/s)."""
    return "-" if v is None else f"{v / 1000:.0f}k"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any],
             cli: list[dict[str, Any]] | None = None) -> str:
    out = [f"# Benchmark results ({meta['date']}, {meta['machine']})", ""]
    if meta.get("calibration_s"):
        before, after = meta["calibration_s"]
        out += ["Machine calibration (`run_all.calibrate`: a fixed per-item Python workload, best of 5 "
                f"fresh processes), before / after the run: {before:.3f} / {after:.3f} s.  Compare runs made "
                "in different machine states with it: a higher figure is a slower machine.", ""]
    out.append(
        "Per stage: seconds inside a fresh process / that process's peak RSS in MB (2**20 bytes). "
        "`json.loads` / `orjson.loads` = the two input files parsed by each library, one file per process "
        "(seconds summed, peak = the larger); `loads vs json` = (load_host + load_kineto) time / stdlib "
        "`json.loads` of both files; `total` = link + convert + replay (each stage in its own process; "
        "peak = the largest of the three); `vs read` = total / read+gunzip of the two input files (the "
        "floor).  A stage forks parts for large inputs (`chakra.io.forkmap`: the link loads the Kineto trace "
        "in a child, the converter decodes and the replay reads in pieces): a stage's peak is the larger of "
        "its own high-water mark and the largest PSS sum over its process tree (PSS: a page a child "
        "shares with its parent counts once; sampled when the tree's RSS sum reaches a new high, at most "
        "twice a second; `results.json` has both, and the largest "
        "child's own peak RSS)."
    )
    out.append("")
    cols = ["case", "host ops", "Kineto events", "GPU ops", "ET nodes", "input MB", "read s", "json.loads s",
            "orjson.loads s", "load_host", "load_kineto", "loads vs json", "link", "convert", "replay",
            "total s", "peak MB", "vs read"]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "---|" * len(cols))
    for r in rows:
        st = r["stages"]
        if any("error" in m for m in st.values()):
            errs = "; ".join(f"{k}: {m['error']}" for k, m in st.items() if "error" in m)
            out.append(f"| {r['case']} | error: {errs[:200]} |" + " |" * (len(cols) - 2))
            continue

        def sm(stage: str, r: dict[str, Any] = r) -> str:
            if _s(r, stage) is None:
                return "-"
            return f"{fmt(_s(r, stage))} s / {fmt(_s(r, stage, 'peak_mb'), '.0f')}"

        both = (_s(r, "load_host") or 0) + (_s(r, "load_kineto") or 0)
        inp = r.get("input_bytes")
        cells = [r["case"], r.get("host_ops"), r.get("kineto_events"), r.get("gpu_ops"), r.get("nodes"),
                 fmt(inp / MB if inp else None, ".1f"), fmt(_s(r, "read")), fmt(r.get("json.loads_s")),
                 fmt(r.get("orjson.loads_s")), sm("load_host"), sm("load_kineto"),
                 ratio(both or None, r.get("json.loads_s")), sm("link"), sm("convert"), sm("replay"),
                 fmt(r.get("pipeline_s")), fmt(r.get("pipeline_peak_mb"), ".0f"),
                 ratio(r.get("pipeline_s"), _s(r, "read"))]
        out.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")

    out += ["", "## Throughput", "",
            "MB/s of each stage's input (host ET + Kineto JSON, uncompressed, for the link and the "
            "parsers; the ET+ JSON for the converter; the `.et` for the replay) beside nodes/s (host ops for "
            "the link, ET nodes for the converter and the replay).", "",
            "| case | input MB | json.loads MB/s | orjson.loads MB/s | link MB/s | link host ops/s "
            "| ET+ MB | convert MB/s | convert nodes/s | .et MB | replay MB/s | replay nodes/s "
            "| pipeline input MB/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        inp, etp, et = r.get("input_bytes"), r.get("etplus_bytes"), r.get("et_bytes")
        link, conv, rep = _s(r, "link"), _s(r, "convert"), _s(r, "replay")
        cells = [r["case"], fmt(inp / MB if inp else None, ".1f"),
                 _rate(inp / MB if inp else None, r.get("json.loads_s")),
                 _rate(inp / MB if inp else None, r.get("orjson.loads_s")),
                 _rate(inp / MB if inp else None, link),
                 _kilo(r["host_ops"] / link if r.get("host_ops") and link else None),
                 fmt(etp / MB if etp else None, ".1f"), _rate(etp / MB if etp else None, conv),
                 _kilo(r["nodes"] / conv if r.get("nodes") and conv else None),
                 fmt(et / MB if et else None, ".1f"), _rate(et / MB if et else None, rep),
                 _kilo(r["nodes"] / rep if r.get("nodes") and rep else None),
                 _rate(inp / MB if inp else None, r.get("pipeline_s"))]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")

    for weight in ("real", "light"):
        synth = [r for r in rows if r["group"] == f"synthetic {weight}" and r.get("pipeline_s")]
        if not synth:
            continue
        tg = TARGET_GROWTH[weight]
        issue = "13" if weight == "real" else "7"
        repeated = any(r.get("run_totals_s") for r in synth)
        out += ["", f"## Synthetic scaling and targets ({weight}-weight nodes; targets of issue {issue})", ""]
        if repeated:
            out += ["Each case run several times in a row (`--repeat`): the total is the fastest run's, the "
                    "peak the largest of all the runs'; `runs` lists every run's total.", ""]
        out += ["| host ops | GPU ops | input MB | link+convert+replay s | growth (time / size) | peak MB | "
                f"< {TARGET_S:.0f} s | < {TARGET_MB / 1024:.0f} GB | growth <= {tg:.0f} per 10x |"
                + (" runs s |" if repeated else ""),
                "|---|---|---|---|---|---|---|---|---|" + ("---|" if repeated else "")]
        prev = None
        for r in synth:
            growth, ok_g = "-", "-"
            if prev is not None:
                g = r["pipeline_s"] / prev["pipeline_s"]
                size = r["host_ops"] / prev["host_ops"]
                growth = f"{g:.1f}x / {size:.1f}x"
                ok_g = "yes" if g <= tg * size / 10 else "no"
            big = r["host_ops"] >= 900_000
            ok_t = ("yes" if r["pipeline_s"] < TARGET_S else "no") if big else "-"
            ok_m = ("yes" if r["pipeline_peak_mb"] < TARGET_MB else "no") if big else "-"
            inp = r.get("input_bytes")
            totals = " ".join("-" if t is None else f"{t:.1f}" for t in r.get("run_totals_s") or
                              [r["pipeline_s"]])
            out.append(f"| {r['host_ops']:,} | {r['gpu_ops']:,} | {fmt(inp / MB if inp else None, '.0f')} | "
                       f"{r['pipeline_s']:.1f} | {growth} | {r['pipeline_peak_mb']:.0f} | {ok_t} | {ok_m} | "
                       f"{ok_g} |" + (f" {totals} |" if repeated else ""))
            prev = r

    for c in cli or ():
        runs = [x for x in c["runs"] if x["link_rc"] == 0 and x["convert_rc"] == 0]
        out += ["", "## link + convert --simulate as a user runs them "
                f"({c['host_ops_requested']:,} real-weight host ops requested)", "",
                f"{c.get('host_ops') or '?'} host ops, {c.get('gpu_ops') or '?'} GPU ops, "
                f"{c.get('kineto_x_events') or '?'} Kineto X events, {c['input_bytes'] / MB:.1f} MB of input;"
                " "
                "`chakra_trace_link` then `chakra_converter PyTorch --simulate --log-filename`, each a fresh "
                "process timed from outside (start-up and imports included); issue 13's target: <= 1.0 s for "
                "both.", "",
                "Peak MB: the command's own, then (+) the largest part it forked (`chakra.io.forkmap`).",
                "",
                "| run | link s | link peak MB | convert --simulate s | convert peak MB | both s |",
                "|---|---|---|---|---|---|"]
        for i, x in enumerate(c["runs"], 1):
            bad = "" if x["link_rc"] == 0 and x["convert_rc"] == 0 else \
                f" (exit {x['link_rc']} / {x['convert_rc']})"
            out.append(f"| {i}{bad} | {x['link_s']:.2f} | {_peaks(x, 'link')} | {x['convert_s']:.2f} | "
                       f"{_peaks(x, 'convert')} | {x['total_s']:.2f} |")
        if runs:
            best = min(x["total_s"] for x in runs)
            med = statistics.median(x["total_s"] for x in runs)
            out.append(f"| best / median | | | | | {best:.2f} / {med:.2f} |")
        if c.get("startup_imports_s"):
            a, b = c["startup_imports_s"]
            out.append(f"| start-up + imports only | {a:.2f} | | {b:.2f} | | {a + b:.2f} |")
    return "\n".join(out) + "\n"


# A fixed workload shaped like the stages' per-node work (a tuple per item, dict lookups, bytes formatting,
# small orjson texts), run in a fresh interpreter: its time says how fast the machine is at the moment, so
# runs made in different machine states can be compared (the figures above are not normalised by it).
_CALIBRATION_CODE = """\
import time, orjson
t = time.perf_counter()
names = {i: "aten::op%d" % (i % 97) for i in range(97)}
seen = {}
out = []
for i in range(300_000):
    key = (i % 97, i % 13)
    got = seen.get(key)
    if got is None:
        got = seen[key] = orjson.dumps([names[key[0]], key[1], 1.5])
    out.append(b'{"id":%d,"name":%b}' % (i, got))
print(time.perf_counter() - t)
"""


def calibrate(repeat: int = 5) -> float:
    """Seconds of :data:`_CALIBRATION_CODE`, the best of ``repeat`` fresh processes (start-up excluded)."""
    times = []
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, "-c", _CALIBRATION_CODE], capture_output=True, text=True,
                              check=True)
        times.append(float(proc.stdout))
    return min(times)


def _peaks(run: dict[str, Any], cmd: str) -> str:
    own, parts = run[f"{cmd}_peak_mb"], run.get(f"{cmd}_parts_peak_mb") or 0.0
    return f"{own:.0f}" + (f" (+{parts:.0f})" if parts else "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(*argv[1:6])  # prints its result and exits
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="DLRM rank 0, cpu_gloo single_1r, real-weight 10k, "
                                                         "the CLI case once")
    ap.add_argument("--sizes", default=None, help="real-weight synthetic host-op counts, comma separated "
                                                   "(default 10000,100000,1000000; --quick: 10000)")
    ap.add_argument("--light-sizes", default="", help="light-weight synthetic host-op counts (the nodes of "
                                                       "the earlier runs; default none)")
    ap.add_argument("--cli-ops", type=int, default=CLI_OPS, help="host ops of the CLI case (0: skip it)")
    ap.add_argument("--cli-repeat", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each case (the fastest total is reported, with every run's total and the "
                         "largest peak)")
    ap.add_argument("--skip", default="",
                    help="stages to skip, comma separated (e.g. json.loads,orjson.loads)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--work", type=Path, default=Path("/tmp/chakra_bench"))
    ap.add_argument("--no-real", action="store_true", help="skip the corpus traces")
    ap.add_argument("--spacing", choices=("compact", "pytorch"), default="compact",
                    help="the real-weight synthetic JSON: compact (orjson's) or spaced as PyTorch's writers "
                         "space it (cached apart)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in (a.sizes if a.sizes is not None else
                              ("10000" if a.quick else "10000,100000,1000000")).split(",") if x]
    light = [int(x) for x in a.light_sizes.split(",") if x]
    skip = frozenset(x.strip() for x in a.skip.split(",") if x.strip())
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    cases = [] if a.no_real else real_cases(a.quick)
    cases += [synthetic_case(n, a.work, "real", a.spacing) for n in sizes]
    cases += [synthetic_case(n, a.work, "light") for n in light]
    rows = []
    t0 = time.perf_counter()
    calib = [calibrate()]
    for group, name, hp, kp in cases:
        runs = []
        for _ in range(max(1, a.repeat)):
            row = run_case(group, name, hp, kp, a.work, log=True, skip=skip)
            summarise(row)
            runs.append(row)
        rows.append(best_run(runs))
    cli = ([run_cli_case(a.cli_ops, a.work, 1 if a.quick else a.cli_repeat, log=True, spacing=a.spacing)]
           if a.cli_ops else [])
    calib.append(calibrate())
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine, "wall_s": time.perf_counter() - t0,
            "calibration_s": calib,
            "sizes": sizes, "light_sizes": light, "spacing": a.spacing, "argv": argv}
    md = markdown(rows, meta, cli)
    (a.out / "results.md").write_text(md)
    (a.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, "cli": cli}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
