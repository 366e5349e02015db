"""Run ASTRA-sim on a converted job and read each rank's simulated time.

The toolkit does not build or ship the simulator; a user points at a launcher
script with the interface of ``../shared/astra-sim/run.sh``: ``SCRIPT PREFIX N
[--comm-group FILE]``, printing ``rank R finished T ns`` per rank that finished,
exiting 0 only when every rank did.  (ASTRA-sim itself needs network, system and
memory configuration files besides the workload; such a script is where they
live.)
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from chakra.errors import ChakraError, UsageError

_FINISHED = re.compile(r"^rank (\d+) finished (\d+) ns(?: \(exposed communication (\d+) ns\))?", re.M)


@dataclass(slots=True)
class SimResult:
    finished_ns: dict[int, int] = field(default_factory=dict)
    exposed_comm_ns: dict[int, int] = field(default_factory=dict)
    exit_code: int = 0
    last_line: str = ""

    def us(self, rank: int) -> float | None:
        ns = self.finished_ns.get(rank)
        return None if ns is None else ns / 1000.0


#: the launcher's options for an experiment's configuration files (chakra.job.network.write_configs keys)
CONFIG_OPTIONS = {"network": "--network", "system": "--system"}


def run_simulator(script: str | os.PathLike[str], prefix: str | os.PathLike[str], num_npus: int, *,
                  comm_group: str | os.PathLike[str] | None = None,
                  configs: dict[str, Path] | None = None, timeout: float = 1800.0) -> SimResult:
    """Run ``script PREFIX N [--comm-group FILE] [--network F --system F]`` and parse its
    per-rank lines (``configs``: an experiment's files, :func:`chakra.job.network.write_configs`).

    A run in which some rank did not finish is an error naming the script's last line (where its
    logs are and the first problem it saw).
    """
    exe = Path(script)
    if not exe.is_file():
        raise UsageError("simulator launcher not found", exe)
    cmd = [str(exe.resolve()), os.fspath(prefix), str(num_npus)]
    if comm_group is not None:
        cmd += ["--comm-group", os.fspath(comm_group)]
    for key, path in (configs or {}).items():
        cmd += [CONFIG_OPTIONS[key], os.fspath(path)]
    if not os.access(exe, os.X_OK):
        cmd.insert(0, "bash")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ChakraError(f"the simulator did not finish in {timeout:.0f} s", exe) from None
    out = proc.stdout
    res = SimResult(exit_code=proc.returncode)
    for m in _FINISHED.finditer(out):
        res.finished_ns[int(m.group(1))] = int(m.group(2))
        if m.group(3) is not None:
            res.exposed_comm_ns[int(m.group(1))] = int(m.group(3))
    lines = [x for x in (out + proc.stderr).splitlines() if x.strip()]
    res.last_line = lines[-1] if lines else ""
    if proc.returncode != 0 or len(res.finished_ns) < num_npus:
        raise ChakraError(f"the simulator ran {len(res.finished_ns)}/{num_npus} rank(s) to completion "
                          f"(exit {proc.returncode}): {res.last_line}", exe)
    return res
