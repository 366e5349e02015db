"""Invariants every converted Chakra ET must satisfy, checked through helpers/wire_reader.py only (an
independent decoder of the .et wire format)."""

from __future__ import annotations

import ast
import json
from collections import deque
from pathlib import Path

from helpers.wire_reader import WireNode, read_et

METADATA_NODE, COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 1, 4, 5, 6, 7


COMM_TYPES = (COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE)


# docs/formats.md, "What consumers read": the one field consumers read each attribute from.
EXPECTED_KIND = {
    "is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val", "comm_type": "int64_val",
    "comm_priority": "int32_val", "comm_size": "int64_val", "comm_src": "int32_val",
    "comm_dst": "int32_val", "comm_tag": "int32_val", "pg_name": "string_val",
    "tid": "int64_val", "rf_id": "int64_val", "stream": "int64_val", "device": "int64_val",
}


META_KIND = {
    "schema": "string_val", "pid": "int64_val", "time": "string_val", "start_ts": "int64_val",
    "finish_ts": "int64_val", "rank": "int64_val", "world_size": "int64_val",
    "process_groups": "string_val", "measured_start_us": "double_val", "measured_dur_us": "double_val",
    "measured_window": "string_val",
}


def topo_ok(nodes: list[WireNode]) -> bool:
    """Kahn's algorithm over ctrl + data deps: True when every node can be scheduled."""
    by_id = {n.id: n for n in nodes}
    indeg = {n.id: 0 for n in nodes}
    users: dict[int, list[int]] = {n.id: [] for n in nodes}
    for n in nodes:
        for d in set(n.ctrl_deps) | set(n.data_deps):
            indeg[n.id] += 1
            users[d].append(n.id)
    q = deque(i for i, k in indeg.items() if k == 0)
    seen = 0
    while q:
        i = q.popleft()
        seen += 1
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                q.append(u)
    return seen == len(by_id)


def check_et(path: str | Path) -> tuple[dict, list[WireNode]]:
    """Decode ``path`` with the wire reader and assert the consumer-facing invariants."""
    version, meta, nodes = read_et(path)
    assert version == "0.0.4"
    for name, kind in META_KIND.items():
        if name in meta:
            assert meta[name].kind == kind, (name, meta[name].kind)
    for name in ("schema", "rank", "world_size", "process_groups", "measured_start_us", "measured_dur_us"):
        assert name in meta, name
    ids = [n.id for n in nodes]
    assert len(ids) == len(set(ids)), "duplicate node ids"
    idset = set(ids)
    for n in nodes:
        for d in n.ctrl_deps + n.data_deps:
            assert d in idset, f"node {n.id} depends on missing id {d}"
        assert n.id not in n.ctrl_deps + n.data_deps, f"node {n.id} depends on itself"
        for a in n.attrs.values():
            want = EXPECTED_KIND.get(a.name)
            if want is not None:
                assert a.kind == want, f"node {n.id} attr {a.name}: {a.kind}, expected {want}"
        assert "is_cpu_op" in n.attrs, n.id
        if n.type in COMM_TYPES:
            assert n.attrs["is_cpu_op"].value is False, f"comm node {n.id} has is_cpu_op true"
            assert "comm_size" in n.attrs and "pg_name" in n.attrs
            if n.type == COMM_COLL_NODE:
                assert "comm_type" in n.attrs
            else:
                for k in ("comm_src", "comm_dst", "comm_tag"):
                    assert k in n.attrs, (n.id, k)
        if n.type == METADATA_NODE:
            outer = ast.literal_eval(n.inputs["values"])
            assert isinstance(outer, list) and len(outer) == 1 and isinstance(outer[0], str)
            groups = json.loads(outer[0])
            assert all(str(g["pg_name"]).isdigit() for g in groups)
    assert topo_ok(nodes), "dependency cycle"
    return meta, nodes
