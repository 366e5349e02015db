"""Errors a user can act on.

Every failure caused by the input carries the file it came from and a one-line
reason; the CLI layer prints ``chakra: <file>: <reason>`` and exits 1 (bad
data) or 2 (bad usage) without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import os

#: the option (validate, replay --job, pipeline) that goes on with a job of which ranks are missing; the
#: error that refuses such a job names it
MISSING_RANKS_OPTION = "--allow-missing-ranks"


class ChakraError(Exception):
    """Base class of all errors the toolkit reports to a user."""

    exit_code = 1
    #: the ranks whose work failed, when the error stands for several ranks' (chakra.io.executor.run_ranks)
    failed_ranks: list[int] | None = None

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        # Errors raised in worker processes come back pickled; keep the file name they carry.
        return (type(self), (self.message, self.path))


class TraceFormatError(ChakraError):
    """The input is not what it claims to be: bad JSON, truncated gzip, unknown layout."""


class UsageError(ChakraError):
    """Bad command-line usage."""

    exit_code = 2
