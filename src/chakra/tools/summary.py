"""``chakra summary``: what a host ET, a Kineto trace or a Chakra protobuf ET holds, at a glance.

The file kind is told by its content, not its name: JSON with ``nodes`` is a host ET, JSON with
``traceEvents`` a Kineto trace, anything else is read as a length-delimited Chakra ET (``.et``, gzipped or
not).  :func:`summarize` returns a JSON-ready dict (``--json`` prints it); :func:`render_lines` turns it
into plain sentences for a person: numbers rounded and grouped (``14,455 us``), lists written out, no
Python reprs and no ``None`` (an unknown value says "unknown").  Each summary ends with ``warning:`` lines,
among them one when no ProfilerStep annotation bounds a Kineto trace's window (the measured time is then
the span of every event, which includes whatever ran around the steps).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

from chakra import formats as wire
from chakra import schema as pb
from chakra.device import model as dm
from chakra.device.loader import build_kineto_trace, load_kineto, measured_window
from chakra.errors import TraceFormatError
from chakra.host.loader import build_host_trace
from chakra.host.model import METADATA, OP, THREAD_ROOT
from chakra.io import gc_paused, iter_messages, load_json
from chakra.io.jsonio import GZIP_MAGIC, open_input, trace_kind

_KIND_NAMES = {
    dm.HOST_OP: "host_op", dm.ANNOTATION: "annotation", dm.RUNTIME: "runtime", dm.LAUNCH: "launch",
    dm.SYNC: "sync", dm.DRIVER: "driver", dm.KERNEL: "kernel", dm.MEMCPY: "memcpy",
    dm.MEMSET: "memset", dm.FLOW: "flow", dm.OTHER: "other",
}
_NODE_TYPES = {v: k for k, v in vars(pb).items() if k.endswith("_NODE") and isinstance(v, int)}
_COLL_TYPES = {pb.ALL_REDUCE: "ALL_REDUCE", pb.REDUCE: "REDUCE", pb.ALL_GATHER: "ALL_GATHER",
               pb.GATHER: "GATHER", pb.SCATTER: "SCATTER", pb.BROADCAST: "BROADCAST",
               pb.ALL_TO_ALL: "ALL_TO_ALL", pb.REDUCE_SCATTER: "REDUCE_SCATTER",
               pb.REDUCE_SCATTER_BLOCK: "REDUCE_SCATTER_BLOCK", pb.BARRIER: "BARRIER"}
_SIMULATED = {"ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "BROADCAST"}


def summarize(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON-ready summary of one host ET, Kineto trace or Chakra protobuf ET."""
    spath = os.fspath(path)
    if not _looks_like_json(spath):
        try:
            return _et_summary(spath)
        except TraceFormatError as et_error:
            # not a well-formed length-delimited stream either: say what each reading found
            try:
                return _json_summary(spath)
            except TraceFormatError as json_error:
                raise TraceFormatError(f"neither JSON ({json_error.message}) nor a Chakra protobuf ET "
                                       f"({et_error.message})", spath) from None
    return _json_summary(spath)


def _json_summary(spath: str) -> dict[str, Any]:
    with gc_paused():
        if trace_kind(spath) == "kineto":  # read by the Kineto loader's own decoder, not parsed twice
            return _kineto_summary(load_kineto(spath))
        data = load_json(spath)
        if isinstance(data, dict) and "nodes" in data:
            return _host_summary(build_host_trace(data, spath))
        if isinstance(data, dict) and "traceEvents" in data:
            return _kineto_summary(build_kineto_trace(data, spath))
    raise TraceFormatError("neither a host ET ('nodes') nor a Kineto trace ('traceEvents')", spath)


def _looks_like_json(path: str) -> bool:
    """First non-blank byte (after gunzip) is ``{`` or ``[``.  Unreadable gzip goes to the JSON loader,
    whose error names the problem."""
    with open_input(path) as fh:
        head = fh.read(2)
        if head == GZIP_MAGIC:
            fh.seek(0)
            try:
                head = gzip.GzipFile(fileobj=fh).read(256)
            except (EOFError, OSError, zlib.error):
                return True
        else:
            head += fh.read(254)
    if not head.strip():
        raise TraceFormatError("file is empty", path)
    return head.lstrip()[:1] in (b"{", b"[")


# ---- host ET / Kineto -------------------------------------------------------------------------------------


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


def device_names(trace: Any) -> list[str]:
    """The GPUs this trace ran on, from ``deviceProperties``: those whose id its GPU events name (all of
    them when no event names one), one name per distinct model, counted (``8 x Tesla V100-SXM2-32GB``)."""
    props = [p for p in trace.device_properties if isinstance(p, dict)]
    used = {e.device for e in trace.events if e.kind in dm.GPU_KINDS and e.device is not None}
    chosen = [p for p in props if p.get("id") in used] or props
    names = Counter(str(p.get("name") or "unnamed device") for p in chosen)
    return [name if n == 1 else f"{n} x {name}" for name, n in names.items()]


