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
from chakra.formats import VARINT_MAX
from chakra.io.atomic import atomic_output
from chakra.io.jsonio import read_bytes
from chakra.tunables import DECODE_BATCH_BYTES, READ_CHUNK_BYTES, WRITE_BATCH_BYTES


def encode_varint(value: int) -> bytes:
    """Base-128 varint of a non-negative integer (looked up below 2**14: lengths and most values)."""
    if 0 <= value < 16384:
        return (_VARINT_2 or _varint_table())[value]
    if value < 0:
        raise ValueError("varint of a negative number")
    if value < 2097152:   # three bytes: ids, rf_ids, sizes
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
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
    with atomic_output(path) as fh:
        return write_frames(fh.write, messages, path)


def write_frames(write: Any, messages: Iterable[Any], path: Any = None, first: int = 0,
                 observe: Any = None, batch_bytes: int = WRITE_BATCH_BYTES) -> int:
    """Frame each message (``varint(len) + bytes``; a message object is serialised first) and give the
    frames to ``write`` about ``batch_bytes`` (1 MB) at a time; return the count.  An empty message is
    refused (``path`` names the file in that error, ``first`` is the index of the first message in it).

    ``observe(index, frames)``, when given, also gets each batch once written: the index of its first
    message and its frames (a list of bytes)."""
    count = 0
    chunks: list[bytes] = []   # varint, body, varint, body ... (observed: one frame each)
    size = 0
    varint = _varint_table().__getitem__
    batch_first = first

    def flush() -> None:
        write(b"".join(chunks))
        if observe is not None:
            observe(batch_first, chunks)   # (its own list: a new one is started after)

    for msg in messages:
        body = msg if type(msg) is bytes else msg.SerializeToString()
        n = len(body)
        if not n:
            raise ValueError(f"refusing to write an empty message (index {first + count}) to {path}")
        head = varint(n) if n < 16384 else encode_varint(n)
        if observe is None:
            chunks.append(head)
            chunks.append(body)
        else:
            chunks.append(head + body)
        count += 1
        size += n
        if size >= batch_bytes:
            flush()
            batch_first = first + count
            chunks = []
            size = 0
    if chunks:
        flush()
    return count


# the varints below 2**14 (one or two bytes: frame lengths and most values), looked up instead of encoded;
# made on first use (2 ms: not in a command that writes no protobuf)
_VARINT_2: list[bytes] = []


def varint_table() -> list[bytes]:
    """The varint of every value below 2**14, by value (a list index is cheaper than a call per value)."""
    return _VARINT_2 or _varint_table()


def _varint_table() -> list[bytes]:
    if not _VARINT_2:
        _VARINT_2.extend([bytes((i,)) for i in range(128)]
                         + [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 1 << 14)])
    return _VARINT_2


# ---- batched reading (the replay's reader, chakra.replay.reader) ---------------------------------------
#
# Decoding a million messages one ``FromString`` call at a time costs more in Python calls than in
# parsing.  A length-delimited stream becomes a valid ``repeated <message> = 1`` field once every
# ``varint(len) + body`` frame gets the tag byte 0x0A in front, so a run of frames decodes with ONE call
# of a container message; the frames come in batches for that.  A plain file is read in chunks (it never
# sits in memory whole), by byte spans that separate processes can read (chakra.io.forkmap): a frame
# belongs to the span where it starts, which the reader of each span finds by walking the frame lengths
# (:meth:`FrameFile.frame_at`), so that no process scans the file for them first.


