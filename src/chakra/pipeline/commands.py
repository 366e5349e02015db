"""What ``chakra pipeline`` and ``chakra demo`` do: run the pipeline, print the table and where the files
are."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from chakra.errors import UsageError
from chakra.io.ranks import RankNaming
from chakra.pipeline.report import _print_result
from chakra.pipeline.run import run_pipeline

if TYPE_CHECKING:
    from chakra.replay.modes import Mode

log = logging.getLogger(__name__)


def pipeline_command(folder: str, output_dir: str, *, jobs: int | None = None, scheduler: str | None = None,
                     job_replay: bool = False, mode: Mode = "lanes", progress: bool = False,
                     name: str | None = None, stream: TextIO | None = None, astrasim: bool = False,
                     simulator: str | None = None, naming: RankNaming | None = None,
                     step: int | None = None, whatif: Any = None, force: bool = False,
                     allow_missing_ranks: bool = False) -> int:
    """What ``chakra pipeline`` does: run the pipeline, print the table and where the files are."""
    result = run_pipeline(folder, output_dir, jobs=jobs, scheduler=scheduler, job_replay=job_replay,
                          mode=mode, progress=progress, name=name, astrasim=astrasim, simulator=simulator,
                          naming=naming, step=step, whatif=whatif, force=force,
                          allow_missing_ranks=allow_missing_ranks)
    _print_result(result, stream if stream is not None else sys.stdout)
    return 0


DEMO_JOB = "gloo_mlp_2r"
DEMO_OUT = "chakra_demo_out"


def bundled_data_dir() -> Path:
    """The folder of the traces shipped inside the package (``chakra/data``, package data of the wheel)."""
    from importlib.resources import files

    return Path(str(files("chakra").joinpath("data")))


def demo_command(output_dir: str | None = None, *, input_folder: str | None = None, jobs: int | None = None,
                 job_replay: bool = False, progress: bool = False, stream: TextIO | None = None) -> int:
    """What ``chakra demo`` does: the pipeline on the bundled 2-rank gloo trace (or ``input_folder``)."""
    stream = stream if stream is not None else sys.stdout
    if input_folder is None:
        folder = bundled_data_dir() / DEMO_JOB
        if not folder.is_dir():
            raise UsageError(f"the demo trace chakra/data/{DEMO_JOB}/ is missing from this installation "
                             f"({folder}): reinstall the package, or pass a folder of host_et_N.json(.gz) + "
                             "kineto_N.json(.gz) files with --input FOLDER")
    else:
        folder = Path(input_folder)
    out = output_dir or DEMO_OUT
    stream.write(f"chakra demo: link -> convert -> replay every rank of {folder}\n")
    stream.flush()
    result = run_pipeline(folder, out, jobs=jobs, job_replay=job_replay, progress=progress)
    _print_result(result, stream)
    return 0


