"""Simulator log (issue/callback rows) -> Chrome trace JSON that Perfetto and chrome://tracing open.

Input rows (the README's "The timeline visualizer's input" has the format with an example), anywhere on a
line, so log prefixes such as ``[time] [info]`` are fine::

    issue,sys->id=0,tick=1000,node->id=5,node->name=aten::mm
    callback,sys->id=0,tick=3500,node->id=5,node->name=aten::mm

The values are taken by position: NPU id, current cycle, node id, node name (the key names vary between
simulator versions and are not checked).  The node name is everything after the last ``=``-key, so it may
hold commas.  Other lines are skipped.

Pairing: an issue is closed by the next callback of the same (NPU, node id); a callback without an open
issue and an issue never called back are counted and logged, and produce no event.

Units: ``npu_frequency`` is in MHz, so ``cycles / npu_frequency`` is in microseconds, Chrome's ``ts``/``dur``
unit.  With ``--npu_frequency 1000`` one cycle is one nanosecond, which is how ASTRA-sim counts its ticks;
give the NPU's real clock in MHz when the simulator counted real cycles.

Output: one process per NPU (``pid`` = NPU id, named ``NPU n``, all ``num_npus`` listed even when idle) and,
inside it, as many lanes (``tid``) as there are overlapping nodes: each node goes to the lowest-numbered lane
free at its start (one sorted sweep with two heaps per NPU).
"""

from __future__ import annotations

import heapq
import logging
import os
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chakra.errors import TraceFormatError, UsageError
from chakra.io import dump_json, read_bytes

log = logging.getLogger("chakra.timeline")

_ROW = re.compile(
    r"(?P<kind>issue|callback)\s*,\s*[^,=]*=\s*(?P<npu>-?\d+)\s*,\s*[^,=]*=\s*(?P<cycle>\d+)\s*,"
    r"\s*[^,=]*=\s*(?P<node>\d+)\s*,\s*[^,=]*=(?P<name>.*)$"
)
_LOOKS_LIKE_ROW = re.compile(r"(?:^|[\s\]])(?:issue|callback)\s*,")


@dataclass(slots=True)
class SimRecord:
    kind: str        # "issue" or "callback"
    npu: int
    cycle: int
    node_id: int
    name: str
    line: int        # 1-based line number in the log


@dataclass(slots=True)
class Interval:
    npu: int
    node_id: int
    name: str
    issue: int       # cycles
    callback: int
    lane: int = 0


def parse_sim_log(text: str, path: str | os.PathLike[str] | None = None) -> list[SimRecord]:
    """Every issue/callback row of the log, in file order."""
    out: list[SimRecord] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _ROW.search(line)
        if m is None:
            if _LOOKS_LIKE_ROW.search(line):
                raise TraceFormatError(
                    f"line {lineno}: expected 'issue|callback,<key>=npu_id,<key>=cycle,<key>=node_id,"
                    f"<key>=node_name', got {line.strip()[:120]!r}", path)
            continue
        out.append(SimRecord(m["kind"], int(m["npu"]), int(m["cycle"]), int(m["node"]), m["name"].strip(),
                             lineno))
    return out


def pair_events(records: Iterable[SimRecord], path: str | os.PathLike[str] | None = None
                ) -> tuple[list[Interval], dict[str, int]]:
    """Match each callback with the earliest open issue of the same (NPU, node id)."""
    open_issues: dict[tuple[int, int], deque[SimRecord]] = {}
    intervals: list[Interval] = []
    unmatched_callbacks = 0
    for r in records:
        key = (r.npu, r.node_id)
        if r.kind == "issue":
            open_issues.setdefault(key, deque()).append(r)
            continue
        queue = open_issues.get(key)
        if not queue:
            unmatched_callbacks += 1
            log.warning("line %d: callback of node %d on NPU %d without an issue; skipped", r.line, r.node_id,
                        r.npu)
            continue
        start = queue.popleft()
        if r.cycle < start.cycle:
            raise TraceFormatError(f"line {r.line}: callback of node {r.node_id} on NPU {r.npu} at cycle "
                                   f"{r.cycle} precedes its issue at cycle {start.cycle} (line {start.line})",
                                   path)
        intervals.append(Interval(r.npu, r.node_id, start.name or r.name, start.cycle, r.cycle))
    unfinished = sum(len(q) for q in open_issues.values())
    if unfinished:
        log.warning("%d issued nodes were never called back; they are left out of the timeline", unfinished)
    return intervals, {"events": len(intervals), "unmatched_callbacks": unmatched_callbacks,
                       "unfinished_issues": unfinished}


