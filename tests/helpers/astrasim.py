"""Find and run the real ASTRA-sim from tests (``from helpers import astrasim``; tests/ is on the path).

The simulator lives beside the repository at ``../shared/astra-sim`` (or where ``CHAKRA_ASTRASIM`` points):
``run.sh PREFIX N [--comm-group FILE]`` runs ``PREFIX.0.et .. PREFIX.(N-1).et`` and prints one
``rank R finished T ns (exposed communication C ns)`` line per rank.  Where it is absent (a fresh clone, CI
without it) tests that need it skip with :data:`SKIP_REASON`, the way corpus tests skip without the corpus.

    from helpers.astrasim import needs_astrasim, run

    @needs_astrasim
    def test_x(tmp_path):
        times = run(tmp_path / "job", 8, comm_group=tmp_path / "job.comm_group.json")
        assert len(times) == 8
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_FINISHED = re.compile(r"^rank (\d+) finished (\d+) ns \(exposed communication (\d+) ns\)$", re.M)


def astrasim_dir() -> Path | None:
    """The simulator's folder (the one holding ``run.sh``), or None."""
    env = os.environ.get("CHAKRA_ASTRASIM")
    path = Path(env) if env else REPO.parent / "shared" / "astra-sim"
    return path if (path / "run.sh").is_file() else None


ASTRASIM = astrasim_dir()
SKIP_REASON = "ASTRA-sim not found at ../shared/astra-sim (set CHAKRA_ASTRASIM to its folder)"
needs_astrasim = pytest.mark.skipif(ASTRASIM is None, reason=SKIP_REASON)


class SimulationFailed(AssertionError):
    """run.sh did not report every rank finished; the message carries its output."""


def run_raw(prefix: str | os.PathLike[str], n: int, comm_group: str | os.PathLike[str] | None = None,
            *extra: str, timeout_s: int = 600, log_dir: str | os.PathLike[str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """run.sh as is (skips the calling test when the simulator is absent).  The simulator's logs go to
    ``log_dir`` (default: ``<prefix>.astrasim_logs`` beside the workload, so a test's tmp_path holds them)."""
    if ASTRASIM is None:
        pytest.skip(SKIP_REASON)
    logs = os.fspath(log_dir) if log_dir is not None else f"{os.fspath(prefix)}.astrasim_logs"
    cmd = [str(ASTRASIM / "run.sh"), os.fspath(prefix), str(n), "--log-dir", logs]
    if comm_group is not None:
        cmd += ["--comm-group", os.fspath(comm_group)]
    cmd += list(extra)
    env = dict(os.environ, ASTRASIM_TIMEOUT=str(timeout_s))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s + 60)


def parse_finished(stdout: str) -> dict[int, tuple[int, int]]:
    """rank -> (finished ns, exposed communication ns) from run.sh's output."""
    return {int(r): (int(t), int(c)) for r, t, c in _FINISHED.findall(stdout)}


def run(prefix: str | os.PathLike[str], n: int, comm_group: str | os.PathLike[str] | None = None,
        *extra: str, timeout_s: int = 600) -> dict[int, int]:
    """Run ``PREFIX.0.et .. PREFIX.(n-1).et``; rank -> finished time in ns.

    Raises :class:`SimulationFailed` unless run.sh exits 0 with a finished line for every rank; skips the
    test when the simulator is absent or its runtime libraries are missing (run.sh says so, exit 2).
    """
    proc = run_raw(prefix, n, comm_group, *extra, timeout_s=timeout_s)
    if proc.returncode == 2 and "missing runtime libraries" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    finished = parse_finished(proc.stdout)
    if proc.returncode != 0 or sorted(finished) != list(range(n)):
        tail = (proc.stdout.strip().splitlines() or [""])[-1]
        raise SimulationFailed(f"ASTRA-sim on {prefix} x{n}: exit {proc.returncode}, "
                               f"{len(finished)}/{n} ranks finished; {tail} {proc.stderr.strip()[:300]}")
    return {r: t for r, (t, _) in finished.items()}
