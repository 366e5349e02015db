"""What a replay produces for people and scripts: completion logs, a Perfetto timeline, a table."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from chakra.errors import TraceFormatError
from chakra.io import atomic_output, dump_json, read_bytes
from chakra.replay.api import ReplayResult
from chakra.replay.graph import COMM_STREAM
from chakra.replay.modes import CollectiveRule, Missing, Mode, UnknownGroup
from chakra.schema import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, METADATA_NODE

COMPLETION_RE = re.compile(r"Node ID (\d+) completed at (\d+)us")


def write_completion_log(path: str | os.PathLike[str], results: Iterable[ReplayResult]) -> int:
    """Write the per-node completion lines of every result (atomically); return the line count."""
    count = 0
    with atomic_output(path) as fh:
        for res in results:
            chunk = []
            for line in res.completion_lines():
                chunk.append(line)
            count += len(chunk)
            if chunk:
                fh.write(("\n".join(chunk) + "\n").encode())
    return count


def read_completion_time(path: str | os.PathLike[str]) -> int:
    """The latest ``Node ID N completed at Tus`` time in a completion log (what the harness checks)."""
    text = read_bytes(path).decode(errors="replace")
    best = -1
    for m in COMPLETION_RE.finditer(text):
        t = int(m.group(2))
        if t > best:
            best = t
    if best < 0:
        raise TraceFormatError("no 'Node ID <id> completed at <T>us' line", path)
    return best


def _lane_sort_key(lane: Any) -> tuple:
    if lane[0] == "cpu":
        return (0, lane[1], 0)
    return (1, lane[1], lane[2])


def _lane_name(lane: Any) -> str:
    if lane[0] == "cpu":
        return f"CPU thread {lane[1]}"
    if lane[2] == COMM_STREAM:
        return f"GPU {lane[1]} communication"      # (nodes that say nothing of where they ran)
    return f"GPU {lane[1]} stream {lane[2]}"


def _category(ntype: int, is_cpu: bool) -> str:
    if ntype == COMM_COLL_NODE:
        return "collective"
    if ntype in (COMM_SEND_NODE, COMM_RECV_NODE):
        return "p2p"
    return "cpu_op" if is_cpu else "kernel"


def _display_ends(res: ReplayResult) -> list[float]:
    """A CPU parent op is drawn until its last descendant ends, so the slices nest as recorded.

    (The replay gives a parent only its leading exclusive segment; its children follow it.)
    Children start no earlier than their parent, so walking nodes by decreasing replayed
    start visits every child before its parent: one sort, no recursion.
    """
    g = res.graph
    ends = list(res.ends)
    for i, c in res.closes.items():       # thread timing: a parent ends when its tail does
        if c > ends[i]:
            ends[i] = c
    if not g.ctrl_parent:
        return ends
    index = {nid: i for i, nid in enumerate(g.ids)}
    lanes = g.lanes
    for i in sorted(range(len(g.ids)), key=lambda i: (res.starts[i], g.ids[i]), reverse=True):
        p = g.ctrl_parent.get(g.ids[i])
        if p is None:
            continue
        j = index.get(p)
        if j is not None and lanes[j] == lanes[i] and ends[i] > ends[j]:
            ends[j] = ends[i]
    return ends


def timeline(results: Iterable[ReplayResult]) -> dict[str, Any]:
    """Chrome/Perfetto trace of the replayed timeline: a process per rank, a track per thread/stream.

    Whole-job results are drawn on the job's common clock, so a collective lines up across ranks.
    """
    events: list[dict[str, Any]] = []
    for pos, res in enumerate(results):
        g = res.graph
        pid = g.rank if g.rank is not None else pos
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"rank {pid} (replayed)"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
        lanes = sorted({lane for lane in g.lanes if lane is not None}, key=_lane_sort_key)
        tids = {lane: k + 1 for k, lane in enumerate(lanes)}
        for lane, tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": _lane_name(lane)}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
        ends = _display_ends(res)
        for i, nid in enumerate(g.ids):
            ntype = g.types[i]
            if ntype == METADATA_NODE:
                continue
            s, e = res.starts[i] + res.clock_offset, ends[i] + res.clock_offset
            args: dict[str, Any] = {"node_id": nid, "recorded_start_us": g.starts[i],
                                    "recorded_dur_us": g.durations[i]}
            wait = res.comm_wait.get(nid)
            if wait is not None:
                args["wait_us"] = wait
            events.append({"ph": "X", "name": g.names[i], "cat": _category(ntype, g.is_cpu[i]),
                           "pid": pid, "tid": tids[g.lanes[i]], "ts": s, "dur": e - s, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "chakra replay"}}


def write_timeline(path: str | os.PathLike[str], results: Iterable[ReplayResult]) -> None:
    dump_json(path, timeline(results))


def fmt_us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2f}%"


RUN_ON_MARK = "*"   # an error cell whose reference is the recorded end of the window's work, not its end


def fmt_error(pct: float | None, ran_on: bool = False) -> str:
    """An error cell: the percentage, marked when it is against the recorded end of the window's work."""
    return fmt_pct(pct) + (RUN_ON_MARK if ran_on and pct is not None else "")


