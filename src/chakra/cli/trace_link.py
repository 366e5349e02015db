"""``chakra_trace_link`` / ``chakra link``: host ET + Kineto -> ET+ JSON.

Both generations of command lines keep working::

    chakra_trace_link --chakra-host-trace ET --chakra-device-trace KINETO --rank R --output-file OUT
    chakra_trace_link --pytorch-et-file ET --kineto-file KINETO --output-file OUT

plus ``--batch FOLDER --output-dir DIR --jobs N`` for every rank of a folder, and a Kineto trace
alone (``--kineto-only``, implied when no host ET is given)::

    chakra_trace_link --chakra-device-trace KINETO --output-file OUT
"""

from __future__ import annotations

import argparse

from chakra.cli.common import ArgumentParser, add_common_args, command
from chakra.cli.entry import console_process

PROG = "chakra_trace_link"
DESCRIPTION = """
Link a PyTorch host execution trace with its Kineto trace into ET+ JSON (.gz output when the name ends in
.gz); or a Kineto trace alone (--kineto-only, implied when no host ET is given): the host nodes are then made
from its cpu_op / user_annotation events, without tensor ids or outputs.
"""
EXAMPLES = """
{prog} --chakra-host-trace host_et_0.json.gz --chakra-device-trace kineto_0.json.gz --rank 0 -o et_plus_0.json
{prog} --pytorch-et-file host_et_0.json --kineto-file kineto_0.json --output-file et_plus_0.json
{prog} --batch TRACE_FOLDER --output-dir OUT_DIR --jobs 2
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument(
        "--chakra-host-trace",
        "--pytorch-et-file",
        "--host-trace",
        dest="host",
        metavar="ET",
        help="host execution trace (.json or .json.gz)",
    )
    p.add_argument(
        "--chakra-device-trace",
        "--kineto-file",
        "--device-trace",
        dest="kineto",
        metavar="KINETO",
        help="Kineto trace of the same rank (.json or .json.gz)",
    )
    p.add_argument(
        "--kineto-only",
        "--kineto_only",
        dest="kineto_only",
        action="store_true",
        help="link the Kineto trace alone, without a host ET (implied when none is given; with --batch: "
        "every rank's Kineto trace, host ETs ignored): host nodes from its cpu_op / user_annotation "
        "events nested by time per thread, every ProfilerStep window kept; no tensor ids, outputs or "
        "op schemas (the log says so)",
    )
    p.add_argument("--output-file", "-o", dest="output", metavar="OUT", help="ET+ output file")
    p.add_argument(
        "--rank",
        type=int,
        default=None,
        help="rank to write when the traces do not say it (Kineto distributedInfo, host ET rank); "
        "a --rank that contradicts the trace is overridden by it, with a warning (refused with --strict)",
    )
    p.add_argument(
        "--annotation",
        default=None,
        metavar="NAME",
        help="use the windows of this annotation instead of ProfilerStep#N",
    )
    p.add_argument(
        "--step",
        type=int,
        default=None,
        metavar="N",
        help="link ProfilerStep#N only: the host nodes of the other steps and the GPU ops they launched are "
        "left out, and dependencies on them dropped (they were met before the step began)",
    )
    p.add_argument(
        "--batch",
        default=None,
        metavar="FOLDER",
        help="link every host_et_N + kineto_N pair of FOLDER (also host/ + device/ subfolders); every "
        "kineto_N alone when FOLDER has no host ET",
    )
    p.add_argument(
        "--output-dir",
        "--output_dir",
        dest="output_dir",
        default=None,
        metavar="DIR",
        help="with --batch: where et_plus_N.json(.gz) go (default: FOLDER)",
    )
    p.add_argument(
        "--jobs", "-j", type=int, default=None, help="with --batch: parallel processes (default: CPUs)"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 1) instead of warning: a host ET and Kineto trace that look like different runs "
        "(pid or wall-clock mismatch), or a --rank that contradicts the trace's own rank",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="link anyway what is refused otherwise: a host ET and Kineto trace whose start times are days "
        "apart (different runs), or, without a ProfilerStep, of which no stretch of the Kineto trace aligns "
        "with the host ET",
    )
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.pipeline.link import link_command

    if console_process() and not args.batch:   # one pair, then the process ends: nothing freed at the end
        from chakra.io.gcpause import keep_to_exit

        keep_to_exit()
    return link_command(**{name: getattr(args, name) for name in _LINK_OPTIONS})


# the options link_command takes, each under its own name
_LINK_OPTIONS = ("host", "kineto", "output", "rank", "annotation", "batch", "output_dir", "jobs", "quiet",
                 "strict", "kineto_only", "step", "force")


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
