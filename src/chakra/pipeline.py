"""Many ranks at once: find every rank of a folder, link + convert them in parallel, replay, summarise.

One rank-file finder (:func:`find_ranks`), one per-rank worker (:func:`process_rank`: link, then
optionally convert and replay) and one executor (:func:`run_ranks`: in this process, a local
process pool, or a Dask cluster) serve ``chakra_trace_link --batch``, the integration harness and
``chakra pipeline`` / ``chakra demo``.

Outputs do not depend on the executor: every file is written by the same code from the same
inputs, file names carry only the rank, and the summary holds no timestamp, path or pid, so a
run with ``--jobs 1``, a process pool or a Dask cluster leaves byte-identical files.

On a cluster (``scheduler="tcp://host:8786"``) the workers must see the input and output folders
at the same paths (a shared file system): tasks carry paths, not bytes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from chakra.errors import ChakraError, TraceFormatError, UsageError
from chakra.replay.output import fmt_pct, fmt_us

log = logging.getLogger(__name__)

# ---- finding the ranks of a folder ----------------------------------------------------------------

# host ET / Kineto names, by preference when a rank has several (earlier wins)
_HOST_RE = re.compile(r"^(chakra_host_et|host_et)_(\d+)\.json(\.gz)?$")
_KINETO_RE = re.compile(r"^(kineto|chakra_device_trace)_(\d+)\.json(\.gz)?$")
_HOST_KINDS = ("chakra_host_et", "host_et")
_KINETO_KINDS = ("kineto", "chakra_device_trace")
_SUBDIRS = ("", "host", "device")
HOST_PATTERNS = "chakra_host_et_N.json(.gz), host_et_N.json(.gz)"
KINETO_PATTERNS = "kineto_N.json(.gz), chakra_device_trace_N.json(.gz)"


class RankFiles(NamedTuple):
    """The inputs of one rank (a tuple: ``rank, host, kineto = files`` works)."""

    rank: int
    host: Path
    kineto: Path


def _scan(root: Path) -> tuple[dict[int, Path], dict[int, Path]]:
    best_host: dict[int, tuple[tuple[int, int, int], Path]] = {}
    best_kineto: dict[int, tuple[tuple[int, int, int], Path]] = {}
    for di, sub in enumerate(_SUBDIRS):
        d = root / sub if sub else root
        if not d.is_dir():
            continue
        for p in d.iterdir():
            m = _HOST_RE.match(p.name)
            if m:
                table, kinds = best_host, _HOST_KINDS
            else:
                m = _KINETO_RE.match(p.name)
                if not m:
                    continue
                table, kinds = best_kineto, _KINETO_KINDS
            if not p.is_file():
                continue
            rank = int(m.group(2))
            key = (di, kinds.index(m.group(1)), 1 if m.group(3) else 0)
            old = table.get(rank)
            if old is None or key < old[0]:
                table[rank] = (key, p)
    return {r: v[1] for r, v in best_host.items()}, {r: v[1] for r, v in best_kineto.items()}


def find_ranks(folder: str | os.PathLike[str], ranks: Iterable[int] | None = None) -> list[RankFiles]:
    """The host ET + Kineto trace of every rank of ``folder``, by rank.

    Looks in ``folder`` itself and in its ``host/`` and ``device/`` subfolders for
    ``chakra_host_et_N`` / ``host_et_N`` and ``kineto_N`` / ``chakra_device_trace_N``
    (``.json`` or ``.json.gz``; when a rank has several, the folder itself, then the names in
    that order, then ``.json`` before ``.json.gz`` win).  Without ``ranks``, every rank that has
    both files (a rank with only one is skipped with a warning); with ``ranks``, exactly those,
    and a missing file is an error.
    """
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    hosts, kinetos = _scan(root)
    if ranks is not None:
        out = []
        for r in ranks:
            if r not in hosts:
                names = HOST_PATTERNS.replace("N", str(r))
                raise TraceFormatError(f"no host ET for rank {r} (looked for {names} in the folder and its "
                                       "host/ subfolder)", os.fspath(root))
            if r not in kinetos:
                names = KINETO_PATTERNS.replace("N", str(r))
                raise TraceFormatError(f"no Kineto trace for rank {r} (looked for {names} in the folder and "
                                       "its device/ subfolder)", os.fspath(root))
            out.append(RankFiles(r, hosts[r], kinetos[r]))
        return out
    found = sorted(set(hosts) & set(kinetos))
    if not found:
        raise UsageError(f"{root}: no host ET + Kineto pairs found (looked for {HOST_PATTERNS} with "
                         f"{KINETO_PATTERNS}, also in host/ and device/)")
    for r in sorted(set(hosts) ^ set(kinetos)):
        log.warning("%s: rank %d has only a %s file; skipped", root, r, "host ET" if r in hosts else "Kineto")
    return [RankFiles(r, hosts[r], kinetos[r]) for r in found]


# ---- the per-rank worker ------------------------------------------------------------------------------


@dataclass(slots=True)
class RankTask:
    """What to do for one rank: always link; convert when ``et`` is set; replay when ``log`` is set too."""

    rank: int
    host: str
    kineto: str
    et_plus: str
    et: str | None = None
    log: str | None = None
    mode: str = "lanes"
    gaps: bool = True
    annotation: str | None = None
    timeline: bool = False       # also return the rank's timeline events (per-rank replay)
    whatif: Any = None           # chakra.replay.whatif.WhatIf: replay with that change


@dataclass(slots=True)
class RankResult:
    """What one rank gave (pickled back from a worker process or a Dask worker)."""

    rank: int
    link: Any                    # chakra.link.LinkReport
    et_plus: str
    et: str | None = None
    log: str | None = None
    nodes: int = 0
    measured_us: float | None = None
    replayed_us: float | None = None
    error_pct: float | None = None
    comm_wait_us: float | None = None
    link_s: float = 0.0
    convert_s: float = 0.0
    replay_s: float = 0.0
    timeline_events: list[dict[str, Any]] = field(default_factory=list)


def process_rank(task: RankTask) -> RankResult:
    """Link one rank (and convert / replay it as ``task`` asks); raises ChakraError on bad input."""
    from chakra.link.api import link_files

    t0 = time.perf_counter()
    # the rank of the file names only stands in for a trace without one: the trace's own rank is what its
    # collectives were recorded with
    report = link_files(task.host, task.kineto, task.et_plus, fallback_rank=task.rank,
                        annotation=task.annotation)
    if report.rank != task.rank:
        log.warning("%s: the files of rank %d say rank %s; the ET+ (and Chakra ET) record rank %s",
                    task.kineto, task.rank, report.rank, report.rank)
    res = RankResult(rank=task.rank, link=report, et_plus=task.et_plus, link_s=time.perf_counter() - t0)
    if task.et is None:
        return res
    from chakra.convert import convert_file

    t1 = time.perf_counter()
    conv = convert_file(task.et_plus, task.et)
    res.et = task.et
    res.nodes = conv.stats.nodes
    res.convert_s = time.perf_counter() - t1
    if task.log is None:
        return res
    from chakra.replay.api import replay_file
    from chakra.replay.output import timeline, write_completion_log

    t2 = time.perf_counter()
    rep = replay_file(task.et, mode=task.mode, gaps=task.gaps, whatif=task.whatif)
    write_completion_log(task.log, [rep])
    res.log = task.log
    _set_replay(res, rep)
    if task.timeline:
        res.timeline_events = timeline([rep])["traceEvents"]
    res.replay_s = time.perf_counter() - t2
    return res


def _set_replay(res: RankResult, rep: Any) -> None:
    res.nodes = rep.num_nodes
    res.measured_us = rep.measured_us
    res.replayed_us = rep.replayed_us
    res.error_pct = rep.error_pct
    res.comm_wait_us = rep.total_wait_us if rep.job else None


# ---- running many ranks -----------------------------------------------------------------------------


Outcome = tuple[Any, str | None, int, int, list[tuple[str, int, str]]]


class _Capture(logging.Handler):
    """Collects the log records of one task's thread, to be logged again by the parent process."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.thread = threading.get_ident()
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.records.append((record.name, record.levelno, record.getMessage()))


