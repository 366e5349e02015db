"""Event-driven replay of Chakra ETs: one rank, or a whole job with collectives coupled across ranks.

Semantics (lanes, gaps, ASTRA-sim rule, collective durations) are documented in
:mod:`chakra.replay.engine`.

The names below are imported when first used, so that ``import chakra.replay`` (or
``chakra.replay.written``, what ``chakra_converter --simulate`` imports) costs only the modules a replay of
one file needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chakra.lazy import lazy_exports, module_of

if TYPE_CHECKING:
    from chakra.replay.api import (
        JobResult,
        ReplayResult,
        load_job,
        replay_file,
        replay_job,
        replay_nodes,
        replay_rank,
        round_us,
    )
    from chakra.replay.engine import MODES, ReplayError
    from chakra.replay.graph import NodeSpec, RankGraph
    from chakra.replay.output import (
        read_completion_time,
        results_table,
        timeline,
        write_completion_log,
        write_timeline,
    )
    from chakra.replay.reader import graph_from_protobuf, load_graph

_FROM = {
    "chakra.replay.api": ("JobResult", "ReplayResult", "load_job", "replay_file", "replay_job",
                          "replay_nodes", "replay_rank", "round_us"),
    "chakra.replay.engine": ("MODES", "ReplayError"),
    "chakra.replay.graph": ("NodeSpec", "RankGraph"),
    "chakra.replay.output": ("read_completion_time", "results_table", "timeline", "write_completion_log",
                             "write_timeline"),
    "chakra.replay.reader": ("graph_from_protobuf", "load_graph"),
}
_MODULE_OF = module_of(_FROM)

__all__ = [
    "JobResult", "MODES", "NodeSpec", "RankGraph", "ReplayError", "ReplayResult", "graph_from_protobuf",
    "load_graph", "load_job", "read_completion_time", "replay_file", "replay_job", "replay_nodes",
    "replay_rank", "results_table", "round_us", "timeline", "write_completion_log", "write_timeline"
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _MODULE_OF)
