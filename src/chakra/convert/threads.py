"""How each host thread spent its recorded time: work, waiting and idle, fixed at conversion.

A CPU op's ``duration_micros`` is its *exclusive* time, and on a thread that time is
not one block: a parent op works before its first child (its *lead*), between its
children and after its last child (its *tail*).  What the thread did between two
consecutive ops is therefore a sequence of pieces, each owned by the innermost op
open at that moment, or by nobody (the thread was idle).  A replay that recomputes
those pieces from the file's start times at replay time cannot tell idle time from
work, so time saved by a faster op just becomes idle time; and time a thread spent
*blocked* (a synchronize, ``Work.wait()``, the autograd engine waiting for its worker
thread, a gloo wait) sits inside exclusive times, so a replay that also honours the
dependency counts the waiting twice.

This pass walks each host thread once (a stack sweep in time order, integer µs of
the written start times) and writes, per node of the thread (only when non-zero):

``thread_depth``
    nesting depth on its thread (0 = outermost); a replay rebuilds the stack of open
    ops from it, so it knows which op owns each piece below;
``work_before_us``
    exclusive time of the enclosing op between its previous child (or a wait) and
    this node;
``tail_us``
    this op's exclusive time after its last child;
``idle_before_us``
    time before this node when no op was open on the thread (Python outside any
    record, the gap between steps), net of waiting;
``wait_on`` / ``wait_post_us``
    the node this one's thread was blocked on just before it (also a ``data_deps``
    entry), and the recorded time from that node's end to this node's start, less
    this node's ``idle_before_us`` (so that a replay without idle time drops it);
``frees_thread``
    (1) on a communication record that does not hold its thread: it outlasts its
    enclosing op or the next op of the thread (an ``isend``).  The thread goes on at
    its start; the record keeps its recorded duration.

A node's lead is what remains: ``duration - tail - sum(work_before of its
children)`` (``duration`` is exclusive for every host node, a gloo collective with
children on its worker thread included).

Waiting.  A piece ``[a, b]`` before node ``n`` (or the lead of the leaf just before
``n``) is a wait on node ``u`` of another lane when ``u`` ended inside it, at ``r``:

* the piece is idle and ``u`` is something ``n`` depends on (a worker thread idle
  until its work is enqueued, a thread joined by another), or
* ``u`` is something a thread blocks on and the piece ended soon after ``r``
  (``b - r <= WAIT_SLACK_US`` and ``b - r <= r - a``): a host communication record
  (gloo, the ``wait()`` of its work), a GPU op on a stream the owner op synchronises
  with (the linker's ``sync_dep``), or the last op of another thread's burst (that
  thread idles after it: the autograd engine's worker finishing a backward pass).

A GPU op waits (``wait_on``, ``wait_post_us``) on whichever released it last: its
stream predecessor, its launching op (once ended: the launch latency is kept), or an op
of another stream that ended right before it started (within ``STREAM_SLACK_US``
while its stream idled: an event wait between streams, e.g. a compute stream waiting
for a collective).  A GPU op with no launcher in the trace (launched before it began)
that is first on its stream keeps its recorded start as ``idle_before_us``.

The latest such ``r`` before ``n`` wins.  ``[a, r]`` is waiting: it leaves the
owner's duration (or the idle time) and becomes the dependency ``n -> u`` with
``wait_post_us = start(n) - r - idle_before_us``; time before the wait piece stays as
it was.  Where
the thread started waiting inside ``[a, r]`` is not recorded; all of it counts as
waiting, so the replay without idle time never exceeds the recording.

An idle piece of ``n`` in which a dependency ``u`` of ``n`` started, still running when ``n`` started,
is cut back to ``u``'s start (``n`` follows ``u``'s start); where the replay cannot see that ``u`` was still
running (its written end, shortened by waits cut out of it, lies before ``n``'s start), ``u`` becomes what
``n`` waited for, at that written end, or, for a ``u`` with children, the idle piece stays whole.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, cast

from chakra.tunables import LONG_WAIT_US, MIN_WAIT_US, STREAM_SLACK_US, WAIT_SLACK_US, WAKE_US


@dataclass(slots=True)
class ThreadInput:
    """What the pass reads of the converter's per-op lists (index = op position)."""

    n: int
    start: Sequence[int]              # written start (µs since the window, >= 0)
    end: Sequence[int | None]         # recorded inclusive end (µs since the window), None if untimed
    excl: list[int]                   # written duration (exclusive for CPU ops); waits are taken off here
    thread: Sequence[Any]             # host thread key (the written ``tid``)
    on_thread: Sequence[bool]         # whether the replay puts the node on its host thread's lane
    is_cpu: Sequence[bool]            # written is_cpu_op
    lane: Sequence[Any]               # lane key of every timed node (thread or GPU stream)
    pos: Sequence[int]                # pre-order position (ties)
    deps: Sequence[Sequence[int]]     # data deps (indices), ctrl excluded
    host_comm: frozenset[int] | set[int]   # host communication records (gloo ...)
    is_gpu: Sequence[bool]
    sync_lanes: dict[int, set[Any]] = field(default_factory=dict)  # op -> GPU lanes it synchronises with
    launcher: Sequence[int] = ()      # GPU op -> the host op that launched it (-1: none)
    gpu_comm: frozenset[int] | set[int] = frozenset()   # GPU communication kernels (NCCL)


