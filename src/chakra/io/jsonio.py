"""JSON and gzip-JSON reading and writing through orjson.

Gzip is detected by its magic bytes, not by the file name: users rename files.
"""

from __future__ import annotations

import gzip
import io
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterable
from functools import partial
from itertools import islice
from typing import Any

import orjson

from chakra.errors import TraceFormatError
from chakra.io.atomic import atomic_output
from chakra.io.forkmap import fork_map
from chakra.tunables import JSON_STREAM_BATCH, JSON_STREAM_MIN_ITEMS, KIND_PEEK_BYTES

GZIP_MAGIC = b"\x1f\x8b"


def dumps_kept(value: Any) -> bytes:
    """``orjson.dumps(value)`` as a bytes object of its own size, for text that is kept.

    orjson returns its output in the buffer it was written into, at least ~4 KB however short the text: the
    87,700 re-encoded inputs/outputs texts of a 100k-node host ET with every list spaced (as ``json.dump``
    writes it) held 342 MB (a million nodes: 5.5 GB for the link).  Text used once (written out, joined)
    needs no copy."""
    return memoryview(orjson.dumps(value)).tobytes()


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
    names: dict[type, str] = {dict: "object", list: "array"}
    return names.get(t, t.__name__)


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
_SENTINEL = "\x00chakra-stream-split\x00"


def _stream_dump(path: str | os.PathLike[str], data: dict[str, Any], opts: int) -> bool:
    """Write a document with one huge top-level list (ET+ ``nodes``) in batches of items.

    Returns False when not applicable (small documents, indented output, or a sentinel clash), then the
    caller writes the document in one piece.  See :func:`_write_items` for the method.
    """
    key = next((k for k in _STREAM_KEYS if isinstance(data.get(k), list)), None)
    if key is None or opts & orjson.OPT_INDENT_2:
        return False
    items = data[key]
    if len(items) < JSON_STREAM_MIN_ITEMS:
        return False
    return _write_items(path, data, key, [range(0)], lambda _: items, opts)


def dump_json_ranges(path: str | os.PathLike[str], data: dict[str, Any], key: str, pieces: list[range],
                     make: Callable[[range], Iterable[Any]], *, batch: int = JSON_STREAM_BATCH) -> None:
    """Write ``data`` with ``data[key]`` replaced by the list of the items ``make`` gives for ``pieces``
    (consecutive ranges of positions from 0: ``make(r)`` yields the items of positions ``r``, one per
    position, a batch at a time): the bytes :func:`dump_json` writes for the document holding that list,
    without the list (or the text) ever being whole in memory.  Each piece after the first is made and
    encoded in a process of its own (:mod:`chakra.io.forkmap`, the bytes of each appended to the file in
    order).  The same bytes for any pieces.  Atomic; gzip when the name ends in ``.gz``.  ``batch``: the
    items encoded at a time."""
    opts = orjson.OPT_SERIALIZE_NUMPY if hasattr(orjson, "OPT_SERIALIZE_NUMPY") else 0
    if not _write_items(path, data, key, pieces, make, opts, batch):
        whole = dict(data)
        whole[key] = [x for r in pieces for x in make(r)]
        dump_json(path, whole)


def _write_items(path: str | os.PathLike[str], data: dict[str, Any], key: str, pieces: list[range],
                 make: Callable[[range], Iterable[Any]], opts: int, batch: int = JSON_STREAM_BATCH) -> bool:
    """Byte-identical to ``orjson.dumps(data)`` (+ ``gzip.compress(..., 6, mtime=0)``): the document is
    encoded once with the list replaced by a sentinel string, split there, and the list is written as
    ``[`` + the items joined by ``,`` + ``]`` (orjson's compact form), the items of each piece by
    :func:`_write_piece`; gzip output goes through a zlib stream with the same parameters as
    ``zlib.compress(level=6, wbits=31)``.  The full text never exists in memory (about 1 GB for a
    million-op ET+).  False (nothing made) on a sentinel clash."""
    shell = dict(data)
    shell[key] = _SENTINEL
    enc = orjson.dumps(shell, option=opts)
    marker = orjson.dumps(_SENTINEL)
    if enc.count(marker) != 1:
        return False
    head, tail = enc.split(marker)
    gz = str(path).endswith(".gz")
    with atomic_output(path) as fh:
        sink = _Sink(fh, zlib.compressobj(6, zlib.DEFLATED, 31) if gz else None)
        try:
            sink.write_now(head + b"[")
            fork_map(partial(_write_piece, make, opts, batch), pieces, f"writing {os.fspath(path)}",
                     sink=sink)
            sink.write(b"]" + tail)
        finally:
            sink.close()
    return True


