"""The typed model of a Kineto (PyTorch profiler) trace: one compact record per X event."""

from __future__ import annotations

import math
import pickle
from array import array
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

import msgspec
import orjson

from chakra.tunables import PICKLE_CHUNK_EVENTS

# KinetoEvent.kind values (ints: cheap to compare and store)
HOST_OP = 0        # cat cpu_op
ANNOTATION = 1     # cat user_annotation (ProfilerStep#N, record_function, gloo:*, nccl:*)
RUNTIME = 2        # cuda_runtime / hip runtime, non-launching, non-sync
LAUNCH = 3         # runtime/driver call that launches GPU work (has a correlation to a GPU op)
SYNC = 4           # synchronizing runtime call (device/stream/event synchronize, sync memcpy)
DRIVER = 5         # cuda_driver, non-launching
KERNEL = 6         # cat kernel
MEMCPY = 7         # cat gpu_memcpy
MEMSET = 8         # cat gpu_memset
FLOW = 9           # ph s/f (ac2g, fwdbwd)
OTHER = 10         # python_function, Trace, instant, metadata, anything else

# Kineto category (lower-cased) -> base kind.  RUNTIME / DRIVER are refined by name (chakra.device.kinds).
# Older Kineto versions wrote "Operator", "Runtime", "Kernel", "Memcpy", "Memset".  Accelerators other than
# CUDA and ROCm record their own categories (Kineto's activity types): MTIA's host runtime calls are
# ``mtia_runtime`` and its on-device work ``mtia_ccp_events`` (Kineto's alias of a concurrent kernel);
# Intel XPU and PrivateUse1 backends write ``xpu_runtime`` / ``xpu_driver`` and ``privateuse1_runtime`` /
# ``privateuse1_driver`` beside ``kernel`` events.  They pair by ``correlation`` as on CUDA.
CATEGORY_KIND: dict[str, int] = {
    "cpu_op": HOST_OP,
    "operator": HOST_OP,
    "user_annotation": ANNOTATION,
    "cuda_runtime": RUNTIME,
    "hip_runtime": RUNTIME,
    "runtime": RUNTIME,
    "mtia_runtime": RUNTIME,
    "xpu_runtime": RUNTIME,
    "privateuse1_runtime": RUNTIME,
    "cuda_driver": DRIVER,
    "hip_driver": DRIVER,
    "driver": DRIVER,
    "xpu_driver": DRIVER,
    "privateuse1_driver": DRIVER,
    "kernel": KERNEL,
    "mtia_ccp_events": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    # everything else is OTHER: python_function, Trace, gpu_user_annotation (a GPU-side mirror of an
    # annotation, not a host op), cpu_instant_event, overhead, ...
    "gpu_user_annotation": OTHER,
    "python_function": OTHER,
    "trace": OTHER,
}

#: OTHER categories (lower-cased) that hold no work of their own to model: Python frames (the time between
#: operators, kept as a thread's gaps), the profiler's span and overhead, GPU-side mirrors of annotations,
#: instants, and CUPTI's records of synchronisations and events (the runtime calls that made them are
#: modelled).  An OTHER category outside this set is reported as not modelled (``KinetoTrace.not_modelled``).
NOTHING_TO_MODEL = frozenset(("python_function", "trace", "gpu_user_annotation", "cpu_instant_event",
                              "overhead", "cuda_sync", "cuda_event", "xpu_sync", "external_correlation"))

#: What an unmodelled category is, when known (the note that names it says so)
NOT_MODELLED_WHY: dict[str, str] = {
    "cuda_profiler_range": "CUPTI range-profiler records: a kernel's counters over a range of the profiler's "
                           "own, not the kernel's time; the GPU work shows only as the CPU's waits for it",
}

GPU_KINDS = frozenset((KERNEL, MEMCPY, MEMSET))
CPU_KINDS = frozenset((HOST_OP, ANNOTATION, RUNTIME, LAUNCH, SYNC, DRIVER))

