"""``chakra pipeline --job``: a job table with start offsets, comm wait and the job's time (issue 16)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from chakra.io import read_messages
from chakra.pipeline import pipeline_command, run_pipeline
from chakra.schema import GlobalMetadata, Node, attr_value

DATA = Path(__file__).resolve().parents[1] / "data"


def _measured_window(et: Path) -> tuple[float, float]:
    meta, _ = read_messages(et, GlobalMetadata, Node)
    values = {a.name: attr_value(a) for a in meta.attr}
    return values["measured_start_us"], values["measured_dur_us"]


def test_whole_job_numbers(tmp_path: Path) -> None:
    res = run_pipeline(DATA / "gloo_collectives_2r", tmp_path, jobs=1, job_replay=True)
    whole = res.summary["whole_job"]
    rows = res.summary["ranks"]
    # measured: from the first rank's recorded start to the last rank's recorded end (the ETs' metadata)
    windows = [_measured_window(tmp_path / f"gloo_collectives_2r.{r}.et") for r in (0, 1)]
    first = min(s for s, _ in windows)
    assert whole["measured_us"] == pytest.approx(max(s + d for s, d in windows) - first)
    # the replay's common clock puts each rank at its recorded start relative to the earliest
    offsets = {int(k): v for k, v in whole["start_offsets_us"].items()}
    assert offsets == pytest.approx({r: windows[r][0] - first for r in (0, 1)})
    assert whole["replayed_us"] == pytest.approx(max(offsets[r["rank"]] + r["replayed_us"] for r in rows))
    assert whole["comm_wait_us"] == pytest.approx(sum(r["comm_wait_us"] for r in rows))
    assert whole["error_pct"] == pytest.approx(100 * (whole["replayed_us"] / whole["measured_us"] - 1))
    assert abs(whole["error_pct"]) < 2 and whole["matched_comm_groups"] > 0
    assert "Whole job (first rank's start to last rank's end)" in (tmp_path / "summary.md").read_text()


def test_job_table_is_not_the_per_rank_table(tmp_path: Path) -> None:
    out = io.StringIO()
    assert pipeline_command(str(DATA / "gloo_collectives_2r"), str(tmp_path / "a"), jobs=1, job_replay=True,
                            stream=out) == 0
    text = out.getvalue()
    assert "whole job replayed" in text and "comm wait (µs)" in text and "starts at (µs)" in text
    from chakra.io import load_json

    whole = load_json(tmp_path / "a" / "summary.json")["whole_job"]
    job_row = next(ln for ln in text.splitlines() if ln.startswith("│  job │"))
    assert f"{whole['replayed_us']:,.1f}" in job_row and f"{whole['comm_wait_us']:,.1f}" in job_row
    assert f"{whole['measured_us']:,.1f}" in job_row
    out = io.StringIO()
    assert pipeline_command(str(DATA / "gloo_collectives_2r"), str(tmp_path / "b"), jobs=1, stream=out) == 0
    text = out.getvalue()
    assert "comm wait" not in text and "host ops matched" in text and "│  job │" not in text
