"""The host ET as the linker of a large trace holds it: inputs/outputs as JSON text.

A host op's inputs and outputs (values, shapes, types: lists of lists of numbers and strings) are most of
the memory of a loaded host ET, about 1 KB per op as Python objects.  The linker reads them for nothing but
a few ops (communication records, ``## process_group:init ##``); everything else it only writes back, into
the op's ET+ node and into the nodes of the GPU ops it launched.  So for a large file, each chunk of
parsed nodes is turned into ops as :func:`chakra.host.loader.load_host_et` makes them, and then every op's
inputs/outputs are encoded once as the JSON text the ET+ writer needs
(:func:`chakra.link.etplus.io_fragment_text`) and, except where the linker reads them, replaced by one
shared empty ``IOInfo``.  The text is a fraction of the objects' size, and the writer copies it instead of
encoding the lists again.

Small files (read in one piece by the host loader) are loaded as usual, with no texts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import chain
from operator import attrgetter
from typing import Any

from chakra.host import loader as host_loader
from chakra.host.model import METADATA, HostOp, HostTrace, IOInfo, is_comm_name
from chakra.io import gc_paused
from chakra.io.forked import ForkedCall, may_fork
from chakra.io.jsonio import iter_json_array
from chakra.link.etplus import FLAT, host_node, io_fragment_text

# shared by every op whose inputs/outputs are held as text; nothing in the linker writes to them
_NO_IO = IOInfo([], [], [], None)
_NO_ATTRS: dict[str, Any] = {}


def load_host_for_link(path: str | os.PathLike[str]) -> tuple[HostTrace, list[bytes] | None]:
    """The host ET, and the inputs/outputs JSON text of each op (by ``op.index``), or None when the
    file is small enough to be loaded as usual (then every op keeps its lists).

    Results, warnings and errors are those of ``load_host_et``: anything unexpected on the chunked path
    falls back to it."""
    spath = os.fspath(path)
    with gc_paused():
        streamed = iter_json_array(spath, "nodes")
        if streamed is not None:
            try:
                return _load_streamed(streamed[0], streamed[1], spath)
            except Exception:  # noqa: BLE001 (load_host_et decides what is wrong, and says it)
                pass
        return host_loader.load_host_et(spath), None


def _load_streamed(top: dict[str, Any], chunks: Any, path: str) -> tuple[HostTrace, list[bytes]]:
    schema, layout, warnings, items = _read_ops(top, chunks, path)
    flat = layout == FLAT
    ops: list[HostOp] = []
    by_id: dict[int, HostOp] = {}
    texts: list[bytes] = []
    for op, io in items:
        if op.id in by_id:
            raise ValueError("duplicate ids")  # load_host_et names them
        by_id[op.id] = op
        ops.append(op)
        texts.append(io)
        _make_lean(op, flat)
    return host_loader._make_trace(top, schema, layout, ops, by_id, warnings, path), texts


def _read_ops(top: dict[str, Any], chunks: Any, path: str
              ) -> tuple[Any, str, list[str], Iterator[tuple[HostOp, bytes]]]:
    """``(schema, layout, warnings, ops)`` of a host ET read in chunks: the layout detected (and its
    warnings logged) on the first chunk; ``ops`` yields each op as ``load_host_et`` makes it, numbered by
    its position in the file, with its inputs/outputs text.  No chunk's ops are kept here."""
    first = next(chunks, [])
    schema = top.get("schema")
    warnings: list[str] = []
    layout = host_loader._detect_layout(schema, first, path, warnings)
    return schema, layout, warnings, _ops(chain((first,), chunks), layout)


def _ops(chunks: Iterator[list[Any]], layout: str) -> Iterator[tuple[HostOp, bytes]]:
    parse = host_loader._parse_flat if layout == FLAT else host_loader._parse_chakra
    index = 0
    for chunk in chunks:
        ops: list[HostOp] = []
        parse(chunk, ops, {})
        del chunk
        for op in ops:
            op.index = index  # the parser numbers the nodes of each call from 0
            index += 1
            yield op, io_fragment_text(op, layout)


# ---- the host ET loaded beside the Kineto trace -------------------------------------------------------
#
# Loading a large host ET and loading its Kineto trace are independent and each takes seconds of one core.
# On a machine with a second core (and fork), a child process loads the host ET as above while this process
# loads the Kineto trace.  The child hands back columns, not objects: one list per HostOp field (plain
# ints and strings pickle an order of magnitude faster than a million objects), the inputs/outputs texts,
# and whole the few ops that keep lists or attributes.  This process rebuilds the ops from the columns,
# all sharing the one empty IOInfo and attribute dict, exactly as the in-process load leaves them.

_FIELDS = ("id", "name", "parent", "kind", "rf_id", "tid", "fw_parent", "seq_id", "scope", "fw_tid",
           "op_schema")


def _make_lean(op: HostOp, flat: bool) -> bool:
    """Replace the op's lists (and empty attribute dicts) by the shared empty ones where the linker does
    not read them; True when the op keeps anything of its own (then it travels whole from a child)."""
    if op.kind == METADATA or is_comm_name(op.name):
        return True  # read by the process-group table and the collectives' fields
    if flat and (op.inputs.strides is not None or op.outputs.strides is not None):
        return True  # flat strides are separate keys, written from the op itself
    op.inputs = _NO_IO
    op.outputs = _NO_IO
    if op.attrs:
        kept = True
    else:
        op.attrs = _NO_ATTRS
        kept = False
    if op.attr_types:
        return True
    op.attr_types = _NO_ATTRS
    return kept


