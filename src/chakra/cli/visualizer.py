"""`chakra_visualizer --input_filename ET --output_filename OUT.{pdf,png,svg,dot,graphml}`."""

from __future__ import annotations

import argparse
import logging

from chakra.cli.common import ArgumentParser, add_common_args, command, show_progress
from chakra.tunables import COARSE_BOXES, DRAW_MAX_NODES, DRAW_MAX_SECONDS

PROG = "chakra_visualizer"
DESCRIPTION = """
Draw a Chakra protobuf ET (or a filtered part of it): .pdf/.png/.svg through graphviz, .dot text, .graphml
through networkx. Ctrl deps are solid edges, data deps dashed.
"""
EXAMPLES = """
{prog} --input_filename job.0.et --output_filename job.0.svg
{prog} -i job.0.et -o part.pdf --node-range 100:300
{prog} job.0.et job.1.et --rank 1 -o rank1.graphml
{prog} -i job.0.et -o whole_step.svg --coarse
"""
log = logging.getLogger("chakra.visualizer")


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("inputs", nargs="*", metavar="ET", help="input ET(s); same as --input_filename")
    p.add_argument("--input_filename", "--input-filename", "-i", dest="input_filename", nargs="+",
                   default=[], metavar="ET", help="input ET file(s); several need --rank to pick one")
    p.add_argument("--output_filename", "--output-filename", "-o", dest="output_filename", required=True,
                   metavar="OUT", help="output file; the format comes from its suffix")
    p.add_argument("--rank", type=int, help="draw the input of this rank (metadata rank, else file name)")
    p.add_argument("--node-range", "--node_range", dest="node_range", metavar="A:B",
                   help="keep node ids A..B (inclusive; A: or :B for open ends)")
    p.add_argument("--name", metavar="REGEX", help="keep nodes whose name matches REGEX (re.search)")
    p.add_argument("--head", type=int, metavar="N", help="keep the first N remaining nodes in file order")
    p.add_argument("--max-nodes", "--max_nodes", dest="max_nodes", type=int, default=DRAW_MAX_NODES,
                   help=f"refuse to draw more nodes than this (default {DRAW_MAX_NODES}; .dot and .graphml "
                        "are written at any size)")
    p.add_argument("--coarse", nargs="?", type=int, const=COARSE_BOXES, default=None, metavar="BOXES",
                   help="a column per CPU thread and GPU stream, one box per phase of it (cut where it waits "
                        "for another or idles) and per collective, time running down; about BOXES boxes "
                        f"(default {COARSE_BOXES}) unless its waits and collectives are more")
    p.add_argument("--max-seconds", type=float, default=DRAW_MAX_SECONDS, metavar="S",
                   help="refuse a drawing that graphviz's dot would need more than S seconds to lay out "
                        f"(estimated from nodes + edges; default {DRAW_MAX_SECONDS:g})")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop dot after S seconds (default: 3x the estimate, at least 60)")
    p.add_argument("--layout", choices=("auto", "TB", "LR"), default="auto",
                   help="top-to-bottom, left-to-right, or auto (LR when much wider than deep)")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.tools.visualizer import visualize

    sel = visualize(list(args.inputs) + list(args.input_filename), args.output_filename, rank=args.rank,
                    node_range=args.node_range, name=args.name, head=args.head, max_nodes=args.max_nodes,
                    layout=args.layout, coarse=args.coarse, max_seconds=args.max_seconds,
                    timeout=args.timeout, progress=show_progress(args.quiet))
    log.info("wrote %s: %d nodes, %d ctrl and %d data edges", args.output_filename, len(sel.nodes),
             len(sel.ctrl_edges), len(sel.data_edges))
    return 0


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if not args.inputs and not args.input_filename:
        parser.error("give an input ET (--input_filename ET)")


main, console = command(_run, build_parser, PROG, _check)

if __name__ == "__main__":
    console()
