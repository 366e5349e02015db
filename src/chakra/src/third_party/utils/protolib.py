"""``chakra.src.third_party.utils.protolib``: the reference toolkit's stream helpers, by the same names.

Scripts written for MLCommons Chakra (ASTRA-sim's own workload generators among them) read and write ET
files one length-prefixed message at a time with this API::

    et = openFileRd("trace.0.et")            # plain or gzip (told by its first bytes)
    gm, node = GlobalMetadata(), Node()
    decodeMessage(et, gm)
    while decodeMessage(et, node):
        ...
    encodeMessage(out_file, node)            # varint length, then the message

The framing is the one :mod:`chakra.io.pbstream` reads and writes.  Behaviour kept from the reference:
``decodeMessage`` returns False at the end of the file and at a zero-length frame, and parses with
``ParseFromString`` (the message is cleared first); ``encodeMessage`` writes whatever the message
serialises to, even zero bytes (readers take that as the end: give a GlobalMetadata a ``version``).
Different on purpose: a file that ends inside a length prefix or a message raises TraceFormatError
naming the file, instead of being read as a shorter trace.
"""

from __future__ import annotations

import gzip
import os
from typing import IO, Any, cast

from chakra.errors import TraceFormatError
from chakra.io.pbstream import encode_varint

__all__ = ["decodeMessage", "encodeMessage", "openFileRd"]

_GZIP_MAGIC = b"\x1f\x8b"


def openFileRd(in_file: str | os.PathLike[str]) -> IO[bytes]:  # noqa: N802 (the reference's name)
    """Open an ET for reading, gunzipping it when its first two bytes are the gzip magic."""
    try:
        fh: IO[bytes] = open(in_file, "rb")  # noqa: SIM115 (the caller closes it)
    except OSError as exc:
        raise FileNotFoundError(f"Failed to open {os.fspath(in_file)} for reading ({exc.strerror or exc})") \
            from None
    if fh.read(2) == _GZIP_MAGIC:
        fh.close()
        return cast(IO[bytes], gzip.open(in_file, "rb"))   # (a binary file; the stubs do not say IO)
    fh.seek(0)
    return fh


def _read_varint(in_file: IO[bytes]) -> int | None:
    """The next length prefix, or None at a clean end of file."""
    result = shift = 0
    first = True
    while True:
        byte = in_file.read(1)
        if not byte:
            if first:
                return None
            raise TraceFormatError("the file ends inside a message length", _name(in_file))
        b = byte[0]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
        first = False
        if shift > 63:
            raise TraceFormatError("a message length longer than 10 bytes", _name(in_file))


def decodeMessage(in_file: IO[bytes], message: Any) -> bool:  # noqa: N802 (the reference's name)
    """Read the next message of the stream into ``message``; False at the end (nothing read)."""
    size = _read_varint(in_file)
    if not size:   # end of file, or a zero-length frame (the reference stops there too)
        return False
    buf = in_file.read(size)
    if len(buf) < size:
        raise TraceFormatError(f"a message of {size} bytes is cut off after {len(buf)}", _name(in_file))
    message.ParseFromString(buf)
    return True


def encodeMessage(out_file: IO[bytes], message: Any) -> None:  # noqa: N802 (the reference's name)
    """Append ``message`` to the stream: its serialised length as a varint, then the bytes."""
    body = message.SerializeToString()
    out_file.write(encode_varint(len(body)) + body)


def _name(fh: IO[bytes]) -> str | None:
    name = getattr(fh, "name", None)
    return os.fsdecode(name) if isinstance(name, (str, bytes)) else None
