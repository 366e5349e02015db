"""``chakra pipeline``: link, convert and replay every rank of a folder (process pool or Dask)."""

from __future__ import annotations

import argparse

from chakra.cli.common import (
    ArgumentParser,
    add_common_args,
    add_missing_ranks,
    command,
    show_progress,
)

PROG = "chakra pipeline"
DESCRIPTION = """
Link, convert and replay every rank of a folder of host_et_N / chakra_host_et_N / et_N + kineto_N traces
(.json or .json.gz; also host/ + device/ subfolders; PARAM's rank-N.json told apart by content; other names
with --host-pattern / --device-pattern) and print measured vs replayed time per rank. A folder of Kineto
traces without host ETs is linked Kineto-only.
"""
EXAMPLES = """
{prog} TRACE_FOLDER -o OUT_DIR
{prog} TRACE_FOLDER -o OUT_DIR --job --jobs 2
{prog} TRACE_FOLDER -o OUT_DIR --astrasim --simulator astra-sim/run.sh
{prog} TRACE_FOLDER --output-dir OUT_DIR --scheduler tcp://host:8786
"""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("folder", nargs="?", help="folder with the per-rank host ET and Kineto traces")
    p.add_argument("--input", "-i", dest="input_folder", metavar="FOLDER", default=None,
                   help="the same folder given as an option")
    p.add_argument("--output-dir", "-o", dest="output_dir", required=True,
                   help="where to write et_plus_N.json, NAME.N.et, replay_N.log, timeline.json, summary.*")
    p.add_argument("--jobs", "-j", type=int, default=None,
                   help="ranks processed at once (default: one per core, or 1 = in this process when "
                        "the traces are small, under 4 MiB in all)")
    p.add_argument("--scheduler", metavar="ADDRESS|local", default=None,
                   help="run the ranks on a Dask cluster: a scheduler address (tcp://host:8786; the workers "
                        "must see the same paths) or 'local' for a LocalCluster of --jobs processes")
    p.add_argument("--job", action="store_true",
                   help="replay all ranks together (collectives wait for their peers) instead of each alone")
    p.add_argument("--mode", choices=("lanes", "astrasim"), default="lanes",
                   help="replay mode (see chakra replay --help)")
    p.add_argument("--step", type=int, default=None, metavar="N",
                   help="ProfilerStep#N only (see chakra link --help)")
    p.add_argument("--name", default=None,
                   help="file-name prefix of the Chakra ETs (default: the folder's name)")
    p.add_argument("--astrasim", action="store_true",
                   help="write the job so that ASTRA-sim runs it: no METADATA nodes (process groups "
                        "in comm_group.json), collectives matched across ranks (one order, one size: the "
                        "largest per-rank size), unsupported collectives and those without a counterpart on "
                        "a peer as COMP nodes; says what it changed")
    p.add_argument("--simulator", metavar="RUN_SH", default=None,
                   help="run this ASTRA-sim launcher (interface of ASTRA-sim's run.sh: RUN_SH PREFIX N "
                        "[--comm-group FILE]) on the result and show its time per rank; implies --astrasim")
    p.add_argument("--host-pattern", "--host_pattern", dest="host_pattern", metavar="PATTERN", default=None,
                   help="host ET file names, relative to FOLDER, {rank} where the rank is, shell wildcards "
                        "elsewhere (e.g. 'et_{rank}.json', 'ranks/{rank}/host_*.json'); .json also finds "
                        ".json.gz")
    p.add_argument("--device-pattern", "--device_pattern", dest="device_pattern", metavar="PATTERN",
                   default=None,
                   help="Kineto trace file names, as --host-pattern "
                        "(e.g. 'kineto/worker{rank}_*.pt.trace.json'); without {rank}, each trace is the "
                        "rank its distributedInfo records (e.g. 'prof/*.pt.trace.json')")
    p.add_argument("--kineto-only", "--kineto_only", dest="kineto_only", action="store_true",
                   help="link every rank from its Kineto trace alone, host ETs ignored (automatic when "
                        "FOLDER has none): no tensor ids, outputs or op schemas")
    p.add_argument("--force", action="store_true",
                   help="link a rank whose host ET and Kineto trace look like different runs (start times "
                        "days apart) or, without a ProfilerStep, do not align (refused otherwise)")
    add_missing_ranks(p, "link, convert and replay")
    from chakra.cli.replay import add_whatif_args

    add_whatif_args(p)
    add_common_args(p)
    p.set_defaults(log_level="WARNING")
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.pipeline import RankNaming, pipeline_command

    naming = RankNaming(args.host_pattern, args.device_pattern, args.kineto_only)
    return pipeline_command(args.folder, args.output_dir, jobs=args.jobs, scheduler=args.scheduler,
                            job_replay=args.job, mode=args.mode, name=args.name, step=args.step,
                            progress=show_progress(args.quiet), astrasim=args.astrasim,
                            simulator=args.simulator, naming=naming, whatif=args.whatif, force=args.force,
                            allow_missing_ranks=args.allow_missing_ranks)


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    from chakra.cli.replay import whatif_from_args

    if (args.folder is None) == (args.input_folder is None):
        parser.error("give the trace folder once (as an argument, or with -i/--input)")
    args.folder = args.folder or args.input_folder
    args.whatif = whatif_from_args(args, parser)


main, console = command(_run, build_parser, PROG, _check)

if __name__ == "__main__":
    console()
