"""SIGINT / SIGTERM while a command works or writes: no partial output, an earlier output intact.

Two ways of catching a command in the act:

* a large synthetic trace (``benchmarks/synth.py``) makes the conversion / link take a while; the signal
  arrives while the command runs;
* to hit the moment the output is being written (a fraction of a millisecond on a fast disk), the command
  runs in a subprocess whose ``os.replace`` is slowed down, as a slow or network disk would be: the
  ``.part`` file is complete on disk, the rename has not happened, and the signal arrives exactly then.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from synth import generate  # noqa: E402

SLOW_DISK = """
import os, sys, time
_replace = os.replace
def slow_replace(src, dst):
    time.sleep(60)
    _replace(src, dst)
os.replace = slow_replace
import importlib
sys.exit(importlib.import_module(sys.argv[1]).main(sys.argv[2:]))
"""

PRECIOUS = b"an earlier result the user wants to keep\n"


def _env() -> dict[str, str]:
    return {**os.environ, "CHAKRA_NO_PROGRESS": "1", "PYTHONPATH": str(REPO / "src")}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """About 60,000 host ops and their Kineto trace (~16 + 20 MB of JSON)."""
    ((host, kineto),) = generate(60_000, tmp_path_factory.mktemp("synth"), seed=3)
    return host, kineto


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".part") or p.name.startswith("."))


def _wait_for(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return False


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler (Linux ``/proc``; elsewhere: after a fixed wait)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        time.sleep(1.0)
        return True
    caught = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_while_converting_a_large_trace(sig: int, big: tuple[Path, Path], tmp_path: Path) -> None:
    host, _ = big
    out = tmp_path / "big.0.et"
    out.write_bytes(PRECIOUS)
    script = Path(sys.executable).parent / "chakra_converter"
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "chakra.cli.converter"]
    proc = subprocess.Popen([*entry, "PyTorch", "--input", str(host), "--output", str(out), "-q"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=_env(),
                            cwd=tmp_path)
    # once the command catches SIGTERM it is inside run_command (imports done, work started); a signal
    # before that would test the interpreter's start-up, not the command
    assert _wait_for(lambda: _catches_sigterm(proc.pid) or proc.poll() is not None, 60)
    time.sleep(0.05)  # well inside the ~1.5 s the conversion takes (reading 16 MB of JSON alone: ~0.1 s)
    assert proc.poll() is None, "the conversion ended before the signal: make the trace larger"
    rc, err = _stop(proc, sig)
    # 128 + signal: the command's own exit; -signal: the interpreter re-raised it on its way out (CPython
    # does so now and then after a handled Ctrl-C); either way the command stopped and cleaned up
    assert rc in (128 + sig, -sig), (rc, err)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("chakra_converter: interrupted" if sig == signal.SIGINT
                                            else f"chakra_converter: terminated (signal {int(sig)})")
    assert out.read_bytes() == PRECIOUS
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(("module", "prog"), [("chakra.cli.converter", "chakra_converter"),
                                              ("chakra.cli.trace_link", "chakra_trace_link")])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_in_the_middle_of_writing(module: str, prog: str, sig: int, tmp_path: Path) -> None:
    from helpers import fault_inputs as F

    pair = F.base_pair()
    host, kin = tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"
    host.write_bytes(F.dumps(pair.host))
    kin.write_bytes(F.dumps(pair.kineto))
    if module.endswith("converter"):
        etplus = tmp_path / "et_plus_0.json"
        etplus.write_bytes(F.dumps(F.etplus_doc()))
        out = tmp_path / "out.0.et"
        args = ["PyTorch", "--input", str(etplus), "--output", str(out)]
    else:
        out = tmp_path / "et_plus_out.json"
        args = ["--pytorch-et-file", str(host), "--kineto-file", str(kin), "--output-file", str(out)]
    out.write_bytes(PRECIOUS)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_DISK, module, *args], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=_env(), cwd=tmp_path)
    parts = lambda: [p for p in tmp_path.glob(f".{out.name}.*.part") if p.stat().st_size > 0]  # noqa: E731
    try:
        assert _wait_for(parts, 60), "the command never started writing"
    finally:
        rc, err = _stop(proc, sig)
    # 128 + signal: the command's own exit; -signal: the interpreter re-raised it on its way out (CPython
    # does so now and then after a handled Ctrl-C); either way the command stopped and cleaned up
    assert rc in (128 + sig, -sig), (rc, err)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"{prog}: ")
    assert out.read_bytes() == PRECIOUS          # the earlier output is intact
    assert _leftovers(tmp_path) == []            # and the half-written one is gone


def test_signal_while_writing_a_new_output_leaves_nothing(tmp_path: Path) -> None:
    """No earlier output: after the signal there is no output file at all."""
    from helpers import fault_inputs as F

    et = tmp_path / "in.0.et"
    et.write_bytes(F.valid_et())
    out = tmp_path / "in.json"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_DISK, "chakra.cli.jsonizer", "-i", str(et), "-o",
                             str(out)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=_env(), cwd=tmp_path)
    try:
        assert _wait_for(lambda: list(tmp_path.glob(".in.json.*.part")), 60)
    finally:
        rc, _ = _stop(proc, signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.0.et"]


def test_an_interrupt_during_an_import_waits_for_the_import_to_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C raised inside an extension module's initialisation crashed the interpreter (orjson: signal
    11 in about one run in ten when the signal came 50 ms after start-up); the handler keeps it pending
    while an import runs and the 0.2 s timer raises it after."""
    from chakra.cli import common

    (tmp_path / "mod_hit_by_ctrl_c.py").write_text(
        "import sys\nfrom chakra.cli.common import _Signals\n"
        "_Signals.on_signal(2, sys._getframe())\nREACHED_THE_END = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = common._Signals.install()
    try:
        import mod_hit_by_ctrl_c  # type: ignore[import-not-found]

        assert mod_hit_by_ctrl_c.REACHED_THE_END
        assert common._Signals.pending == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):   # outside the import, the timer's next tick raises it
            common._Signals.on_alarm(signal.SIGALRM, sys._getframe())
        with pytest.raises(KeyboardInterrupt):   # and a signal outside an import raises at once
            common._Signals.on_signal(signal.SIGINT, sys._getframe())
    finally:
        common._Signals.restore(previous)
        sys.modules.pop("mod_hit_by_ctrl_c", None)