@dataclass(slots=True)
class ThreadTiming:
    """The per-node attributes (index -> value, non-zero only) and the waits found."""

    depth: dict[int, int] = field(default_factory=dict)
    work_before: dict[int, int] = field(default_factory=dict)
    tail: dict[int, int] = field(default_factory=dict)
    idle_before: dict[int, int] = field(default_factory=dict)
    wait_on: dict[int, int] = field(default_factory=dict)       # node -> index waited for
    wait_post: dict[int, int] = field(default_factory=dict)
    frees_thread: set[int] = field(default_factory=set)        # records that do not hold their thread
    synced: set[int] = field(default_factory=set)   # ops whose wait on a GPU op was cut out (a synchronize)
    waited_us: int = 0                                          # total waiting taken out of pieces
    # node -> (dependency, start of its idle piece): idle time cut back to the start of a dependency still
    # running when the node started (:func:`_hold_from_start` checks that the replay keeps that offset)
    from_start: dict[int, tuple[int, int]] = field(default_factory=dict)


def thread_timing(inp: ThreadInput) -> ThreadTiming:
    """Pieces, depths and waits of every host thread (see the module doc)."""
    out = ThreadTiming()
    threads = _group(compress(range(inp.n), inp.on_thread), inp.thread)
    if not threads:
        return out
    ends = _EndIndex(inp)
    for members in threads.values():
        _sweep(inp, members, ends, out)
    if out.from_start:
        _hold_from_start(inp, threads, out)
    if inp.launcher:
        _stream_waits(inp, ends, out)
    return out


def _group(nodes: Iterable[int], key: Sequence[Any]) -> dict[Any, list[int]]:
    """``nodes`` by ``key[node]``, each list in the order given."""
    out: dict[Any, list[int]] = {}
    for i in nodes:
        k = key[i]
        members = out.get(k)
        if members is None:
            out[k] = [i]
        else:
            members.append(i)
    return out


