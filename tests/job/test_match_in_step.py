"""chakra.job.match: the k-th-with-k-th path of a group's sequences gives what the offset search gives.

The oracle below is the order path written out (each rank placed against the longest sequence at the offset
``match._align`` chooses, only the places every rank holds kept, those whose types disagree dropped); it is
compared with ``match_job`` on random groups, those the short path takes and those it must leave to the
search (different lengths, a disagreeing type or size, both sides timed)."""

from __future__ import annotations

import random

import pytest

from chakra.job import match
from chakra.job.match import Comm, RankComms, match_job
from chakra.schema import COMM_COLL_NODE

TYPES = (0, 6)        # all_reduce, all_to_all
SIZES = (100, 200)


def _comm(pos: int, ctype: int, size: int, end: float | None) -> Comm:
    return Comm(pos=pos, node_id=pos, kind=COMM_COLL_NODE, comm_type=ctype, size=size, pg="", end=end)


def _oracle(seqs: dict[int, list[Comm]]) -> list[dict[int, int]]:
    ranks = sorted(seqs)
    ref_rank = max(ranks, key=lambda r: (len(seqs[r]), -r))
    ref = seqs[ref_rank]
    off = {r: 0 if r == ref_rank else match._align(ref, seqs[r], match._same_collective) for r in ranks}
    lo = max(max(0, off[r]) for r in ranks)
    hi = min(min(len(ref), off[r] + len(seqs[r])) for r in ranks)
    out = []
    for p in range(lo, hi):
        t = {r: seqs[r][p - off[r]] for r in ranks}
        if all(t[r].comm_type == t[ref_rank].comm_type for r in ranks):
            out.append({r: c.pos for r, c in t.items()})
    return out


def _random_group(rng: random.Random, kind: str) -> dict[int, list[Comm]]:
    n_ranks = rng.randint(2, 4)
    n = rng.randint(1, 12)
    sig = [(rng.choice(TYPES), rng.choice(SIZES)) for _ in range(n)]
    seqs: dict[int, list[Comm]] = {}
    for r in range(n_ranks):
        mine = list(sig)
        if kind == "lengths" and r == n_ranks - 1:
            mine = mine[rng.randint(1, 2):] if n > 2 else mine + mine
        elif kind == "signature" and r > 0:
            k = rng.randrange(n)
            t, s = mine[k]
            mine[k] = (t, SIZES[1 - SIZES.index(s)]) if rng.random() < 0.5 else (TYPES[1 - TYPES.index(t)], s)
        timed = kind == "timed" or (kind == "in_step" and r == 0 and rng.random() < 0.5)
        seqs[r] = [_comm(1000 * r + i, t, s, 10.0 * i + rng.random() * 15 if timed else None)
                   for i, (t, s) in enumerate(mine)]
    return seqs


@pytest.mark.parametrize("kind", ["in_step", "lengths", "signature", "timed"])
def test_match_job_equals_the_offset_search_on_random_groups(kind):
    rng = random.Random(f"match-{kind}")
    short = 0
    for _ in range(200):
        seqs = _random_group(rng, kind)
        ref_rank = max(seqs, key=lambda r: (len(seqs[r]), -r))
        in_step = match._in_step(seqs, ref_rank)
        short += in_step
        m = match_job([RankComms(r, seqs[r]) for r in sorted(seqs)])
        got = [{r: c.pos for r, c in inst.members.items()} for inst in m.instances]
        assert got == _oracle(seqs)
    # the short path takes every in-step group (one timed rank is not "both sides timed") and no other
    assert short == (200 if kind == "in_step" else 0)


def test_in_step_groups_keep_every_collective_k_th_with_k_th():
    seqs = {r: [_comm(10 * r + i, TYPES[i % 2], 100, None) for i in range(5)] for r in range(3)}
    assert match._in_step(seqs, 0)
    m = match_job([RankComms(r, seqs[r]) for r in range(3)])
    assert [{r: c.pos for r, c in inst.members.items()} for inst in m.instances] == \
        [{0: i, 1: 10 + i, 2: 20 + i} for i in range(5)]
    assert not m.left_out and not m.notes
