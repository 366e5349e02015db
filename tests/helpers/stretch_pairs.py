"""Host ET + Kineto pairs of the structure "a host ET of one iteration, a Kineto trace of many, no
ProfilerStep", made from real traces by the edits that create it (tests/link/test_link_stretch.py).

* :func:`repeat_kineto`: the Kineto trace (or the events of one step of it) run several times back to back:
  every event copied, its times shifted, its ids (External id, correlation, flow id) moved to a range of
  their own per copy.  The copy the host ET "recorded" keeps its ``Record function id`` and may run slower
  (the ET observer's callbacks run inside every op it records); on the others the id is 0, as PyTorch
  writes it on the events of iterations the observer did not record.
* :func:`drop_host_steps` / :func:`drop_kineto_steps`: no ProfilerStep on either side.
* :func:`keep_host_ops`: the host ET cut to the ops of some Record function ids (one step's).
* :func:`strip_rf`: the Kineto trace without ``Record function id`` (older PyTorch, PARAM's pairs).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEP = "ProfilerStep#"
ID_STEP = 10_000_000            # each copy's ids live in a range of their own
_ROOTS = ("[pytorch|profiler|execution_trace|", "## process_group:init ##")


def read(path: str | Path) -> dict[str, Any]:
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def write(path: str | Path, doc: dict[str, Any]) -> Path:
    Path(path).write_text(json.dumps(doc))
    return Path(path)


def host_rf(node: dict[str, Any]) -> int | None:
    if "rf_id" in node:
        return node["rf_id"]
    return next((a["value"] for a in node.get("attrs", []) if a["name"] == "rf_id"), None)


def _parent_key(node: dict[str, Any]) -> str:
    return "parent" if "parent" in node else "ctrl_deps"


def drop_host_steps(host: dict[str, Any]) -> dict[str, Any]:
    """The host ET without its ProfilerStep nodes: their children hang from the step's parent."""
    steps = {n["id"]: n[_parent_key(n)] for n in host["nodes"] if n["name"].startswith(STEP)}
    nodes = []
    for n in host["nodes"]:
        if n["id"] in steps:
            continue
        key = _parent_key(n)
        parent = n[key]
        while parent in steps:
            parent = steps[parent]
        nodes.append({**n, key: parent})
    return {**host, "nodes": nodes}


def keep_host_ops(host: dict[str, Any], rfs: set[int]) -> dict[str, Any]:
    """The host ET cut to the ops whose rf_id is in ``rfs`` (and the roots and metadata)."""
    return {**host, "nodes": [n for n in host["nodes"] if n["name"].startswith(_ROOTS) or host_rf(n) in rfs]}


def drop_kineto_steps(kineto: dict[str, Any]) -> dict[str, Any]:
    return {**kineto, "traceEvents": [e for e in kineto["traceEvents"]
                                      if not str(e.get("name", "")).startswith(STEP)]}


def strip_rf(kineto: dict[str, Any]) -> dict[str, Any]:
    """The Kineto trace without ``Record function id``."""
    events = []
    for e in kineto["traceEvents"]:
        if isinstance(e.get("args"), dict) and "Record function id" in e["args"]:
            e = {**e, "args": {k: v for k, v in e["args"].items() if k != "Record function id"}}
        events.append(e)
    return {**kineto, "traceEvents": events}


def steps_of(kineto: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """ProfilerStep name -> (ts, end)."""
    return {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in kineto["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith(STEP)}


def rf_ids(kineto: dict[str, Any], keep: Callable[[dict[str, Any]], bool]) -> set[int]:
    """The Record function ids of the kept CPU ops and annotations."""
    return {e["args"]["Record function id"] for e in kineto["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and keep(e)
            and "Record function id" in e.get("args", {})}


def repeat_kineto(kineto: dict[str, Any], times: int, recorded: int, slow: float = 1.0, gap_us: float = 100.0,
                  keep: Callable[[dict[str, Any]], bool] = lambda e: True) -> dict[str, Any]:
    """The kept events (and flows) of ``kineto`` ``times`` times back to back, ProfilerSteps dropped; copy
    ``recorded`` keeps its Record function ids and runs ``slow`` times slower (its times scaled about its
    start), the others have Record function id 0.  Other events (metadata, instants) stay once."""
    timed = [e for e in kineto["traceEvents"] if e.get("ph") in ("X", "s", "f") and keep(e)
             and not str(e.get("name", "")).startswith(STEP)]
    xs = [e for e in timed if e["ph"] == "X"]
    lo = min(e["ts"] for e in xs)
    hi = max(e["ts"] + e.get("dur", 0) for e in xs)
    period = (hi - lo) * max(slow, 1.0) + gap_us
    out = [e for e in kineto["traceEvents"] if e.get("ph") not in ("X", "s", "f")]
    for c in range(times):
        f = slow if c == recorded else 1.0
        for e in timed:
            e = dict(e)
            e["ts"] = lo + c * period + (e["ts"] - lo) * f
            if "dur" in e:
                e["dur"] = e["dur"] * f
            if "id" in e:
                e["id"] = e["id"] + c * ID_STEP
            args = e.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ("External id", "correlation"):
                    if isinstance(args.get(key), int):
                        args[key] += c * ID_STEP
                if "Record function id" in args and c != recorded:
                    args["Record function id"] = 0
                e["args"] = args
            out.append(e)
    return {**kineto, "traceEvents": out}


def copy_span(kineto: dict[str, Any], times: int, recorded: int, slow: float = 1.0, gap_us: float = 100.0,
              keep: Callable[[dict[str, Any]], bool] = lambda e: True) -> tuple[float, float]:
    """Where :func:`repeat_kineto` puts copy ``recorded``: (first start, last end) of its X events."""
    xs = [e for e in kineto["traceEvents"] if e.get("ph") == "X" and keep(e)
          and not str(e.get("name", "")).startswith(STEP)]
    lo = min(e["ts"] for e in xs)
    hi = max(e["ts"] + e.get("dur", 0) for e in xs)
    start = lo + recorded * ((hi - lo) * max(slow, 1.0) + gap_us)
    return start, start + (hi - lo) * slow
