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
"""

from chakra.io.executor import auto_jobs, dask_client, run_ranks
from chakra.io.ranks import RankFiles, RankNaming, find_ranks
from chakra.pipeline.commands import bundled_data_dir, demo_command, pipeline_command
from chakra.pipeline.model import PipelineResult, RankResult, RankTask
from chakra.pipeline.report import job_table, pipeline_table, summary_markdown
from chakra.pipeline.run import process_rank, run_pipeline

__all__ = ["PipelineResult", "RankFiles", "RankNaming", "RankResult", "RankTask", "auto_jobs",
           "bundled_data_dir", "dask_client", "demo_command", "find_ranks", "job_table", "pipeline_command",
           "pipeline_table", "process_rank", "run_pipeline", "run_ranks", "summary_markdown"]