def _stream_waits(inp: ThreadInput, ends: _EndIndex, out: ThreadTiming) -> None:
    """When each GPU op could start, and how long after that it did.

    A GPU op starts once its launching op has launched it and its stream is free; the recording shows
    how long after that it started (launch latency, queueing).  It may also have waited on another
    stream (a ``cudaStreamWaitEvent``): launched, its stream idle, yet it started only right after an
    op of another stream ended.  The latest of these releases gets ``wait_on`` and ``wait_post_us``
    (the recorded delay after it), so the op keeps its latency and a faster collective moves it too.
    A kernel that started while its launching op was still running keeps the replay's own rule (it
    starts as many µs after its launcher started as recorded).  One without a launcher in the trace (it
    was launched before the trace began) and first on its stream starts at its recorded offset from the
    window's start (``idle_before_us``: dropped with the idle time, ``--no-gaps``)."""
    start, end, lane, launcher = inp.start, inp.end, inp.lane, inp.launcher
    streams = _group((i for i in compress(range(inp.n), inp.is_gpu) if end[i] is not None), lane)
    for ln, seq in streams.items():
        seq.sort(key=lambda i: (start[i], inp.pos[i]))
        free = 0
        prev = -1
        for k in seq:
            s = start[k]
            p = launcher[k]
            done = end[p] if p >= 0 else None
            best: tuple[int, int] | None = None      # (release time, node)
            if prev >= 0 and free <= s:
                best = (free, prev)
            if done is not None and done <= s and (best is None or done >= best[0]):
                best = (done, p)
            # launched for sure once its launching op ended; while that op still ran, only a collective
            # (what compute streams wait for) counts: the launch may have come late in a long op
            launched = start[p] if done is not None else None
            if launched is not None and s - max(free, launched) > STREAM_SLACK_US:
                for u in ends.ending_in(max(free, launched), s):
                    if s - end[u] > STREAM_SLACK_US:   # type: ignore[operator]
                        break
                    if inp.is_gpu[u] and lane[u] != ln and (done <= s or u in inp.gpu_comm):  # type: ignore[operator]
                        if best is None or end[u] >= best[0]:   # type: ignore[operator]
                            best = (end[u], u)   # type: ignore[assignment]
                        break
            if best is not None and (s > best[0] or (best[1] != prev and best[1] != p)):
                out.wait_on[k] = best[1]
                if s > best[0]:
                    out.wait_post[k] = s - best[0]
            elif best is None and p < 0 and s > 0:
                # no launcher in the trace (launched before it began) and nothing before it on its stream:
                # it ran from its recorded start (the stream was busy with earlier work when the window
                # opened), its stream's first op keeps that offset
                out.idle_before[k] = s
            e = end[k]
            if e is not None and e > free:
                free = e
            prev = k


class _EndIndex:
    """Timed nodes by recorded end, and each lane's busy intervals: wait candidates by bisection."""

    def __init__(self, inp: ThreadInput) -> None:
        end, start, lane, on_thread = inp.end, inp.start, inp.lane, inp.on_thread
        timed = [i for i, e in enumerate(end) if e is not None and lane[i] is not None]
        known = cast(Sequence[int], end)    # (at the timed nodes)
        timed.sort(key=known.__getitem__)
        self.keys = [known[i] for i in timed]
        self.nodes = timed
        spans: dict[Any, list[tuple[int, int]]] = {}
        for i in timed:
            if on_thread[i]:
                ln = lane[i]
                sp = spans.get(ln)
                if sp is None:
                    sp = spans[ln] = []
                sp.append((start[i], end[i]))   # type: ignore[arg-type]
        busy: dict[Any, tuple[list[int], list[int]]] = {}
        for ln, v in spans.items():
            v.sort()
            lo: list[int] = []
            hi: list[int] = []
            for a, b in v:
                if lo and a <= hi[-1]:
                    if b > hi[-1]:
                        hi[-1] = b
                else:
                    lo.append(a)
                    hi.append(b)
            busy[ln] = (lo, hi)
        self.busy = busy

    def ending_in(self, a: int, b: int) -> Iterator[int]:
        """Nodes whose recorded end lies in ``(a, b]``, latest end first."""
        keys, nodes = self.keys, self.nodes
        lo = bisect_right(keys, a)
        for k in range(bisect_right(keys, b) - 1, lo - 1, -1):
            yield nodes[k]

    def idle_after(self, lane: Any, r: int, b: int) -> bool:
        """Whether host thread ``lane`` goes idle at ``r`` and stays idle until after ``b``."""
        lo, hi = self.busy.get(lane, ((), ()))
        k = bisect_right(lo, r) - 1
        return k >= 0 and hi[k] == r and (k + 1 == len(lo) or lo[k + 1] > b)


