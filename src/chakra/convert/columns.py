"""What the converter keeps of each node: flat per-node columns, filled from the loaded ops.

The passes of a conversion (``convert.core.run_passes``) read a few fields of every node (id, name, parent,
times, thread, stream) and everything else of only a few nodes (comm ops, the
METADATA node).  :class:`Columns` holds exactly that: parallel lists indexed by the
node's position in the file, the whole ``HostOp`` only where needed (``full``), and for
every other node its serialised inputs/outputs/attributes (``tails``, see
``convert.serial``).

:func:`load_columns` fills them while the host loader reads the nodes one at a time
(:class:`chakra.host.loader.Records`), so a million-op ET+ never exists as a million
``HostOp`` objects: most nodes go straight from their decoded fields into the columns
(:class:`_Direct`), the others (comm candidates, METADATA, unusual keys) through their
HostOp and :func:`_add_op`, which :func:`columns_from_trace` uses for every op of a loaded
HostTrace (every op kept whole).
"""

from __future__ import annotations

import contextlib
import os
from array import array
from collections.abc import Iterator, MutableSequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from msgspec import UNSET

from chakra.convert.attrs import frame_attr, make_attr
from chakra.convert.serial import (
    COMM_KEYS,
    CPU_SKIP,
    GPU_CATS,
    GPU_SKIP,
    RF_NAME,
    Serializer,
    _kineto_ids,
    int_attr,
)
from chakra.errors import TraceFormatError
from chakra.host.comm import is_nccl_kernel
from chakra.host.decode import read_document
from chakra.host.loader import Records, make_trace
from chakra.host.model import METADATA, HostOp, HostTrace, is_comm_name
from chakra.io import gc_paused


@dataclass(slots=True)
class Columns:
    """Per-node fields in file order (index = position); see the module doc."""

    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    parents: MutableSequence[int] = field(default_factory=list)   # array("q") from load_columns
    kinds: list[str] = field(default_factory=list)
    rf_ids: list[Any] = field(default_factory=list)
    threads: list[Any] = field(default_factory=list)   # ET+ kineto_tid when not None, else the host tid
    is_gpu: list[bool] = field(default_factory=list)
    # ET+ ts / dur / exclusive_dur: a float value as is, anything else (None when absent, an int, NaN, a
    # string ...) as NaN here plus the raw value in the ``*_x`` dict (absent for None); see :func:`raw`.
    ts: array[float] = field(default_factory=lambda: array("d"))
    dur: array[float] = field(default_factory=lambda: array("d"))
    excl: array[float] = field(default_factory=lambda: array("d"))
    ts_x: dict[int, Any] = field(default_factory=dict)
    dur_x: dict[int, Any] = field(default_factory=dict)
    excl_x: dict[int, Any] = field(default_factory=dict)
    skeys: list[Any] = field(default_factory=list)     # GPU ops: (device, stream), the stream chain key
    xdeps: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # index -> (inter_thread_dep, sync_dep)
    full: list[HostOp | None] = field(default_factory=list)   # the op where more than the columns is needed
    tails: list[bytes | None] | None = None             # serialised inputs+outputs+attrs (None: from full)
    index: dict[int, int] = field(default_factory=dict)  # id -> position (filled by load_columns)


_NAN = float("nan")


def raw(values: array[float], extra: dict[int, Any], i: int) -> Any:
    """The raw value of node ``i`` of a float column (see ``Columns.ts``)."""
    v = values[i]
    return v if v == v else extra.get(i)


def _put(values: array[float], extra: dict[int, Any], i: int, v: Any) -> None:
    if type(v) is float and v == v:
        values.append(v)
    else:
        values.append(_NAN)
        if v is not None:
            extra[i] = v


def is_comm_candidate(gpu: bool, name: str, collective_name: Any) -> bool:
    """Whether a node may become a comm node or take part in finding one (``collectives.find_comm``):
    a GPU node that is an NCCL kernel or carries an ET+ ``collective_name``; a host comm op."""
    if gpu:
        return is_nccl_kernel(name) or (isinstance(collective_name, str) and bool(collective_name))
    return is_comm_name(name)


def _gpu_key(a: dict[str, Any], tid: Any) -> tuple[Any, Any]:
    args = a.get("args") if isinstance(a.get("args"), dict) else {}
    stream = a.get("stream", args.get("stream", a.get("tid", tid)))
    device = a.get("device", args.get("device"))
    return (device, stream)


