"""GPU ops (kernels, memcpys, memsets) -> the host op that launched them.

A GPU event's ``correlation`` names its launching runtime call
(``KinetoTrace.launch_by_correlation``); the host op is the innermost matched
host op enclosing that call on the same thread, found by walking the Kineto
``parent`` chain (O(depth) per kernel, memoised per parent so a long run of
kernels under one op costs O(1) each).

Orphans are counted by reason: no launching call in the trace (launched before
profiling began), the launch lies outside the window the host ET recorded
(another iteration: not an error), or no matched host op encloses the launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chakra.device.model import KinetoTrace
from chakra.link.window import Window


@dataclass(slots=True)
class GpuOp:
    pos: int  # position in KinetoTrace.events of the GPU event
    launcher: int  # host op id
    launch_pos: int  # position of the launching runtime call


@dataclass(slots=True)
class GpuAttachment:
    ops: list[GpuOp] = field(default_factory=list)  # attached, in GPU start-time order
    total: int = 0
    no_launch: int = 0
    outside_window: int = 0
    no_host_op: int = 0

    @property
    def attached(self) -> int:
        return len(self.ops)

    @property
    def in_window(self) -> int:
        return self.total - self.outside_window


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


def attach_gpu_ops(kineto: KinetoTrace, event_to_host: dict[int, int], window: Window) -> GpuAttachment:
    events = kineto.events
    launch_by_corr = kineto.launch_by_correlation
    out = GpuAttachment()
    cache: dict[int, int] = {}
    found: list[tuple[float, int, int, int]] = []  # (GPU start, position, host id, launch position)
    out.total = len(kineto.gpu_positions)
    for pos in kineto.gpu_positions:
        ev = events[pos]
        launch = launch_by_corr.get(ev.correlation) if ev.correlation is not None else None
        if launch is None:
            out.no_launch += 1
            continue
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
