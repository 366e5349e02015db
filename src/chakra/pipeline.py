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
from chakra.io.jsonio import trace_kind
from chakra.replay.output import fmt_pct, fmt_us

log = logging.getLogger(__name__)

# ---- finding the ranks of a folder ----------------------------------------------------------------

# Built-in file names (N = the rank, .json or .json.gz), by preference when a rank has several: the folder
# itself before host/ and device/, then the names in this order, then .json before .json.gz.  PARAM's
# rank-N.json names either trace: the subfolder (host/, device/) or the file's content says which.
_HOST_NAMES = ("chakra_host_et_", "host_et_", "et_", "pytorch_et_")
_KINETO_NAMES = ("kineto_", "chakra_device_trace_", "kineto_trace_")
_EITHER_NAMES = ("rank-", "rank_", "rank")
_NAMES = _HOST_NAMES + _KINETO_NAMES + _EITHER_NAMES
_NAME_RE = re.compile(r"^(" + "|".join(map(re.escape, _NAMES)) + r")(\d+)\.json(\.gz)?$")
_SUBDIRS = ("", "host", "device")
HOST_PATTERNS = ", ".join(n + "N" for n in _HOST_NAMES)
KINETO_PATTERNS = ", ".join(n + "N" for n in _KINETO_NAMES)
EITHER_PATTERNS = ", ".join(n + "N" for n in _EITHER_NAMES)
RANK_FIELD = "{rank}"


class RankFiles(NamedTuple):
    """The inputs of one rank (a tuple: ``rank, host, kineto = files`` works); ``host`` is None when the
    rank's Kineto trace is linked alone."""

    rank: int
    host: Path | None
    kineto: Path


