"""What file names say: the rank of a per-rank file."""

from __future__ import annotations

import os
import re

# <prefix>.<rank>.et (the Chakra convention), <prefix>_<rank>.et, <prefix>-<rank>.json, ..._rank<N>.et.gz
_RANK_IN_NAME = re.compile(r"(?:^|[._-]|rank)(\d+)\.(?:et|json)(?:\.gz)?$")


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    """``trace.3.et`` / ``trace_3.et.gz`` / ``et_plus_3.json`` / ``real_2023_rank0.et.gz`` -> the rank."""
    m = _RANK_IN_NAME.search(os.path.basename(os.fspath(path)))
    return int(m.group(1)) if m else None
