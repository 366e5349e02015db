"""One stage's per-node work split over the cores this process may use: the one parallel mechanism and policy.

A stage that does the same thing to every node of a file (decode it, serialise it) cuts its node range into
``parts()`` contiguous pieces and calls :func:`fork_map`: piece 0 runs in this process, every other piece in a
forked child that sees the parent's data as it was at the fork (nothing is pickled on the way in) and sends
its result back pickled, streamed into a temporary file without a name (in ``TMPDIR``: :func:`_unnamed_file`)
that this process reads once the child has exited.  A file, not a pipe: the child writes its result as soon as
it has it, while this process is still at its own piece (through a pipe it waited for this process to read:
1M-op link, 3.9 s for the Kineto child's 225 MB at the end of the host load); its pages are the kernel's page
cache, not memory of either process (where ``TMPDIR`` is a tmpfs they are memory, until this process has
unpickled them).  The results come back in piece order, so a stage that concatenates them produces the same
output for any number of parts; the tests run every such stage with 1 and with several parts and compare.

Policy (the only one):

* ``parts()`` is the number of CPUs this process may run on (``os.sched_getaffinity``), or ``CHAKRA_PARTS``
  when set (``1``: everything in this process).  A rank worker of a multi-rank pipeline runs with 1 (the
  pipeline already keeps every core busy with ranks).
* Where ``os.fork`` does not exist (Windows) there is one part.
* A piece smaller than ``min_size`` items is not worth a process (fork + pickling cost about a
  millisecond per thousand nodes of result): ``split`` makes fewer pieces.
* A stage whose result is bytes for one file (the converter's ``.et`` nodes, the linker's ET+ nodes) passes
  a ``sink``: each piece writes its bytes through the ``write`` it is given, piece 0 straight into the sink,
  each child into its temporary file, appended to the sink in piece order: by the kernel where it can
  (``os.copy_file_range``: no copy in either process's memory), else read and written by this process (a
  temporary folder on another file system, a sink that transforms its bytes such as the gzip writer).
* A child that fails with an exception re-raises it here (its type and message); a child that dies (killed,
  out of memory) or cannot write its result (disk full) raises :class:`chakra.errors.ChakraError` naming
  the stage.  A fork that fails (no memory for the process) or a temporary file that cannot be opened logs
  a warning and runs that piece here: slower, never silent.
* A process in which another thread runs does not fork (the child would inherit any lock that thread held
  at that instant, e.g. a progress display's, and could hang on it; Python 3.12 warns): its pieces run
  here, said once at INFO level (a Dask client leaves such a thread behind: the whole-job replay after
  ``--scheduler local`` reads in one part).  The stages start their own threads after forking (the ET+
  writer's).
* A Ctrl-C or SIGTERM (or the timer that raises again one that came during an import) that arrives while a
  child is being started (its temporary file made and unlinked, the fork, the child listed) or handed to
  the function that waits for it is held back until the child is accounted for, then taken as usual: every
  child started is killed and reaped, no temporary file is left.  The child runs with the signal mask of
  before.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from chakra.errors import ChakraError
from chakra.tunables import FORK_RESULT_BUFFER_BYTES

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Sink(Protocol):
    """Where :func:`fork_map` appends the pieces' bytes: a binary file open for writing at its end, or an
    object with the same four methods (the ET+ writer's, which compresses on a thread of its own)."""

    def write(self, data: bytes, /) -> Any: ...

    def flush(self) -> None: ...

    def fileno(self) -> int: ...

    def seek(self, offset: int, whence: int = ..., /) -> int: ...

_ENV = "CHAKRA_PARTS"
_UNPICKLABLE = 3   # a child's exit code: its result did not pickle
_UNWRITABLE = 4    # a child's exit code: its result could not be written (disk full)


def parts() -> int:
    """How many pieces a stage splits its nodes into (see the module doc)."""
    if not hasattr(os, "fork"):
        return 1
    env = os.environ.get(_ENV)
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            log.warning("%s=%r is not a number; using 1", _ENV, env)
            return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def serial_workers() -> None:
    """Called in a rank worker of a process pool: its stages run in one part (the pool uses the cores)."""
    os.environ[_ENV] = "1"


def split(n: int, min_size: int, k: int | None = None) -> list[range]:
    """``range(n)`` cut into at most ``k`` (default ``parts()``) contiguous pieces of nearly equal size, each
    at least ``min_size`` long (one piece when ``n`` is small)."""
    k = parts() if k is None else k
    k = max(1, min(k, n // max(1, min_size)))
    step, extra = divmod(n, k)
    out: list[range] = []
    a = 0
    for i in range(k):
        b = a + step + (1 if i < extra else 0)
        out.append(range(a, b))
        a = b
    return out


def fork_map(fn: Callable[..., R], pieces: Sequence[T], what: str, sink: Sink | None = None) -> list[R]:
    """``[fn(p) for p in pieces]``, the first piece here, each other one in a forked child (module doc).

    ``what`` names the work in error messages (e.g. "decoding nodes of x.json").  ``fn``'s result must
    pickle; ``fn`` must not rely on changes a child makes to shared state (they stay in the child).

    ``sink``: a binary file open for writing at its end, or an object with its ``write``, ``flush``,
    ``seek`` and a ``fileno`` that raises when the bytes written to it are not the bytes that reach the file
    (``io.UnsupportedOperation``: compressed, for instance).  ``fn`` is then called as ``fn(piece, write)``
    and the bytes it gives ``write`` are appended to ``sink``, the pieces' in piece order, each piece's
    once every piece before it is in (see the module doc).
    """
    if len(pieces) <= 1 or not _may_fork(what):
        return [_here(fn, p, sink) for p in pieces]
    children: list[tuple[int, int, str] | None] = []
    out: list[R] = []
    try:
        for p in pieces[1:]:
            siblings = [ch[1] for ch in children if ch is not None]
            # a Ctrl-C / SIGTERM arriving from the temporary file's creation to the child being listed is
            # taken once it is listed: no file left behind, no child left running unwaited
            with _signals_held() as mask:
                children.append(_spawn(fn, p, what, siblings, sink is not None, mask))
        out.append(_here(fn, pieces[0], sink))
        for k, (p, ch) in enumerate(zip(pieces[1:], children)):
            if ch is None:
                out.append(_here(fn, p, sink))
            else:
                # held until _collect answers for the child (it lets them through before it waits)
                with _signals_held() as mask:
                    children[k] = None   # _collect closes and reaps it, whatever happens
                    out.append(_collect(ch, what, sink, mask))
    except BaseException:
        for ch in children:
            if ch is not None:
                _reap(ch)
        raise
    return out


def _may_fork(what: str) -> bool:
    """Whether this is the only thread running (module doc); said once when not."""
    others = threading.active_count() - 1
    if others <= 0:
        return True
    global _told
    if not _told:
        _told = True
        log.info("%s and the rest in one process: %d other thread(s) running here, a forked part could hang "
                 "on a lock one of them holds", what, others)
    return False


_told = False


def _here(fn: Callable[..., R], piece: Any, sink: Sink | None) -> R:
    return fn(piece) if sink is None else fn(piece, sink.write)


@contextlib.contextmanager
def _signals_held() -> Iterator[Any]:
    """SIGINT and SIGTERM held back by the system while the block runs, delivered (their Python handlers
    run) once it is over; yields the signal mask to restore in a child forked meanwhile (None where the
    system has no per-thread signal mask: nothing held)."""
    try:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    except (AttributeError, OSError, ValueError):
        yield None
        return
    try:
        yield mask
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


# SIGALRM too: a Ctrl-C that came during an import is raised again by a timer (chakra.cli.common._Signals)
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)


def _spawn(fn: Callable[..., Any], piece: Any, what: str, siblings: list[int], raw: bool,
           mask: Any = None) -> tuple[int, int, str] | None:
    """Fork a child that runs ``fn(piece)`` (``raw``: ``fn(piece, write)``) and writes the pickled result
    into a new file without a name; (pid, the file's descriptor, its folder), or None (a warning said why)
    when the piece is to run here.  ``siblings``: the files of the children started before, which this one
    closes; ``mask``: the signal mask the child runs with (this process holds the signals of :data:`_HELD`
    back meanwhile)."""
    try:
        fd, folder = _unnamed_file()   # nothing left behind, whatever happens to either process
    except OSError as exc:
        log.warning("could not open a temporary file for %s (%s); doing that part in this process", what, exc)
        return None
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(fd)
        log.warning("could not start a process for %s (%s); doing that part in this process", what, exc)
        return None
    except BaseException:
        os.close(fd)
        raise
    if pid == 0:   # the child: compute, send, leave without running the parent's clean-up
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os._exit(_child(fn, piece, fd, siblings, raw))
    return pid, fd, folder


def _unnamed_file() -> tuple[int, str]:
    """A new file that no name points to, open for reading and writing, and its folder: the temporary
    folder as ``tempfile`` chooses it on a usual system (``TMPDIR``, ``TEMP`` or ``TMP``, else ``/tmp``),
    opened with ``O_TMPFILE``.  Where that fails (no such flag, a file system without unnamed files, that
    folder not writable) ``tempfile`` makes a named file, unlinked at once: imported only then, it and the
    ``shutil`` it brings cost every command ~5 ms."""
    folder = os.environ.get("TMPDIR") or os.environ.get("TEMP") or os.environ.get("TMP") or "/tmp"
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            return os.open(folder, flag | os.O_RDWR, 0o600), folder
        except OSError:
            pass
    import tempfile

    fd, name = tempfile.mkstemp(prefix="chakra-part-")
    try:
        os.unlink(name)
    except BaseException:
        os.close(fd)
        raise
    return fd, os.path.dirname(name)


class _Unwritable(Exception):
    """A child's bytes could not be written to its temporary file."""


def _child(fn: Callable[..., Any], piece: Any, fd: int, siblings: list[int], raw: bool) -> int:
    """The child's work; its exit code (0: the file holds the bytes it wrote (``raw``), then the pickled
    ``(True, result)`` or ``(False, exception)``, then the length of those bytes in 8 bytes)."""
    code = 1
    try:
        for other in siblings:   # (its pages would stay alive while this child runs)
            os.close(other)
        with os.fdopen(fd, "wb", buffering=FORK_RESULT_BUFFER_BYTES) as f:
            written = 0

            def write(data: bytes) -> None:
                nonlocal written
                try:
                    f.write(data)
                except OSError:
                    raise _Unwritable from None
                written += len(data)

            try:
                result = fn(piece, write) if raw else fn(piece)
            except _Unwritable:
                code = _UNWRITABLE
                raise
            except BaseException as exc:   # noqa: BLE001 - sent to the parent, which re-raises it
                f.write(_error_payload(exc))
            else:
                # streamed: no second copy of the result as one bytes object here
                try:
                    pickle.dump((True, result), f, protocol=pickle.HIGHEST_PROTOCOL)
                except OSError:
                    code = _UNWRITABLE
                    raise
                except (pickle.PicklingError, TypeError, AttributeError):
                    code = _UNPICKLABLE
                    raise
            code = _UNWRITABLE   # the last bytes go out as the file is closed
            f.write(written.to_bytes(8, "little"))
        code = 0
    except BaseException:   # noqa: BLE001 - nothing to report to: the parent sees the exit code
        pass
    return code


def _error_payload(exc: BaseException) -> bytes:
    """The child's exception, pickled; as a ChakraError with its text when it would not come back whole
    (it does not pickle, or does not unpickle: a constructor with other arguments than its ``args``)."""
    try:
        data = pickle.dumps((False, exc), protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception:   # noqa: BLE001 - sent as text
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return pickle.dumps((False, ChakraError(text)), protocol=pickle.HIGHEST_PROTOCOL)


def _collect(child: tuple[int, int, str], what: str, sink: Sink | None = None, mask: Any = None) -> Any:
    """The result of a child (its exception raised here), once it has exited, its bytes appended to
    ``sink``; the child reaped and its file closed whatever happens.  ``mask``: the signal mask to restore
    once this function answers for the child (the caller held signals back until then)."""
    pid, fd, folder = child
    try:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _, status = os.waitpid(pid, 0)
    except BaseException:
        _reap(child)
        raise
    try:
        code = os.waitstatus_to_exitcode(status)
        size = os.fstat(fd).st_size if code == 0 else 0
        if size:
            try:
                # unpickled from the file's pages mapped, not from a copy of them (1M-op link: 225 MB
                # less at the parent's peak, and a third faster)
                with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
                    raw = int.from_bytes(data[size - 8:], "little")
                    with memoryview(data) as view, view[raw:size - 8] as payload:
                        ok, value = pickle.loads(payload)
            except Exception as exc:   # noqa: BLE001 - said with the cause
                raise ChakraError(f"the result of the process {what} could not be read back ({exc!r}); "
                                  f"{_ENV}=1 does all the work in one process") from exc
            if not ok:
                raise value
            if raw and sink is not None:
                _append(fd, raw, sink)
            return value
    finally:
        os.close(fd)
    if code == _UNWRITABLE:
        raise ChakraError(f"the process {what} could not write its result to {folder} (disk "
                          f"full?); set TMPDIR to a folder with room, or {_ENV}=1 to do all the work in one "
                          "process")
    if os.WIFSIGNALED(status):
        how = f"killed by signal {os.WTERMSIG(status)}; out of memory?"
    elif code == _UNPICKLABLE:
        how = "its result could not be pickled"
    else:
        how = f"exit code {code}; out of memory?"
    raise ChakraError(f"the process {what} died ({how}); {_ENV}=1 does all the work in one process")


def _append(fd: int, size: int, sink: Sink) -> None:
    """The first ``size`` bytes of the file ``fd`` appended to ``sink``: copied by the kernel
    (``os.copy_file_range``), else (another system, a kernel that refuses it between these two file
    systems, a sink without a file descriptor of its own such as a compressing one) read and written
    1 MB at a time."""
    sink.flush()
    try:
        out: int | None = sink.fileno()
    except (AttributeError, OSError, ValueError):   # (io.UnsupportedOperation is both)
        out = None
    done = 0
    copy = getattr(os, "copy_file_range", None)
    if copy is not None and out is not None:
        try:
            while done < size:
                n = copy(fd, out, size - done, done)
                if n <= 0:
                    break
                done += n
        except OSError as exc:
            if exc.errno not in _NO_COPY:
                raise
            log.debug("os.copy_file_range refused (%s): copying through this process", exc)
    while done < size:
        chunk = os.pread(fd, min(FORK_RESULT_BUFFER_BYTES, size - done), done)
        if not chunk:
            raise ChakraError(f"a temporary file ended {size - done} bytes early")
        sink.write(chunk)
        done += len(chunk)
    sink.flush()
    if out is not None:
        sink.seek(0, os.SEEK_END)   # (the buffered file's idea of its position, after the kernel's writes)


# copy_file_range errors that mean "not between these files": copied the other way
_NO_COPY = frozenset(getattr(errno, name) for name in ("EXDEV", "ENOSYS", "EINVAL", "EOPNOTSUPP", "EBADF")
                     if hasattr(errno, name))


def _reap(child: tuple[int, int, str]) -> None:
    pid, fd, _ = child
    try:
        os.close(fd)
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except OSError:
            pass

