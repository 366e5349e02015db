#!/usr/bin/env python3
"""Integration test: link, convert and replay every rank of a trace archive, check the replayed times.

    python3 ci_tools/integration_tests.py --tgz_path DATA.tgz --num_ranks N --tolerance 0.05 \
        --expected_times_ms T0 T1 ...
    python3 ci_tools/integration_tests.py --tgz_path DATA.tgz --num_ranks N --tolerance 0.05 \
        --against-measured

The same command is installed as ``chakra_integration_tests`` (and ``chakra harness``); its options are
in ``chakra.cli.harness`` and its logic in ``chakra.tools.harness``.  This script works from a checkout
without an install too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

try:
    import chakra  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chakra.cli import harness  # noqa: E402

PROG = "integration_tests.py"


def build_parser():
    return harness.build_parser(PROG)


def main(argv: Sequence[str] | None = None) -> int:
    return harness.main(argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
