"""Run one function in a forked child process while this one goes on; collect its pickled result.

The loaders of large traces use it to keep the second core busy: e.g. the linker reads the host ET in a
child while it reads the Kineto trace itself.  What the child returns should be cheap to pickle (columns
of ints, strings and bytes, not a million objects).

Rules that keep it safe:

* it forks only where that helps and cannot hurt (:func:`may_fork`): fork exists, a second core, this
  process is not a worker of a process pool (the pool already uses the cores), no other thread is
  running (a child could inherit a lock such a thread holds);
* the result travels through an unnamed temporary file, and the child is killed when its parent dies
  (Linux ``PR_SET_PDEATHSIG``): nothing is left behind however either process ends;
* any failure in the child (an exception, a crash, a result that does not unpickle) is reported to the
  caller as "no result" (``None``): the caller then does the work itself, so errors and their messages
  are those of the one-process code.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any


def may_fork() -> bool:
    """Whether a forked helper process can save time here (see module doc)."""
    return hasattr(os, "fork") and usable_cpus() > 1 and safe_to_fork()


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def safe_to_fork() -> bool:
    """Not a worker of a process pool, and no other thread running (see module doc)."""
    import multiprocessing
    import threading

    return threading.active_count() == 1 and multiprocessing.parent_process() is None


class ForkedCall:
    """``func(*args)`` running in a forked child; :meth:`result` waits for it.

    With ``stream`` the function is a generator: the child pickles each item as soon as it is made
    (the parent never holds more than the items), and :meth:`result` returns the list of items."""

    def __init__(self, func: Callable[..., Any], *args: Any, stream: bool = False) -> None:
        self._stream = stream
        import tempfile

        self._pid: int | None = None
        self._fd: int | None = None
        fd, name = tempfile.mkstemp(prefix="chakra-child-", suffix=".pickle")
        os.unlink(name)  # unnamed from the start
        try:
            pid = os.fork()
        except OSError:
            os.close(fd)
            return
        if pid == 0:  # the child: never returns
            code = 1
            try:
                _die_with_parent()
                with os.fdopen(fd, "wb") as fh:
                    if stream:
                        for item in func(*args):
                            pickle.dump(item, fh, protocol=pickle.HIGHEST_PROTOCOL)
                    else:
                        pickle.dump(func(*args), fh, protocol=pickle.HIGHEST_PROTOCOL)
                code = 0
            except BaseException:  # noqa: BLE001 (the caller does the work again and reports it)
                code = 1
            finally:
                os._exit(code)
        self._pid = pid
        self._fd = fd

    @property
    def started(self) -> bool:
        return self._pid is not None

    def result(self) -> Any | None:
        """The child's return value, or None when it could not deliver one."""
        if self._pid is None:
            return None
        try:
            _, status = os.waitpid(self._pid, 0)
            self._pid = None
            if os.waitstatus_to_exitcode(status) != 0 or self._fd is None:
                return None
            os.lseek(self._fd, 0, os.SEEK_SET)
            with os.fdopen(self._fd, "rb") as fh:
                self._fd = None  # closed with fh
                if not self._stream:
                    return pickle.load(fh)
                items = []
                while True:
                    try:
                        items.append(pickle.load(fh))
                    except EOFError:
                        return items
        except Exception:  # noqa: BLE001 (no result: the caller does the work itself)
            return None
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Kill the child if it still runs; release the file."""
        if self._pid is not None:
            import signal

            try:
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
            except OSError:
                pass
            self._pid = None
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when its parent ends (no orphan works on for nobody)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