def _kineto_summary(trace: Any) -> dict[str, Any]:
    kinds = Counter(_KIND_NAMES.get(e.kind, "other") for e in trace.events)
    window, start, dur = measured_window(trace)
    gpu_time = sum(e.dur for e in trace.events if e.kind in dm.GPU_KINDS)
    warnings = list(trace.warnings)
    if not trace.steps:
        warnings.append(f"no ProfilerStep annotation bounds the window: the measured time ({_us(dur)}) is "
                        "the span of all events, idle time around the profiled work included")
    return {
        "file": trace.path,
        "kind": "kineto",
        "device": device_names(trace),
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
        "warnings": warnings,
    }


# ---- Chakra protobuf ET -----------------------------------------------------------------------------------


def _et_summary(path: str) -> dict[str, Any]:
    meta, nodes = iter_messages(path, pb.GlobalMetadata, pb.Node)
    if meta is None:
        raise TraceFormatError("file is empty", path)
    by_type: Counter[str] = Counter()
    comp = {"gpu": [0, 0], "cpu": [0, 0], "unset": [0, 0]}     # count, duration_micros
    colls: dict[str, list[int]] = {}                           # type -> [count, bytes]
    no_type = cpu_comm = 0
    pgs: set[str] = set()
    ids: set[int] = set()
    deps: list[int] = []
    n_data = n_ctrl = 0
    t_lo, t_hi = None, None
    for node in nodes:
        ids.add(node.id)
        tname = _NODE_TYPES.get(node.type, f"type {node.type}")
        by_type[tname] += 1
        deps.extend(node.data_deps)
        deps.extend(node.ctrl_deps)
        n_data += len(node.data_deps)
        n_ctrl += len(node.ctrl_deps)
        if node.start_time_micros:
            end = node.start_time_micros + node.duration_micros
            t_lo = node.start_time_micros if t_lo is None else min(t_lo, node.start_time_micros)
            t_hi = end if t_hi is None else max(t_hi, end)
        attrs = {a.name: a for a in node.attr}
        cpu = attrs.get(wire.ATTR_IS_CPU_OP)
        if node.type == pb.COMP_NODE:
            slot = comp["unset" if cpu is None else "cpu" if pb.attr_value(cpu) else "gpu"]
            slot[0] += 1
            slot[1] += node.duration_micros
        elif node.type == pb.COMM_COLL_NODE:
            ctype = attrs.get(wire.ATTR_COMM_TYPE)
            if ctype is None:
                no_type += 1
            else:
                name = _COLL_TYPES.get(pb.attr_value(ctype), f"type {pb.attr_value(ctype)}")
                entry = colls.setdefault(name, [0, 0])
                entry[0] += 1
                size = attrs.get(wire.ATTR_COMM_SIZE)
                entry[1] += int(pb.attr_value(size) or 0) if size is not None else 0
            if cpu is not None and pb.attr_value(cpu):
                cpu_comm += 1
            pg = attrs.get(wire.ATTR_PG_NAME)
            pgs.add(str(pb.attr_value(pg)) if pg is not None else "")
    dangling = sum(1 for d in deps if d not in ids)
    md = {a.name: pb.attr_value(a) for a in meta.attr}
    warnings = []
    if by_type.get("METADATA_NODE"):
        warnings.append(f"{_n(by_type['METADATA_NODE'], 'METADATA node')}: ASTRA-sim aborts on them")
    if dangling:
        warnings.append(f"{_n(dangling, 'dependency')} on ids that are not in the file: ASTRA-sim aborts"
                        .replace("dependencys", "dependencies"))
    if cpu_comm:
        warnings.append(f"{_n(cpu_comm, 'collective')} marked is_cpu_op: ASTRA-sim rejects them")
    if no_type:
        warnings.append(f"{_n(no_type, 'collective')} without a comm_type attribute")
    unsimulated = sorted(t for t in colls if t not in _SIMULATED)
    if unsimulated:
        warnings.append(f"collectives ASTRA-sim does not run: {', '.join(unsimulated)}")
    return {
        "file": path,
        "kind": "chakra_et",
        "version": meta.version,
        "metadata": {k: v for k, v in md.items() if isinstance(v, (str, int, float, bool))},
        "nodes": sum(by_type.values()),
        "nodes_by_type": dict(sorted(by_type.items())),
        "compute": {k: {"nodes": v[0], "duration_us": v[1]} for k, v in comp.items() if v[0]},
        "collectives": {k: {"nodes": v[0], "bytes": v[1]} for k, v in sorted(colls.items())},
        "process_groups": sorted(pgs),
        "data_deps": n_data,
        "ctrl_deps": n_ctrl,
        "dangling_deps": dangling,
        "time_span_us": None if t_lo is None else t_hi - t_lo,
        "warnings": warnings,
    }


# ---- words ------------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    """Grouped, rounded: 14455.0 -> ``14,455``, 0.4 -> ``0.4``."""
    if abs(x) >= 100 or float(x).is_integer():
        return f"{round(x):,}"
    return f"{x:,.1f}"


def _us(x: float | None) -> str:
    """Microseconds in the unit a person reads: ``5,888 us``, ``14.5 ms``, ``19.8 s``."""
    if x is None:
        return "unknown"
    if abs(x) >= 10e6:
        return f"{x / 1e6:,.1f} s"
    if abs(x) >= 10_000:
        return f"{x / 1000:,.1f} ms"
    return f"{_num(x)} us"