def _guarded(func: Callable[[Any], Any], task: Any, level: int | None = None) -> Outcome:
    """Run one task: (result, error text, exit code, pid, log records).

    A ChakraError comes back as text (exceptions may not survive pickling).  With ``level`` the
    task's log records at that level are collected and sent back, so that a worker's warnings show
    where the user looks (above the progress bars, not on a Dask worker's console).
    """
    capture = None
    root = logging.getLogger()
    if level is not None:
        capture = _Capture(level)
        root.addHandler(capture)
        if root.level == logging.NOTSET or root.level > level:
            root.setLevel(level)
    try:
        return func(task), None, 0, os.getpid(), capture.records if capture else []
    except ChakraError as exc:
        return None, str(exc), exc.exit_code, os.getpid(), capture.records if capture else []
    finally:
        if capture is not None:
            root.removeHandler(capture)


def _replay_records(pid: int, records: list[tuple[str, int, str]]) -> None:
    if pid == os.getpid():
        return      # the task ran in this process: its records were logged already
    for name, levelno, message in records:
        logging.getLogger(name).log(levelno, "%s", message)


def _init_worker() -> None:
    """A spawned worker prints nothing itself: its records go back to the parent (see ``_guarded``)."""
    logging.getLogger().addHandler(logging.NullHandler())


