"""``chakra.pipeline`` / ``chakra pipeline``: rank discovery, the many-rank run, its outputs and executors.

Expected values were read off the raw traces with the stdlib ``json`` module: the measured window
of a gloo job is ProfilerStep#2 + ProfilerStep#3 (their recorded durations), the Chakra ET of a
CPU-only trace has one node per host ET node.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from chakra.cli import pipeline as pipeline_cli
from chakra.errors import ChakraError, TraceFormatError, UsageError
from chakra.io import load_json, read_messages
from chakra.pipeline import RankFiles, find_ranks, pipeline_table, run_pipeline
from chakra.schema import METADATA_NODE, GlobalMetadata, Node

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"

# (ProfilerStep#2 dur, ProfilerStep#3 dur) per rank, and host ET node count per rank, from the raw files
STEPS = {
    "gloo_mlp_2r": [(7556.621, 6184.404), (3242.476, 7413.507)],
    "gloo_collectives_2r": [(26631.521, 15432.373), (27292.462, 15398.841)],
}
HOST_NODES = {"gloo_mlp_2r": [457, 457], "gloo_collectives_2r": [139, 138]}
HOST_OPS = {"gloo_mlp_2r": 454, "gloo_collectives_2r": 134}   # host nodes that are operators


def outputs(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    return path


# ---- finding ranks --------------------------------------------------------------------------------------


def test_find_ranks_namings_subfolders_and_preference(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    touch(tmp_path / "chakra_host_et_0.json")
    touch(tmp_path / "host_et_0.json.gz")               # loses to chakra_host_et_0.json
    touch(tmp_path / "kineto_0.json.gz")
    touch(tmp_path / "chakra_device_trace_0.json")      # loses to kineto_0 (name before suffix)
    touch(tmp_path / "host" / "host_et_10.json")        # rank 10 sorts after rank 2, not before
    touch(tmp_path / "device" / "kineto_10.json")
    touch(tmp_path / "host_et_2.json")
    touch(tmp_path / "host_et_2.json.gz")               # .json wins
    touch(tmp_path / "chakra_device_trace_2.json.gz")
    touch(tmp_path / "host_et_3.json")                  # no Kineto: skipped with a warning
    touch(tmp_path / "kineto_x.json")                   # not a rank
    with caplog.at_level(logging.WARNING):
        found = find_ranks(tmp_path)
    assert found == [
        RankFiles(0, tmp_path / "chakra_host_et_0.json", tmp_path / "kineto_0.json.gz"),
        RankFiles(2, tmp_path / "host_et_2.json", tmp_path / "chakra_device_trace_2.json.gz"),
        RankFiles(10, tmp_path / "host" / "host_et_10.json", tmp_path / "device" / "kineto_10.json"),
    ]
    assert "rank 3 has only a host ET file" in caplog.text
    # a whole job (--job, --astrasim) needs every rank: the same folder is an error naming the rank
    with pytest.raises(TraceFormatError, match="rank 3 has only a host ET file: the whole job needs"):
        find_ranks(tmp_path, complete=True)
    # the link batch mode and the harness use the same finder
    assert find_ranks(tmp_path, [10]) == [(10, tmp_path / "host" / "host_et_10.json",
                                           tmp_path / "device" / "kineto_10.json")]


def test_a_job_with_a_rank_missing_its_kineto_trace_is_refused(tmp_path: Path, data_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "job"
    shutil.copytree(data_dir / "gloo_mlp_2r", src)
    (src / "kineto_1.json.gz").unlink()
    # its traces say the job has 2 ranks (distributedInfo world_size 2): rank 1 is missing, per rank too
    for extra in (["--job"], ["--astrasim"], []):
        assert pipeline_cli.main([str(src), "-o", str(tmp_path / "out"), "-q", *extra]) == 1
        assert ("the job has 2 ranks (distributedInfo of kineto_0.json.gz: world_size 2); missing: rank 1 "
                "(only a host ET): give every rank's files, or --allow-missing-ranks to go on with rank 0 "
                "alone" in capsys.readouterr().err)
        assert not (tmp_path / "out").exists()
    # asked for: rank 0 alone
    assert pipeline_cli.main([str(src), "-o", str(tmp_path / "out"), "-q", "--allow-missing-ranks"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("*.et")) == ["job.0.et"]
    # a job whose traces do not say how many ranks it has: the whole job still needs both files of a rank
    kin = json.loads(gzip.decompress((src / "kineto_0.json.gz").read_bytes()))
    del kin["distributedInfo"]
    (src / "kineto_0.json.gz").write_bytes(gzip.compress(json.dumps(kin).encode()))
    assert pipeline_cli.main([str(src), "-o", str(tmp_path / "out2"), "-q", "--job"]) == 1
    assert "rank 1 has only a host ET file: the whole job needs" in capsys.readouterr().err


def test_find_ranks_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        find_ranks(tmp_path)
    # the message lists every name looked for, and the options for other names
    msg = str(exc.value)
    assert msg.startswith(f"{tmp_path}: no traces found; looked for host ETs named chakra_host_et_N, "
                          "host_et_N, et_N, pytorch_et_N; Kineto traces named kineto_N, ")
    for text in ("rank-N, rank_N, rankN", ".json or .json.gz", "host/ and device/", "--host-pattern",
                 "--device-pattern"):
        assert text in msg
    with pytest.raises(UsageError, match="not a directory"):
        find_ranks(tmp_path / "nope")
    touch(tmp_path / "host_et_0.json")
    with pytest.raises(TraceFormatError, match="no Kineto trace for rank 0 .*named kineto_0, chakra_device"):
        find_ranks(tmp_path, [0])
    with pytest.raises(TraceFormatError, match="no host ET for rank 1 .*host_et_1, et_1"):
        find_ranks(tmp_path, [1])


# ---- the pipeline on the bundled jobs ---------------------------------------------------------------------


@pytest.mark.parametrize("job", ["gloo_mlp_2r", "gloo_collectives_2r"])
def test_pipeline_files_and_values(tmp_path: Path, job: str) -> None:
    out = tmp_path / "out"
    res = run_pipeline(DATA / job, out, jobs=1)
    assert sorted(outputs(out)) == sorted(
        [f"et_plus_{r}.json" for r in (0, 1)] + [f"{job}.{r}.et" for r in (0, 1)]
        + [f"replay_{r}.log" for r in (0, 1)] + ["summary.json", "summary.md", "timeline.json"])
    summary = load_json(out / "summary.json")
    assert summary == res.summary
    assert (summary["job"], summary["num_ranks"], summary["replay"], summary["mode"]) == (job, 2, "per_rank",
                                                                                         "lanes")
    for r, row in enumerate(summary["ranks"]):
        assert row["rank"] == r
        assert (row["host_et"], row["kineto"]) == (f"host_et_{r}.json.gz", f"kineto_{r}.json.gz")
        assert row["measured_window"] == "ProfilerStep#2+ProfilerStep#3"
        assert row["measured_us"] == pytest.approx(sum(STEPS[job][r]), abs=0.1)
        assert abs(row["replayed_us"] - row["measured_us"]) <= 0.05 * row["measured_us"]
        assert row["error_pct"] == pytest.approx(100 * (row["replayed_us"] / row["measured_us"] - 1))
        assert row["nodes"] == HOST_NODES[job][r]
        assert row["host_ops"] == row["host_ops_matched"] == HOST_OPS[job]
        assert (row["gpu_ops"], row["comm_wait_us"]) == (0, None)
        # the files say the same
        meta, nodes = read_messages(out / f"{job}.{r}.et", GlobalMetadata, Node)
        assert len(nodes) == row["nodes"]
        assert {a.name: a for a in meta.attr}["rank"].int64_val == r
        etp = load_json(out / f"et_plus_{r}.json")
        assert etp["rank"] == r and etp["measured"]["dur_us"] == row["measured_us"]
        lines = (out / f"replay_{r}.log").read_text().splitlines()
        assert len(lines) == row["nodes"]
        assert lines[-1].startswith(f"[rank {r}] Node ID ")
        assert lines[-1].endswith(f" completed at {round(row['replayed_us'])}us")
    assert summary["replayed_us_max"] == max(r["replayed_us"] for r in summary["ranks"])
    md = (out / "summary.md").read_text()
    row0 = summary["ranks"][0]
    assert f"| 0 | {row0['nodes']:,} | {row0['measured_us']:,.1f} | {row0['replayed_us']:,.1f} | " in md
    # one timeline for the job: a process per rank, every event with ts/dur
    tl = json.loads((out / "timeline.json").read_bytes())
    xs = [e for e in tl["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {0, 1}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    assert sum(1 for e in xs if e["pid"] == 1) == HOST_NODES[job][1] - sum(
        1 for n in read_messages(out / f"{job}.1.et", GlobalMetadata, Node)[1] if n.type == METADATA_NODE)


def test_pipeline_is_deterministic_across_runs_and_pool_sizes(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    run_pipeline(DATA / "gloo_mlp_2r", a, jobs=1)
    run_pipeline(DATA / "gloo_mlp_2r", a, jobs=1)          # same folder again: same bytes
    run_pipeline(DATA / "gloo_mlp_2r", b, jobs=2)
    # a copy of the inputs elsewhere: no input path leaks into the outputs
    shutil.copytree(DATA / "gloo_mlp_2r", tmp_path / "moved" / "gloo_mlp_2r")
    run_pipeline(tmp_path / "moved" / "gloo_mlp_2r", c, jobs=2)
    assert outputs(a) == outputs(b) == outputs(c)


def test_whole_job_replay(tmp_path: Path) -> None:
    res = run_pipeline(DATA / "gloo_collectives_2r", tmp_path, jobs=2, job_replay=True)
    s = res.summary
    assert s["replay"] == "whole_job"
    for row in s["ranks"]:
        assert abs(row["error_pct"]) <= 5.0
        assert row["comm_wait_us"] is not None and row["comm_wait_us"] >= 0
    tl = load_json(tmp_path / "timeline.json")
    waits = [e for e in tl["traceEvents"] if e["ph"] == "X" and "wait_us" in e["args"]]
    assert {e["pid"] for e in waits} == {0, 1}       # collectives coupled across both ranks


def test_failed_rank_is_reported_and_no_summary_written(tmp_path: Path) -> None:
    src = tmp_path / "job"
    shutil.copytree(DATA / "gloo_collectives_2r", src)
    (src / "kineto_1.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])   # truncated
    with pytest.raises(ChakraError, match=r"1 of 2 ranks failed: rank 1: .*kineto_1\.json\.gz") as exc:
        run_pipeline(src, tmp_path / "out", jobs=2)
    assert exc.value.exit_code == 1
    note = f"(the other ranks' files are in {tmp_path / 'out'}; no summary was written)"
    assert str(exc.value).endswith(note)
    assert not (tmp_path / "out" / "summary.json").exists()
    assert not any(p.name.endswith(".part") for p in (tmp_path / "out").iterdir())


def test_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown replay mode 'fast'"):
        run_pipeline(DATA / "gloo_mlp_2r", tmp_path, mode="fast")
    with pytest.raises(UsageError, match="--jobs must be at least 1"):
        run_pipeline(DATA / "gloo_mlp_2r", tmp_path, jobs=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        run_pipeline(DATA / "gloo_mlp_2r", tmp_path / "file")


def test_missing_dask_is_a_clear_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)     # import fails as if not installed
    with pytest.raises(UsageError, match=r"needs Dask distributed.*pip install 'dask\[distributed\]'"):
        run_pipeline(DATA / "gloo_mlp_2r", tmp_path, scheduler="local")


# ---- the command ----------------------------------------------------------------------------------------


def test_cli_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = pipeline_cli.main([str(DATA / "gloo_collectives_2r"), "--output-dir", str(tmp_path), "--jobs", "1",
                            "--name", "chakra"])
    assert rc == 0
    out = capsys.readouterr().out
    s = load_json(tmp_path / "summary.json")
    for row in s["ranks"]:
        line = next(ln for ln in out.splitlines() if ln.startswith(f"│    {row['rank']} │"))
        assert f"{row['measured_us']:,.1f}" in line and f"{row['replayed_us']:,.1f}" in line
        assert f"{row['error_pct']:+.2f}%" in line
    assert (tmp_path / "chakra.0.et").is_file() and (tmp_path / "chakra.1.et").is_file()
    assert f"Outputs in {tmp_path}" in out


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pipeline_cli.main([str(tmp_path), "--output-dir", str(tmp_path / "o")]) == 2
    assert "no traces found; looked for host ETs named" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:                              # --output-dir is required
        pipeline_cli.main([str(DATA / "gloo_mlp_2r")])
    assert exc.value.code == 2
    assert pipeline_cli.main([str(DATA / "gloo_mlp_2r"), "--output-dir", str(tmp_path), "--name", "a/b"]) == 2


# ---- Dask: the same bytes as the local pool ---------------------------------------------------------------


def _need_dask() -> None:
    """Skip without dask[distributed], found without importing it here: importing it changes this process
    (its tblib makes every exception pickle whole, which tests/io/test_forkmap.py checks does not)."""
    import importlib.util

    if importlib.util.find_spec("distributed") is None:
        pytest.skip("dask[distributed] is not installed (pip install -e '.[dask]')")


def _in_a_child(fn: Any) -> None:
    """Run ``fn`` in a forked child and fail if it does: Dask leaves threads behind (its offload pool, the
    client's IO loop), and with another thread running ``chakra.io.forkmap`` works in one process, so every
    test after this one would quietly stop testing the forked paths (and tests/io/test_forkmap.py failed
    when run after this file)."""
    import traceback

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child failed (its traceback: the captured stderr)"


def test_dask_and_local_pool_give_identical_files(tmp_path: Path) -> None:
    _need_dask()
    _in_a_child(lambda: _dask_and_local_pool_give_identical_files(tmp_path))
    assert threading.active_count() == 1


def _dask_and_local_pool_give_identical_files(tmp_path: Path) -> None:
    import dask.distributed as distributed

    local = tmp_path / "local"
    run_pipeline(DATA / "gloo_collectives_2r", local, jobs=2)
    # threads in this process (two workers) ...
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        res = run_pipeline(DATA / "gloo_collectives_2r", tmp_path / "threads", scheduler=client)
    assert res.executor == "dask (client)"
    # ... and a LocalCluster of two worker processes made by the pipeline itself
    run_pipeline(DATA / "gloo_collectives_2r", tmp_path / "procs", scheduler="local", jobs=2)
    for d in ("threads", "procs"):
        other = outputs(tmp_path / d)
        for r in (0, 1):
            assert other[f"gloo_collectives_2r.{r}.et"] == outputs(local)[f"gloo_collectives_2r.{r}.et"]
        assert other == outputs(local)


def test_dask_unreachable_scheduler(tmp_path: Path) -> None:
    _need_dask()

    def unreachable() -> None:
        from chakra.pipeline import dask_client

        with pytest.raises(UsageError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'"):
            dask_client("tcp://127.0.0.1:1", timeout="1s")

    _in_a_child(unreachable)
    assert threading.active_count() == 1


# ---- the real 8-rank DLRM job ---------------------------------------------------------------------------


@pytest.mark.corpus
def test_pipeline_dlrm_8_ranks(corpus: Path, tmp_path: Path) -> None:
    res = run_pipeline(corpus / "dlrm_8r_v100", tmp_path, jobs=2)
    s = res.summary
    assert [r["rank"] for r in s["ranks"]] == list(range(8))
    for row in s["ranks"]:
        r = row["rank"]
        assert (row["host_et"], row["kineto"]) == (f"host/host_et_{r}.json.gz", f"device/kineto_{r}.json.gz")
        assert row["host_ops_matched"] == 1672
        assert abs(row["error_pct"]) <= 5.0, row
        assert (tmp_path / f"dlrm_8r_v100.{r}.et").is_file()
    # ranks 1 and 3 have 64 GPU events launched before profiling began (see test_link_corpus), which ran
    # in the window: in the graph, without a host op
    assert [row["gpu_ops"] - row["gpu_ops_attached"] for row in s["ranks"]] == [0, 64, 0, 64, 0, 0, 0, 0]
    assert [row["gpu_ops_attached"] for row in s["ranks"]] == [261, 262, 262, 273, 273, 261, 262, 262]
    assert [row["gpu_launched_before_trace"] for row in s["ranks"]] == [0, 64, 0, 64, 0, 0, 0, 0]
    assert [row["gpu_ops_in_window"] for row in s["ranks"]] == [261, 326, 262, 337, 273, 261, 262, 262]
    # the rate of the table is of every GPU op of the window in the graph; the rate of those attached to
    # their launching op (launchable ones only) stays
    assert [row["gpu_attach_rate_in_window"] for row in s["ranks"]] == [1.0] * 8
    assert all(row["gpu_attach_rate"] == 1.0 for row in s["ranks"])
    md = (tmp_path / "summary.md").read_text()
    assert "| 326/326 (100.0%), 64 launched before the trace |" in md
    assert "| 337/337 (100.0%), 64 launched before the trace |" in md
    assert "| 261/261 (100.0%) |" in md and "262 of 326" not in md
    # the terminal table: the same ratio, shorter
    console = Console(file=io.StringIO(), width=120)
    console.print(pipeline_table(res))
    text = console.file.getvalue()
    assert "326/326 (100.0%), 64 pre-trace" in text and "337/337 (100.0%), 64 pre-trace" in text
    assert "pre-trace: GPU ops launched before the trace began" in text


def test_auto_jobs() -> None:
    import os

    import chakra.io.executor as pl

    files = find_ranks(DATA / "gloo_mlp_2r")       # 65 KB in all: not worth a worker process
    assert pl.auto_jobs(files) == 1
    size = sum(p.stat().st_size for f in files for p in (f.host, f.kineto) if p is not None)
    assert pl.auto_jobs(files, min_bytes=size + 1) == 1
    assert pl.auto_jobs(files, min_bytes=size) == min(os.cpu_count() or 1, 2)


# ---- the rank written: the trace's own, the file name's only when the trace has none -------------------


def test_pipeline_rank_of_the_trace_wins_over_the_file_name(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    src = tmp_path / "in"
    src.mkdir()
    # rank 1's files named as rank 3 (its distributedInfo says 1)
    shutil.copy(DATA / "gloo_mlp_2r" / "host_et_1.json.gz", src / "host_et_3.json.gz")
    shutil.copy(DATA / "gloo_mlp_2r" / "kineto_1.json.gz", src / "kineto_3.json.gz")
    # rank 0's files without distributedInfo, named as rank 4: the file name is all there is
    shutil.copy(DATA / "gloo_mlp_2r" / "host_et_0.json.gz", src / "host_et_4.json.gz")
    kin = load_json(DATA / "gloo_mlp_2r" / "kineto_0.json.gz")
    del kin["distributedInfo"]
    (src / "kineto_4.json").write_text(json.dumps(kin))
    # (rank 3's distributedInfo says the job has 2 ranks: 0 is missing; asked to go on)
    with caplog.at_level(logging.WARNING):
        res = run_pipeline(src, tmp_path / "out", jobs=1, allow_missing_ranks=True)
    assert [r["rank"] for r in res.summary["ranks"]] == [3, 4]      # outputs are named by the files
    assert load_json(tmp_path / "out" / "et_plus_3.json")["rank"] == 1
    assert load_json(tmp_path / "out" / "et_plus_4.json")["rank"] == 4
    meta, _ = read_messages(tmp_path / "out" / "in.3.et", GlobalMetadata, Node)
    assert {a.name: a for a in meta.attr}["rank"].int64_val == 1
    warned = [r.getMessage() for r in caplog.records if "say rank" in r.getMessage()]
    assert len(warned) == 1 and "the files of rank 3 say rank 1" in warned[0]


def test_progress_bars_start_no_thread(tmp_path: Path) -> None:
    """The pipeline's bars are redrawn by the calling thread (no refresh thread): the stages of a rank run
    in this process may then fork their parts (chakra.io.forkmap does not fork beside another thread)."""
    import threading

    from chakra.io.executor import run_ranks
    from chakra.replay.progress import rich_bars

    before = threading.active_count()
    bars = rich_bars()
    bars.start()
    try:
        assert threading.active_count() == before
        assert run_ranks(_thread_count, [0, 1], jobs=1, progress=bars) == [before, before]
    finally:
        bars.stop()


def _thread_count(task: int) -> int:
    import threading

    return threading.active_count()


def test_a_rank_leaves_next_to_no_cyclic_garbage(tmp_path: Path) -> None:
    """A command's process runs without the cyclic GC (chakra.cli.entry), and a pipeline worker runs rank
    after rank: what a rank leaves in reference cycles must not add up (the replay reader's and the host
    loader's builders did, ~4,200 objects / 0.5 MB a rank of the DLRM trace, before they were released)."""
    import gc

    from chakra.pipeline.model import RankTask
    from chakra.pipeline.run import process_rank

    d = DATA / "gloo_mlp_2r"

    def task(r: int) -> RankTask:
        return RankTask(rank=r, host=str(d / f"host_et_{r}.json.gz"), kineto=str(d / f"kineto_{r}.json.gz"),
                        et_plus=str(tmp_path / f"p{r}.json"), et=str(tmp_path / f"j.{r}.et"),
                        log=str(tmp_path / f"l{r}.log"), timeline=True)

    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        process_rank(task(0))   # (the first rank also makes what stays: caches, message classes)
        gc.collect()
        left = []
        for r in (1, 0, 1):
            process_rank(task(r))
            left.append(gc.collect())
    finally:
        if was:
            gc.enable()
    assert max(left) < 50, left
