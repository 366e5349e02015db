"""Pass 4 and 5 of a conversion: dependencies (call order, launcher, stream, process group by launch,
gloo pairs, ET+ inter-thread and sync deps, ET parents), thread timing, and the output order (the cycle
check)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

from chakra import schema as pb
from chakra.convert.graph import CycleError, kahn_order, topological_order
from chakra.convert.plan import (
    Comm,
    Deps,
    Plan,
    Timing,
    Tree,
    _warn,
)
from chakra.convert.threads import ThreadInput, ThreadTiming, thread_timing
from chakra.convert.tree import starts_before, time_key
from chakra.errors import TraceFormatError
from chakra.host.model import METADATA, OP
from chakra.tunables import CORRUPT_TIME_US

log = logging.getLogger(__name__)


# -- 4. dependencies ------------------------------------------------------------------------------
def chain_by_start(tree: Tree, tm: Timing, cv: Plan, data: list[list[int]], members: list[int]) -> None:
    """Order ``members`` by start (call order when some are untimed); each depends on the previous."""
    ts, pos, rfk = tm.ts, tree.pos, tree.rfk
    starts = list(map(ts.__getitem__, members))
    if None not in starts and len(set(starts)) == len(starts):
        # distinct starts: the first key decides alone (C-level key, no Python call per member)
        members.sort(key=cast(Sequence[float], ts).__getitem__)   # (every member is timed here)
    elif None not in starts:
        durs, dur_x = cv.cols.dur, cv.cols.dur_x
        L = CORRUPT_TIME_US

        def key(i: int) -> tuple[float, float, int]:   # _time_key, with its lookups hoisted
            d: Any = durs[i]   # (the float column's value, else the raw one)
            if d != d:
                d = dur_x.get(i)
            tt = type(d)
            return (ts[i], -d if (tt is float or tt is int) and -L < d < L else 0.0,  # type: ignore[return-value]
                    pos[i])

        members.sort(key=key)
    else:
        members.sort(key=lambda i: (rfk[i], pos[i]))
    prev = members[0]
    for i in members[1:]:
        data[i].append(prev)
        prev = i


def chain_by_launch(cv: Plan, tree: Tree, tm: Timing, cm: Comm, dp: Deps, members: list[int], chain: int = 0
                    ) -> None:
    """Chain comm nodes by launch: a GPU node by its launcher's start, a host record by its own; then
    the recorded sequence number; each depends on the previous.  The edges and each member's place
    (``chain``, position) are kept in ``dp.launch`` / ``dp.launch_at``: the order ASTRA-sim and the
    whole-job replay need on every rank alike, which a recorded edge that contradicts it must give way
    to (:func:`parent_links`, :func:`output_order`)."""
    par, is_gpu, ts, rfk, pos, data = tree.par, cv.is_gpu, tm.ts, tree.rfk, tree.pos, dp.data
    comm, called = cm.comm, cm.gloo_pairs
    # a GPU node: its launching op; a gloo record (run by a worker thread when it gets to it): the c10d
    # call that issued it; any other host record: itself
    launcher = {i: par[i] if is_gpu[i] and par[i] >= 0 else called.get(i, i) for i in members}
    if all(ts[j] is not None for j in launcher.values()):
        def key(i: int) -> tuple[Any, ...]:
            j = launcher[i]
            seq = comm[i].seq
            return (*time_key(cv, tree, tm, j), -1 if seq is None else seq, pos[i])
    else:
        def key(i: int) -> tuple[Any, ...]:
            j = launcher[i]
            return (rfk[j], pos[j], pos[i])
    members.sort(key=key)
    launch, at = dp.launch, dp.launch_at
    for k, i in enumerate(members):
        at[i] = (chain, k)
    for prev, i in zip(members, members[1:]):
        data[i].append(prev)
        launch.add((i, prev))


def add_deps(cv: Plan, tree: Tree, tm: Timing, cm: Comm) -> Deps:
    par, is_gpu, kinds = tree.par, cv.is_gpu, cv.kinds
    dp = Deps([[] for _ in range(cv.n)])
    data, stats = dp.data, cv.stats
    skeys, thread_of = cv.cols.skeys, cv.cols.threads
    threads: dict[Any, list[int]] = {}
    streams: dict[tuple[Any, Any], list[int]] = {}
    no_launcher = gpu_ops = cpu_ops = 0
    for i, g in enumerate(is_gpu):
        if g:
            gpu_ops += 1
            p = par[i]
            if p >= 0:
                data[i].append(p)
            else:
                no_launcher += 1
            groups, key = streams, skeys[i]
        elif kinds[i] == OP:
            cpu_ops += 1
            groups, key = threads, thread_of[i]
        else:
            continue
        members = groups.get(key)
        if members is None:
            groups[key] = [i]
        else:
            members.append(i)
    stats.gpu_ops += gpu_ops
    stats.cpu_ops += cpu_ops
    if no_launcher:    # launched before the trace began: each runs on its stream from its recorded start
        log.info("%s: %d GPU node(s) have no launcher in the trace (launched before it began): they run on "
                 "their streams from their recorded starts", cv.trace.path, no_launcher)
    for members in threads.values():
        chain_by_start(tree, tm, cv, data, members)
    for members in streams.values():
        chain_by_start(tree, tm, cv, data, members)
    # Collectives of one process group run in the order they were launched, on every rank alike; a
    # GPU collective's own start is the GPU's time, a host record's is the host's (which runs ahead of
    # its GPU by a different amount on each rank), so both are ordered by when the host launched them.
    pgs: dict[str, list[int]] = {}
    for i, f in cm.comm.items():
        pgs.setdefault(f.pg_name, []).append(i)
    for chain, members in enumerate(pgs.values()):
        chain_by_launch(cv, tree, tm, cm, dp, members, chain)
    soft = dp.soft
    for i, j in cm.gloo_pairs.items():
        if i in cm.cpu_comm and j not in data[i]:
            data[i].append(j)
            soft.add((i, j))
    for i, j in cm.gloo_extra.items():   # the other records of a multi-record call follow it too
        if j not in data[i]:
            data[i].append(j)
            soft.add((i, j))
    add_recorded_deps(cv, dp)
    ctrl = parent_links(cv, tree, tm, dp)
    meta = {i for i, k in enumerate(kinds) if k == METADATA}
    for i in sorted(meta):
        cm.ntype[i] = pb.METADATA_NODE
        data[i] = []
        ctrl[i] = -1
    # nothing may depend on a METADATA node
    for i, ds in enumerate(data):
        if ds:
            k = len(ds)
            if k == 1:   # the common cases, without building a set
                j = ds[0]
                if j == i or j == ctrl[i] or j in meta:
                    data[i] = []
                continue
            if k == 2:
                a, b = ds
                c = ctrl[i]
                keep_a = a != i and a != c and a not in meta
                if keep_a and b != i and b != c and b != a and b not in meta:
                    continue   # both stay
            seen = {i, ctrl[i]}
            out = []
            for j in ds:
                if j not in seen and j not in meta:
                    seen.add(j)
                    out.append(j)
            data[i] = out
    dp.ctrl = ctrl
    return dp


def add_recorded_deps(cv: Plan, dp: Deps) -> None:
    """ET+'s ``inter_thread_dep`` and ``sync_dep`` as (soft) data dependencies; references to ids not in the
    trace are skipped, with one warning."""
    data, index, ids, soft, stats = dp.data, cv.index, cv.ids, dp.soft, cv.stats
    bad = 0
    first_bad = ""
    for i, pair in cv.cols.xdeps.items():
        for key, dv in zip(("inter_thread_dep", "sync_dep"), pair):
            if dv is None:
                continue
            for d in dv if isinstance(dv, list) else [dv]:
                j = index.get(d) if type(d) is int else None
                if j is None:
                    bad += 1
                    if not first_bad:
                        first_bad = f"node {ids[i]} {key} {d!r}"
                elif j != i:
                    if j not in data[i]:   # already a call-order/stream/launcher edge: stays hard
                        data[i].append(j)
                        soft.add((i, j))
                    if key == "sync_dep":
                        stats.sync_edges += 1
                    else:
                        stats.inter_thread_edges += 1
    if bad:
        _warn(stats, f"{cv.trace.path}: {bad} inter_thread_dep/sync_dep reference(s) to ids not in "
                     f"the trace were skipped (e.g. {first_bad}, missing)")


def parent_links(cv: Plan, tree: Tree, tm: Timing, dp: Deps) -> list[int]:
    """The ET parent of each op that is kept as its control dependency (-1: none).

    Not for GPU ops, METADATA, or towards a METADATA node.  The ET tree is wrong for records made on other
    threads (gloo worker records hang under whatever record was open, sometimes one that started later,
    sometimes another collective's record on another worker thread): a parent that starts after its child
    is not a caller, and such a link would point backwards in time (a cycle waiting to happen); nor is a
    collective's record the parent of one launched before it in its process group (the launch-order chain
    runs the child first: the two edges would close a cycle).
    """
    par, is_gpu, kinds, ts, stats = tree.par, cv.is_gpu, cv.kinds, tm.ts, cv.stats
    ctrl = [-1] * cv.n
    backwards = 0
    contradicts: list[tuple[int, int]] = []
    at = dp.launch_at
    before = partial(starts_before, cv, tree, tm)
    for i, p in enumerate(par):
        if p >= 0 and not is_gpu[i] and kinds[i] != METADATA and kinds[p] != METADATA:
            tp = ts[p]
            ti = ts[i]
            # _before(p, i); its first key decides unless both are timed and start together
            if tp is not None and ti is not None and tp != ti:
                ok = tp < ti
            else:
                ok = before(p, i)
            if not ok:
                backwards += 1
                continue
            ctrl[i] = p
    for i, (ci, ki) in at.items():   # (few: the comm nodes)
        p = ctrl[i]
        if p >= 0 and p in at:
            cp, kp = at[p]
            if ci == cp and ki < kp:   # the child was launched first
                contradicts.append((i, p))
                ctrl[i] = -1
    if backwards:
        _warn(stats, f"{backwards} ET parent link(s) point to a record that started later than its child "
                     "(records of other threads); those control dependencies are dropped")
    if contradicts:
        i, p = contradicts[0]
        _warn(stats, f"{cv.trace.path}: {len(contradicts)} ET parent link(s) contradict the launch order of "
                     f"their process group's collectives and are dropped: e.g. node {cv.ids[i]} "
                     f"({cv.names[i][:40]}) was launched before node {cv.ids[p]} ({cv.names[p][:40]}), "
                     "yet recorded as its child")
    return ctrl


# -- 4b. thread timing: work, waiting and idle per host thread (convert.threads) ------------------
def add_thread_timing(cv: Plan, tree: Tree, tm: Timing, cm: Comm, dp: Deps) -> ThreadTiming | None:
    """Pieces, depths and waits of the host threads; waits become (soft) data dependencies."""
    if not cv.stats.timed:
        return None
    n, cols, is_gpu, kinds, ts = cv.n, cv.cols, cv.is_gpu, cv.kinds, tm.ts
    threads, cpu_comm, origin, start = cols.threads, cm.cpu_comm, tm.origin, tm.start
    is_cpu = [not g and (k == METADATA or i not in cpu_comm)
              for i, (g, k) in enumerate(zip(is_gpu, kinds))]
    host = {t for t, c, k in zip(threads, is_cpu, kinds) if c and k != METADATA}
    # every host op sits on its thread; a thread without CPU ops (a gloo worker whose only records
    # are collectives) is a lane of its own in the replay, with the same kind of timing.  The thread
    # and process roots are not ops: time inside them and in no op is idle time.
    on_thread = [k == OP and not g for k, g in zip(kinds, is_gpu)]
    end: list[int | None] = [None] * n
    raw_dur, dur_x = cols.dur, cols.dur_x
    lane: list[Any] = [None] * n
    skeys = cols.skeys
    keys: dict[Any, Any] = {}
    L = CORRUPT_TIME_US
    setkey = keys.setdefault
    for i, t in enumerate(ts):
        k = kinds[i]
        if k is OP or k != METADATA:
            th = threads[i]
            key = ("gpu", skeys[i]) if is_gpu[i] else ("cpu" if th in host else "host", th)
            lane[i] = setkey(key, key)
        if t is None:
            continue
        d: Any = raw_dur[i]   # (the float column's value, else the raw one)
        if d != d:
            d = dur_x.get(i)
            tt = type(d)
            if not ((tt is float or tt is int) and -L < d < L) or d < 0:   # _num(d) inlined
                d = 0.0
        elif not -L < d < L or d < 0:   # (a float: NaN taken above)
            d = 0.0
        v = t + d - origin
        e = int(v + 0.5) if v > 0 else 0
        s = start[i]
        end[i] = e if e > s else s
    sync_lanes: dict[int, set[Any]] = {}
    index = cv.index
    for i, (_, sd) in cols.xdeps.items():
        if sd is None:
            continue
        for d in sd if isinstance(sd, list) else [sd]:
            j = index.get(d) if type(d) is int else None
            if j is not None and is_gpu[j]:
                sync_lanes.setdefault(i, set()).add(lane[j])
    inp = ThreadInput(n=n, start=start, end=end, excl=tm.dur, thread=threads, on_thread=on_thread,
                      is_cpu=is_cpu, lane=lane, pos=tree.pos, deps=dp.data, host_comm=cpu_comm,
                      is_gpu=is_gpu, sync_lanes=sync_lanes,
                      launcher=[p if g else -1 for p, g in zip(tree.par, is_gpu)],
                      gpu_comm={i for i in cm.comm if is_gpu[i]})
    timing = thread_timing(inp)
    data, ctrl, soft = dp.data, dp.ctrl, dp.soft
    # an op whose synchronize became a wait of the node after it no longer waits itself: its sync_dep
    # (a start dependency on a GPU op that was recorded still running) goes
    for o in timing.synced:
        _, sd = cols.xdeps.get(o, (None, None))
        for d in sd if isinstance(sd, list) else [sd]:
            j = index.get(d) if type(d) is int else None
            if j is not None and (o, j) in soft and j in data[o]:
                data[o].remove(j)
                soft.discard((o, j))
    for j, u in timing.wait_on.items():
        if u != ctrl[j] and u not in data[j]:
            data[j].append(u)
            soft.add((j, u))
    cv.stats.waits = len(timing.wait_on)
    cv.stats.waited_us = timing.waited_us
    return timing


# -- 5. order and cycle check ---------------------------------------------------------------------
def output_order(cv: Plan, tree: Tree, tm: Timing, cm: Comm, dp: Deps) -> list[int]:
    """Topological order; also the cycle check.

    A cycle through a dependency that ET+ derived from timing (``sync_dep``,
    ``inter_thread_dep``) or that pairs a gloo record with its c10d call is
    broken by dropping that one edge, with a warning naming the cycle.  A
    cycle that the launch order of a process group's collectives closes (the
    converter's own edges, see :func:`chain_by_launch`) is broken where a
    recorded edge contradicts that order (:func:`launch_conflict`), with a
    warning naming both nodes: the converter never aborts on a cycle it made.
    A cycle of call-order, parent and stream edges alone is an error naming
    its nodes.
    """
    n = cv.n
    ctrl, data, ids, names = dp.ctrl, dp.data, cv.ids, cv.names
    prio = tm.start if cv.stats.timed else tree.rfk
    order = kahn_order(data, ctrl, prio)
    if order is not None:
        return order
    for _ in range(1000):   # a cycle: found, repaired or reported by the general code
        deps = [(data[i] + [ctrl[i]]) if ctrl[i] >= 0 else data[i] for i in range(n)]
        try:
            return topological_order(range(n), deps, prio)
        except CycleError as exc:
            cyc = exc.cycle
            desc = " -> ".join(f"{ids[i]} ({names[i][:40]})" for i in cyc[:12])
            more = "" if len(cyc) <= 12 else f" ... ({len(cyc)} nodes)"
            edge = next(((a, b) for a, b in zip(cyc, cyc[1:] + cyc[:1]) if (a, b) in dp.soft), None)
            if edge is None:
                why = launch_conflict(cv, cm, dp, cyc)
                if why is None:
                    raise TraceFormatError(f"dependency cycle: {desc}{more}", cv.trace.path) from None
                _warn(cv.stats, f"{cv.trace.path}: dependency cycle {desc}{more}: {why}")
                continue
            a, b = edge
            data[a].remove(b)
            dp.soft.discard(edge)
            _warn(cv.stats, f"{cv.trace.path}: dependency cycle {desc}{more}: dropped the derived "
                              f"dependency of node {ids[a]} on node {ids[b]}")
    raise TraceFormatError("too many dependency cycles (1000 derived dependencies dropped)",
                           cv.trace.path)


def launch_conflict(cv: Plan, cm: Comm, dp: Deps, cyc: list[int]) -> str | None:
    """Break a cycle that a launch-order edge closes; say what was dropped (None: no such edge in it).

    ``cyc`` lists nodes each of which depends on the next.  The launch order is what every rank's
    collectives share (ASTRA-sim and the whole-job replay match them by it), so the edge that gives way
    is a recorded one that contradicts it: an ET parent link to a record of another thread or to a
    collective's record (such records are made by worker threads, under whatever record was open).
    Where none is on the cycle, the recorded order of one thread or stream contradicts the launch order
    (two records paired with the wrong calls), and the launch-order edge goes.
    """
    ids, names, ctrl, threads = cv.ids, cv.names, dp.ctrl, cv.cols.threads
    edges = list(zip(cyc, cyc[1:] + cyc[:1]))
    launch = next(((a, b) for a, b in edges if (a, b) in dp.launch and b in dp.data[a]), None)
    if launch is None:
        return None

    def node(i: int) -> str:
        return f"node {ids[i]} ({names[i][:40]})"

    for a, b in edges:
        if ctrl[a] == b and (threads[a] != threads[b] or b in cm.cpu_comm):
            ctrl[a] = -1
            first, then = launch[1], launch[0]
            return (f"dropped the ET parent link of {node(a)} to {node(b)} (a record of another thread), "
                    f"which contradicts the launch order ({node(first)} was launched before {node(then)})")
    a, b = launch
    dp.data[a].remove(b)
    dp.launch.discard(launch)
    return (f"dropped the launch-order dependency of {node(a)} on {node(b)}, which the recorded order "
            "contradicts")
