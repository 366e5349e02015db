"""Builders of small host ETs and Kineto traces for the linker tests, and checks of a linked ET+ document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import networkx as nx

from chakra.device.loader import load_kineto
from chakra.host.loader import load_host_et
from chakra.link import link_traces


def op(
    nid: int, name: str, parent: int, rf: int, tid: int = 1, inputs: list[Any] | None = None
) -> dict[str, Any]:
    ins = inputs or []
    return {
        "name": name,
        "id": nid,
        "rf_id": rf,
        "parent": parent,
        "fw_parent": 0,
        "seq_id": -1,
        "scope": 0,
        "tid": tid,
        "fw_tid": 0,
        "op_schema": "",
        "inputs": ins,
        "input_shapes": [[] for _ in ins],
        "input_types": ["Int" for _ in ins],
        "outputs": [],
        "output_shapes": [],
        "output_types": [],
    }


def host_doc(ops: list[dict[str, Any]], threads: tuple[int, ...] = (1,)) -> dict[str, Any]:
    roots = [
        op(2 + i, "[pytorch|profiler|execution_trace|thread]", 1, 0, tid) for i, tid in enumerate(threads)
    ]
    proc = op(1, "[pytorch|profiler|execution_trace|process]", 1, 0, 0)
    return {
        "schema": "1.0.1",
        "pid": 7,
        "time": "2026-11-30 08:00:00",
        "start_ts": 1,
        "finish_ts": 2,
        "nodes": roots + ops + [proc],
    }


def cpu(
    name: str, ts: float, dur: float, ext: int, tid: int = 100, cat: str = "cpu_op", rf: int | None = None
) -> dict[str, Any]:
    args: dict[str, Any] = {"External id": ext}
    if rf is not None:
        args["Record function id"] = rf
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


def rt(name: str, ts: float, dur: float, corr: int, tid: int = 100, **extra: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 7,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"External id": corr, "correlation": corr, **extra},
    }


def gpu(
    name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel", **extra: Any
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"External id": corr, "correlation": corr, "stream": stream, "device": 0, **extra},
    }


def kineto_doc(events: list[dict[str, Any]], rank: int | None = 0, **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events, **top}
    if rank is not None:
        doc.setdefault("distributedInfo", {"rank": rank, "world_size": 1, "backend": "nccl"})
    return doc


def write(tmp: Path, host: dict[str, Any], kineto: dict[str, Any]) -> tuple[Path, Path]:
    hp, kp = tmp / "host_et_0.json", tmp / "kineto_0.json"
    hp.write_text(json.dumps(host))
    kp.write_text(json.dumps(kineto))
    return hp, kp


def link(tmp: Path, host: dict[str, Any], kineto: dict[str, Any], **kw: Any) -> dict[str, Any]:
    hp, kp = write(tmp, host, kineto)
    doc = link_traces(load_host_et(hp), load_kineto(kp), **kw)
    check_dependencies(doc)
    return doc


def by_id(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {n["id"]: n for n in doc["nodes"]}


def check_dependencies(doc: dict[str, Any]) -> None:
    """Every dep id exists and ends strictly earlier; deps + launcher links + host tree are acyclic."""
    nodes = by_id(doc)
    g = nx.DiGraph()
    for n in doc["nodes"]:
        g.add_node(n["id"])
        parent = n.get("parent", n.get("ctrl_deps"))
        if isinstance(parent, int) and parent != n["id"] and parent in nodes:
            g.add_edge(n["id"], parent)
        deps = ([n["inter_thread_dep"]] if "inter_thread_dep" in n else []) + list(n.get("sync_dep", []))
        for d in deps:
            assert d in nodes, f"node {n['id']} depends on missing node {d}"
            dn = nodes[d]
            assert dn["ts"] + dn["dur"] < n["ts"] + n["dur"], (
                f"dep {n['id']} -> {d} does not point back in time"
            )
            g.add_edge(n["id"], d)
    assert nx.is_directed_acyclic_graph(g)


def sync_case() -> tuple[dict[str, Any], dict[str, Any]]:
    host = host_doc(
        [
            op(10, "aten::mm", 2, 1),
            op(11, "aten::mm", 2, 2),
            op(12, "aten::item", 2, 3),
            op(13, "aten::_local_scalar_dense", 12, 4),
            op(14, "my::sync_all", 2, 5),
        ]
    )
    events = [
        # External id = rf_id + 100: an offset, so only the names can match them
        cpu("aten::mm", 0, 20, 101),
        rt("cudaLaunchKernel", 5, 5, 1),
        gpu("gemm_a", 12, 100, 1, stream=7),
        cpu("aten::mm", 30, 20, 102),
        rt("cudaLaunchKernel", 35, 5, 2),
        gpu("gemm_b", 42, 38, 2, stream=8),
        cpu("aten::item", 60, 140, 103),
        cpu("aten::_local_scalar_dense", 61, 138, 104),
        rt("cudaMemcpyAsync", 62, 4, 3),
        gpu("Memcpy DtoH", 113, 2, 3, stream=7, cat="gpu_memcpy"),
        rt("cudaStreamSynchronize", 67, 131, 4),
        cpu("my::sync_all", 210, 20, 105),
        rt("cudaDeviceSynchronize", 211, 18, 5),
        gpu("left_over_from_before_profiling", 1, 3, 99, stream=7),
    ]
    return host, kineto_doc(events)
