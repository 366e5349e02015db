"""What every command shares: one option vocabulary, logging, error reporting, exit codes.

A command module only builds its argparse parser and calls one library
function; ``run_command`` turns ChakraError into ``chakra: <file>: <reason>``
with exit code 1 (bad data) or 2 (bad usage), and shows a traceback only with
``--debug``.

The vocabulary is made here, once, so that a command (or an option another
change adds) cannot drift from it: :class:`ArgumentParser` accepts every long
option in both spellings (``--output-dir`` and ``--output_dir``), has
``--version``, prints its ``examples`` under ``--help``, and takes its name
from the umbrella command when run as ``chakra <sub>``; :func:`add_common_args`
gives ``--log-level`` (WARNING by default: INFO lines only with ``-v``),
``--debug`` and ``--quiet``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, NoReturn

from chakra import __version__
from chakra.errors import MISSING_RANKS_OPTION, ChakraError, TraceFormatError, UsageError
from chakra.tunables import SIGNAL_REARM_S

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"
DEFAULT_LOG_LEVEL = "WARNING"

SPELLING_NOTE = "Every long option may be written with - or _ (--log-level or --log_level)."

# the name a command runs under when ``chakra <sub>`` called it (innermost last)
_UMBRELLA: list[str] = []


@contextlib.contextmanager
def umbrella_prog(name: str) -> Iterator[None]:
    """While the umbrella command runs a subcommand: its parsers and errors say ``name`` (``chakra link``)."""
    _UMBRELLA.append(name)
    try:
        yield
    finally:
        _UMBRELLA.pop()


def current_prog(default: str) -> str:
    """``default`` (the standalone program's name), or the umbrella's ``chakra <sub>`` when that runs it."""
    return _UMBRELLA[-1] if _UMBRELLA else default


def other_spellings(option: str) -> list[str]:
    """``--a-b_c`` -> ``--a_b_c``, ``--a-b-c``: the spellings a long option is also accepted under."""
    if not option.startswith("--") or len(option) <= 3:
        return []
    body = option[2:]
    out = []
    for alt in ("--" + body.replace("_", "-"), "--" + body.replace("-", "_")):
        if alt != option and alt not in out:
            out.append(alt)
    return out


def show_progress(quiet: bool = False) -> bool:
    """The commands' one progress rule (:func:`chakra.io.executor.show_progress`), imported when asked: the
    executor brings multiprocessing and concurrent.futures, which a command of one file never uses."""
    from chakra.io.executor import show_progress as rule

    return rule(quiet)


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` gives it: ``COLUMNS``, else what standard output's
    terminal says, else 80.  argparse asks it of a new help formatter, which it makes for every option it
    is given (to check the option's metavar), not only to print the help; ``shutil`` (with ``bz2``,
    ``lzma``, ``fnmatch``) costs every command ~4 ms to import."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            # (type: ignore: no __stdout__ raises the AttributeError caught below)
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns   # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, its width found without ``shutil`` (:func:`_columns`)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            width = _columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the toolkit's shared vocabulary (see the module docstring).

    ``examples``: a text block of command lines, one per line, shown under ``--help``; ``{prog}`` in them
    becomes the name the command runs under.  (A ``description`` is filled to the terminal's width by
    argparse: its line breaks do not matter.)  Other spellings of long options are registered at parse
    time, so an option added by any code, in a group or not, gets them; they are not listed in the help
    (the help says the rule once).  Unique prefixes of an option keep working although each option now
    has several names.
    """

    #: the metavar of the inputs :func:`add_inputs` added (at least one is needed), checked after parsing
    _needs_inputs: str | None = None

    def __init__(self, *args: Any, examples: str = "", version: bool = True, **kwargs: Any) -> None:
        if _UMBRELLA:
            kwargs["prog"] = _UMBRELLA[-1]
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)
        self.examples = [line.strip() for line in examples.splitlines() if line.strip()]
        if version:
            self.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                              help="print the toolkit version and exit")

    def error(self, message: str) -> NoReturn:
        """Exit 2 with the usage and a one-line message (argparse's own default, kept explicit)."""
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)

    def format_help(self) -> str:
        text = super().format_help()
        extra = []
        if self.examples:
            lines = ("  " + e.replace("{prog}", self.prog) for e in self.examples)
            extra.append("examples:\n" + "\n".join(lines))
        extra.append(SPELLING_NOTE)
        return text.rstrip("\n") + "\n\n" + "\n\n".join(extra) + "\n"

    def _add_other_spellings(self) -> None:
        table = self._option_string_actions
        for action in list(self._actions):
            for opt in list(action.option_strings):
                for alt in other_spellings(opt):
                    table.setdefault(alt, action)

    # (type: ignore: the stubs overload these on the namespace's type; the toolkit passes none or a Namespace)
    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._add_other_spellings()
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns = super().parse_args(args, namespace)
        if self._needs_inputs:
            if not (ns.inputs or ns.input_filename):
                self.error(f"give at least one {self._needs_inputs} (as an argument, or with "
                           "-i/--input_filename)")
            ns.inputs = list(ns.inputs) + list(ns.input_filename)   # positionals first
        return ns

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        # a prefix matching two spellings of one option is not ambiguous
        seen: set[int] = set()
        out = []
        for t in super()._get_option_tuples(option_string):
            if id(t[0]) not in seen:
                seen.add(id(t[0]))
                out.append(t)
        return out


