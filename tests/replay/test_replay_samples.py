"""Replay of the real Chakra ET samples in the corpus (chakra_et/)."""

from __future__ import annotations

import pytest

from chakra.replay import ReplayError, load_graph, replay_file, replay_job, replay_rank
from chakra.replay.graph import COMM_STREAM

COLLECTIVES = ("all_gather", "all_reduce", "all_to_all", "reduce_scatter")


@pytest.mark.parametrize("mode", ["lanes", "astrasim"])
@pytest.mark.parametrize("coll", COLLECTIVES)
def test_astrasim_microbench_whole_job(corpus, coll, mode):
    files = sorted((corpus / "chakra_et" / "astrasim_microbench").glob(f"{coll}_4npus_1MB.*.et"))
    assert len(files) == 4
    job = replay_job(files, mode=mode)
    # ranks come from the file names; each file holds one collective whose node id is the rank
    assert sorted(job.ranks) == [0, 1, 2, 3]
    for rank, res in job.ranks.items():
        assert res.graph.ids == [rank]
        assert res.graph.lanes == [("gpu", 0, COMM_STREAM)]   # a collective that says nothing of where
    # one world collective matched across the 4 ranks; the files carry duration 0 and nothing to fit a
    # communication model on: the default model times it, 10 µs + F * 1 MiB / 10 GB/s with F the
    # algorithm's factor for 4 ranks (all_reduce 2*3/4, the others 3/4)
    factor = 1.5 if coll == "all_reduce" else 0.75
    expected = 10 + factor * (1 << 20) / 10_000
    assert job.groups == 1
    assert job.replayed_us == pytest.approx(expected)
    for rank, res in job.ranks.items():
        assert list(res.completion_lines()) == [f"[rank {rank}] Node ID {rank} completed at "
                                                f"{int(expected + 0.5)}us"]
    # with a given model: 5 µs + 25 GB/s
    from chakra.replay.whatif import WhatIf

    given = replay_job(files, mode=mode, whatif=WhatIf(model=(5.0, 25.0)))
    assert given.replayed_us == pytest.approx(5 + factor * (1 << 20) / 25_000)


def test_astrasim_microbench_ranks_do_not_pair_across_different_collective_counts(corpus):
    d = corpus / "chakra_et" / "astrasim_microbench"
    # 4 ranks of all_reduce + a fifth file claiming rank 0 again is refused
    files = sorted(d.glob("all_reduce_4npus_1MB.*.et")) + [d / "all_gather_4npus_1MB.0.et"]
    with pytest.raises(Exception, match="two inputs claim rank 0"):
        replay_job(files)


def test_real_2023_file_dangling_deps_and_cycles_are_reported(corpus):
    path = corpus / "chakra_et" / "real_2023_rank0.et.gz"
    g = load_graph(path)
    assert len(g) == 3664
    pattern = r"1277 dependencies point to 210 node id\(s\) not in the file: 2, 3, 429"
    with pytest.raises(ReplayError, match=pattern):
        replay_rank(g)
    # the 2023 converter also wrote CPU op -> its own kernel -> CPU op loops
    with pytest.raises(ReplayError, match=r"dependency cycle: node 3317 -> 3318 -> 3317 .* 2283 node\(s\)"):
        replay_file(path, missing="ignore")
