"""A file of another kind than the command reads (a .et to the linker, a host ET to the replay, ...) gets
one line that says what the file looks like and which command reads it; the jsonizer refuses an output name
of the other direction."""

from __future__ import annotations

import gzip

import pytest
from helpers import fault_inputs as F

from chakra.cli import converter as convert
from chakra.cli import jsonizer, replay, trace_link, validate
from chakra.io.sniff import file_kind


@pytest.fixture
def files(tmp_path, data_dir):
    et = tmp_path / "job.0.et"
    et.write_bytes(F.valid_et())
    gz = tmp_path / "job.1.et.gz"
    gz.write_bytes(gzip.compress(F.valid_et()))
    return {"et": et, "et_gz": gz, "host": data_dir / "gloo_mlp_2r" / "host_et_0.json.gz",
            "kineto": data_dir / "gloo_mlp_2r" / "kineto_0.json.gz", "dir": tmp_path}


def test_file_kinds(files, tmp_path):
    assert file_kind(files["et"]) == "chakra" and file_kind(files["et_gz"]) == "chakra"
    assert file_kind(files["host"]) == "host" and file_kind(files["kineto"]) == "kineto"
    (tmp_path / "x.json").write_bytes(b'  {"a": 1}')
    (tmp_path / "y.bin").write_bytes(b"\x00\x01garbage")
    assert file_kind(tmp_path / "x.json") == "json" and file_kind(tmp_path / "y.bin") is None
    assert file_kind(tmp_path / "missing") is None


def _error(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(lines) == 1
    return lines[0]


def test_a_chakra_et_given_to_the_linker_or_the_converter(files, capsys):
    out = files["dir"] / "out.json"
    assert trace_link.main(["--chakra-host-trace", str(files["et"]), "--chakra-device-trace",
                            str(files["kineto"]), "--output-file", str(out)]) == 1
    line = _error(capsys)
    assert "job.0.et: not valid JSON" in line and "it looks like a Chakra protobuf ET (chakra replay" in line
    assert convert.main(["-i", str(files["et_gz"]), "-o", str(files["dir"] / "o.et")]) == 1
    assert "job.1.et.gz: not valid JSON" in (line := _error(capsys)) and "a Chakra protobuf ET" in line
    assert not out.exists() and not (files["dir"] / "o.et").exists()


@pytest.mark.parametrize(("kind", "advice"), [("host", "convert it to a Chakra ET first (chakra convert)"),
                                              ("kineto", "link it with its host ET first (chakra link)")])
def test_json_given_to_the_replay_or_validate(files, capsys, kind, advice):
    assert replay.main([str(files[kind])]) == 1
    line = _error(capsys)
    assert "is not a valid protobuf" in line and advice in line
    assert validate.main([str(files[kind])]) == 1
    assert advice in _error(capsys)


def test_a_damaged_et_gets_no_hint(files, capsys):
    bad = files["dir"] / "bad.0.et"
    bad.write_bytes(F.valid_et()[:-3])
    assert replay.main([str(bad)]) == 1
    assert "looks like" not in _error(capsys)


def test_jsonizer_output_names_and_host_ets(files, capsys):
    d = files["dir"]
    assert jsonizer.main(["-i", str(files["et"]), "-o", str(d / "x.et")]) == 2
    assert "x.et: the output is JSON (the input is a protobuf ET)" in _error(capsys)
    assert jsonizer.main(["-i", str(files["et"]), "-o", str(d / "x.json")]) == 0
    assert jsonizer.main(["-i", str(d / "x.json"), "-o", str(d / "y.json")]) == 2
    assert "y.json: the output is a protobuf ET (the input is JSON)" in _error(capsys)
    assert not (d / "x.et").exists() and not (d / "y.json").exists()
    assert jsonizer.main(["-i", str(files["host"]), "-o", str(d / "h.et")]) == 1
    assert "host_et_0.json.gz: a PyTorch host ET or ET+, not a Chakra ET written as JSON" in _error(capsys)


def test_a_log_file_named_like_an_input_or_unwritable_is_a_usage_error(files, capsys):
    et = files["et"]
    before = et.read_bytes()
    assert replay.main([str(et), "--log-filename", str(et)]) == 2     # it emptied the input, then failed
    assert "is a trace, not a log" in _error(capsys) and et.read_bytes() == before
    assert convert.main(["-i", str(files["host"]), "-o", str(files["dir"] / "o.et"), "--log-filename",
                         str(files["et_gz"])]) == 2
    assert "is a trace, not a log" in _error(capsys)
    assert validate.main([str(et), "--log-filename", str(files["dir"] / "no" / "x.log")]) == 2
    assert "cannot write it (No such file or directory)" in _error(capsys)


def test_the_same_log_file_twice_is_written_anew(files):
    # the log opens with "[2026-12-03 23:25:57,040] INFO ...": a "[" that opens no JSON, so it is a log, and
    # the same command run again rewrites it (it was refused as "a trace, not a log", exit 2)
    log, out = files["dir"] / "convert.log", files["dir"] / "o.et"
    for _ in range(2):
        assert convert.main(["-i", str(files["host"]), "-o", str(out), "--log-filename", str(log)]) == 0
        assert log.read_text().startswith("[") and file_kind(log) is None
    (files["dir"] / "r.log").write_text("[rank 0] Node ID 1 completed at 0us\n")
    assert file_kind(files["dir"] / "r.log") is None
    (files["dir"] / "a.json").write_text('[{"ph": "X"}]')
    assert file_kind(files["dir"] / "a.json") == "json"


def test_kineto_traces_that_open_with_metadata_are_recognised(corpus):
    # h100_owlv2_large holds 26 KB of "metadata" before its "traceEvents"
    for name in ("h100_owlv2_large", "mi300x_bert_small"):
        assert file_kind(corpus / "kineto_only" / f"{name}.json.gz") == "kineto"
