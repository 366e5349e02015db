"""Many ranks at once: link + convert every rank of a folder in parallel, replay, summarise.

One rank-file finder (:func:`chakra.io.ranks.find_ranks`), one executor (:func:`chakra.io.executor.run_ranks`:
in this process, a local process pool, or a Dask cluster) and one per-rank worker (:func:`process_rank`: link,
then optionally convert and replay) serve ``chakra_trace_link --batch``, the integration harness and
``chakra pipeline`` / ``chakra demo``.  The layer above the stages: it imports them, they never import it.

- ``model``: RankTask, RankResult, PipelineResult, the file names;
- ``run``: the worker and :func:`run_pipeline`;
- ``report``: summary.json / summary.md and the terminal tables;
- ``commands``: what ``chakra pipeline`` and ``chakra demo`` do;
- ``link``: ``chakra_trace_link`` (one pair, a Kineto trace alone, or a folder);
- ``harness``: the integration harness (``ci_tools/integration_tests.py``).

Outputs do not depend on the executor: every file is written by the same code from the same inputs, file
names carry only the rank, and the summary holds no timestamp, path or pid.

The names below are imported when first used: ``chakra_trace_link`` of one pair imports
``chakra.pipeline.link``, and with it this package, without the replay, the report or the process pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chakra.lazy import lazy_exports, module_of

if TYPE_CHECKING:
    from chakra.io.executor import auto_jobs, dask_client, run_ranks
    from chakra.io.ranks import RankFiles, RankNaming, find_ranks
    from chakra.pipeline.commands import bundled_data_dir, demo_command, pipeline_command
    from chakra.pipeline.model import PipelineResult, RankResult, RankTask
    from chakra.pipeline.report import job_table, pipeline_table, summary_markdown
    from chakra.pipeline.run import process_rank, run_pipeline

_FROM = {
    "chakra.io.executor": ("auto_jobs", "dask_client", "run_ranks"),
    "chakra.io.ranks": ("RankFiles", "RankNaming", "find_ranks"),
    "chakra.pipeline.commands": ("bundled_data_dir", "demo_command", "pipeline_command"),
    "chakra.pipeline.model": ("PipelineResult", "RankResult", "RankTask"),
    "chakra.pipeline.report": ("job_table", "pipeline_table", "summary_markdown"),
    "chakra.pipeline.run": ("process_rank", "run_pipeline"),
}
_MODULE_OF = module_of(_FROM)

__all__ = [
    "PipelineResult", "RankFiles", "RankNaming", "RankResult", "RankTask", "auto_jobs", "bundled_data_dir",
    "dask_client", "demo_command", "find_ranks", "job_table", "pipeline_command", "pipeline_table",
    "process_rank", "run_pipeline", "run_ranks", "summary_markdown"
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _MODULE_OF)
