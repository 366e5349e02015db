"""The replay's reading of protobuf ``Node`` messages before the batched reader (chakra.replay.reader):
one message at a time, plain Python.  Kept as the oracle the reader is compared with on random files
(tests/test_replay_reader.py); it is not used by the package.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from chakra.errors import TraceFormatError
from chakra.job.etfile import groups_from_metadata_node, parse_process_groups
from chakra.job.etfile import int_or_none as _int_or_none
from chakra.replay.graph import COMM_TYPES, EXTRA_ATTRS, CommInfo, RankGraph, graph_for_metadata
from chakra.replay.graph import scalar as _scalar
from chakra.schema import METADATA_NODE, attr_value

_COMM_ATTRS = frozenset(("pg_name", "comm_src", "comm_dst", "comm_tag", "comm_seq"))
_groups_from_metadata_node = groups_from_metadata_node


def extra_by_index(extra_by_id: dict[str, dict[int, Any]], ids: list[int]) -> dict[str, dict[int, Any]]:
    """{name: {node id: value}} -> {name: {index: value}} for ``ids`` in index order (sorted)."""
    out: dict[str, dict[int, Any]] = {}
    for name, by_id in extra_by_id.items():
        if by_id:
            out[name] = {bisect_left(ids, nid): v for nid, v in by_id.items()}
    return out


def graph_from_protobuf(nodes: Iterable[Any], metadata: Any = None, *, path: str | None = None,
                        rank: int | None = None) -> RankGraph:
    """Read protobuf ``Node`` messages (and the ``GlobalMetadata``) into a RankGraph."""
    where = path
    g = graph_for_metadata(metadata, path, rank)

    ids: list[int] = []
    names: list[str] = []
    types: list[int] = []
    durs: list[float] = []
    starts: list[float] = []
    deps_l: list[tuple[int, ...]] = []
    cpu_l: list[bool] = []
    tids: list[Any] = []
    streams: list[Any] = []
    devices: list[Any] = []
    comm_raw: dict[int, dict[str, Any]] = {}
    extra: dict[str, dict[int, Any]] = {}
    parents: set[int] = set()
    ctrl_parent: dict[int, int] = {}
    meta_payload = None
    nctrl: list[int] = []
    no_attr: list[int] = []
    for n in nodes:
        is_cpu = False
        if not any(a.name == "is_cpu_op" for a in n.attr):
            no_attr.append(len(ids))
        tid = stream = device = None
        for a in n.attr:
            name = a.name
            if name == "is_cpu_op":
                is_cpu = bool(getattr(a, a.WhichOneof("value") or "bool_val"))
            elif name == "tid":
                tid = _scalar(getattr(a, a.WhichOneof("value") or "int64_val"))
            elif name == "stream":
                stream = _scalar(getattr(a, a.WhichOneof("value") or "int64_val"))
            elif name == "device":
                device = _scalar(getattr(a, a.WhichOneof("value") or "int64_val"))
            elif name in _COMM_ATTRS:
                comm_raw.setdefault(len(ids), {})[name] = attr_value(a)
            elif name in EXTRA_ATTRS:
                v = _scalar(attr_value(a))
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    extra.setdefault(name, {})[n.id] = v
        ntype = n.type
        if ntype == METADATA_NODE and meta_payload is None and n.inputs.values:
            meta_payload = n.inputs.values
        dd = n.data_deps
        cd = tuple(n.ctrl_deps)
        if is_cpu and cd:
            parents.update(cd)
            ctrl_parent[n.id] = cd[0]
        deps_l.append(cd + tuple(dd) if dd else cd)
        nctrl.append(len(cd))
        ids.append(n.id)
        names.append(n.name)
        types.append(ntype)
        durs.append(float(n.duration_micros))
        starts.append(float(n.start_time_micros))
        cpu_l.append(is_cpu)
        tids.append(tid)
        streams.append(stream)
        devices.append(device)

    g.parents = parents
    g.ctrl_parent = ctrl_parent
    if len(set(ids)) != len(ids):
        seen: set[int] = set()
        for index, nid in enumerate(ids):
            if nid in seen:
                raise TraceFormatError(f"node id {nid} appears twice (message {index + 1})", where)
            seen.add(nid)
    perm = None
    if any(ids[i] > ids[i + 1] for i in range(len(ids) - 1)):
        perm = sorted(range(len(ids)), key=ids.__getitem__)

    # Host threads: a non-CPU node with neither ``stream`` nor ``device`` whose ``tid`` is one of them is a
    # host-side comm record (gloo) kept in its thread's call order, not a GPU op.  Files written before
    # the ``stream`` attribute existed carry the GPU stream in ``tid`` (distinct from the host tids).
    host_tids = {_int_or_none(t) or 0 for t in {t for t, c in zip(tids, cpu_l) if c}}
    interned: dict[Any, Any] = {}
    lanes: list[Any] = []
    for i, ntype in enumerate(types):
        if ntype == METADATA_NODE:
            lanes.append(None)
            continue
        tid = tids[i]
        if type(tid) is not int:
            tid = _int_or_none(tid) or 0
        if cpu_l[i]:
            lane: Any = ("cpu", tid)
        elif streams[i] is None and devices[i] is None and tids[i] is None:
            # nothing says where it ran (text workloads, generated ETs): compute and communication apart
            lane = ("gpu", 0, -1 if ntype in COMM_TYPES else 0)
        elif streams[i] is None and devices[i] is None and tid in host_tids:
            lane = ("cpu", tid)
        else:
            stream = streams[i] if streams[i] is not None else tids[i]
            lane = ("gpu", _int_or_none(devices[i]) or 0, _int_or_none(stream) or 0)
        lanes.append(interned.setdefault(lane, lane))
    comm = {}
    for i, ntype in enumerate(types):
        if ntype in COMM_TYPES:
            raw = comm_raw.get(i, {})
            comm[i] = CommInfo.from_attrs(raw)
    if perm is None:
        g.ids, g.names, g.types, g.durations, g.starts = ids, names, types, durs, starts
        g.deps, g.is_cpu, g.lanes, g.comm = deps_l, cpu_l, lanes, comm
        g.nctrl, g.no_cpu_attr = nctrl, no_attr
    else:
        g.ids = [ids[i] for i in perm]
        g.names = [names[i] for i in perm]
        g.types = [types[i] for i in perm]
        g.durations = [durs[i] for i in perm]
        g.starts = [starts[i] for i in perm]
        g.deps = [deps_l[i] for i in perm]
        g.is_cpu = [cpu_l[i] for i in perm]
        g.lanes = [lanes[i] for i in perm]
        where_now = {old: new for new, old in enumerate(perm)}
        g.comm = {where_now[i]: c for i, c in comm.items()}
        g.nctrl = [nctrl[i] for i in perm]
        g.no_cpu_attr = sorted(where_now[i] for i in no_attr)
        g.file_pos = perm
    if extra:
        g.extra = extra_by_index(extra, g.ids)
    if not g.process_groups and meta_payload:
        groups = _groups_from_metadata_node(meta_payload, where)
        if groups:
            g.process_groups = parse_process_groups(groups, g.world_size, where)
    return g

