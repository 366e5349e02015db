"""What every command shares: logging, error reporting, exit codes.

A command module only builds its argparse parser and calls one library
function; ``run_command`` turns ChakraError into ``chakra: <file>: <reason>``
with exit code 1 (bad data) or 2 (bad usage), and shows a traceback only with
``--debug``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

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


def run_command(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace,
                prog: str) -> int:
    """Call ``func(args)`` and map failures to exit codes."""
    debug = bool(getattr(args, "debug", False))
    try:
        rc = func(args)
        return int(rc or 0)
    except ChakraError as exc:
        if debug:
            raise
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1
    except MemoryError:
        sys.stderr.write(f"{prog}: error: out of memory\n")
        return 1


def not_built(prog: str) -> Callable[[Sequence[str] | None], int]:
    """Entry point for a command that does not exist yet: say so, exit 2."""

    def main(argv: Sequence[str] | None = None) -> int:
        sys.stderr.write(f"{prog}: not built yet in this version of the toolkit\n")
        return 2

    return main
