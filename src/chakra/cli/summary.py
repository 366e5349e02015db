"""`chakra summary FILE...`: load host ETs, Kineto traces or Chakra protobuf ETs and summarise them."""

from __future__ import annotations

import argparse
import sys

import orjson

from chakra.cli.common import ArgumentParser, add_common_args, add_inputs, command

PROG = "chakra summary"
DESCRIPTION = """
Load PyTorch host ETs, Kineto traces (.json or .json.gz) or Chakra protobuf ETs (.et, .et.gz) and summarise
what they hold.
"""
EXAMPLES = """
{prog} host_et_0.json.gz kineto_0.json.gz
{prog} job.0.et
{prog} -i kineto_0.json --json
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    add_inputs(p, "FILE", "host ET, Kineto trace or Chakra ET")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.tools.summary import render, summarize

    summaries = [summarize(path) for path in args.inputs]
    if args.json:
        sys.stdout.write(orjson.dumps(summaries, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(summaries)
    return 0


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
