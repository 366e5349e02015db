"""`chakra_converter`: ET+ JSON (or a bare host ET) -> Chakra protobuf ET.

Both command-line generations users have in scripts work::

    chakra_converter [--log-filename LOG] PyTorch --input ET_PLUS --output OUT [--simulate]
    chakra_converter --input_filename ET_PLUS --output_filename OUT --input_type PyTorch [--log_filename LOG]

and ``chakra convert`` takes the same arguments.  Either form takes ``--astrasim-safe``
(``--astrasim_safe``): collectives the simulator does not run become COMP nodes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from chakra.cli.common import ArgumentParser, add_common_args, run_command, setup_logging
from chakra.errors import UsageError

PROG = "chakra_converter"
log = logging.getLogger("chakra.converter")

INPUT_TYPES = ("PyTorch",)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Convert ET+ JSON (linked host + Kineto trace) or a bare "
                       "PyTorch host ET into a Chakra protobuf execution trace.",
                       examples=["{prog} -i et_plus_0.json -o job.0.et",
                                 "{prog} PyTorch --input et_plus_0.json --output job.0.et --simulate",
                                 "{prog} --input_filename et_plus_0.json --output_filename job.0.et "
                                 "--input_type PyTorch"])
    p.add_argument("input_type_pos", nargs="?", metavar="PyTorch",
                   help="input type (2023 form); only PyTorch is supported")
    p.add_argument("--input", "--input_filename", "-i", dest="input", metavar="ET_PLUS",
                   help="ET+ JSON or host ET (.json or .json.gz)")
    p.add_argument("--output", "--output_filename", "-o", dest="output", metavar="OUT",
                   help="Chakra protobuf ET to write (conventionally <prefix>.<rank>.et)")
    p.add_argument("--input_type", "--input-type", dest="input_type", metavar="TYPE",
                   help="input type (2024 form); only PyTorch is supported")
    p.add_argument("--log-filename", "--log_filename", dest="log_filename", metavar="LOG",
                   help="also write the log (and, with --simulate, the per-node completion lines) here")
    p.add_argument("--simulate", action="store_true",
                   help="replay the result with chakra.replay and log when each node completes")
    p.add_argument("--astrasim-safe", "--astrasim_safe", dest="astrasim_safe", action="store_true",
                   help="write REDUCE, GATHER, SCATTER, BARRIER (and REDUCE_SCATTER_BLOCK) collectives, "
                        "which the simulator does not run, as COMP nodes of their recorded duration")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.convert import convert_file
    from chakra.convert.driver import add_log_file

    for given in (args.input_type_pos, args.input_type):
        if given is not None and given.lower() not in (t.lower() for t in INPUT_TYPES):
            raise UsageError(f"unsupported input type {given!r} (supported: {', '.join(INPUT_TYPES)})")
    if not args.input or not args.output:
        raise UsageError("both --input (--input_filename) and --output (--output_filename) are required")
    setup_logging(args.log_level, None, args.quiet)
    if args.log_filename:
        add_log_file(args.log_filename)
    report = convert_file(args.input, args.output, simulate=args.simulate, log_path=args.log_filename,
                          astrasim_safe=args.astrasim_safe)
    s = report.stats
    log.info("wrote %s: %d nodes (%s), %d ctrl + %d data deps, rank %s",
             report.output_path, s.nodes, ", ".join(f"{k}={v}" for k, v in sorted(s.by_type.items())),
             s.ctrl_edges, s.data_edges, "unknown" if s.rank is None else s.rank)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_command(_run, args, PROG)


if __name__ == "__main__":
    sys.exit(main())
