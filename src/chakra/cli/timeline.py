"""`chakra_timeline_visualizer -i SIM.csv -o OUT.json --num_npus N --npu_frequency F` (MHz)."""

from __future__ import annotations

import argparse
import logging

from chakra.cli.common import ArgumentParser, add_common_args, command

PROG = "chakra_timeline_visualizer"
DESCRIPTION = """
Turn a simulator log of issue/callback rows into a Chrome trace JSON (one process per NPU, ts/dur in µs) for
Perfetto or chrome://tracing.
"""
EXAMPLES = """
{prog} --input_filename sim.csv --output_filename timeline.json --num_npus 4 --npu_frequency 1000
"""
log = logging.getLogger("chakra.timeline")


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--input_filename", "--input-filename", "-i", dest="input_filename", required=True,
                   metavar="SIM.csv", help="simulator log with issue/callback rows (.gz also read)")
    p.add_argument("--output_filename", "--output-filename", "-o", dest="output_filename", required=True,
                   metavar="OUT.json", help="Chrome trace JSON to write (.json.gz compresses)")
    p.add_argument("--num_npus", "--num-npus", dest="num_npus", type=int, required=True,
                   help="number of NPUs (every id in the log must be below it)")
    p.add_argument("--npu_frequency", "--npu-frequency", dest="npu_frequency", type=float, required=True,
                   help="NPU clock in MHz: µs = cycles / F (F=1000: one cycle is one ns)")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.tools.timeline import convert_timeline

    counts = convert_timeline(args.input_filename, args.output_filename, args.num_npus, args.npu_frequency)
    log.info("wrote %s: %d events on up to %d lanes per NPU (%d callbacks without issue, %d unfinished)",
             args.output_filename, counts["events"], counts["lanes"], counts["unmatched_callbacks"],
             counts["unfinished_issues"])
    return 0


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
