"""Link, convert and replay every rank of a folder: the per-rank worker and the job around it."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from chakra.errors import ChakraError, UsageError
from chakra.io.executor import auto_jobs, run_ranks
from chakra.io.ranks import RankNaming, find_ranks
from chakra.pipeline.model import SUMMARY_JSON, SUMMARY_MD, TIMELINE, PipelineResult, RankResult, RankTask
from chakra.pipeline.report import _summary, summary_markdown
from chakra.replay.progress import RichSteps, log_above, restore_logging, rich_bars

if TYPE_CHECKING:
    from chakra.replay.modes import Mode

log = logging.getLogger(__name__)


def process_rank(task: RankTask) -> RankResult:
    """Link one rank (and convert / replay it as ``task`` asks); raises ChakraError on bad input."""
    from chakra.link.api import link_files

    # the rank of the file names only stands in for a trace without one: the trace's own rank is what its
    # collectives were recorded with
    report = link_files(task.host, task.kineto, task.et_plus, fallback_rank=task.rank,
                        annotation=task.annotation, step=task.step, force=task.force)
    if report.rank != task.rank:
        log.warning("%s: the files of rank %d say rank %s; the ET+ (and Chakra ET) record rank %s",
                    task.kineto, task.rank, report.rank, report.rank)
    res = RankResult(rank=task.rank, link=report, et_plus=task.et_plus)
    if task.et is None:
        return res
    from chakra.convert import convert_file

    log_path = task.log
    read = None
    if log_path is not None:   # replayed: the nodes read as they are written (not read back)
        from chakra.replay.reader import ReadAsWritten

        read = ReadAsWritten()
    conv = convert_file(task.et_plus, task.et, reader=read)
    res.et = task.et
    res.nodes = conv.stats.nodes
    if read is None or log_path is None:
        return res
    from chakra.replay.api import replay_rank
    from chakra.replay.output import timeline, write_completion_log

    rep = replay_rank(read.graph(), mode=task.mode, gaps=task.gaps, whatif=task.whatif)
    write_completion_log(log_path, [rep])
    res.log = log_path
    _set_replay(res, rep)
    if task.timeline:
        res.timeline_events = timeline([rep])["traceEvents"]
    return res


def _set_replay(res: RankResult, rep: Any) -> None:
    res.nodes = rep.num_nodes
    res.measured_us = rep.measured_us
    res.replayed_us = rep.replayed_us
    res.error_pct = rep.error_pct
    res.recorded_end_us = rep.recorded_end_us
    res.window_error_pct = rep.window_error_pct
    res.run_on = rep.run_on()
    res.comm_wait_us = rep.total_wait_us if rep.job else None



def _check_name(name: str) -> str:
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise UsageError(f"--name {name!r}: give a plain file-name prefix")
    return name



def run_pipeline(folder: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, jobs: int | None = None,
                 scheduler: Any = None, job_replay: bool = False, mode: Mode = "lanes", gaps: bool = True,
                 progress: bool = False, name: str | None = None, annotation: str | None = None,
                 astrasim: bool = False, simulator: str | os.PathLike[str] | None = None,
                 naming: RankNaming | None = None, step: int | None = None, whatif: Any = None,
                 force: bool = False, allow_missing_ranks: bool = False) -> PipelineResult:
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
    ``astrasim``); its time per rank goes beside measured and replayed.  ``whatif``
    (:class:`chakra.replay.whatif.WhatIf`) replays with that change.  ``force``: link a rank whose host ET
    and Kineto trace look like different runs, or do not align (:func:`chakra.link.api.link_files`).
    ``allow_missing_ranks``: see :func:`find_ranks` (a folder missing ranks the job has is refused unless
    it is given).
    """
    from chakra.io import dump_json
    from chakra.replay.engine import MODES as REPLAY_MODES

    if mode not in REPLAY_MODES:
        raise UsageError(f"unknown replay mode {mode!r} (choose from {', '.join(REPLAY_MODES)})")
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    t0 = time.perf_counter()
    astrasim = astrasim or simulator is not None
    src = Path(folder)
    files = find_ranks(src, naming=naming, complete=job_replay or astrasim, allow_missing=allow_missing_ranks)
    if whatif is not None:
        from chakra.replay.whatif import check_ranks

        check_ranks(whatif, (f.rank for f in files))
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
                 whatif=whatif, force=force)
        for f in files
    ]
    jobs, executor = _executor(jobs, scheduler, files)
    bars = rich_bars() if progress else None
    moved: list[tuple[logging.StreamHandler[Any], Any]] = []
    try:
        if bars is not None:
            bars.start()
            moved = log_above(bars)
        label = "link + convert" + ("" if job_replay or astrasim else " + replay")
        try:
            results: list[RankResult] = run_ranks(process_rank, tasks, jobs=jobs, scheduler=scheduler,
                                                  progress=bars, label=label, where=src)
        except ChakraError as exc:
            failed = getattr(exc, "failed_ranks", None)
            if failed and len(failed) < len(tasks):      # the others' files stay, unsummarised
                exc.message += f" (the other ranks' files are in {out}; no summary was written)"
                exc.args = (exc.message,)
            raise
        events, target, experiment, whole_job = _job_level(results, out / job_name, astrasim, job_replay,
                                                           mode, gaps, bars, whatif, allow_missing_ranks)
        dump_json(out / TIMELINE, {"traceEvents": events, "displayTimeUnit": "ms",
                                   "otherData": {"producer": "chakra replay"}})
    finally:
        if bars is not None:
            restore_logging(moved)
            bars.stop()
    out_files, summary = _write_summary(job_name, src, out, files, results, target, experiment, simulator,
                                        whole_job, whatif, mode=mode, gaps=gaps, job_replay=job_replay,
                                        astrasim=astrasim)
    return PipelineResult(name=job_name, out_dir=out, ranks=results, mode=mode, job_replay=job_replay,
                          files=out_files, summary=summary, seconds=time.perf_counter() - t0,
                          executor=executor, astrasim=target, experiment=experiment)


