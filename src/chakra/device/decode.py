"""Kineto JSON bytes -> typed values: the tables of what is read, and the msgspec decoders built from them.

One decoder per shape, built once from a table, instead of ``get`` calls scattered over the loader:

- the document (:data:`TOP_KEYS`): ``traceEvents`` as a list of ``msgspec.Raw`` (each event's bytes,
  decoded one at a time by the loader, which then knows the index of an event that is wrong), plus the
  small top-level values PyTorch writes.  Top-level keys outside the table are skipped unread;
- an event (:data:`EVENT_KEYS`): the Chrome-trace fields, every one typed ``Any`` so that an odd value
  (a string ``dur``, a list ``pid``) reaches the loader, which decides what it means, instead of failing
  the whole file;
- an event's ``args`` (:data:`ARG_KEYS`): only the ids and placement every event is read for.  Every
  other key (input shapes, concrete inputs, strides ...: most of the bytes of a ``cpu_op``) is skipped by
  the decoder without becoming a Python object.  The few events whose whole ``args`` a stage reads (GPU
  events, synchronizing calls, host ops of a Kineto-only link) get it from :func:`event_args`.

Numbers: msgspec parses floats exactly as orjson does (correctly rounded), so times read here are the
bits the earlier orjson-based loader produced.  Integers beyond 64 bits stay exact (orjson made floats
of them).  Bare ``NaN`` / ``Infinity`` (which PyTorch writes, and JSON does not allow) are handled by
:func:`decode_document`: the document is parsed by the standard library and written back with those
values as ``null`` (what orjson writes for them), then decoded as any other.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import msgspec
import orjson

from chakra.errors import TraceFormatError

log = logging.getLogger(__name__)

UNSET = msgspec.UNSET

#: (attribute, JSON key) of the top-level values read besides ``traceEvents``: the three the loader
#: interprets, then the ones kept in ``KinetoTrace.extra`` (what PyTorch and Kineto write)
TOP_KEYS: tuple[tuple[str, str], ...] = (
    ("distributed_info", "distributedInfo"),
    ("device_properties", "deviceProperties"),
    ("trace_name", "traceName"),
    ("metadata", "metadata"),
    ("schema_version", "schemaVersion"),
    ("record_shapes", "record_shapes"),
    ("profile_memory", "profile_memory"),
    ("with_stack", "with_stack"),
    ("with_flops", "with_flops"),
    ("with_modules", "with_modules"),
    ("trace_id", "trace_id"),
    ("host_name", "host_name"),
    ("display_time_unit", "displayTimeUnit"),
    ("base_time_ns", "baseTimeNanoseconds"),
    ("cuda_runtime_version", "cuda_runtime_version"),
    ("cuda_driver_version", "cuda_driver_version"),
    ("cupti_version", "cupti_version"),
    ("hip_runtime_version", "hip_runtime_version"),
    ("hip_driver_version", "hip_driver_version"),
    ("roctracer_version", "roctracer_version"),
)
#: the top-level keys the loader interprets itself (not copied into ``extra``)
INTERPRETED_TOP = frozenset(("distributedInfo", "deviceProperties", "traceName"))

#: (attribute, JSON key) of an event
EVENT_KEYS: tuple[tuple[str, str], ...] = (
    ("ph", "ph"),
    ("cat", "cat"),
    ("name", "name"),
    ("pid", "pid"),
    ("tid", "tid"),
    ("ts", "ts"),
    ("dur", "dur"),
    ("flow_id", "id"),       # flow events (ph s/f): the ac2g arrow's correlation
)

#: (attribute, JSON key) of the ``args`` every X event is read for
ARG_KEYS: tuple[tuple[str, str], ...] = (
    ("external_id", "External id"),
    ("external_id_lc", "external id"),   # spelled so by some older Kineto versions
    ("rf_id", "Record function id"),
    ("correlation", "correlation"),
    ("stream", "stream"),
    ("device", "device"),
)


def _struct(name: str, keys: tuple[tuple[str, str], ...], default: Any = None,
            extra: list[tuple[str, Any, Any]] | None = None) -> type[msgspec.Struct]:
    """A Struct type with one ``Any`` field per ``(attribute, JSON key)`` of ``keys``."""
    fields: list[tuple[str, Any, Any]] = [(attr, Any, msgspec.field(default=default, name=key))
                                          for attr, key in keys]
    return msgspec.defstruct(name, fields + (extra or []), gc=False)


EventArgs = _struct("EventArgs", ARG_KEYS)
Event = _struct("Event", EVENT_KEYS,
                extra=[("args", EventArgs | None, msgspec.field(default=None))])  # type: ignore[operator]
Document = _struct("Document", TOP_KEYS, default=UNSET,
                   extra=[("events", list[msgspec.Raw] | msgspec.UnsetType,
                           msgspec.field(default=UNSET, name="traceEvents"))])

_document_decoder = msgspec.json.Decoder(Document)
#: decodes one event's bytes (``traceEvents[i]``); raises msgspec.ValidationError when the event is not
#: an object or its ``args`` is neither an object nor null (see :func:`odd_event`)
event_decoder = msgspec.json.Decoder(Event)


def decode_document(data: bytes, path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[msgspec.Raw]]:
    """``(top-level values by JSON key, the events' bytes)`` of a Kineto document.

    Errors name the file: not JSON, a top level that is not an object, no ``traceEvents``, a
    ``traceEvents`` that is not a list."""
    if not data.strip():
        raise TraceFormatError("file is empty", path)
    try:
        doc = _document_decoder.decode(data)
    except msgspec.ValidationError:  # well-formed JSON of another shape (a subclass of DecodeError)
        raise TraceFormatError(_shape_problem(data), path) from None
    except msgspec.DecodeError as exc:
        if b"NaN" not in data and b"Infinity" not in data:
            raise TraceFormatError(f"not valid JSON ({exc})", path) from None
        # bare NaN / Infinity (PyTorch writes them): the standard library reads them; written back by
        # orjson they become null, which is what they became on every earlier path too
        try:
            parsed = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise TraceFormatError(f"not valid JSON ({exc})", path) from None
        try:
            data = orjson.dumps(parsed)
        except orjson.JSONEncodeError as enc:  # an integer beyond 64 bits
            raise TraceFormatError(f"not valid JSON ({exc}; {enc})", path) from None
        log.info("%s: bare NaN/Infinity in the JSON: read as null", os.fspath(path))
        return decode_document(data, path)
    if doc.events is UNSET:
        raise TraceFormatError("no 'traceEvents' key: not a Kineto/Chrome trace", path)
    top = {key: getattr(doc, attr) for attr, key in TOP_KEYS if getattr(doc, attr) is not UNSET}
    return top, doc.events


def _shape_problem(data: bytes) -> str:
    """Why a well-formed JSON document is not a Kineto document (the error path only: parsed again)."""
    value = msgspec.json.decode(data)
    if not isinstance(value, dict):
        return f"top level is a JSON {_type_name(value)}, expected a JSON object"
    return f"'traceEvents' is a JSON {_type_name(value.get('traceEvents'))}, expected a list"


def _type_name(value: Any) -> str:
    return type(value).__name__


def odd_event(raw: msgspec.Raw, index: int, path: str | os.PathLike[str]) -> Any:
    """An event the typed decoder refused: not an object (TraceFormatError naming ``traceEvents[index]``),
    or an object whose ``args`` is not an object (decoded without its args, as events without any)."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:  # a string that is not UTF-8: the document scan does not look
        raise TraceFormatError(f"traceEvents[{index}] is not valid JSON ({exc})", path) from None
    if not isinstance(value, dict):
        raise TraceFormatError(f"traceEvents[{index}] is a JSON {_type_name(value)}, expected an object",
                               path)
    value.pop("args", None)
    return msgspec.convert(value, Event)


def event_args(raw: msgspec.Raw, index: int, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The whole ``args`` object of one event's bytes (parsed by orjson, as the ET+ writer re-encodes it),
    or None when it has none or it is not an object."""
    try:
        args = orjson.loads(memoryview(raw)).get("args")
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"traceEvents[{index}] is not valid JSON ({exc})", path) from None
    return args if type(args) is dict else None
