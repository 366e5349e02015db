"""``chakra replay``: replay Chakra ETs of one rank or a whole job."""

from __future__ import annotations

import argparse

from chakra.cli.common import (
    ArgumentParser,
    add_common_args,
    add_inputs,
    add_missing_ranks,
    command,
    show_progress,
)

PROG = "chakra replay"
DESCRIPTION = """
Replay Chakra protobuf ETs (event-driven) and compare the replayed time of each rank with its measured step.
"""
EXAMPLES = """
{prog} job.0.et
{prog} job.0.et job.1.et --job --timeline timeline.json
{prog} -i job.0.et --mode astrasim --no-gaps --json
{prog} other_tool.0.et other_tool.1.et --job --comm-group groups.json
"""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=DESCRIPTION, examples=EXAMPLES)
    add_inputs(p, "ET", "Chakra ET file(s), one per rank (.et or .et.gz)")
    p.add_argument("--job", action="store_true",
                   help="replay all ranks together: collectives and send/recv wait for their peers")
    p.add_argument("--mode", choices=("lanes", "astrasim"), default="lanes",
                   help="lanes: one lane per CPU thread and GPU stream (default); astrasim: one CPU op, "
                        "one GPU compute op and one GPU comm op at a time per rank")
    p.add_argument("--no-gaps", dest="gaps", action="store_false",
                   help="drop the recorded idle time between CPU ops (what-if: the ops alone)")
    p.add_argument("--collective", choices=("auto", "net", "min"), default="auto",
                   help="--job: how long a coupled collective lasts once its last participant arrives: "
                        "each participant's recording net of its recorded wait for the last arrival (net), "
                        "or the shortest recording of its participants, ending together (min); auto "
                        "(default): net when the files record their waits (this toolkit's converter), "
                        "min when they do not (another producer's .et); the output says which")
    p.add_argument("--no-align", dest="align", action="store_false",
                   help="--job: start every rank at 0 instead of at its recorded window start")
    p.add_argument("--comm-group", metavar="FILE", default=None,
                   help='--job: the process groups as ASTRA-sim reads them, {"<pg id>": [global ranks], '
                        "...} (added to each rank's own table; wins where both list a group)")
    p.add_argument("--unknown-group", choices=("error", "world"), default="error",
                   help="--job: a collective whose process group no table lists is an error (default) or "
                        "couples all ranks (world)")
    add_missing_ranks(p, "--job: replay")
    p.add_argument("--ignore-missing-deps", action="store_true",
                   help="drop dependencies on node ids that are not in the file instead of failing")
    p.add_argument("--timeline", metavar="OUT.json",
                   help="write the replayed timeline (Chrome/Perfetto JSON)")
    p.add_argument("--log", metavar="FILE", help="write 'Node ID <id> completed at <T>us' lines")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    add_whatif_args(p)
    add_common_args(p)
    return p


def add_whatif_args(p: argparse.ArgumentParser) -> None:
    """The what-if options (shared by ``chakra replay`` and ``chakra pipeline``)."""
    w = p.add_argument_group(
        "what-if (replay as recorded and with the change; PATTERN: cpu, gpu, comm, all, or a regular "
        "expression searched in node names; @R[,R...] restricts it to ranks)")
    w.add_argument("--scale", action="append", default=[], metavar="PATTERN[@RANKS]=FACTOR",
                   help="multiply matching nodes' own time (e.g. 'aten::(addmm|mm)=2', 'gpu=0.5@0')")
    w.add_argument("--delay", action="append", default=[], metavar="PATTERN[@RANKS]=US",
                   help="add US µs to each matching node (a straggler: "
                        "'DistributedDataParallel.forward=20000@1')")
    w.add_argument("--comm-size", action="append", default=[], metavar="PATTERN[@RANKS]=FACTOR",
                   help="multiply matching collectives' bytes; the communication model re-times them")
    w.add_argument("--bandwidth", type=float, metavar="GBPS",
                   help="what if the network had this bandwidth (GB/s): the model re-times every collective "
                        "(each kind's fitted bandwidth times GBPS over the pooled one)")
    w.add_argument("--latency", type=float, metavar="US",
                   help="... and this latency per collective (µs), for every kind")
    w.add_argument("--comm-model", metavar="fit|LATENCY_US,GBPS",
                   help="the communication model: fitted on the trace's own collectives (default when one "
                        "is needed) or given; given alone, it times the collectives recorded without a "
                        "duration in a plain replay")


def whatif_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> object:
    """The WhatIf the options ask for (None when none); a bad rule is a usage error."""
    from chakra.replay.whatif import WhatIf, WhatIfError, parse_rule

    parser = parser or build_parser()
    try:
        model: str | tuple[float, float] | None = None
        if args.comm_model:
            if args.comm_model == "fit":
                model = "fit"
            else:
                lat, _, gbps = args.comm_model.partition(",")
                model = (float(lat), float(gbps))
        w = WhatIf(scale=[parse_rule(r) for r in args.scale],
                   delay=[parse_rule(r, "delay (µs)") for r in args.delay],
                   comm_size=[parse_rule(r) for r in args.comm_size],
                   bandwidth_gbps=args.bandwidth, latency_us=args.latency, model=model)
    except (WhatIfError, ValueError) as exc:
        msg = str(exc) if isinstance(exc, WhatIfError) else f"--comm-model {args.comm_model!r}: expected " \
            "'fit' or LATENCY_US,GBPS"
        parser.error(msg)
    if args.bandwidth is not None and args.bandwidth <= 0:
        parser.error("--bandwidth must be > 0")
    if args.latency is not None and args.latency < 0:
        parser.error("--latency must be >= 0")
    return None if w.empty and w.model is None else w


def _run(args: argparse.Namespace) -> int:
    from chakra.replay.output import replay_report

    return replay_report(args.inputs, job=args.job, mode=args.mode, gaps=args.gaps, align=args.align,
                         collective=args.collective,
                         missing="ignore" if args.ignore_missing_deps else "error",
                         timeline_path=args.timeline, log_path=args.log, as_json=args.json,
                         comm_groups=args.comm_group, unknown_group=args.unknown_group,
                         whatif=args.whatif, allow_missing_ranks=args.allow_missing_ranks,
                         progress=show_progress(args.quiet))


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    args.whatif = whatif_from_args(args, parser)


main, console = command(_run, build_parser, PROG, _check)

if __name__ == "__main__":
    console()
