"""Host execution trace (PyTorch ET) loading: one parser per schema family, process groups, comm fields."""

from chakra.host.comm import (  # noqa: F401
    CANONICAL_COLLECTIVES,
    canonical_collective,
    comm_info,
    comm_infos,
    comm_type_of,
)
from chakra.host.loader import build_host_trace, load_host_et  # noqa: F401
from chakra.host.process_groups import (  # noqa: F401
    groups_from_kineto,
    merge_process_groups,
    parse_pg_init,
)
