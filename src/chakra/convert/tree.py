"""Passes 1 and 2 of a conversion: node index, the ET tree (parents, pre-order, call-order keys) and timing
(start, exclusive duration per op); the start-order keys the later passes sort by."""

from __future__ import annotations

import logging
from typing import Any

from chakra.convert.columns import raw
from chakra.convert.plan import Plan, Timing, Tree, _num, _warn
from chakra.errors import TraceFormatError
from chakra.host.loader import self_parent_message
from chakra.host.model import OP, PROCESS_ROOT
from chakra.tunables import CORRUPT_TIME_US

log = logging.getLogger(__name__)


# -- 1. index and tree ----------------------------------------------------------------------------
def index_ops(cv: Plan) -> None:
    index = cv.index
    if len(index) == cv.n:   # filled by load_columns, which checked for duplicates
        return
    index.clear()
    for i, nid in enumerate(cv.ids):
        if nid in index:
            raise TraceFormatError(
                f"duplicate node id {nid} (positions {index[nid]} and {i})", cv.trace.path)
        index[nid] = i


def build_tree(cv: Plan) -> Tree:
    ids, index, kinds = cv.ids, cv.index, cv.kinds
    par = [-1] * cv.n
    rf_ids = cv.cols.rf_ids
    kids: dict[int, list[int]] = {}
    orphans = self_parents = 0
    first = ""
    parents = cv.cols.parents
    for i, p in enumerate(map(index.get, parents)):   # the parent's position, looked up in C
        if p == i and kinds[i] != PROCESS_ROOT:
            self_parents += 1
        if p is not None and p != i:
            par[i] = p
            ch = kids.get(p)
            if ch is None:
                kids[p] = [i]
            else:
                ch.append(i)
        elif p is None and kinds[i] != PROCESS_ROOT and parents[i] not in (0, ids[i]):
            orphans += 1
            if not first:
                first = f"node {ids[i]} -> missing parent {parents[i]}"
    if self_parents:
        _warn(cv.stats, self_parent_message(cv.trace.path, self_parents, cv.n))
    if orphans:
        _warn(cv.stats, f"{cv.trace.path}: {orphans} node(s) name a parent that is not in the trace "
                          f"(e.g. {first}); they keep no control dependency")

    def key(i: int) -> tuple[bool, int, int]:
        rf = rf_ids[i]
        return (rf is None, rf or 0, ids[i])

    pos = [0] * cv.n
    seen = [False] * cv.n
    counter = 0
    stack = [i for i in range(cv.n - 1, -1, -1) if par[i] < 0]
    while stack:
        i = stack.pop()
        if seen[i]:
            continue
        seen[i] = True
        pos[i] = counter
        counter += 1
        ch = kids.get(i)
        if ch:
            if len(ch) > 1:
                ch.sort(key=key, reverse=True)
            stack.extend(ch)
    if counter < cv.n:  # parent cycles: no root reaches them
        loops = [i for i in range(cv.n) if not seen[i]]
        _warn(cv.stats, f"{cv.trace.path}: {len(loops)} node(s) are in a parent cycle "
                          f"(e.g. id {ids[loops[0]]}); "
                          "their control dependencies are dropped")
        for i in loops:
            par[i] = -1
            pos[i] = counter
            counter += 1
    preorder = [0] * cv.n
    for i, p in enumerate(pos):
        preorder[p] = i
    # Call order without timestamps: record function ids are handed out when a call starts, one
    # counter per process, so they order calls across threads too (the ET tree does not: gloo
    # worker-thread records hang under whatever record was open).  An op without rf_id (GPU nodes,
    # some roots) takes its parent's; pre-order breaks ties.
    rfk = [0] * cv.n
    for i in preorder:
        rf = rf_ids[i]
        if type(rf) is int:
            rfk[i] = rf
        elif par[i] >= 0:
            rfk[i] = rfk[par[i]]
    return Tree(par, pos, preorder, rfk)


