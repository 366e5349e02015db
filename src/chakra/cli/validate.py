"""`chakra validate ET... [--comm-group FILE]`: does a job's Chakra ET meet what ASTRA-sim reads?"""

from __future__ import annotations

import argparse

from chakra.cli.common import (
    ArgumentParser,
    add_common_args,
    add_inputs,
    add_missing_ranks,
    command,
)

PROG = "chakra validate"
DESCRIPTION = """
Check Chakra protobuf ETs (one rank or a whole job, any producer's) against what ASTRA-sim reads: dependencies
present and acyclic, attribute types, no METADATA nodes, comm-node rules, and across ranks the same
collectives per group in the same order and size, matched send/recv pairs. Exit 0 with an 'ok' line, 1 with
the problems.
"""
EXAMPLES = """
{prog} OUT/job.0.et OUT/job.1.et
{prog} OUT/job   (a prefix P: P.0.et, P.1.et, ...)
{prog} OUT/job --comm-group OUT/comm_group.json
{prog} OUT/job --network OUT/network.yml
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    add_inputs(p, "ET", "one .et per rank, or a prefix P for P.0.et, P.1.et, ...")
    p.add_argument("--comm-group", "--comm_group", dest="comm_group", metavar="FILE", default=None,
                   help="process groups as ASTRA-sim's comm-group JSON {\"<pg id>\": [ranks]} (default: the "
                        "files' own process-group tables)")
    p.add_argument("--network", metavar="FILE", default=None,
                   help="the ASTRA-sim network YAML the job is to run with (chakra pipeline --astrasim "
                        "writes one): its npus_count must multiply to the job's ranks and hold every "
                        "group's ranks")
    p.add_argument("--limit", type=int, default=20, help="problems listed at most (default 20)")
    add_missing_ranks(p, "check")
    add_common_args(p)
    p.set_defaults(log_level="WARNING")
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.job.validate import validate_command

    return validate_command(args.inputs, comm_group=args.comm_group, limit=max(1, args.limit),
                            network=args.network, allow_missing_ranks=args.allow_missing_ranks)


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
