"""Kineto JSON bytes -> typed values: the tables of what is read, and the msgspec decoders built from them.

One decoder per shape, built once from a table, instead of ``get`` calls scattered over the loader:

- the document (:data:`TOP_KEYS`): ``traceEvents`` as a list of ``msgspec.Raw`` (each event's bytes,
  decoded one at a time by the loader, which then knows the index of an event that is wrong), plus the
  small top-level values PyTorch writes.  Top-level keys outside the table are skipped unread;
- an event (:data:`EVENT_FIELDS`): the Chrome-trace fields, typed as PyTorch writes them, so that the
  usual event needs no check in Python.  An event with a value of another type (a string ``dur``, a float
  id, a list ``pid``, an ``args`` that is not an object) fails that decoder and is read again by the
  lenient one (:data:`LenientEvent`, every value as it is), for the loader to judge: one odd event costs
  a second decode, never the whole file;
- an event's ``args`` (:data:`ARG_FIELDS`): only the ids and placement every event is read for.  Every
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
import math
import os
from typing import Any

import msgspec
import orjson

from chakra.errors import TraceFormatError
from chakra.io.jsonio import dumps_kept

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

_NAN = math.nan

#: (attribute, JSON key, type of the usual value, default when absent) of an event.  An absent ``ts`` or
#: ``dur`` reads as NaN, which the loader's range checks refuse (ts) or clamp (dur).
EVENT_FIELDS: tuple[tuple[str, str, Any, Any], ...] = (
    ("ph", "ph", str | None, None),
    ("cat", "cat", str, ""),
    ("name", "name", str, ""),
    ("pid", "pid", int | str | None, None),
    ("tid", "tid", int | str | None, None),
    ("ts", "ts", float, _NAN),
    ("dur", "dur", float, _NAN),
    ("flow_id", "id", Any, None),  # flow events (ph s/f): the ac2g arrow's correlation
)

#: (attribute, JSON key, type, default) of the ``args`` every X event is read for
ARG_FIELDS: tuple[tuple[str, str, Any, Any], ...] = (
    ("external_id", "External id", int | None, None),
    ("external_id_lc", "external id", int | None, None),   # spelled so by some older Kineto versions
    ("rf_id", "Record function id", int | None, None),
    ("correlation", "correlation", int | None, None),
    ("stream", "stream", int | None, None),
    ("device", "device", int | None, None),
    # present or not (any value): a kernel Kineto labels with its collective
    ("collective", "Collective name", Any, UNSET),
)


def _struct(name: str, table: tuple[tuple[str, str, Any, Any], ...], lenient: bool = False,
            extra: list[tuple[str, Any, Any]] | None = None) -> Any:
    """A Struct type with one field per ``(attribute, JSON key, type, default)`` of ``table``; ``lenient``:
    every field ``Any`` (absent: None), so that any value of an object decodes."""
    fields: list[tuple[str, Any, Any]] = [
        (attr, Any if lenient else typ,
         msgspec.field(default=None if lenient and default is not UNSET else default, name=key))
        for attr, key, typ, default in table]
    return msgspec.defstruct(name, fields + (extra or []), gc=False)


EventArgs = _struct("EventArgs", ARG_FIELDS)
#: one event, its values of the usual types
Event = _struct("Event", EVENT_FIELDS, extra=[("args", EventArgs | None, msgspec.field(default=None))])
#: one event whose values are not all of the usual types: everything as it is in the file, for the
#: loader to judge (a string ``dur``, a float id, a list ``pid``, an ``args`` that is not an object)
LenientEvent = _struct("LenientEvent", EVENT_FIELDS, lenient=True,
                       extra=[("args", Any, msgspec.field(default=None))])
Document = msgspec.defstruct(
    "Document",
    [(attr, Any, msgspec.field(default=UNSET, name=key)) for attr, key in TOP_KEYS]
    + [("events", list[msgspec.Raw] | msgspec.UnsetType, msgspec.field(default=UNSET, name="traceEvents"))],
    gc=False)

# (``Document`` is made at run time from TOP_KEYS: its fields are not known statically)
_document_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Document)
#: decodes one event's bytes (``traceEvents[i]``) into an :data:`Event`; raises msgspec.DecodeError
#: (ValidationError) when a value is not of the usual type: :func:`lenient_event` then reads it
event_decoder = msgspec.json.Decoder(Event)
_lenient_decoder = msgspec.json.Decoder(LenientEvent)


class _ArgsText(msgspec.Struct, gc=False):
    args: msgspec.Raw = msgspec.Raw(b"")


_args_text_decoder = msgspec.json.Decoder(_ArgsText)


def decode_document(data: bytes, path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[msgspec.Raw]]:
    """``(top-level values by JSON key, the events' bytes)`` of a Kineto document.

    Errors name the file: not JSON, a top level that is not an object, no ``traceEvents``, a
    ``traceEvents`` that is not a list."""
    if not data.strip():
        raise TraceFormatError("file is empty", path)
    try:
        doc = _document_decoder.decode(data)
    except msgspec.ValidationError as exc:  # JSON of another shape (a subclass of DecodeError)
        raise TraceFormatError(_shape_problem(data, exc), path) from None
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


def _shape_problem(data: bytes, exc: msgspec.ValidationError) -> str:
    """Why a document the typed decoder refused is not a Kineto document (the error path only: parsed
    again, generically)."""
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError:  # a number beyond the float range
        return f"not valid JSON ({exc})"
    if not isinstance(value, dict):
        return f"top level is a JSON {_type_name(value)}, expected a JSON object"
    return f"'traceEvents' is a JSON {_type_name(value.get('traceEvents'))}, expected a list"


def _type_name(value: Any) -> str:
    return type(value).__name__


def lenient_event(raw: msgspec.Raw, index: int, path: str | os.PathLike[str]) -> Any:
    """An event :data:`event_decoder` refused, as a :data:`LenientEvent`; TraceFormatError naming
    ``traceEvents[index]`` when it is not an object or not valid JSON (a string that is not UTF-8, a
    number beyond the float range: the document's scan does not look that closely)."""
    try:
        return _lenient_decoder.decode(raw)
    except msgspec.DecodeError:
        pass
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"traceEvents[{index}] is not valid JSON ({exc})", path) from None
    raise TraceFormatError(f"traceEvents[{index}] is a JSON {_type_name(value)}, expected an object", path)


def event_args(raw: msgspec.Raw, index: int, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The whole ``args`` object of one event's bytes (parsed by orjson, as the ET+ writer re-encodes it),
    or None when it has none or it is not an object."""
    try:
        args = orjson.loads(memoryview(raw)).get("args")
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"traceEvents[{index}] is not valid JSON ({exc})", path) from None
    return args if type(args) is dict else None


def args_text(raw: msgspec.Raw, index: int, path: str | os.PathLike[str]) -> bytes:
    """The ``args`` object of one event's bytes (which the caller knows to be an object) as orjson writes
    it: the text an ET+ GPU node holds, made here (in the loader's process: the link loads the Kineto
    trace beside the host ET) rather than when the node is written.  Kineto spaces its JSON, so nearly
    every text is re-encoded; the text is shorter than the file's.  Errors as :func:`event_args`'."""
    text = bytes(_args_text_decoder.decode(raw).args)
    try:
        return dumps_kept(orjson.loads(text))   # (at its own size)
    except orjson.JSONDecodeError as exc:
        if not text.isascii():   # invalid UTF-8 in a string: the one thing the document's scan leaves
            raise TraceFormatError(f"traceEvents[{index}] is not valid JSON ({exc})", path) from None
        return text   # a number orjson refuses (1e400): the file's text, as it is