def _add_op(c: Columns, op: HostOp, ser: Serializer | None, interned: dict[Any, Any]) -> None:
    """Append one HostOp; with ``ser``, keep only its serialised pieces unless the converter needs it."""
    a = op.attrs
    get = a.get
    i = len(c.ids)
    c.parents.append(op.parent)   # first: an id beyond int64 fails here, before anything is appended
    c.ids.append(op.id)
    name = op.name
    c.names.append(interned.setdefault(name, name))
    c.kinds.append(op.kind)
    c.rf_ids.append(op.rf_id)
    kt = get("kineto_tid")
    c.threads.append(kt if kt is not None else op.tid)
    gpu = get("cat") in GPU_CATS
    c.is_gpu.append(gpu)
    _put(c.ts, c.ts_x, i, get("ts"))
    _put(c.dur, c.dur_x, i, get("dur"))
    _put(c.excl, c.excl_x, i, get("exclusive_dur"))
    if gpu:
        key = _gpu_key(a, op.tid)
        try:
            key = interned.setdefault(key, key)
        except TypeError:
            pass   # unhashable: the stream pass reports it
        c.skeys.append(key)
    else:
        c.skeys.append(None)
    itd = get("inter_thread_dep")
    sd = get("sync_dep")
    if itd is not None or sd is not None:
        c.xdeps[i] = (itd, sd)
    if ser is None or op.kind == METADATA or is_comm_candidate(gpu, name, get("collective_name")):
        c.full.append(op)
        if c.tails is not None:
            c.tails.append(None)
    else:
        c.full.append(None)
        parts = list(ser.op_ios(op))
        parts.extend(ser.gpu_attrs(op) if gpu else ser.cpu_attrs(op, True, False))
        c.tails.append(b"".join(parts))  # type: ignore[union-attr]


def columns_from_trace(trace: HostTrace) -> Columns:
    """Columns of a loaded HostTrace: every op kept whole (``full``), nothing pre-serialised."""
    c = Columns()
    interned: dict[Any, Any] = {}
    for op in trace.ops:
        _add_op(c, op, None, interned)
    return c


@contextlib.contextmanager
def malformed(path: str) -> Iterator[None]:
    """A field of an unexpected type deep in a pass (a list where an id belongs, a string for a size) is
    the input's fault: a TraceFormatError naming the file, the original error chained for ``--debug``."""
    try:
        yield
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        raise TraceFormatError(
            f"a node field has an unexpected type or value ({type(exc).__name__}: {str(exc)[:120]}); "
            "--debug shows where", path) from exc


def load_columns(path: str | os.PathLike[str]) -> tuple[HostTrace, Columns, Serializer]:
    """Load an ET+ / host ET for the converter: ``(trace, columns, serializer)``.

    ``trace`` is the HostTrace of ``load_host_et`` (same top-level fields, process groups,
    warnings) except that its ``ops`` are only the ops kept whole (``columns.full``) and
    ``by_id`` is empty.  Errors are those of ``load_host_et``.
    """
    with gc_paused():
        doc = read_document(path)
        records = Records(doc)
        builder = records.builder
        ser = Serializer()
        c = Columns(tails=[], parents=array("q"))
        interned: dict[Any, Any] = {}
        kept: list[HostOp] = []
        index = c.index
        full = c.full
        fast = _Direct(c, ser, interned, builder.layout)
        with malformed(doc.path):
            for i, n, core in records.records():
                nid = core[0]
                at = index.setdefault(nid, i)
                if at != i:
                    raise TraceFormatError(f"duplicate node id {nid} (indices {at} and {i})", doc.path)
                try:
                    if fast.add(n, core):
                        continue
                    op = builder.host_op(i, n, core)
                    _add_op(c, op, ser, interned)
                except OverflowError:   # a parent id beyond int64: a plain list holds it (nothing appended)
                    c.parents = list(c.parents)
                    fast.parents = c.parents.append
                    if fast.add(n, core):
                        continue
                    op = builder.host_op(i, n, core)
                    _add_op(c, op, ser, interned)
                if full[-1] is not None:
                    kept.append(op)
        trace = make_trace(doc.top, builder.layout, kept, {}, records.warnings, doc.path)
    return trace, c, ser


# ET+ keys a node may have besides its layout's own that become attributes of a CPU / GPU node (the
# others are read into columns or skipped); a node with any of them, or whose attrs list has a key the
# converter reads from the node, takes the general path (its HostOp through _add_op)
_NODE_KEYS = ("cat", "ph", "ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "stream", "device",
              "tid", "pid", "args", "pg_name", "collective_name", "comm_size", "comm_backend",
              "inter_thread_dep", "sync_dep", "parent", "ctrl_deps", "rf_id", "fw_parent", "seq_id", "scope",
              "fw_tid", "op_schema")


def _emitted(layout: str, skip: frozenset[str]) -> Any:
    flat_own = {"parent", "rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema"}
    own = flat_own if layout == "flat" else {"ctrl_deps"}
    names = [k for k in _NODE_KEYS if k not in own and k not in skip and k != "is_cpu_op"]
    # (with the id, so that the getter always gives a tuple)
    return attrgetter("id", *names), len(names)


