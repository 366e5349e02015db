"""Run one function over many ranks: in this process, a local process pool, or a Dask cluster.

Outputs do not depend on the executor: the tasks carry paths, each worker writes its own files, and the log
records a worker made are replayed in the calling process in rank order.  On a cluster the workers must see
the input and output folders at the same paths (a shared file system).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from chakra.errors import ChakraError, UsageError
from chakra.io.forkmap import serial_workers
from chakra.io.ranks import RankFiles
from chakra.tunables import AUTO_POOL_MIN_BYTES

log = logging.getLogger(__name__)


def show_progress(quiet: bool = False) -> bool:
    """Progress bars only on a terminal and when not asked to be quiet."""
    return not quiet and sys.stderr.isatty() and os.environ.get("CHAKRA_NO_PROGRESS") is None



Outcome = tuple[Any, str | None, int, int, list[tuple[str, int, str]]]


class _Capture(logging.Handler):
    """Collects the log records of one task's thread, to be logged again by the parent process."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.thread = threading.get_ident()
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.records.append((record.name, record.levelno, record.getMessage()))


def _guarded(func: Callable[[Any], Any], task: Any, level: int | None = None) -> Outcome:
    """Run one task: (result, error text, exit code, pid, log records).

    A ChakraError comes back as text (exceptions may not survive pickling).  With ``level`` the
    task's log records at that level are collected and sent back, so that a worker's warnings show
    where the user looks (above the progress bars, not on a Dask worker's console).
    """
    capture = None
    root = logging.getLogger()
    if level is not None:
        capture = _Capture(level)
        root.addHandler(capture)
        if root.level == logging.NOTSET or root.level > level:
            root.setLevel(level)
    try:
        return func(task), None, 0, os.getpid(), capture.records if capture else []
    except ChakraError as exc:
        return None, str(exc), exc.exit_code, os.getpid(), capture.records if capture else []
    finally:
        if capture is not None:
            root.removeHandler(capture)


def _dask_task(func: Callable[[Any], Any], task: Any, level: int | None) -> Outcome:
    """``_guarded`` on a Dask worker: one part per stage (the cluster's workers share the cores)."""
    serial_workers()
    return _guarded(func, task, level)


def _replay_records(pid: int, records: list[tuple[str, int, str]]) -> None:
    if pid == os.getpid():
        return      # the task ran in this process: its records were logged already
    for name, levelno, message in records:
        logging.getLogger(name).log(levelno, "%s", message)


def _init_worker() -> None:
    """A spawned worker prints nothing itself: its records go back to the parent (see ``_guarded``); its
    stages run in one part (``chakra.io.forkmap``: the pool keeps the cores busy with ranks)."""
    logging.getLogger().addHandler(logging.NullHandler())
    serial_workers()


def _task_rank(task: Any, pos: int) -> int:
    rank = getattr(task, "rank", None)
    if rank is None and isinstance(task, tuple) and task and isinstance(task[0], int):
        rank = task[0]
    return pos if rank is None else int(rank)


