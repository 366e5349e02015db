"""Do a host ET and a Kineto trace come from the same run?

Two cheap facts tell a mix-up (``host_et_0.json`` beside the ``kineto_0.json`` of yesterday's job):

* the process id: the host ET's top-level ``pid`` is the pid of the CPU events of its Kineto trace
  (all real traces of the corpus agree);
* the wall clock: the host ET's ``time`` (``YYYY-MM-DD HH:MM:SS``, the writer's *local* time, no zone)
  against the Kineto start (``baseTimeNanoseconds`` + ``ts`` when the file has a base, else ``ts`` itself
  when it is an epoch in µs).  The zone is unknown, so only a gap beyond the widest offset (14 h) plus a
  generous hour of warm-up is a mismatch: DLRM's ET says 16:09:59 (PDT) and its Kineto trace starts at
  23:10:01 UTC, 7 h apart, and that is the same run.

Start times that far apart refuse the link (``force`` links anyway); another pid is a warning, which the
linker's ``strict`` mode makes an error.  A fact missing on either side (no pid, an unparsable time, a Kineto
clock that is not an epoch) is simply not checked.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from chakra.device.model import KinetoTrace
from chakra.host.model import HostTrace
from chakra.tunables import EPOCH_US_MIN, MAX_CLOCK_GAP_S

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
    if first >= EPOCH_US_MIN:
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
        year, month, day, hour, minute, second = map(int, m.groups())
        t = _dt.datetime(year, month, day, hour, minute, second, tzinfo=_dt.timezone.utc)
    except ValueError:   # out of range (month 13, ...)
        return None
    return t.timestamp()


def run_mismatches(host: HostTrace, kineto: KinetoTrace) -> list[str]:
    """Why the two files look like different runs (empty when nothing contradicts)."""
    out: list[str] = []
    pid = pid_mismatch(host, kineto)
    if pid:
        out.append(pid)
    clock = clock_mismatch(host, kineto)
    if clock:
        out.append(clock)
    return out


def pid_mismatch(host: HostTrace, kineto: KinetoTrace) -> str | None:
    """The two pids when they differ, else None."""
    kpid = kineto_pid(kineto)
    if type(host.pid) is int and kpid is not None and host.pid != kpid:
        return f"host ET pid {host.pid} but the Kineto CPU events have pid {kpid}"
    return None


def clock_mismatch(host: HostTrace, kineto: KinetoTrace) -> str | None:
    """Both start times when they are further apart than any time zone and warm-up explain, else None."""
    hw, kw = host_wall_time(host), kineto_wall_start(kineto)
    if hw is None or kw is None or abs(kw - hw) <= MAX_CLOCK_GAP_S:
        return None
    gap = abs(kw - hw) / 3600.0
    apart = f"{gap:.1f} h" if gap < 48 else f"{gap / 24:.1f} days"
    kineto_time = _dt.datetime.fromtimestamp(kw, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return (f"host ET time {host.time!r} (its machine's clock) is {apart} {'before' if kw > hw else 'after'} "
            f"the Kineto trace's start, {kineto_time} UTC")
