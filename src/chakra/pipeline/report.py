"""What a pipeline run says: summary.json / summary.md, and the tables printed on the terminal."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from chakra.io.ranks import RankFiles
from chakra.pipeline.model import SUMMARY_JSON, SUMMARY_MD, TIMELINE, PipelineResult, RankResult
from chakra.replay.output import (
    fmt_error,
    fmt_pct,
    fmt_us,
    job_error,
    measured_cells,
    measured_table,
    overrun_note,
)

if TYPE_CHECKING:
    from chakra.replay.modes import Mode

log = logging.getLogger(__name__)


def _relative(path: Path | None, root: Path) -> str | None:
    if path is None:   # a rank linked from its Kineto trace alone
        return None
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _summary(name: str, folder: Path, files: list[RankFiles], results: list[RankResult], mode: Mode,
             gaps: bool, job_replay: bool, out_files: dict[str, str], whatif: bool = False) -> dict[str, Any]:
    """Everything here is a pure function of the inputs: no time, no absolute path, no executor.

    ``whatif``: the replay was a what-if's prediction: each rank's ``change_pct`` (the predicted step against
    the measured one) stands where ``error_pct`` would."""
    diff = "change_pct" if whatif else "error_pct"
    ranks = []
    for f, r in zip(files, results):
        link = r.link
        row: dict[str, Any] = {
            "rank": r.rank,
            "host_et": _relative(f.host, folder),
            "kineto": _relative(f.kineto, folder),
            "et_plus": Path(r.et_plus).name,
            "et": Path(r.et).name if r.et else None,
            "completion_log": Path(r.log).name if r.log else None,
            "nodes": r.nodes,
            "measured_us": r.measured_us,
            "replayed_us": r.replayed_us,
            diff: r.error_pct,
            "recorded_end_us": r.recorded_end_us,
        }
        if r.run_on is not None:   # the error (change) is against the recorded end of the window's work
            row.update({"error_reference": "recorded_end", f"window_{diff}": r.window_error_pct,
                        "ran_on": r.run_on})
        row.update({
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
        ranks.append(row)
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
        f"abs_{diff}_max": max(errs) if errs else None,
        f"abs_{diff}_mean": sum(errs) / len(errs) if errs else None,
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
    # every GPU op of the window in the graph: attached to its host op, or launched before the trace began
    # (no launch call), kept on its stream without one
    before = r["gpu_launched_before_trace"]
    text = f"{r['gpu_ops_attached'] + before:,}/{total:,} ({100 * r['gpu_attach_rate_in_window']:.1f}%)"
    if not before:
        return text
    return text + (f", {before:,} pre-trace" if short else f", {before:,} launched before the trace")


def _whatif(summary: dict[str, Any]) -> bool:
    return "whatif" in summary


def _diff_key(summary: dict[str, Any]) -> str:
    """``change_pct`` in a what-if's summary (the prediction against the measured step), else
    ``error_pct``."""
    return "change_pct" if _whatif(summary) else "error_pct"


def _diff_cell(summary: dict[str, Any], r: dict[str, Any]) -> str:
    """The error (or what-if change) of a rank, marked when it is against the recorded end of its work."""
    return fmt_error(r.get(_diff_key(summary)), r.get("error_reference") == "recorded_end")


def _heads(summary: dict[str, Any]) -> tuple[str, str]:
    """The replay's and the difference's column names: a what-if's replay is a prediction and its
    difference from the measured step is the predicted change, not an error."""
    return ("predicted (µs)", "change") if _whatif(summary) else ("replayed (µs)", "error")


def _flagged(summary: dict[str, Any], r: dict[str, Any]) -> str | None:
    """A row's style: yellow when its error exceeds 5 % (a what-if's change is what was asked for)."""
    err = None if _whatif(summary) else r.get("error_pct")
    return None if err is None or abs(err) <= 5.0 else "yellow"


def summary_markdown(summary: dict[str, Any]) -> str:
    how = "whole job (collectives coupled across ranks)" if summary["replay"] == "whole_job" else "per rank"
    rep_head, diff_head = _heads(summary)
    lines = [
        f"# {summary['job']}: measured vs {'predicted' if _whatif(summary) else 'replayed'}",
        "",
        f"{summary['num_ranks']} rank{'' if summary['num_ranks'] == 1 else 's'}; replay {how}, mode "
        f"{summary['mode']}, "
        f"{'with' if summary['gaps'] else 'without'} recorded gaps.",
        "",
    ]
    if _whatif(summary):
        lines += [f"What-if: {'; '.join(summary['whatif'])}; {diff_head}: the predicted step against the "
                  "measured one.", ""]
    # the simulator's time per rank when it ran (--simulator), as in the terminal's table
    simulated = any("simulated_us" in r for r in summary["ranks"])
    head = ["rank", "nodes", "measured (µs)", rep_head, diff_head,
            *(["ASTRA-sim (µs)", "ASTRA-sim error"] if simulated else []), "host ops matched",
            "GPU ops attached"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in summary["ranks"]:
        sim = [fmt_us(r.get("simulated_us")), fmt_pct(simulated_error(r))] if simulated else []
        cells = [str(r["rank"]), f"{r['nodes']:,}", fmt_us(r["measured_us"]), fmt_us(r["replayed_us"]),
                 _diff_cell(summary, r), *sim,
                 f"{r['host_ops_matched']:,}/{r['host_ops']:,} ({100 * r['host_match_rate']:.1f}%)",
                 _attached(r)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _simulator_lines(summary, simulated)
    notes = overrun_notes(summary)
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    whole = summary.get("whole_job")
    if whole is not None:
        verb = "predicted" if _whatif(summary) else "replayed"
        lines += [
            "",
            f"Whole job (first rank's start to last rank's end): measured {fmt_us(whole['measured_us'])} µs, "
            f"{verb} {fmt_us(whole['replayed_us'])} µs ({_job_diff(summary, whole)}); collectives waited "
            f"{fmt_us(whole['comm_wait_us'])} µs for their peers in all; {whole['matched_comm_groups']} "
            "collectives and send/recv pairs matched.",
        ]
    lines += _experiment_lines(summary)
    key = _diff_key(summary)
    word = "change" if _whatif(summary) else "error"
    lines += [
        "",
        f"Largest |{word}|: {_fmt2(summary[f'abs_{key}_max'])}%; mean |{word}|: "
        f"{_fmt2(summary[f'abs_{key}_mean'])}%.",
        "",
        "Files (per rank N): " + ", ".join(f"`{v}`" for v in summary["files"].values()) + ".",
        "",
    ]
    return "\n".join(lines)


def _simulator_lines(summary: dict[str, Any], simulated: bool) -> list[str]:
    """What the ASTRA-sim error compares with, and where each rank's time goes under the simulator's rules."""
    lines = []
    if simulated:
        lines += ["", "ASTRA-sim error: against the later of the measured window's end and the end of the "
                  "work started in it (the rank's time in the simulator counts from its own window start)."]
    if any(r.get("simulated_breakdown_us") for r in summary["ranks"]):
        lines += ["", "Where the time goes under the simulator's rules (µs): compute while an op of the "
                  "trace runs, exposed communication while only communication does, idle while neither does.",
                  "",
                  "| rank | compute | exposed communication | idle | simulator's exposed communication |",
                  "|---:|---:|---:|---:|---:|"]
        for r in summary["ranks"]:
            b = r.get("simulated_breakdown_us") or {}
            lines.append(f"| {r['rank']} | {fmt_us(b.get('compute'))} | {fmt_us(b.get('exposed_comm'))} | "
                         f"{fmt_us(b.get('idle'))} | {fmt_us(r.get('simulated_exposed_comm_us'))} |")
    return lines


def _experiment_lines(summary: dict[str, Any]) -> list[str]:
    """The ASTRA-sim experiment the pipeline wrote (--astrasim): its network, command line and fit."""
    exp = (summary.get("astrasim") or {}).get("experiment")
    if exp is None:
        return []
    net = exp["network"]
    lines = ["", "## ASTRA-sim experiment", "",
             f"Network: {net['topology']} of {net['npus']}, latency {net['latency_ns']:,.0f} ns per "
             f"message, bandwidth {net['bandwidth_gbps']:.4g} GB/s ({net['source']}). Run it in this "
             "folder:", "",
             f"    {exp['command']}", "",
             "| collective | transfers | network model's share | left over per transfer (µs, mean) |",
             "|---|---:|---:|---:|"]
    for kind, res in exp["fit"]["residuals"].items():
        lines.append(f"| {kind} | {res['count']} | {res['model_share_pct']:.0f}% | {res['mean_us']:,.1f} |")
    return lines


def _job_diff(summary: dict[str, Any], whole: dict[str, Any]) -> str:
    """The whole job's error (what-if: change), naming its reference when it is the work's recorded end."""
    if _whatif(summary):
        return fmt_error(whole.get("change_pct"), whole.get("error_reference") == "recorded_end")
    return job_error(whole)


def job_table(result: PipelineResult, title: str | None = None) -> Any:
    """The whole-job replay as a rich Table: per rank where it starts on the job's clock, its times and how
    long its collectives waited for their peers; a last row for the job (first start to last end)."""
    from rich.table import Table

    summary = result.summary
    whole = summary["whole_job"]
    rep_head, diff_head = _heads(summary)
    what = "what-if predicted" if _whatif(summary) else "replayed"
    table = Table(title=title or f"{result.name}: whole job {what} (collectives coupled, mode "
                  f"{result.mode})")
    simulated = any("simulated_us" in r for r in summary["ranks"])
    for col in ("rank", "nodes", "starts at (µs)", "measured (µs)", rep_head, diff_head,
                *(("ASTRA-sim (µs)", "ASTRA-sim error") if simulated else ()), "comm wait (µs)",
                "wait share"):
        table.add_column(col, justify="right")
    offsets = whole["start_offsets_us"]
    for r in summary["ranks"]:
        wait, rep = r["comm_wait_us"], r["replayed_us"]
        share = fmt_pct(100.0 * wait / rep).lstrip("+") if wait is not None and rep else "-"
        sim = (fmt_us(r.get("simulated_us")), fmt_pct(simulated_error(r))) if simulated else ()
        table.add_row(str(r["rank"]), f"{r['nodes']:,}", fmt_us(offsets.get(str(r["rank"]))),
                      fmt_us(r["measured_us"]), fmt_us(rep), _diff_cell(summary, r), *sim, fmt_us(wait),
                      share, style=_flagged(summary, r))
    table.add_section()
    sim_job = (fmt_us(max((r.get("simulated_us") or 0.0) for r in summary["ranks"])), "") if simulated \
        else ()
    table.add_row("job", f"{sum(r['nodes'] for r in summary['ranks']):,}", fmt_us(0.0),
                  fmt_us(whole["measured_us"]), fmt_us(whole["replayed_us"]), _diff_cell(summary, whole),
                  *sim_job, fmt_us(whole["comm_wait_us"]), "", style="bold")
    table.caption = (f"job: first rank's start to last rank's end; {whole['matched_comm_groups']} "
                     "collectives and send/recv pairs matched across ranks; comm wait: the wall time a "
                     "rank's collectives waited for their peers (waits at once on two threads count once; "
                     "the job's: summed over its ranks)" + _diff_caption(summary))
    return table


def _diff_caption(summary: dict[str, Any]) -> str:
    return f"; change: {'; '.join(summary['whatif'])}, against the measured step" if _whatif(summary) else ""


def pipeline_table(result: PipelineResult, title: str | None = None) -> Any:
    """The measured-vs-replayed table (:func:`chakra.replay.output.measured_table`) of a pipeline run: the
    simulator's time when it ran, how many host ops matched and GPU ops attached (:func:`job_table` for a
    whole-job replay)."""
    if result.job_replay and "whole_job" in result.summary:
        return job_table(result, title)
    summary = result.summary
    rep_head, diff_head = _heads(summary)
    how = "whole job" if result.job_replay else "per rank"
    what = "what-if predicted" if _whatif(summary) else "replayed"
    simulated = any("simulated_us" in r for r in summary["ranks"])
    rows = []
    for r in summary["ranks"]:
        cells = measured_cells(r["rank"], r["nodes"], r["measured_us"], r["replayed_us"],
                               _diff_cell(summary, r))
        if simulated:
            cells += [fmt_us(r.get("simulated_us")), fmt_pct(simulated_error(r))]
        cells += [f"{r['host_ops_matched']:,}/{r['host_ops']:,}", _attached(r, short=True)]
        rows.append((cells, _flagged(summary, r)))
    table = measured_table(title or f"{result.name}: measured vs {what} ({how}, mode {result.mode})", rows,
                           (*(("ASTRA-sim (µs)", "ASTRA-sim error") if simulated else ()), "host ops matched",
                            "GPU ops attached"), rep_head, diff_head)
    captions = []
    if any(r.get("gpu_launched_before_trace") for r in summary["ranks"]):
        captions.append("pre-trace: GPU ops launched before the trace began (no launch call, no host op), "
                        "run on their streams where they were recorded")
    if _whatif(summary):
        captions.append(f"change: {'; '.join(summary['whatif'])}, against the measured step")
    if captions:
        table.caption = "; ".join(captions)
    return table


def simulated_error(r: dict[str, Any]) -> float | None:
    """ASTRA-sim's time of a summary row against the later of the measured window's end and the recorded
    end of the work started in it, in %."""
    sim, measured = r.get("simulated_us"), r.get("measured_us")
    if sim is None or not measured:
        return None
    ref = max(measured, r.get("recorded_end_us") or 0.0)
    return 100.0 * (sim - ref) / ref


def overrun_notes(summary: dict[str, Any]) -> list[str]:
    """:func:`chakra.replay.output.overrun_note` of each rank of the summary that has one."""
    diff = "change" if _whatif(summary) else "error"
    notes = (overrun_note(r["rank"], r["measured_us"], r.get("recorded_end_us"), r["replayed_us"],
                          r.get("ran_on"), diff) for r in summary["ranks"])
    return [n for n in notes if n]


def _print_result(result: PipelineResult, stream: TextIO, wall: bool = True) -> None:
    from rich.console import Console

    console = Console(file=stream, width=120 if not stream.isatty() else None)
    console.print(pipeline_table(result))
    for note in overrun_notes(result.summary):
        console.print(note)
    out = result.out_dir
    lines = [
        f"Outputs in {out}{os.sep}:",
        f"  ET+ (linked host + Kineto):   et_plus_N.json   (N = {_rank_list(result)})",
        f"  Chakra ET (protobuf):         {result.name}.N.et",
        "  replay completion logs:       replay_N.log",
        f"  replay timeline (Perfetto / chrome://tracing): {TIMELINE}",
        f"  summary:                      {SUMMARY_MD}, {SUMMARY_JSON}",
    ]
    target, exp = result.astrasim, result.experiment
    if target is not None and exp is not None:
        lines += [*target.lines(), *exp.lines(),
                  f"  run it: {exp.command()}   (ASTRA-sim's launcher; see the README)"]
    if wall:
        n = len(result.ranks)
        lines.append(f"{n} rank{'' if n == 1 else 's'} in {result.seconds:.1f} s ({result.executor}).")
    stream.write("\n".join(lines) + "\n")
    stream.flush()


def _rank_list(result: PipelineResult) -> str:
    ranks = [r.rank for r in result.ranks]
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}..{ranks[-1]}"
    return ", ".join(map(str, ranks))


