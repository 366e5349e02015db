"""Atomic output: a file appears complete under its final name or not at all."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import BinaryIO

from chakra.errors import ChakraError, UsageError


def check_output_path(path: str | os.PathLike[str], prefix: bool = False) -> str:
    """``path`` as a string, or a UsageError naming it: its directory is missing or not a directory, or it
    is itself a directory (unless ``prefix``: the start of the names of several outputs).  Commands call it
    before their work, :func:`atomic_output` again when it opens the file."""
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    # A missing directory is a typo more often than an intent: say so instead of creating it (the
    # linker has always refused), and never leave a directory tree behind a failed command.
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.exists(directory) else "does not exist"
        raise UsageError(f"output directory {directory} {what}", target)
    if not prefix and os.path.isdir(target):
        raise UsageError("output path is a directory", target)
    return target


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path``; rename it over ``path`` only on success.

    On any exception (including KeyboardInterrupt from SIGINT) the temporary
    file is removed and an existing ``path`` is left untouched.
    """
    target = check_output_path(path)
    directory = os.path.dirname(target) or "."
    # The name is chosen before the file exists and everything from the open to the rename sits in one
    # ``try``, so that a Ctrl-C / SIGTERM landing anywhere finds a name to clean up; O_EXCL makes the
    # open as safe as mkstemp's, and mode 0o666 lets the umask give the permissions a plain open() would.
    tmp: str | None = None
    fd = -1
    try:
        for _ in range(100):
            tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.urandom(4).hex()}.part")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free temporary name beside {target}")
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
        os.replace(tmp, target)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            if fd < 0:  # the open failed: no file was made
                raise ChakraError(f"cannot write in {directory} ({exc.strerror or exc})", target) from None
            # disk full, quota, a directory created at the target meanwhile: one line, not a traceback
            raise ChakraError(f"cannot write ({exc.strerror or exc})", target) from exc
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_output(path) as fh:
        fh.write(data)
