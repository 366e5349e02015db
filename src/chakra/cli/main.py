"""The umbrella ``chakra`` command: ``chakra <subcommand> [args]``.

Each subcommand is a module in ``chakra.cli`` exposing ``main(argv)``; the
table below is the only place that lists them, so adding one touches one line.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from chakra import __version__
from chakra.cli.common import SPELLING_NOTE, umbrella_prog
from chakra.cli.entry import console_entry

# subcommand, its module in chakra.cli, one-line help
_TABLE = """
demo       demo         link, convert and replay a bundled multi-rank trace
summary    summary      summarise a host ET, Kineto trace or Chakra ET
link       trace_link   link a host ET with its Kineto trace into ET+ JSON
convert    converter    convert ET+ (or a host ET) to a Chakra protobuf ET
generate   generator    write synthetic Chakra ETs (collectives, dp / tp steps)
replay     replay       replay Chakra ETs of one rank or a whole job
jsonize    jsonizer     Chakra protobuf ET <-> JSON
visualize  visualizer   draw a Chakra ET as pdf/png/svg/dot/graphml
timeline   timeline     simulator CSV -> Chrome trace JSON
stats      stats        statistics of a Chakra ET or ET+
pipeline   pipeline     link, convert and replay every rank of a folder
validate   validate     check Chakra ETs against what ASTRA-sim reads (one rank or a job)
harness    harness      check every rank of a trace archive against expected times
extrapolate extrapolate write the ETs of a larger data-parallel job from a measured one
"""
_ROWS = (line.split(None, 2) for line in _TABLE.strip().splitlines())
# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {name: (f"chakra.cli.{mod}", text) for name, mod, text in _ROWS}


def _usage() -> str:
    lines = [f"usage: chakra <command> [args]   (chakra {__version__})", "", "commands:"]
    width = max(10, *(len(name) for name in SUBCOMMANDS))
    for name, (_, text) in SUBCOMMANDS.items():
        lines.append(f"  {name:<{width}} {text}")
    lines.append("")
    lines.append("'chakra <command> --help' for the options of one command.")
    lines += ["", "examples:", "  chakra demo", "  chakra pipeline TRACE_FOLDER -o OUT_DIR --job",
              "  chakra stats OUT_DIR/job.0.et", "", SPELLING_NOTE]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        sys.stdout.write(f"chakra {__version__}\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        sys.stderr.write(f"chakra: error: unknown command {name!r}\n{_usage()}")
        return 2
    module_name = SUBCOMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        sys.stderr.write(f"chakra {name}: not built yet in this version of the toolkit\n")
        return 2
    with umbrella_prog(f"chakra {name}"):
        return int(module.main(rest) or 0)


console = console_entry(main)

if __name__ == "__main__":
    console()
