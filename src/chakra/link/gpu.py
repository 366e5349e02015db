"""GPU ops (kernels, memcpys, memsets) -> the host op that launched them.

A GPU event's ``correlation`` names its launching runtime call
(``KinetoTrace.launch_by_correlation``); the host op is the innermost matched
host op enclosing that call on the same thread, found by walking the Kineto
``parent`` chain (O(depth) per kernel, memoised per parent so a long run of
kernels under one op costs O(1) each).

A GPU op without a launching call in the trace was launched before profiling
began (or its call was not recorded).  When it ran in the window it is kept all
the same, with no launcher (:data:`PRE_TRACE`): the stream was busy with it when
the window opened, and the window's own GPU work queued behind it.  It runs on its
stream at its recorded position (its start and end clipped to the window's
start when it began before it).  One that ended before the window began is not
the window's work.

The others that are not attached are counted by reason: the launch lies outside
the window the host ET recorded (another iteration: not an error), or no matched
host op encloses the launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from chakra.device.model import KinetoTrace
from chakra.link.window import Window

#: ``GpuOp.launcher`` and ``GpuOp.launch_pos`` of a GPU op launched before the trace began
PRE_TRACE = -1


@dataclass(slots=True)
class GpuOp:
    pos: int  # position in KinetoTrace.events of the GPU event
    launcher: int  # host op id (PRE_TRACE: launched before the trace began)
    launch_pos: int  # position of the launching runtime call (PRE_TRACE: none)


@dataclass(slots=True)
class GpuAttachment:
    ops: list[GpuOp] = field(default_factory=list)  # attached and pre-trace, in GPU start-time order
    total: int = 0
    no_launch: int = 0        # no launching call in the trace (launched before it began) ...
    pre_trace: int = 0        # ... of which ran in the window: kept without a launcher
    outside_window: int = 0
    no_host_op: int = 0

    @property
    def attached(self) -> int:
        """GPU ops attached to the host op that launched them."""
        return len(self.ops) - self.pre_trace


def innermost_matched(
    kineto: KinetoTrace, pos: int | None, event_to_host: dict[int, int], cache: dict[int, int]
) -> int:
    """Host op id of the innermost matched event at or above ``pos`` on its thread; -1 if none.

    ``cache`` memoises answers per visited position (filled along the walked chain).
    """
    events = kineto.events
    walked: list[int] = []
    found = -1
    while pos is not None:
        hit = cache.get(pos)
        if hit is not None:
            found = hit
            break
        host_id = event_to_host.get(pos)
        if host_id is not None:
            found = host_id
            walked.append(pos)
            break
        walked.append(pos)
        pos = events[pos].parent
    for p in walked:
        cache[p] = found
    return found


def window_bounds(window: Window) -> tuple[float, float]:
    """The start and end of the window's steps (the whole trace without a step)."""
    if not window.steps:
        return (-math.inf, math.inf)
    return (min(s.ts for s in window.steps), max(s.ts + s.dur for s in window.steps))


def attach_gpu_ops(kineto: KinetoTrace, event_to_host: dict[int, int], window: Window) -> GpuAttachment:
    events = kineto.events
    launch_by_corr = kineto.launch_by_correlation
    out = GpuAttachment()
    cache: dict[int, int] = {}
    found: list[tuple[float, int, int, int]] = []  # (GPU start, position, host id, launch position)
    out.total = len(kineto.gpu_positions)
    lo, hi = window_bounds(window)
    for pos in kineto.gpu_positions:
        ev = events[pos]
        launch = launch_by_corr.get(ev.correlation) if ev.correlation is not None else None
        if launch is None:
            out.no_launch += 1
            if ev.ts < hi and (ev.ts + ev.dur > lo or ev.ts >= lo):
                out.pre_trace += 1
                found.append((ev.ts, pos, PRE_TRACE, PRE_TRACE))
            continue
        # the launching call itself is the host op when it is one (a GPU-only trace); else the innermost
        # matched op enclosing it
        host_id = event_to_host.get(launch)
        if host_id is None:
            host_id = cache.get(events[launch].parent)  # type: ignore[arg-type]
        if host_id is None:
            host_id = innermost_matched(kineto, events[launch].parent, event_to_host, cache)
        if host_id < 0:
            if not window.contains(events[launch].ts):
                out.outside_window += 1
            else:
                out.no_host_op += 1
            continue
        found.append((ev.ts, pos, host_id, launch))
    found.sort()  # GPU start order, file order among equal starts (positions are unique)
    out.ops = [GpuOp(pos, host_id, launch) for _, pos, host_id, launch in found]
    return out