@dataclass(frozen=True, slots=True)
class RankNaming:
    """How the files of a folder are found (``chakra pipeline --host-pattern / --device-pattern /
    --kineto-only``).

    A pattern is a path relative to the folder with ``{rank}`` where the rank is (digits) and shell
    wildcards (``*``, ``?``, ``[...]``) elsewhere, e.g. ``et_{rank}.json`` or
    ``kineto/worker{rank}_*.pt.trace.json``; a pattern ending in ``.json`` also finds ``.json.gz``.  A
    pattern replaces the built-in names of its kind.  ``kineto_only``: every rank from its Kineto trace
    alone, host ETs ignored (also what happens when the folder holds no host ET at all)."""

    host_pattern: str | None = None
    device_pattern: str | None = None
    kineto_only: bool = False


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """``{rank}`` -> a digits group; ``*``, ``?`` and ``[...]`` as in a shell, never across ``/``."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith(RANK_FIELD, i):
            out.append(r"(\d+)")
            i += len(RANK_FIELD)
            continue
        ch = pattern[i]
        if ch == "*":
            out.append(r"[^/]*")
        elif ch == "?":
            out.append(r"[^/]")
        elif ch == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(ch))
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + (r"(\.gz)?" if pattern.endswith(".json") else ""))


def _check_pattern(option: str, pattern: str) -> None:
    if pattern.count(RANK_FIELD) != 1:
        raise UsageError(f"{option} {pattern!r}: put {RANK_FIELD} exactly once where the rank is "
                         "(e.g. 'et_{rank}.json')")
    if pattern.startswith("/") or ".." in Path(pattern).parts:
        raise UsageError(f"{option} {pattern!r}: give a path inside the folder")


def _pattern_files(root: Path, pattern: str, option: str) -> dict[int, Path]:
    """``{rank: file}`` of the files under ``root`` that match ``pattern`` (see :class:`RankNaming`)."""
    regex = _pattern_regex(pattern)
    glob = re.sub(r"\*+", "*", pattern.replace(RANK_FIELD, "*"))   # "*{rank}" is one wildcard, not "**"
    found: dict[int, tuple[bool, Path]] = {}
    for g in ([glob, glob + ".gz"] if pattern.endswith(".json") else [glob]):
        for p in root.glob(g):
            m = regex.fullmatch(p.relative_to(root).as_posix())
            if not m or not p.is_file():
                continue
            rank = int(m.group(1))
            gz = bool(m.lastindex and m.lastindex > 1 and m.group(m.lastindex))
            old = found.get(rank)
            if old is None or (old[0] and not gz):
                found[rank] = (gz, p)
            elif old[0] == gz and old[1] != p:
                raise UsageError(f"{option} {pattern!r} matches two files of rank {rank}: "
                                 f"{old[1].relative_to(root)} and {p.relative_to(root)}")
    return {r: v[1] for r, v in found.items()}


def _scan(root: Path, naming: RankNaming | None = None) -> tuple[dict[int, Path], dict[int, Path]]:
    """``(host ETs, Kineto traces)`` by rank: by the patterns of ``naming``, else by the built-in names."""
    naming = naming or RankNaming()
    best_host: dict[int, tuple[tuple[int, int, int], Path]] = {}
    best_kineto: dict[int, tuple[tuple[int, int, int], Path]] = {}
    builtin_host = naming.host_pattern is None and not naming.kineto_only
    builtin_kineto = naming.device_pattern is None
    if builtin_host or builtin_kineto:
        for di, sub in enumerate(_SUBDIRS):
            d = root / sub if sub else root
            if not d.is_dir():
                continue
            for p in d.iterdir():
                m = _NAME_RE.match(p.name)
                if not m or not p.is_file():
                    continue
                prefix = m.group(1)
                if prefix in _HOST_NAMES:
                    kind = "host"
                elif prefix in _KINETO_NAMES:
                    kind = "kineto"
                else:  # rank-N: the subfolder says which, else the content
                    kind = {"host": "host", "device": "kineto"}.get(sub) or trace_kind(p)
                    if kind is None:
                        log.warning("%s: neither a host ET ('nodes') nor a Kineto trace ('traceEvents') in "
                                    "its first MiB; skipped", p)
                        continue
                if kind == "host" and not builtin_host or kind == "kineto" and not builtin_kineto:
                    continue
                table = best_host if kind == "host" else best_kineto
                rank = int(m.group(2))
                key = (di, _NAMES.index(prefix), 1 if m.group(3) else 0)
                old = table.get(rank)
                if old is None or key < old[0]:
                    table[rank] = (key, p)
    hosts = {r: v[1] for r, v in best_host.items()}
    kinetos = {r: v[1] for r, v in best_kineto.items()}
    if naming.host_pattern is not None and not naming.kineto_only:
        _check_pattern("--host-pattern", naming.host_pattern)
        hosts = _pattern_files(root, naming.host_pattern, "--host-pattern")
    if naming.device_pattern is not None:
        _check_pattern("--device-pattern", naming.device_pattern)
        kinetos = _pattern_files(root, naming.device_pattern, "--device-pattern")
    return hosts, kinetos


def _looked_for(naming: RankNaming, rank: int | None = None, what: str = "both") -> str:
    """What the finder looked for, for an error message (``N`` replaced by ``rank`` when given)."""
    def names(text: str) -> str:
        return text if rank is None else ", ".join(n.replace("N", str(rank)) for n in text.split(", "))

    parts = []
    if what in ("both", "host") and not naming.kineto_only:
        parts.append(f"host ETs matching {naming.host_pattern!r}" if naming.host_pattern is not None
                     else f"host ETs named {names(HOST_PATTERNS)}")
    if what in ("both", "kineto"):
        parts.append(f"Kineto traces matching {naming.device_pattern!r}" if naming.device_pattern is not None
                     else f"Kineto traces named {names(KINETO_PATTERNS)}")
    if (what == "both" or what == "host" and naming.host_pattern is None
            or what == "kineto" and naming.device_pattern is None):
        parts.append(f"either named {names(EITHER_PATTERNS)} (told apart by subfolder or content)")
    builtin = naming.host_pattern is None or naming.device_pattern is None
    where = " (.json or .json.gz, in the folder and its host/ and device/ subfolders)" if builtin else ""
    return "; ".join(parts) + where


def find_ranks(folder: str | os.PathLike[str], ranks: Iterable[int] | None = None,
               naming: RankNaming | None = None) -> list[RankFiles]:
    """The host ET + Kineto trace of every rank of ``folder``, by rank.

    Looks in ``folder`` itself and in its ``host/`` and ``device/`` subfolders for the built-in names
    (host ETs ``chakra_host_et_N``, ``host_et_N``, ``et_N`` (PARAM), ``pytorch_et_N``; Kineto traces
    ``kineto_N``, ``chakra_device_trace_N``, ``kineto_trace_N``; PARAM's ``rank-N`` / ``rank_N`` /
    ``rankN`` for either, told apart by the subfolder or the file's first MiB; ``.json`` or ``.json.gz``;
    when a rank has several, the folder itself, then the names in that order, then ``.json`` before
    ``.json.gz`` win), or for the patterns of ``naming`` (:class:`RankNaming`).

    When the folder holds Kineto traces and no host ET at all (or ``naming.kineto_only``), every rank
    is its Kineto trace alone (``RankFiles.host`` None).  Otherwise, without ``ranks``, every rank that
    has both files (a rank with only one is skipped with a warning); with ``ranks``, exactly those, and
    a missing file is an error.  Nothing found is a UsageError that lists what was looked for.
    """
    naming = naming or RankNaming()
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    hosts, kinetos = _scan(root, naming)
    kineto_only = naming.kineto_only
    if not kineto_only and not hosts and kinetos:
        log.info("%s: no host ET found (looked for %s): linking each rank's Kineto trace alone", root,
                 _looked_for(naming, what="host"))
        kineto_only = True
    if ranks is not None:
        out = []
        for r in ranks:
            if not kineto_only and r not in hosts:
                raise TraceFormatError(f"no host ET for rank {r} (looked for "
                                       f"{_looked_for(naming, r, 'host')})", os.fspath(root))
            if r not in kinetos:
                raise TraceFormatError(f"no Kineto trace for rank {r} (looked for "
                                       f"{_looked_for(naming, r, 'kineto')})", os.fspath(root))
            out.append(RankFiles(r, None if kineto_only else hosts[r], kinetos[r]))
        return out
    if kineto_only:
        found = sorted(kinetos)
    else:
        found = sorted(set(hosts) & set(kinetos))
    if not found:
        raise UsageError(f"{root}: no traces found; looked for {_looked_for(naming)}. Other names: "
                         "--host-pattern / --device-pattern, e.g. --device-pattern "
                         "'traces/worker{rank}.pt.trace.json'")
    if not kineto_only:
        for r in sorted(set(hosts) ^ set(kinetos)):
            log.warning("%s: rank %d has only a %s file; skipped%s", root, r,
                        "host ET" if r in hosts else "Kineto",
                        "" if r in hosts else " (--kineto-only links every rank's Kineto trace alone)")
    return [RankFiles(r, None if kineto_only else hosts[r], kinetos[r]) for r in found]


# ---- the per-rank worker ------------------------------------------------------------------------------


@dataclass(slots=True)
class RankTask:
    """What to do for one rank: always link; convert when ``et`` is set; replay when ``log`` is set too."""

    rank: int
    host: str | None    # None: the Kineto trace alone
    kineto: str
    et_plus: str
    et: str | None = None
    log: str | None = None
    mode: str = "lanes"
    gaps: bool = True
    annotation: str | None = None
    timeline: bool = False       # also return the rank's timeline events (per-rank replay)
    step: int | None = None      # ProfilerStep#<step> only
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
                        annotation=task.annotation, step=task.step)
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
    astrasim: Any = None          # chakra.job.astrasim.AstrasimReport with --astrasim

    def path(self, kind: str) -> Path:
        return self.out_dir / self.files[kind]


def _relative(path: Path | None, root: Path) -> str | None:
    if path is None:   # a rank linked from its Kineto trace alone
        return None
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
    whole = summary.get("whole_job")
    if whole is not None:
        lines += [
            "",
            f"Whole job (first rank's start to last rank's end): measured {fmt_us(whole['measured_us'])} µs, "
            f"replayed {fmt_us(whole['replayed_us'])} µs ({fmt_pct(whole['error_pct'])}); collectives waited "
            f"{fmt_us(whole['comm_wait_us'])} µs for their peers in all; {whole['matched_comm_groups']} "
            "collectives and send/recv pairs matched.",
        ]
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
            if p is None:
                continue
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
                 astrasim: bool = False, simulator: str | os.PathLike[str] | None = None,
                 naming: RankNaming | None = None, step: int | None = None, whatif: Any = None
                 ) -> PipelineResult:
    """Link, convert and replay every rank of ``folder`` into ``out_dir``.

    Per rank N: ``et_plus_N.json`` (ET+), ``<name>.N.et`` (Chakra protobuf; ``name`` defaults to
    the folder's name, so ``out_dir/<name>`` is the ASTRA-sim workload prefix), ``replay_N.log``
    (per-node completion times); for the job: ``timeline.json`` (Chrome/Perfetto trace of the
    replay), ``summary.json`` and ``summary.md`` (measured vs replayed, error, nodes, match rates).
    Ranks are linked and converted ``jobs`` processes at a time (default: :func:`auto_jobs`), or on a
    Dask cluster with ``scheduler`` (an address, ``"local"``, or a ``dask.distributed.Client``); each rank is
    replayed on its own (in its worker), or with ``job_replay`` all ranks together with their
    collectives coupled.  ``progress`` shows rich progress bars on stderr.  ``naming``: how the rank
    files are found (:func:`find_ranks`).

    ``astrasim``: the job's ``.et`` files are made to run in ASTRA-sim together (:mod:`chakra.job.astrasim`:
    no METADATA nodes, ``comm_group.json``, collectives matched across ranks with one size and one order,
    unsupported ones as COMP nodes); what the pass changed is in ``PipelineResult.astrasim`` and
    ``summary.json``.  The replay then replays those files.  ``simulator``: a launcher script with the
    interface of ASTRA-sim's ``run.sh`` (:mod:`chakra.job.simulator`), run on the result (implies
    ``astrasim``); its time per rank goes beside measured and replayed.
    ``whatif`` (:class:`chakra.replay.whatif.WhatIf`) replays with that change: "replayed" is then the
    prediction.
    """
    from chakra.io import atomic_output, dump_json
    from chakra.replay.engine import MODES as REPLAY_MODES

    if mode not in REPLAY_MODES:
        raise UsageError(f"unknown replay mode {mode!r} (choose from {', '.join(REPLAY_MODES)})")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    t0 = time.perf_counter()
    astrasim = astrasim or simulator is not None
    src = Path(folder)
    files = find_ranks(src, naming=naming)
    job_name = _check_name(name if name is not None else (src.resolve().name or "chakra"))
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    tasks = [
        RankTask(rank=f.rank, host=os.path.abspath(f.host) if f.host else None,
                 kineto=os.path.abspath(f.kineto), et_plus=os.path.abspath(out / f"et_plus_{f.rank}.json"),
                 et=os.path.abspath(out / f"{job_name}.{f.rank}.et"),
                 log=None if job_replay or astrasim else os.path.abspath(out / f"replay_{f.rank}.log"),
                 mode=mode, gaps=gaps, annotation=annotation, timeline=not job_replay, step=step,
                 whatif=whatif)
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
        label = "link + convert" + ("" if job_replay or astrasim else " + replay")
        results: list[RankResult] = run_ranks(process_rank, tasks, jobs=jobs, scheduler=scheduler,
                                              progress=bars, label=label, where=src)
        events: list[dict[str, Any]] = []
        target = None
        if astrasim:
            from chakra.job.astrasim import astrasim_job

            target = astrasim_job([r.et for r in results], out / job_name)  # type: ignore[misc]
        whole_job: dict[str, Any] | None = None
        if job_replay:
            events, whole_job = _replay_job(results, out, mode, gaps, bars, whatif)
        elif astrasim:
            events = _replay_ranks(results, out, mode, gaps, whatif)
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
    sim = None
    if target is not None:
        if target.comm_group is not None:
            out_files["comm_group"] = target.comm_group.name
        if simulator is not None:
            from chakra.job.simulator import run_simulator

            sim = run_simulator(simulator, out / job_name, len(target.ranks), comm_group=target.comm_group)
    summary = _summary(job_name, src, files, results, mode, gaps, job_replay, out_files)
    if target is not None:
        summary["astrasim"] = {
            "ranks": target.ranks, "collectives": target.collectives, "send_recv_pairs": target.p2p,
            "as_comp": {str(r): k for r, k in sorted(target.as_comp.items())},
            "metadata_dropped": target.metadata_dropped, "sizes_unified": target.sizes_unified,
            "comm_group": target.groups or None, "notes": target.notes,
        }
    if sim is not None:
        for r in summary["ranks"]:
            r["simulated_us"] = sim.us(r["rank"])
    if whole_job is not None:
        summary["whole_job"] = whole_job
    if whatif is not None:
        summary["whatif"] = whatif.describe()   # "replayed" is the prediction under these changes

    dump_json(out / SUMMARY_JSON, summary)
    with atomic_output(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary).encode())
    return PipelineResult(name=job_name, out_dir=out, ranks=results, mode=mode, job_replay=job_replay,
                          files=out_files, summary=summary, seconds=time.perf_counter() - t0,
                          executor=executor, astrasim=target)


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


def _replay_ranks(results: list[RankResult], out: Path, mode: str, gaps: bool, whatif: Any = None
                  ) -> list[dict[str, Any]]:
    """Each rank replayed alone, in this process (after a job-level pass rewrote the files)."""
    from chakra.replay.api import replay_file
    from chakra.replay.output import timeline, write_completion_log

    events: list[dict[str, Any]] = []
    for r in results:
        t0 = time.perf_counter()
        rep = replay_file(r.et, mode=mode, gaps=gaps, whatif=whatif)   # type: ignore[arg-type]
        r.log = os.path.abspath(out / f"replay_{r.rank}.log")
        write_completion_log(r.log, [rep])
        _set_replay(r, rep)
        events.extend(timeline([rep])["traceEvents"])
        r.replay_s = time.perf_counter() - t0
    return events


def _replay_job(results: list[RankResult], out: Path, mode: str, gaps: bool, bars: Any, whatif: Any = None
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Whole-job replay in this process (collectives couple the ranks): logs, timeline events, and the
    job's numbers (:func:`job_times`)."""
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
    return timeline(job)["traceEvents"], job_times(job)


