"""Hand-built protobuf .et nodes and rank files for the replay tests."""

from __future__ import annotations

import json

from chakra.io import write_messages
from chakra.schema import (
    ALL_REDUCE,
    COMM_COLL_NODE,
    COMP_NODE,
    METADATA_NODE,
    AttributeProto,
    GlobalMetadata,
    Node,
)


def attr(name, **kw):
    a = AttributeProto(name=name)
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def pb_node(nid, dur, start, *, deps=(), data=(), cpu=True, tid=1, stream=None, ntype=COMP_NODE, pg=None,
            name=None):
    n = Node(id=nid, name=name or f"op{nid}", type=ntype, ctrl_deps=list(deps), data_deps=list(data),
             start_time_micros=start, duration_micros=dur)
    n.attr.append(attr("is_cpu_op", bool_val=cpu))
    if cpu or stream is None:
        n.attr.append(attr("tid", int64_val=tid))
    if stream is not None:
        n.attr.append(attr("stream", int64_val=stream))
        n.attr.append(attr("device", int64_val=0))
    if ntype == COMM_COLL_NODE:
        n.attr.append(attr("comm_type", int64_val=ALL_REDUCE))
        n.attr.append(attr("comm_size", int64_val=1 << 20))
        n.attr.append(attr("pg_name", string_val=pg or ""))
    return n


def write_rank(path, rank, nodes, measured, world=2):
    md = GlobalMetadata(version="0.0.4")
    md.attr.append(attr("rank", int64_val=rank))
    md.attr.append(attr("world_size", int64_val=world))
    md.attr.append(attr("process_groups", string_val=json.dumps(
        [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "ranks": [0, 1],
          "group_size": 2, "group_count": 1}])))
    md.attr.append(attr("measured_start_us", double_val=1000.0))
    md.attr.append(attr("measured_dur_us", double_val=measured))
    write_messages(path, [md, *nodes])


def rank_nodes(first_dur, coll_dur):
    return [
        pb_node(1, 0, 0, ntype=METADATA_NODE),
        pb_node(2, first_dur, 0, deps=[1]),
        pb_node(3, 2, first_dur, data=[2]),                                 # launcher
        pb_node(4, coll_dur, first_dur + 3, deps=[3], cpu=False, stream=7, ntype=COMM_COLL_NODE, pg="0",
                name="ncclKernel_AllReduce"),
        pb_node(5, 6, first_dur + 10, data=[3]),                             # gap of 8 after the launcher
    ]
