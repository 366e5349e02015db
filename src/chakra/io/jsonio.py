"""JSON and gzip-JSON reading and writing through orjson.

Gzip is detected by its magic bytes, not by the file name: users rename files.
"""

from __future__ import annotations

import gzip
import os
import queue
import threading
import zlib
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import orjson

from chakra.errors import TraceFormatError
from chakra.io.atomic import atomic_output

GZIP_MAGIC = b"\x1f\x8b"


def open_input(path: str | os.PathLike[str]) -> Any:
    """``open(path, "rb")``; a missing file, a directory or no permission is a TraceFormatError naming the
    file."""
    try:
        return open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError:
        raise TraceFormatError("file not found", path) from None
    except IsADirectoryError:
        raise TraceFormatError("is a directory, expected a file", path) from None
    except PermissionError:
        raise TraceFormatError("permission denied", path) from None


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """Read a file, transparently gunzipping it; errors name the file."""
    with open_input(path) as fh:
        try:
            raw = fh.read()
        except IsADirectoryError:
            raise TraceFormatError("is a directory, expected a file", path) from None
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
    return parse_json(read_bytes(path), path, expect)


def parse_json(raw: bytes, path: str | os.PathLike[str], expect: type | None = dict) -> Any:
    """:func:`load_json` of bytes already read (``path`` names them in errors)."""
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


def top_level_array(data: Any, key: str, missing: str, path: str | os.PathLike[str]) -> list[Any]:
    """``data[key]`` of a parsed trace document, which must be an object holding a list there.

    ``missing`` is the message when the key is absent (it says what kind of file was expected).
    """
    if not isinstance(data, dict):
        raise TraceFormatError(
            f"top level is a JSON {type(data).__name__}, expected a JSON {_json_name(dict)}", path
        )
    if key not in data:
        raise TraceFormatError(missing, path)
    value = data[key]
    if not isinstance(value, list):
        raise TraceFormatError(f"'{key}' is a JSON {type(value).__name__}, expected a list", path)
    return value


def _json_name(t: type) -> str:
    return {dict: "object", list: "array"}.get(t, t.__name__)


def dump_json(path: str | os.PathLike[str], data: Any, *, indent: bool = False) -> None:
    """Write ``data`` as JSON atomically; gzip it when the name ends in ``.gz``."""
    opts = orjson.OPT_SERIALIZE_NUMPY if hasattr(orjson, "OPT_SERIALIZE_NUMPY") else 0
    if indent:
        opts |= orjson.OPT_INDENT_2
    if isinstance(data, dict) and _stream_dump(path, data, opts):
        return
    payload = orjson.dumps(data, option=opts)
    if str(path).endswith(".gz"):
        payload = gzip.compress(payload, compresslevel=6, mtime=0)
    with atomic_output(path) as fh:
        fh.write(payload)


_STREAM_KEYS = ("nodes", "traceEvents")
_STREAM_MIN_ITEMS = 100_000
_STREAM_BATCH = 20_000
_SENTINEL = "\x00chakra-stream-split\x00"


def _stream_dump(path: str | os.PathLike[str], data: dict[str, Any], opts: int) -> bool:
    """Write a document with one huge top-level list (ET+ ``nodes``) in batches of items.

    Returns False when not applicable (small documents, indented output, or a sentinel clash), then the
    caller writes the document in one piece.  See :func:`dump_json_items` for the method.
    """
    key = next((k for k in _STREAM_KEYS if isinstance(data.get(k), list)), None)
    if key is None or opts & orjson.OPT_INDENT_2:
        return False
    items = data[key]
    if len(items) < _STREAM_MIN_ITEMS:
        return False
    return _write_items(path, data, key, items, opts)


def dump_json_items(path: str | os.PathLike[str], data: dict[str, Any], key: str,
                    items: Iterable[Any]) -> None:
    """Write ``data`` with ``data[key]`` replaced by the list of ``items`` (any iterable, consumed once,
    a batch at a time): the bytes :func:`dump_json` writes for the document holding that list, without
    the list (or the text) ever being whole in memory.  Atomic; gzip when the name ends in ``.gz``."""
    opts = orjson.OPT_SERIALIZE_NUMPY if hasattr(orjson, "OPT_SERIALIZE_NUMPY") else 0
    if not _write_items(path, data, key, items, opts):
        whole = dict(data)
        whole[key] = list(items)
        dump_json(path, whole)


