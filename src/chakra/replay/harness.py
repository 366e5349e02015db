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

import inspect
import logging
import multiprocessing
import os
import sys
import tarfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from chakra.errors import ChakraError, TraceFormatError, UsageError

log = logging.getLogger(__name__)

HOST_NAMES = ("chakra_host_et_{n}.json", "chakra_host_et_{n}.json.gz", "host_et_{n}.json",
              "host_et_{n}.json.gz")
KINETO_NAMES = ("kineto_{n}.json", "kineto_{n}.json.gz", "chakra_device_trace_{n}.json",
                "chakra_device_trace_{n}.json.gz")


@dataclass(slots=True)
class RankOutcome:
    rank: int
    host: str
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
        members = tar.getmembers()
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
        except (tarfile.TarError, OSError) as exc:
            raise TraceFormatError(f"cannot extract the archive ({exc})", tgz) from None


def find_rank_files(folder: Path, rank: int) -> tuple[Path, Path]:
    """(host ET, Kineto trace) of one rank, accepting both naming schemes."""
    hosts = [folder / p.format(n=rank) for p in HOST_NAMES]
    kinetos = [folder / p.format(n=rank) for p in KINETO_NAMES]
    host = next((p for p in hosts if p.is_file()), None)
    kineto = next((p for p in kinetos if p.is_file()), None)
    if host is None:
        raise TraceFormatError(f"no host ET for rank {rank} (looked for {', '.join(p.name for p in hosts)})",
                               folder)
    if kineto is None:
        raise TraceFormatError(
            f"no Kineto trace for rank {rank} (looked for {', '.join(p.name for p in kinetos)})", folder)
    return host, kineto


def _link(host: Path, kineto: Path, out: Path, rank: int) -> None:
    try:  # written by the linker; imported lazily
        from chakra.link import link_files
    except ImportError:
        from chakra.link.api import link_files

    params = inspect.signature(link_files).parameters
    kwargs: dict[str, Any] = {"rank": rank} if "rank" in params else {}
    link_files(host, kineto, out, **kwargs)


def process_rank(rank: int, host: str, kineto: str, workdir: str, mode: str = "lanes",
                 gaps: bool = True) -> RankOutcome:
    """Link, convert and replay one rank (runs in a worker process)."""
    from chakra.convert import convert_file
    from chakra.replay.api import replay_file
    from chakra.replay.output import read_completion_time, write_completion_log

    wd = Path(workdir)
    et_plus = wd / f"chakra_et_plus_{rank}.json"
    et = wd / f"chakra.{rank}.et"
    log_path = wd / f"replay_{rank}.log"
    _link(Path(host), Path(kineto), et_plus, rank)
    convert_file(et_plus, et)
    res = replay_file(et, mode=mode, gaps=gaps)
    write_completion_log(log_path, [res])
    return RankOutcome(rank=rank, host=host, kineto=kineto, et_plus=str(et_plus), et=str(et),
                       log=str(log_path),
                       replayed_us=read_completion_time(log_path), measured_us=res.measured_us,
                       nodes=res.num_nodes)


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


def _init_worker(level: int) -> None:
    """Spawned workers log like the parent (``--quiet`` / ``--log-level`` carry over)."""
    logging.basicConfig(level=level, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")


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
    pairs = [find_rank_files(folder, r) for r in range(num_ranks)]

    n_workers = max(1, min(num_ranks, workers or os.cpu_count() or 1))
    outcomes: list[RankOutcome] = []
    if n_workers == 1:
        outcomes = [process_rank(r, str(h), str(k), str(folder), mode, gaps)
                    for r, (h, k) in enumerate(pairs)]
    else:
        # spawn: workers start clean (no inherited logging handlers or locks of the parent)
        ctx = multiprocessing.get_context("spawn")
        level = logging.getLogger().getEffectiveLevel()
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(level,)) as pool:
            futures = [pool.submit(process_rank, r, str(h), str(k), str(folder), mode, gaps)
                       for r, (h, k) in enumerate(pairs)]
            outcomes = [f.result() for f in futures]
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