def _executor(jobs: int | None, scheduler: Any, files: list[Any]) -> tuple[int | None, str]:
    """The number of worker processes (:func:`auto_jobs` when not given) and how the ranks run, in words."""
    if jobs is None and scheduler is None:
        jobs = auto_jobs(files)
    if scheduler is None:
        n = max(1, min(jobs or os.cpu_count() or 1, len(files)))
        return jobs, "this process" if n == 1 else f"{n} worker processes"
    return jobs, f"dask ({scheduler if isinstance(scheduler, str) else 'client'})"


def _job_level(results: list[RankResult], prefix: Path, astrasim: bool, job_replay: bool, mode: Mode,
               gaps: bool, bars: Any, whatif: Any, allow_missing_ranks: bool
               ) -> tuple[list[dict[str, Any]], Any, Any, dict[str, Any] | None]:
    """What is done with all ranks at once: the ASTRA-sim target and experiment (``--astrasim``), the
    whole-job replay (``--job``), or the per-rank replays' timelines.  ``(events, target, experiment, the
    job's numbers)``."""
    out = prefix.parent
    events: list[dict[str, Any]] = []
    target = experiment = None
    whole_job: dict[str, Any] | None = None
    if astrasim:
        from chakra.job.astrasim import astrasim_job
        from chakra.pipeline.experiment import build_experiment

        ets = cast(list[str], [r.et for r in results])   # (every rank is converted by now)
        target = astrasim_job(ets, prefix)
        experiment = build_experiment(ets, prefix,
                                      npus=len(target.ranks), comm_group=target.comm_group, whatif=whatif)
        events, times = _adopt_job(results, out, experiment.job)
        if job_replay:
            whole_job = times
    elif job_replay:
        events, whole_job = _replay_job(results, out, mode, gaps, bars, whatif, allow_missing_ranks)
    else:
        for r in results:
            events.extend(r.timeline_events)
            r.timeline_events = []
    return events, target, experiment, whole_job


