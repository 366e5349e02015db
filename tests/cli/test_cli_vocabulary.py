"""One option vocabulary across every command (issue 16).

Walks every console script of pyproject.toml and every ``chakra`` subcommand (and the harness script of
ci_tools): ``--help`` has an example naming the command as it was called, ``--version`` prints the
toolkit's version, every long option is accepted in its other spelling (``-`` <-> ``_``), inputs are
accepted as ``-i``/``--input_filename`` where a command reads files, and INFO lines are off by default.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from chakra import __version__
from chakra.cli import common
from chakra.cli import main as umbrella

REPO = Path(__file__).resolve().parents[2]


def _scripts() -> dict[str, str]:
    """[project.scripts] of pyproject.toml (no tomllib on Python 3.10)."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^(\S+)\s*=\s*"([^"]+)"', section, re.M))


SCRIPTS = _scripts()


# (name the user types, argv prefix for umbrella.main or None, module)
COMMANDS: list[tuple[str, list[str] | None, str]] = [
    (name, None, target.split(":")[0]) for name, target in SCRIPTS.items() if name != "chakra"
] + [(f"chakra {sub}", [sub], module) for sub, (module, _) in umbrella.SUBCOMMANDS.items()]


def call(cmd: tuple[str, list[str] | None, str], argv: list[str]) -> int:
    name, prefix, module = cmd
    if prefix is not None:
        return umbrella.main(prefix + argv)
    return int(importlib.import_module(module).main(argv) or 0)


def test_every_console_script_is_walked() -> None:
    # the standalone programs, the umbrella and the harness, all installed
    assert {"chakra", "chakra_trace_link", "chakra_converter", "chakra_jsonizer", "chakra_visualizer",
            "chakra_timeline_visualizer", "chakra_integration_tests"} <= set(SCRIPTS)
    assert {"demo", "link", "convert", "replay", "stats", "summary", "pipeline", "harness", "visualize",
            "jsonize", "timeline"} <= set(umbrella.SUBCOMMANDS)
    for target in SCRIPTS.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func))


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_help_has_an_example_and_the_shared_options(cmd: Any, capsys: pytest.CaptureFixture[str]) -> None:
    name = cmd[0]
    with pytest.raises(SystemExit) as exc:
        call(cmd, ["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {name} ")           # `chakra link --help` names `chakra link`
    examples = text.split("\nexamples:\n", 1)
    assert len(examples) == 2, text
    lines = [ln for ln in examples[1].splitlines() if ln.startswith("  ")]
    assert lines and all(ln.startswith(f"  {name}") for ln in lines), lines
    for opt in ("--version", "--log-level", "--log-filename", "--verbose", "--debug", "--quiet"):
        assert opt in text, opt
    assert "WARNING (default)" in text
    assert common.SPELLING_NOTE in text


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_version(cmd: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        call(cmd, ["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"{cmd[0]} {__version__}\n"


def test_umbrella_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert umbrella.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "\nexamples:\n  chakra demo\n" in text and common.SPELLING_NOTE in text
    assert umbrella.main(["--version"]) == 0
    assert capsys.readouterr().out == f"chakra {__version__}\n"


def _parser(cmd: tuple[str, list[str] | None, str]) -> argparse.ArgumentParser:
    name, prefix, module = cmd
    mod = importlib.import_module(module)
    if prefix is None:
        return mod.build_parser()
    with common.umbrella_prog(name):
        return mod.build_parser()


def _value(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:   # one that is not the default, so that the option visibly sets it
        return [str(next((c for c in action.choices if c != action.default), next(iter(action.choices))))]
    return ["1"] if action.type in (int, float) else ["x"]


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_long_option_in_both_spellings(cmd: Any) -> None:
    """Each long option, given in its other spelling, sets what the written one sets."""
    parser = _parser(cmd)
    assert isinstance(parser, common.ArgumentParser)
    for action in parser._actions:
        action.required = False            # the option under test alone (no other required option)
    checked = 0
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        for opt in action.option_strings:
            for alt in common.other_spellings(opt):
                ns, rest = parser.parse_known_args([alt, *_value(action)])
                assert rest == [], (alt, rest)
                ns_ref, _ = parser.parse_known_args([opt, *_value(action)])
                assert getattr(ns, action.dest) == getattr(ns_ref, action.dest), alt
                assert getattr(ns, action.dest) != action.default or action.nargs == 0, alt
                checked += 1
    assert checked >= 2      # --log_level and --output_dir at least


def test_other_spellings() -> None:
    assert common.other_spellings("--no-gaps") == ["--no_gaps"]
    assert common.other_spellings("--input_filename") == ["--input-filename"]
    assert common.other_spellings("--a_b-c") == ["--a-b-c", "--a_b_c"]
    assert common.other_spellings("--json") == [] and common.other_spellings("-i") == []


def test_a_prefix_of_two_spellings_is_not_ambiguous() -> None:
    p = common.ArgumentParser(prog="t")
    p.add_argument("--output-dir", "--output_dir", dest="out")
    assert p.parse_args(["--outp", "d"]).out == "d"


# the findings of the issue, one by one
SPELLING_CASES = [
    ("chakra_trace_link", ["--chakra_host_trace", "h", "--chakra_device_trace", "k", "--output_file", "o"],
     {"host": "h", "kineto": "k", "output": "o"}),
    ("chakra replay", ["a.et", "--no_gaps", "--ignore_missing_deps"], {"gaps": False, "inputs": ["a.et"]}),
    ("chakra replay", ["--input_filename", "a.et", "b.et"], {"input_filename": ["a.et", "b.et"]}),
    ("chakra stats", ["--input_filename", "a.et"], {"input_filename": ["a.et"]}),
    ("chakra stats", ["-i", "a.et", "-i", "b.et"], {"input_filename": ["a.et", "b.et"]}),
    ("chakra summary", ["--input-filename", "k.json"], {"input_filename": ["k.json"]}),
    ("chakra_converter", ["-i", "e.json", "-o", "x.et", "--log-level", "info"],
     {"input": "e.json", "output": "x.et", "log_level": "INFO"}),
    ("chakra pipeline", ["F", "-o", "D", "--output_dir", "E"], {"output_dir": "E"}),
    ("chakra pipeline", ["-i", "F", "-o", "D"], {"input_folder": "F", "folder": None}),
    ("chakra validate", ["-i", "a.et", "b.et", "--log_filename", "v.log"],
     {"input_filename": ["a.et", "b.et"], "log_filename": "v.log"}),
    ("chakra replay", ["a.et", "--log-filename", "r.log"], {"log_filename": "r.log"}),
    ("chakra demo", ["-i", "F", "-o", "D", "-v"],
     {"input_folder": "F", "output_dir": "D", "log_level": "INFO"}),
    ("chakra_integration_tests", ["--tgz-path", "a.tgz", "--num-ranks", "2", "--workers", "3", "-vv"],
     {"tgz_path": "a.tgz", "num_ranks": 2, "jobs": 3, "log_level": "DEBUG"}),
]


@pytest.mark.parametrize(("name", "argv", "want"), SPELLING_CASES, ids=[c[0] for c in SPELLING_CASES])
def test_issue_spellings(name: str, argv: list[str], want: dict[str, Any]) -> None:
    cmd = next(c for c in COMMANDS if c[0] == name)
    ns = _parser(cmd).parse_args(argv)
    for key, value in want.items():
        assert getattr(ns, key) == value, key


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_info_is_off_by_default(cmd: Any) -> None:
    parser = _parser(cmd)
    assert parser.get_default("log_level") == "WARNING"


def test_console_handler_stays_at_warning_with_a_log_file(tmp_path: Path) -> None:
    log_file = tmp_path / "x.log"
    common.setup_logging("WARNING", str(log_file))
    try:
        root = logging.getLogger()
        console, file_handler = root.handlers
        assert console.level == logging.WARNING and file_handler.level == logging.INFO
        logging.getLogger("chakra.test").info("for the file only")
        file_handler.flush()
        assert "for the file only" in log_file.read_text()
    finally:
        common.setup_logging("WARNING")


def test_inputs_are_required_once_parsed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser(("chakra replay", ["replay"], "chakra.cli.replay")).parse_args(["--job"])
    assert exc.value.code == 2
    assert re.search(r"give at least one ET \(as an argument, or with -i/--input_filename\)",
                     capsys.readouterr().err)


def test_link_prints_its_match_summary_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chakra.cli import trace_link

    d = REPO / "tests" / "data" / "gloo_mlp_2r"
    out = tmp_path / "et_plus_0.json"
    assert trace_link.main(["--chakra-host-trace", str(d / "host_et_0.json.gz"), "--chakra-device-trace",
                            str(d / "kineto_0.json.gz"), "-o", str(out)]) == 0
    got = capsys.readouterr()
    assert got.err == ""                          # no INFO lines by default
    # gloo_mlp_2r rank 0: 457 host nodes, 454 of them operators, all matched by rf_id; a CPU-only trace: no
    # GPU op at all, said so (not "0/0 GPU ops attached (100.0%)")
    assert got.out == ("rank 0: 454/454 host ops matched (100.0%, rf_id, window "
                       "ProfilerStep#2+ProfilerStep#3); no GPU ops; 0 sync deps, "
                       f"2 inter-thread deps; 2 collective records on CPU threads (gloo 2) -> {out}\n")
    assert trace_link.main(["--chakra-host-trace", str(d / "host_et_0.json.gz"), "--chakra-device-trace",
                            str(d / "kineto_0.json.gz"), "-o", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_the_ci_tools_script_is_the_same_command(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    script = REPO / "ci_tools" / "integration_tests.py"
    spec = importlib.util.spec_from_file_location("integration_tests", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit):
        mod.main(["--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: integration_tests.py ")
    assert "\nexamples:\n  integration_tests.py --tgz_path " in text
    # help on every option (the issue: --num_ranks, --mode, --no-gaps had none)
    parser = mod.build_parser()
    assert all(a.help for a in parser._actions), [a.option_strings for a in parser._actions if not a.help]


def test_every_command_writes_its_log_to_log_filename(tmp_path: Path, data_dir: Path) -> None:
    # the linker's INFO summary line lands in the file although the console stays at WARNING
    log_file = tmp_path / "link.log"
    d = data_dir / "gloo_mlp_2r"
    argv = ["link", "--chakra-host-trace", str(d / "host_et_0.json.gz"), "--chakra-device-trace",
            str(d / "kineto_0.json.gz"), "-o", str(tmp_path / "l.json"), "--log-filename", str(log_file),
            "-q"]
    assert umbrella.main(argv) == 0
    assert " INFO chakra.link.api: rank 0: " in log_file.read_text()
