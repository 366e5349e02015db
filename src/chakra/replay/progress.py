"""Progress of a whole-job replay, for a person watching a long run.

A job of a thousand ranks replays for minutes: reading the files, the process groups and the communication
model, each rank's dependencies and plan, coupling the collectives, the scheduler, the per-rank results.
:func:`chakra.replay.api.replay_job` and :func:`chakra.replay.engine.simulate` announce each phase to a
:class:`Steps` (``phase``), and, in a phase that goes rank by rank, each rank done (``advance``).  Without
one (the default) they announce nothing.  :class:`RichSteps` shows them as rich progress bars on stderr,
one row per phase with its ranks done and its time, which the commands use on a terminal only
(``chakra.io.executor.show_progress``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from chakra.tunables import PROGRESS_REDRAW_S


class Steps(Protocol):
    """Where a long replay reports what it is doing."""

    def phase(self, what: str, total: int = 1) -> None:
        """A new phase (the previous one is over): ``what`` it does, in ``total`` steps."""

    def advance(self, n: int = 1) -> None:
        """``n`` more steps of the current phase are done."""


class RichSteps:
    """:class:`Steps` as rows of a rich ``Progress`` (started by the caller): each phase a task that is
    completed when the next begins.  Redrawn by the calling thread only (no refresh thread: the replay's
    reading forks, which ``chakra.io.forkmap`` does not do while another thread runs)."""

    def __init__(self, bars: Any) -> None:
        self.bars = bars
        self.task: Any = None
        self.total = 0
        self.drawn = 0.0

    def phase(self, what: str, total: int = 1) -> None:
        self.close()
        self.task = self.bars.add_task(what, total=total)
        self.total = total
        self._draw(force=True)

    def advance(self, n: int = 1) -> None:
        if self.task is not None:
            self.bars.update(self.task, advance=n)
            self._draw()

    def close(self) -> None:
        """Complete the current phase's bar."""
        if self.task is not None:
            self.bars.update(self.task, completed=self.total)
            self._draw(force=True)
            self.task = None

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.drawn >= PROGRESS_REDRAW_S:
            self.bars.refresh()
            self.drawn = now


def rich_bars() -> Any:
    """A rich ``Progress`` on stderr: description, bar, steps done of all, time elapsed; redrawn only when
    asked (``auto_refresh=False``: see :class:`RichSteps`)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=False, auto_refresh=False)


def log_above(bars: Any) -> list[tuple[logging.StreamHandler[Any], Any]]:
    """While ``bars`` show (started), this process's log lines to stderr go through rich, printed above the
    bars instead of through them; give the result to :func:`restore_logging` when the bars stop."""
    moved: list[tuple[logging.StreamHandler[Any], Any]] = []
    proxy = sys.stderr          # rich's proxy while the bars show on a terminal
    if proxy is sys.__stderr__:
        return moved
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler and handler.stream is sys.__stderr__:
            moved.append((handler, handler.stream))
            handler.setStream(proxy)
    return moved


def restore_logging(moved: list[tuple[logging.StreamHandler[Any], Any]]) -> None:
    """The log handlers :func:`log_above` moved, back on their streams."""
    for handler, stream in moved:
        handler.setStream(stream)


@contextmanager
def job_steps(show: bool) -> Iterator[RichSteps | None]:
    """Progress bars of a whole-job replay on stderr while the block runs (``show``), else None."""
    if not show:
        yield None
        return
    bars = rich_bars()
    bars.start()
    moved = log_above(bars)
    steps = RichSteps(bars)
    try:
        yield steps
        steps.close()
    finally:
        restore_logging(moved)
        bars.stop()