class _Direct:
    """Columns and tail of a node straight from its decoded fields (no HostOp, no attribute dict): what
    ``_add_op`` would append for the HostOp of the same node, for every node it would not keep whole and
    whose ET+ keys are the usual ones (see ``_NODE_KEYS``).  Returns False, appending nothing, otherwise."""

    def __init__(self, c: Columns, ser: Serializer, interned: dict[Any, Any], layout: str) -> None:
        self.c = c
        self.ser = ser
        self.interned = interned
        self.parents = c.parents.append
        # the other columns keep their list objects: their appends are bound once
        self.appends = (c.ids.append, c.names.append, c.kinds.append, c.rf_ids.append, c.threads.append,
                        c.is_gpu.append, c.skeys.append, c.full.append, c.tails.append)  # type: ignore[union-attr]
        self.cpu_emitted = _emitted(layout, CPU_SKIP)
        self.gpu_emitted = _emitted(layout, GPU_SKIP | COMM_KEYS)
        self.comm_names: dict[str, bool] = {}
        self.clean: dict[int, tuple[dict[str, Any], bool]] = {}   # id(attrs list part) -> no key read here

    def add(self, n: Any, core: tuple[Any, ...]) -> bool:
        if n.extra is not None:
            return False   # the generic route: file order matters, the general path keeps it
        nid, name, parent, kind, rf, tid, fp, sq, sc, ft, osc, attrs, types, io = core
        if kind == METADATA:
            return False
        if attrs:
            got = self.clean.get(id(attrs))
            if got is None or got[0] is not attrs:
                if len(self.clean) > 10_000:
                    self.clean.clear()
                got = self.clean[id(attrs)] = (attrs, attrs.keys().isdisjoint(_NODE_KEYS))
            if not got[1]:
                return False
        cat = n.cat
        gpu = cat is not UNSET and cat in GPU_CATS
        coll = n.collective_name
        if gpu:
            if is_nccl_kernel(name) or (coll is not UNSET and isinstance(coll, str) and coll):
                return False
            get, count = self.gpu_emitted
        else:
            comm = self.comm_names.get(name)
            if comm is None:
                comm = self.comm_names[name] = is_comm_name(name)
            if comm:
                return False
            get, count = self.cpu_emitted
        if get(n).count(UNSET) != count:   # (the id is never UNSET)
            return False
        c = self.c
        i = len(c.ids)
        self.parents(parent)   # first: an id beyond int64 fails here, before anything is appended
        ids, names, kinds, rf_ids, threads, is_gpu, skeys, full, tails = self.appends
        ids(nid)
        interned = self.interned
        names(interned.setdefault(name, name))
        kinds(kind)
        rf_ids(rf)
        kt = n.kineto_tid
        if kt is UNSET:
            kt = None
        threads(kt if kt is not None else tid)
        is_gpu(gpu)
        v = n.ts
        _put(c.ts, c.ts_x, i, None if v is UNSET else v)
        v = n.dur
        _put(c.dur, c.dur_x, i, None if v is UNSET else v)
        v = n.exclusive_dur
        _put(c.excl, c.excl_x, i, None if v is UNSET else v)
        ser = self.ser
        if gpu:
            args = n.args
            if not isinstance(args, dict):
                args = {}
            stream = n.stream
            if stream is UNSET:
                if "stream" in args:
                    stream = args["stream"]
                else:
                    stream = n.tid
                    if stream is UNSET:
                        stream = tid
            device = n.device
            if device is UNSET:
                device = args.get("device")
            key = (device, stream)
            try:
                key = interned.setdefault(key, key)
            except TypeError:
                pass   # unhashable: the stream pass reports it
            skeys(key)
            parts = [*ser.op_ios_text(io), ser.gpu_block(stream, device, cat)]
            _kineto_ids(args, parts)
            if attrs:
                parts.append(ser.list_attrs(attrs, types, True))
        else:
            skeys(None)
            parts = [*ser.op_ios_text(io), ser.cpu_block(True, kt, tid)]
            if rf is not None:
                parts.append(int_attr(RF_NAME, "rf_id", rf) if type(rf) is int else
                             frame_attr(make_attr("rf_id", rf)))
            parts.append(ser.fixed_block(fp, sq, sc, ft, osc))
            if attrs:
                parts.append(ser.list_attrs(attrs, types, False))
        itd = n.inter_thread_dep
        sd = n.sync_dep
        if itd is UNSET:
            itd = None
        if sd is UNSET:
            sd = None
        if itd is not None or sd is not None:
            c.xdeps[i] = (itd, sd)
        full(None)
        tails(b"".join(parts))
        return True
