#!/usr/bin/env python3
"""Integration test: link, convert and replay every rank of a trace archive, check the replayed times.

    python3 ci_tools/integration_tests.py --tgz_path DATA.tgz --num_ranks N --tolerance 0.05 \
        --expected_times_ms T0 T1 ...
    python3 ci_tools/integration_tests.py --tgz_path DATA.tgz --num_ranks N --tolerance 0.05 \
        --against-measured

The logic lives in ``chakra.replay.harness``; this script only parses arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import chakra  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chakra.cli.common import ArgumentParser, add_common_args, run_command, setup_logging  # noqa: E402

PROG = "integration_tests.py"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--tgz_path", "--tgz-path", dest="tgz_path", required=True,
                   help="archive holding a folder named like it with the per-rank traces")
    p.add_argument("--num_ranks", "--num-ranks", dest="num_ranks", type=int, required=True)
    p.add_argument("--tolerance", type=float, default=0.05, help="relative tolerance (default 0.05)")
    p.add_argument("--expected_times_ms", "--expected-times-ms", dest="expected_times_ms", type=float,
                   nargs="+", help="expected completion time of each rank in ms")
    p.add_argument("--against-measured", "--against_measured", dest="against_measured", action="store_true",
                   help="validate each rank against its own measured step time instead")
    p.add_argument("--workers", type=int, default=None, help="parallel ranks (default: CPU count)")
    p.add_argument("--mode", choices=("lanes", "astrasim"), default="lanes")
    p.add_argument("--no-gaps", dest="gaps", action="store_false")
    p.add_argument("--job", action="store_true", help="replay the ranks together (collectives coupled)")
    p.add_argument("--extract-dir", "--extract_dir", dest="extract_dir", default=None,
                   help="extract (and write outputs) there instead of next to the archive")
    add_common_args(p)
    return p


def _run(args) -> int:
    from chakra.replay.harness import run_integration

    setup_logging(args.log_level, None, args.quiet)
    return run_integration(args.tgz_path, args.num_ranks, args.tolerance, args.expected_times_ms,
                           against_measured=args.against_measured, workers=args.workers, mode=args.mode,
                           gaps=args.gaps, job=args.job, extract_dir=args.extract_dir)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(_run, args, PROG)


if __name__ == "__main__":
    sys.exit(main())