def assign_lanes(intervals: list[Interval]) -> int:
    """Give every interval the lowest free lane of its NPU; return the largest lane count of any NPU."""
    by_npu: dict[int, list[Interval]] = {}
    for iv in intervals:
        by_npu.setdefault(iv.npu, []).append(iv)
    most = 0
    for ivs in by_npu.values():
        ivs.sort(key=lambda iv: (iv.issue, iv.callback, iv.node_id))
        busy: list[tuple[int, int]] = []   # (end cycle, lane)
        free: list[int] = []
        lanes = 0
        for iv in ivs:
            while busy and busy[0][0] <= iv.issue:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane = lanes
                lanes += 1
            iv.lane = lane
            heapq.heappush(busy, (iv.callback, lane))
        most = max(most, lanes)
    return most


def build_chrome_trace(intervals: list[Interval], num_npus: int, npu_frequency: float,
                       extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Chrome trace JSON object: metadata events, then one complete (``X``) event per interval."""
    assign_lanes(intervals)
    events: list[dict[str, Any]] = []
    lanes_used: dict[int, set[int]] = {}
    for iv in intervals:
        lanes_used.setdefault(iv.npu, set()).add(iv.lane)
    for npu in range(num_npus):
        events.append({"ph": "M", "name": "process_name", "pid": npu, "tid": 0,
                       "args": {"name": f"NPU {npu}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": npu, "tid": 0,
                       "args": {"sort_index": npu}})
        for lane in sorted(lanes_used.get(npu, ())):
            events.append({"ph": "M", "name": "thread_name", "pid": npu, "tid": lane,
                           "args": {"name": f"lane {lane}"}})
    for iv in sorted(intervals, key=lambda iv: (iv.npu, iv.issue, iv.lane, iv.node_id)):
        events.append({
            "ph": "X", "cat": "node", "name": iv.name or f"node {iv.node_id}", "pid": iv.npu, "tid": iv.lane,
            "ts": iv.issue / npu_frequency, "dur": (iv.callback - iv.issue) / npu_frequency,
            "args": {"node_id": iv.node_id, "issue_cycle": iv.issue, "callback_cycle": iv.callback},
        })
    other = {"num_npus": num_npus, "npu_frequency_mhz": npu_frequency, "time_unit": "us"}
    other.update(extra or {})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def convert_timeline(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str],
                     num_npus: int, npu_frequency: float) -> dict[str, Any]:
    """What the CLI calls: read the log, check NPU ids, write the trace atomically; returns the counts."""
    if num_npus < 1:
        raise UsageError("--num_npus must be at least 1")
    if not npu_frequency > 0:
        raise UsageError("--npu_frequency must be a positive number of MHz")
    text = read_bytes(input_path).decode("utf-8", errors="replace")
    records = parse_sim_log(text, input_path)
    if not records:
        raise TraceFormatError("no issue/callback rows found (a simulator log with a row per node issued and "
                               "completed; for a timeline of a Chakra ET: chakra replay ET --timeline "
                               "OUT.json)", input_path)
    for r in records:
        if not 0 <= r.npu < num_npus:
            raise TraceFormatError(f"line {r.line}: NPU id {r.npu} is outside 0..{num_npus - 1} "
                                   f"(--num_npus {num_npus})", input_path)
    intervals, counts = pair_events(records, input_path)
    extra = {"source": os.fspath(input_path), **counts}
    trace = build_chrome_trace(intervals, num_npus, npu_frequency, extra)
    dump_json(output_path, trace)
    counts["lanes"] = max((iv.lane + 1 for iv in intervals), default=0)
    return counts
