"""ci_tools/integration_tests.py and chakra.pipeline.harness."""

from __future__ import annotations

import importlib.util
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from chakra.errors import TraceFormatError, UsageError
from chakra.io.ranks import find_ranks
from chakra.pipeline import harness
from chakra.pipeline.harness import (
    RankOutcome,
    archive_folder_name,
    extract_job,
    run_integration,
)
from chakra.replay import read_completion_time

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci_tools" / "integration_tests.py"


def load_script():
    spec = importlib.util.spec_from_file_location("integration_tests", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_tgz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_folder_name():
    assert archive_folder_name(Path("/a/gloo_mlp_2r.tgz")) == "gloo_mlp_2r"
    assert archive_folder_name(Path("x.tar.gz")) == "x"


def test_extract_refuses_paths_escaping_the_target(tmp_path):
    tgz = make_tgz(tmp_path / "evil.tgz", {"evil/ok.txt": b"1", "evil/../../escaped.txt": b"2"})
    target = tmp_path / "t"
    target.mkdir()
    with pytest.raises(TraceFormatError, match=r"'evil/\.\./\.\./escaped\.txt' would be written outside"):
        extract_job(tgz, target)
    assert not (tmp_path / "escaped.txt").exists()
    assert not (target / "evil").exists()  # nothing is extracted when one member is bad


def test_extract_refuses_symlinks_out(tmp_path):
    tgz = tmp_path / "link.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        info = tarfile.TarInfo("link/passwd")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(TraceFormatError, match="links outside"):
        extract_job(tgz, tmp_path)
    assert not (tmp_path / "link").exists()


def test_find_ranks_accepts_both_namings(tmp_path):
    (tmp_path / "chakra_host_et_0.json").write_text("{}")
    (tmp_path / "kineto_0.json").write_text("{}")
    (tmp_path / "host_et_1.json.gz").write_text("{}")
    (tmp_path / "kineto_1.json.gz").write_text("{}")
    assert find_ranks(tmp_path, [0, 1]) == [
        (0, tmp_path / "chakra_host_et_0.json", tmp_path / "kineto_0.json"),
        (1, tmp_path / "host_et_1.json.gz", tmp_path / "kineto_1.json.gz")]
    with pytest.raises(TraceFormatError, match="no host ET for rank 2"):
        find_ranks(tmp_path, [2])


def fake_pipeline(monkeypatch, times_us, measured=None):
    """Replace link+convert+replay by canned completion logs (the validation logic is what is tested)."""

    def fake(rank, host, kineto, workdir, mode="lanes", gaps=True):
        log = Path(workdir) / f"replay_{rank}.log"
        log.write_text(f"[rank {rank}] Node ID 1 completed at 5us\n"
                       f"[rank {rank}] Node ID 2 completed at {times_us[rank]}us\n")
        return RankOutcome(rank, host, kineto, "", "", str(log), read_completion_time(log),
                           measured[rank] if measured else None, 2)

    monkeypatch.setattr(harness, "process_rank", fake)


def two_rank_archive(tmp_path, naming="chakra_host_et_{n}.json"):
    files = {}
    for r in range(2):
        files[f"data/{naming.format(n=r)}"] = b"{}"
        files[f"data/kineto_{r}.json"] = b"{}"
    return make_tgz(tmp_path / "data.tgz", files)


def test_validation_lines_and_exit_code(tmp_path, monkeypatch):
    tgz = two_rank_archive(tmp_path)
    fake_pipeline(monkeypatch, [1000, 2100])
    out = io.StringIO()
    rc = run_integration(tgz, 2, 0.05, [1.0, 2.0], workers=1, out=out)
    lines = out.getvalue().splitlines()
    log0, log1 = tmp_path / "data" / "replay_0.log", tmp_path / "data" / "replay_1.log"
    # the words scripts look for, then the expected value and the range it was checked against
    assert lines[0] == (f"Validation successful for {log0}: 1000us is within the acceptable range. "
                        "(expected 1000us +/- 5.0%: 950-1050us; +0.00%)")
    # 2100 vs 2000 is +5.00%: inside a 5% tolerance (bounds inclusive)
    assert lines[1] == (f"Validation successful for {log1}: 2100us is within the acceptable range. "
                        "(expected 2000us +/- 5.0%: 1900-2100us; +5.00%)")
    assert rc == 0
    out = io.StringIO()
    rc = run_integration(tgz, 2, 0.04, [1.0, 2.0], workers=1, out=out)
    assert rc == 1
    assert out.getvalue().splitlines()[1].startswith(
        f"Validation failed for {log1}: 2100us is not within 4.0% of the expected 2000us (+5.00%")


def test_against_measured(tmp_path, monkeypatch):
    tgz = two_rank_archive(tmp_path, naming="host_et_{n}.json.gz")
    fake_pipeline(monkeypatch, [1000, 1300], measured=[990.0, 1000.0])
    out = io.StringIO()
    rc = run_integration(tgz, 2, 0.05, None, against_measured=True, workers=1, out=out)
    lines = out.getvalue().splitlines()
    # against its own measured 990us: +1.01%
    assert lines[0].endswith("1000us is within the acceptable range. "
                             "(expected 990us +/- 5.0%: 940-1040us; +1.01%)")
    assert "1300us is not within 5.0% of the expected 1000us (+30.00%" in lines[1]
    assert rc == 1


def test_usage_errors(tmp_path):
    tgz = two_rank_archive(tmp_path)
    with pytest.raises(UsageError, match="3 values for 2 ranks"):
        run_integration(tgz, 2, 0.05, [1, 2, 3])
    with pytest.raises(UsageError, match="--against-measured"):
        run_integration(tgz, 2, 0.05, None)
    with pytest.raises(TraceFormatError, match="archive not found"):
        run_integration(tmp_path / "nope.tgz", 2, 0.05, [1, 2])


def test_extract_dir_keeps_the_archive_folder_clean(tmp_path, monkeypatch):
    tgz = two_rank_archive(tmp_path)
    fake_pipeline(monkeypatch, [1000, 2000])
    out = io.StringIO()
    assert run_integration(tgz, 2, 0.05, [1, 2], workers=1, extract_dir=tmp_path / "work", out=out) == 0
    assert not (tmp_path / "data").exists()
    assert (tmp_path / "work" / "data" / "replay_1.log").is_file()
    assert str(tmp_path / "work" / "data" / "replay_0.log") in out.getvalue()


def test_script_command_line(tmp_path, monkeypatch, capsys):
    tgz = two_rank_archive(tmp_path)
    fake_pipeline(monkeypatch, [1000, 2000])
    mod = load_script()
    rc = mod.main(["--tgz_path", str(tgz), "--num_ranks", "2", "--tolerance", "0.05",
                   "--expected_times_ms", "1", "2", "--workers", "1"])
    assert rc == 0
    assert capsys.readouterr().out.count("Validation successful for ") == 2
    rc = mod.main(["--tgz_path", str(tgz), "--num_ranks", "2", "--tolerance", "0.05", "--expected_times_ms",
                   "1", "2", "3"])
    assert rc == 2
    assert "3 values for 2 ranks" in capsys.readouterr().err
    # --jobs is the name other commands use; --workers stays for the scripts that have it
    rc = mod.main(["--tgz-path", str(tgz), "--num-ranks", "2", "--expected-times-ms", "1", "2",
                   "--jobs", "1"])
    assert rc == 0


def test_installed_command_and_umbrella(tmp_path, monkeypatch, capsys):
    from chakra.cli import harness as harness_cli
    from chakra.cli import main as umbrella

    tgz = two_rank_archive(tmp_path)
    fake_pipeline(monkeypatch, [1000, 2000])
    assert harness_cli.main(["--tgz_path", str(tgz), "--num_ranks", "2", "--expected_times_ms", "1", "2",
                             "-j", "1"]) == 0
    assert capsys.readouterr().out.count("Validation successful for ") == 2
    assert umbrella.main(["harness", "--tgz_path", str(tgz), "--num_ranks", "3",
                          "--expected_times_ms", "1"]) == 2
    assert capsys.readouterr().err.startswith("chakra harness: error: ")
    text = (REPO / "pyproject.toml").read_text()
    assert 'chakra_integration_tests = "chakra.cli.harness:console"' in text and callable(harness_cli.console)


def four_rank_archive(tmp_path, prefix="data/"):
    files = {}
    for r in range(4):
        files[f"{prefix}chakra_host_et_{r}.json"] = b"{}"
        files[f"{prefix}kineto_{r}.json"] = b"{}"
    return make_tgz(tmp_path / "data.tgz", files)


def test_num_ranks_below_the_archive_is_refused_and_cleaned_up(tmp_path, monkeypatch):
    tgz = four_rank_archive(tmp_path)
    fake_pipeline(monkeypatch, [1000] * 4)
    with pytest.raises(UsageError, match=r"--num_ranks 2, but the archive holds 4 ranks \(also ranks 2, 3\)"):
        run_integration(tgz, 2, 0.05, [1.0], workers=1, out=io.StringIO())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.tgz"]     # nothing extracted is left
    # more ranks than the archive has
    with pytest.raises(UsageError, match=r"--num_ranks 5, but the archive holds 4 ranks \(0\.\.3\)"):
        run_integration(tgz, 5, 0.05, [1.0], workers=1, out=io.StringIO())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.tgz"]
    assert run_integration(tgz, 4, 0.05, [1.0], workers=1, out=io.StringIO()) == 0


def test_flat_archive_is_extracted_into_its_own_folder(tmp_path, monkeypatch):
    tgz = four_rank_archive(tmp_path, prefix="")
    fake_pipeline(monkeypatch, [1000] * 4)
    out = io.StringIO()
    assert run_integration(tgz, 4, 0.05, [1.0], workers=1, out=out) == 0
    # the 8 files went into data/, not beside the archive
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "data.tgz"]
    assert len(list((tmp_path / "data").glob("*.json"))) == 8
    assert str(tmp_path / "data" / "replay_3.log") in out.getvalue()