def _task_rank(task: Any, pos: int) -> int:
    rank = getattr(task, "rank", None)
    if rank is None and isinstance(task, tuple) and task and isinstance(task[0], int):
        rank = task[0]
    return pos if rank is None else int(rank)


def dask_client(scheduler: str, jobs: int | None = None, timeout: str = "20s"
                ) -> tuple[Any, Callable[[], None]]:
    """A Dask ``Client`` for ``scheduler`` (an address, or ``"local"`` for a LocalCluster of ``jobs``
    single-threaded worker processes) and the function that closes what was opened."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--scheduler needs Dask distributed, which is not installed: "
                         "pip install 'dask[distributed]' (or the toolkit's [dask] extra)") from None
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # the scheduler and nannies of a LocalCluster run here and chat at INFO level
        logging.getLogger("distributed").setLevel(logging.WARNING)
    if scheduler == "local":
        n = max(1, jobs or os.cpu_count() or 1)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)

        def close() -> None:
            client.close()
            cluster.close()

        return client, close
    try:
        client = Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler!r}: {exc}") from None
    return client, client.close


def run_ranks(func: Callable[[Any], Any], tasks: Sequence[Any], *, jobs: int | None = None,
              scheduler: Any = None, progress: Any = None, label: str = "ranks",
              where: str | os.PathLike[str] | None = None) -> list[Any]:
    """``func(task)`` for every task; results in task order.

    ``scheduler`` None: ``jobs`` worker processes (spawned; ``jobs=1`` runs in this process).
    ``scheduler`` a string: a Dask cluster (:func:`dask_client`); a Dask ``Client``: that client.
    ``func`` must be a module-level function (it is pickled by name).  ``progress`` is a rich
    ``Progress`` to advance, or None.  Every task runs even when some fail; then one ChakraError
    lists the failed ranks (exit code 2 if all of them were usage errors, else 1).
    """
    n = len(tasks)
    results: list[Any] = [None] * n
    errors: list[tuple[int, str, int]] = []
    bar = progress.add_task(label, total=n) if progress is not None else None

    level = logging.getLogger().getEffectiveLevel()

    def done(pos: int, outcome: Outcome) -> None:
        value, err, code, pid, records = outcome
        _replay_records(pid, records)
        if err is None:
            results[pos] = value
        else:
            errors.append((_task_rank(tasks[pos], pos), err, code))
        if progress is not None:
            progress.advance(bar)

    if scheduler is not None and n:
        close = None
        client = scheduler
        if isinstance(scheduler, str):
            client, close = dask_client(scheduler, jobs)
        try:
            from dask.distributed import as_completed as dask_completed

            futures = [client.submit(_guarded, func, t, level, pure=False) for t in tasks]
            pos_of = {f.key: i for i, f in enumerate(futures)}
            for fut in dask_completed(futures):
                done(pos_of[fut.key], fut.result())
        finally:
            if close is not None:
                close()
    else:
        workers = max(1, min(jobs or os.cpu_count() or 1, n))
        if workers == 1:
            for i, t in enumerate(tasks):
                done(i, _guarded(func, t))
        else:
            # spawn: workers start clean (no inherited logging handlers, locks or progress threads)
            ctx = multiprocessing.get_context("spawn")
            try:
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                         initializer=_init_worker) as pool:
                    pending = {pool.submit(_guarded, func, t, level): i for i, t in enumerate(tasks)}
                    for fut in as_completed(pending):
                        done(pending[fut], fut.result())
            except BrokenProcessPool:
                raise ChakraError("a worker process died: out of memory, or it could not re-import the main "
                                  "module (a script must guard its code with if __name__ == '__main__': and "
                                  "live in a file), or use jobs=1",
                                  os.fspath(where) if where is not None else None) from None
    if errors:
        errors.sort()
        text = "; ".join(f"rank {r}: {e}" for r, e, _ in errors)
        exc = ChakraError(f"{len(errors)} of {n} ranks failed: {text}",
                          os.fspath(where) if where is not None else None)
        if all(code == UsageError.exit_code for _, _, code in errors):
            exc.exit_code = UsageError.exit_code
        raise exc
    return results


# ---- the pipeline -----------------------------------------------------------------------------------

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
TIMELINE = "timeline.json"


@dataclass(slots=True)
class PipelineResult:
    name: str
    out_dir: Path
    ranks: list[RankResult]
    mode: str
    job_replay: bool
    files: dict[str, str]         # kind -> file name in out_dir
    summary: dict[str, Any]
    seconds: float = 0.0
    executor: str = ""

    def path(self, kind: str) -> Path:
        return self.out_dir / self.files[kind]


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _summary(name: str, folder: Path, files: list[RankFiles], results: list[RankResult], mode: str,
             gaps: bool, job_replay: bool, out_files: dict[str, str]) -> dict[str, Any]:
    """Everything here is a pure function of the inputs: no time, no absolute path, no executor."""
    ranks = []
    for f, r in zip(files, results):
        link = r.link
        ranks.append({
            "rank": r.rank,
            "host_et": _relative(f.host, folder),
            "kineto": _relative(f.kineto, folder),
            "et_plus": Path(r.et_plus).name,
            "et": Path(r.et).name if r.et else None,
            "completion_log": Path(r.log).name if r.log else None,
            "nodes": r.nodes,
            "measured_us": r.measured_us,
            "replayed_us": r.replayed_us,
            "error_pct": r.error_pct,
            "comm_wait_us": r.comm_wait_us,
            "measured_window": link.window,
            "link_strategy": link.strategy,
            "host_ops": link.host_ops,
            "host_ops_matched": link.matched,
            "host_match_rate": link.match_rate,
            "gpu_ops": link.gpu_ops,
            "gpu_ops_attached": link.gpu_attached,
            "gpu_attach_rate": link.gpu_attach_rate,
            "gpu_ops_in_window": link.gpu_ops_in_window,
            "gpu_attach_rate_in_window": link.gpu_attach_rate_in_window,
            "gpu_launched_before_trace": link.gpu_launched_before_trace,
            "sync_deps": link.sync_deps,
            "inter_thread_deps": link.inter_thread_deps,
        })
    errs = [abs(r.error_pct) for r in results if r.error_pct is not None]
    measured = [r.measured_us for r in results if r.measured_us is not None]
    replayed = [r.replayed_us for r in results if r.replayed_us is not None]
    return {
        "job": name,
        "num_ranks": len(results),
        "replay": "whole_job" if job_replay else "per_rank",
        "mode": mode,
        "gaps": gaps,
        "files": out_files,
        "measured_us_max": max(measured) if measured else None,
        "replayed_us_max": max(replayed) if replayed else None,
        "abs_error_pct_max": max(errs) if errs else None,
        "abs_error_pct_mean": sum(errs) / len(errs) if errs else None,
        "ranks": ranks,
    }


def _fmt2(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _attached(r: dict[str, Any], short: bool = False) -> str:
    if not r["gpu_ops"]:
        return "- (no GPU ops)"
    total = r["gpu_ops_in_window"]
    if not total:
        return "- (no GPU ops in the window)"
    # against every GPU op of the window, those launched before the trace began (no launch call) included
    before = r["gpu_launched_before_trace"]
    text = f"{r['gpu_ops_attached']:,}/{total:,} ({100 * r['gpu_attach_rate_in_window']:.1f}%)"
    if not before:
        return text
    return text + (f", {before:,} pre-trace" if short else f", {before:,} launched before the trace")


def summary_markdown(summary: dict[str, Any]) -> str:
    how = "whole job (collectives coupled across ranks)" if summary["replay"] == "whole_job" else "per rank"
    lines = [
        f"# {summary['job']}: measured vs replayed",
        "",
        f"{summary['num_ranks']} ranks; replay {how}, mode {summary['mode']}, "
        f"{'with' if summary['gaps'] else 'without'} recorded gaps.",
        "",
        "| rank | nodes | measured (µs) | replayed (µs) | error | host ops matched | GPU ops attached |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary["ranks"]:
        lines.append(
            f"| {r['rank']} | {r['nodes']:,} | {fmt_us(r['measured_us'])} | {fmt_us(r['replayed_us'])} | "
            f"{fmt_pct(r['error_pct'])} | {r['host_ops_matched']:,}/{r['host_ops']:,} "
            f"({100 * r['host_match_rate']:.1f}%) | {_attached(r)} |")
    lines += [
        "",
        f"Largest |error|: {_fmt2(summary['abs_error_pct_max'])}%; mean |error|: "
        f"{_fmt2(summary['abs_error_pct_mean'])}%.",
        "",
        "Files (per rank N): " + ", ".join(f"`{v}`" for v in summary["files"].values()) + ".",
        "",
    ]
    return "\n".join(lines)


def _check_name(name: str) -> str:
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise UsageError(f"--name {name!r}: give a plain file-name prefix")
    return name


# Below this much input (bytes on disk, all ranks) the default is to work in this process: starting a
# worker process and importing the toolkit in it (~0.4 s) costs more than it saves (the 8 DLRM ranks,
# 0.8 MB of gzip, take 0.9 s in one process and 1.4 s with two workers on 2 cores).
AUTO_POOL_MIN_BYTES = 4 << 20


def auto_jobs(files: Sequence[RankFiles]) -> int:
    """Worker processes for ``jobs=None``: one per core (at most one per rank), 1 for small jobs."""
    size = 0
    for f in files:
        for p in (f.host, f.kineto):
            try:
                size += p.stat().st_size
            except OSError:
                pass
    if size < AUTO_POOL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, len(files)))


def run_pipeline(folder: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, jobs: int | None = None,
                 scheduler: Any = None, job_replay: bool = False, mode: str = "lanes", gaps: bool = True,
                 progress: bool = False, name: str | None = None, annotation: str | None = None,
                 whatif: Any = None) -> PipelineResult:
    """Link, convert and replay every rank of ``folder`` into ``out_dir``.

    Per rank N: ``et_plus_N.json`` (ET+), ``<name>.N.et`` (Chakra protobuf; ``name`` defaults to
    the folder's name, so ``out_dir/<name>`` is the ASTRA-sim workload prefix), ``replay_N.log``
    (per-node completion times); for the job: ``timeline.json`` (Chrome/Perfetto trace of the
    replay), ``summary.json`` and ``summary.md`` (measured vs replayed, error, nodes, match rates).
    Ranks are linked and converted ``jobs`` processes at a time (default: :func:`auto_jobs`), or on a
    Dask cluster with ``scheduler`` (an address, ``"local"``, or a ``dask.distributed.Client``); each rank is
    replayed on its own (in its worker), or with ``job_replay`` all ranks together with their
    collectives coupled.  ``progress`` shows rich progress bars on stderr.  ``whatif``
    (:class:`chakra.replay.whatif.WhatIf`) replays with that change: "replayed" is then the prediction.
    """
    from chakra.io import atomic_output, dump_json
    from chakra.replay.engine import MODES as REPLAY_MODES

    if mode not in REPLAY_MODES:
        raise UsageError(f"unknown replay mode {mode!r} (choose from {', '.join(REPLAY_MODES)})")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    t0 = time.perf_counter()
    src = Path(folder)
    files = find_ranks(src)
    job_name = _check_name(name if name is not None else (src.resolve().name or "chakra"))
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    tasks = [
        RankTask(rank=f.rank, host=os.path.abspath(f.host), kineto=os.path.abspath(f.kineto),
                 et_plus=os.path.abspath(out / f"et_plus_{f.rank}.json"),
                 et=os.path.abspath(out / f"{job_name}.{f.rank}.et"),
                 log=None if job_replay else os.path.abspath(out / f"replay_{f.rank}.log"),
                 mode=mode, gaps=gaps, annotation=annotation, timeline=not job_replay, whatif=whatif)
        for f in files
    ]
    if jobs is None and scheduler is None:
        jobs = auto_jobs(files)
    if scheduler is None:
        n = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
        executor = "this process" if n == 1 else f"{n} worker processes"
    else:
        executor = f"dask ({scheduler if isinstance(scheduler, str) else 'client'})"
    bars = _progress() if progress else None
    moved: list[tuple[logging.StreamHandler[Any], Any]] = []
    try:
        if bars is not None:
            bars.start()
            moved = _log_above(bars)
        label = "link + convert" + ("" if job_replay else " + replay")
        results: list[RankResult] = run_ranks(process_rank, tasks, jobs=jobs, scheduler=scheduler,
                                              progress=bars, label=label, where=src)
        events: list[dict[str, Any]] = []
        if job_replay:
            events = _replay_job(results, out, mode, gaps, bars, whatif)
        else:
            for r in results:
                events.extend(r.timeline_events)
                r.timeline_events = []
        dump_json(out / TIMELINE, {"traceEvents": events, "displayTimeUnit": "ms",
                                   "otherData": {"producer": "chakra replay"}})
    finally:
        if bars is not None:
            for handler, stream in moved:
                handler.setStream(stream)
            bars.stop()
    out_files = {"et_plus": "et_plus_N.json", "et": f"{job_name}.N.et", "completion_log": "replay_N.log",
                 "timeline": TIMELINE, "summary_json": SUMMARY_JSON, "summary_md": SUMMARY_MD}
    summary = _summary(job_name, src, files, results, mode, gaps, job_replay, out_files)
    if whatif is not None:
        summary["whatif"] = whatif.describe()   # "replayed" is the prediction under these changes

    dump_json(out / SUMMARY_JSON, summary)
    with atomic_output(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary).encode())
    return PipelineResult(name=job_name, out_dir=out, ranks=results, mode=mode, job_replay=job_replay,
                          files=out_files, summary=summary, seconds=time.perf_counter() - t0,
                          executor=executor)


def _progress() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=False)


def _log_above(bars: Any) -> list[tuple[logging.StreamHandler[Any], Any]]:
    """While the bars show, log lines of this process go through rich (printed above the bars)."""
    moved: list[tuple[logging.StreamHandler[Any], Any]] = []
    proxy = sys.stderr          # rich's proxy while the bars show on a terminal
    if proxy is sys.__stderr__:
        return moved
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and handler.stream is sys.__stderr__:
            moved.append((handler, handler.stream))
            handler.setStream(proxy)
    return moved


def _replay_job(results: list[RankResult], out: Path, mode: str, gaps: bool, bars: Any, whatif: Any = None
                ) -> list[dict[str, Any]]:
    """Whole-job replay in this process (collectives couple the ranks): logs, timeline events."""
    from chakra.replay.api import replay_job
    from chakra.replay.output import timeline, write_completion_log

    bar = bars.add_task("replay (whole job)", total=len(results) + 1) if bars is not None else None
    t0 = time.perf_counter()
    job = replay_job([r.et for r in results], mode=mode, gaps=gaps, couple=True, whatif=whatif)
    if bars is not None:
        bars.advance(bar)
    for r in results:
        rep = job.ranks.get(r.rank)
        if rep is None:
            raise ChakraError(f"rank {r.rank}: the converted file says another rank", r.et)
        r.log = os.path.abspath(out / f"replay_{r.rank}.log")
        write_completion_log(r.log, [rep])
        _set_replay(r, rep)
        if bars is not None:
            bars.advance(bar)
    dt = time.perf_counter() - t0
    for r in results:
        r.replay_s = dt / max(1, len(results))
    return timeline(job)["traceEvents"]


def pipeline_table(result: PipelineResult, title: str | None = None) -> Any:
    """A rich Table of measured vs replayed time per rank."""
    from rich.table import Table

    how = "whole job" if result.job_replay else "per rank"
    table = Table(title=title or f"{result.name}: measured vs replayed ({how}, mode {result.mode})")
    table.add_column("rank", justify="right")
    table.add_column("nodes", justify="right")
    table.add_column("measured (µs)", justify="right")
    table.add_column("replayed (µs)", justify="right")
    table.add_column("error", justify="right")
    table.add_column("host ops matched", justify="right")
    table.add_column("GPU ops attached", justify="right")
    for r in result.summary["ranks"]:
        err = r["error_pct"]
        style = None if err is None or abs(err) <= 5.0 else "yellow"
        table.add_row(str(r["rank"]), f"{r['nodes']:,}", fmt_us(r["measured_us"]), fmt_us(r["replayed_us"]),
                      fmt_pct(err), f"{r['host_ops_matched']:,}/{r['host_ops']:,}", _attached(r, short=True),
                      style=style)
    if any(r.get("gpu_launched_before_trace") for r in result.summary["ranks"]):
        table.caption = "pre-trace: GPU ops launched before the trace began (no launch call, no host op)"
    return table


# ---- what the commands do ---------------------------------------------------------------------------


def _print_result(result: PipelineResult, stream: TextIO, wall: bool = True) -> None:
    from rich.console import Console

    console = Console(file=stream, width=120 if not stream.isatty() else None)
    console.print(pipeline_table(result))
    out = result.out_dir
    lines = [
        f"Outputs in {out}{os.sep}:",
        f"  ET+ (linked host + Kineto):   et_plus_N.json   (N = {_rank_list(result)})",
        f"  Chakra ET (protobuf):         {result.name}.N.et",
        "  replay completion logs:       replay_N.log",
        f"  replay timeline (Perfetto / chrome://tracing): {TIMELINE}",
        f"  summary:                      {SUMMARY_MD}, {SUMMARY_JSON}",
    ]
    if wall:
        lines.append(f"{len(result.ranks)} ranks in {result.seconds:.1f} s ({result.executor}).")
    stream.write("\n".join(lines) + "\n")
    stream.flush()


def _rank_list(result: PipelineResult) -> str:
    ranks = [r.rank for r in result.ranks]
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}..{ranks[-1]}"
    return ", ".join(map(str, ranks))


def pipeline_command(folder: str, output_dir: str, *, jobs: int | None = None, scheduler: str | None = None,
                     job_replay: bool = False, mode: str = "lanes", progress: bool = False,
                     name: str | None = None, stream: TextIO | None = None, whatif: Any = None) -> int:
    """What ``chakra pipeline`` does: run the pipeline, print the table and where the files are."""
    result = run_pipeline(folder, output_dir, jobs=jobs, scheduler=scheduler, job_replay=job_replay,
                          mode=mode, progress=progress, name=name, whatif=whatif)
    _print_result(result, stream if stream is not None else sys.stdout)
    return 0


DEMO_JOB = "gloo_mlp_2r"
DEMO_OUT = "chakra_demo_out"


def bundled_data_dir() -> Path:
    """``tests/data`` of the source tree this package was installed from (editable install)."""
    import chakra

    return Path(chakra.__file__).resolve().parents[2] / "tests" / "data"


def demo_command(output_dir: str | None = None, *, input_folder: str | None = None, jobs: int | None = None,
                 job_replay: bool = False, progress: bool = False, stream: TextIO | None = None) -> int:
    """What ``chakra demo`` does: the pipeline on the bundled 2-rank gloo trace (or ``input_folder``)."""
    stream = stream if stream is not None else sys.stdout
    if input_folder is None:
        folder = bundled_data_dir() / DEMO_JOB
        if not folder.is_dir():
            raise UsageError(f"the bundled demo trace tests/data/{DEMO_JOB}/ is not here ({folder}): this "
                             "chakra is not an editable install of the repository (pip install -e .). Pass a "
                             "folder of host_et_N.json(.gz) + kineto_N.json(.gz) files with --input FOLDER")
    else:
        folder = Path(input_folder)
    out = output_dir or DEMO_OUT
    stream.write(f"chakra demo: link -> convert -> replay every rank of {folder}\n")
    stream.flush()
    result = run_pipeline(folder, out, jobs=jobs, job_replay=job_replay, progress=progress)
    _print_result(result, stream)
    return 0


__all__ = ["PipelineResult", "RankFiles", "RankResult", "RankTask", "bundled_data_dir", "dask_client",
           "demo_command", "find_ranks", "pipeline_command", "pipeline_table", "process_rank",
           "run_pipeline", "run_ranks", "summary_markdown"]
