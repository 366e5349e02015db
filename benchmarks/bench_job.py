#!/usr/bin/env python3
"""Whole-job replay at many ranks: ``chakra replay --job`` on generated jobs of N ranks x ~20k nodes.

    python benchmarks/bench_job.py                          # 64, 256 and 1,024 ranks
    python benchmarks/bench_job.py --ranks 64 --timeout 600
    nice -n 10 python benchmarks/bench_job.py --ranks 64,256,1024 --mem-gb 12 --out benchmarks/results

Each job is written by the project's streaming generator, ``chakra_generator --workloads tp --tp-size 8
--layers 1250 --steps 2 --compute-us 100 --jitter 10 --seed 1`` (19,996 nodes per rank, 12,496 of them
collectives in groups of 8 (tensor-parallel) and N/8 (data-parallel); every compute node scaled by its own
seeded factor in 0.9-1.1, so no two ranks are alike) and cached in ``--work`` (``r<N>_...``; a case is
reused when its ``meta.json`` is there).

Each case is then replayed in a fresh process (``chakra replay --job RANKS... --comm-group G --json``),
under an address-space cap (``--mem-gb``, at most 16; RLIMIT_AS set in the child, inherited by the
processes it forks) and a wall-clock limit (``--timeout``): a case over either is recorded as
"exceeded", not retried.  Reported: wall seconds of the child (start-up and imports included), nodes/s
(all ranks' nodes over those seconds), the child's peak RSS (``ru_maxrss`` from ``wait4``: the largest of
the child and the processes it waited for), and the replayed job time (a sanity check).  The baseline is
measured in the same run: ``chakra replay`` of one rank's ``.et`` alone (rank 0 of the smallest case, best
of ``--baseline-repeat`` fresh processes), and each case's nodes/s is given as a fraction of it.

Writes ``bench_job.md`` and ``bench_job.json`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MAX_MEM_GB = 16.0      # the issue's bound (the machine has 24 GB)
ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    """The console script next to this interpreter (the checkout's venv), else the one on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        sys.exit(f"bench_job: {name} not found (install the package: pip install -e .)")
    return found


@dataclass
class GenOptions:
    layers: int = 1250
    steps: int = 2
    tp_size: int = 8
    compute_us: int = 100
    jitter: float = 10.0
    seed: int = 1

    def args(self) -> list[str]:
        return ["--workloads", "tp", "--layers", str(self.layers), "--steps", str(self.steps),
                "--tp-size", str(self.tp_size), "--compute-us", str(self.compute_us),
                "--jitter", f"{self.jitter:g}", "--seed", str(self.seed)]

    def tag(self) -> str:
        return (f"L{self.layers}_S{self.steps}_tp{self.tp_size}_c{self.compute_us}_j{self.jitter:g}"
                f"_s{self.seed}")


@dataclass
class Case:
    ranks: int
    files: list[str]
    comm_group: str
    nodes_per_rank: int
    collectives_per_rank: int
    gen_seconds: float | None = None      # None: reused from the cache
    gen_peak_mb: float | None = None


@dataclass
class Run:
    what: str
    ranks: int
    nodes: int
    status: str = "ok"                    # ok | exceeded time | exceeded memory | failed (rc N)
    seconds: float | None = None
    nodes_per_s: float | None = None
    peak_mb: float | None = None
    replayed_us: float | None = None
    vs_one_rank: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def _limit_child(mem_bytes: int | None):
    def setup() -> None:
        os.setsid()                       # its own group: a timeout kills it and what it forked
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    return setup


def run_child(cmd: list[str], *, stdout_path: Path, stderr_path: Path, timeout: float | None,
              mem_bytes: int | None) -> tuple[int | None, float, float]:
    """Run ``cmd`` in a fresh process group; return (exit code or None on timeout, wall s, peak RSS MB)."""
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, preexec_fn=_limit_child(mem_bytes))
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                wall = time.perf_counter() - t0
                proc.returncode = os.waitstatus_to_exitcode(status)
                return proc.returncode, wall, ru.ru_maxrss / 1024.0
            if deadline is not None and time.perf_counter() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, ru = os.wait4(proc.pid, 0)
                return None, time.perf_counter() - t0, ru.ru_maxrss / 1024.0
            time.sleep(0.05)


_GEN_LINE = re.compile(r"(\d+) nodes per rank \((\d+) collectives\)")


