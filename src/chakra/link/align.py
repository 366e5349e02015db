"""Align two token sequences (operator names in execution order), near-linearly.

Why not difflib: its matcher is quadratic on long repetitive inputs (a training
step repeats the same few hundred operator names thousands of times), and a
million-op trace would take hours.  The two sequences we align are recordings of
the same execution, so they are nearly identical: a few events missing on one
side, a few extra on the other, sometimes a block more.  The algorithm:

1. strip the common prefix and suffix of the window (identical sequences are
   done here, in one linear pass);
2. anchor on tokens that occur exactly once in both halves of the window
   (patience diff): they cannot be paired wrongly; keep the longest chain of
   them increasing on both sides (O(p log p) LIS) and repeat in the gaps
   (explicit work stack, no recursion);
3. a window without such anchors (periodic input: every name repeats every
   iteration) is walked in lock-step; at a mismatch the walk re-synchronises at
   the nearest offsets ``(di, dj)`` (smallest ``di + dj``) where the next K
   tokens agree, searching a look-ahead that grows geometrically.  K-token
   context disambiguates positions inside an iteration; the nearest offset is
   the right one for the small gaps real traces have.

4. a repair pass re-aligns exactly (small DP) the few stretches where both
   sides have unmatched tokens close together: the signature of a walk that
   resumed one period off.

Cost: linear for identical input, O(n + edits * lookahead) otherwise.  The
result is a list of index pairs ``(i, j)`` with ``a[i] == b[j]``, strictly
increasing in both.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Sequence

from chakra.tunables import ALIGN_DP_CELLS, ALIGN_REPAIR_CELLS, ALIGN_REPAIR_RADIUS, ALIGN_RESYNC_STEPS


def align_sequences(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Matched index pairs between ``a`` and ``b`` (see module doc)."""
    pairs: list[tuple[int, int]] = []
    stack: list[tuple[int, int, int, int]] = [(0, len(a), 0, len(b))]
    while stack:
        a_lo, a_hi, b_lo, b_hi = stack.pop()
        while a_lo < a_hi and b_lo < b_hi and a[a_lo] == b[b_lo]:
            pairs.append((a_lo, b_lo))
            a_lo += 1
            b_lo += 1
        while a_lo < a_hi and b_lo < b_hi and a[a_hi - 1] == b[b_hi - 1]:
            a_hi -= 1
            b_hi -= 1
            pairs.append((a_hi, b_hi))
        if a_lo == a_hi or b_lo == b_hi:
            continue
        if (a_hi - a_lo) * (b_hi - b_lo) <= ALIGN_DP_CELLS:
            pairs.extend(_lcs(a, b, a_lo, a_hi, b_lo, b_hi))
            continue
        anchors = _unique_anchors(a, b, a_lo, a_hi, b_lo, b_hi)
        if not anchors:
            pairs.extend(_resync_walk(a, b, a_lo, a_hi, b_lo, b_hi))
            continue
        prev_a, prev_b = a_lo, b_lo
        for i, j in anchors:
            pairs.append((i, j))
            if i > prev_a and j > prev_b:
                stack.append((prev_a, i, prev_b, j))
            prev_a, prev_b = i + 1, j + 1
        if a_hi > prev_a and b_hi > prev_b:
            stack.append((prev_a, a_hi, prev_b, b_hi))
    pairs.sort()
    return _repair(a, b, pairs)


# ---- repair pass -------------------------------------------------------------------------------------