def _write_piece(make: Callable[[range], Iterable[Any]], opts: int, size: int, piece: range,
                 write: Any) -> None:
    """The items of ``piece`` as JSON text joined by ``,`` (after a ``,`` unless the piece is the list's
    first), ``size`` items at a time: orjson's separators are the plain ``,``."""
    it = iter(make(piece))
    dumps = orjson.dumps
    sep = piece.start > 0
    while True:
        batch = list(islice(it, size))
        if not batch:
            return
        part = dumps(batch, option=opts)
        del batch
        if sep:
            write(b",")
        write(memoryview(part)[1:-1])   # brackets cut off (a view: no copy of the text)
        sep = True


class _Sink:
    """The ET+ text's way into its file: a writer thread does the file writes (and zlib), which release
    the GIL, while the text of the next batch is made; at most a few batches wait.  ``flush`` waits until
    all are written; without zlib the file's own descriptor is there for the kernel to append to
    (``fileno``, :func:`chakra.io.forkmap.fork_map`).  The thread starts with the first :meth:`write`:
    the parts of :func:`_write_items` are forked before it (a process forked while another thread runs
    may inherit a lock that thread held; Python 3.12 warns about it)."""

    def __init__(self, fh: Any, comp: Any) -> None:
        self.fh = fh
        self.comp = comp
        self.pending: queue.Queue[bytes | memoryview | None] = queue.Queue(maxsize=8)
        self.failed: list[BaseException] = []
        self.thread: threading.Thread | None = None

    def write_now(self, part: bytes) -> None:
        """Write ``part`` from this thread (before the writer thread starts)."""
        self.fh.write(self.comp.compress(part) if self.comp is not None else part)

    def _run(self) -> None:
        write = self.fh.write
        comp = self.comp
        while True:
            part = self.pending.get()
            try:
                if part is None:
                    return
                if not self.failed:
                    write(comp.compress(part) if comp is not None else part)
            except BaseException as exc:  # noqa: BLE001 (raised by the producer)
                self.failed.append(exc)
            finally:
                self.pending.task_done()

    def write(self, part: bytes | memoryview) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="chakra-json-writer", daemon=True)
            self.thread.start()
        elif self.failed:
            raise self.failed[0]
        self.pending.put(part)

    def flush(self) -> None:
        if self.thread is not None:
            self.pending.join()
        if self.failed:
            raise self.failed[0]
        self.fh.flush()

    def fileno(self) -> int:
        if self.comp is not None:
            raise io.UnsupportedOperation("compressed: written through this process")
        return self.fh.fileno()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self.fh.seek(offset, whence)

    def close(self) -> None:
        """Write what is left (the end of the zlib stream) and stop the thread; raises its error."""
        if self.thread is not None:
            self.pending.put(None)
            self.thread.join()
        if self.failed:
            raise self.failed[0]
        if self.comp is not None:
            self.fh.write(self.comp.flush())


# ---- streamed reading of one huge top-level list ----------------------------------------------------

_KIND_KEYS = ((b'"nodes"', "host"), (b'"traceEvents"', "kineto"))


def read_head(path: str | os.PathLike[str], peek: int = KIND_PEEK_BYTES) -> bytes | None:
    """The first ``peek`` bytes of a file, gunzipped when it is gzip; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(2)
            fh.seek(0)
            if raw == GZIP_MAGIC:
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    return gz.read(peek)
            return fh.read(peek)
    except (OSError, EOFError, zlib.error):
        return None


def distributed_info(path: str | os.PathLike[str], peek: int = KIND_PEEK_BYTES) -> dict[str, Any] | None:
    """A Kineto trace's top-level ``distributedInfo`` object (rank, world size, process groups), read from
    the first ``peek`` bytes (Kineto writes it before ``traceEvents``), or None when it is not there."""
    head = read_head(path, peek)
    if head is None:
        return None
    k = head.find(b'"distributedInfo"')
    if k < 0:
        return None
    start = head.find(b"{", k)
    if start < 0 or head[k + len(b'"distributedInfo"'):start].strip(b" \t\r\n:"):
        return None
    import json  # (the stdlib's: orjson parses whole documents only)

    try:
        value, _ = json.JSONDecoder().raw_decode(head[start:].decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def trace_kind(path: str | os.PathLike[str], peek: int = KIND_PEEK_BYTES) -> str | None:
    """``"host"`` (a host ET or ET+: a top-level ``"nodes"`` list), ``"kineto"`` (``"traceEvents"``) or
    None, from the first ``peek`` bytes of the file (gunzipped): for file names that do not say which
    trace they hold (PARAM's ``rank-N.json``).  The key seen first wins; an unreadable file is None.

    Only a first MiB is read: the list key of a host ET comes after a few short keys, and a Kineto
    trace's after its device properties and distributed info."""
    head = read_head(path, peek)
    if head is None:
        return None
    best: tuple[int, str] | None = None
    for key, kind in _KIND_KEYS:
        k = head.find(key)
        if k >= 0 and (best is None or k < best[0]):
            best = (k, kind)
    return best[1] if best else None