def _write_items(path: str | os.PathLike[str], data: dict[str, Any], key: str, items: Iterable[Any],
                 opts: int) -> bool:
    """Byte-identical to ``orjson.dumps(data)`` (+ ``gzip.compress(..., 6, mtime=0)``): the document is
    encoded once with the list replaced by a sentinel string, split there, and the list is written as
    ``[`` + the items joined by ``,`` + ``]`` (orjson's compact form); gzip output goes through a zlib
    stream with the same parameters as ``zlib.compress(level=6, wbits=31)``.  The full text never exists
    in memory (about 1 GB for a million-op ET+).  False (nothing consumed) on a sentinel clash."""
    shell = dict(data)
    shell[key] = _SENTINEL
    enc = orjson.dumps(shell, option=opts)
    marker = orjson.dumps(_SENTINEL)
    if enc.count(marker) != 1:
        return False
    head, tail = enc.split(marker)
    gz = str(path).endswith(".gz")
    comp = zlib.compressobj(6, zlib.DEFLATED, 31) if gz else None
    it = iter(items)
    with atomic_output(path) as fh:
        write = (lambda b: fh.write(comp.compress(b))) if comp is not None else fh.write
        # the file writes (and zlib) release the GIL: a writer thread overlaps them with making the next
        # batch; at most a few batches wait in the queue
        pending: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        failed: list[BaseException] = []

        def writer() -> None:
            while True:
                part = pending.get()
                if part is None:
                    return
                if not failed:
                    try:
                        write(part)
                    except BaseException as exc:  # noqa: BLE001 (re-raised by the producer)
                        failed.append(exc)

        thread = threading.Thread(target=writer, name="chakra-json-writer", daemon=True)
        thread.start()
        try:
            pending.put(head + b"[")
            dumps = orjson.dumps
            first = True
            while not failed:
                batch = list(islice(it, _STREAM_BATCH))
                if not batch:
                    break
                # a batch as a JSON list, brackets cut off: orjson's separators are the plain ","
                part = dumps(batch, option=opts)
                del batch
                pending.put(part[1:-1] if first else b"," + part[1:-1])
                first = False
            pending.put(b"]" + tail)
        finally:
            pending.put(None)
            thread.join()
        if failed:
            raise failed[0]
        if comp is not None:
            fh.write(comp.flush())
    return True


# ---- streamed reading of one huge top-level list ----------------------------------------------------

#: files at least this large (bytes on disk; a quarter of it for gzip) are parsed in chunks
STREAM_MIN_BYTES = 64 << 20
_READ_BLOCK = 8 << 20
_WS = b" \t\r\n"


class StreamFallback(Exception):
    """The chunked reader met something it does not handle; the caller parses the whole file instead."""


def iter_json_array(path: str | os.PathLike[str], key: str, *, min_bytes: int | None = None,
                    block: int = _READ_BLOCK) -> tuple[dict[str, Any], Iterator[list[Any]]] | None:
    """Parse a large JSON object whose top-level ``key`` holds a list of objects, a chunk at a time.

    Returns ``(top, chunks)``: ``top`` is the object with every other top-level key (``key`` maps to None,
    in its place), ``chunks`` yields the list's items as lists of a few MB of JSON each.  Neither the whole
    text nor the whole parsed list is ever in memory (orjson needs several times the file size to parse a
    document at once).  Returns None for small files or when the layout is not recognised; the iterator
    raises :class:`StreamFallback` when a chunk does not parse: the caller then loads the file with
    :func:`load_json`, whose errors name the problem.  Chunk boundaries are ``}`` ``,`` ``{`` between
    items; a boundary guessed inside a string or a nested list always leaves an unbalanced chunk, which
    fails to parse (hence the fallback, never a wrong result).
    """
    limit = STREAM_MIN_BYTES if min_bytes is None else min_bytes
    try:
        size = os.path.getsize(path)
        fh: Any = open(path, "rb")  # noqa: SIM115 (closed by the generator)
    except OSError:
        return None
    try:
        if fh.read(2) == GZIP_MAGIC:
            fh.seek(0)
            size *= 4
            fh = gzip.GzipFile(fileobj=fh, mode="rb")
        else:
            fh.seek(0)
        if size < limit:
            fh.close()
            return None
        head = _read_head(fh, key, block)
    except (OSError, EOFError, zlib.error, StreamFallback):
        fh.close()
        return None
    if head is None:
        fh.close()
        return None
    top, rest = head
    return top, _chunks(fh, rest, block, top)


def _read_head(fh: Any, key: str, block: int) -> tuple[dict[str, Any], bytes] | None:
    """Find ``"key": [`` at the top level; return the keys before it and the bytes after the ``[``."""
    token = b'"' + key.encode() + b'"'
    buf = b""
    for _ in range(8):
        more = fh.read(block)
        buf += more
        at = buf.find(token)
        while at >= 0:
            j = at + len(token)
            while j < len(buf) and buf[j] in _WS:
                j += 1
            if buf[j:j + 1] == b":":
                j += 1
                while j < len(buf) and buf[j] in _WS:
                    j += 1
                if buf[j:j + 1] == b"[":
                    prefix = buf[:at].strip()
                    try:
                        if prefix == b"{":
                            top: Any = {}
                        elif prefix.endswith(b","):
                            top = orjson.loads(prefix[:-1] + b"}")
                        else:
                            top = None
                    except orjson.JSONDecodeError:
                        top = None  # the token sits inside a nested value: keep looking
                    if isinstance(top, dict):
                        top[key] = None
                        return top, buf[j + 1:]
            at = buf.find(token, at + 1)
        if not more:
            return None
    return None


