"""``chakra replay``: replay Chakra ETs of one rank or a whole job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from chakra.cli.common import ArgumentParser, add_common_args, run_command, setup_logging

PROG = "chakra replay"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Replay Chakra protobuf ETs (event-driven) and compare the "
                       "replayed time of each rank with its measured step.")
    p.add_argument("inputs", nargs="+", metavar="ET", help="Chakra ET file(s), one per rank (.et or .et.gz)")
    p.add_argument("--job", action="store_true",
                   help="replay all ranks together: collectives and send/recv wait for their peers")
    p.add_argument("--mode", choices=("lanes", "astrasim"), default="lanes",
                   help="lanes: one lane per CPU thread and GPU stream (default); astrasim: one CPU op, "
                        "one GPU compute op and one GPU comm op at a time per rank")
    p.add_argument("--no-gaps", dest="gaps", action="store_false",
                   help="drop the recorded idle time between CPU ops (what-if: the ops alone)")
    p.add_argument("--collective", choices=("min", "net"), default="net",
                   help="--job: a collective lasts each participant's recording net of its recorded wait "
                        "for the last arrival (net, default: reproduces the recording) or the shortest "
                        "recording of its participants, ending together (min)")
    p.add_argument("--no-align", dest="align", action="store_false",
                   help="--job: start every rank at 0 instead of at its recorded window start")
    p.add_argument("--ignore-missing-deps", action="store_true",
                   help="drop dependencies on node ids that are not in the file instead of failing")
    p.add_argument("--timeline", metavar="OUT.json",
                   help="write the replayed timeline (Chrome/Perfetto JSON)")
    p.add_argument("--log", metavar="FILE", help="write 'Node ID <id> completed at <T>us' lines")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.replay.output import replay_report

    setup_logging(args.log_level, None, args.quiet)
    return replay_report(args.inputs, job=args.job, mode=args.mode, gaps=args.gaps, align=args.align,
                         collective=args.collective,
                         missing="ignore" if args.ignore_missing_deps else "error",
                         timeline_path=args.timeline, log_path=args.log, as_json=args.json)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(_run, args, PROG)


if __name__ == "__main__":
    sys.exit(main())
