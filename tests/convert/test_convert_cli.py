"""chakra_converter's two command-line generations and ``chakra convert``."""

from __future__ import annotations

import orjson
import pytest
from helpers.et_checks import check_et
from helpers.etplus import gloo_etplus, small_etplus

from chakra.cli.converter import main as converter_main
from chakra.cli.main import main as chakra_main


@pytest.fixture()
def etplus(tmp_path):
    p = tmp_path / "et_plus_3.json"
    p.write_bytes(orjson.dumps(small_etplus()))
    return p


def test_2023_form_with_simulate_writes_completion_lines_to_the_log(etplus, tmp_path):
    pytest.importorskip("chakra.replay")
    out, log = tmp_path / "o.3.et", tmp_path / "conv.log"
    rc = converter_main(["--log-filename", str(log), "PyTorch", "--input", str(etplus), "--output", str(out),
                         "--simulate", "-q"])
    assert rc == 0
    meta, nodes = check_et(out)
    assert len(nodes) == 10 and meta["rank"].value == 3
    lines = [x for x in log.read_text().splitlines() if "Node ID" in x]
    assert len(lines) == 10
    # the last node to finish is the NCCL kernel: starts after its launcher, runs 100 µs
    assert "Node ID 22 completed at" in lines[-1]


def test_2024_form(etplus, tmp_path):
    out, log = tmp_path / "o.et", tmp_path / "l.log"
    rc = converter_main(["--input_filename", str(etplus), "--output_filename", str(out), "--input_type",
                         "PyTorch", "--log_filename", str(log)])
    assert rc == 0
    _, nodes = check_et(out)
    assert len(nodes) == 10
    assert "wrote" in log.read_text()


def test_umbrella_convert(tmp_path):
    src = tmp_path / "g.json"
    src.write_bytes(orjson.dumps(gloo_etplus()))
    out = tmp_path / "g.1.et"
    assert chakra_main(["convert", "--input", str(src), "--output", str(out), "-q"]) == 0
    _, nodes = check_et(out)
    assert sum(n.type == 7 for n in nodes) == 1


def test_usage_errors(etplus, tmp_path, capsys):
    assert converter_main(["Caffe", "--input", str(etplus), "--output", str(tmp_path / "x")]) == 2
    assert "unsupported input type 'Caffe'" in capsys.readouterr().err
    assert converter_main(["PyTorch", "--input", str(etplus)]) == 2
    assert not (tmp_path / "x").exists()


def test_bad_data_exit_1_without_output(tmp_path, capsys):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    out = tmp_path / "o.et"
    assert converter_main(["--input", str(bad), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "bad.json.gz" in err and "Traceback" not in err
    assert not out.exists()


def test_simulate_of_a_trace_without_nodes_says_so_naming_the_input(tmp_path, capsys):
    src = tmp_path / "empty.json"
    src.write_text('{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": []}')
    out = tmp_path / "e.0.et"
    assert converter_main(["PyTorch", "--input", str(src), "--output", str(out), "--simulate", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"chakra_converter: error: {src}: no nodes: nothing to replay (--simulate; {out} was "
                       "written, without nodes)")
    assert converter_main(["PyTorch", "--input", str(src), "--output", str(out), "-q"]) == 0   # (no replay)


def test_a_log_file_that_cannot_be_written_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "empty.json"
    src.write_text('{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": []}')
    log = tmp_path / "no_such_folder" / "conv.log"
    out = tmp_path / "e.0.et"
    args = ["--log-filename", str(log), "PyTorch", "--input", str(src), "--output", str(out)]
    assert converter_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"chakra_converter: error: --log-filename {log}: cannot write it "
                   "(No such file or directory)")
    assert not out.exists()


def test_a_missing_output_folder_is_refused_before_the_conversion(tmp_path, capsys, monkeypatch):
    import chakra.convert as convert_pkg
    from chakra.cli import converter

    def must_not_run(*args, **kwargs):
        raise AssertionError("converted before checking the output folder")

    monkeypatch.setattr(convert_pkg, "convert_file", must_not_run)
    src = tmp_path / "in.json"
    src.write_text("{}")
    assert converter.main(["-i", str(src), "-o", str(tmp_path / "nodir" / "x.et")]) == 2
    err = capsys.readouterr().err
    assert f"output directory {tmp_path / 'nodir'} does not exist" in err
    text = ["Text", "-i", str(src), "-o", str(tmp_path / "nodir" / "P"), "--num-npus", "2"]
    assert converter.main(text) == 2
    assert f"output directory {tmp_path / 'nodir'} does not exist" in capsys.readouterr().err
