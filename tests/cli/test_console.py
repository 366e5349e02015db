"""chakra.cli.entry.console_entry / exit_process: a command ends without the interpreter's teardown, but
with everything the interpreter does at exit that a user can see (atexit functions, logs, streams)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
from helpers.etplus import small_etplus

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "cmd.py"
    script.write_text(textwrap.dedent(code))
    with open(tmp_path / "stdout.txt", "w") as out:
        return subprocess.run([sys.executable, str(script)], stdout=out, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, env={"PYTHONPATH": str(REPO / "src")}, timeout=60)


def test_exit_code_atexit_log_and_buffered_stdout_survive(tmp_path):
    p = _run("""
        import atexit, logging, sys, threading, time
        from chakra.cli.entry import console_entry

        def main():
            atexit.register(lambda: open("atexit.txt", "w").write("ran"))
            logging.basicConfig(filename="cmd.log", level=logging.INFO)
            logging.getLogger("x").info("the last line")
            t = threading.Thread(target=lambda: (time.sleep(0.2), open("thread.txt", "w").write("done")))
            t.start()   # a non-daemon thread: the interpreter waits for it at exit, so does this
            sys.stdout.write("no newline at the end")
            return 3

        console_entry(main)()
        """, tmp_path)
    assert p.returncode == 3, p.stderr
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "cmd.log").read_text().strip() == "INFO:x:the last line"
    assert (tmp_path / "thread.txt").read_text() == "done"
    assert (tmp_path / "stdout.txt").read_text() == "no newline at the end"


def test_a_system_exit_inside_main_keeps_its_code(tmp_path):
    p = _run("""
        from chakra.cli.entry import console_entry

        def main():
            raise SystemExit(2)   # argparse's usage errors and --help

        console_entry(main)()
        """, tmp_path)
    assert p.returncode == 2, p.stderr


def test_none_and_text_codes_end_as_sys_exit_ends_them(tmp_path):
    for ret, rc, err in (("None", 0, ""), ("'a message'", 1, "a message\n")):
        p = _run(f"""
            from chakra.cli.entry import console_entry
            console_entry(lambda: {ret})()
            """, tmp_path)
        assert (p.returncode, p.stderr) == (rc, err)


def test_the_installed_converter_writes_its_whole_log(tmp_path):
    script = BIN / "chakra_converter"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "chakra.cli.converter"]
    src, out, log = tmp_path / "et_plus_0.json", tmp_path / "o.0.et", tmp_path / "conv.log"
    src.write_bytes(orjson.dumps(small_etplus()))
    argv = [*cmd, "--log-filename", str(log), "PyTorch", "--input", str(src), "--output", str(out),
            "--simulate"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO / "src"), "CHAKRA_NO_PROGRESS": "1"})
    assert p.returncode == 0, p.stderr
    lines = log.read_text().splitlines()
    assert sum("Node ID" in x for x in lines) == 10
    # the command's last log line, written just before the process ends
    assert "INFO chakra.converter: wrote" in lines[-1] and str(out) in lines[-1]


def test_every_console_script_is_its_modules_main_as_a_command():
    text = (REPO / "pyproject.toml").read_text()
    table = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]   # (tomllib: Python 3.11 on)
    scripts = dict(re.findall(r'^(\w+) = "([\w.:]+)"$', table, re.M))
    assert "chakra_converter" in scripts and "chakra_trace_link" in scripts
    for name, target in scripts.items():
        module, _, attr = target.partition(":")
        mod = importlib.import_module(module)
        assert attr == "console", name
        assert mod.console.__doc__ == f"``{module}.main()`` as a command: the process ends with its exit code"


def test_a_commands_process_runs_without_the_cyclic_gc(tmp_path):
    p = _run("""
        import gc
        from chakra.cli.entry import console_entry

        before = gc.isenabled()
        console_entry(lambda: 0 if before and not gc.isenabled() else 5)()
        """, tmp_path)
    assert p.returncode == 0, p.stderr


def test_every_commands_main_pickles_and_takes_another_program_name(capsys):
    import pickle

    import pytest

    from chakra.cli.main import SUBCOMMANDS

    for module_name, _ in SUBCOMMANDS.values():
        module = importlib.import_module(module_name)
        assert pickle.loads(pickle.dumps(module.main)) is module.main, module_name
        with pytest.raises(SystemExit) as exc:
            module.main(["--help"], "wrapper.py")
        assert exc.value.code == 0
        assert capsys.readouterr().out.startswith("usage: wrapper.py"), module_name
