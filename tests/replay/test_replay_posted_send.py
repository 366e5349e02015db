"""A send counts from when it was posted, not from its record (chakra.replay.coupling.post_lead).

tests/data/gloo_pipeline_3r is a real 3-stage gloo pipeline (trace_collection/collect.py --job pipeline
--world-size 3 --microbatches 3 --active 1 --hidden 32 --batch 12): each stage sends every micro-batch's
activations forward and its gradients back with blocking send/recv.  gloo posts the buffer inside
``c10d::send`` and only then starts the ``gloo:send`` record; on this run the issuing op of rank 1's
second gradient send was descheduled for 3.0 ms after posting, and rank 0's receive ended 40 µs after the
post, 2.9 ms before the record began.
"""

from __future__ import annotations

from pathlib import Path

from conftest import assert_replayed_within

from chakra.io import load_json
from chakra.pipeline import run_pipeline
from chakra.replay.coupling import post_lead
from chakra.replay.reader import load_graph

DATA = Path(__file__).resolve().parents[1] / "data" / "gloo_pipeline_3r"


def test_the_posted_sends_of_a_pipeline_keep_every_rank_at_its_measured_step(tmp_path):
    """Waiting for the records, the coupled replay put rank 0 at 53,511.8 µs for a measured 49,404.8
    (+8.31%; rank 1 +3.11%, rank 2 +0.70%); with the sends counted from their posts every rank replays
    within 2% of its measured step (-0.52%, -1.22%, -0.47%: each rank's own replay alone)."""
    run_pipeline(DATA, tmp_path, jobs=1, job_replay=True)
    rows = load_json(tmp_path / "summary.json")["ranks"]
    assert len(rows) == 3
    assert_replayed_within(rows, 0.02)


def test_the_post_is_the_issuing_ops_start(tmp_path):
    run_pipeline(DATA, tmp_path, jobs=1)
    g = load_graph(tmp_path / "gloo_pipeline_3r.1.et")
    index = {nid: i for i, nid in enumerate(g.ids)}
    i = index[366]                       # rank 1's second gradient send (gloo:send inside c10d::send 365)
    p, lead = post_lead(g, i)            # type: ignore[misc]
    assert (g.names[i], g.names[p], g.ids[p]) == ("gloo:send", "c10d::send", 365)
    assert lead == g.starts[i] - g.starts[p] == 2998.0
    recv = index[22]                     # a receive is not posted ahead of a record
    assert post_lead(g, recv) is None
