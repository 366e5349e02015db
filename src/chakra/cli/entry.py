"""How a command's process runs and ends: :func:`console_entry` makes the function its console script calls.

The cyclic garbage collector is off in a command's process from the call of ``main`` on: the stages pause it
for their bulk work anyway (:func:`chakra.io.gc_paused`), and on between them it walks every object they made
and kept, or that the imports of the stage modules made, to find nothing to free (a link and a convert
--simulate of a 14.8k-op trace: 35 and 43 collections, 6 and 7-13 ms; ``chakra pipeline`` of the 8 DLRM ranks:
1.19 -> 1.14 s median).  A command's objects are freed by their reference counts, and the process ends with
its work; what a rank of the pipeline leaves in reference cycles is checked to stay near nothing
(``tests/pipeline/test_pipeline.py``).  Callers of ``main`` in a process of their own (tests, scripts) keep
their collector; a Dask client turns it back on (:func:`chakra.io.executor.dask_client`).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def console_entry(main: Callable[[], int]) -> Callable[[], NoReturn]:
    """The function a console script calls (``[project.scripts]`` of ``pyproject.toml``, and ``python -m``):
    ``main()``, then :func:`exit_process` with its exit code.  Tests and callers in a process of their own
    call ``main`` itself."""

    def run() -> NoReturn:
        global _console
        gc.disable()   # (the module doc)
        _console = True
        exit_process(main())

    run.__doc__ = f"``{main.__module__}.main()`` as a command: the process ends with its exit code"
    return run


_console = False   # set by a console script's process (console_entry's run): it ends with exit_process


def console_process() -> bool:
    """Whether this is a command's own process, which ends with :func:`exit_process` (not a test or a
    program calling ``main``)."""
    return _console


def exit_process(code: int | None) -> NoReturn:
    """End the process with ``code`` the way the interpreter does at exit (non-daemon threads joined, the
    ``atexit`` functions run, logging's flush and close among them, the standard streams flushed), but
    without its teardown, where it frees one by one every object still alive (modules, caches, what a
    command loaded): about 20 ms of a 5k-op link or conversion, after which the system takes the memory
    back at once.  Where the interpreter lacks what this needs, ``sys.exit(code)``."""
    if code is None:   # as sys.exit: None is 0, anything else not an int is printed and is 1
        code = 0
    elif not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        code = 1
    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None:
        sys.exit(code)
    shutdown()
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):   # a closed pipe: as the interpreter, exit code 120
            code = code or 120
    os._exit(code)
