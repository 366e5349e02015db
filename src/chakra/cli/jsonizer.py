"""`chakra_jsonizer --input_filename ET --output_filename JSON`: Chakra protobuf ET <-> JSON, losslessly.

The direction follows the input's content (a JSON document is turned back into
a protobuf ET); ``--reverse`` / ``--to-et`` force JSON -> ET.
"""

from __future__ import annotations

import argparse
import logging

from chakra.cli.common import ArgumentParser, add_common_args, command

PROG = "chakra_jsonizer"
DESCRIPTION = """
Chakra protobuf ET (.et, .et.gz) -> JSON with every field (attribute value fields by name), or JSON ->
protobuf ET.
"""
EXAMPLES = """
{prog} --input_filename job.0.et --output_filename job.0.json
{prog} -i job.0.json -o job.0.et --reverse
"""
log = logging.getLogger("chakra.jsonizer")


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--input_filename", "--input-filename", "--input", "-i", dest="input_filename",
                   required=True, metavar="IN", help="protobuf ET, or a JSON document made by this tool")
    p.add_argument("--output_filename", "--output-filename", "--output", "-o", dest="output_filename",
                   required=True, metavar="OUT", help="JSON (.json, .json.gz) or, reversed, protobuf ET")
    p.add_argument("--reverse", "--to-et", dest="reverse", action="store_true", default=None,
                   help="JSON -> protobuf ET (default: decided by the input's content)")
    p.add_argument("--compact", action="store_true", help="no indentation in the JSON output")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.tools.jsonizer import jsonize_file

    r = jsonize_file(args.input_filename, args.output_filename, reverse=args.reverse,
                     indent=not args.compact)
    log.info("%s: %s -> %s, %d nodes", r.direction, r.input_path, r.output_path, r.nodes)
    return 0


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
