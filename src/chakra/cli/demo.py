"""``chakra demo``: the whole toolkit on the bundled 2-rank trace in one command."""

from __future__ import annotations

import argparse

from chakra.cli.common import ArgumentParser, add_common_args, command, show_progress

PROG = "chakra demo"
DESCRIPTION = """
Link -> convert -> replay the 2-rank gloo trace bundled in the package (chakra/data/gloo_mlp_2r/), print
measured vs replayed time per rank and leave the ET+, Chakra ETs, replay timeline and a summary in an output
folder.
"""
EXAMPLES = """
{prog}
{prog} -o demo_out --job
{prog} --input TRACE_FOLDER -o OUT_DIR
"""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--output-dir", "-o", dest="output_dir", default="chakra_demo_out",
                   help="where to leave the outputs (default: chakra_demo_out)")
    p.add_argument("--input", "-i", dest="input_folder", default=None,
                   help="another folder of host_et_N + kineto_N traces instead of the bundled one")
    p.add_argument("--jobs", "-j", type=int, default=None,
                   help="ranks processed at once (default: one per core; 1 = in this process)")
    p.add_argument("--job", action="store_true", help="replay all ranks together (collectives coupled)")
    add_common_args(p)
    p.set_defaults(log_level="WARNING")
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.pipeline import demo_command

    return demo_command(args.output_dir, input_folder=args.input_folder, jobs=args.jobs, job_replay=args.job,
                        progress=show_progress(args.quiet))


main, console = command(_run, build_parser, PROG)

if __name__ == "__main__":
    console()
