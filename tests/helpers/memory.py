"""Memory measurements shared by the tests."""

from __future__ import annotations

import tracemalloc
from typing import Any


def traced_bytes_per_object(make: Any) -> float:
    """Memory held per object of 1000 made by ``make(i)``, as tracemalloc counts it (the allocations, not
    ``sys.getsizeof``, which does not see a buffer larger than the object's contents)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make(i) for i in range(1000)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(kept) == 1000
    return held / 1000
