"""``chakra_trace_link`` / ``chakra link``: both command-line generations, batch mode, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.traces import sync_case, write

from chakra.cli import main as umbrella
from chakra.cli import trace_link
from chakra.io import load_json


@pytest.mark.corpus
def test_2023_form_with_rank(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the Kineto trace says distributedInfo.rank 0: a contradicting --rank 5 is reported and not used
    out = tmp_path / "et_plus.json"
    rc = trace_link.main(
        [
            "--chakra-host-trace",
            str(corpus / "simple_add_1r/host_et_0.json.gz"),
            "--chakra-device-trace",
            str(corpus / "simple_add_1r/kineto_0.json.gz"),
            "--rank",
            "5",
            "--output-file",
            str(out),
            "--log-level",
            "WARNING",
        ]
    )
    assert rc == 0
    doc = load_json(out)
    assert doc["rank"] == 0 and doc["link_stats"]["gpu_attached"] == 4
    assert "--rank 5 disagrees with Kineto distributedInfo.rank 0: writing rank 0" in capsys.readouterr().err


@pytest.mark.corpus
def test_2024_form_and_umbrella(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "et_plus.json.gz"
    rc = umbrella.main(
        [
            "link",
            "--pytorch-et-file",
            str(corpus / "cpu_gloo/single_1r/host_et_0.json.gz"),
            "--kineto-file",
            str(corpus / "cpu_gloo/single_1r/kineto_0.json.gz"),
            "--output-file",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    doc = load_json(out)
    assert doc["link_stats"]["matched"] == 256 and doc["rank"] is None  # no distributedInfo in that trace


@pytest.mark.corpus
def test_batch(corpus: Path, tmp_path: Path) -> None:
    rc = trace_link.main(
        [
            "--batch",
            str(corpus / "cpu_gloo/tp_like_2r"),
            "--output-dir",
            str(tmp_path),
            "--jobs",
            "2",
            "--quiet",
        ]
    )
    assert rc == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["et_plus_0.json.gz", "et_plus_1.json.gz"]
    assert load_json(tmp_path / "et_plus_1.json.gz")["rank"] == 1


def test_missing_input_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = trace_link.main(
        [
            "--pytorch-et-file",
            str(tmp_path / "nope.json"),
            "--kineto-file",
            str(tmp_path / "nope2.json"),
            "--output-file",
            str(tmp_path / "o.json"),
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chakra_trace_link: error: {tmp_path / 'nope.json'}: file not found"]


def test_corrupt_input_exit_1_and_no_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host, kin = sync_case()
    hp, kp = write(tmp_path, host, kin)
    kp.write_text(json.dumps(kin)[:50])
    out = tmp_path / "o.json"
    rc = trace_link.main(["--pytorch-et-file", str(hp), "--kineto-file", str(kp), "--output-file", str(out)])
    assert rc == 1
    assert "kineto_0.json" in capsys.readouterr().err
    assert not out.exists()


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert trace_link.main(["--pytorch-et-file", "a.json"]) == 2  # no Kineto, no output
    assert trace_link.main(["--batch", str(tmp_path), "-o", "x.json"]) == 2
    assert "give their folder with --output-dir, not -o/--output-file" in capsys.readouterr().err
    assert trace_link.main(["--batch", str(tmp_path)]) == 2  # no pairs in an empty folder
    with pytest.raises(SystemExit) as exc:
        trace_link.main(["--rank", "not-a-number"])
    assert exc.value.code == 2