def _large(path: str) -> bool:
    """Whether ``iter_json_array`` will read this file in chunks (the size test it makes first)."""
    from chakra.io import jsonio

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                size *= 4
    except OSError:
        return False
    return size >= jsonio.STREAM_MIN_BYTES


class HostLoad:
    """The host ET for the linker, loaded in a child process when that can save time (see above).

    ``result()`` returns what :func:`load_host_for_link` returns, and raises what it raises: whenever the
    child cannot deliver (an error in the file, no fork, a crash), the load is done again here.

    The child also writes the JSON text of every host op's ET+ node without its link fields (what
    ``host_node`` gives) to a second unnamed file: ``node_texts`` then iterates them in op order (None
    when the child did not deliver), and the writer only appends each node's link fields."""

    def __init__(self, path: str | os.PathLike[str], parallel: bool | None = None) -> None:
        self.path = os.fspath(path)
        self.node_texts: NodeTexts | None = None
        self._fd: int | None = None
        self._child: ForkedCall | None = None
        if parallel is None:
            parallel = may_fork() and _large(self.path)
        if parallel:
            import tempfile

            fd, name = tempfile.mkstemp(prefix="chakra-nodes-", suffix=".json")
            os.unlink(name)
            self._fd = fd
            self._child = ForkedCall(_columns, self.path, fd)
            if not self._child.started:
                self.cancel()

    @property
    def started(self) -> bool:
        return self._child is not None and self._child.started

    def result(self) -> tuple[HostTrace, list[bytes] | None]:
        if self._child is not None:
            got = self._child.result()
            self._child = None
            if got is not None and self._fd is not None:
                trace, columns, special, texts, lengths = got
                self.node_texts = NodeTexts(self._fd, lengths)
                self._fd = None
                with gc_paused():
                    return _from_columns(trace, columns, special, texts)
            self.cancel()
        return load_host_for_link(self.path)

    def cancel(self) -> None:
        """Stop the child (the link failed before it was needed); release the files."""
        if self._child is not None:
            self._child.cancel()
            self._child = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.node_texts is not None:
            self.node_texts.close()
            self.node_texts = None


class NodeTexts:
    """The host nodes' JSON texts the child wrote, read back in order a block at a time."""

    def __init__(self, fd: int, lengths: Any) -> None:
        self._fd: int | None = fd
        self.lengths = lengths

    def __iter__(self) -> Any:
        fd = self._fd
        if fd is None:
            raise ValueError("node texts already closed")
        os.lseek(fd, 0, os.SEEK_SET)
        buf = b""
        at = 0
        for n in self.lengths:
            if at + n > len(buf):
                buf = buf[at:] + os.read(fd, max(_TEXT_BLOCK, n))
                at = 0
                while n > len(buf):
                    more = os.read(fd, _TEXT_BLOCK)
                    if not more:
                        raise ValueError("node texts file is short")
                    buf += more
            yield buf[at:at + n]
            at += n

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_TEXT_BLOCK = 8 << 20


def _columns(path: str, fd: int) -> tuple[HostTrace, list[list[Any]], dict[int, HostOp], list[bytes], Any]:
    """In the child: the host ET read a chunk at a time into columns, the inputs/outputs texts and the
    ops that keep their lists (as :func:`_load_streamed` leaves them); each op's node text goes to ``fd``.
    No chunk's ops outlive it: the child stays small while the parent reads the Kineto trace."""
    from array import array

    import orjson

    with gc_paused():
        streamed = iter_json_array(path, "nodes")
        if streamed is None:
            raise ValueError("not read in chunks")
        top, chunks = streamed
        schema, layout, warnings, items = _read_ops(top, chunks, path)
        flat = layout == FLAT
        columns: list[list[Any]] = [[] for _ in _FIELDS]
        appends = [c.append for c in columns]
        names = columns[_FIELDS.index("name")]
        intern = {}.setdefault
        fields = [attrgetter(f) for f in _FIELDS]
        texts: list[bytes] = []
        lengths = array("Q")
        special: dict[int, HostOp] = {}
        seen: set[int] = set()
        dumps = orjson.dumps
        fragment = orjson.Fragment
        with os.fdopen(os.dup(fd), "wb", buffering=_TEXT_BLOCK) as out:
            for op, io in items:
                if op.id in seen:
                    raise ValueError("duplicate ids")  # load_host_et names them
                seen.add(op.id)
                texts.append(io)
                text = dumps(host_node(op, layout, fragment(io)))
                out.write(text)
                lengths.append(len(text))
                for add, get in zip(appends, fields):
                    add(get(op))
                # one str per distinct name: smaller here, in the pickle (memoised) and in the parent
                names[-1] = intern(op.name, op.name)
                if _make_lean(op, flat):
                    special[op.index] = op
        del seen
        kept = list(special.values())
        trace = host_loader._make_trace(top, schema, layout, kept, {op.id: op for op in kept}, warnings, path)
        trace.ops = []
        trace.by_id = {}
        return trace, columns, special, texts, lengths


def _from_columns(trace: HostTrace, columns: list[list[Any]], special: dict[int, HostOp],
                  texts: list[bytes]) -> tuple[HostTrace, list[bytes]]:
    no_io, no_attrs = _NO_IO, _NO_ATTRS
    ops = [HostOp(nid, name, parent, kind, rf_id, tid, fw_parent, seq_id, scope, fw_tid, op_schema,
                  no_io, no_io, no_attrs, no_attrs, index)
           for index, (nid, name, parent, kind, rf_id, tid, fw_parent, seq_id, scope, fw_tid, op_schema)
           in enumerate(zip(*columns))]
    del columns
    for index, op in special.items():
        ops[index] = op
    trace.ops = ops
    trace.by_id = {op.id: op for op in ops}
    return trace, texts