def test_archive_layouts(tmp_path, monkeypatch, caplog):
    fake_pipeline(monkeypatch, [1000, 2000])
    # one folder of another name: used, with a warning
    tgz = make_tgz(tmp_path / "data.tgz", {"other/chakra_host_et_0.json": b"{}",
                                           "other/kineto_0.json": b"{}"})
    assert run_integration(tgz, 1, 0.05, [1.0], workers=1, out=io.StringIO()) == 0
    assert "the archive's folder is other/, not data/" in caplog.text
    # the job's folder beside other entries: only the folder is extracted
    (tmp_path / "x").mkdir()
    tgz = make_tgz(tmp_path / "x" / "data.tgz", {"data/chakra_host_et_0.json": b"{}",
                                                 "data/kineto_0.json": b"{}", "README": b"hi"})
    assert run_integration(tgz, 1, 0.05, [1.0], workers=1, out=io.StringIO()) == 0
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["data", "data.tgz"]
    # two folders, none named like the archive: refused before anything is written
    (tmp_path / "y").mkdir()
    tgz = make_tgz(tmp_path / "y" / "data.tgz", {"a/chakra_host_et_0.json": b"{}", "b/kineto_0.json": b"{}"})
    with pytest.raises(TraceFormatError, match=r"no folder data/ .*top-level entries: a, b"):
        run_integration(tgz, 1, 0.05, [1.0], workers=1, out=io.StringIO())
    assert sorted(p.name for p in (tmp_path / "y").iterdir()) == ["data.tgz"]


def _pipeline_available() -> bool:
    try:
        from chakra.convert import convert_file  # noqa: F401
        from chakra.link.api import link_files  # noqa: F401
    except ImportError:
        return False
    return True


needs_pipeline = pytest.mark.skipif(
    not _pipeline_available(), reason="chakra.link.link_files / chakra.convert.convert_file not built yet")


@needs_pipeline
@pytest.mark.parametrize(("name", "job"), [("gloo_collectives_2r", False), ("gloo_mlp_2r", False),
                                           ("gloo_collectives_2r", True)])
def test_harness_on_project_archives_against_measured(tmp_path, data_dir, name, job):
    tgz = shutil.copy(data_dir / f"{name}.tgz", tmp_path / f"{name}.tgz")
    out = io.StringIO()
    rc = run_integration(tgz, 2, 0.05, None, against_measured=True, workers=2, job=job, out=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert rc == 0, lines
    for r, line in enumerate(lines):
        assert line.startswith(f"Validation successful for {tmp_path / name / f'replay_{r}.log'}: ")
        assert (tmp_path / name / f"chakra.{r}.et").is_file()
