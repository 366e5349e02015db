"""JSON and gzip-JSON reading and writing through orjson.

Gzip is detected by its magic bytes, not by the file name: users rename files.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import orjson

from chakra.errors import TraceFormatError
from chakra.io.atomic import atomic_output

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Read a file, transparently gunzipping it; errors name the file."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise TraceFormatError("file not found", path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, expected a file", path) from None
    except PermissionError:
        raise TraceFormatError("permission denied", path) from None
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(f"truncated or corrupt gzip data ({exc})", path) from None
    return raw


def load_json(path: str | os.PathLike[str], expect: type | None = dict) -> Any:
    """Parse a JSON or gzip-JSON file with orjson.

    ``expect`` is the required top-level type; anything else is a
    TraceFormatError naming the file.
    """
    raw = read_bytes(path)
    if not raw.strip():
        raise TraceFormatError("file is empty", path)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # PyTorch writes bare NaN/Infinity in some fields; orjson rejects them.
        if b"NaN" in raw or b"Infinity" in raw:
            import json

            try:
                data = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                raise TraceFormatError(f"not valid JSON ({exc})", path) from None
        else:
            raise TraceFormatError(f"not valid JSON ({exc})", path) from None
    if expect is not None and not isinstance(data, expect):
        raise TraceFormatError(
            f"top level is a JSON {type(data).__name__}, expected a JSON {_json_name(expect)}", path
        )
    return data


def _json_name(t: type) -> str:
    return {dict: "object", list: "array"}.get(t, t.__name__)


def dump_json(path: str | os.PathLike[str], data: Any, *, indent: bool = False) -> None:
    """Write ``data`` as JSON atomically; gzip it when the name ends in ``.gz``."""
    opts = orjson.OPT_SERIALIZE_NUMPY if hasattr(orjson, "OPT_SERIALIZE_NUMPY") else 0
    if indent:
        opts |= orjson.OPT_INDENT_2
    payload = orjson.dumps(data, option=opts)
    if str(path).endswith(".gz"):
        payload = gzip.compress(payload, compresslevel=6, mtime=0)
    with atomic_output(path) as fh:
        fh.write(payload)
