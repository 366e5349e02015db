"""``chakra pipeline``: link, convert and replay every rank of a folder (process pool or Dask)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from chakra.cli.common import ArgumentParser, add_common_args, run_command, setup_logging, show_progress

PROG = "chakra pipeline"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Link, convert and replay every rank of a folder of "
                       "host_et_N / chakra_host_et_N + kineto_N traces (.json or .json.gz; also host/ + "
                       "device/ subfolders) and print measured vs replayed time per rank.")
    p.add_argument("folder", help="folder with the per-rank host ET and Kineto traces")
    p.add_argument("--output-dir", "--output_dir", dest="output_dir", required=True,
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
    p.add_argument("--name", default=None,
                   help="file-name prefix of the Chakra ETs (default: the folder's name)")
    from chakra.cli.replay import add_whatif_args

    add_whatif_args(p)
    add_common_args(p)
    p.set_defaults(log_level="WARNING")
    return p


def _run(args: argparse.Namespace) -> int:
    from chakra.pipeline import pipeline_command

    setup_logging(args.log_level, None, args.quiet)
    return pipeline_command(args.folder, args.output_dir, jobs=args.jobs, scheduler=args.scheduler,
                            job_replay=args.job, mode=args.mode, name=args.name,
                            progress=show_progress(args.quiet), whatif=args.whatif)


def main(argv: Sequence[str] | None = None) -> int:
    from chakra.cli.replay import whatif_from_args

    parser = build_parser()
    args = parser.parse_args(argv)
    args.whatif = whatif_from_args(args, parser)
    return run_command(_run, args, PROG)


if __name__ == "__main__":
    sys.exit(main())
