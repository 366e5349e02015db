"""`chakra_converter`: ET+ JSON (or a bare host ET) -> Chakra protobuf ET.

Both command-line generations users have in scripts work::

    chakra_converter [--log-filename LOG] PyTorch --input ET_PLUS --output OUT [--simulate]
    chakra_converter --input_filename ET_PLUS --output_filename OUT --input_type PyTorch [--log_filename LOG]

and ``chakra convert`` takes the same arguments.  Either form takes ``--astrasim`` (also spelt
``--astrasim-safe``): what ASTRA-sim runs (``chakra.job.astrasim``).

ASTRA-sim 1.0 text workloads (``chakra.convert.text``), one ``PREFIX.<rank>.et`` per NPU::

    chakra_converter Text --input W.txt --output PREFIX --num-npus N [--num-passes P]
    chakra_converter --input_type Text --input_filename W.txt --output_filename PREFIX --num_npus N
"""

from __future__ import annotations

import argparse
import logging
import sys

from chakra.cli.common import ArgumentParser, add_common_args, command, setup_logging, start_logging
from chakra.cli.entry import console_process
from chakra.errors import TraceFormatError, UsageError

PROG = "chakra_converter"
DESCRIPTION = """
Convert ET+ JSON (linked host + Kineto trace) or a bare PyTorch host ET into a Chakra protobuf execution trace
(or an ASTRA-sim 1.0 text workload into one per NPU).
"""
EXAMPLES = """
{prog} -i et_plus_0.json -o job.0.et
{prog} PyTorch --input et_plus_0.json --output job.0.et --simulate
{prog} --input_filename et_plus_0.json --output_filename job.0.et --input_type PyTorch
{prog} Text --input W.txt --output PREFIX --num-npus 8 --astrasim
"""
log = logging.getLogger("chakra.converter")

INPUT_TYPES = ("PyTorch", "Text")


# the options of a Text input alone: (name, type, metavar, help)
_TEXT_OPTIONS: tuple[tuple[str, type, str, str], ...] = (
    ("num_npus", int, "N", "number of NPUs (ranks) to write"),
    ("num_passes", int, "P", "training iterations, each waiting for the previous one (default 1)"),
    ("model_parallel_size", int, "M", "hybrid kinds: ranks per model-parallel group (default: the file's "
     "model_parallel_NPU_group, else the largest divisor of N not above sqrt(N))"),
    ("cycle_ns", float, "NS", "nanoseconds per cycle of the workload's compute times (default 1: ASTRA-sim's "
     "1 GHz)"),
    ("comm_group", str, "JSON", "where to write the process groups when a hybrid kind needs them "
     "(default OUT.comm_group.json)"),
)


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("input_type_pos", nargs="?", metavar="{PyTorch,Text}",
                   help="input type (2023 form): PyTorch (ET+ / host ET) or Text (ASTRA-sim 1.0 workload)")
    p.add_argument("--input", "--input_filename", "-i", dest="input", metavar="ET_PLUS",
                   help="ET+ JSON or host ET (.json or .json.gz)")
    p.add_argument("--output", "--output_filename", "-o", dest="output", metavar="OUT",
                   help="Chakra protobuf ET to write (conventionally <prefix>.<rank>.et)")
    p.add_argument("--input_type", "--input-type", dest="input_type", metavar="TYPE",
                   help="input type (2024 form): PyTorch or Text")
    p.add_argument("--log-filename", "--log_filename", dest="log_filename", metavar="LOG",
                   help="also write the log (and, with --simulate, the per-node completion lines) here")
    p.add_argument("--simulate", action="store_true",
                   help="replay the result with chakra.replay and log when each node completes")
    p.add_argument("--astrasim", "--astrasim-safe", "--astrasim_safe", dest="astrasim", action="store_true",
                   help="write what ASTRA-sim runs: no METADATA node (process groups in comm_group.json "
                        "beside the output), REDUCE/GATHER/SCATTER/BARRIER collectives as COMP nodes of "
                        "their recorded duration (Text input: see the README); for one rank alone: "
                        "`chakra pipeline DIR --astrasim` also matches the collectives across ranks")
    t = p.add_argument_group("Text input (ASTRA-sim 1.0 workload -> OUT.<rank>.et per NPU)")
    for dest, kind, metavar, text in _TEXT_OPTIONS:
        t.add_argument("--" + dest.replace("_", "-"), "--" + dest, dest=dest, type=kind, metavar=metavar,
                       help=text)
    add_common_args(p)
    return p