class _Verbose(argparse.Action):
    """``-v``: INFO; ``-vv``: DEBUG (the same as ``--log-level INFO`` / ``DEBUG``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        current = str(getattr(namespace, self.dest, DEFAULT_LOG_LEVEL) or DEFAULT_LOG_LEVEL).upper()
        setattr(namespace, self.dest, "DEBUG" if current in ("INFO", "DEBUG") else "INFO")


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """--log-level (WARNING by default), --log-filename (unless the command has its own), -v/--verbose,
    --debug, --quiet."""
    parser.add_argument("--log-level", dest="log_level", default=DEFAULT_LOG_LEVEL, type=str.upper,
                        metavar="LEVEL", help="logging level: DEBUG, INFO, WARNING (default), ERROR")
    if "--log-filename" not in parser._option_string_actions:
        parser.add_argument("--log-filename", dest="log_filename", metavar="LOG",
                            help="also write the log to LOG (INFO and above)")
    parser.add_argument("--verbose", "-v", dest="log_level", nargs=0, action=_Verbose,
                        help="log what is done (INFO); -vv: DEBUG")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars, warnings only")


def add_missing_ranks(parser: argparse.ArgumentParser, doing: str) -> None:
    """``--allow-missing-ranks``, one name in every command that takes a whole job (validate, replay --job,
    pipeline): by default a job of which the traces say it has more ranks than were given is refused,
    naming the missing ranks; with it, ``doing`` goes on with the ranks given (a warning names the others)."""
    parser.add_argument(MISSING_RANKS_OPTION, dest="allow_missing_ranks", action="store_true",
                        help="when the traces' process-group table (world size, the groups' ranks) says the "
                             f"job has ranks that were not given, {doing} the ranks given alone (default: "
                             "refuse, naming the missing ranks)")


def add_inputs(parser: ArgumentParser, metavar: str, help: str) -> None:
    """Input files as positionals and/or ``-i``/``--input``/``--input_filename`` (the 2024 tools' form).
    After parsing, ``args.inputs`` holds them all, the positionals first; none is a usage error."""
    parser.add_argument("inputs", nargs="*", metavar=metavar, help=help)
    parser._needs_inputs = metavar   # checked and merged after parsing
    parser.add_argument("-i", "--input", "--input-filename", dest="input_filename", action="extend",
                        nargs="+", default=[], metavar="FILE", help="the same inputs given as an option")


def start_logging(args: argparse.Namespace) -> None:
    """:func:`setup_logging` as the options of :func:`add_common_args` ask."""
    setup_logging(args.log_level, getattr(args, "log_filename", None), args.quiet)


def setup_logging(level: str = DEFAULT_LOG_LEVEL, filename: str | None = None, quiet: bool = False) -> None:
    lvl = getattr(logging, str(level).upper(), None)
    if not isinstance(lvl, int):
        raise UsageError(f"unknown log level {level!r} (DEBUG, INFO, WARNING, ERROR)")
    if quiet and lvl < logging.WARNING:
        lvl = logging.WARNING
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(lvl)       # its own level: a log file may ask the root logger for more (INFO)
    handlers: list[logging.Handler] = [console]
    root_level = lvl
    if filename:
        from chakra.io.sniff import log_file_handler

        handlers.append(log_file_handler(filename))
        root_level = min(lvl, logging.INFO)
        handlers[-1].setLevel(root_level)
    logging.basicConfig(level=root_level, format=LOG_FORMAT, handlers=handlers, force=True)


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

    Nor does it raise while a module is being imported: an extension module whose initialisation is cut
    short by an exception from a nested import can crash the interpreter (orjson 3.x does: a Ctrl-C during
    a command's start-up ended in a segmentation fault).  The interrupt stays pending and the timer raises
    it once the import is done, a few hundred milliseconds later at most.
    """

    pending: int | None = None

    @classmethod
    def interrupt(cls, signum: int) -> KeyboardInterrupt:
        return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)

    @classmethod
    def on_signal(cls, signum: int, frame: FrameType | None) -> None:
        cls.pending = signum
        cls._arm()
        if _importing(frame):
            return  # the timer raises it once the import is done
        raise cls.interrupt(signum)

    @classmethod
    def on_alarm(cls, signum: int, frame: FrameType | None) -> None:
        if cls.pending is None:
            return
        cls._arm()
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            return  # already unwinding (cleanup under way): do not interrupt the cleanup
        if _importing(frame):
            return
        raise cls.interrupt(cls.pending)

    @classmethod
    def _arm(cls) -> None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            signal.setitimer(signal.ITIMER_REAL, SIGNAL_REARM_S)

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


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside the import machinery (a module's top level or an extension's init)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


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


