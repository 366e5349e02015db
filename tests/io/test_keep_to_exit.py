"""What a stage drops at its end: freed, or kept to the end of a command's process (``chakra.io.gcpause``)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from chakra.cli import converter, trace_link
from chakra.convert import convert_file
from chakra.io.gcpause import keep_to_exit, release
from chakra.link.api import NodeRanges, link_files


class _Thing:
    """Something a weak reference can watch."""


@pytest.fixture
def keeping() -> Iterator[None]:
    keep_to_exit()
    try:
        yield
    finally:
        keep_to_exit(False)


def test_release_frees_unless_kept() -> None:
    thing = _Thing()
    watch = weakref.ref(thing)
    release(thing)
    del thing
    assert watch() is None                 # a library call: freed as the caller drops it
    keep_to_exit()
    try:
        thing = _Thing()
        watch = weakref.ref(thing)
        release(thing)
        del thing
        assert watch() is not None         # a command's process: kept
        keep_to_exit()                     # (asked twice: still kept)
        assert watch() is not None
    finally:
        kept = keep_to_exit(False)
    assert kept == [watch()]
    del kept
    assert watch() is None                 # handed back, then freed


def _gloo(corpus: Path) -> tuple[Path, Path]:
    d = corpus / "cpu_gloo" / "single_1r"
    return d / "host_et_0.json.gz", d / "kineto_0.json.gz"


def test_link_files_releases_its_traces(corpus: Path, tmp_path: Path, keeping: None) -> None:
    host, kineto = _gloo(corpus)
    out = tmp_path / "et_plus.json"
    link_files(host, kineto, out)
    kept = keep_to_exit(False)
    nodes = orjson.loads(out.read_bytes())["nodes"]
    gpu = sum(1 for n in nodes if n.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert len(kept) == 1 and isinstance(kept[0], NodeRanges)
    assert (kept[0].hosts, kept[0].gpus) == (len(nodes) - gpu, gpu)


def test_convert_file_releases_its_plan_without_simulate(corpus: Path, tmp_path: Path, keeping: None) -> None:
    from chakra.replay.reader import ReadAsWritten

    host, kineto = _gloo(corpus)
    link_files(host, kineto, tmp_path / "et_plus.json")
    keep_to_exit(False)
    keep_to_exit()
    convert_file(tmp_path / "et_plus.json", tmp_path / "a.0.et")
    assert len(keep_to_exit(False)) == 1          # the writer (the plan it holds)
    keep_to_exit()
    convert_file(tmp_path / "et_plus.json", tmp_path / "b.0.et", reader=ReadAsWritten())
    assert keep_to_exit(False) == []              # freed before the replay that follows
    assert (tmp_path / "a.0.et").read_bytes() == (tmp_path / "b.0.et").read_bytes()


def test_commands_keep_only_in_their_own_process(corpus: Path, tmp_path: Path) -> None:
    """``main`` called in a process of its own (a test, a script) frees as usual."""
    host, kineto = _gloo(corpus)
    etplus = tmp_path / "et_plus.json"
    assert trace_link.main(["--chakra-host-trace", str(host), "--chakra-device-trace", str(kineto),
                            "--output-file", str(etplus), "-q"]) == 0
    assert converter.main(["PyTorch", "--input", str(etplus), "--output", str(tmp_path / "t.0.et")]) == 0
    assert keep_to_exit(False) == []
