"""What a file is, from its first bytes: for the messages of a command given the wrong kind of file."""

from __future__ import annotations

import logging
import os
import re
import zlib

from chakra.errors import UsageError
from chakra.formats import META_ATTR, META_VERSION
from chakra.io.jsonio import GZIP_MAGIC
from chakra.tunables import SNIFF_BYTES

#: how a JSON array's first value opens: a log line ("[2026-12-03 23:25:57,040] INFO ...", "[rank 0] ...")
#: opens with "[" too, and is no JSON
_ARRAY_OPENING = re.compile(rb"\[\s*(?:[{\[\"\]tfn]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s*[,\]])")


def _head(path: str | os.PathLike[str]) -> bytes:
    """The first bytes of ``path`` (gunzipped when it is gzip); empty when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SNIFF_BYTES)
    except OSError:
        return b""
    if raw[:2] == GZIP_MAGIC:
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, SNIFF_BYTES)
        except zlib.error:
            return b""
    return raw


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """``"kineto"`` (a Kineto / Chrome trace), ``"host"`` (a PyTorch host ET or an ET+: JSON with the
    ``schema`` of a host ET), ``"chakra_json"`` (a Chakra ET written as JSON by ``chakra jsonize``),
    ``"json"`` (other JSON), ``"chakra"`` (a length-delimited protobuf stream whose first message opens
    like a GlobalMetadata), or None."""
    head = _head(path)
    text = head.lstrip()
    if text[:1] == b"{" or _ARRAY_OPENING.match(text):
        if b'"traceEvents"' in head or b'"schemaVersion"' in head or b'"deviceProperties"' in head:
            return "kineto"
        if b'"global_metadata"' in head:
            return "chakra_json"
        if b'"schema"' in head and b'"nodes"' in head:
            return "host"
        return "json"
    size = 0
    for shift, byte in enumerate(head[:5]):    # the first frame's length (a varint), then a field of tag
        size |= (byte & 0x7F) << (7 * shift)   # 1 (version) or 2 (attr) of GlobalMetadata
        if not byte & 0x80:
            if size > 0 and head[shift + 1:shift + 2] in (META_VERSION, META_ATTR):
                return "chakra"
            return None
    return None


_WHAT = {
    "kineto": "a Kineto trace (JSON): link it with its host ET first (chakra link), then convert the ET+",
    "host": "a PyTorch host ET or ET+ (JSON): convert it to a Chakra ET first (chakra convert)",
    "chakra_json": "a Chakra ET written as JSON: turn it back into protobuf first (chakra jsonize)",
    "json": "JSON, not a Chakra protobuf ET",
    "chakra": "a Chakra protobuf ET (chakra replay, stats, jsonize, visualize and validate read it)",
}


def wrong_kind_hint(path: str | os.PathLike[str] | None, expected: str) -> str:
    """``"; it looks like ..."`` when ``path`` is another kind of file than ``expected`` (``"json"`` or
    ``"chakra"``), else ``""``."""
    if path is None:
        return ""
    kind = file_kind(path)
    if kind is None or (kind == "chakra") == (expected == "chakra"):
        return ""
    return f"; it looks like {_WHAT[kind]}"


def log_file_handler(path: str | os.PathLike[str]) -> logging.FileHandler:
    """A handler writing the log to ``path``, written anew (truncated once, then appended to, so that other
    writers may append to it too: ``--simulate``'s completion lines), or a UsageError: ``path`` is a trace
    (an input named by mistake would be emptied) or cannot be written."""
    name = os.fspath(path)
    if os.path.isfile(name):
        try:
            with open(name, "rb") as fh:
                gzipped = fh.read(2) == GZIP_MAGIC
        except OSError:
            gzipped = False
        if gzipped or file_kind(name) is not None:
            raise UsageError(f"--log-filename {name}: is a trace, not a log (writing the log would empty it)")
    try:
        with open(name, "w", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--log-filename {name}: cannot write it ({exc.strerror or exc})") from None
    return logging.FileHandler(name, mode="a", encoding="utf-8")
