"""The integration harness behind ``ci_tools/integration_tests.py``.

An archive ``NAME.tgz`` holds a folder ``NAME/`` with, per rank N, a host ET
(``chakra_host_et_N.json``, ``host_et_N.json`` or ``host_et_N.json.gz``) and a
Kineto trace (``kineto_N.json`` or ``.json.gz``).  The harness extracts it next
to itself, links and converts every rank in parallel, replays each rank, writes
the per-node completion log ``NAME/replay_N.log`` and checks each rank's
completion time against the expected time (or, with ``against_measured``, the
rank's own measured step from the trace).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TextIO

from chakra.errors import ChakraError, TraceFormatError, UsageError

if TYPE_CHECKING:
    from chakra.replay.modes import Mode

log = logging.getLogger(__name__)

@dataclass(slots=True)
class RankOutcome:
    rank: int
    host: str | None   # None: a rank linked from its Kineto trace alone
    kineto: str
    et_plus: str
    et: str
    log: str
    replayed_us: int          # completion time read back from the log
    measured_us: float | None
    nodes: int


def archive_folder_name(tgz: Path) -> str:
    name = tgz.name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return tgz.stem


def _members(tgz: Path) -> tuple[tarfile.TarFile, list[tarfile.TarInfo]]:
    try:
        tar = tarfile.open(tgz, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise TraceFormatError(f"cannot open the archive ({exc})", tgz) from None
    try:
        return tar, tar.getmembers()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        tar.close()
        raise TraceFormatError(f"truncated or corrupt archive ({exc})", tgz) from None


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], tgz: Path, target: Path) -> None:
    """Extract ``members`` into ``target``, refusing any that would land (or link) outside it."""
    target = target.resolve()
    for m in members:
        dest = (target / m.name).resolve()
        if dest != target and target not in dest.parents:
            raise TraceFormatError(f"archive member {m.name!r} would be written outside {target}", tgz)
        if m.issym() or m.islnk():
            link = (dest.parent / m.linkname).resolve() if m.issym() else (target / m.linkname).resolve()
            if link != target and target not in link.parents:
                raise TraceFormatError(f"archive member {m.name!r} links outside {target}", tgz)
        if m.isdev() or m.isfifo():
            raise TraceFormatError(f"archive member {m.name!r} is a device or fifo", tgz)
    target.mkdir(parents=True, exist_ok=True)
    try:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, members=members, filter="data")
        else:  # pragma: no cover - python < 3.11.4
            tar.extractall(target, members=members)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"cannot extract the archive ({exc})", tgz) from None


def extract_job(tgz: Path, target: Path) -> Path:
    """Extract the job of ``tgz`` under ``target``; the folder that holds its rank files.

    The contract is a folder named like the archive (``NAME.tgz`` -> ``NAME/``); members beside it are
    not extracted.  An archive with its files at the top level ("flat") is extracted into ``NAME/``
    (rather than spilling its files beside the archive); one single folder of another name is used with a
    warning.  Anything else is refused before a byte is written.
    """
    name = archive_folder_name(tgz)
    tar, members = _members(tgz)
    with tar:
        parts = [(m, PurePosixPath(m.name).parts) for m in members]
        parts = [(m, pp) for m, pp in parts if pp]
        tops = sorted({pp[0] for _, pp in parts})
        if any(pp[0] == name and (len(pp) > 1 or m.isdir()) for m, pp in parts):
            inside = [m for m, pp in parts if pp[0] == name]
            if len(inside) < len(parts):
                log.warning("%s: %d archive member(s) outside %s/ not extracted", tgz,
                            len(parts) - len(inside), name)
            _extract(tar, inside, tgz, target)
            return target / name
        if parts and all(len(pp) == 1 and not m.isdir() for m, pp in parts):
            _extract(tar, [m for m, _ in parts], tgz, target / name)
            return target / name
        if len(tops) == 1 and any(len(pp) > 1 or m.isdir() for m, pp in parts):
            log.warning("%s: the archive's folder is %s/, not %s/ (named like the archive): using it", tgz,
                        tops[0], name)
            _extract(tar, [m for m, _ in parts], tgz, target)
            return target / tops[0]
        shown = ", ".join(tops[:5]) + (", ..." if len(tops) > 5 else "")
        raise TraceFormatError(f"the archive has no folder {name}/ (named like the archive) and its files "
                               f"are not all at its top level (top-level entries: {shown or 'none'})", tgz)


def process_rank(rank: int, host: str | None, kineto: str, workdir: str, mode: Mode = "lanes",
                 gaps: bool = True) -> RankOutcome:
    """Link, convert and replay one rank (the worker of :mod:`chakra.pipeline`, the harness's file names)."""
    from chakra.pipeline.model import RankTask
    from chakra.pipeline.run import process_rank as work
    from chakra.replay.output import read_completion_time

    wd = Path(workdir)
    res = work(RankTask(rank=rank, host=host, kineto=kineto, et_plus=str(wd / f"chakra_et_plus_{rank}.json"),
                        et=str(wd / f"chakra.{rank}.et"), log=str(wd / f"replay_{rank}.log"), mode=mode,
                        gaps=gaps))
    assert res.et is not None and res.log is not None
    return RankOutcome(rank=rank, host=host, kineto=kineto, et_plus=res.et_plus, et=res.et, log=res.log,
                       replayed_us=read_completion_time(res.log), measured_us=res.measured_us,
                       nodes=res.nodes)


def _rank_task(args: tuple[int, str | None, str, str, Mode, bool]) -> RankOutcome:
    """One rank in a worker; looks ``process_rank`` up at call time (tests replace it)."""
    return process_rank(*args)


def _replay_each(outcomes: list[RankOutcome], mode: Mode, gaps: bool) -> None:
    """Replay every rank again, alone (after the ASTRA-sim pass rewrote the files), and rewrite its log."""
    from chakra.replay.api import replay_file
    from chakra.replay.output import read_completion_time, write_completion_log

    for o in outcomes:
        write_completion_log(o.log, [replay_file(o.et, mode=mode, gaps=gaps)])
        o.replayed_us = read_completion_time(o.log)


def _job_replay(outcomes: list[RankOutcome], mode: Mode, gaps: bool) -> None:
    """Whole-job mode: replay all converted ranks together and rewrite their logs."""
    from chakra.replay.api import replay_job
    from chakra.replay.output import read_completion_time, write_completion_log

    job = replay_job([o.et for o in outcomes], mode=mode, gaps=gaps)
    for o in outcomes:
        res = job.ranks[o.rank] if o.rank in job.ranks else None
        if res is None:
            raise ChakraError(f"rank {o.rank}: the converted file does not say rank {o.rank}", o.et)
        write_completion_log(o.log, [res])
        o.replayed_us = read_completion_time(o.log)


def _check_ranks(folder: Path, num_ranks: int) -> list[Any]:
    """The files of ranks 0..num_ranks-1; a usage error when the archive holds other ranks too.

    Checking fewer ranks than the archive holds would pass a job whose other ranks were never looked at:
    the expected times were written for another archive (or the count is a typo), so this is refused
    rather than warned about, naming both counts.
    """
    from chakra.io.ranks import find_ranks

    try:
        files = find_ranks(folder, range(num_ranks))
    except TraceFormatError:
        present: list[int] = []
        with contextlib.suppress(ChakraError):
            present = sorted(f.rank for f in find_ranks(folder))
        if present and present == list(range(len(present))):   # ranks 0..k-1, all complete: fewer ranks
            raise UsageError(f"--num_ranks {num_ranks}, but the archive holds {len(present)} rank"
                             f"{'s' if len(present) > 1 else ''} (0..{present[-1]})", folder) from None
        raise
    extra = sorted({f.rank for f in find_ranks(folder)} - set(range(num_ranks)))
    if extra:
        total = num_ranks + len(extra)
        raise UsageError(f"--num_ranks {num_ranks}, but the archive holds {total} ranks (also rank"
                         f"{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))}): give --num_ranks "
                         f"{total} and one expected time per rank", folder)
    return files


def validation_line(log_path: str, replayed_us: int, expected_us: float,
                    tolerance: float) -> tuple[bool, str]:
    """(within, the line to print).  The success line starts with the words scripts look for."""
    lo, hi = expected_us * (1 - tolerance), expected_us * (1 + tolerance)
    where = f"expected {expected_us:.0f}us +/- {tolerance:.1%}: {lo:.0f}-{hi:.0f}us"
    if lo <= replayed_us <= hi:
        err = 100.0 * (replayed_us - expected_us) / expected_us if expected_us else 0.0
        return True, (f"Validation successful for {log_path}: {replayed_us}us is within the acceptable "
                      f"range. ({where}; {err:+.2f}%)")
    err = 100.0 * (replayed_us - expected_us) / expected_us if expected_us else float("inf")
    return False, (f"Validation failed for {log_path}: {replayed_us}us is not within {tolerance:.1%} of the "
                   f"expected {expected_us:.0f}us ({err:+.2f}%; acceptable range {lo:.0f}-{hi:.0f}us).")


def run_integration(tgz_path: str | os.PathLike[str], num_ranks: int, tolerance: float,
                    expected_times_ms: Sequence[float] | None = None, *, against_measured: bool = False,
                    jobs: int | None = None, mode: Mode = "lanes", gaps: bool = True, job: bool = False,
                    extract_dir: str | os.PathLike[str] | None = None, out: TextIO | None = None,
                    workers: int | None = None, astrasim: bool = False) -> int:
    """Extract, link, convert, replay and validate every rank; return the exit code (0 = all within).

    The archive is extracted next to itself unless ``extract_dir`` is given (CI: keep the checkout clean);
    all outputs go into the extracted folder.  When the archive is refused (no rank files, other ranks
    than ``num_ranks`` say), the folder this run extracted is removed again.  ``workers`` is the
    old name of ``jobs``.  ``astrasim``: the converted ranks are made to run in ASTRA-sim together
    (:func:`chakra.job.astrasim.astrasim_job`, what ``chakra pipeline --astrasim`` does) before the
    replay that is validated.
    """
    out = out if out is not None else sys.stdout
    jobs = jobs if jobs is not None else workers
    tgz = Path(tgz_path)
    if num_ranks <= 0:
        raise UsageError("--num_ranks must be positive")
    if tolerance < 0:
        raise UsageError("--tolerance must be >= 0")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if not against_measured:
        if not expected_times_ms:
            raise UsageError("give --expected_times_ms (one per rank) or --against-measured")
        if len(expected_times_ms) not in (1, num_ranks):
            raise UsageError(f"--expected_times_ms has {len(expected_times_ms)} values for {num_ranks} ranks")
    if not tgz.is_file():
        raise TraceFormatError("archive not found", tgz)

    target = Path(extract_dir).resolve() if extract_dir else tgz.resolve().parent
    before = set(target.iterdir()) if target.is_dir() else set()
    try:
        folder = extract_job(tgz, target)
        files = _check_ranks(folder, num_ranks)
    except BaseException:
        # a refused archive leaves nothing behind: what this run extracted beside the archive goes again
        for p in set(target.iterdir()) - before if target.is_dir() else ():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        raise
    from chakra.io.executor import run_ranks

    tasks = [(f.rank, str(f.host) if f.host else None, str(f.kineto), str(folder), mode, gaps) for f in files]
    outcomes: list[RankOutcome] = run_ranks(_rank_task, tasks, jobs=jobs, where=folder)
    if astrasim:
        from chakra.job.astrasim import astrasim_job

        report = astrasim_job([o.et for o in outcomes], folder / "chakra")
        for line in report.lines():
            log.warning("%s", line)
        if not job:
            _replay_each(outcomes, mode, gaps)
    if job:
        _job_replay(outcomes, mode, gaps)

    failures = 0
    for o in outcomes:
        if against_measured:
            if not o.measured_us:
                out.write(f"Validation failed for {o.log}: rank {o.rank} has no measured step time "
                          f"(GlobalMetadata measured_dur_us) to compare with.\n")
                failures += 1
                continue
            expected = o.measured_us
        else:
            assert expected_times_ms is not None
            ms = expected_times_ms[o.rank] if len(expected_times_ms) == num_ranks else expected_times_ms[0]
            expected = float(ms) * 1000.0
        ok, line = validation_line(o.log, o.replayed_us, expected, tolerance)
        out.write(line + "\n")
        failures += 0 if ok else 1
    out.flush()
    return 1 if failures else 0
