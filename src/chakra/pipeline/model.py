"""What the pipeline hands around: a rank's task and result, the job's result, the file names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chakra.replay.modes import Mode


@dataclass(slots=True)
class RankTask:
    """What to do for one rank: always link; convert when ``et`` is set; replay when ``log`` is set too."""

    rank: int
    host: str | None    # None: the Kineto trace alone
    kineto: str
    et_plus: str
    et: str | None = None
    log: str | None = None
    mode: Mode = "lanes"
    gaps: bool = True
    annotation: str | None = None
    timeline: bool = False       # also return the rank's timeline events (per-rank replay)
    step: int | None = None      # ProfilerStep#<step> only
    whatif: Any = None           # chakra.replay.whatif.WhatIf: replay with that change
    force: bool = False          # link traces that look like different runs or do not align (see link_files)


@dataclass(slots=True)
class RankResult:
    """What one rank gave (pickled back from a worker process or a Dask worker)."""

    rank: int
    link: Any                    # chakra.link.LinkReport
    et_plus: str
    et: str | None = None
    log: str | None = None
    nodes: int = 0
    measured_us: float | None = None
    replayed_us: float | None = None
    error_pct: float | None = None
    recorded_end_us: float | None = None   # when the last op ended (ReplayResult.recorded_end_us)
    window_error_pct: float | None = None  # against the window's end (error_pct: ReplayResult.reference_us)
    run_on: dict[str, str] | None = None   # what ran on past the window (ReplayResult.run_on), if anything
    comm_wait_us: float | None = None
    timeline_events: list[dict[str, Any]] = field(default_factory=list)




SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
TIMELINE = "timeline.json"


@dataclass(slots=True)
class PipelineResult:
    name: str
    out_dir: Path
    ranks: list[RankResult]
    mode: Mode
    job_replay: bool
    files: dict[str, str]         # kind -> file name in out_dir
    summary: dict[str, Any]
    seconds: float = 0.0
    executor: str = ""
    astrasim: Any = None          # chakra.job.astrasim.AstrasimReport with --astrasim
    experiment: Any = None        # chakra.pipeline.experiment.Experiment with --astrasim

    def path(self, kind: str) -> Path:
        return self.out_dir / self.files[kind]


