"""Do a host ET and a Kineto trace come from the same run?

Two cheap facts tell a mix-up (``host_et_0.json`` beside the ``kineto_0.json`` of yesterday's job):

* the process id: the host ET's top-level ``pid`` is the pid of the CPU events of its Kineto trace
  (all real traces of the corpus agree);
* the wall clock: the host ET's ``time`` (``YYYY-MM-DD HH:MM:SS``, the writer's *local* time, no zone)
  against the Kineto start (``baseTimeNanoseconds`` + ``ts`` when the file has a base, else ``ts`` itself
  when it is an epoch in µs).  The zone is unknown, so only a gap beyond the widest offset (14 h) plus a
  generous hour of warm-up is a mismatch: DLRM's ET says 16:09:59 (PDT) and its Kineto trace starts at
  23:10:01 UTC, 7 h apart, and that is the same run.

Either mismatch is a warning; the linker's ``strict`` mode makes it an error.  A fact missing on either
side (no pid, an unparsable time, a Kineto clock that is not an epoch) is simply not checked.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from chakra.device.model import KinetoTrace
from chakra.host.model import HostTrace

MAX_CLOCK_GAP_S = 15 * 3600.0
_EPOCH_US_MIN = 1e15  # ts values above this (2001-09-09 in µs) are an epoch clock
# what strptime's "%Y-%m-%d %H:%M:%S" reads (one or two digits for all but the year), without the 4 ms of
# loading _strptime
_WALL_TIME = re.compile(r"(\d{4})-(\d\d?)-(\d\d?)\s+(\d\d?):(\d\d?):(\d\d?)")


def kineto_pid(kineto: KinetoTrace) -> int | None:
    """The most common integer pid of the CPU-side events."""
    return kineto.cpu_clock()[0]


def kineto_wall_start(kineto: KinetoTrace) -> float | None:
    """Seconds since the epoch of the first CPU event, or None when the clock is not an epoch."""
    first = kineto.cpu_clock()[1]
    if first is None:
        return None
    base: Any = kineto.extra.get("baseTimeNanoseconds")
    if type(base) is int and base > 0:
        return base / 1e9 + first / 1e6
    if first >= _EPOCH_US_MIN:
        return first / 1e6
    return None


def host_wall_time(host: HostTrace) -> float | None:
    """The ET's ``time`` read as if it were UTC (its zone is unknown), or None."""
    if not isinstance(host.time, str):
        return None
    m = _WALL_TIME.fullmatch(host.time.strip())
    if m is None:
        return None
    try:
        t = _dt.datetime(*map(int, m.groups()), tzinfo=_dt.timezone.utc)
    except ValueError:   # out of range (month 13, ...)
        return None
    return t.timestamp()


def run_mismatches(host: HostTrace, kineto: KinetoTrace) -> list[str]:
    """Why the two files look like different runs (empty when nothing contradicts)."""
    out: list[str] = []
    kpid = kineto_pid(kineto)
    if type(host.pid) is int and kpid is not None and host.pid != kpid:
        out.append(f"host ET pid {host.pid} but the Kineto CPU events have pid {kpid}")
    hw, kw = host_wall_time(host), kineto_wall_start(kineto)
    if hw is not None and kw is not None and abs(kw - hw) > MAX_CLOCK_GAP_S:
        hours = (kw - hw) / 3600.0
        out.append(f"host ET time {host.time!r} is {abs(hours):.1f} h "
                   f"{'before' if hours > 0 else 'after'} the Kineto trace's start")
    return out
