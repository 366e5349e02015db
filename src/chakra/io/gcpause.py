"""One switch for the cyclic garbage collector during bulk work.

Loading, linking, converting and replaying build millions of small acyclic
objects that all stay alive; every 700 allocations the cyclic GC would walk them
again and find nothing to free (3-4x the load time of a 12 MB host ET, 15 s of
58 s when linking a million ops).  Every stage pauses it through this one
context manager; nesting is safe (only the outermost level re-enables it).

And one switch for freeing at the end of a stage: a command's process that runs one stage and ends
(``chakra.cli.entry.exit_process``: the interpreter's teardown skipped) need not free what the stage drops at
its end one object at a time; :func:`keep_to_exit` makes :func:`release` keep those objects instead (a
5k-op link frees its loaded traces in ~17 ms, 112 ms at 100k ops; the system takes the memory back at the
exit, at once).  Anywhere else (a library call, a test, a worker that runs many ranks) they are freed as
usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

_kept: list[Any] | None = None   # what release() keeps, after keep_to_exit()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC for the block; restore the previous state afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def keep_to_exit(on: bool = True) -> list[Any]:
    """From now on (``on``), :func:`release` keeps what it is given to the end of the process, or no longer
    (``on`` False: what it kept is handed back, and freed once the caller drops it).  For a command's process
    that runs one stage and ends without the interpreter's teardown, nothing else."""
    global _kept
    if on:
        if _kept is None:
            _kept = []
        return []
    was, _kept = _kept or [], None
    return was


def release(*objs: Any) -> None:
    """The caller is done with ``objs`` and drops its own references next: they are freed then, or kept to
    the end of the process after :func:`keep_to_exit`."""
    if _kept is not None:
        _kept.extend(objs)