def measured_table(title: str, rows: Iterable[tuple[list[str], str | None]], extra: Sequence[str] = (),
                   replayed: str = "replayed (µs)", diff: str = "error") -> Any:
    """The measured-vs-replayed table, per rank (``chakra replay`` and ``chakra pipeline`` print it): rank,
    nodes, measured and replayed µs and their difference (:func:`measured_cells`), then the ``extra``
    columns; ``rows``: each row's cells and style.  ``replayed`` / ``diff`` name the replay's and the
    difference's columns (a what-if's are a prediction and a change)."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("rank", "nodes", "measured (µs)", replayed, diff, *extra):
        table.add_column(col, justify="right")
    for cells, style in rows:
        table.add_row(*cells, style=style)
    return table


def measured_cells(rank: Any, nodes: int, measured_us: float | None, replayed_us: float | None,
                   diff: str) -> list[str]:
    """The first cells of a :func:`measured_table` row."""
    return ["-" if rank is None else str(rank), f"{nodes:,}", fmt_us(measured_us), fmt_us(replayed_us), diff]


def results_table(results: Iterable[ReplayResult], title: str = "Replay") -> Any:
    """The :func:`measured_table` of a replay: each rank's time waiting for its peers last (a whole job)."""
    return measured_table(title, ((measured_cells(res.rank, res.num_nodes, res.measured_us, res.replayed_us,
                                                  fmt_error(res.error_pct, res.ran_on))
                                   + [fmt_us(res.total_wait_us) if res.job else "-"], None)
                                  for res in results), extra=("comm wait (µs)",))


def job_error(times: dict[str, Any]) -> str:
    """The whole job's error (:meth:`chakra.replay.api.JobResult.times`), naming its reference when that is
    the recorded end of the ranks' work rather than their windows'."""
    if times.get("error_reference") != "recorded_end":
        return fmt_pct(times["error_pct"])
    return (f"{fmt_error(times['error_pct'], True)} against the recorded end of the work started in the "
            f"windows, {fmt_us(times['reference_us'])} µs; {fmt_pct(times['window_error_pct'])} against the "
            "windows")


def overrun_note(rank: Any, measured_us: float | None, recorded_end_us: float | None,
                 replayed_us: float | None, run_on: dict[str, str] | None = None, diff: str = "error"
                 ) -> str | None:
    """A line when a rank's recorded ops ran on after its measured window (by more than 1 %,
    :func:`chakra.replay.api.error_reference`): its error is then against when that work ended, and the line
    says so, what ran on (``run_on``: :meth:`chakra.replay.api.ReplayResult.run_on`) and the error against
    the window's end (``diff``: what the table calls the difference, "error" or a what-if's "change")."""
    from chakra.replay.api import error_reference

    m, end = measured_us, recorded_end_us
    if replayed_us is None or not error_reference(m, end)[1]:
        return None
    assert m and end is not None
    who = f"rank {'-' if rank is None else rank}"
    work = (run_on or {}).get("work", "GPU")
    if work == "GPU":
        what = f"the window's GPU work ran until {fmt_us(end)} µs, {fmt_us(end - m)} µs after the measured " \
               "window (the CPU ran ahead of the GPU)"
    else:
        assert run_on is not None
        what = (f"{work} work started in the window ran until {fmt_us(end)} µs, {fmt_us(end - m)} µs after "
                f"the measured window ({run_on['last_op']} on {run_on['lane']} ended last)")
    return (f"{RUN_ON_MARK} {who}: {what}; the replay runs that work to its end, so its {diff} is against "
            f"that end; against the window's end it is {fmt_pct(100.0 * (replayed_us - m) / m)}")


