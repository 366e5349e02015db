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

import logging
import os
import sys
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from chakra.errors import ChakraError, TraceFormatError, UsageError

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


def safe_extract(tgz: Path, target: Path) -> None:
    """Extract ``tgz`` into ``target``, refusing members that would land outside it."""
    target = target.resolve()
    try:
        tar = tarfile.open(tgz, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise TraceFormatError(f"cannot open the archive ({exc})", tgz) from None
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"truncated or corrupt archive ({exc})", tgz) from None
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
        try:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(target, members=members, filter="data")
            else:  # pragma: no cover - python < 3.11.4
                tar.extractall(target, members=members)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"cannot extract the archive ({exc})", tgz) from None


def find_rank_files(folder: Path, rank: int) -> tuple[Path | None, Path]:
    """(host ET, Kineto trace) of one rank, accepting both naming schemes (``chakra.pipeline.find_ranks``)."""
    from chakra.pipeline import find_ranks

    (files,) = find_ranks(folder, [rank])
    return files.host, files.kineto


def process_rank(rank: int, host: str | None, kineto: str, workdir: str, mode: str = "lanes",
                 gaps: bool = True) -> RankOutcome:
    """Link, convert and replay one rank (the worker of :mod:`chakra.pipeline`, the harness's file names)."""
    from chakra.pipeline import RankTask
    from chakra.pipeline import process_rank as work
    from chakra.replay.output import read_completion_time

    wd = Path(workdir)
    res = work(RankTask(rank=rank, host=host, kineto=kineto, et_plus=str(wd / f"chakra_et_plus_{rank}.json"),
                        et=str(wd / f"chakra.{rank}.et"), log=str(wd / f"replay_{rank}.log"), mode=mode,
                        gaps=gaps))
    assert res.et is not None and res.log is not None
    return RankOutcome(rank=rank, host=host, kineto=kineto, et_plus=res.et_plus, et=res.et, log=res.log,
                       replayed_us=read_completion_time(res.log), measured_us=res.measured_us,
                       nodes=res.nodes)


def _rank_task(args: tuple[int, str, str, str, str, bool]) -> RankOutcome:
    """One rank in a worker; looks ``process_rank`` up at call time (tests replace it)."""
    return process_rank(*args)


def _job_replay(outcomes: list[RankOutcome], mode: str, gaps: bool) -> None:
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


def run_integration(tgz_path: str | os.PathLike[str], num_ranks: int, tolerance: float,
                    expected_times_ms: Sequence[float] | None = None, *, against_measured: bool = False,
                    workers: int | None = None, mode: str = "lanes", gaps: bool = True, job: bool = False,
                    extract_dir: str | os.PathLike[str] | None = None, out: TextIO | None = None) -> int:
    """Extract, link, convert, replay and validate every rank; return the exit code (0 = all within).

    The archive is extracted next to itself unless ``extract_dir`` is given (CI: keep
    the checkout clean); all outputs go into the extracted folder.
    """
    out = out if out is not None else sys.stdout
    tgz = Path(tgz_path)
    if num_ranks <= 0:
        raise UsageError("--num_ranks must be positive")
    if tolerance < 0:
        raise UsageError("--tolerance must be >= 0")
    if not against_measured:
        if not expected_times_ms:
            raise UsageError("give --expected_times_ms (one per rank) or --against-measured")
        if len(expected_times_ms) not in (1, num_ranks):
            raise UsageError(f"--expected_times_ms has {len(expected_times_ms)} values for {num_ranks} ranks")
    if not tgz.is_file():
        raise TraceFormatError("archive not found", tgz)

    target = Path(extract_dir).resolve() if extract_dir else tgz.resolve().parent
    target.mkdir(parents=True, exist_ok=True)
    safe_extract(tgz, target)
    folder = target / archive_folder_name(tgz)
    if not folder.is_dir():
        raise TraceFormatError(f"the archive has no folder {folder.name}/", tgz)
    from chakra.pipeline import find_ranks, run_ranks

    files = find_ranks(folder, range(num_ranks))
    tasks = [(f.rank, str(f.host) if f.host else None, str(f.kineto), str(folder), mode, gaps) for f in files]
    outcomes: list[RankOutcome] = run_ranks(_rank_task, tasks, jobs=workers, where=folder)
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
        lo, hi = expected * (1 - tolerance), expected * (1 + tolerance)
        if lo <= o.replayed_us <= hi:
            out.write(f"Validation successful for {o.log}: {o.replayed_us}us is within the acceptable "
                      "range.\n")
        else:
            err = 100.0 * (o.replayed_us - expected) / expected if expected else float("inf")
            out.write(f"Validation failed for {o.log}: {o.replayed_us}us is not within {tolerance:.1%} "
                      f"of the expected {expected:.0f}us ({err:+.2f}%; acceptable range "
                      f"{lo:.0f}-{hi:.0f}us).\n")
            failures += 1
    out.flush()
    return 1 if failures else 0
