"""What a command of one file imports: only the stages it runs (the start-up of every CLI process).

``chakra_trace_link`` of one pair needs the link and nothing above it; ``chakra_converter --simulate``
needs the converter and the replay of one file, not the process pool; the lazy package namespaces
(``chakra.pipeline``, ``chakra.replay``) still give every name they list.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_link_of_one_pair_imports_no_replay_protobuf_or_process_pool() -> None:
    loaded = _loaded_after("import chakra.cli.trace_link, chakra.pipeline.link")
    assert "chakra.link.api" in loaded
    unwanted = {"chakra.replay", "chakra.job", "chakra.convert", "chakra.schema", "google.protobuf",
                "multiprocessing", "concurrent.futures", "chakra.io.executor", "chakra.io.ranks",
                "chakra.pipeline.run", "chakra.pipeline.model",
                "rich", "networkx", "pydot"}
    assert not unwanted & loaded, sorted(unwanted & loaded)


def test_convert_and_replay_of_one_file_import_no_process_pool() -> None:
    loaded = _loaded_after("import chakra.cli.converter, chakra.convert.driver, chakra.replay\n"
                           "chakra.replay.replay_rank")
    assert "chakra.replay.api" in loaded and "chakra.replay.reader" in loaded
    unwanted = {"multiprocessing", "concurrent.futures", "chakra.io.executor", "chakra.pipeline",
                "chakra.replay.output", "chakra.tools", "rich", "networkx", "pydot"}
    assert not unwanted & loaded, sorted(unwanted & loaded)


_ONE_FILE = """
import os
import chakra.cli.trace_link as t, chakra.cli.converter as c, chakra.pipeline.link
import chakra.convert.driver, chakra.replay.written, chakra.io.forkmap as f
t.build_parser().parse_args(["--chakra-host-trace", "h.json", "--chakra-device-trace", "k.json",
                             "--output-file", "o.json"])
c.build_parser().parse_args(["PyTorch", "--input", "x.json", "--output", "x.et"])
os.environ["CHAKRA_PARTS"] = "2"
assert f.fork_map(lambda r: (os.getpid(), list(r)), [range(0, 2), range(2, 4)], "test")[1][1] == [2, 3]
"""


def test_a_command_of_one_file_imports_no_shutil_tempfile_or_pathlib() -> None:
    # each costs every process a few ms (shutil brings bz2, lzma, fnmatch): argparse's help formatter, made
    # for every option, asks shutil for the terminal's width; forkmap's files have no name (O_TMPFILE)
    loaded = _loaded_after(_ONE_FILE)
    assert "chakra.convert.driver" in loaded
    assert not {"shutil", "tempfile", "pathlib"} & loaded, sorted({"shutil", "tempfile", "pathlib"} & loaded)


@pytest.mark.parametrize("columns", [None, "60", "0", "wide"])
def test_the_help_width_is_shutils(columns: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from chakra.cli.common import _columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _columns() == shutil.get_terminal_size().columns


def test_help_of_a_command_imports_no_stage() -> None:
    loaded = _loaded_after("import chakra.cli.main, chakra.cli.trace_link, chakra.cli.converter, "
                           "chakra.cli.replay")
    assert not {m for m in loaded if m.startswith(("chakra.link", "chakra.convert", "chakra.replay",
                                                   "chakra.host", "chakra.device", "google.protobuf"))}


@pytest.mark.parametrize("package", ["chakra.pipeline", "chakra.replay"])
def test_lazy_namespaces_give_every_listed_name(package: str) -> None:
    pkg = importlib.import_module(package)
    assert sorted(pkg.__all__) == sorted(pkg._MODULE_OF)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        assert value is getattr(importlib.import_module(pkg._MODULE_OF[name]), name)
    with pytest.raises(AttributeError):
        pkg.no_such_name  # noqa: B018
    assert set(pkg.__all__) <= set(dir(pkg))