def job_times(job: Any) -> dict[str, Any]:
    """The job as one: its time from the first rank's start to the last rank's end, measured and replayed.

    On the replay's common clock each rank starts at its ``clock_offset`` (its recorded window start
    relative to the earliest rank's); measured, each rank's window runs from ``measured_start_us`` for
    ``measured_us``.  Without recorded starts, the slowest rank's time.  ``comm_wait_us``: the time the
    collectives of all ranks waited for their peers.
    """
    reps = list(job)
    replayed = max((r.clock_offset + r.replayed_us for r in reps), default=0.0)
    starts = [r.graph.measured_start_us for r in reps]
    spans = [r.measured_us for r in reps]
    measured: float | None = None
    if reps and all(s is not None for s in starts) and all(m is not None for m in spans):
        first = min(starts)  # type: ignore[type-var]
        measured = max(s + m for s, m in zip(starts, spans)) - first  # type: ignore[operator]
    elif reps and all(m is not None for m in spans):
        measured = max(spans)  # type: ignore[type-var]
    return {
        "measured_us": measured,
        "replayed_us": replayed,
        "error_pct": 100.0 * (replayed - measured) / measured if measured else None,
        "comm_wait_us": sum(r.total_wait_us for r in reps),
        "matched_comm_groups": job.groups,
        "start_offsets_us": {str(r.rank): r.clock_offset for r in reps},
    }