def _sweep(inp: ThreadInput, members: list[int], ends: _EndIndex, out: ThreadTiming) -> None:
    """One thread: a stack of open nodes in time order; the pieces between consecutive nodes."""
    start, end, is_cpu, pos = inp.start, inp.end, inp.is_cpu, inp.pos
    tail, idle_before, work_before, wait_post, depth = (out.tail, out.idle_before, out.work_before,
                                                        out.wait_post, out.depth)
    members.sort(key=lambda i: (start[i], -(end[i] or 0), pos[i]))   # untimed: end = start, sorts after
    stack: list[tuple[int, int]] = []       # (end clipped to the enclosing node's, index) of open nodes
    cursor = 0                              # the window start: a thread's first node keeps its offset
    lane = inp.lane[members[0]]
    prev = -1
    last = len(members) - 1
    for k, j in enumerate(members):
        s = start[j]
        # the pieces between the previous event and j, in time order: (owner or -1, a, b, kind) with kind
        # "leaf" (the whole time of the leaf just before j), "lead" (the enclosing node's time before its
        # first child j), "tail", "work" (the enclosing node's time after its previous child) or "idle"
        pieces: list[tuple[int, int, int, str]] = []
        longest = 0
        while stack and stack[-1][0] <= s:
            e, o = stack.pop()
            if e > cursor:
                pieces.append((o, cursor, e, "leaf" if o == prev else "tail"))
                if e - cursor > longest:
                    longest = e - cursor
                cursor = e
        if s > cursor:
            if stack:
                o = stack[-1][1]
                pieces.append((o, cursor, s, "lead" if o == prev else "work"))
            else:
                pieces.append((-1, cursor, s, "idle"))
            if s - cursor > longest:
                longest = s - cursor
            cursor = s
        r = _wait(inp, j, lane, pieces, ends, out) if longest >= MIN_WAIT_US else None
        for o, a, b, kind in pieces:
            if b <= a or kind == "leaf" or kind == "lead":     # a node's lead is what its duration leaves
                continue
            if kind == "tail":
                tail[o] = tail.get(o, 0) + b - a
            elif kind == "idle":
                idle_before[j] = idle_before.get(j, 0) + b - a
            else:
                work_before[j] = work_before.get(j, 0) + b - a
        if r is not None:       # the idle time after the wait is the node's idle_before_us
            post = s - r - idle_before.get(j, 0)
            if post > 0:
                wait_post[j] = post
        if stack:
            depth[j] = len(stack)
        ej = end[j]
        e = s if ej is None or ej < s else ej
        if not is_cpu[j] and e > s:
            # a communication record that outlasts its enclosing op, or that the next node of the thread
            # outlasts, is not holding its thread (an isend): the thread goes on at its start
            nxt = members[k + 1] if k < last else -1
            if (stack and e > stack[-1][0]) or (nxt >= 0 and start[nxt] < e < _end_of(start, end, nxt)):
                out.frees_thread.add(j)
                e = s
        if stack and e > stack[-1][0]:
            e = stack[-1][0]
        stack.append((e, j))
        prev = j
    while stack:                             # the tails after the thread's last node
        e, o = stack.pop()
        if e > cursor:
            if o != prev:
                tail[o] = tail.get(o, 0) + e - cursor
            cursor = e


def _end_of(start: Sequence[int], end: Sequence[int | None], i: int) -> int:
    e = end[i]
    return start[i] if e is None or e < start[i] else e


def _wait(inp: ThreadInput, j: int, lane: Any, pieces: list[tuple[int, int, int, str]], ends: _EndIndex,
          out: ThreadTiming) -> int | None:
    """Find the latest wait among ``pieces`` before ``j``; cut it out of its piece (in place); return
    the end of what ``j`` waited for (``wait_on`` set), or None."""
    deps_j = inp.deps[j]
    for k in range(len(pieces) - 1, -1, -1):
        o, a, b, kind = pieces[k]
        if b - a < MIN_WAIT_US or (o >= 0 and not inp.is_cpu[o]):
            continue   # time inside a communication record is its own (its recorded duration)
        found = _wait_target(inp, j, lane, a, b, kind, o, deps_j, ends)
        if found is None:
            continue
        u, r, ended = found
        if r - a < MIN_WAIT_US:
            return None
        waited = r - a
        pieces[k] = (o, r, b, kind)
        if o >= 0:
            inp.excl[o] = max(0, inp.excl[o] - waited)
            if inp.is_gpu[u]:
                out.synced.add(o)
        out.waited_us += waited
        if ended:
            out.wait_on[j] = u
            return r
        out.from_start[j] = (u, a)
        return None
    return None


