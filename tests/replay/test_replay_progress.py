"""chakra.replay.progress: the phases a whole-job replay announces, and their bars on a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from chakra.replay.api import replay_job
from chakra.replay.graph import NodeSpec as N
from chakra.replay.progress import RichSteps
from chakra.schema import COMM_COLL_NODE


class Record:
    """A Steps that writes down what it is told."""

    def __init__(self) -> None:
        self.phases: list[list] = []     # [what, total, steps advanced]

    def phase(self, what: str, total: int = 1) -> None:
        self.phases.append([what, total, 0])

    def advance(self, n: int = 1) -> None:
        self.phases[-1][2] += n


def _rank(r: int) -> list[N]:
    # the job of test_replay_job_results: one collective over three ranks, 44 µs on each
    return [N(1, 10 + 10 * r, start=0),
            N(2, 5 + r, start=10 + 10 * r, deps=[1], is_cpu=False, stream=7, type=COMM_COLL_NODE),
            N(4, 4, start=40, deps=[2])]


def test_a_coupled_job_announces_its_phases_and_every_rank_of_the_per_rank_ones():
    rec = Record()
    job = replay_job({r: _rank(r) for r in range(3)}, collective="min", steps=rec)
    assert rec.phases == [
        ["reading 3 ranks", 1, 0],
        ["process groups and communication model", 1, 0],
        ["dependencies and lane order", 3, 3],
        ["rank plans", 3, 3],
        ["coupling the collectives", 1, 0],
        ["scheduling 9 nodes", 1, 0],
        ["per-rank results", 1, 0],
    ]
    plain = replay_job({r: _rank(r) for r in range(3)}, collective="min")
    assert job.replayed_us == plain.replayed_us == 44.0


def test_ranks_replayed_alone_and_the_simulator_rules_name_their_phases():
    rec = Record()
    replay_job({r: _rank(r) for r in range(2)}, couple=False, steps=rec)
    assert rec.phases[-1] == ["replaying each rank alone", 2, 2]
    rec = Record()
    replay_job({r: _rank(r) for r in range(2)}, mode="astrasim", steps=rec)
    assert [p[0] for p in rec.phases] == [
        "reading 2 ranks", "process groups and communication model", "dependencies and lane order",
        "replaying 6 nodes (ASTRA-sim rules)", "per-rank results"]


def test_rich_steps_complete_each_phase_when_the_next_begins():
    out = io.StringIO()
    bars = Progress(console=Console(file=out, width=80, force_terminal=False), auto_refresh=False)
    steps = RichSteps(bars)
    steps.phase("rank plans", 4)
    steps.advance()
    steps.advance(2)
    first = bars.tasks[0]
    assert (first.completed, first.total, first.finished) == (3, 4, False)
    steps.phase("coupling the collectives")
    assert bars.tasks[0].finished and bars.tasks[0].completed == 4
    steps.close()
    assert [(t.description, t.completed, t.total) for t in bars.tasks] == [
        ("rank plans", 4, 4), ("coupling the collectives", 1, 1)]