def job_table(result: PipelineResult, title: str | None = None) -> Any:
    """The whole-job replay as a rich Table: per rank where it starts on the job's clock, its times and how
    long its collectives waited for their peers; a last row for the job (first start to last end)."""
    from rich.table import Table

    whole = result.summary["whole_job"]
    table = Table(title=title or f"{result.name}: whole job replayed (collectives coupled, mode "
                  f"{result.mode})")
    simulated = any("simulated_us" in r for r in result.summary["ranks"])
    for col in ("rank", "nodes", "starts at (µs)", "measured (µs)", "replayed (µs)", "error",
                *(("ASTRA-sim (µs)",) if simulated else ()), "comm wait (µs)", "wait share"):
        table.add_column(col, justify="right")
    offsets = whole["start_offsets_us"]
    for r in result.summary["ranks"]:
        err, wait, rep = r["error_pct"], r["comm_wait_us"], r["replayed_us"]
        style = None if err is None or abs(err) <= 5.0 else "yellow"
        share = fmt_pct(100.0 * wait / rep).lstrip("+") if wait is not None and rep else "-"
        sim = (fmt_us(r.get("simulated_us")),) if simulated else ()
        table.add_row(str(r["rank"]), f"{r['nodes']:,}", fmt_us(offsets.get(str(r["rank"]))),
                      fmt_us(r["measured_us"]), fmt_us(rep), fmt_pct(err), *sim, fmt_us(wait), share,
                      style=style)
    table.add_section()
    sim_job = (fmt_us(max((r.get("simulated_us") or 0.0) for r in result.summary["ranks"])),) if simulated \
        else ()
    table.add_row("job", f"{sum(r['nodes'] for r in result.summary['ranks']):,}", fmt_us(0.0),
                  fmt_us(whole["measured_us"]), fmt_us(whole["replayed_us"]), fmt_pct(whole["error_pct"]),
                  *sim_job, fmt_us(whole["comm_wait_us"]), "", style="bold")
    table.caption = (f"job: first rank's start to last rank's end; {whole['matched_comm_groups']} "
                     "collectives and send/recv pairs matched across ranks; comm wait: time a collective "
                     "waited for its peers")
    return table


