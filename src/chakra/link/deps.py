"""Dependencies written into ET+: inter-thread order and GPU synchronisation.

Both kinds only ever point backward in time, and the result is acyclic even
together with the host tree (child -> parent) and the GPU -> launcher links.
Time alone does not guarantee that: real host ETs have parents that start after
their children (``cpu_gloo``: a ``gloo:all_reduce`` recorded as the parent of
autograd ops that ran earlier on another thread).  So every node gets an order
key and every dependency must go to a strictly smaller key:

- host op: ``(M, depth)`` where M is the latest Kineto start time on its path
  from the root (unmatched nodes contribute nothing) and depth its tree depth,
  so a child's key always exceeds its parent's;
- GPU op: ``(max(M(launcher), launch time), depth(launcher) + 1)``, above its
  launcher's key.

A candidate dependency that would not decrease the key is skipped (and
counted); on time-consistent trees, which is every real GPU trace, the key is
just the start time and nothing is skipped.  Each dependency also points to a
node that ends strictly earlier than the dependent node.

Inter-thread dependencies (the rule of the original linker, with the threshold
made explicit).  Per Kineto thread, the matched host ops that are not nested in
another matched op of that thread are its top-level ops, in time order.  A
*group* starts at the thread's first top-level op and at every top-level op that
starts more than ``gap_us`` (default 1000 µs) after the previous top-level op
ended: the thread was idle, so it was waiting for something.  The first op of
a group gets ``inter_thread_dep`` = the matched op on any *other* thread that
ended last before the group's op started (nested ops count: the op that
finished just before is the most specific cause).  One bisect per other thread.

Synchronisation dependencies, computed from the Kineto trace alone.  A
synchronising call (``is_sync``: device/stream/event synchronize, stream wait
event, synchronous memcpy) waits for GPU work on some streams:

- ``cudaDeviceSynchronize`` (and ``cuCtxSynchronize``, hip): every stream;
- ``cudaStreamSynchronize``: ``args["stream"]`` when Kineto recorded it, else
  the stream of the last GPU op launched from the same thread before the call
  (the usual pattern: ``cudaMemcpyAsync`` then ``cudaStreamSynchronize``),
  else every stream;
- ``cudaEventSynchronize`` / ``cudaStreamWaitEvent``: the stream in
  ``args["wait_on_stream"]`` (newer Kineto), else unknown: skipped and counted;
- synchronous memcpy: the stream of the copy it launched.

The dependency goes on H, the innermost matched host op enclosing the call,
and points, per stream, at the last attached GPU op of that stream launched
before H started.  Stream order is FIFO, so waiting for it means waiting for
everything launched earlier on the stream; GPU ops launched by H itself (or by
ops nested in H) are excluded, because they are H's own children (the edge
would close a cycle through their launcher link).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chakra.device.model import KinetoTrace
from chakra.host.model import HostOp, HostTrace
from chakra.link.gpu import PRE_TRACE, GpuAttachment, innermost_matched
from chakra.tunables import INTER_THREAD_GAP_US, SYNC_STEP_BACK_MAX

_DEVICE_SYNC = frozenset(("cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize"))
_STREAM_SYNC = frozenset(("cudaStreamSynchronize", "cuStreamSynchronize", "hipStreamSynchronize"))
_EVENT_SYNC = frozenset(
    (
        "cudaEventSynchronize",
        "cuEventSynchronize",
        "hipEventSynchronize",
        "cudaStreamWaitEvent",
        "cuStreamWaitEvent",
        "hipStreamWaitEvent",
    )
)


@dataclass(slots=True)
class SyncStats:
    calls: int = 0  # synchronising calls seen
    no_host_op: int = 0  # no matched host op encloses the call
    unknown_stream: int = 0  # event sync / wait without the event's stream
    nothing_to_wait: int = 0  # no earlier GPU op on the stream(s)
    deps: int = 0  # dependency edges written
    dropped_late: int = 0  # candidate GPU op ends after the host op: skipped
    dropped_order: int = 0  # candidate would not decrease the order key: skipped
    by_call: dict[str, int] = field(default_factory=dict)
    # positions of the calls inside a host op that got no dependency (stream unknown, nothing to wait
    # for): the loader took their time out of their enclosing op's exclusive time as waiting, and no
    # dependency stands for it (:func:`unwaited_time` gives it back)
    unwaited: list[int] = field(default_factory=list)


def order_keys(
    host: HostTrace, kineto: KinetoTrace, host_to_event: dict[int, int]
) -> dict[int, tuple[float, int]]:
    """``{host op id: (M, depth)}`` (see module doc), one pass over the tree without recursion."""
    events = kineto.events
    by_id = host.by_id
    keys: dict[int, tuple[float, int]] = {}
    neg_inf = -math.inf
    for op in host.ops:
        oid = op.id
        if oid in keys:
            continue
        pk = keys.get(op.parent)
        if pk is not None and op.parent != oid:
            # the usual case (parents come first): one step, no chain
            m, depth = pk
            pos = host_to_event.get(oid)
            if pos is not None and events[pos].ts > m:
                m = events[pos].ts
            keys[oid] = (m, depth + 1)
            continue
        chain: list[HostOp] = []
        cur: HostOp | None = op
        seen: set[int] = set()
        while cur is not None and cur.id not in keys and cur.id not in seen:
            seen.add(cur.id)
            chain.append(cur)
            parent = by_id.get(cur.parent)
            cur = parent if parent is not None and parent is not cur else None
        m, depth = keys[cur.id] if cur is not None and cur.id in keys else (neg_inf, -1)
        for node in reversed(chain):
            pos = host_to_event.get(node.id)
            if pos is not None and events[pos].ts > m:
                m = events[pos].ts
            depth += 1
            keys[node.id] = (m, depth)
    return keys


def inter_thread_deps(
    kineto: KinetoTrace,
    host_to_event: dict[int, int],
    gap_us: float = INTER_THREAD_GAP_US,
    keys: dict[int, tuple[float, int]] | None = None,
) -> tuple[dict[int, int], int]:
    """``{host op id: id of the op it waits for on another thread}`` and the number of
    candidates skipped because of the order key (see module doc)."""
    events = kineto.events
    skipped = 0
    threads: dict[Any, list[tuple[float, float, int]]] = {}
    for host_id, pos in host_to_event.items():
        ev = events[pos]
        threads.setdefault((ev.pid, ev.tid), []).append((ev.ts, ev.ts + ev.dur, host_id))
    by_end: dict[Any, tuple[list[float], list[int]]] = {}
    for key, items in threads.items():
        s = sorted([(end, ts, host_id) for ts, end, host_id in items])
        by_end[key] = ([t[0] for t in s], [t[2] for t in s])
    deps: dict[int, int] = {}
    for key, items in threads.items():
        starts = sorted([(ts, -end, host_id) for ts, end, host_id in items])
        top_end = -math.inf
        for ts, neg_end, host_id in starts:
            end = -neg_end
            if ts < top_end:
                continue  # nested in (or overlapping) the current top-level op
            group_start = top_end == -math.inf or ts - top_end > gap_us
            top_end = end
            if not group_start:
                continue
            best_end, best_id = -math.inf, -1
            for other, (ends, ids) in by_end.items():
                if other == key:
                    continue
                k = bisect_right(ends, ts) - 1
                if k < 0 or ends[k] <= best_end:
                    continue
                if keys is not None and not keys[ids[k]] < keys[host_id]:
                    skipped += 1
                    continue
                best_end, best_id = ends[k], ids[k]
            if best_id >= 0 and best_end < end:
                deps[host_id] = best_id
    return deps, skipped


def sync_deps(
    kineto: KinetoTrace,
    host_to_event: dict[int, int],
    event_to_host: dict[int, int],
    gpu: GpuAttachment,
    gpu_ids: Sequence[int],
    keys: dict[int, tuple[float, int]] | None = None,
) -> tuple[dict[int, list[int]], SyncStats]:
    """``{host op id: [GPU node ids]}`` for the synchronising calls (see module doc).

    ``gpu_ids[i]`` is the ET+ node id given to ``gpu.ops[i]``.
    """
    events = kineto.events
    stats = SyncStats()
    # per stream: attached GPU ops in launch order (those launched before the trace began first, in GPU
    # start order: a stream runs its work in the order it was launched)
    streams: dict[Any, tuple[list[float], list[int]]] = {}
    ops = gpu.ops
    neg_inf = -math.inf
    launched = [neg_inf if g.launch_pos == PRE_TRACE else events[g.launch_pos].ts for g in ops]
    order = sorted((t, i) for i, t in enumerate(launched))
    for t, i in order:
        g = ops[i]
        s = events[g.pos].stream
        lst = streams.get(s)
        if lst is None:
            lst = streams[s] = ([], [])
        lst[0].append(t)
        lst[1].append(i)
    # per thread: every launch with GPU work, for "which stream did this thread use last"
    thread_launches: dict[Any, tuple[list[float], list[Any]]] = {}
    gpu_by_corr = kineto.gpu_by_correlation
    # launches with GPU work in start order (ties: correlation-table order, as a stable sort keeps it)
    launches = [(events[lpos].ts, k, corr, lpos)
                for k, (corr, lpos) in enumerate(kineto.launch_by_correlation.items())]
    launches.sort()
    for _, _, corr, lpos in launches:
        gl = gpu_by_corr.get(corr)
        if not gl:
            continue
        ev = events[lpos]
        tl = thread_launches.get((ev.pid, ev.tid))
        if tl is None:
            tl = thread_launches[(ev.pid, ev.tid)] = ([], [])
        tl[0].append(ev.ts)
        tl[1].append(events[gl[0]].stream)

    out: dict[int, set[int]] = {}
    cache: dict[int, int] = {}
    for pos in kineto.sync_positions:
        ev = events[pos]
        stats.calls += 1
        stats.by_call[ev.name] = stats.by_call.get(ev.name, 0) + 1
        holder = event_to_host.get(pos, -1)   # the call itself is a host op in a GPU-only trace
        if holder < 0:
            holder = innermost_matched(kineto, ev.parent, event_to_host, cache)
        if holder < 0:
            stats.no_host_op += 1
            continue
        wanted = _streams_waited(kineto, pos, streams, thread_launches)
        if wanted is None:
            stats.unknown_stream += 1
            stats.unwaited.append(pos)
            continue
        h_ev = events[host_to_event[holder]]
        h_ts, h_end, h_thread = h_ev.ts, h_ev.ts + h_ev.dur, (h_ev.pid, h_ev.tid)
        found = 0
        for s in wanted:
            lst = streams.get(s)
            if lst is None:
                continue
            launch_ts, idxs = lst
            k = bisect_left(launch_ts, h_ts) - 1
            steps = 0
            while k >= 0 and steps < SYNC_STEP_BACK_MAX:
                g = gpu.ops[idxs[k]]
                g_ev = events[g.pos]
                pre = g.launch_pos == PRE_TRACE    # launched before the trace: before anything in it
                if pre:
                    own = False
                else:
                    l_ev = events[g.launch_pos]
                    own = (l_ev.pid, l_ev.tid) == h_thread and h_ts <= l_ev.ts <= h_end
                if not own and g_ev.ts + g_ev.dur < h_end:
                    if keys is None or pre or _gpu_key(keys, g.launcher, l_ev.ts) < keys[holder]:
                        out.setdefault(holder, set()).add(gpu_ids[idxs[k]])
                        found += 1
                        break
                    stats.dropped_order += 1
                elif not own:
                    stats.dropped_late += 1
                k -= 1
                steps += 1
        if not found:
            stats.nothing_to_wait += 1
            stats.unwaited.append(pos)
    result = {h: sorted(s) for h, s in out.items()}
    stats.deps = sum(len(v) for v in result.values())
    return result, stats


def unwaited_time(kineto: KinetoTrace, unwaited: Sequence[int]) -> dict[int, float]:
    """``{position of an event: µs}``: the time of the synchronising calls in ``unwaited`` (no
    dependency stands for their waiting) that the loader took out of their enclosing event's exclusive
    time, to be given back to it: without a dependency the call's time is time its op spent, not a wait
    the replay will find again (``mi300x_bert_small``: a 30.9 µs ``hipDeviceSynchronize`` with no GPU work
    to wait for, lost from ``ProfilerStep#6``, made the replay 1.7% short).  Clipped to the enclosing
    event's end, as the loader clipped it."""
    events = kineto.events
    out: dict[int, float] = {}
    for pos in unwaited:
        ev = events[pos]
        p = ev.parent
        if p is None:
            continue
        end = min(ev.ts + ev.dur, events[p].ts + events[p].dur)
        if end > ev.ts:
            out[p] = out.get(p, 0.0) + (end - ev.ts)
    return out


def _gpu_key(keys: dict[int, tuple[float, int]], launcher: int, launch_ts: float) -> tuple[float, int]:
    m, depth = keys[launcher]
    return (launch_ts if launch_ts > m else m, depth + 1)


def _streams_waited(
    kineto: KinetoTrace,
    pos: int,
    streams: dict[Any, Any],
    thread_launches: dict[Any, tuple[list[float], list[Any]]],
) -> list[Any] | None:
    ev = kineto.events[pos]
    name = ev.name
    if name in _DEVICE_SYNC:
        return list(streams)
    if name in _EVENT_SYNC:
        s = ev.args.get("wait_on_stream")
        return [s] if s is not None else None
    if ev.correlation is not None and ev.correlation in kineto.gpu_by_correlation:
        # a synchronous copy: the stream of the work it launched
        return [kineto.events[p].stream for p in kineto.gpu_by_correlation[ev.correlation]]
    s = ev.args.get("stream")
    if s is not None:
        return [s]
    if name in _STREAM_SYNC:
        tl = thread_launches.get((ev.pid, ev.tid))
        if tl is not None:
            k = bisect_left(tl[0], ev.ts) - 1
            if k >= 0:
                return [tl[1][k]]
    return list(streams)