#: the ``args`` of an event whose args no stage reads: shared, never written to
NO_ARGS: dict[str, Any] = {}


class KinetoEvent(msgspec.Struct, gc=False):
    """One Kineto X event. Times are in microseconds (float: Kineto writes fractions).

    A msgspec Struct without GC tracking: the cyclic collector never walks a million of them.  Made by the
    loader, positionally in this field order.  Its position in the file's ``traceEvents`` is
    ``KinetoTrace.file_index[position]`` (only messages need it: a column, not a field of every record).
    """

    kind: int
    name: str
    cat: str
    pid: Any
    tid: Any
    ts: float
    dur: float
    external_id: int | None = None
    rf_id: int | None = None        # args["Record function id"]
    correlation: int | None = None  # launch <-> GPU op
    stream: int | None = None
    device: int | None = None
    # What :attr:`args` returns: the args object where a stage reads more than the fields above --
    # synchronizing calls (which stream they wait on) and, loaded with ``op_args``, host ops and
    # annotations (a Kineto-only link's inputs and collective fields) hold it decoded; GPU events (written
    # into ET+) hold its JSON text as orjson writes it (``chakra.device.decode.args_text``: what ET+ holds),
    # decoded when asked (a decoded args object is about four times its text); every other event holds
    # NO_ARGS.
    args_source: dict[str, Any] | bytes = msgspec.field(default_factory=lambda: NO_ARGS)
    excl_dur: float = 0.0           # exclusive duration on its thread (CPU events)
    parent: int | None = None       # position in KinetoTrace.events of the innermost enclosing CPU event
                                    # on the same (pid, tid); None for GPU/OTHER events and thread roots
    # True when the call blocks the host until GPU work is done: every SYNC event, and synchronous
    # copies (cudaMemcpy, hipMemcpyWithStream, ...) which are LAUNCH events that also synchronize.
    is_sync: bool = False
    collective: bool = False        # args holds "Collective name" (Kineto labels a collective's kernel)

    ph: ClassVar[str] = "X"         # only X events are kept

    @property
    def args(self) -> dict[str, Any]:
        """The event's ``args`` object (see ``args_source``); a new dict on each call for GPU events."""
        src = self.args_source
        return orjson.loads(src) if isinstance(src, bytes) else src

    @property
    def end(self) -> float:
        return self.ts + self.dur


class StepWindow(NamedTuple):
    """A ProfilerStep#N (or user-chosen annotation) window."""

    name: str
    ts: float
    dur: float


