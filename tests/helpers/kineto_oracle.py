"""A plain reference reader of Kineto events, to check the typed decoder of ``chakra.device`` against.

What the loader read before it decoded events with msgspec (``get`` calls on the dicts of a whole parsed
document), written out without any fast path: for each event of ``traceEvents``, what the model must say
about it.  The tests compare it with :func:`chakra.device.load_kineto` on random documents and on the
corpus.  Only the classification tables (``chakra.device.kinds``) are shared with the loader.

JSON: the document is parsed by the standard library, which reads the bare ``NaN`` / ``Infinity`` PyTorch
writes; those values count as ``null`` (what they become in ET+, written by orjson).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from chakra.device.kinds import runtime_kind
from chakra.device.model import (
    ANNOTATION,
    CATEGORY_KIND,
    DRIVER,
    GPU_KINDS,
    HOST_OP,
    LAUNCH,
    OTHER,
    RUNTIME,
    SYNC,
)


class ReferenceError_(Exception):
    """The document is not a usable Kineto trace (the loader must refuse it too)."""


@dataclass
class Reference:
    events: list[tuple[Any, ...]] = field(default_factory=list)  # see FIELDS
    clamped: list[int] = field(default_factory=list)             # file indices of clamped durations
    phases: dict[str, int] = field(default_factory=dict)          # non-X events per ph ("?": not a string)
    flows: int = 0


#: what each reference event tuple holds, in order (attributes of KinetoEvent, but ``index``)
FIELDS = ("index", "kind", "name", "cat", "pid", "tid", "ts", "dur", "external_id", "rf_id", "correlation",
          "stream", "device", "args", "is_sync", "collective")


def _nulls(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_nulls(v) for v in value]
    if isinstance(value, dict):
        return {k: _nulls(v) for k, v in value.items()}
    return value


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _thread_key(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str)) else str(value)


def _kind(cat: str, name: str) -> tuple[int, bool]:
    kind = CATEGORY_KIND.get(cat, CATEGORY_KIND.get(cat.lower(), OTHER))
    if kind in (RUNTIME, DRIVER):
        return runtime_kind(kind, name)
    return kind, False


def reference(data: bytes, op_args: bool = False) -> Reference:
    """What the model of the Kineto document ``data`` holds, event by event (ReferenceError_ when the
    loader must refuse it)."""
    try:
        doc = _nulls(json.loads(data))
    except ValueError as exc:
        raise ReferenceError_(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ReferenceError_("not a Kineto document")
    ref = Reference()
    gpu_corrs: set[int] = set()
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            raise ReferenceError_(f"traceEvents[{i}] is not an object")
        ph = e.get("ph")
        if ph != "X":
            key = ph if isinstance(ph, str) else "?"
            ref.phases[key] = ref.phases.get(key, 0) + 1
            ref.flows += ph in ("s", "f")
            continue
        ts = _number(e.get("ts"))
        if ts is None:
            raise ReferenceError_(f"traceEvents[{i}] has no usable ts")
        dur = _number(e.get("dur"))
        if dur is None or not 0.0 <= dur <= 1e12:
            ref.clamped.append(i)
            dur = 0.0
        cat, name = _text(e.get("cat")), _text(e.get("name"))
        pid, tid = _thread_key(e.get("pid")), _thread_key(e.get("tid"))
        args = e.get("args")
        args = args if isinstance(args, dict) else {}
        ext = args.get("External id")
        ext = _int(ext if ext is not None else args.get("external id"))
        rf, corr = _int(args.get("Record function id")), _int(args.get("correlation"))
        stream, device = args.get("stream"), args.get("device")
        kind, is_sync = _kind(cat, name)
        if kind in GPU_KINDS:
            # the stream: args.stream, else (missing, or not an integer) the tid; the device likewise
            stream = _int(stream)
            stream = stream if stream is not None else _int(tid)
            device = _int(device)
            device = device if device is not None else _int(pid)
            kept = args
            if corr is not None:
                gpu_corrs.add(corr)
        else:
            stream, device = _int(stream), _int(device)
            kept = args if is_sync or (op_args and kind in (HOST_OP, ANNOTATION)) else {}
        ref.events.append([i, kind, name, cat, pid, tid, ts, dur, ext, rf, corr, stream, device, kept,
                           is_sync, "Collective name" in args])
    for ev in ref.events:  # a call that starts GPU work is a launch, whatever its name
        if ev[1] in (RUNTIME, DRIVER, SYNC) and ev[10] is not None and ev[10] in gpu_corrs:
            ev[1] = LAUNCH
    ref.events = [tuple(ev) for ev in ref.events]
    return ref