def _kind_hint(exc: ChakraError) -> str:
    """What the file is, when a command read it as JSON or as a protobuf ET and it was the other kind."""
    if not isinstance(exc, TraceFormatError) or exc.path is None:
        return ""
    if exc.message.startswith("not valid JSON"):
        expected = "json"
    elif "is not a valid protobuf" in exc.message:
        expected = "chakra"
    else:
        return ""
    from chakra.io.sniff import wrong_kind_hint

    return wrong_kind_hint(exc.path, expected)


def run_command(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace,
                prog: str) -> int:
    """Call ``func(args)`` and map failures to exit codes.

    ChakraError: one ``<prog>: error: <file>: <problem>`` line, its exit code (1 data, 2 usage).
    Ctrl-C / SIGTERM: the partial output is removed by ``atomic_output`` while the interrupt unwinds;
    exit 130 / 143.  Any other exception is a bug: one line saying so (traceback with ``--debug``).
    """
    debug = bool(getattr(args, "debug", False))
    prog = current_prog(prog)
    previous = _Signals.install()
    try:
        rc = func(args)
        return int(rc or 0)
    except ChakraError as exc:
        if debug:
            raise
        sys.stderr.write(f"{prog}: error: {_one_line(str(exc))}{_kind_hint(exc)}\n")
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


def command(run: Callable[[argparse.Namespace], int | None],
            build_parser: Callable[..., argparse.ArgumentParser], name: str,
            check: Callable[[argparse.Namespace, argparse.ArgumentParser], None] | None = None,
            *, logs: bool = True) -> tuple[Callable[..., int], Callable[[], Any]]:
    """``(main, console)`` of the command module of ``run`` (named ``name``).  ``main(argv=None, prog=None)``
    parses ``argv`` (default: the process's arguments) with a new ``build_parser(prog)`` (``prog``: another
    program name, for a script that wraps the command such as ``ci_tools/integration_tests.py``), lets
    ``check(args, parser)`` refuse (``parser.error``) or complete them, and runs ``run(args)`` under
    :func:`run_command`, logging started first as the common options ask (:func:`start_logging`; ``logs``
    False: ``run`` sets up its own); ``console`` is what the console script calls
    (:func:`chakra.cli.entry.console_entry`: the process ends with main's exit code)."""
    from chakra.cli.entry import console_entry

    def logged(args: argparse.Namespace) -> int | None:
        start_logging(args)
        return run(args)

    def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
        parser = build_parser() if prog is None else build_parser(prog)
        args = parser.parse_args(argv)
        if check is not None:
            check(args, parser)
        return run_command(logged if logs else run, args, name if prog is None else prog)

    main.__module__ = run.__module__
    main.__qualname__ = main.__name__   # the module's own ``main``: it pickles by reference
    main.__doc__ = f"``{name}`` with the arguments ``argv`` (default: the process's); its exit code."
    return main, console_entry(main)
