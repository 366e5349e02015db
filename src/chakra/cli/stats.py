"""`chakra stats ET_OR_ETPLUS [more files...] [--json]`: statistics of Chakra ETs or ET+ files."""

from __future__ import annotations

import argparse

from chakra.cli.common import (
    ArgumentParser,
    add_common_args,
    add_inputs,
    command,
    show_progress,
)

PROG = "chakra stats"
DESCRIPTION = """
Node kinds, top ops by time, communication volume and the critical path of Chakra protobuf ETs (or ET+ JSON),
per rank and across ranks.
"""
EXAMPLES = """
{prog} job.0.et
{prog} job.0.et job.1.et --top 5
{prog} -i et_plus_0.json --json
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    add_inputs(p, "ET_OR_ETPLUS", "one file per rank (.et, .et.gz, .json)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--top", type=int, default=10, help="rows in each top-N table (default 10)")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.tools.stats import run_stats

    run_stats(args.inputs, as_json=args.json, top=args.top, progress=show_progress(args.quiet))
    return 0


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.top < 1:
        parser.error("--top must be at least 1")


main, console = command(_run, build_parser, PROG, _check)

if __name__ == "__main__":
    console()