def _write_summary(job_name: str, src: Path, out: Path, files: list[Any], results: list[RankResult],
                   target: Any, experiment: Any, simulator: str | os.PathLike[str] | None,
                   whole_job: dict[str, Any] | None, whatif: Any, *, mode: Mode, gaps: bool, job_replay: bool,
                   astrasim: bool) -> tuple[dict[str, str], dict[str, Any]]:
    """Run the simulator when asked, and write ``summary.json`` and ``summary.md``: ``(files, summary)``."""
    from chakra.io import atomic_output, dump_json

    out_files = {"et_plus": "et_plus_N.json", "et": f"{job_name}.N.et", "completion_log": "replay_N.log",
                 "timeline": TIMELINE, "summary_json": SUMMARY_JSON, "summary_md": SUMMARY_MD}
    sim = None
    if target is not None and experiment is not None:
        if target.comm_group is not None:
            out_files["comm_group"] = target.comm_group.name
        out_files.update({k: p.name for k, p in experiment.configs.items()})
        if simulator is not None:
            from chakra.job.simulator import run_simulator

            sim = run_simulator(simulator, out / job_name, experiment.npus, comm_group=target.comm_group,
                                configs=experiment.configs)
    summary = _summary(job_name, src, files, results, "lanes" if astrasim else mode, gaps,
                       job_replay or astrasim, out_files, whatif is not None)
    if target is not None and experiment is not None:
        summary["astrasim"] = {
            "ranks": target.ranks, "collectives": target.collectives, "send_recv_pairs": target.p2p,
            "as_comp": {str(r): k for r, k in sorted(target.as_comp.items())},
            "metadata_dropped": target.metadata_dropped, "sizes_unified": target.sizes_unified,
            "comm_group": target.groups or None, "notes": target.notes,
            "experiment": experiment.describe(),
        }
    if experiment is not None:
        from chakra.pipeline.experiment import breakdown

        parts = breakdown([f"{experiment.prefix}.{r}.et" for r in experiment.ranks], experiment.offsets_us)
        for r in summary["ranks"]:
            r["simulated_breakdown_us"] = parts.get(r["rank"])
    if sim is not None and experiment is not None:
        for r in summary["ranks"]:
            t = sim.us(r["rank"])
            r["simulated_us"] = None if t is None else t - experiment.offsets_us.get(r["rank"], 0.0)
            r["simulated_exposed_comm_us"] = (sim.exposed_comm_ns[r["rank"]] / 1000.0
                                              if r["rank"] in sim.exposed_comm_ns else None)
    if whole_job is not None:
        if whatif is not None:   # the prediction against the measured job: a change, not an error
            whole_job = {k.replace("error_pct", "change_pct"): v for k, v in whole_job.items()}
        summary["whole_job"] = whole_job
    if whatif is not None:
        summary["whatif"] = whatif.describe()   # "replayed" is the prediction under these changes

    dump_json(out / SUMMARY_JSON, summary)
    with atomic_output(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary).encode())
    return out_files, summary


def _adopt_job(results: list[RankResult], out: Path, job: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A whole-job replay (:func:`_replay_job`'s, or the one an ASTRA-sim experiment was written from,
    chakra.pipeline.experiment) as the ranks' replay: completion logs, timeline events, the job's numbers."""
    from chakra.replay.output import timeline, write_completion_log

    for r in results:
        rep = job.ranks.get(r.rank)
        if rep is None:
            raise ChakraError(f"rank {r.rank}: the converted file says another rank", r.et)
        r.log = os.path.abspath(out / f"replay_{r.rank}.log")
        write_completion_log(r.log, [rep])
        _set_replay(r, rep)
    return timeline(job)["traceEvents"], job.times()


def _replay_job(results: list[RankResult], out: Path, mode: Mode, gaps: bool, bars: Any, whatif: Any = None,
                allow_missing_ranks: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Whole-job replay in this process (collectives couple the ranks): logs, timeline events, and the
    job's numbers (:meth:`chakra.replay.api.JobResult.times`)."""
    from chakra.replay.api import replay_job

    steps = RichSteps(bars) if bars is not None else None
    # (the folder was checked for missing ranks already; refused, the files' own tables are checked too)
    job = replay_job([r.et for r in results], mode=mode, gaps=gaps, couple=True, whatif=whatif,
                     allow_missing_ranks=None if allow_missing_ranks else False, steps=steps)
    if steps is not None:
        steps.phase("completion logs and timeline")
    out_ = _adopt_job(results, out, job)
    if steps is not None:
        steps.close()
    return out_
