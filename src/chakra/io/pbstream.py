"""Length-delimited protobuf streams: ``varint(len) + message`` repeated.

A Chakra ET file is one ``GlobalMetadata`` followed by one ``Node`` per node.
Readers of other projects stop at a zero-length message, so the writer refuses
to emit one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from chakra.errors import TraceFormatError
from chakra.io.atomic import atomic_output
from chakra.io.jsonio import read_bytes


def encode_varint(value: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if value < 0:
        raise ValueError("varint of a negative number")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Return ``(value, new_pos)``; raise ValueError on a truncated varint."""
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def iter_frames(data: bytes, path: str | os.PathLike[str] | None = None) -> Iterator[bytes]:
    """Yield the raw message bytes of a length-delimited stream."""
    view = memoryview(data)
    pos = 0
    n = len(data)
    index = 0
    while pos < n:
        try:
            length, start = decode_varint(view, pos)
        except ValueError as exc:
            raise TraceFormatError(f"message {index}: {exc}", path) from None
        end = start + length
        if end > n:
            raise TraceFormatError(
                f"message {index} is truncated: needs {length} bytes, {n - start} left", path
            )
        yield bytes(view[start:end])
        pos = end
        index += 1


def read_messages(path: str | os.PathLike[str], first_cls: Any, rest_cls: Any) -> tuple[Any, list[Any]]:
    """Read ``first_cls`` then any number of ``rest_cls`` from a (possibly gzipped) stream."""
    from google.protobuf.message import DecodeError

    data = read_bytes(path)
    if not data:
        raise TraceFormatError("file is empty", path)
    head = None
    rest: list[Any] = []
    for i, frame in enumerate(iter_frames(data, path)):
        try:
            if i == 0:
                head = first_cls.FromString(frame)
            else:
                rest.append(rest_cls.FromString(frame))
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise TraceFormatError(f"message {i} is not a valid protobuf ({exc})", path) from None
    return head, rest


def iter_messages(path: str | os.PathLike[str], first_cls: Any, rest_cls: Any) -> tuple[Any, Iterator[Any]]:
    """Like :func:`read_messages`, but the ``rest_cls`` messages are decoded one at a time as the returned
    iterator is consumed (a reader that keeps only a few fields of each never holds a million messages).
    Errors are the same as ``read_messages``'s; those of a later message surface during iteration."""
    from google.protobuf.message import DecodeError

    data = read_bytes(path)
    if not data:
        raise TraceFormatError("file is empty", path)
    frames = iter_frames(data, path)
    frame = next(frames, None)
    head = None
    if frame is not None:
        try:
            head = first_cls.FromString(frame)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise TraceFormatError(f"message 0 is not a valid protobuf ({exc})", path) from None

    def rest() -> Iterator[Any]:
        parse = rest_cls.FromString
        for i, frame in enumerate(frames, 1):
            try:
                msg = parse(frame)
            except (DecodeError, RuntimeError, ValueError) as exc:
                raise TraceFormatError(f"message {i} is not a valid protobuf ({exc})", path) from None
            yield msg

    return head, rest()


def write_messages(path: str | os.PathLike[str], messages: Iterable[Any]) -> int:
    """Serialize messages into a length-delimited stream, atomically; return the count.

    An item may also be a message already serialised (``bytes``): it is framed as is.
    """
    # Streamed: the frames go to the temporary file in ~1 MB batches as the messages are produced, so a
    # million-node trace never exists twice in memory (the list of frames and their join); the file still
    # appears only complete (atomic_output renames on success and removes the part file on any error).
    count = 0
    chunks: list[bytes] = []
    size = 0
    varint = _VARINT_1.__getitem__
    with atomic_output(path) as fh:
        write = fh.write
        for msg in messages:
            body = msg if type(msg) is bytes else msg.SerializeToString()
            n = len(body)
            if not n:
                raise ValueError(f"refusing to write an empty message (index {count}) to {path}")
            chunks.append(varint(n) if n < 128 else encode_varint(n))
            chunks.append(body)
            count += 1
            size += n
            if size >= _BATCH:
                write(b"".join(chunks))
                chunks.clear()
                size = 0
        if chunks:
            write(b"".join(chunks))
    return count


_BATCH = 1 << 20
_VARINT_1 = [bytes((i,)) for i in range(128)]