def _hold_from_start(inp: ThreadInput, threads: dict[Any, list[int]], out: ThreadTiming) -> None:
    """Idle time cut back to the start of a dependency ``u`` still running when ``j`` started counts from
    ``u``'s start only where the replay knows that ``u`` was still running: where ``u``'s written end (its
    start plus its written duration, which waits cut out of it shorten) lies after ``j``'s start, so that
    the replay holds ``j`` at its recorded offset from ``u``'s start (``chakra.replay.plan``, finish
    waits).  Else the replay would count that idle time from ``j``'s lane predecessor (the window start
    for a worker thread's first record) and start ``j`` early: a gloo worker's first ``gloo:broadcast``
    after its ``c10d::broadcast_``, whose duration lost its wait on that same broadcast, started 290 µs
    early.  A ``u`` without children on its thread then becomes what ``j`` waited for, at its written
    end (the idle time from there on stays ``j``'s); one with children (the replay knows no end of its
    own for it) gives the idle time back whole."""
    start, excl, idle_before = inp.start, inp.excl, out.idle_before
    for j, (u, a) in out.from_start.items():
        s = start[j]
        e = start[u] + excl[u]
        kids = _has_children(inp, threads[inp.thread[u]], u, out.depth)
        if not kids and e > s:
            continue
        if kids:
            out.waited_us -= start[u] - a
            e = a
        else:
            out.waited_us += e - start[u]
            out.wait_on[j] = u
        if s > e:
            idle_before[j] = s - e
        else:
            idle_before.pop(j, None)


def _has_children(inp: ThreadInput, members: list[int], u: int, depth: dict[int, int]) -> bool:
    """Whether the node after ``u`` on its thread (``members``, in the sweep's order) is nested in it."""
    start, end, pos = inp.start, inp.end, inp.pos

    def key(i: int) -> tuple[int, int, int]:
        return (start[i], -(end[i] or 0), pos[i])

    k = bisect_right(members, key(u), key=key)
    return k < len(members) and depth.get(members[k], 0) > depth.get(u, 0)


def _wait_target(inp: ThreadInput, j: int, lane: Any, a: int, b: int, kind: str, o: int,
                 deps_j: Sequence[int], ends: _EndIndex) -> tuple[int, int, bool] | None:
    """What the thread waited for in piece ``[a, b]`` (owner ``o``): (node, release time, whether the
    release is the node's end), or None.

    In an idle piece, a dependency of ``j`` that *started* inside it and was still running when ``j``
    started also explains the idle time up to its start (the replay keeps ``j`` after that start by
    the recorded offset); nothing is added then, the idle time is only cut (where the replay cannot
    tell that the dependency was still running, :func:`_hold_from_start` decides otherwise)."""
    end, start = inp.end, inp.start
    if kind == "idle":
        best: tuple[int, int, bool] | None = None
        for u in deps_j:
            eu = end[u]
            if inp.lane[u] == lane or eu is None:
                continue
            if a < eu <= b:
                cand = (u, eu, True)
            elif eu > b and a < start[u] <= b:
                cand = (u, start[u], False)
            else:
                continue
            if best is None or cand[1] > best[1]:
                best = cand
        if best is not None:
            return best
    for u in ends.ending_in(a, b):
        lu = inp.lane[u]
        if lu == lane or u == j:
            continue
        r = end[u]
        assert r is not None
        if b - r > WAIT_SLACK_US or b - r > r - a:
            return None          # ends come latest first: every later candidate is farther
        if u in inp.host_comm and not inp.is_gpu[u]:
            return (u, r, True)
        if inp.is_gpu[u]:
            if o >= 0 and lu in inp.sync_lanes.get(o, ()):
                return (u, r, True)
            continue
        if inp.on_thread[u] and (ends.idle_after(lu, r, b) or (r - a >= LONG_WAIT_US and b - r <= WAKE_US)):
            return (u, r, True)
    return None
