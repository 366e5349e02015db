"""The layout ``chakra extrapolate`` reads off a job's process groups (chakra.job.replicas), worked out by
hand: which groups are data-parallel, which lie inside a replica, the groups of the larger job, the
measured rank each new rank is modelled on, and the refusal of a size that is no whole number of
replicas."""

from __future__ import annotations

import pytest

from chakra.errors import UsageError
from chakra.job.replicas import find_layout, grow

# chakra_generator --workloads tp --tp-size 2 --num-npus 4: model groups inside, data groups across
TP_DP = {"1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}


def test_a_tp_x_dp_job_grows_its_data_groups_and_copies_its_model_groups():
    lay = find_layout(TP_DP, 4)
    assert (lay.t, lay.d, lay.replica, lay.outer) == (2, 2, 2, 1)
    assert lay.dp == ["3", "4"] and lay.inside == {"1": 0, "2": 1} and lay.world == []
    g = grow(lay, 8)
    # ranks 4-7 are replicas 2 and 3, copies of replicas 0 and 1; their model groups get pg 5 and 6
    assert g.groups == {"3": (0, 2, 4, 6), "4": (1, 3, 5, 7), "1": (0, 1), "2": (2, 3), "5": (4, 5),
                        "6": (6, 7)}
    assert g.renamed == {("1", 2): "5", ("2", 3): "6"}
    assert [lay.source(r, 8) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_the_measured_size_changes_no_group():
    lay = find_layout(TP_DP, 4)
    assert grow(lay, 4).groups == dict(TP_DP) and not grow(lay, 4).renamed


def test_a_pure_data_parallel_job_is_replicas_of_one_rank():
    lay = find_layout({"0": ()}, 2)               # the world, as a table without ranks says it
    assert (lay.replica, lay.d, lay.world, lay.dp) == (1, 2, ["0"], [])
    g = grow(lay, 1024)
    assert g.groups == {"0": tuple(range(1024))}
    assert lay.source(1023, 1024) == 1 and lay.source(6, 1024) == 0
    assert grow(find_layout({}, 3), 7).groups == {}     # no table: any size


def test_the_world_and_groups_inside_a_replica_without_data_groups():
    # 8 ranks, the world and two groups of 4: replicas of 4 joined by the world (an HSDP shard layout)
    lay = find_layout({"0": tuple(range(8)), "1": (0, 1, 2, 3), "2": (4, 5, 6, 7)}, 8)
    assert (lay.replica, lay.dp, lay.inside) == (4, [], {"1": 0, "2": 1})
    g = grow(lay, 16)
    assert g.groups["0"] == tuple(range(16))
    assert g.groups["3"] == (8, 9, 10, 11) and g.groups["4"] == (12, 13, 14, 15)


def test_dp_groups_name_another_layout():
    # the same groups read with the model groups as the data-parallel ones: a pipeline-like layout where the
    # replica index is not outermost (rank = o*2 + k): rank (o, k) of 8 ranks is o*4 + k
    lay = find_layout(TP_DP, 4, dp_groups=["1", "2"])
    assert (lay.t, lay.d, lay.outer) == (1, 2, 2)
    assert lay.inside == {"3": 0, "4": 1}
    g = grow(lay, 8)
    assert g.groups == {"1": (0, 1, 2, 3), "2": (4, 5, 6, 7), "3": (0, 4), "4": (1, 5), "5": (2, 6),
                        "6": (3, 7)}
    assert [lay.source(r, 8) for r in range(8)] == [0, 1, 0, 1, 2, 3, 2, 3]


def test_dp_groups_none_makes_the_smallest_replica_that_holds_every_group():
    lay = find_layout({"0": (), "1": (0, 1), "2": (2, 3)}, 4, dp_groups=[])
    assert (lay.replica, lay.dp, lay.inside) == (2, [], {"1": 0, "2": 1})


def test_refusals_say_why():
    lay = find_layout(TP_DP, 4)
    with pytest.raises(UsageError, match=r"--ranks 7 is not a multiple of the replica size 2 .* e\.g\. 6 or "
                                         "8"):
        grow(lay, 7)
    with pytest.raises(UsageError, match="grows a job; the measured job has 4 ranks"):
        grow(lay, 2)
    with pytest.raises(UsageError, match="no such process group"):
        find_layout(TP_DP, 4, dp_groups=["9"])
    with pytest.raises(UsageError, match=r"group '1' \[0, 1, 3\] is not a data-parallel group"):
        find_layout({"1": (0, 1, 3), "2": (2,)}, 4, dp_groups=["1"])
    with pytest.raises(UsageError, match=r"group '1' \[0, 1, 2, 3\] and group '3' \[0, 2\] differ"):
        find_layout({"1": (0, 1, 2, 3), "3": (0, 2)}, 8, dp_groups=["1", "3"])
    # data groups of ranks 0, 1 and 2, 3 leave the model group 1, 2 spanning two replicas
    with pytest.raises(UsageError, match=r"group '5' \[1, 2\] spans replicas \[0, 1\] without being"):
        find_layout({"3": (0, 1), "4": (2, 3), "5": (1, 2)}, 4, dp_groups=["3", "4"])
    with pytest.raises(UsageError, match="lists rank 4, not one of the job's 4 ranks"):
        find_layout({"1": (0, 4)}, 4)


def test_the_groups_descriptions_and_send_recv_pairs_say_what_the_shape_cannot():
    from chakra.job.replicas import Hints

    # Megatron-style descriptions: groups 1, 2 of ranks 0, 1 and 2, 3 are the data-parallel ones, 3 and 4 the
    # pipeline (a layout with the stage outermost), which the shape alone would read the other way round
    descs = {"1": "DATA_PARALLEL_GROUP", "2": "DATA_PARALLEL_GROUP", "3": "PIPELINE_MODEL_PARALLEL_GROUP",
             "4": "PIPELINE_MODEL_PARALLEL_GROUP"}
    lay = find_layout(TP_DP, 4, hints=Hints(descs=descs))
    assert (lay.t, lay.d, lay.dp) == (1, 2, ["1", "2"]) and "by their descriptions" in lay.how
    assert find_layout(TP_DP, 4).dp == ["3", "4"]
    # cpu_gloo/tp_like_2r's table: the world, a "tp_subgroup" of both ranks, one group per rank; a
    # send/recv between the two: one replica of 2 ranks, which the world joins
    groups = {"0": (), "1": (0, 1), "2": (0,), "3": (1,)}
    hints = Hints(descs={"0": "default_pg", "1": "tp_subgroup", "2": "solo_0", "3": "solo_1"}, pairs={(0, 1)})
    lay = find_layout(groups, 2, hints=hints)
    assert (lay.replica, lay.world, lay.inside) == (2, ["0"], {"1": 0, "2": 0, "3": 0})
    assert grow(lay, 4).groups == {"0": (0, 1, 2, 3), "1": (0, 1), "2": (0,), "3": (1,), "4": (2, 3),
                                   "5": (2,), "6": (3,)}
    # without the description and the pair, "1" would be a second world and the ranks replicas of one
    assert find_layout(groups, 2).replica == 1