def _n(count: int, word: str) -> str:
    """``1 node``, ``3 nodes``."""
    return f"{_num(count)} {word}{'' if count == 1 else 's'}"


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"


def _counts(items: Iterable[tuple[str, int]]) -> str:
    text = ", ".join(f"{name} {_num(n)}" for name, n in items)
    return text or "none"


def _plain(v: Any) -> str:
    return "unknown" if v is None or v == "" else str(v)


def render_lines(s: dict[str, Any]) -> list[str]:
    """A summary as plain sentences (the first line names the file and its kind)."""
    kind = s["kind"]
    lines: list[str] = []
    add = lines.append
    if kind == "host_et":
        add(f"{s['file']}: PyTorch host execution trace, schema {_plain(s['schema'])} "
            f"({_plain(s['layout'])} layout), process {_plain(s['pid'])}")
        add(f"  nodes: {_num(s['nodes'])} ({_num(s['operators'])} operators, "
            f"{_num(s['metadata_nodes'])} metadata), threads {', '.join(map(str, s['threads'])) or 'none'}")
        for g in s["process_groups"]:
            ranks = ", ".join(map(str, g["ranks"])) or "all ranks"
            desc = f" ({g['pg_desc']})" if g["pg_desc"] else ""
            add(f"  process group {_plain(g['pg_name'])}{desc}: {_plain(g['backend'])}, ranks {ranks}")
        add(f"  communication ops: {_counts(s['comm_ops'].items())}")
        add(f"  most frequent ops: {_counts(s['top_ops'])}")
    elif kind == "kineto":
        add(f"{s['file']}: Kineto trace")
        add(f"  device: {', '.join(s['device']) or 'none recorded (a CPU-only trace)'}")
        rank = "unknown" if s["rank"] is None else s["rank"]
        world = "" if s["world_size"] is None else f" of {s['world_size']}"
        add(f"  rank {rank}{world}, backend {_plain(s['backend'])}")
        by_kind = sorted(s["events_by_kind"].items(), key=lambda kv: -kv[1])
        add(f"  events: {_num(s['events'])} ({_counts(by_kind)})")
        streams = ", ".join(map(str, s["gpu_streams"])) or "none"
        add(f"  CPU threads: {_num(s['cpu_threads'])}; GPU streams: {streams}")
        if s["steps"]:
            steps = ", ".join(f"{st['name']} ({_us(st['dur'])})" for st in s["steps"])
            add(f"  steps: {steps}")
        m = s["measured"]
        window = "the span of all events" if m["window"] == "kineto_span" else m["window"]
        add(f"  measured: {_us(m['dur_us'])} ({window})")
        share = ""
        if m["dur_us"]:
            pct = s["gpu_busy_us"] / m["dur_us"] * 100
            share = f" ({'less than 1' if 0 < pct < 1 else f'{pct:.0f}'}% of the measured time)"
        add(f"  GPU busy: {_us(s['gpu_busy_us'])}{share}")
    else:
        md = s["metadata"]
        who = ""
        if wire.META_RANK in md:
            ws = md.get(wire.META_WORLD_SIZE)
            known = isinstance(ws, int) and ws > 0   # (-1: not recorded)
            who = f", rank {md[wire.META_RANK]}" + (f" of {ws}" if known else "")
        add(f"{s['file']}: Chakra protobuf ET, version {_plain(s['version'])}{who}")
        add(f"  nodes: {_num(s['nodes'])} ({_counts(s['nodes_by_type'].items())})")
        for where, c in s["compute"].items():
            label = {"gpu": "GPU", "cpu": "CPU", "unset": "no is_cpu_op"}[where]
            add(f"  compute ({label}): {_n(c['nodes'], 'node')}, {_us(c['duration_us'])} in total")
        for name, c in s["collectives"].items():
            add(f"  {name}: {_n(c['nodes'], 'node')}, {_bytes(c['bytes'])} in total")
        pgs = ", ".join('"' + p + '" (world)' if p in ("", "0") else p for p in s["process_groups"])
        if pgs:
            add(f"  process groups used: {pgs}")
        add(f"  dependencies: {_num(s['data_deps'])} data, {_num(s['ctrl_deps'])} control")
        if s["time_span_us"] is not None:
            add(f"  recorded time span: {_us(s['time_span_us'])}")
        extra = [f"{k} {v}" for k, v in md.items() if k not in (wire.META_RANK, wire.META_WORLD_SIZE)
                 and isinstance(v, (str, int, float)) and len(str(v)) <= 60]
        if extra:
            add(f"  metadata: {'; '.join(extra)}")
    for w in s.get("warnings", []):
        add(f"  warning: {w}")
    return lines


def render(summaries: list[dict[str, Any]]) -> None:
    """Print summaries as plain text, a blank line between files."""
    import sys

    out = []
    for s in summaries:
        out.append("\n".join(render_lines(s)))
    sys.stdout.write("\n\n".join(out) + "\n")
