"""The integration harness as a command: ``chakra_integration_tests``, ``chakra harness`` and
``python3 ci_tools/integration_tests.py`` (the form CI scripts already have) take the same options.

    chakra_integration_tests --tgz_path DATA.tgz --num_ranks N --tolerance 0.05 --expected_times_ms T0 T1 ...

The logic lives in :mod:`chakra.pipeline.harness`; this module only parses arguments.
"""

from __future__ import annotations

import argparse

from chakra.cli.common import ArgumentParser, add_common_args, command

PROG = "chakra_integration_tests"
DESCRIPTION = """
Extract a multi-rank trace archive, link, convert and replay every rank, and check that each rank's replayed
completion time lies within the tolerance of its expected time. Prints one 'Validation successful/failed for
LOG: ...' line per rank; exits 1 when a rank is outside, 2 on bad usage (including a --num_ranks other than
the archive's rank count).
"""
EXAMPLES = """
{prog} --tgz_path gloo_mlp_2r.tgz --num_ranks 2 --tolerance 0.05 --expected_times_ms 13.7 10.7
{prog} --tgz_path job.tgz --num_ranks 4 --against-measured --jobs 2 --extract-dir /tmp/work
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--tgz_path", dest="tgz_path", required=True, metavar="DATA.tgz",
                   help="archive holding a folder named like it (DATA/) with chakra_host_et_N.json (or "
                        "host_et_N.json[.gz]) + kineto_N.json[.gz] per rank; an archive with the files at "
                        "its top level is extracted into DATA/")
    p.add_argument("--num_ranks", dest="num_ranks", type=int, required=True, metavar="N",
                   help="ranks 0..N-1 to check: must be every rank of the archive")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="accepted relative difference from the expected time (default 0.05 = 5%%)")
    p.add_argument("--expected_times_ms", dest="expected_times_ms", type=float, nargs="+", metavar="MS",
                   help="expected completion time of each rank in ms (one value: the same for all ranks)")
    p.add_argument("--against-measured", dest="against_measured", action="store_true",
                   help="check each rank against its own measured step time instead of --expected_times_ms")
    p.add_argument("--jobs", "-j", "--workers", dest="jobs", type=int, default=None, metavar="N",
                   help="ranks linked and converted at once (default: one per core; --workers is the old "
                        "name)")
    p.add_argument("--mode", choices=("lanes", "astrasim"), default="lanes",
                   help="replay mode: lanes (one lane per CPU thread and GPU stream, default) or astrasim "
                        "(one CPU, one GPU compute and one GPU comm op at a time), see chakra replay --help")
    p.add_argument("--no-gaps", dest="gaps", action="store_false",
                   help="replay without the recorded idle time between CPU ops")
    p.add_argument("--job", action="store_true", help="replay the ranks together (collectives coupled)")
    p.add_argument("--astrasim", action="store_true",
                   help="make the converted ranks run in ASTRA-sim together before the replay (what chakra "
                        "pipeline --astrasim does: chakra.N.et and comm_group.json in the extracted folder)")
    p.add_argument("--extract-dir", dest="extract_dir", default=None, metavar="DIR",
                   help="extract (and write outputs) there instead of next to the archive")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.pipeline.harness import run_integration

    return run_integration(args.tgz_path, args.num_ranks, args.tolerance, args.expected_times_ms,
                           against_measured=args.against_measured, jobs=args.jobs, mode=args.mode,
                           gaps=args.gaps, job=args.job, extract_dir=args.extract_dir, astrasim=args.astrasim)


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
