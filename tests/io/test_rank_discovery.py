"""How ``chakra pipeline`` / ``chakra_trace_link --batch`` find the files of each rank.

Built-in names (ours, PARAM's ``et_N`` and ``rank-N``), ``--host-pattern`` / ``--device-pattern`` with
``{rank}``, and folders of Kineto traces without host ETs (linked Kineto-only).  The files are empty
stand-ins except where the content decides (``rank-N``) or the pipeline runs (the bundled gloo trace,
copied under other names).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from chakra.cli import pipeline as pipeline_cli
from chakra.errors import TraceFormatError, UsageError
from chakra.io import load_json
from chakra.pipeline import RankFiles, RankNaming, find_ranks, run_pipeline
from chakra.pipeline.link import link_folder

DATA = Path(__file__).resolve().parents[1] / "data"
HOST = '{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": []}'
KINETO = '{"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}'


def put(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_param_names_and_rank_n_by_subfolder_or_content(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    put(tmp_path / "et_0.json")
    put(tmp_path / "kineto_0.json")
    put(tmp_path / "host_et_1.json")
    put(tmp_path / "et_1.json")                               # host_et_ is preferred over et_
    put(tmp_path / "rank-1.json", KINETO)                     # rank-N: a Kineto trace by its content
    put(tmp_path / "rank2.json", HOST)                        # rankN: a host ET by its content
    put(tmp_path / "rank_2.json.gz", KINETO)                  # not gzip at all: still read by content
    put(tmp_path / "host" / "rank-3.json")                    # the subfolder says which
    put(tmp_path / "device" / "rank-3.json")
    put(tmp_path / "rank-4.json", '{"neither": 1}')           # neither: skipped with a warning
    put(tmp_path / "et_plus_5.json", HOST)                    # our own output is not an input
    put(tmp_path / "pytorch_et_6.json")
    put(tmp_path / "kineto_trace_6.json.gz")
    with caplog.at_level(logging.WARNING):
        found = find_ranks(tmp_path)
    assert found == [
        RankFiles(0, tmp_path / "et_0.json", tmp_path / "kineto_0.json"),
        RankFiles(1, tmp_path / "host_et_1.json", tmp_path / "rank-1.json"),
        RankFiles(2, tmp_path / "rank2.json", tmp_path / "rank_2.json.gz"),
        RankFiles(3, tmp_path / "host" / "rank-3.json", tmp_path / "device" / "rank-3.json"),
        RankFiles(6, tmp_path / "pytorch_et_6.json", tmp_path / "kineto_trace_6.json.gz"),
    ]
    assert "rank-4.json: neither a host ET ('nodes') nor a Kineto trace ('traceEvents')" in caplog.text


def test_patterns_with_rank_and_wildcards(tmp_path: Path) -> None:
    put(tmp_path / "ranks" / "0" / "host_a.json")
    put(tmp_path / "ranks" / "1" / "host_b.json.gz")          # .json in the pattern also finds .json.gz
    put(tmp_path / "ranks" / "1" / "notes.txt")
    put(tmp_path / "traces" / "worker0_17.pt.trace.json")
    put(tmp_path / "traces" / "worker1_18.pt.trace.json")
    put(tmp_path / "traces" / "worker12.pt.trace.json")       # no "_" after the rank: not this pattern
    put(tmp_path / "kineto_0.json")                           # a built-in name: the pattern replaces them
    naming = RankNaming("ranks/{rank}/host_*.json", "traces/worker{rank}_*.pt.trace.json")
    assert find_ranks(tmp_path, naming=naming) == [
        RankFiles(0, tmp_path / "ranks/0/host_a.json", tmp_path / "traces/worker0_17.pt.trace.json"),
        RankFiles(1, tmp_path / "ranks/1/host_b.json.gz", tmp_path / "traces/worker1_18.pt.trace.json"),
    ]
    # one pattern, the other kind by the built-in names
    put(tmp_path / "host_et_0.json")
    assert find_ranks(tmp_path, naming=RankNaming(device_pattern="traces/worker{rank}_*.pt.trace.json")) == [
        RankFiles(0, tmp_path / "host_et_0.json", tmp_path / "traces/worker0_17.pt.trace.json")]


def test_pattern_errors(tmp_path: Path) -> None:
    put(tmp_path / "a0.json")
    put(tmp_path / "b0.json")
    with pytest.raises(UsageError, match=r"--host-pattern 'et\.json': put \{rank\} exactly once"):
        find_ranks(tmp_path, naming=RankNaming(host_pattern="et.json"))
    with pytest.raises(UsageError, match="give a path inside the folder"):
        find_ranks(tmp_path, naming=RankNaming(device_pattern="../k{rank}.json"))
    with pytest.raises(UsageError, match=r"matches two files of rank 0: (a0.json and b0|b0.json and a0)"):
        find_ranks(tmp_path, naming=RankNaming(device_pattern="*{rank}.json"))
    with pytest.raises(UsageError) as exc:
        find_ranks(tmp_path, naming=RankNaming(host_pattern="h{rank}.json", device_pattern="k{rank}.json"))
    assert ("looked for host ETs matching 'h{rank}.json'; Kineto traces matching 'k{rank}.json'"
            in str(exc.value))
    put(tmp_path / "h3.json")
    with pytest.raises(TraceFormatError, match=r"no Kineto trace for rank 3 \(looked for Kineto traces "
                                               r"matching 'k\{rank\}.json'\)"):
        find_ranks(tmp_path, [3], RankNaming(host_pattern="h{rank}.json", device_pattern="k{rank}.json"))


def test_kineto_only_folders(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    put(tmp_path / "kineto_0.json")
    put(tmp_path / "kineto_1.json.gz")
    with caplog.at_level(logging.INFO):
        found = find_ranks(tmp_path)
    # no host ET at all: every rank from its Kineto trace alone
    assert found == [RankFiles(0, None, tmp_path / "kineto_0.json"),
                     RankFiles(1, None, tmp_path / "kineto_1.json.gz")]
    assert "no host ET found" in caplog.text and "linking each rank's Kineto trace alone" in caplog.text
    assert find_ranks(tmp_path, [1]) == [RankFiles(1, None, tmp_path / "kineto_1.json.gz")]
    # with host ETs for some ranks, the others are skipped, and the warning names the option
    put(tmp_path / "host_et_0.json")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert find_ranks(tmp_path) == [RankFiles(0, tmp_path / "host_et_0.json", tmp_path / "kineto_0.json")]
    assert "rank 1 has only a Kineto file; skipped (--kineto-only links every rank's Kineto trace alone)" in (
        caplog.text)
    # --kineto-only: host ETs ignored
    assert find_ranks(tmp_path, naming=RankNaming(kineto_only=True)) == [
        RankFiles(0, None, tmp_path / "kineto_0.json"), RankFiles(1, None, tmp_path / "kineto_1.json.gz")]


def _renamed_gloo(tmp_path: Path) -> Path:
    """The bundled 2-rank gloo job under PARAM-style names: et_N.json.gz + rank-N.json.gz."""
    src = tmp_path / "job"
    src.mkdir()
    for r in (0, 1):
        shutil.copy(DATA / "gloo_mlp_2r" / f"host_et_{r}.json.gz", src / f"et_{r}.json.gz")
        shutil.copy(DATA / "gloo_mlp_2r" / f"kineto_{r}.json.gz", src / f"rank-{r}.json.gz")
    return src


def test_pipeline_on_param_names_and_kineto_only(tmp_path: Path) -> None:
    src = _renamed_gloo(tmp_path)
    res = run_pipeline(src, tmp_path / "out", jobs=1)
    rows = res.summary["ranks"]
    assert [(r["host_et"], r["kineto"], r["link_strategy"]) for r in rows] == [
        ("et_0.json.gz", "rank-0.json.gz", "rf_id"), ("et_1.json.gz", "rank-1.json.gz", "rf_id")]
    ko = run_pipeline(src, tmp_path / "ko", jobs=1, naming=RankNaming(kineto_only=True))
    rows_ko = ko.summary["ranks"]
    assert [(r["host_et"], r["kineto"], r["link_strategy"]) for r in rows_ko] == [
        (None, "rank-0.json.gz", "kineto_only"), (None, "rank-1.json.gz", "kineto_only")]
    for a, b in zip(rows, rows_ko):
        assert a["measured_us"] == b["measured_us"]
        assert abs(b["replayed_us"] - b["measured_us"]) <= 0.05 * b["measured_us"]
    etp = load_json(tmp_path / "ko" / "et_plus_0.json")
    assert etp["kineto_only"]["source"] == "Kineto trace only (no host ET)"


def test_cli_patterns_and_kineto_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "job"
    for r in (0, 1):
        dst = src / f"r{r}"
        dst.mkdir(parents=True)
        shutil.copy(DATA / "gloo_mlp_2r" / f"host_et_{r}.json.gz", dst / "trace.et.json.gz")
        shutil.copy(DATA / "gloo_mlp_2r" / f"kineto_{r}.json.gz", dst / "profile.pt.trace.json.gz")
    argv = [str(src), "--output-dir", str(tmp_path / "o"), "--jobs", "1",
            "--host-pattern", "r{rank}/trace.et.json", "--device_pattern", "r{rank}/profile.pt.trace.json"]
    assert pipeline_cli.main(argv) == 0
    assert load_json(tmp_path / "o" / "summary.json")["ranks"][1]["host_et"] == "r1/trace.et.json.gz"
    assert pipeline_cli.main([str(src), "--output-dir", str(tmp_path / "k"), "--jobs", "1", "--kineto-only",
                              "--device-pattern", "r{rank}/profile.pt.trace.json"]) == 0
    assert load_json(tmp_path / "k" / "summary.json")["ranks"][0]["link_strategy"] == "kineto_only"
    capsys.readouterr()
    assert pipeline_cli.main([str(src), "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no traces found; looked for" in err and "--host-pattern" in err
    assert "--host-pattern" in pipeline_cli.build_parser().format_help()


def test_link_batch_kineto_only(tmp_path: Path) -> None:
    src = _renamed_gloo(tmp_path)
    reports = link_folder(src, tmp_path / "o", jobs=1, quiet=True, kineto_only=True)
    assert [(r.rank, r.host_path, r.strategy) for r in reports] == [(0, None, "kineto_only"),
                                                                    (1, None, "kineto_only")]
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["et_plus_0.json.gz", "et_plus_1.json.gz"]


@pytest.mark.corpus
def test_pipeline_on_a_folder_of_kineto_traces(corpus: Path, tmp_path: Path) -> None:
    res = run_pipeline(corpus / "dlrm_8r_v100" / "device", tmp_path, jobs=1, name="dlrm")
    rows = res.summary["ranks"]
    assert [r["measured_us"] for r in rows] == [14455, 19901, 13017, 19313, 17979, 17797, 13091, 12509]
    assert all(r["host_et"] is None and r["link_strategy"] == "kineto_only" for r in rows)
    assert all(abs(r["error_pct"]) <= 5 for r in rows)


def test_harness_on_an_archive_of_kineto_traces(tmp_path: Path) -> None:
    import io
    import tarfile

    from chakra.pipeline.harness import run_integration

    tgz = tmp_path / "gloo_kineto_2r.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for r in (0, 1):
            tar.add(DATA / "gloo_mlp_2r" / f"kineto_{r}.json.gz", f"gloo_kineto_2r/kineto_{r}.json.gz")
    out = io.StringIO()
    assert run_integration(tgz, 2, 0.05, against_measured=True, workers=1, extract_dir=tmp_path / "x",
                           out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(ln.startswith("Validation successful for ") for ln in lines)
    etp = load_json(tmp_path / "x" / "gloo_kineto_2r" / "chakra_et_plus_1.json")
    assert etp["link_stats"]["strategy"] == "kineto_only"


def test_no_traces_found_says_what_was_found_and_what_is_missing(tmp_path: Path) -> None:
    # host ETs without their Kineto partners
    only_host = tmp_path / "only_host"
    only_host.mkdir()
    for r in (0, 1):
        shutil.copy(DATA / "gloo_mlp_2r" / f"host_et_{r}.json.gz", only_host)
    with pytest.raises(UsageError) as exc:
        find_ranks(only_host)
    assert ("Found host ETs of ranks 0, 1 (host_et_0.json.gz, host_et_1.json.gz) without Kineto partners: "
            "each rank needs its Kineto trace too") in str(exc.value)
    # a folder of jobs: the traces are one folder down
    jobs = tmp_path / "jobs"
    for name in ("gloo_mlp_2r", "gloo_skew_2r"):
        shutil.copytree(DATA / name, jobs / name)
    (jobs / "notes").mkdir()
    put(jobs / "notes" / "summary.json")
    with pytest.raises(UsageError) as exc:
        find_ranks(jobs)
    assert ("Found traces one folder down: gloo_mlp_2r/ (2 ranks), gloo_skew_2r/ (2 ranks): give one of "
            "those folders; JSON files of other names one folder down, in notes/.") in str(exc.value)
    # files whose names say no rank: what their content is
    unnamed = tmp_path / "unnamed"
    unnamed.mkdir()
    shutil.copy(DATA / "gloo_mlp_2r" / "host_et_0.json.gz", unnamed / "trace.json.gz")
    shutil.copy(DATA / "gloo_mlp_2r" / "kineto_0.json.gz", unnamed / "profile.pt.trace.json.gz")
    shutil.copy(DATA / "gloo_mlp_2r" / "kineto_1.json.gz", unnamed / "profile_b.json.gz")
    with pytest.raises(UsageError) as exc:
        find_ranks(unnamed)
    # the Kineto traces are ranked by their distributedInfo; the host ET is not linked away silently
    assert str(exc.value).endswith("unnamed: Kineto traces of ranks 0, 1 and host ETs whose names say no "
                                   "rank (trace.json.gz): name them host_et_N.json or give --host-pattern "
                                   "(or --kineto-only to link the Kineto traces alone)")
    (unnamed / "profile.pt.trace.json.gz").rename(unnamed / "profile.pt.trace.txt")
    (unnamed / "profile_b.json.gz").write_text('{"traceEvents": []}')      # no distributedInfo
    with pytest.raises(UsageError) as exc:
        find_ranks(unnamed)
    assert ("Found 2 JSON files whose names say no rank: profile_b.json.gz, trace.json.gz (by content: 1 "
            "host ET, 1 Kineto trace). Other names: --host-pattern / --device-pattern") in str(exc.value)


def kineto_of(rank: int | None) -> str:
    """A stand-in Kineto trace whose distributedInfo records ``rank`` (None: no distributedInfo)."""
    info = "" if rank is None else f'"distributedInfo": {{"rank": {rank}, "world_size": 2}}, '
    return '{"schemaVersion": 1, ' + info + '"traceEvents": []}'


def test_tensorboard_handler_names_are_ranked_by_distributed_info(tmp_path: Path) -> None:
    # torch.profiler.tensorboard_trace_handler writes WORKER.TIMESTAMP.pt.trace.json: no rank in the name;
    # the names sort the other way round from the ranks, so only the content can pair them right
    put(tmp_path / "host_et_0.json", HOST)
    put(tmp_path / "host_et_1.json", HOST)
    put(tmp_path / "node7_900.1733300000999.pt.trace.json", kineto_of(0))
    put(tmp_path / "node7_100.1733300000111.pt.trace.json", kineto_of(1))
    put(tmp_path / "timeline.json", kineto_of(None))          # a trace recording no rank: not an input
    assert find_ranks(tmp_path) == [
        RankFiles(0, tmp_path / "host_et_0.json", tmp_path / "node7_900.1733300000999.pt.trace.json"),
        RankFiles(1, tmp_path / "host_et_1.json", tmp_path / "node7_100.1733300000111.pt.trace.json"),
    ]


def test_unnamed_kineto_traces_a_name_wins_and_duplicates_are_refused(tmp_path: Path) -> None:
    put(tmp_path / "host_et_0.json", HOST)
    put(tmp_path / "host_et_1.json", HOST)
    put(tmp_path / "kineto_0.json", kineto_of(0))
    put(tmp_path / "w_1.1.pt.trace.json", kineto_of(0))       # rank 0 has its named trace: ignored
    put(tmp_path / "w_2.1.pt.trace.json", kineto_of(0))
    put(tmp_path / "device" / "w_3.1.pt.trace.json", kineto_of(1))
    put(tmp_path / "device" / "w_3.1.pt.trace.json.gz", kineto_of(1))   # the same trace gzipped: one
    assert find_ranks(tmp_path) == [
        RankFiles(0, tmp_path / "host_et_0.json", tmp_path / "kineto_0.json"),
        RankFiles(1, tmp_path / "host_et_1.json", tmp_path / "device" / "w_3.1.pt.trace.json"),
    ]
    put(tmp_path / "w_4.2.pt.trace.json", kineto_of(1))        # a second profiling cycle of rank 1
    with pytest.raises(UsageError, match=r"device/w_3.1.pt.trace.json and w_4.2.pt.trace.json .* are both "
                                         r"rank 1 by their distributedInfo"):
        find_ranks(tmp_path)


def test_device_pattern_without_rank_takes_each_traces_recorded_rank(tmp_path: Path) -> None:
    put(tmp_path / "et_0.json", HOST)
    put(tmp_path / "et_1.json", HOST)
    put(tmp_path / "prof" / "b.pt.trace.json", kineto_of(0))
    put(tmp_path / "prof" / "a.pt.trace.json.gz", kineto_of(1))
    put(tmp_path / "prof" / "c.pt.trace.json", kineto_of(None))   # says no rank: skipped
    found = find_ranks(tmp_path, naming=RankNaming(device_pattern="prof/*.pt.trace.json"))
    assert found == [RankFiles(0, tmp_path / "et_0.json", tmp_path / "prof" / "b.pt.trace.json"),
                     RankFiles(1, tmp_path / "et_1.json", tmp_path / "prof" / "a.pt.trace.json.gz")]
    with pytest.raises(UsageError, match=r"--host-pattern 'et\*.json': put \{rank\} exactly once"):
        find_ranks(tmp_path, naming=RankNaming(host_pattern="et*.json"))


def test_a_real_job_traced_by_tensorboard_trace_handler_runs(tmp_path: Path) -> None:
    src = DATA / "gloo_mlp_2r"
    for rank, name in ((0, "node7_4243.1733300000456"), (1, "node7_4242.1733300000123")):
        shutil.copy(src / f"host_et_{rank}.json.gz", tmp_path / f"host_et_{rank}.json.gz")
        shutil.copy(src / f"kineto_{rank}.json.gz", tmp_path / f"{name}.pt.trace.json.gz")
    found = find_ranks(tmp_path)
    assert [(f.rank, f.kineto.name) for f in found] == [(0, "node7_4243.1733300000456.pt.trace.json.gz"),
                                                         (1, "node7_4242.1733300000123.pt.trace.json.gz")]
