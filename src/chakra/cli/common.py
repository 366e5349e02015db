"""What every command shares: logging, error reporting, exit codes.

A command module only builds its argparse parser and calls one library
function; ``run_command`` turns ChakraError into ``chakra: <file>: <reason>``
with exit code 1 (bad data) or 2 (bad usage), and shows a traceback only with
``--debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from chakra.errors import ChakraError

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"


class ArgumentParser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line message (argparse's own default, kept explicit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """--log-level / --log_level, --log-filename, --debug, --quiet."""
    parser.add_argument("--log-level", "--log_level", dest="log_level", default="INFO",
                        help="logging level (DEBUG, INFO, WARNING, ERROR)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars, warnings only")


def setup_logging(level: str = "INFO", filename: str | None = None, quiet: bool = False) -> None:
    lvl = getattr(logging, str(level).upper(), None)
    if not isinstance(lvl, int):
        raise ChakraError(f"unknown log level {level!r}")
    if quiet and lvl < logging.WARNING:
        lvl = logging.WARNING
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if filename:
        handlers.append(logging.FileHandler(filename, mode="w"))
    logging.basicConfig(level=lvl, format=LOG_FORMAT, handlers=handlers, force=True)


def show_progress(quiet: bool = False) -> bool:
    """Progress bars only on a terminal and when not asked to be quiet."""
    return not quiet and sys.stderr.isatty() and os.environ.get("CHAKRA_NO_PROGRESS") is None


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C so that every ``finally`` and atomic-output cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """SIGINT / SIGTERM raise in the main thread, and keep raising until the interrupt is handled.

    Python runs a signal handler between two bytecodes, wherever they are; when that is inside a weakref
    callback or a ``__del__`` (the import machinery has some), the exception is printed as "ignored" and
    the program carries on as if nothing happened.  So the handler also arms a 0.2 s timer (SIGALRM) that
    raises again while the interrupt is pending and no handler is busy with it; ``run_command`` clears it
    once the interrupt reached it.
    """

    pending: int | None = None
    REARM_S = 0.2

    @classmethod
    def interrupt(cls, signum: int) -> KeyboardInterrupt:
        return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)

    @classmethod
    def on_signal(cls, signum: int, frame: object) -> None:
        cls.pending = signum
        cls._arm()
        raise cls.interrupt(signum)

    @classmethod
    def on_alarm(cls, signum: int, frame: object) -> None:
        if cls.pending is None:
            return
        cls._arm()
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            return  # already unwinding (cleanup under way): do not interrupt the cleanup
        raise cls.interrupt(cls.pending)

    @classmethod
    def _arm(cls) -> None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            signal.setitimer(signal.ITIMER_REAL, cls.REARM_S)

    @classmethod
    def clear(cls) -> None:
        cls.pending = None
        with contextlib.suppress(ValueError, OSError, AttributeError):
            signal.setitimer(signal.ITIMER_REAL, 0)

    @classmethod
    def install(cls) -> dict[int, Any] | None:
        """Install the handlers (main thread only); the previous ones, to restore, or None."""
        previous: dict[int, Any] = {}
        try:
            for sig, handler in ((signal.SIGTERM, cls.on_signal), (signal.SIGINT, cls.on_signal),
                                 (getattr(signal, "SIGALRM", None), cls.on_alarm)):
                if sig is not None:
                    previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread: leave signals alone
            cls.restore(previous)
            return None
        return previous

    @classmethod
    def restore(cls, previous: dict[int, Any] | None) -> None:
        cls.clear()  # no timer may fire once SIGALRM has its default action (which ends the process)
        for sig, handler in (previous or {}).items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)


def _interrupt_in_chain(exc: BaseException) -> KeyboardInterrupt | None:
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 20:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return None


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def run_command(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace,
                prog: str) -> int:
    """Call ``func(args)`` and map failures to exit codes.

    ChakraError: one ``<prog>: error: <file>: <problem>`` line, its exit code (1 data, 2 usage).
    Ctrl-C / SIGTERM: the partial output is removed by ``atomic_output`` while the interrupt unwinds;
    exit 130 / 143.  Any other exception is a bug: one line saying so (traceback with ``--debug``).
    """
    debug = bool(getattr(args, "debug", False))
    previous = _Signals.install()
    try:
        rc = func(args)
        return int(rc or 0)
    except ChakraError as exc:
        if debug:
            raise
        sys.stderr.write(f"{prog}: error: {_one_line(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt as exc:
        _Signals.clear()
        if isinstance(exc, Terminated):
            sys.stderr.write(f"{prog}: terminated (signal {exc.signum})\n")
            return 128 + exc.signum
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1
    except MemoryError:
        sys.stderr.write(f"{prog}: error: out of memory\n")
        return 1
    except Exception as exc:  # a bug, not the user's fault: still no traceback without --debug
        wrapped = _interrupt_in_chain(exc)
        if wrapped is not None:  # e.g. Ctrl-C during an import: Python wraps it in a RuntimeError
            _Signals.clear()
            sys.stderr.write(f"{prog}: interrupted\n" if not isinstance(wrapped, Terminated)
                             else f"{prog}: terminated (signal {wrapped.signum})\n")
            return 128 + (wrapped.signum if isinstance(wrapped, Terminated) else signal.SIGINT)
        if debug:
            raise
        sys.stderr.write(f"{prog}: internal error: {type(exc).__name__}: {_one_line(str(exc))[:300]} "
                         "(rerun with --debug for the traceback)\n")
        return 1
    finally:
        if previous is not None:
            _Signals.restore(previous)


def not_built(prog: str) -> Callable[[Sequence[str] | None], int]:
    """Entry point for a command that does not exist yet: say so, exit 2."""

    def main(argv: Sequence[str] | None = None) -> int:
        sys.stderr.write(f"{prog}: not built yet in this version of the toolkit\n")
        return 2

    return main
