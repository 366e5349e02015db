"""The sequence aligner behind name matching: exact answers on small cases, tolerance on big ones."""

from __future__ import annotations

import random

from chakra.link.align import align_sequences


def _valid(a: list[str], b: list[str], pairs: list[tuple[int, int]]) -> None:
    pi = pj = -1
    for i, j in pairs:
        assert i > pi and j > pj, (i, j, pi, pj)
        assert a[i] == b[j]
        pi, pj = i, j


def test_identical_sequences_match_one_to_one() -> None:
    a = ["x", "y", "x", "z"]
    assert align_sequences(a, list(a)) == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_extra_and_missing_events() -> None:
    host = ["ProfilerStep#1", "aten::mm", "aten::add", "aten::relu", "aten::mm"]
    kineto = ["aten::mm", "aten::empty", "aten::add", "aten::mm"]  # no step, extra empty, no relu
    pairs = align_sequences(host, kineto)
    assert pairs == [(1, 0), (2, 2), (4, 3)]


def test_empty_inputs() -> None:
    assert align_sequences([], ["a"]) == []
    assert align_sequences(["a"], []) == []
    assert align_sequences(["a"], ["b"]) == []


def test_unique_anchor_then_resync_inside_the_gaps() -> None:
    a = ["a", "b"] * 50 + ["U"] + ["c", "d"] * 50
    b = ["b"] + ["a", "b"] * 50 + ["x", "U", "d"] + ["c", "d"] * 50
    pairs = align_sequences(a, b)
    _valid(a, b, pairs)
    assert (100, 102) in pairs  # the unique "U"
    assert pairs[:2] == [(0, 1), (1, 2)]  # the extra leading "b" is skipped, not matched
    assert len(pairs) == 100 + 1 + 100


def test_periodic_sequence_with_indels_keeps_alignment() -> None:
    # 200 iterations of a 300-op pattern without unique names: 0.5% deleted on one side, 0.5% added
    rng = random.Random(7)
    pattern = [f"aten::op{rng.randint(0, 60)}" for _ in range(300)]
    a = pattern * 200
    b_src: list[tuple[str, int]] = [(x, i) for i, x in enumerate(a) if rng.random() > 0.005]
    for _ in range(300):
        b_src.insert(rng.randint(0, len(b_src)), ("aten::empty", -1))
    b = [x for x, _ in b_src]
    origin = [o for _, o in b_src]
    pairs = align_sequences(a, b)
    _valid(a, b, pairs)
    kept = sum(1 for o in origin if o >= 0)
    correct = sum(1 for i, j in pairs if origin[j] == i)
    # nearly every surviving op is matched to its own counterpart, not to one a period away
    assert correct >= 0.99 * kept
    assert len(pairs) <= kept  # the extra "aten::empty" events never match: not in a
