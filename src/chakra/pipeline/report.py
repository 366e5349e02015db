"""What a pipeline run says: summary.json / summary.md, and the tables printed on the terminal."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, TextIO

from chakra.io.ranks import RankFiles
from chakra.pipeline.model import SUMMARY_JSON, SUMMARY_MD, TIMELINE, PipelineResult, RankResult
from chakra.replay.output import fmt_pct, fmt_us, overrun_note

log = logging.getLogger(__name__)


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
            "recorded_end_us": r.recorded_end_us,
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
    # every GPU op of the window in the graph: attached to its host op, or launched before the trace began
    # (no launch call), kept on its stream without one
    before = r["gpu_launched_before_trace"]
    text = f"{r['gpu_ops_attached'] + before:,}/{total:,} ({100 * r['gpu_attach_rate_in_window']:.1f}%)"
    if not before:
        return text
    return text + (f", {before:,} pre-trace" if short else f", {before:,} launched before the trace")


def summary_markdown(summary: dict[str, Any]) -> str:
    how = "whole job (collectives coupled across ranks)" if summary["replay"] == "whole_job" else "per rank"
    lines = [
        f"# {summary['job']}: measured vs replayed",
        "",
        f"{summary['num_ranks']} rank{'' if summary['num_ranks'] == 1 else 's'}; replay {how}, mode "
        f"{summary['mode']}, "
        f"{'with' if summary['gaps'] else 'without'} recorded gaps.",
        "",
    ]
    simulated = any("simulated_us" in r for r in summary["ranks"])
    sim_head = " ASTRA-sim (µs) | ASTRA-sim error |" if simulated else ""
    lines += [
        f"| rank | nodes | measured (µs) | replayed (µs) | error |{sim_head} host ops matched "
        "| GPU ops attached |",
        "|---:|---:|---:|---:|---:|" + ("---:|---:|" if simulated else "") + "---:|---:|",
    ]
    for r in summary["ranks"]:
        sim = f" {fmt_us(r.get('simulated_us'))} | {fmt_pct(simulated_error(r))} |" if simulated else ""
        lines.append(
            f"| {r['rank']} | {r['nodes']:,} | {fmt_us(r['measured_us'])} | {fmt_us(r['replayed_us'])} | "
            f"{fmt_pct(r['error_pct'])} |{sim} {r['host_ops_matched']:,}/{r['host_ops']:,} "
            f"({100 * r['host_match_rate']:.1f}%) | {_attached(r)} |")
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
    notes = overrun_notes(summary)
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    whole = summary.get("whole_job")
    if whole is not None:
        lines += [
            "",
            f"Whole job (first rank's start to last rank's end): measured {fmt_us(whole['measured_us'])} µs, "
            f"replayed {fmt_us(whole['replayed_us'])} µs ({fmt_pct(whole['error_pct'])}); collectives waited "
            f"{fmt_us(whole['comm_wait_us'])} µs for their peers in all; {whole['matched_comm_groups']} "
            "collectives and send/recv pairs matched.",
        ]
    exp = (summary.get("astrasim") or {}).get("experiment")
    if exp is not None:
        net = exp["network"]
        lines += ["", "## ASTRA-sim experiment", "",
                  f"Network: {net['topology']} of {net['npus']}, latency {net['latency_ns']:,.0f} ns per "
                  f"message, bandwidth {net['bandwidth_gbps']:.4g} GB/s ({net['source']}). Run it in this "
                  "folder:", "",
                  f"    {exp['command']}", "",
                  "| collective | transfers | network model's share | left over per transfer (µs, mean) |",
                  "|---|---:|---:|---:|"]
        for kind, res in exp["fit"]["residuals"].items():
            lines.append(f"| {kind} | {res['count']} | {res['model_share_pct']:.0f}% | "
                         f"{res['mean_us']:,.1f} |")
    lines += [
        "",
        f"Largest |error|: {_fmt2(summary['abs_error_pct_max'])}%; mean |error|: "
        f"{_fmt2(summary['abs_error_pct_mean'])}%.",
        "",
        "Files (per rank N): " + ", ".join(f"`{v}`" for v in summary["files"].values()) + ".",
        "",
    ]
    return "\n".join(lines)



def job_table(result: PipelineResult, title: str | None = None) -> Any:
    """The whole-job replay as a rich Table: per rank where it starts on the job's clock, its times and how
    long its collectives waited for their peers; a last row for the job (first start to last end)."""
    from rich.table import Table

    whole = result.summary["whole_job"]
    table = Table(title=title or f"{result.name}: whole job replayed (collectives coupled, mode "
                  f"{result.mode})")
    simulated = any("simulated_us" in r for r in result.summary["ranks"])
    for col in ("rank", "nodes", "starts at (µs)", "measured (µs)", "replayed (µs)", "error",
                *(("ASTRA-sim (µs)", "ASTRA-sim error") if simulated else ()), "comm wait (µs)",
                "wait share"):
        table.add_column(col, justify="right")
    offsets = whole["start_offsets_us"]
    for r in result.summary["ranks"]:
        err, wait, rep = r["error_pct"], r["comm_wait_us"], r["replayed_us"]
        style = None if err is None or abs(err) <= 5.0 else "yellow"
        share = fmt_pct(100.0 * wait / rep).lstrip("+") if wait is not None and rep else "-"
        sim = (fmt_us(r.get("simulated_us")), fmt_pct(simulated_error(r))) if simulated else ()
        table.add_row(str(r["rank"]), f"{r['nodes']:,}", fmt_us(offsets.get(str(r["rank"]))),
                      fmt_us(r["measured_us"]), fmt_us(rep), fmt_pct(err), *sim, fmt_us(wait), share,
                      style=style)
    table.add_section()
    sim_job = (fmt_us(max((r.get("simulated_us") or 0.0) for r in result.summary["ranks"])), "") \
        if simulated else ()
    table.add_row("job", f"{sum(r['nodes'] for r in result.summary['ranks']):,}", fmt_us(0.0),
                  fmt_us(whole["measured_us"]), fmt_us(whole["replayed_us"]), fmt_pct(whole["error_pct"]),
                  *sim_job, fmt_us(whole["comm_wait_us"]), "", style="bold")
    table.caption = (f"job: first rank's start to last rank's end; {whole['matched_comm_groups']} "
                     "collectives and send/recv pairs matched across ranks; comm wait: time a collective "
                     "waited for its peers (the job's: summed over its ranks)")
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
        table.add_column("ASTRA-sim error", justify="right")
    table.add_column("host ops matched", justify="right")
    table.add_column("GPU ops attached", justify="right")
    for r in result.summary["ranks"]:
        err = r["error_pct"]
        style = None if err is None or abs(err) <= 5.0 else "yellow"
        cells = [str(r["rank"]), f"{r['nodes']:,}", fmt_us(r["measured_us"]), fmt_us(r["replayed_us"]),
                 fmt_pct(err)]
        if simulated:
            cells += [fmt_us(r.get("simulated_us")), fmt_pct(simulated_error(r))]
        cells += [f"{r['host_ops_matched']:,}/{r['host_ops']:,}", _attached(r, short=True)]
        table.add_row(*cells, style=style)
    if any(r.get("gpu_launched_before_trace") for r in result.summary["ranks"]):
        table.caption = ("pre-trace: GPU ops launched before the trace began (no launch call, no host op), "
                         "run on their streams where they were recorded")
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
    notes = (overrun_note(r["rank"], r["measured_us"], r.get("recorded_end_us"), r["replayed_us"])
             for r in summary["ranks"])
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


