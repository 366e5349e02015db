"""``chakra_converter --simulate``: replay the Chakra ET the command has just written, and append its
per-node completion lines (``[rank R] Node ID <id> completed at <T>us``) to the log file.

The file's nodes are decoded by the replay's own reader as they are written
(``chakra.replay.reader.ReadAsWritten``: the frames of each piece of the writer, in the process that
writes them), or, after ``--astrasim``'s rewriting, read back from the file: either way what ``chakra
replay`` of the file gives.  The converter does not call this (a stage never imports one above it,
``tests/test_layers.py``); the command does, after the conversion.

Measured and dropped (benchmarks/README.md at 1b5b06d, session 8): replaying in a separate child fed the
file's bytes while they are written; the decoding in one process takes longer than the writing it would
hide.  Kept (session 10 there): the decoding done by the writer's own pieces, over the cores.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chakra.replay.reader import ReadAsWritten

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Simulated:
    """What a simulation gave: the replayed time of the rank and how many completion lines were written."""

    replayed_us: float
    completion_lines: int


def simulate_written(path: str | os.PathLike[str], log_path: str | os.PathLike[str] | None,
                     read: ReadAsWritten | None = None) -> Simulated:
    """Replay the Chakra ET at ``path`` on its own; append its completion lines to ``log_path`` (None: none
    written).  ``read``: the file's nodes as read while it was written (``convert_file(..., reader=read)``),
    else the file is read."""
    from chakra.replay.api import replay_file, replay_rank

    res = replay_file(path) if read is None else replay_rank(read.graph())
    if log_path is None:
        log.info("replayed %s: %.0f us (no log file given: completion lines not written)", path,
                 res.replayed_us)
        return Simulated(float(res.replayed_us), 0)
    # Appended, not replaced: the log file may also be the logging target of the command (opened in
    # append mode), and both writers use O_APPEND so lines never overwrite each other.
    for h in logging.getLogger().handlers:
        with contextlib.suppress(ValueError, OSError):   # a handler on a stream closed meanwhile
            h.flush()
    count = 0
    with open(log_path, "a", encoding="utf-8") as fh:
        for line in res.completion_lines():
            fh.write(line + "\n")
            count += 1
    log.info("replayed %s: %.0f us (%d completion lines in %s)", path, res.replayed_us, count, log_path)
    return Simulated(float(res.replayed_us), count)
