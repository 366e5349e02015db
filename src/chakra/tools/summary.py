"""``chakra summary``: what a host ET or a Kineto trace holds, at a glance.

The file kind is told by its content (``nodes`` -> host ET, ``traceEvents`` ->
Kineto), so a user need not say which is which; the file is parsed once.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from chakra.device import model as dm
from chakra.device.loader import build_kineto_trace, measured_window
from chakra.errors import TraceFormatError
from chakra.host.loader import build_host_trace
from chakra.host.model import METADATA, OP, THREAD_ROOT
from chakra.io import gc_paused, load_json

_KIND_NAMES = {
    dm.HOST_OP: "host_op", dm.ANNOTATION: "annotation", dm.RUNTIME: "runtime", dm.LAUNCH: "launch",
    dm.SYNC: "sync", dm.DRIVER: "driver", dm.KERNEL: "kernel", dm.MEMCPY: "memcpy",
    dm.MEMSET: "memset", dm.FLOW: "flow", dm.OTHER: "other",
}


def summarize(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON-ready summary of one host ET or Kineto trace."""
    spath = os.fspath(path)
    with gc_paused():
        data = load_json(spath)
        if "nodes" in data:
            return _host_summary(build_host_trace(data, spath))
        if "traceEvents" in data:
            return _kineto_summary(build_kineto_trace(data, spath))
    raise TraceFormatError("neither a host ET ('nodes') nor a Kineto trace ('traceEvents')", spath)


def _host_summary(trace: Any) -> dict[str, Any]:
    kinds = Counter(op.kind for op in trace.ops)
    ops = [op for op in trace.ops if op.kind == OP]
    comm = Counter(op.name for op in ops if op.is_comm)
    return {
        "file": trace.path,
        "kind": "host_et",
        "schema": trace.schema,
        "layout": trace.layout,
        "pid": trace.pid,
        "nodes": len(trace.ops),
        "operators": kinds.get(OP, 0),
        "threads": sorted({op.tid for op in trace.ops if op.kind == THREAD_ROOT}),
        "metadata_nodes": kinds.get(METADATA, 0),
        "process_groups": [
            {"pg_name": g.pg_name, "pg_desc": g.pg_desc, "backend": g.backend, "ranks": list(g.ranks)}
            for g in trace.process_groups
        ],
        "comm_ops": dict(sorted(comm.items())),
        "top_ops": Counter(op.name for op in ops).most_common(5),
        "warnings": list(trace.warnings),
    }


def _kineto_summary(trace: Any) -> dict[str, Any]:
    kinds = Counter(_KIND_NAMES.get(e.kind, "other") for e in trace.events)
    window, start, dur = measured_window(trace)
    gpu_time = sum(e.dur for e in trace.events if e.kind in dm.GPU_KINDS)
    return {
        "file": trace.path,
        "kind": "kineto",
        "rank": trace.rank,
        "world_size": trace.world_size,
        "backend": trace.backend,
        "events": len(trace.events),
        "events_by_kind": dict(sorted(kinds.items())),
        "cpu_threads": len({(e.pid, e.tid) for e in trace.events if e.kind in dm.CPU_KINDS}),
        "gpu_streams": sorted({e.stream for e in trace.events if e.kind in dm.GPU_KINDS
                               and e.stream is not None}),
        "steps": [{"name": s.name, "ts": s.ts, "dur": s.dur} for s in trace.steps],
        "measured": {"window": window, "start_us": start, "dur_us": dur},
        "gpu_busy_us": gpu_time,
        "warnings": list(trace.warnings),
    }


def render(summaries: list[dict[str, Any]]) -> None:
    """Print summaries as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for s in summaries:
        table = Table(title=f"{s['file']} ({s['kind']})", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        for key, value in s.items():
            if key in ("file", "kind"):
                continue
            if isinstance(value, list) and value and isinstance(value[0], dict):
                value = "\n".join(", ".join(f"{k}={v}" for k, v in item.items()) for item in value)
            elif isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            table.add_row(key, str(value))
        console.print(table)