def _repair(
    a: Sequence[Hashable], b: Sequence[Hashable], pairs: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Re-align exactly the short stretches where both sides have unmatched tokens close together.

    The lock-step walk decides locally; on periodic input two edits close together can make it
    resume one period off (``m m s`` skipped on one side, the next period shifted).  That leaves
    unmatched tokens on *both* sides within a few positions, which a lone missing or extra
    event never does.  Those stretches (merged, with ``ALIGN_REPAIR_RADIUS`` matched pairs around
    each gap) get an exact LCS; the result replaces the walk's pairs when it is longer.
    """
    n = len(pairs)
    ext = [(-1, -1), *pairs, (len(a), len(b))]
    # gap k lies between ext[k] and ext[k + 1]
    gap_a = [ext[k + 1][0] - ext[k][0] - 1 for k in range(n + 1)]
    gap_b = [ext[k + 1][1] - ext[k][1] - 1 for k in range(n + 1)]
    windows: list[list[int]] = []
    for k in range(n + 1):
        if not (gap_a[k] or gap_b[k]):
            continue
        lo, hi = max(0, k - ALIGN_REPAIR_RADIUS), min(n + 1, k + 1 + ALIGN_REPAIR_RADIUS)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], hi)
        else:
            windows.append([lo, hi])
    if not windows:
        return pairs
    out: list[tuple[int, int]] = []
    done = 0  # ext positions below this are already in out (ext[0] is the sentinel)
    for lo, hi in windows:
        # both sides must have an unmatched token somewhere in the window
        if not any(gap_a[lo:hi]) or not any(gap_b[lo:hi]):
            continue
        a_lo, b_lo = ext[lo][0] + 1, ext[lo][1] + 1
        a_hi, b_hi = ext[hi][0], ext[hi][1]
        if (a_hi - a_lo) * (b_hi - b_lo) > ALIGN_REPAIR_CELLS:
            continue
        better = _lcs(a, b, a_lo, a_hi, b_lo, b_hi)
        if len(better) <= hi - lo - 1:
            continue
        out.extend(ext[max(done, 1) : lo + 1])
        out.extend(better)
        done = hi
    if done == 0:
        return pairs
    out.extend(ext[max(done, 1) : n + 1])
    return out


def _unique_anchors(
    a: Sequence[Hashable], b: Sequence[Hashable], a_lo: int, a_hi: int, b_lo: int, b_hi: int
) -> list[tuple[int, int]]:
    """Tokens occurring once on each side of the window, LIS-filtered."""
    pos_a: dict[Hashable, int] = {}
    for i in range(a_lo, a_hi):
        tok = a[i]
        pos_a[tok] = -1 if tok in pos_a else i
    pos_b: dict[Hashable, int] = {}
    for j in range(b_lo, b_hi):
        tok = b[j]
        if tok in pos_a:
            pos_b[tok] = -1 if tok in pos_b else j
    cand = sorted((pos_a[tok], j) for tok, j in pos_b.items() if j >= 0 and pos_a[tok] >= 0)
    return _lis(cand) if cand else []


def _lis(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Longest subsequence of ``pairs`` (sorted by i, distinct i) strictly increasing in j."""
    tails: list[int] = []  # tails[k] = smallest j ending an increasing run of length k+1
    tail_idx: list[int] = []  # index into pairs of that tail
    back: list[int] = [-1] * len(pairs)
    for p, (_, j) in enumerate(pairs):
        k = bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_idx.append(p)
        else:
            tails[k] = j
            tail_idx[k] = p
        back[p] = tail_idx[k - 1] if k > 0 else -1
    out: list[tuple[int, int]] = []
    p = tail_idx[-1] if tail_idx else -1
    while p >= 0:
        out.append(pairs[p])
        p = back[p]
    out.reverse()
    return out


def _lcs(
    a: Sequence[Hashable], b: Sequence[Hashable], a_lo: int, a_hi: int, b_lo: int, b_hi: int
) -> list[tuple[int, int]]:
    """Exact LCS of a small window (at most ALIGN_DP_CELLS cells)."""
    na, nb = a_hi - a_lo, b_hi - b_lo
    # table[i][j] = LCS length of a[a_lo+i:], b[b_lo+j:]
    table = [[0] * (nb + 1) for _ in range(na + 1)]
    for i in range(na - 1, -1, -1):
        row, nxt = table[i], table[i + 1]
        ai = a[a_lo + i]
        for j in range(nb - 1, -1, -1):
            if ai == b[b_lo + j]:
                row[j] = nxt[j + 1] + 1
            else:
                row[j] = row[j + 1] if row[j + 1] >= nxt[j] else nxt[j]
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < na and j < nb:
        if a[a_lo + i] == b[b_lo + j]:
            out.append((a_lo + i, b_lo + j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def _resync_walk(
    a: Sequence[Hashable], b: Sequence[Hashable], a_lo: int, a_hi: int, b_lo: int, b_hi: int
) -> list[tuple[int, int]]:
    """Lock-step walk that re-synchronises at the nearest agreeing context."""
    out: list[tuple[int, int]] = []
    i, j = a_lo, b_lo
    while i < a_hi and j < b_hi:
        if a[i] == b[j]:
            out.append((i, j))
            i += 1
            j += 1
            continue
        found = _resync(a, b, i, a_hi, j, b_hi)
        if found is None:
            break
        i, j = found
    return out


def _resync(
    a: Sequence[Hashable], b: Sequence[Hashable], i: int, a_hi: int, j: int, b_hi: int
) -> tuple[int, int] | None:
    """Nearest (i', j') >= (i, j) (least (i'-i)+(j'-j)) where K tokens agree."""
    for k, look in ALIGN_RESYNC_STEPS:
        k = min(k, a_hi - i, b_hi - j)
        span_a = (a_hi - i) if look is None else min(look, a_hi - i)
        span_b = (b_hi - j) if look is None else min(look, b_hi - j)
        first_b: dict[tuple[Hashable, ...], int] = {}
        for dj in range(span_b - k + 1):
            key = tuple(b[j + dj : j + dj + k])
            if key not in first_b:
                first_b[key] = dj
        best: tuple[int, int] | None = None
        for di in range(span_a - k + 1):
            if best is not None and di >= best[0] + best[1]:
                break
            at_b = first_b.get(tuple(a[i + di : i + di + k]))
            if at_b is not None and (best is None or di + at_b < best[0] + best[1]):
                best = (di, at_b)
        if best is not None:
            return i + best[0], j + best[1]
    return None