def pipeline_table(result: PipelineResult, title: str | None = None) -> Any:
    """A rich Table of measured vs replayed time per rank (:func:`job_table` for a whole-job replay)."""
    from rich.table import Table

    if result.job_replay and "whole_job" in result.summary:
        return job_table(result, title)
    how = "whole job" if result.job_replay else "per rank"
    table = Table(title=title or f"{result.name}: measured vs replayed ({how}, mode {result.mode})")
    table.add_column("rank", justify="right")
    table.add_column("nodes", justify="right")
    table.add_column("measured (µs)", justify="right")
    table.add_column("replayed (µs)", justify="right")
    table.add_column("error", justify="right")
    simulated = any("simulated_us" in r for r in result.summary["ranks"])
    if simulated:
        table.add_column("ASTRA-sim (µs)", justify="right")
    table.add_column("host ops matched", justify="right")
    table.add_column("GPU ops attached", justify="right")
    for r in result.summary["ranks"]:
        err = r["error_pct"]
        style = None if err is None or abs(err) <= 5.0 else "yellow"
        cells = [str(r["rank"]), f"{r['nodes']:,}", fmt_us(r["measured_us"]), fmt_us(r["replayed_us"]),
                 fmt_pct(err)]
        if simulated:
            cells.append(fmt_us(r.get("simulated_us")))
        cells += [f"{r['host_ops_matched']:,}/{r['host_ops']:,}", _attached(r, short=True)]
        table.add_row(*cells, style=style)
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
    target = result.astrasim
    if target is not None:
        n = len(target.ranks)
        cg = f" --comm-group {out / target.comm_group.name}" if target.comm_group is not None else ""
        lines += [*target.lines(),
                  f"  run it: run.sh {out / result.name} {n}{cg}   (ASTRA-sim's launcher; see the README)"]
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
                     name: str | None = None, stream: TextIO | None = None, astrasim: bool = False,
                     simulator: str | None = None, naming: RankNaming | None = None,
                     step: int | None = None, whatif: Any = None) -> int:
    """What ``chakra pipeline`` does: run the pipeline, print the table and where the files are."""
    result = run_pipeline(folder, output_dir, jobs=jobs, scheduler=scheduler, job_replay=job_replay,
                          mode=mode, progress=progress, name=name, astrasim=astrasim, simulator=simulator,
                          naming=naming, step=step, whatif=whatif)
    _print_result(result, stream if stream is not None else sys.stdout)
    return 0


