"""Every command on damaged inputs, run as a real subprocess (issue 8).

For each command and each damaged input of ``fault_inputs``:

* FAIL cases: exit 1 (bad data) with exactly one ``<prog>: error: <file>: <problem>`` line on stderr that
  names the damaged file and says what is wrong, no traceback; no output file appears, or an existing one
  is left byte for byte; no ``.part`` or other file is left in the directory;
* WARN cases (defects real traces have and the tools tolerate): exit 0, a WARNING line that names the
  problem, a valid output;
* PASS cases: exit 0 (the command is not concerned: e.g. the jsonizer copies a graph with a cycle as is);
* the inputs are unchanged (hash before and after) in every case.

Bad usage (missing arguments) exits 2; a missing input, a directory as input and output paths in a
missing, unwritable or directory location are checked for every command.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import fault_inputs as F

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "ci_tools" / "integration_tests.py"

MODULES = {
    "chakra_trace_link": "chakra.cli.trace_link",
    "chakra_converter": "chakra.cli.converter",
    "chakra_jsonizer": "chakra.cli.jsonizer",
    "chakra_visualizer": "chakra.cli.visualizer",
    "chakra_timeline_visualizer": "chakra.cli.timeline",
}


def command(name: str) -> list[str]:
    """The installed console script when there is one, else ``python -m``."""
    if name.startswith("chakra "):
        script = BIN / "chakra"
        sub = name.split()[1]
        return [str(script), sub] if script.exists() else [sys.executable, "-m", "chakra.cli.main", sub]
    script = BIN / name
    return [str(script)] if script.exists() else [sys.executable, "-m", MODULES[name]]


@dataclass
class Run:
    rc: int
    out: str
    err: str


def run(argv: list[str], cwd: Path, timeout: float = 120) -> Run:
    env = {**os.environ, "CHAKRA_NO_PROGRESS": "1", "PYTHONPATH": str(REPO / "src")}
    p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)
    return Run(p.returncode, p.stdout, p.stderr)


def digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def error_lines(r: Run, prog: str) -> list[str]:
    return [ln for ln in r.err.splitlines() if ln.startswith(f"{prog}: error: ")]


def assert_failed(r: Run, prog: str, bad: Path, words: tuple[str, ...], code: int = 1) -> str:
    assert "Traceback" not in r.err, r.err
    assert r.rc == code, (r.rc, r.err)
    lines = error_lines(r, prog)
    assert len(lines) == 1, r.err
    # everything else on stderr is a log line ("[time] LEVEL ...")
    assert all(ln.startswith("[") for ln in r.err.splitlines() if ln.strip() and ln != lines[0]), r.err
    line = lines[0]
    assert bad.name in line, line
    assert not words or any(w in line.lower() for w in words), (words, line)
    return line


def assert_warned(r: Run, words: tuple[str, ...]) -> None:
    assert "Traceback" not in r.err, r.err
    assert r.rc == 0, r.err
    warnings = [ln for ln in r.err.splitlines() if " WARNING " in ln]
    assert warnings, r.err
    assert not words or any(w in ln.lower() for ln in warnings for w in words), (words, warnings)


# ---- the damaged inputs of each command --------------------------------------------------------------------

PASS = "pass"
#: (command, case) -> the outcome when it differs from the fault's own (and why, in a comment)
OVERRIDES: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    # The linker passes the host tree through; the converter is the stage that repairs it (with a warning).
    ("link", "host:parent_cycle"): (PASS, ()),
    ("link", "host:parent_missing_node"): (PASS, ()),
    ("summary", "host:parent_cycle"): (PASS, ()),
    ("summary", "host:parent_missing_node"): (PASS, ()),
    # A lossless format converter copies whatever graph the file holds.
    ("jsonizer", "duplicate_node_ids"): (PASS, ()),
    ("jsonizer", "ctrl_dep_missing_node"): (PASS, ()),
    ("jsonizer", "dependency_cycle"): (PASS, ()),
    ("jsonizer", "metadata_only"): (PASS, ()),
    ("jsonizer", "huge_duration"): (PASS, ()),
    # Drawing and statistics are how one looks into a broken graph: made, with a warning.
    ("visualizer", "duplicate_node_ids"): (F.WARN, ("duplicate node id 2",)),
    ("visualizer", "ctrl_dep_missing_node"): (F.WARN, ("missing",)),
    ("visualizer", "dependency_cycle"): (F.WARN, ("cycle",)),
    ("visualizer", "huge_duration"): (PASS, ()),
    ("stats", "duplicate_node_ids"): (F.WARN, ("duplicate node id 2",)),
    ("stats", "ctrl_dep_missing_node"): (F.WARN, ("missing",)),
    ("stats", "dependency_cycle"): (F.WARN, ("cycle",)),
    ("stats", "metadata_only"): (F.WARN, ("no nodes",)),
    ("stats", "huge_duration"): (PASS, ()),
    ("replay", "huge_duration"): (PASS, ()),
    # stats reads ET+ for its durations and parent links only; it does not judge timing or sync deps
    ("stats", "etplus:duplicate_node_ids"): (PASS, ()),
    ("stats", "etplus:dependency_cycle"): (PASS, ()),
    ("stats", "etplus:dependency_to_missing_node"): (PASS, ()),
    ("stats", "etplus:gpu_node_missing_launcher"): (PASS, ()),
    ("stats", "etplus:nan_duration"): (PASS, ()),
    ("stats", "etplus:negative_duration"): (PASS, ()),
    ("stats", "etplus:huge_duration"): (PASS, ()),
    ("stats", "etplus:infinite_duration"): (PASS, ()),
    ("stats", "etplus:timestamp_not_a_number"): (PASS, ()),
    ("timeline", "non_utf8"): (PASS, ()),
}


def _cases() -> list[tuple[str, str, F.Fault]]:
    host, kin, etplus, et = F.host_faults(), F.kineto_faults(), F.etplus_faults(), F.et_faults()
    host_flat = F.host_faults("flat")
    out: list[tuple[str, str, F.Fault]] = []
    for form in ("link", "link2023"):
        out += [(form, f"host:{k}", f) for k, f in (host if form == "link" else host_flat).items()]
        out += [(form, f"kineto:{k}", f) for k, f in kin.items()]
    for form in ("convert", "convert2024"):
        out += [(form, f"etplus:{k}", f) for k, f in etplus.items()]
        out += [(form, f"host:{k}", f) for k, f in host.items()]
    for cmd in ("jsonizer", "visualizer", "replay", "stats"):
        out += [(cmd, k, f) for k, f in et.items()]
    out += [("jsonizer", f"json:{k}", f) for k, f in F.et_json_faults().items()]
    out += [("stats", f"etplus:{k}", f) for k, f in etplus.items()]
    out += [("summary", f"host:{k}", f) for k, f in host.items()]
    out += [("summary", f"kineto:{k}", f) for k, f in kin.items()]
    out += [("timeline", k, f) for k, f in F.sim_faults().items()]
    return out


CASES = _cases()
PROGS = {"link": "chakra_trace_link", "link2023": "chakra_trace_link", "convert": "chakra_converter",
         "convert2024": "chakra_converter", "jsonizer": "chakra_jsonizer", "visualizer": "chakra_visualizer",
         "replay": "chakra replay", "stats": "chakra stats", "summary": "chakra summary",
         "timeline": "chakra_timeline_visualizer"}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("good")
    pair = F.base_pair()
    files = {
        "host": (d / "host_et_0.json", F.dumps(pair.host)),
        "host_flat": (d / "host_flat_0.json", F.dumps(F.base_pair("flat").host)),
        "kineto": (d / "kineto_0.json", F.dumps(pair.kineto)),
        "etplus": (d / "etplus_0.json", F.dumps(F.etplus_doc())),
        "et": (d / "good.0.et", F.valid_et()),
        "sim": (d / "sim.csv", F.valid_sim_csv()),
    }
    for path, data in files.values():
        path.write_bytes(data)
    return {k: p for k, (p, _) in files.items()}


def argv_for(cmd: str, case: str, bad: Path, good: dict[str, Path], out: Path) -> list[str]:
    role = case.split(":")[0] if ":" in case else ""
    if cmd in ("link", "link2023"):
        host = bad if role == "host" else good["host" if cmd == "link" else "host_flat"]
        kin = bad if role == "kineto" else good["kineto"]
        if cmd == "link":
            return command("chakra_trace_link") + ["--pytorch-et-file", str(host), "--kineto-file", str(kin),
                                                   "--output-file", str(out)]
        return command("chakra_trace_link") + ["--chakra-host-trace", str(host), "--chakra-device-trace",
                                               str(kin), "--rank", "0", "--output-file", str(out)]
    if cmd == "convert":
        return command("chakra_converter") + ["PyTorch", "--input", str(bad), "--output", str(out)]
    if cmd == "convert2024":
        return command("chakra_converter") + ["--input_filename", str(bad), "--output_filename", str(out),
                                              "--input_type", "PyTorch"]
    if cmd == "jsonizer":
        return command("chakra_jsonizer") + ["--input_filename", str(bad), "--output_filename", str(out)]
    if cmd == "visualizer":
        return command("chakra_visualizer") + ["--input_filename", str(bad), "--output_filename", str(out)]
    if cmd == "replay":
        return command("chakra replay") + [str(bad), "--timeline", str(out)]
    if cmd == "stats":
        return command("chakra stats") + [str(bad)]
    if cmd == "summary":
        return command("chakra summary") + [str(bad)]
    assert cmd == "timeline"
    return command("chakra_timeline_visualizer") + ["-i", str(bad), "-o", str(out), "--num_npus", "2",
                                                    "--npu_frequency", "1000"]


OUT_NAME = {"link": "out.json", "link2023": "out.json", "convert": "out.et", "convert2024": "out.et",
            "jsonizer": "out.json", "visualizer": "out.dot", "replay": "timeline.json", "stats": None,
            "summary": None, "timeline": "out.json"}


@pytest.mark.parametrize(("cmd", "case", "fault"), CASES, ids=[f"{c}-{k}" for c, k, _ in CASES])
def test_damaged_input(cmd: str, case: str, fault: F.Fault, good: dict[str, Path], tmp_path: Path) -> None:
    bad = F.write_fault(tmp_path, case.replace(":", "_"), fault)
    base_cmd = {"link2023": "link", "convert2024": "convert"}.get(cmd, cmd)
    outcome, words = OVERRIDES.get((base_cmd, case), (fault.outcome, fault.words))
    name = OUT_NAME[cmd]
    out = tmp_path / (name or "unused")
    # half the cases start with an output file of the same name: it must survive a failure intact
    preexisting = name is not None and CASES.index((cmd, case, fault)) % 2 == 0
    if preexisting:
        out.write_bytes(b"precious earlier result\n")
    inputs = [bad, *good.values()]
    before, files_before = digest(inputs), listing(tmp_path)

    r = run(argv_for(cmd, case, bad, good, out), tmp_path)

    assert digest(inputs) == before, "an input file was modified"
    if outcome == F.FAIL:
        assert_failed(r, PROGS[cmd], bad, words)
        assert listing(tmp_path) == files_before, "a file appeared or vanished"
        if preexisting:
            assert out.read_bytes() == b"precious earlier result\n"
        return
    if outcome == F.WARN:
        assert_warned(r, words)
    else:
        assert r.rc == 0 and "Traceback" not in r.err, r.err
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    if name is not None:
        assert out.exists() and out.read_bytes() != b"precious earlier result\n"


# ---- ET and Kineto from different runs ---------------------------------------------------------------------


def test_other_pid_warns_then_strict_refuses(good: dict[str, Path], tmp_path: Path) -> None:
    kin = tmp_path / "kineto_other.json"
    kin.write_bytes(F.other_run_kineto("pid"))
    out = tmp_path / "et_plus.json"
    base = command("chakra_trace_link") + ["--pytorch-et-file", str(good["host"]), "--kineto-file", str(kin),
                                           "--output-file", str(out)]
    r = run(base, tmp_path)
    expect = f"pid {F.PID + 1}"
    assert_warned(r, (expect,))
    assert out.exists()
    out.unlink()
    r = run(base + ["--strict"], tmp_path)
    line = assert_failed(r, "chakra_trace_link", kin, (expect, "--strict"))
    assert "not the same run" in line
    assert not out.exists()


def test_other_day_refused_then_force_links(good: dict[str, Path], tmp_path: Path) -> None:
    """Start times a day apart: different runs, refused with both times named (issue 30); --force links."""
    kin = tmp_path / "kineto_other.json"
    kin.write_bytes(F.other_run_kineto("time"))
    out = tmp_path / "et_plus.json"
    base = command("chakra_trace_link") + ["--pytorch-et-file", str(good["host"]), "--kineto-file", str(kin),
                                           "--output-file", str(out)]
    expect = ("host et time '2026-11-30 08:00:00' (its machine's clock) is 24.0 h before the kineto trace's "
              "start, 2026-12-01 08:00:05 utc (--force links anyway)")
    line = assert_failed(run(base, tmp_path), "chakra_trace_link", kin, (expect,))
    assert "not the same run" in line
    assert not out.exists()
    assert_failed(run(base + ["--strict"], tmp_path), "chakra_trace_link", kin, ("(refused: --strict)",))
    assert not out.exists()
    assert_warned(run(base + ["--force"], tmp_path), ("24.0 h before", "linked anyway: --force"))
    assert out.exists()


def test_same_run_is_quiet_under_strict(good: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "et_plus.json"
    argv = command("chakra_trace_link") + ["--pytorch-et-file", str(good["host"]), "--kineto-file",
                                           str(good["kineto"]), "--output-file", str(out), "--strict"]
    r = run(argv, tmp_path)
    assert r.rc == 0, r.err
    assert "same run" not in r.err
    assert out.exists()


# ---- the integration harness -------------------------------------------------------------------------------

HARNESS_CASES = list(F.archive_faults("job").items())


@pytest.mark.parametrize(("case", "fault"), HARNESS_CASES, ids=[k for k, _ in HARNESS_CASES])
def test_harness_damaged_archive(case: str, fault: F.Fault, tmp_path: Path) -> None:
    tgz = tmp_path / "job.tgz"
    tgz.write_bytes(fault.data)
    before = digest([tgz])
    r = run([sys.executable, str(HARNESS), "--tgz_path", str(tgz), "--num_ranks", "1", "--expected_times_ms",
             "1", "--workers", "1"], tmp_path)
    assert digest([tgz]) == before
    assert "Traceback" not in r.err and r.rc == 1, r.err
    lines = error_lines(r, "integration_tests.py")
    assert len(lines) == 1, r.err
    # the archive, its folder or the damaged member is named, and what is wrong with it
    assert "job" in lines[0] and any(w in lines[0].lower() for w in fault.words), lines[0]
    assert "Validation successful" not in r.out
    assert not list(tmp_path.rglob("*.part"))
    if case not in ("truncated_host_et", "kineto_not_json"):  # refused before linking: nothing is left
        assert listing(tmp_path) == ["job.tgz"]


# ---- files and paths, for every command --------------------------------------------------------------------

PATH_COMMANDS = ["link", "link2023", "convert", "convert2024", "jsonizer", "visualizer", "replay", "stats",
                 "summary", "timeline"]


def _path_argv(cmd: str, good: dict[str, Path], inp: Path | None, out: Path) -> list[str]:
    """The command with ``inp`` replacing its (first) input and ``out`` as output."""
    role = {"link": "kineto:", "link2023": "host:"}.get(cmd, "")
    src = {"convert": "etplus", "convert2024": "etplus", "jsonizer": "et", "visualizer": "et", "replay": "et",
           "stats": "et", "summary": "host", "timeline": "sim"}.get(cmd)
    bad = inp if inp is not None else (good[src] if src else None)
    if cmd in ("link", "link2023") and inp is None:
        return argv_for(cmd, "", good["host"], good, out)
    return argv_for(cmd, role, bad, good, out)  # type: ignore[arg-type]


@pytest.mark.parametrize("cmd", PATH_COMMANDS)
def test_missing_input_and_directory_input(cmd: str, good: dict[str, Path], tmp_path: Path) -> None:
    prog = PROGS[cmd]
    out = tmp_path / (OUT_NAME[cmd] or "unused.json")
    missing = tmp_path / "no_such_trace.json"
    r = run(_path_argv(cmd, good, missing, out), tmp_path)
    # every command calls a missing input what read_bytes calls it: a data error naming the file
    line = assert_failed(r, prog, missing, ("file not found",), code=1)
    assert "no_such_trace.json" in line
    folder = tmp_path / "a_folder"
    folder.mkdir()
    r = run(_path_argv(cmd, good, folder, out), tmp_path)
    assert_failed(r, prog, folder, ("directory",))
    assert not out.exists()


def _unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        d = tmp_path / "read_only"
        d.mkdir()
        d.chmod(0o555)
        return d
    # root writes through permission bits; sysfs refuses new files even to root
    d = Path("/sys")
    try:
        fd = os.open(d / "chakra_probe", os.O_CREAT | os.O_WRONLY)
    except OSError:
        return d
    os.close(fd)
    pytest.skip("no directory is unwritable here")


@pytest.mark.parametrize("cmd", [c for c in PATH_COMMANDS if OUT_NAME[c]])
def test_bad_output_locations(cmd: str, good: dict[str, Path], tmp_path: Path) -> None:
    prog = PROGS[cmd]
    suffix = Path(OUT_NAME[cmd]).suffix  # type: ignore[arg-type]
    missing_dir = tmp_path / "not" / "there" / f"o{suffix}"
    r = run(_path_argv(cmd, good, None, missing_dir), tmp_path)
    assert_failed(r, prog, missing_dir, ("does not exist",), code=2)
    assert not (tmp_path / "not").exists()

    ro = _unwritable_dir(tmp_path)
    target = ro / f"chakra_out{suffix}"
    r = run(_path_argv(cmd, good, None, target), tmp_path)
    assert_failed(r, prog, target, ("permission denied", "cannot write"))
    assert not target.exists()

    as_dir = tmp_path / f"taken{suffix}"
    as_dir.mkdir()
    r = run(_path_argv(cmd, good, None, as_dir), tmp_path)
    assert_failed(r, prog, as_dir, ("is a directory",), code=2)
    assert as_dir.is_dir() and not list(as_dir.iterdir())
    assert not list(tmp_path.glob(".*.part"))


# ---- bad usage ---------------------------------------------------------------------------------------------

USAGE = {
    "link: nothing": command("chakra_trace_link"),
    "link: no kineto": command("chakra_trace_link") + ["--pytorch-et-file", "a.json", "--output-file", "o"],
    "link: bad rank": command("chakra_trace_link") + ["--rank", "x"],
    "link: strict batch": command("chakra_trace_link") + ["--batch", ".", "--strict"],
    "convert: nothing": command("chakra_converter"),
    "convert: no output": command("chakra_converter") + ["PyTorch", "--input", "x.json"],
    "convert: bad type": command("chakra_converter") + ["Caffe", "--input", "x.json", "--output", "o"],
    "jsonizer: nothing": command("chakra_jsonizer"),
    "visualizer: no output": command("chakra_visualizer") + ["--input_filename", "x.et"],
    "visualizer: bad format": command("chakra_visualizer") + ["-i", "x.et", "-o", "x.xyz"],
    "timeline: no npus": command("chakra_timeline_visualizer") + ["-i", "x.csv", "-o", "o.json"],
    "timeline: npus 0": command("chakra_timeline_visualizer") + ["-i", "x.csv", "-o", "o.json", "--num_npus",
                                                                 "0", "--npu_frequency", "1"],
    "replay: nothing": command("chakra replay"),
    "replay: bad mode": command("chakra replay") + ["x.et", "--mode", "ticks"],
    "stats: nothing": command("chakra stats"),
    "stats: top 0": command("chakra stats") + ["x.et", "--top", "0"],
    "summary: nothing": command("chakra summary"),
    "chakra: unknown": command("chakra replay")[:-1] + ["frobnicate"],
    "harness: nothing": [sys.executable, str(HARNESS)],
    "harness: no times": [sys.executable, str(HARNESS), "--tgz_path", "x.tgz", "--num_ranks", "1"],
}


@pytest.mark.parametrize("name", list(USAGE))
def test_bad_usage_exits_2(name: str, tmp_path: Path) -> None:
    r = run(USAGE[name], tmp_path)
    assert r.rc == 2, (r.rc, r.err)
    assert "Traceback" not in r.err
    assert "error" in r.err.lower()
    assert listing(tmp_path) == []


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.et"
    bad.write_bytes(F.et_faults()["truncated_last_message"].data)
    r = run(command("chakra replay") + [str(bad)], tmp_path)
    assert r.rc == 1 and "Traceback" not in r.err
    r = run(command("chakra replay") + [str(bad), "--debug"], tmp_path)
    assert r.rc == 1 and "Traceback" in r.err and "TraceFormatError" in r.err


def test_console_scripts_are_used_when_installed() -> None:
    # the fault tests run what a user runs; this says which entry point that was
    if shutil.which("chakra_converter", path=str(BIN)) is None:
        pytest.skip("console scripts not installed beside this python")
    assert command("chakra_converter") == [str(BIN / "chakra_converter")]
