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


def write_messages(path: str | os.PathLike[str], messages: Iterable[Any]) -> int:
    """Serialize messages into a length-delimited stream, atomically; return the count."""
    count = 0
    chunks: list[bytes] = []
    for msg in messages:
        body = msg.SerializeToString()
        if not body:
            raise ValueError(f"refusing to write an empty message (index {count}) to {path}")
        chunks.append(encode_varint(len(body)))
        chunks.append(body)
        count += 1
    with atomic_output(path) as fh:
        fh.write(b"".join(chunks))
    return count
