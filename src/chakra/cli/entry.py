"""How a command's process ends: :func:`console_entry` makes the function its console script calls."""

from __future__ import annotations

import atexit
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
        exit_process(main())

    run.__doc__ = f"``{main.__module__}.main()`` as a command: the process ends with its exit code"
    return run


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
