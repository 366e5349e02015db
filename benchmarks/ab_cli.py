#!/usr/bin/env python3
"""The 5k-op CLI case (``chakra_trace_link`` then ``chakra_converter --simulate``, fresh processes) of this
checkout against another revision, interleaved: one pair of each in turn, so that both see the same
machine state (run_all.py's CLI case runs one code only; its times move with the machine by 10-25 %).

    python benchmarks/ab_cli.py --ref 0084c40 --runs 10

The reference is checked out with ``git worktree`` in a temporary folder (removed after).  Each pair is
``run_all.cli_pair`` (each command as its console script runs it), with byte-code caches written by one
unmeasured round first.  Prints best and median seconds of each process and of the pair, and the machine's
calibration (``run_all.calibrate``) before and after.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_all import REPO, calibrate, cli_pair, synthetic_case  # noqa: E402


def _pair(src: Path, host: Path, kineto: Path, tmp: Path) -> tuple[float, float]:
    link, conv = cli_pair(host, kineto, tmp, src)
    if link[2] or conv[2]:
        raise SystemExit(f"{src}: the commands exited {link[2]} / {conv[2]}")
    return link[0], conv[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="the revision to compare with (git rev)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--ops", type=int, default=14_000, help="host ops requested (run_all's CLI case)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "chakra_bench")
    args = ap.parse_args()
    _, _, host, kineto = synthetic_case(args.ops, args.work)
    calib = [calibrate()]
    with tempfile.TemporaryDirectory(prefix="chakra-ab-") as d:
        ref = Path(d) / "ref"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(ref), args.ref],
                       check=True)
        try:
            codes = {args.ref: ref / "src", "this checkout": REPO / "src"}
            times: dict[str, list[tuple[float, float]]] = {k: [] for k in codes}
            for src in codes.values():   # byte-code caches
                _pair(src, host, kineto, Path(d))
            for _ in range(args.runs):
                for name, src in codes.items():
                    times[name].append(_pair(src, host, kineto, Path(d)))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(ref)], check=False)
    calib.append(calibrate())
    print(f"machine calibration before / after (run_all.calibrate, s): {calib[0]:.3f} / {calib[1]:.3f}")
    print("| code | link best / median s | convert --simulate best / median s | both best / median s |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        cols = [[t[0] for t in ts], [t[1] for t in ts], [t[0] + t[1] for t in ts]]
        print(f"| {name} | " + " | ".join(f"{min(c):.3f} / {statistics.median(c):.3f}" for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