_TEXT_ONLY = tuple(row[0] for row in _TEXT_OPTIONS)


def _input_type(args: argparse.Namespace) -> str:
    """The one input type asked for (PyTorch when none is given, as before)."""
    chosen: list[str] = []
    for given in (args.input_type_pos, args.input_type):
        if given is None:
            continue
        match = [t for t in INPUT_TYPES if t.lower() == given.lower()]
        if not match:
            raise UsageError(f"unsupported input type {given!r} (supported: {', '.join(INPUT_TYPES)})")
        chosen.append(match[0])
    if len(set(chosen)) > 1:
        raise UsageError(f"two input types given: {chosen[0]} and {chosen[1]}")
    return chosen[0] if chosen else "PyTorch"


def _run_text(args: argparse.Namespace) -> int:
    from chakra.convert.text import convert_text

    if args.simulate:
        raise UsageError("--simulate applies to PyTorch input; replay the outputs with 'chakra replay'")
    if args.num_npus is None:
        raise UsageError("Text input needs --num-npus (--num_npus)")
    start_logging(args)
    report = convert_text(args.input, args.output, args.num_npus,
                          1 if args.num_passes is None else args.num_passes,
                          model_parallel_size=args.model_parallel_size,
                          cycle_ns=1.0 if args.cycle_ns is None else args.cycle_ns,
                          comm_group_path=args.comm_group, astrasim_safe=args.astrasim)
    n = report.num_npus
    nodes = report.nodes_per_rank
    each = f"{nodes[0]} nodes each" if len(set(nodes)) == 1 else f"{min(nodes)}..{max(nodes)} nodes"
    sys.stdout.write(f"wrote {report.files[0]}{f' .. {report.files[-1]}' if n > 1 else ''}: {n} ranks, "
                     f"{each} ({report.comm_nodes_per_rank[0]} collectives), {report.kind}, "
                     f"{report.num_passes} pass{'es' if report.num_passes > 1 else ''}\n")
    if report.comm_group_path:
        sys.stdout.write(f"wrote {report.comm_group_path}: {len(report.groups)} process groups "
                         f"(model-parallel size {report.model_parallel_size}); give it to ASTRA-sim as "
                         f"--comm-group-configuration\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    from chakra.convert import convert_file
    from chakra.convert.driver import add_log_file

    kind = _input_type(args)
    if not args.input or not args.output:
        raise UsageError("both --input (--input_filename) and --output (--output_filename) are required")
    from chakra.io.atomic import check_output_path

    check_output_path(args.output, prefix=kind == "Text")    # before the work, not after it
    if kind == "Text":
        return _run_text(args)
    extra = [name for name in _TEXT_ONLY if getattr(args, name) is not None]
    if extra:
        raise UsageError(f"--{extra[0].replace('_', '-')} applies to Text input only")
    setup_logging(args.log_level, None, args.quiet)   # the log file: add_log_file (completion lines too)
    if console_process():   # one file, then the process ends: nothing freed at the end
        from chakra.io.gcpause import keep_to_exit

        keep_to_exit()
    if args.log_filename:
        add_log_file(args.log_filename)
    read = None
    if args.astrasim:
        from chakra.job.astrasim import convert_for_astrasim

        report, target = convert_for_astrasim(args.input, args.output)
        for line in target.lines():
            log.warning("%s", line)
    else:
        if args.simulate:   # the nodes read as they are written (the file is not read back)
            from chakra.replay.reader import ReadAsWritten

            read = ReadAsWritten()
        report = convert_file(args.input, args.output, reader=read)
    if args.simulate:
        from chakra.replay.written import simulate_written

        if not report.stats.nodes:
            raise TraceFormatError(f"no nodes: nothing to replay (--simulate; {report.output_path} was "
                                   "written, without nodes)", args.input)

        # (after --astrasim's rewriting: the file as written is what is replayed, read back)
        done = simulate_written(args.output, args.log_filename, read)
        report.simulated = True
        report.replayed_us = done.replayed_us
        report.completion_lines = done.completion_lines
    s = report.stats
    log.info("wrote %s: %d nodes (%s), %d ctrl + %d data deps, rank %s",
             report.output_path, s.nodes, ", ".join(f"{k}={v}" for k, v in sorted(s.by_type.items())),
             s.ctrl_edges, s.data_edges, "unknown" if s.rank is None else s.rank)
    return 0


main, console = command(_run, build_parser, PROG, logs=False)

if __name__ == "__main__":
    console()