def _end_before(buf: bytes | bytearray, k: int) -> int | None:
    """When the ``{`` at ``k`` follows ``}`` ws ``,`` ws: the end of that ``}`` (a boundary between two
    items of a list of objects, if not inside a string or a nested value), else None."""
    j = k - 1
    while j >= 0 and buf[j] in _WS:
        j -= 1
    if j >= 0 and buf[j] == 0x2C:  # ","
        j -= 1
        while j >= 0 and buf[j] in _WS:
            j -= 1
        if j >= 0 and buf[j] == 0x7D:  # "}"
            return j + 1
    return None


def _boundary(buf: bytes | bytearray, lim: int | None = None) -> tuple[int, int] | None:
    """Last ``}`` ws ``,`` ws ``{`` in ``buf[:lim]``: (end of the item before, start of the next), or None."""
    k = buf.rfind(b"{", 0, len(buf) if lim is None else lim)
    tries = 0
    while k > 0 and tries < 10_000:
        end = _end_before(buf, k)
        if end is not None:
            return end, k
        k = buf.rfind(b"{", 0, k)
        tries += 1
    return None


def _chunks(fh: Any, rest: bytes, block: int, top: dict[str, Any]) -> Iterator[list[Any]]:
    loads = orjson.loads
    # ``buf`` always starts with "[" followed by the unparsed text: a chunk is parsed in place, with the
    # byte after its last item (a "," or a blank) overwritten by "]", so no multi-MB copy is made per chunk
    buf = bytearray(b"[")
    buf += rest
    del rest
    try:
        eof = False
        while not eof:
            more = fh.read(block)
            eof = not more
            buf += more
            del more
            if eof:
                break
            # The last boundary may lie past the end of the list (a list of objects after it, as in ET+
            # link_stats) or inside a string: such a chunk fails to parse; try a few earlier boundaries,
            # else read on (the tail below then parses what is left in one piece).
            items = None
            lim = len(buf)
            for _ in range(20):
                cut = _boundary(buf, lim)
                if cut is None or cut[0] < 1:
                    break
                end, nxt = cut
                saved = buf[end]
                buf[end] = 0x5D  # "]"
                try:
                    with memoryview(buf) as view, view[:end + 1] as part:
                        items = loads(part)
                    break
                except orjson.JSONDecodeError:
                    buf[end] = saved
                    lim = end - 1
            if items is None:
                continue
            del buf[1:nxt]  # keep "[" and the text from the next item on
            yield items
        buf = bytes(buf[1:])
        # the last items, the list's "]" and the rest of the top-level object
        tries = 0
        k = buf.rfind(b"]")
        while k >= 0 and tries < 1000:
            tail = buf[k + 1:].strip()
            if tail == b"}" or tail.startswith(b","):
                try:
                    items = loads(b"[" + buf[:k] + b"]")
                    rest = loads(b"{" + tail[1:]) if tail != b"}" else {}
                except orjson.JSONDecodeError:
                    items = rest = None
                if isinstance(items, list) and isinstance(rest, dict):
                    top.update(rest)  # the keys after the list, in file order
                    yield items
                    return
            k = buf.rfind(b"]", 0, k)
            tries += 1
        raise StreamFallback
    except (OSError, EOFError, zlib.error):
        raise StreamFallback from None
    finally:
        fh.close()


#: how much of a file :func:`trace_kind` reads (decompressed)
KIND_PEEK_BYTES = 1 << 20
_KIND_KEYS = ((b'"nodes"', "host"), (b'"traceEvents"', "kineto"))


def trace_kind(path: str | os.PathLike[str], peek: int = KIND_PEEK_BYTES) -> str | None:
    """``"host"`` (a host ET or ET+: a top-level ``"nodes"`` list), ``"kineto"`` (``"traceEvents"``) or
    None, from the first ``peek`` bytes of the file (gunzipped): for file names that do not say which
    trace they hold (PARAM's ``rank-N.json``).  The key seen first wins; an unreadable file is None.

    Only a first MiB is read: the list key of a host ET comes after a few short keys, and a Kineto
    trace's after its device properties and distributed info."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(2)
            fh.seek(0)
            if raw == GZIP_MAGIC:
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    head = gz.read(peek)
            else:
                head = fh.read(peek)
    except (OSError, EOFError, zlib.error):
        return None
    best: tuple[int, str] | None = None
    for key, kind in _KIND_KEYS:
        k = head.find(key)
        if k >= 0 and (best is None or k < best[0]):
            best = (k, kind)
    return best[1] if best else None