def generate(ranks: int, opts: GenOptions, work: Path) -> Case:
    """The job of ``ranks`` ranks, generated once into ``work`` (reused when its meta.json is there)."""
    folder = work / f"r{ranks}_{opts.tag()}"
    meta_path = folder / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        return Case(ranks, meta["files"], meta["comm_group"], meta["nodes_per_rank"],
                    meta["collectives_per_rank"])
    if folder.exists():
        shutil.rmtree(folder)             # a half-written case from an interrupted run
    folder.mkdir(parents=True)
    cmd = [_tool("chakra_generator"), "-q", "--num-npus", str(ranks), *opts.args(), "-o", f"{folder}/"]
    print(f"  generating {ranks} ranks: {' '.join(cmd[1:])}", flush=True)
    rc, wall, peak = run_child(cmd, stdout_path=folder / "gen.out", stderr_path=folder / "gen.err",
                               timeout=None, mem_bytes=None)
    text = (folder / "gen.out").read_text()
    m = _GEN_LINE.search(text)
    if rc != 0 or not m:
        sys.exit(f"bench_job: the generator failed for {ranks} ranks (rc {rc}): "
                 f"{(folder / 'gen.err').read_text()[-2000:]}")
    files = [str(folder / f"tp.{r}.et") for r in range(ranks)]
    case = Case(ranks, files, str(folder / "tp.comm_group.json"), int(m.group(1)), int(m.group(2)),
                gen_seconds=wall, gen_peak_mb=peak)
    meta = {"files": files, "comm_group": case.comm_group, "nodes_per_rank": case.nodes_per_rank,
            "collectives_per_rank": case.collectives_per_rank, "generator": cmd[1:],
            "gen_seconds": wall, "gen_peak_mb": peak}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"  generated in {wall:.1f} s, peak {peak:.0f} MB", flush=True)
    return case


# The child: import the replay's modules first, then time ``chakra replay ...`` alone (no interpreter
# start-up or imports: ~0.3 s, as long as the replay of one 20k-node rank) and leave the seconds in a file.
_CHILD = """
import importlib, os, pkgutil, sys, time
import chakra.job, chakra.replay
for pkg in (chakra.replay, chakra.job):
    for m in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(pkg.__name__ + "." + m.name)
import chakra.cli.replay
from chakra.cli.entry import exit_process
from chakra.cli.main import main
import gc
gc.disable()                              # as the console script does
t = time.perf_counter()
rc = main(sys.argv[1:])
open(os.environ["BENCH_JOB_SECONDS"], "w").write(repr(time.perf_counter() - t))
exit_process(rc)
"""


