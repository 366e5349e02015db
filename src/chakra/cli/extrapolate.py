"""``chakra extrapolate PREFIX --ranks M -o OUT``: a measured job's ``.et`` files -> a job of M ranks
(chakra.job.extrapolate)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from chakra.cli.common import (
    ArgumentParser,
    add_common_args,
    add_inputs,
    command,
    show_progress,
)
from chakra.errors import UsageError

PROG = "chakra extrapolate"
DESCRIPTION = """
Write the Chakra ETs of a larger data-parallel job from a measured one (PREFIX.0.et .. PREFIX.(N-1).et):
OUT.0.et .. OUT.(M-1).et, each rank a copy of the measured rank it is modelled on (its compute unchanged),
the world and data-parallel groups grown to the M ranks (per-rank bytes unchanged), the groups inside a
replica (tensor-parallel, ...) copied for each new replica under new pg ids, send/recv moved with their
replica; OUT.comm_group.json for ASTRA-sim, and OUT.network.yml / OUT.system.json when the measured job has
them (chakra pipeline --astrasim writes them). M must be a whole number of replicas.
"""
EXAMPLES = """
{prog} OUT/job --ranks 1024 -o big/job
{prog} gen/tp --ranks 16 -o big/tp --comm-group gen/tp.comm_group.json
{prog} OUT/job --ranks 64 -o big/job --dp-groups 3,4
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    add_inputs(p, "PREFIX", "the measured job: the prefix P of P.0.et, P.1.et, ... (or its P.0.et)")
    p.add_argument("--ranks", "--num-npus", dest="ranks", type=int, required=True, metavar="M",
                   help="ranks of the job to write")
    p.add_argument("-o", "--output-prefix", dest="output_prefix", required=True, metavar="OUT",
                   help="write OUT.0.et .. OUT.(M-1).et and OUT.comm_group.json")
    p.add_argument("--comm-group", dest="comm_group", metavar="FILE", default=None,
                   help='the process groups as ASTRA-sim reads them, {"<pg id>": [ranks]} (wins over the '
                        "files' own tables; default: those tables, else PREFIX.comm_group.json)")
    p.add_argument("--dp-groups", dest="dp_groups", metavar="PG,...", default=None,
                   help="the data-parallel process groups, which grow with the job ('none': only the world "
                        "joins the replicas); default: found by their shape (the README says how)")
    p.add_argument("--network", metavar="FILE", default=None,
                   help="the measured job's ASTRA-sim network YAML (default: network.yml beside PREFIX): "
                        "written for M NPUs, and its ring re-times the grown collectives' durations")
    p.add_argument("--system", metavar="FILE", default=None,
                   help="the ASTRA-sim system JSON copied beside the output (default: system.json beside "
                        "PREFIX)")
    add_common_args(p)
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.job.extrapolate import extrapolate

    inputs = args.inputs
    if len(inputs) != 1:
        raise UsageError(f"give one measured job (a prefix P of P.0.et, ...), not {len(inputs)}")
    dp = None
    if args.dp_groups is not None:
        dp = [] if args.dp_groups.strip().lower() == "none" else \
            [x.strip() for x in args.dp_groups.split(",") if x.strip()]
    with _bar(show_progress(args.quiet), args.ranks) as tick:
        res = extrapolate(inputs[0], args.ranks, args.output_prefix, comm_group=args.comm_group, dp_groups=dp,
                          network=args.network, system=args.system, progress=tick)
    sys.stdout.write("".join(line + "\n" for line in res.lines(args.output_prefix)))
    return 0


@contextmanager
def _bar(on: bool, total: int) -> Iterator[Any]:
    """A rich progress bar of the ranks written, on a terminal only (else no progress callback)."""
    if not on:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False, console=Console(stderr=True)) as bars:
        task = bars.add_task("ranks written", total=total)

        def tick(done: int, _total: int) -> None:
            bars.update(task, completed=done)

        yield tick


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
