"""Shared test fixtures: where the real-trace corpus is.

The corpus lives at ``../shared/traces`` beside the repository (or where
``CHAKRA_TRACE_CORPUS`` points).  In a fresh clone without it, corpus tests skip
with that reason; tests on ``tests/data`` always run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


def corpus_dir() -> Path | None:
    env = os.environ.get("CHAKRA_TRACE_CORPUS")
    path = Path(env) if env else REPO.parent / "shared" / "traces"
    return path if path.is_dir() else None


CORPUS = corpus_dir()
needs_corpus = pytest.mark.skipif(
    CORPUS is None,
    reason="real-trace corpus not found at ../shared/traces (set CHAKRA_TRACE_CORPUS)",
)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if CORPUS is None:
        pytest.skip("real-trace corpus not found at ../shared/traces (set CHAKRA_TRACE_CORPUS)")
    return CORPUS


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(autouse=True)
def _restore_root_logger():
    """A command run in a test sets up logging on that test's captured stderr, which is closed afterwards:
    put the root logger's handlers and level back, so that no later test logs to (or flushes) a closed
    stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def assert_replayed_within(rows: list[dict], rel: float) -> None:
    """Every rank row of a pipeline summary (``summary.json``'s ``ranks``) replayed within ``rel`` of its
    measured step (the message names the rank)."""
    for row in rows:
        assert row["replayed_us"] == pytest.approx(row["measured_us"], rel=rel), row["rank"]