def dask_client(scheduler: str, jobs: int | None = None, timeout: str = "20s"
                ) -> tuple[Any, Callable[[], None]]:
    """A Dask ``Client`` for ``scheduler`` (an address, or ``"local"`` for a LocalCluster of ``jobs``
    single-threaded worker processes) and the function that closes what was opened."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--scheduler needs Dask distributed, which is not installed: "
                         "pip install 'dask[distributed]' (or the toolkit's [dask] extra)") from None
    # Dask's objects live in reference cycles and release their data (here and on the workers) when the
    # collector frees them: on once a client is opened, also in a command's process (where chakra.cli.entry
    # switched it off)
    gc.enable()
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # the scheduler and nannies of a LocalCluster run here and chat at INFO level
        logging.getLogger("distributed").setLevel(logging.WARNING)
    if scheduler == "local":
        n = max(1, jobs or os.cpu_count() or 1)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)

        def close() -> None:
            client.close()
            cluster.close()

        return client, close
    try:
        client = Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler!r}: {exc}") from None
    return client, client.close


def run_ranks(func: Callable[[Any], Any], tasks: Sequence[Any], *, jobs: int | None = None,
              scheduler: Any = None, progress: Any = None, label: str = "ranks",
              where: str | os.PathLike[str] | None = None) -> list[Any]:
    """``func(task)`` for every task; results in task order.

    ``scheduler`` None: ``jobs`` worker processes (spawned; ``jobs=1`` runs in this process).
    ``scheduler`` a string: a Dask cluster (:func:`dask_client`); a Dask ``Client``: that client.
    ``func`` must be a module-level function (it is pickled by name).  ``progress`` is a rich
    ``Progress`` to advance, or None.  Every task runs even when some fail; then one ChakraError
    lists the failed ranks (exit code 2 if all of them were usage errors, else 1).
    """
    n = len(tasks)
    results: list[Any] = [None] * n
    errors: list[tuple[int, str, int]] = []
    bar = progress.add_task(label, total=n) if progress is not None else None
    if progress is not None:
        progress.refresh()

    level = logging.getLogger().getEffectiveLevel()

    def done(pos: int, outcome: Outcome) -> None:
        value, err, code, pid, records = outcome
        _replay_records(pid, records)
        if err is None:
            results[pos] = value
        else:
            errors.append((_task_rank(tasks[pos], pos), err, code))
        if progress is not None:
            progress.update(bar, advance=1, refresh=True)   # (the commands' bars have no refresh thread)

    if scheduler is not None and n:
        close = None
        client = scheduler
        if isinstance(scheduler, str):
            client, close = dask_client(scheduler, jobs)
        try:
            from dask.distributed import as_completed as dask_completed

            futures = [client.submit(_dask_task, func, t, level, pure=False) for t in tasks]
            pos_of = {f.key: i for i, f in enumerate(futures)}
            for fut in dask_completed(futures):
                done(pos_of[fut.key], fut.result())
        finally:
            if close is not None:
                close()
    else:
        workers = max(1, min(jobs or os.cpu_count() or 1, n))
        if workers == 1:
            for i, t in enumerate(tasks):
                done(i, _guarded(func, t))
        else:
            # spawn: workers start clean (no inherited logging handlers, locks or progress threads)
            ctx = multiprocessing.get_context("spawn")
            try:
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                         initializer=_init_worker) as pool:
                    pending = {pool.submit(_guarded, func, t, level): i for i, t in enumerate(tasks)}
                    for fut in as_completed(pending):
                        done(pending[fut], fut.result())
            except BrokenProcessPool:
                raise ChakraError("a worker process died: out of memory, or it could not re-import the main "
                                  "module (a script must guard its code with if __name__ == '__main__': and "
                                  "live in a file), or use jobs=1",
                                  os.fspath(where) if where is not None else None) from None
    if errors:
        errors.sort()
        text = "; ".join(f"rank {r}: {e}" for r, e, _ in errors)
        exc = ChakraError(f"{len(errors)} of {n} ranks failed: {text}",
                          os.fspath(where) if where is not None else None)
        if all(code == UsageError.exit_code for _, _, code in errors):
            exc.exit_code = UsageError.exit_code
        exc.failed_ranks = [r for r, _, _ in errors]
        raise exc
    return results


def auto_jobs(files: Sequence[RankFiles], min_bytes: int = AUTO_POOL_MIN_BYTES) -> int:
    """Worker processes for ``jobs=None``: one per core (at most one per rank), 1 for jobs of fewer than
    ``min_bytes`` bytes of input."""
    size = 0
    for f in files:
        for p in (f.host, f.kineto):
            if p is None:
                continue
            try:
                size += p.stat().st_size
            except OSError:
                pass
    if size < min_bytes:
        return 1
    return max(1, min(os.cpu_count() or 1, len(files)))