def replay_report(paths: list[str], *, job: bool = False, mode: Mode = "lanes", gaps: bool = True,
                  align: bool = True, collective: CollectiveRule = "auto", missing: Missing = "error",
                  timeline_path: str | None = None,
                  log_path: str | None = None, as_json: bool = False, stream: Any = None,
                  comm_groups: str | None = None, unknown_group: UnknownGroup = "error", whatif: Any = None,
                  allow_missing_ranks: bool = False, progress: bool = False) -> int:
    """What ``chakra replay`` does: replay, write the requested files, print a table (or JSON).

    With a what-if (:class:`chakra.replay.whatif.WhatIf`), the files are replayed as recorded and
    with the change, and the table says, per rank, the recorded step, the replay as recorded, the
    predicted step and what moved on the critical path; the log and timeline are the prediction's."""
    import sys

    import orjson

    from chakra.replay.api import load_job, replay_job
    from chakra.replay.progress import job_steps

    out = stream if stream is not None else sys.stdout
    if (comm_groups or unknown_group != "error") and not job:
        from chakra.errors import UsageError

        raise UsageError("--comm-group and --unknown-group are for the whole-job replay: add --job")
    if whatif is not None and not whatif.empty:
        from dataclasses import replace
        from functools import partial

        from chakra.replay.whatif import WhatIf

        graphs = load_job(paths)
        # keep_plan: the report walks each rank's critical path
        again = partial(replay_job, graphs, mode=mode, gaps=gaps, missing=missing, couple=job, align=align,
                        collective=collective, keep_plan=True)
        if job:
            again = partial(again, comm_groups=comm_groups, unknown_group=unknown_group,
                            allow_missing_ranks=allow_missing_ranks)
        with job_steps(progress and job) as steps:
            base = again(whatif=WhatIf(model=whatif.model), steps=steps)
            if base.whatif is not None and base.whatif.model is not None:   # one model for both (fitted once)
                whatif = replace(whatif, model=base.whatif.model)
            result = again(whatif=whatif, steps=steps)
        return _whatif_output(base, result, whatif, out, as_json, log_path, timeline_path)
    with job_steps(progress and job) as steps:   # (bars: a whole job on a terminal)
        result = replay_job(paths, mode=mode, gaps=gaps, missing=missing, couple=job, align=align,
                            collective=collective, comm_groups=comm_groups, unknown_group=unknown_group,
                            whatif=whatif, allow_missing_ranks=allow_missing_ranks,   # (no change asked: at
                            steps=steps)                                             # most the comm model)
    if log_path:
        write_completion_log(log_path, result)
    if timeline_path:
        write_timeline(timeline_path, result)
    if as_json:
        out.write(orjson.dumps(result.summary(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    from rich.console import Console

    how = "whole job" if job else "per rank"
    title = f"Replay ({how}, mode {mode}, {'with' if result.gaps else 'no'} gaps)"
    console = Console(file=out, width=110)
    console.print(results_table(result, title=title))
    for res in result:
        note = overrun_note(res.rank, res.measured_us, res.recorded_end_us, res.replayed_us, res.run_on())
        if note:
            console.print(note)
    for line in result.whatif.lines() if result.whatif is not None else ():
        console.print(line)
    if job:
        t = result.times()
        console.print(f"matched communication groups: {result.groups}; job (first rank's start to last "
                      f"rank's end): measured {fmt_us(t['measured_us'])} µs, replayed "
                      f"{fmt_us(t['replayed_us'])} µs ({job_error(t)})")
        console.print(result.collective_note)
    return 0


def whatif_summary(base: Any, pred: Any, paths: dict[Any, tuple[Any, Any]] | None = None) -> dict[str, Any]:
    """Per rank: recorded step, replay as recorded, prediction, and the critical path before/after.

    ``paths``: when given (empty), filled with each rank's (before, after) critical paths, for the caller
    to describe without walking them again (a walk rebuilds the rank's plan)."""
    from chakra.replay.critical import compare_paths, critical_path

    ranks = []
    for res in pred:
        b = base.ranks[res.rank]
        before, after = critical_path(b), critical_path(res)
        if paths is not None:
            paths[res.rank] = (before, after)
        cmp = compare_paths(before, after)
        ranks.append({
            "rank": res.rank, "measured_us": res.measured_us, "replayed_us": b.replayed_us,
            "predicted_us": res.replayed_us,
            "change_pct": (100.0 * (res.replayed_us - b.replayed_us) / b.replayed_us
                           if b.replayed_us else None),
            "critical_path_us": [before.total_us, after.total_us],
            "critical_path_by_category": {k: list(v) for k, v in cmp["categories"].items()},
            "moved_most": [{"name": k, "delta_us": d} for k, d in cmp["moved"]],
        })
    return {"job": pred.coupled, "mode": pred.mode, "gaps": pred.gaps,
            **({"collective": pred.collective, "collective_rule": pred.collective_note}
               if pred.collective is not None else {}),
            "whatif_applied": pred.whatif.lines() if pred.whatif is not None else [], "ranks": ranks}


def _whatif_output(base: Any, pred: Any, whatif: Any, out: Any, as_json: bool, log_path: str | None,
                   timeline_path: str | None) -> int:
    import orjson
    from rich.console import Console
    from rich.table import Table

    from chakra.replay.critical import describe_change

    if log_path:
        write_completion_log(log_path, pred)
    if timeline_path:
        write_timeline(timeline_path, pred)
    paths: dict[Any, tuple[Any, Any]] = {}
    summary = whatif_summary(base, pred, paths)
    if as_json:
        out.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console = Console(file=out, width=130)
    how = "whole job" if pred.coupled else "per rank"
    table = Table(title=f"What-if ({how}): {'; '.join(whatif.describe())}")
    for col in ("rank", "measured (µs)", "replayed as recorded (µs)", "predicted (µs)", "change"):
        table.add_column(col, justify="right")
    for r in summary["ranks"]:
        table.add_row(str(r["rank"]), fmt_us(r["measured_us"]), fmt_us(r["replayed_us"]),
                      fmt_us(r["predicted_us"]), fmt_pct(r["change_pct"]))
    console.print(table)
    for line in summary["whatif_applied"]:
        console.print(f"  {line}")
    if pred.collective_note:
        console.print(f"  {pred.collective_note}")
    for res in pred:
        for line in describe_change(*paths[res.rank]):
            console.print(f"  rank {res.rank}: {line}")
    return 0
