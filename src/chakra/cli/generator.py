"""`chakra_generator` / `chakra generate`: synthetic Chakra ETs for the simulator (chakra.tools.generator).

    chakra_generator --num-npus 8 --output-prefix out/ [--workloads collectives,dp,tp,basic]
                     [--collectives all_reduce,all_to_all] [--sizes 64KiB,1MiB] [--layers 4] [--steps 2]
                     [--compute-us 10] [--comm-bytes 1MiB] [--tp-size 4]

The reference generator's options (``--num_npus``, ``--default_runtime``, ``--default_comm_size``,
``--default_tensor_size``) are accepted too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

from chakra.cli.common import ArgumentParser, add_common_args, command
from chakra.errors import UsageError

PROG = "chakra_generator"
DESCRIPTION = """
Write synthetic Chakra execution traces (one PREFIX.<rank>.et per rank) that run in ASTRA-sim: single
collectives, compute-only graphs, and small data-parallel / tensor-parallel training steps.
"""
EXAMPLES = """
{prog} --num-npus 4 -o gen/
{prog} --workloads collectives --sizes 64KiB,1MiB -o gen/
{prog} --num_npus 8 --default_runtime 5 --default_comm_size 65536
"""


def build_parser(prog: str = PROG) -> ArgumentParser:
    from chakra.tools.generator import COLLECTIVES, WORKLOADS

    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--num-npus", "--num_npus", dest="num_npus", type=int, default=8, metavar="N",
                   help="ranks per workload (default 8)")
    p.add_argument("--output-prefix", "--output_prefix", "-o", dest="output_prefix", default="chakra_gen/",
                   metavar="PREFIX", help="PREFIX_<workload>.<rank>.et, or inside PREFIX when it is a folder "
                   "(ends with / or exists; default chakra_gen/)")
    p.add_argument("--workloads", default="all", metavar="LIST",
                   help=f"comma-separated, from {', '.join(WORKLOADS)} (default all)")
    p.add_argument("--collectives", default="all", metavar="LIST",
                   help=f"comma-separated, from {', '.join(COLLECTIVES)} (default all)")
    p.add_argument("--sizes", default=None, metavar="LIST",
                   help="collective sizes, comma-separated bytes with optional KiB/MiB/GiB "
                        "(default 64KiB,1MiB)")
    p.add_argument("--default_comm_size", "--default-comm-size", dest="default_comm_size", default=None,
                   metavar="BYTES", help="the reference's option: one size for the collectives and the steps")
    p.add_argument("--layers", type=int, default=4, metavar="L",
                   help="layers of the dp / tp steps (default 4)")
    p.add_argument("--steps", type=int, default=1, metavar="S", help="training steps, chained (default 1)")
    p.add_argument("--compute-us", "--compute_us", "--default_runtime", "--default-runtime",
                   dest="compute_us", type=int, default=10, metavar="US",
                   help="duration of every compute node in microseconds (default 10)")
    p.add_argument("--comm-bytes", "--comm_bytes", dest="comm_bytes", default=None, metavar="BYTES",
                   help="all-reduce size of the dp / tp steps (default 1MiB)")
    p.add_argument("--tp-size", "--tp_size", dest="tp_size", type=int, default=None, metavar="K",
                   help="ranks per tensor-parallel group of the tp step (default: all ranks)")
    p.add_argument("--jitter", type=float, default=0.0, metavar="PCT",
                   help="dp / tp: scale each compute node's duration by its own factor in "
                        "[1-PCT%%, 1+PCT%%], drawn per rank and node (default 0: every rank alike)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of --jitter (default 0)")
    p.add_argument("--default_tensor_size", "--default-tensor-size", dest="default_tensor_size", default=None,
                   metavar="BYTES", help=argparse.SUPPRESS)   # the reference's memory nodes: not generated
    add_common_args(p)
    return p


def _list(text: str, every: Collection[str], what: str) -> list[str]:
    items = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"--{what} is empty")
    return list(every) if items == ["all"] else items


def _run(args: argparse.Namespace) -> int:
    from chakra.tools.generator import COLLECTIVES, WORKLOADS, GenSpec, generate, parse_size

    one = parse_size(args.default_comm_size) if args.default_comm_size is not None else None
    if args.sizes is not None:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    else:
        sizes = [one] if one is not None else [1 << 16, 1 << 20]
    comm = parse_size(args.comm_bytes) if args.comm_bytes is not None else (one or 1 << 20)
    if args.default_tensor_size is not None:
        sys.stderr.write(f"{PROG}: note: --default_tensor_size ignored (no memory nodes are generated)\n")
    spec = GenSpec(num_npus=args.num_npus, workloads=_list(args.workloads, WORKLOADS, "workloads"),
                   collectives=_list(args.collectives, COLLECTIVES, "collectives"), sizes=sizes,
                   layers=args.layers, steps=args.steps, compute_us=args.compute_us, comm_bytes=comm,
                   tp_size=args.tp_size, jitter_pct=args.jitter, seed=args.seed)
    with _bars() as tick:
        made = generate(spec, args.output_prefix, progress=tick)
    for g in made:
        group = f"  --comm-group {g.comm_group}" if g.comm_group else ""
        sys.stdout.write(f"{g.prefix}.{{0..{g.num_npus - 1}}}.et  {g.nodes_per_rank} nodes per rank "
                         f"({g.comm_nodes_per_rank} collectives){group}\n")
    return 0


@contextmanager
def _bars() -> Iterator[Any]:
    """A rich progress bar per training workload, on a terminal only (else no progress callback)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    tasks: dict[str, Any] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bars:
        def tick(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bars.add_task(f"{name}: ranks written", total=total)
            bars.update(tasks[name], completed=done)

        yield tick


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