DEMO_JOB = "gloo_mlp_2r"
DEMO_OUT = "chakra_demo_out"


def bundled_data_dir() -> Path:
    """The folder of the traces shipped inside the package (``chakra/data``, package data of the wheel)."""
    from importlib.resources import files

    return Path(str(files("chakra").joinpath("data")))


def demo_command(output_dir: str | None = None, *, input_folder: str | None = None, jobs: int | None = None,
                 job_replay: bool = False, progress: bool = False, stream: TextIO | None = None) -> int:
    """What ``chakra demo`` does: the pipeline on the bundled 2-rank gloo trace (or ``input_folder``)."""
    stream = stream if stream is not None else sys.stdout
    if input_folder is None:
        folder = bundled_data_dir() / DEMO_JOB
        if not folder.is_dir():
            raise UsageError(f"the demo trace chakra/data/{DEMO_JOB}/ is missing from this installation "
                             f"({folder}): reinstall the package, or pass a folder of host_et_N.json(.gz) + "
                             "kineto_N.json(.gz) files with --input FOLDER")
    else:
        folder = Path(input_folder)
    out = output_dir or DEMO_OUT
    stream.write(f"chakra demo: link -> convert -> replay every rank of {folder}\n")
    stream.flush()
    result = run_pipeline(folder, out, jobs=jobs, job_replay=job_replay, progress=progress)
    _print_result(result, stream)
    return 0


__all__ = ["PipelineResult", "RankFiles", "RankNaming", "RankResult", "RankTask", "bundled_data_dir",
           "dask_client", "demo_command", "find_ranks", "pipeline_command", "pipeline_table", "process_rank",
           "run_pipeline", "run_ranks", "summary_markdown"]