def _replayed_us(path: Path) -> float | None:
    try:
        return float(json.loads(path.read_text())["replayed_us"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def replay(case: Case, *, job: bool, work: Path, timeout: float, mem_bytes: int, label: str) -> Run:
    files = case.files if job else case.files[:1]
    cmd = [sys.executable, "-c", _CHILD, "replay", "--json", "-q"]
    if job:
        cmd += ["--job", "--comm-group", case.comm_group]
    cmd += files
    nodes = case.nodes_per_rank * len(files)
    out, err = work / f"{label}.out.json", work / f"{label}.err"
    seconds_file = work / f"{label}.seconds"
    seconds_file.unlink(missing_ok=True)
    os.environ["BENCH_JOB_SECONDS"] = str(seconds_file)
    rc, wall, peak = run_child(cmd, stdout_path=out, stderr_path=err, timeout=timeout, mem_bytes=mem_bytes)
    run = Run(what="job" if job else "one rank", ranks=len(files), nodes=nodes, seconds=wall, peak_mb=peak)
    run.extra["process_seconds"] = wall
    if rc == 0:
        run.seconds = float(seconds_file.read_text())
        run.nodes_per_s = nodes / run.seconds
        run.replayed_us = _replayed_us(out)
        return run
    tail = err.read_text(errors="replace")[-600:]
    if rc is None:
        run.status = f"exceeded time ({timeout:.0f} s)"
    elif "MemoryError" in tail or "memory" in tail.lower() or peak * 2**20 > 0.9 * mem_bytes:
        run.status = f"exceeded memory ({mem_bytes / 2**30:g} GB)"
    else:
        run.status = f"failed (rc {rc})"
    run.note = tail.strip().splitlines()[-1] if tail.strip() else ""
    return run


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def table(runs: list[Run], cases: dict[int, Case]) -> str:
    lines = ["| replay | ranks | nodes | comm nodes | status | seconds | process s | nodes/s | vs one rank "
             "| peak RSS MB | replayed job µs |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        c = cases[r.ranks] if r.what == "job" else None
        coll = c.collectives_per_rank * c.ranks if c else None
        lines.append(f"| {r.what} | {r.ranks:,} | {r.nodes:,} | {_fmt(coll, ',')} | {r.status} "
                     f"| {_fmt(r.seconds, ',.2f')} | {_fmt(r.extra.get('process_seconds'), ',.2f')} "
                     f"| {_fmt(r.nodes_per_s, ',.0f')} | {_fmt(r.vs_one_rank, '.3f')} "
                     f"| {_fmt(r.peak_mb, ',.0f')} | {_fmt(r.replayed_us, ',.1f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="64,256,1024", help="comma-separated job sizes (default 64,256,1024)")
    ap.add_argument("--work", default="/tmp/chakra_bench_job", help="cache of generated jobs and outputs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="where the tables go")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per job replay (default 1800)")
    ap.add_argument("--mem-gb", type=float, default=MAX_MEM_GB,
                    help=f"address-space cap of each replay, GB (default and at most {MAX_MEM_GB:g})")
    ap.add_argument("--baseline-repeat", type=int, default=3, help="fresh processes of the one-rank replay")
    ap.add_argument("--layers", type=int, default=GenOptions.layers)
    ap.add_argument("--steps", type=int, default=GenOptions.steps)
    ap.add_argument("--tp-size", type=int, default=GenOptions.tp_size)
    ap.add_argument("--compute-us", type=int, default=GenOptions.compute_us)
    ap.add_argument("--jitter", type=float, default=GenOptions.jitter)
    ap.add_argument("--seed", type=int, default=GenOptions.seed)
    ap.add_argument("--generate-only", action="store_true", help="write the jobs into --work and stop")
    a = ap.parse_args(argv)
    if not 0 < a.mem_gb <= MAX_MEM_GB:
        ap.error(f"--mem-gb must be in (0, {MAX_MEM_GB:g}]")
    ranks = sorted({int(x) for x in a.ranks.split(",") if x.strip()})
    opts = GenOptions(a.layers, a.steps, a.tp_size, a.compute_us, a.jitter, a.seed)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mem_bytes = int(a.mem_gb * 2**30)
    started = _dt.datetime.now(_dt.timezone.utc)
    header = (f"{started:%Y-%m-%d %H:%M} UTC, commit {_git('rev-parse', '--short', 'HEAD')}"
              f"{' (dirty)' if _git('status', '--porcelain', '--untracked-files=no') else ''}, "
              f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"load {os.getloadavg()[0]:.2f}")
    print(header, flush=True)

    cases: dict[int, Case] = {}
    for n in ranks:
        cases[n] = generate(n, opts, work)
    if a.generate_only:
        return 0

    base_case = cases[ranks[0]]
    base_runs = []
    for i in range(max(1, a.baseline_repeat)):
        base_runs.append(replay(base_case, job=False, work=work, timeout=a.timeout, mem_bytes=mem_bytes,
                                label=f"one_rank_{i}"))
    ok = [r for r in base_runs if r.status == "ok"]
    base = min(ok, key=lambda r: r.seconds) if ok else base_runs[0]
    base.extra["all_seconds"] = [r.seconds for r in base_runs]
    print(f"  one rank: {_fmt(base.seconds, '.2f')} s, {_fmt(base.nodes_per_s, ',.0f')} nodes/s "
          f"(runs {', '.join(_fmt(r.seconds, '.2f') for r in base_runs)})", flush=True)
    runs = [base]
    for n in ranks:
        print(f"  job of {n} ranks ...", flush=True)
        r = replay(cases[n], job=True, work=work, timeout=a.timeout, mem_bytes=mem_bytes, label=f"job_{n}")
        if r.nodes_per_s and base.nodes_per_s:
            r.vs_one_rank = r.nodes_per_s / base.nodes_per_s
        runs.append(r)
        print(f"    {r.status}: {_fmt(r.seconds, ',.1f')} s, {_fmt(r.nodes_per_s, ',.0f')} nodes/s, "
              f"peak {_fmt(r.peak_mb, ',.0f')} MB {r.note}", flush=True)

    md = "\n".join([f"Job replay, {header}", "", f"generator: chakra_generator {' '.join(opts.args())}",
                    f"caps: {a.timeout:.0f} s, {a.mem_gb:g} GB address space per replay", "",
                    table(runs, cases), ""])
    (out / "bench_job.md").write_text(md)
    (out / "bench_job.json").write_text(json.dumps(
        {"header": header, "generator": opts.args(), "timeout_s": a.timeout, "mem_gb": a.mem_gb,
         "cases": {n: asdict(c) | {"files": len(c.files)} for n, c in cases.items()},
         "runs": [asdict(r) for r in runs]}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