class FrameFile:
    """A length-delimited stream whose first message is decoded (``head``) and whose other messages are
    read as batches of raw frames (``varint(len) + message bytes``), by byte spans (:meth:`batches`).

    ``start`` is where message 1 begins, ``size`` where the stream ends (as at the opening).  A gzipped
    stream is decompressed whole into ``data``, as is a plain file smaller than one chunk; a larger plain
    file is opened again by each :meth:`batches`.  The errors are those of :func:`iter_messages`, raised
    at the same point of the stream: a damaged frame is reported after the batch of the messages before it.
    ``chunk_bytes`` / ``batch_bytes``: the bytes read at a time / of a batch (None: ``READ_CHUNK_BYTES`` /
    ``DECODE_BATCH_BYTES``).
    """

    def __init__(self, path: str | os.PathLike[str], first_cls: Any, *, chunk_bytes: int | None = None,
                 batch_bytes: int | None = None) -> None:
        from google.protobuf.message import DecodeError

        from chakra.io.jsonio import GZIP_MAGIC, open_input

        self.path = path
        self.chunk = READ_CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        self.batch = DECODE_BATCH_BYTES if batch_bytes is None else batch_bytes
        with open_input(path) as fh:
            try:
                buf = fh.read(self.chunk)
            except IsADirectoryError:
                raise TraceFormatError("is a directory, expected a file", path) from None
            if buf[:2] == GZIP_MAGIC:
                buf = read_bytes(path)   # the whole stream: exactly read_bytes' errors on a damaged gzip
                size = len(buf)
            elif len(buf) < self.chunk:
                size = len(buf)
            else:
                size = os.fstat(fh.fileno()).st_size
            if not buf:
                raise TraceFormatError("file is empty", path)
            head_frame, self.start, buf = _first_frame(buf, None if len(buf) == size else fh, path,
                                                       self.chunk)
        self.size = max(size, len(buf))
        self.data: bytes | None = buf if len(buf) == self.size else None
        try:
            self.head = first_cls.FromString(head_frame)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise TraceFormatError(f"message 0 is not a valid protobuf ({exc})", path) from None

    def frame_at(self, offset: int) -> tuple[int, int] | None:
        """``(offset, message index)`` of the first frame that starts at or after byte ``offset`` (inside
        the stream after message 0); None when none does.

        Walks the frame lengths from message 1 on, as a reading of the whole stream does.  At a damaged
        frame before ``offset`` (a bad length varint, a frame running past the end) there is none: the
        reading of the span that holds the damage reports it, where reading the whole stream would."""
        fh = None
        chunk = max(self.chunk, 4 * VARINT_MAX)     # (a chunk holds more than the next frame's length)
        if self.data is not None:
            buf, base, at_end = self.data, 0, True
        else:
            from chakra.io.jsonio import open_input

            fh = open_input(self.path)
            base = self.start
            fh.seek(base)
            buf = fh.read(chunk)
            at_end = len(buf) < chunk
        pos = self.start - base
        index = 1
        try:
            while True:
                n = len(buf)
                limit = n if at_end else n - VARINT_MAX
                while pos < limit:
                    if base + pos >= offset:
                        return base + pos, index
                    b = buf[pos]
                    if b < 0x80:
                        pos += b + 1
                    elif pos + 1 < n and buf[pos + 1] < 0x80:
                        pos += 2 + ((b & 0x7F) | (buf[pos + 1] << 7))
                    else:
                        try:
                            length, start = decode_varint(buf, pos)
                        except ValueError:
                            return None
                        pos = start + length
                    index += 1
                if at_end:
                    return None     # (the last frame may run past the end: damage found by its reading)
                assert fh is not None   # (whole data in memory is at its end)
                base += pos
                fh.seek(base)
                buf = fh.read(chunk)
                at_end = len(buf) < chunk
                pos = 0
        finally:
            if fh is not None:
                fh.close()

    def batches(self, start: int | None = None, stop: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
        """``(index of the batch's first message, frames)`` of the frames that start from byte ``start``
        (default: message 1) up to before byte ``stop`` (default: the end of the stream), about
        ``batch_bytes`` at a time.  Spans cut at any offsets hold every frame once: a frame belongs to
        the span where it starts (found by :meth:`frame_at`, in whichever process reads the span)."""
        if start is None:
            first: tuple[int, int] | None = (self.start, 1)
        else:
            first = self.frame_at(start)
        if first is None or (stop is not None and first[0] >= stop):
            return iter(())
        pos, index = first
        if self.data is not None:
            return _batches(self.data, pos, 0, stop, None, self.path, index, self.chunk, self.batch)
        from chakra.io.jsonio import open_input

        fh = open_input(self.path)   # closed by the generator (or below)
        try:
            fh.seek(pos)
            buf = fh.read(self.chunk)
        except BaseException:
            fh.close()
            raise
        return _batches(buf, 0, pos, stop, fh, self.path, index, self.chunk, self.batch)


def _first_frame(buf: bytes, fh: Any, path: Any, chunk: int) -> tuple[bytes, int, bytes]:
    """(body of message 0, position after it, buffer): reads on until message 0 is complete."""
    eof = fh is None
    while True:
        try:
            length, start = decode_varint(buf, 0)
        except ValueError as exc:
            if eof or str(exc) != "truncated varint":
                raise TraceFormatError(f"message 0: {exc}", path) from None
            more = fh.read(chunk)
            eof = len(more) < chunk
            buf += more
            continue
        end = start + length
        if end > len(buf):
            if eof:
                raise TraceFormatError(
                    f"message 0 is truncated: needs {length} bytes, {len(buf) - start} left", path)
            more = fh.read(max(chunk, end - len(buf)))
            eof = len(more) < max(chunk, end - len(buf))
            buf += more
            continue
        return buf[start:end], end, buf


def _batches(buf: bytes, pos: int, base: int, stop: int | None, fh: Any, path: Any,
             index: int, chunk: int, batch: int) -> Iterator[tuple[int, list[bytes]]]:
    # buf[pos:]: frames from message ``index`` on; ``base``: the stream offset of buf[0]; the frames that
    # start before ``stop`` (None: all); fh: the file to read on from (None: buf holds all of the stream)
    eof = fh is None or len(buf) < chunk
    try:
        while True:
            n = len(buf)
            last = n if stop is None else min(n, stop - base)    # frames start before this
            frames: list[bytes] = []
            append = frames.append
            limit = pos + batch
            error = None
            while pos < last:
                b = buf[pos]
                if b < 0x80:
                    start = pos + 1
                    end = start + b
                elif pos + 1 < n and buf[pos + 1] < 0x80:
                    start = pos + 2
                    end = start + ((b & 0x7F) | (buf[pos + 1] << 7))
                else:
                    try:
                        length, start = decode_varint(buf, pos)
                    except ValueError as exc:
                        if eof or str(exc) != "truncated varint":
                            error = TraceFormatError(f"message {index + len(frames)}: {exc}", path)
                        break
                    end = start + length
                if end > n:
                    if eof:
                        error = TraceFormatError(f"message {index + len(frames)} is truncated: needs "
                                                 f"{end - start} bytes, {n - start} left", path)
                    break
                append(buf[pos:end])
                pos = end
                if pos >= limit:
                    break
            if frames:
                yield index, frames
                index += len(frames)
            if error is not None:
                raise error
            if pos >= last and (last < n or eof):
                return          # (the span's end, or the stream's)
            if pos < last and pos >= limit:
                continue
            # the rest of the buffer is an incomplete frame: read on
            more = fh.read(chunk)
            if len(more) < chunk:
                eof = True
                fh.close()
            buf = buf[pos:] + more
            base += pos
            pos = 0
    finally:
        if fh is not None and not fh.closed:
            fh.close()
