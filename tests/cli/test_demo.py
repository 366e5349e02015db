"""``chakra demo``: the README's first command, on the bundled 2-rank gloo trace."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import chakra.pipeline
from chakra.cli import demo as demo_cli
from chakra.cli import main as chakra_main
from chakra.errors import UsageError
from chakra.io import load_json
from chakra.pipeline import demo_command

REPO = Path(__file__).resolve().parents[2]

# gloo_mlp_2r: ProfilerStep#2 + ProfilerStep#3 durations per rank (raw Kineto files, stdlib json)
MEASURED = [7556.621 + 6184.404, 3242.476 + 7413.507]


def rank_line(out: str, rank: int) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(f"│    {rank} │"))


def test_bundled_data_is_found_from_the_package() -> None:
    # through importlib.resources, inside the package: what a wheel installs (not the source tree's tests/)
    folder = chakra.pipeline.bundled_data_dir()
    assert folder == REPO / "src" / "chakra" / "data"
    names = sorted(p.name for p in (folder / "gloo_mlp_2r").iterdir())
    assert names == ["host_et_0.json.gz", "host_et_1.json.gz", "kineto_0.json.gz", "kineto_1.json.gz"]
    # one copy: the tests' gloo_mlp_2r is a link to the packaged one
    assert (REPO / "tests" / "data" / "gloo_mlp_2r").resolve() == folder / "gloo_mlp_2r"


def test_package_data_ships_the_demo_trace() -> None:
    """setuptools' package-data of pyproject.toml takes the demo's files into the wheel."""
    import fnmatch
    import re

    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    patterns = re.findall(r'"([^"]+)"', re.search(r"^chakra\s*=\s*\[(.*?)\]", section, re.M | re.S).group(1))
    pkg = REPO / "src" / "chakra"
    demo = [p.relative_to(pkg).as_posix() for p in (pkg / "data" / "gloo_mlp_2r").iterdir()]
    assert len(demo) == 4
    for rel in demo:
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), rel


@pytest.mark.slow
def test_wheel_holds_the_demo_trace(tmp_path: Path) -> None:
    """A real wheel, built by pip from a copy of the sources (slow; skipped when pip cannot build here)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("setuptools")
    src = tmp_path / "src_tree"        # a copy: setuptools leaves build/ and egg-info beside the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path), str(src)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"pip wheel failed here: {r.stderr.strip()[-300:]}")
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n for n in names if "/data/" in n) == [f"chakra/data/gloo_mlp_2r/{k}_{r}.json.gz"
                                                         for k in ("host_et", "kineto") for r in (0, 1)]


def test_demo_table_and_files(tmp_path: Path) -> None:
    out_dir = tmp_path / "demo"
    stream = io.StringIO()
    assert demo_command(str(out_dir), stream=stream) == 0
    out = stream.getvalue()
    folder = REPO / "src" / "chakra" / "data" / "gloo_mlp_2r"
    assert out.startswith(f"chakra demo: link -> convert -> replay every rank of {folder}\n")
    s = load_json(out_dir / "summary.json")
    assert s["job"] == "gloo_mlp_2r" and s["num_ranks"] == 2
    for r in (0, 1):
        row = s["ranks"][r]
        assert row["measured_us"] == pytest.approx(MEASURED[r], abs=0.1)
        assert abs(row["error_pct"]) <= 5.0
        line = rank_line(out, r)
        assert f"{row['measured_us']:,.1f}" in line and f"{row['replayed_us']:,.1f}" in line
        assert f"{row['error_pct']:+.2f}%" in line
        for name in (f"et_plus_{r}.json", f"gloo_mlp_2r.{r}.et", f"replay_{r}.log"):
            assert (out_dir / name).is_file()
    assert (out_dir / "timeline.json").is_file() and (out_dir / "summary.md").is_file()
    assert f"Outputs in {out_dir}/:" in out
    assert "timeline.json" in out and "summary.md" in out and "gloo_mlp_2r.N.et" in out


def test_demo_through_the_umbrella_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert chakra_main.main(["demo", "--output-dir", str(tmp_path), "--jobs", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "measured (µs)" in out and "replayed (µs)" in out
    assert rank_line(out, 1)
    assert (tmp_path / "gloo_mlp_2r.1.et").is_file()


def test_demo_default_output_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert demo_cli.main(["--jobs", "1"]) == 0
    assert (tmp_path / "chakra_demo_out" / "summary.json").is_file()
    assert "Outputs in chakra_demo_out/:" in capsys.readouterr().out


def test_demo_without_the_source_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "site-packages" / "data"
    monkeypatch.setattr(chakra.pipeline.commands, "bundled_data_dir", lambda: missing)
    with pytest.raises(UsageError, match="missing from this installation.*--input FOLDER"):
        demo_command(str(tmp_path / "o"), stream=io.StringIO())
    assert demo_cli.main(["--output-dir", str(tmp_path / "o")]) == 2
    assert "--input FOLDER" in capsys.readouterr().err
    # another folder with --input
    assert demo_cli.main(["--output-dir", str(tmp_path / "o"), "--input",
                          str(REPO / "tests" / "data" / "gloo_collectives_2r"), "--job"]) == 0
    assert load_json(tmp_path / "o" / "summary.json")["replay"] == "whole_job"
