"""Graph checks on the converted nodes: references, duplicates, cycles, and a topological order.

All iterative (no recursion): a million-node chain must not hit Python's stack.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any


class CycleError(ValueError):
    """The dependency graph has a cycle; ``cycle`` lists its node ids in order."""

    def __init__(self, cycle: list[int]) -> None:
        super().__init__(f"dependency cycle through {len(cycle)} nodes: {cycle[:20]}")
        self.cycle = cycle


def topological_order(ids: Sequence[int], deps: Sequence[Sequence[int]],
                      priority: Sequence[float] | Sequence[int] | None = None) -> list[int]:
    """Indices of the nodes in an order where every node follows all its dependencies.

    ``deps[i]`` are node ids (all present in ``ids``).  Among ready nodes the one
    with the smallest ``(priority, index)`` goes first, so the output stays close
    to time order.  Raises CycleError naming one cycle.
    """
    n = len(ids)
    index = {nid: i for i, nid in enumerate(ids)}
    indeg = [0] * n
    users: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for d in ds:
            j = index[d]
            users[j].append(i)
            indeg[i] += 1
    prio = priority if priority is not None else [0.0] * n
    heap = [(prio[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        _, i = pop(heap)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                push(heap, (prio[u], u))
    if len(order) != n:
        raise CycleError(find_cycle(ids, deps, [i for i in range(n) if indeg[i] > 0]))
    return order


def kahn_order(data: Sequence[Sequence[int]], ctrl: Sequence[int], priority: Sequence[int]
               ) -> list[int] | None:
    """``topological_order`` for the converter's own graph, or None when it has a cycle.

    Node ``i`` depends on the indices ``data[i]`` and on ``ctrl[i]`` when that is >= 0; ``priority``
    holds ints.  Same order as ``topological_order(range(n), deps, priority)`` (the smallest
    ``(priority, index)`` among the ready nodes first, here as the one int ``priority * n + index``),
    without building the merged dependency lists or an id index: users are kept as one int, or a list
    when there are several.
    """
    n = len(data)
    indeg = [0] * n
    users: list[Any] = [None] * n
    for i, ds in enumerate(data):
        c = ctrl[i]
        if c >= 0:
            ds = (c, *ds)   # (the parent first)
        indeg[i] = len(ds)
        for j in ds:
            u = users[j]
            if u is None:
                users[j] = i
            elif type(u) is int:
                users[j] = [u, i]
            else:
                u.append(i)
    prio = priority
    heap = [prio[i] * n + i for i in range(n) if not indeg[i]]
    heapq.heapify(heap)
    order: list[int] = []
    append = order.append
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        i = pop(heap) % n
        append(i)
        u = users[i]
        if u is None:
            continue
        if type(u) is int:
            indeg[u] -= 1
            if not indeg[u]:
                push(heap, prio[u] * n + u)
            continue
        for v in u:
            indeg[v] -= 1
            if not indeg[v]:
                push(heap, prio[v] * n + v)
    return order if len(order) == n else None


def find_cycle(ids: Sequence[int], deps: Sequence[Sequence[int]], candidates: Sequence[int]) -> list[int]:
    """Node ids of one dependency cycle among ``candidates`` (indices), found by an iterative DFS."""
    index = {nid: i for i, nid in enumerate(ids)}
    cand = set(candidates)
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done
    for start in candidates:
        if state.get(start):
            continue
        path: list[int] = [start]
        iters = [iter(deps[start])]
        state[start] = 1
        while path:
            advanced = False
            for d in iters[-1]:
                j = index[d]
                if j not in cand:
                    continue
                s = state.get(j)
                if s == 1:
                    k = path.index(j)
                    return [ids[x] for x in path[k:]]
                if s is None:
                    state[j] = 1
                    path.append(j)
                    iters.append(iter(deps[j]))
                    advanced = True
                    break
            if not advanced:
                state[path.pop()] = 2
                iters.pop()
    return []
