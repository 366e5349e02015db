"""What file names say: the rank of a per-rank file.

Only names that say "rank" by a convention do: ``<prefix>.<rank>.et`` (Chakra's and ASTRA-sim's workload
files), ``...rank<N>`` / ``rank-<N>`` / ``rank_<N>`` before the extension, this toolkit's ET+ names
``et_plus_<N>.json`` and the rank names of a folder of traces (``host_et_<N>.json``, ``kineto_<N>.json``,
... :data:`HOST_NAMES`, :data:`KINETO_NAMES`).  Other digits of a name (``trace_1016005.et``: a process id,
a date) are no rank: a file without one is the rank of its position among the inputs.
"""

from __future__ import annotations

import os
import re

# the folder's rank names (chakra.io.ranks, chakra pipeline): N = the rank, .json or .json.gz
HOST_NAMES = ("chakra_host_et_", "host_et_", "et_", "pytorch_et_")
KINETO_NAMES = ("kineto_", "chakra_device_trace_", "kineto_trace_")
EITHER_NAMES = ("rank-", "rank_", "rank")

_RANK_IN_NAME = re.compile(r"(?:\.(\d+)\.et"                              # P.N.et
                           r"|(?:^|[._-])rank[-_]?(\d+)\.(?:et|json)"       # ..._rankN.et, rank-N.json
                           r"|(?:^|_)et_plus_(\d+)\.json"                   # et_plus_N.json
                           r"|^(?:" + "|".join(map(re.escape, HOST_NAMES + KINETO_NAMES)) + r")(\d+)\.json"
                           r")(?:\.gz)?$")


def rank_from_filename(path: str | os.PathLike[str]) -> int | None:
    """``trace.3.et`` / ``chakra.12.et.gz`` / ``et_plus_3.json`` / ``real_2023_rank0.et.gz`` -> the rank;
    ``trace_1016005.et`` -> None (see the module doc)."""
    m = _RANK_IN_NAME.search(os.path.basename(os.fspath(path)))
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))
