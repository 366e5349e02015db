"""Event-driven replay of Chakra ETs: one rank, or a whole job with collectives coupled across ranks.

Semantics (lanes, gaps, ASTRA-sim rule, collective durations) are documented in
:mod:`chakra.replay.engine`.
"""

from chakra.replay.api import (  # noqa: F401
    JobResult,
    ReplayResult,
    load_job,
    replay_file,
    replay_job,
    replay_nodes,
    replay_rank,
    round_us,
)
from chakra.replay.engine import MODES, ReplayError  # noqa: F401
from chakra.replay.graph import NodeSpec, RankGraph  # noqa: F401
from chakra.replay.output import (  # noqa: F401
    read_completion_time,
    results_table,
    timeline,
    write_completion_log,
    write_timeline,
)
from chakra.replay.reader import graph_from_protobuf, load_graph  # noqa: F401
