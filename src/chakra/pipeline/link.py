"""``chakra_trace_link``'s command: one host ET + Kineto pair, a Kineto trace alone, or every rank of a
folder.

Batch mode runs the pipeline's per-rank worker (link only) over the folder's ranks.
"""

from __future__ import annotations

import logging
import os
import sys

from chakra.errors import UsageError
from chakra.link.api import LinkReport, link_files

log = logging.getLogger(__name__)


def _output_name(rank: int, host: str | os.PathLike[str] | None, kineto: str | os.PathLike[str]) -> str:
    """``et_plus_N.json``, gzip (``.gz``) when the host ET (else the Kineto trace) is."""
    return f"et_plus_{rank}.json.gz" if os.fspath(host or kineto).endswith(".gz") else f"et_plus_{rank}.json"


def link_folder(
    folder: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    jobs: int | None = None,
    *,
    annotation: str | None = None,
    quiet: bool = False,
    kineto_only: bool = False,
    step: int | None = None,
    force: bool = False,
) -> list[LinkReport]:
    """Link every rank of ``folder`` into ``out_dir/et_plus_N.json(.gz)``, ``jobs`` processes at a time;
    ``kineto_only``: every rank from its Kineto trace alone (also when the folder has no host ET).

    The ranks, the per-rank worker and the process pool are those of :mod:`chakra.pipeline`.  ``quiet``:
    no progress bar (one is shown only on a terminal)."""
    # (the rank finder, the executor, the pipeline's worker and pathlib: imported here, a link of one pair
    # needs none of them)
    from pathlib import Path

    from chakra.io.executor import run_ranks, show_progress
    from chakra.io.ranks import RankNaming, find_ranks
    from chakra.pipeline.model import RankTask
    from chakra.pipeline.run import process_rank

    files = find_ranks(folder, naming=RankNaming(kineto_only=kineto_only))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [
        RankTask(rank=r, host=str(h) if h else None, kineto=str(k), et_plus=str(out / _output_name(r, h, k)),
                 annotation=annotation, step=step, force=force)
        for r, h, k in files
    ]
    progress = None
    if show_progress(quiet):
        from rich.progress import Progress

        progress = Progress(transient=True, auto_refresh=False)   # (no refresh thread: see pipeline.run)
        progress.start()
    try:
        results = run_ranks(process_rank, tasks, jobs=jobs, progress=progress, label="linking", where=folder)
    finally:
        if progress:
            progress.stop()
    return [res.link for res in results]


def link_command(
    *,
    host: str | None = None,
    kineto: str | None = None,
    output: str | None = None,
    rank: int | None = None,
    annotation: str | None = None,
    batch: str | None = None,
    output_dir: str | None = None,
    jobs: int | None = None,
    quiet: bool = False,
    strict: bool = False,
    kineto_only: bool = False,
    step: int | None = None,
    force: bool = False,
) -> int:
    """What ``chakra_trace_link`` does: one pair, a Kineto trace alone (``kineto_only``, implied when
    no host ET is given), or a folder with ``batch``.  Returns the exit code."""
    if batch is not None:
        if host or kineto:
            raise UsageError("--batch links a whole folder: do not also give trace files")
        if output:
            raise UsageError("--batch writes one ET+ per rank: give their folder with --output-dir, not "
                             "-o/--output-file")
        if strict:
            raise UsageError("--strict checks one host ET + Kineto pair; it is not available with --batch")
        reports = link_folder(batch, output_dir or batch, jobs, annotation=annotation, quiet=quiet,
                              kineto_only=kineto_only, step=step, force=force)
        if not quiet:  # the result, once, on stdout (the INFO log has the details with -v)
            for r in reports:
                sys.stdout.write(f"{r.summary()} -> {r.output_path}\n")
        return 0
    if kineto_only and host:
        raise UsageError("--kineto-only links the Kineto trace alone: do not also give a host ET")
    if not host and kineto and not kineto_only:
        log.info("no host ET given: linking the Kineto trace alone (--kineto-only)")
        kineto_only = True
    missing = [
        name
        for name, v in (
            ("host ET (--chakra-host-trace / --pytorch-et-file; or --kineto-only)", host or kineto_only),
            ("Kineto trace (--chakra-device-trace / --kineto-file)", kineto),
            ("--output-file", output),
        )
        if not v
    ]
    if missing:
        raise UsageError("missing " + ", ".join(missing))
    assert kineto is not None and output is not None   # (else named missing above)
    report = link_files(None if kineto_only else host, kineto, output,
                        rank=rank, annotation=annotation, strict=strict, step=step, force=force)
    if not quiet:
        sys.stdout.write(f"{report.summary()} -> {output}\n")
    return 0