@dataclass(slots=True)
class KinetoTrace:
    """A loaded Kineto trace."""

    path: str
    events: list[KinetoEvent] = field(default_factory=list)   # X events only, file order
    # position in the file's traceEvents of each event (for messages): file_index[i] of events[i]
    file_index: array[int] = field(default_factory=lambda: array("q"))
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    trace_name: str | None = None
    steps: list[StepWindow] = field(default_factory=list)     # ProfilerStep#N windows in time order
    # positions in ``events`` (trace.events[i]), not traceEvents indices
    launch_by_correlation: dict[int, int] = field(default_factory=dict)  # correlation -> event index
    gpu_by_correlation: dict[int, list[int]] = field(default_factory=dict)
    # the other top-level keys PyTorch writes (``chakra.device.decode.TOP_KEYS``: schemaVersion,
    # baseTimeNanoseconds, host_name, ...); keys outside that table are not read
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)  # the raw distributedInfo object
    flow_count: int = 0                                        # ph s/f events (not kept in events)
    # positions in ``events`` by role, in file order (filled by the loader once the kinds are final, so
    # that the linker's passes need not walk every event): host ops and annotations, GPU ops (kernels,
    # copies, sets), synchronizing calls (``is_sync``)
    op_positions: list[int] = field(default_factory=list)
    gpu_positions: list[int] = field(default_factory=list)
    sync_positions: list[int] = field(default_factory=list)
    # counters: events_total, x_events, per-kind counts ("kernel", "launch", ...), flows,
    # ac2g_confirmed, gpu_without_launch, launch_without_gpu, overrun_children, clamped_durations
    stats: dict[str, int] = field(default_factory=dict)
    # X events of categories nothing models (not a host op, runtime call or GPU op, not in
    # NOTHING_TO_MODEL): category as written -> count, in order of first appearance
    not_modelled: dict[str, int] = field(default_factory=dict)
    # :meth:`cpu_clock`, once computed
    cpu_clock_memo: tuple[int | None, float | None] | None = None

    def cpu_clock(self) -> tuple[int | None, float | None]:
        """(the most common integer pid, the first ts) of the CPU-side events, (None, None) without any:
        what tells whether a host ET comes from the same run (``chakra.link.provenance``).  Computed once,
        in one pass (``load_pair``'s child does it while the host ET is still loading)."""
        got = self.cpu_clock_memo
        if got is None:
            pids: dict[int, int] = {}
            first = math.inf
            cpu = CPU_KINDS
            get = pids.get
            for e in self.events:
                if e.kind in cpu:
                    if e.ts < first:
                        first = e.ts
                    pid = e.pid
                    if type(pid) is int:
                        pids[pid] = get(pid, 0) + 1
            # the most common pid; among equal counts the first seen (as Counter.most_common says it)
            pid_of = max(pids, key=pids.__getitem__) if pids else None
            got = self.cpu_clock_memo = (pid_of, None if first == math.inf else first)
        return got

    @property
    def span(self) -> tuple[float, float]:
        """(first ts, last end) over the CPU and GPU activity (host ops, annotations, runtime calls,
        kernels, copies).  The profiler's own ``Trace`` span and Python frames are left out: the
        profiler's window includes idle time before the first and after the last op, which no replay
        of the ops can reproduce.  (0, 0) when there is no activity."""
        lo, hi = math.inf, -math.inf
        for e in self.events:
            if e.kind in CPU_KINDS or e.kind in GPU_KINDS:
                if e.ts < lo:
                    lo = e.ts
                if e.ts + e.dur > hi:
                    hi = e.ts + e.dur
        return (0.0, 0.0) if lo > hi else (lo, hi)

    def __reduce__(self) -> tuple[Any, tuple[list[Any]]]:
        """Pickled with its events in pickles of :data:`PICKLE_CHUNK_EVENTS` events each (a forked loader
        sends the trace back pickled, ``chakra.link.api.load_pair``): one pickle of a million events keeps a
        memo entry for every object in it, which made the dump take 3.2 s and 300 MB more at 1.65M events;
        in chunks it takes 1.3 s and the memo stays small.  Each chunk has its own copy of the strings
        and of the empty ``NO_ARGS`` dict its events share (equal, not the same object)."""
        return self.reduce_in_chunks()

    def reduce_in_chunks(self, chunk: int = PICKLE_CHUNK_EVENTS) -> tuple[Any, tuple[list[Any]]]:
        """:meth:`__reduce__` with the events in pickles of ``chunk`` events each."""
        values = [getattr(self, name) for name in _TRACE_FIELDS]
        ev = self.events
        values[_EVENTS_AT] = [pickle.dumps(ev[a:a + chunk], protocol=pickle.HIGHEST_PROTOCOL)
                              for a in range(0, len(ev), chunk)]
        return _unpickle_trace, (values,)


_TRACE_FIELDS = tuple(f.name for f in fields(KinetoTrace))
_EVENTS_AT = _TRACE_FIELDS.index("events")


def _unpickle_trace(values: list[Any]) -> KinetoTrace:
    events: list[KinetoEvent] = []
    for chunk in values[_EVENTS_AT]:
        events.extend(pickle.loads(chunk))
    values[_EVENTS_AT] = events
    return KinetoTrace(*values)