# -- 2. timing ------------------------------------------------------------------------------------
def compute_timing(cv: Plan, tree: Tree) -> Timing:
    n = cv.n
    par, is_gpu, ids, kinds = tree.par, cv.is_gpu, cv.ids, cv.kinds
    ts: list[float | None] = [None] * n
    start = [0] * n
    c = cv.cols
    raw_ts, raw_dur, raw_excl, threads = c.ts, c.dur, c.excl, c.threads
    ts_x, dur_x, excl_x = c.ts_x, c.dur_x, c.excl_x
    lo: float | None = None
    hi: float | None = None
    bad: list[int] = []  # ids of nodes whose ts/dur is NaN, infinite, negative or out of range
    t: Any   # ts, dur, exclusive_dur: a float column's value, else the raw value (any JSON value or None)
    d: Any
    e: Any
    L = CORRUPT_TIME_US
    dur = [0] * n
    missing_threads: set[Any] = set()   # threads with a timed op that has no exclusive_dur
    # One pass: validity (for the warning), the span, and the durations (_num inlined throughout: a
    # million calls).  Durations: a GPU op its dur, a CPU op (OP kind) its exclusive_dur, else below.
    for i, t in enumerate(raw_ts):
        if t != t:   # not a float: the raw value (columns.raw)
            t = ts_x.get(i)
        d = raw_dur[i]
        if d != d:
            d = dur_x.get(i)
        tt = type(d)
        d_ok = (tt is float or tt is int) and -L < d < L
        tt = type(t)
        t_ok = (tt is float or tt is int) and -L < t < L
        if t_ok:
            ts[i] = t
            if d_ok:
                end = t + d
                if d < 0:
                    bad.append(ids[i])
            else:
                end = t
                if d is not None:
                    bad.append(ids[i])
            if lo is None or t < lo:
                lo = t
            if hi is None or end > hi:
                hi = end
        elif t is not None:
            bad.append(ids[i])
        e = raw_excl[i]
        if e != e:
            e = excl_x.get(i)
        tt = type(e)
        e_ok = (tt is float or tt is int) and -L < e < L
        if e is not None and not (e_ok and e >= 0):
            bad.append(ids[i])
        if is_gpu[i]:
            if d_ok and d > 0:
                dur[i] = int(d + 0.5)
        elif kinds[i] == OP:
            if e_ok:
                if e > 0:
                    dur[i] = int(e + 0.5)
            elif t_ok and d_ok:
                missing_threads.add(threads[i])
    if bad:
        ids = sorted(set(bad))
        _warn(cv.stats, f"{cv.trace.path}: {len(ids)} node(s) have a NaN, infinite, negative or "
                          f"out-of-range ts/dur (node ids {ids[:5]}{' ...' if len(ids) > 5 else ''}): "
                          "read as missing or 0")
    cv.stats.timed = lo is not None
    if lo is None:
        _warn(cv.stats, f"{cv.trace.path}: no timing fields (a bare host ET, not ET+): "
                          "every duration is 0")
        return Timing(ts, start, [0] * n, 0.0, 0.0, 0.0)
    measured = cv.trace.extra.get("measured")
    origin = lo
    if isinstance(measured, dict) and _num(measured.get("start_us")):
        origin = measured["start_us"]
    assert hi is not None   # (set with lo)
    timing = Timing(ts, start, dur, float(origin), float(lo), float(hi))
    for i in tree.preorder:
        t = ts[i]
        if t is not None:
            v = t - origin
            start[i] = int(v + 0.5) if v > 0 else 0
        elif par[i] >= 0:
            start[i] = start[par[i]]
    if missing_threads:
        _fill_exclusive(cv, tree, ts, dur, missing_threads)
    return timing


def _fill_exclusive(cv: Plan, tree: Tree, ts: list[float | None], dur: list[int],
                    missing_threads: set[Any]) -> None:
    """Exclusive time of the timed ops of each thread that lacks some, by a stack sweep (into ``dur``)."""
    is_gpu, kinds, threads = cv.is_gpu, cv.kinds, cv.cols.threads
    raw_dur, raw_excl, dur_x, excl_x = cv.cols.dur, cv.cols.excl, cv.cols.dur_x, cv.cols.excl_x
    need: dict[Any, list[tuple[float, float, int, int]]] = {th: [] for th in missing_threads}
    pos = tree.pos
    for i, t in enumerate(ts):
        if t is None or is_gpu[i] or kinds[i] != OP:
            continue
        items = need.get(threads[i])
        if items is None:
            continue
        d = raw(raw_dur, dur_x, i)
        if _num(d):
            items.append((t, d, pos[i], i))
    for items in need.values():
        for i, x in _exclusive(items).items():
            if not _num(raw(raw_excl, excl_x, i)):
                dur[i] = int(x + 0.5) if x > 0 else 0


def time_key(cv: Plan, tree: Tree, tm: Timing, i: int) -> tuple[float, float, int]:
    """Start order of timed ops: earlier first, then the longer (enclosing) one, then the ET parent."""
    d: Any = cv.cols.dur[i]   # (the float column's value, else the raw one)
    if d != d:
        d = cv.cols.dur_x.get(i)
    tt = type(d)
    return (tm.ts[i], -d if (tt is float or tt is int) and -CORRUPT_TIME_US < d < CORRUPT_TIME_US else 0.0,
            tree.pos[i])  # type: ignore[return-value]


def starts_before(cv: Plan, tree: Tree, tm: Timing, p: int, i: int) -> bool:
    """Whether ``p`` starts before ``i`` by the same keys the call-order chains use."""
    if tm.ts[p] is not None and tm.ts[i] is not None:
        return time_key(cv, tree, tm, p) < time_key(cv, tree, tm, i)
    pos, rfk = tree.pos, tree.rfk
    return (rfk[p], pos[p]) < (rfk[i], pos[i])



def _exclusive(items: list[tuple[float, float, int, int]]) -> dict[int, float]:
    """Exclusive time per op of one thread by time nesting: ``(ts, dur, pos, index)`` -> ``{index: µs}``.

    Sorted by start (longer first, then call order); a stack holds the open
    ops; each op's time is taken off the op directly enclosing it (clipped to
    that op's end, so a child that overruns its parent by a rounding error
    does not make the parent negative).
    """
    items.sort(key=lambda x: (x[0], -x[1], x[2]))
    excl: dict[int, float] = {}
    stack: list[tuple[float, int]] = []
    for t, d, _, i in items:
        end = t + d
        while stack and stack[-1][0] <= t:
            stack.pop()
        excl[i] = d
        if stack:
            pend, pi = stack[-1]
            excl[pi] -= min(end, pend) - t
        stack.append((end, i))
    return excl
