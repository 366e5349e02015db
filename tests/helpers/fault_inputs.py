"""Damaged inputs for every command, and small random VALID traces (shared by the fault and property tests).

Two halves:

* ``random_pair(rng, ...)`` builds a small host ET + Kineto trace of one rank that agree with each other
  (record function ids, nested times per thread, kernels launched by host ops).  The property tests link,
  convert and replay these; the fault tests damage them.
* ``*_faults()`` return ``{case name: Fault}``: the bytes of a damaged file and what a command must do
  with it (``FAIL``: exit 1 with one ``<prog>: error: <file>: <problem>`` line; ``WARN``: exit 0 with a
  warning naming the problem, because a real trace routinely has that defect and the tools tolerate it).

Everything is deterministic: the same call gives the same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAIL = "fail"
WARN = "warn"

PID = 4242
HOST_TIME = "2026-11-30 08:00:00"
# Kineto clock of the same run: 2026-11-30 08:00:05 UTC in µs since the epoch (the ET's ``time`` is the
# writer's local time, so the check must tolerate a time-zone offset).
KINETO_T0 = 1796025605_000000.0
CHAKRA_SCHEMA = "1.1.1-chakra.0.0.4"
LAUNCH = "cudaLaunchKernel"
KERNEL_NAMES = ("void gemm_kernel<float>", "elementwise_kernel", "reduce_kernel")


@dataclass(slots=True)
class Fault:
    """One damaged input: its bytes, the expected outcome and the words the message must contain."""

    data: bytes
    outcome: str = FAIL
    words: tuple[str, ...] = ()   # lower-case fragments, one of which the error/warning line must hold
    suffix: str = ".json"


# ---- a small valid host ET + Kineto pair -------------------------------------------------------------------


@dataclass
class Pair:
    host: dict[str, Any]
    kineto: dict[str, Any]
    kernels: int = 0                                   # GPU events that have a launch
    launcher_of: dict[int, int] = field(default_factory=dict)  # kernel correlation -> launching host node id


def _chakra_node(nid: int, name: str, parent: int, rf: int, tid: int) -> dict[str, Any]:
    empty = {"values": [], "shapes": [], "types": []}
    return {
        "id": nid, "name": name, "ctrl_deps": parent,
        "inputs": dict(empty), "outputs": dict(empty),
        "attrs": [
            {"name": "rf_id", "type": "uint64", "value": rf},
            {"name": "fw_parent", "type": "uint64", "value": 0},
            {"name": "seq_id", "type": "int64", "value": -1},
            {"name": "scope", "type": "uint64", "value": 0},
            {"name": "tid", "type": "uint64", "value": tid},
            {"name": "fw_tid", "type": "uint64", "value": 0},
            {"name": "op_schema", "type": "string", "value": ""},
        ],
    }


def _flat_node(nid: int, name: str, parent: int, rf: int, tid: int) -> dict[str, Any]:
    return {
        "name": name, "id": nid, "rf_id": rf, "parent": parent, "fw_parent": 0, "seq_id": -1, "scope": 0,
        "tid": tid, "fw_tid": 0, "op_schema": "", "inputs": [], "input_shapes": [], "input_types": [],
        "outputs": [], "output_shapes": [], "output_types": [],
    }


def random_pair(rng: random.Random, *, threads: int = 1, top_ops: int = 3, max_children: int = 2,
                kernel_prob: float = 0.5, layout: str = "chakra", step: bool = True,
                rf_ids: bool = True) -> Pair:
    """A consistent host ET + Kineto trace of one rank.

    Per thread a sequence of top-level ops (inside ``ProfilerStep#1`` on the first thread when ``step``),
    each with up to ``max_children`` children and grandchildren; an op launches a kernel with probability
    ``kernel_prob`` (a ``cudaLaunchKernel`` runtime event inside it, the kernel later on stream 7 or 8).
    Times are integers in µs on the Kineto clock of ``KINETO_T0``; gaps between siblings are random.
    """
    make = _chakra_node if layout == "chakra" else _flat_node
    nodes: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    next_id = [2]
    rf = [1]
    corr = [1]
    stream_free = {7: 0.0, 8: 0.0}
    pair = Pair({}, {})

    def new_id() -> int:
        v = next_id[0]
        next_id[0] += 1
        return v

    def emit(name: str, parent: int, tid: int, ts: float, dur: float, cat: str = "cpu_op") -> int:
        nid = new_id()
        r = rf[0]
        rf[0] += 1
        nodes.append(make(nid, name, parent, r, tid))
        args: dict[str, Any] = {"External id": r + 1000}
        if rf_ids:
            args["Record function id"] = r
        events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur,
                       "args": args})
        return nid

    def op_tree(parent: int, tid: int, ts: float, depth: int) -> float:
        """Emit one op (and its children) starting at ``ts``; return its end."""
        name = rng.choice(("aten::mm", "aten::add", "aten::relu", "aten::copy_", "aten::linear"))
        t = ts + rng.randint(1, 3)
        spans: list[tuple[float, float]] = []
        for _ in range(rng.randint(0, max_children) if depth == 0 else 0):
            dur = float(rng.randint(2, 6))
            spans.append((t, dur))
            t += dur + rng.randint(0, 2)
        launch = rng.random() < kernel_prob
        l_ts = t
        if launch:
            t += 2
        end = t + rng.randint(1, 3)
        nid = emit(name, parent, tid, ts, end - ts)
        for start, dur in spans:
            child = emit(rng.choice(("aten::empty", "aten::view", "aten::fill_")), nid, tid, start, dur)
            if dur >= 3 and rng.random() < 0.3:
                emit("aten::as_strided", child, tid, start + 1, dur - 2)
        if launch:
            c = corr[0]
            corr[0] += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": LAUNCH, "pid": PID, "tid": tid,
                           "ts": l_ts, "dur": 1.0, "args": {"External id": c, "correlation": c}})
            stream = rng.choice((7, 8))
            k_ts = max(l_ts + 3.0, stream_free[stream])
            k_dur = float(rng.randint(1, 20))
            stream_free[stream] = k_ts + k_dur
            kname = rng.choice(KERNEL_NAMES)
            events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": stream,
                           "ts": k_ts, "dur": k_dur,
                           "args": {"External id": c, "correlation": c, "stream": stream, "device": 0}})
            pair.launcher_of[c] = nid
            pair.kernels += 1
        return end

    thread_roots = []
    for k in range(threads):
        tid = 100 + k
        root = new_id()
        nodes.append(make(root, "[pytorch|profiler|execution_trace|thread]", 1, 0, tid))
        thread_roots.append((root, tid))
    for k, (root, tid) in enumerate(thread_roots):
        t = KINETO_T0 + 10.0 * k
        parent = root
        step_id = None
        if step and k == 0:
            step_id = emit("ProfilerStep#1", root, tid, t, 0.0, cat="user_annotation")
            parent = step_id
            t += 1
        for _ in range(top_ops):
            t = op_tree(parent, tid, t, 0) + rng.randint(0, 5)
        if step_id is not None:
            ev = next(e for e in events if e["name"] == "ProfilerStep#1")
            ev["dur"] = t - ev["ts"] + 1
    nodes.append(make(1, "[pytorch|profiler|execution_trace|process]", 1, 0, 0))
    schema = CHAKRA_SCHEMA if layout == "chakra" else "1.0.1"
    pair.host = {"schema": schema, "pid": PID, "time": HOST_TIME, "start_ts": 100, "finish_ts": 200,
                 "nodes": nodes}
    pair.kineto = {"schemaVersion": 1, "traceEvents": events,
                   "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
                   "traceName": "kineto_0.json"}
    return pair


def base_pair(layout: str = "chakra") -> Pair:
    """The fixed valid pair the fault cases damage: two threads, a step, several kernels."""
    return random_pair(random.Random(7), threads=2, top_ops=3, kernel_prob=0.7, layout=layout)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


# ---- faults shared by every JSON input ---------------------------------------------------------------------


def json_faults(valid: bytes, required_key: str) -> dict[str, Fault]:
    """Byte-level damage any JSON reader must survive, plus a document without ``required_key``."""
    packed = gz(valid)
    bad_utf8 = valid.replace(b'"name": "', b'"name": "\xff\xfe', 1)
    assert bad_utf8 != valid
    return {
        "empty": Fault(b"", words=("empty",)),
        "whitespace": Fault(b"  \n\t\n", words=("empty",)),
        "truncated_json": Fault(valid[: len(valid) * 2 // 3], words=("json",)),
        "truncated_gzip": Fault(packed[: len(packed) // 2], words=("gzip",), suffix=".json.gz"),
        "corrupt_gzip": Fault(b"\x1f\x8b\x08\x00" + bytes(range(40)), words=("gzip",), suffix=".json.gz"),
        "wrong_top_type": Fault(b"[1, 2, 3]", words=("top level",)),
        "top_level_string": Fault(b'"nodes"', words=("top level",)),
        f"missing_{required_key}": Fault(dumps({"schema": "1.0.1", "pid": 1}), words=(required_key.lower(),)),
        f"{required_key}_not_a_list": Fault(dumps({required_key: {"a": 1}}), words=(required_key.lower(),)),
        "non_utf8": Fault(bad_utf8, words=("utf-8", "utf8", "json")),
        "binary_garbage": Fault(bytes(random.Random(3).randrange(256) for _ in range(300)),
                                words=("json", "utf-8", "gzip")),
    }


# ---- host ET -----------------------------------------------------------------------------------------------


def host_faults(layout: str = "chakra") -> dict[str, Fault]:
    """Damaged host ETs (the ``--pytorch-et-file`` of the linker, a bare host ET for the converter)."""
    pair = base_pair(layout)
    out = json_faults(dumps(pair.host), "nodes")
    nodes = pair.host["nodes"]

    def variant(new_nodes: list[Any], **top: Any) -> bytes:
        return dumps({**pair.host, **top, "nodes": new_nodes})

    dup = [dict(n) for n in nodes]
    dup.append(dict(nodes[3]))
    out["duplicate_node_ids"] = Fault(variant(dup), words=("duplicate",))
    unknown = [{"id": n["id"], "label": n["name"], "up": 0} for n in nodes]
    out["unknown_schema_layout"] = Fault(variant(unknown, schema="7.0.0-future"), words=("layout",))
    out["node_not_object"] = Fault(variant([*nodes[:3], 17, *nodes[3:]]), words=("node",))
    out["node_without_id"] = Fault(variant([{k: v for k, v in n.items() if k != "id"} if i == 2 else n
                                            for i, n in enumerate(nodes)]), words=("id",))
    parent_key = "ctrl_deps" if layout == "chakra" else "parent"
    cyc = [dict(n) for n in nodes]
    # node 5 <-> node 6: each the other's parent (the ET's tree has a cycle)
    a, b = (next(i for i, n in enumerate(cyc) if n["id"] == x) for x in (5, 6))
    cyc[a][parent_key], cyc[b][parent_key] = 6, 5
    out["parent_cycle"] = Fault(variant(cyc), WARN, words=("cycle",))
    dangling = [dict(n) for n in nodes]
    dangling[4][parent_key] = 99999
    out["parent_missing_node"] = Fault(variant(dangling), WARN, words=("99999", "missing", "parent"))
    return out


# ---- Kineto ------------------------------------------------------------------------------------------------


def kineto_faults() -> dict[str, Fault]:
    pair = base_pair()
    out = json_faults(dumps(pair.kineto), "traceEvents")
    events = pair.kineto["traceEvents"]

    def variant(new_events: list[Any], **top: Any) -> bytes:
        # json.dumps writes bare NaN / Infinity, as PyTorch does
        return json.dumps({**pair.kineto, **top, "traceEvents": new_events}).encode()

    kernels = [i for i, e in enumerate(events) if e["cat"] == "kernel"]
    launches = [i for i, e in enumerate(events) if e["name"] == LAUNCH]
    dup = [dict(e, args=dict(e["args"])) for e in events]
    dup[launches[1]]["args"]["correlation"] = dup[launches[0]]["args"]["correlation"]
    out["duplicate_correlation_ids"] = Fault(variant(dup), WARN, words=("correlation",))
    orphan = [e for i, e in enumerate(events) if i not in launches[:2]]
    out["kernels_without_launch"] = Fault(variant(orphan), WARN, words=("no launching call",))

    def with_dur(value: Any) -> bytes:
        evs = [dict(e) for e in events]
        evs[kernels[0]]["dur"] = value
        cpu = next(i for i, e in enumerate(evs) if e["cat"] == "cpu_op")
        evs[cpu]["dur"] = value
        return variant(evs)

    out["nan_duration"] = Fault(with_dur(float("nan")), WARN, words=("nan",))
    out["negative_duration"] = Fault(with_dur(-25.0), WARN, words=("negative",))
    out["infinite_duration"] = Fault(with_dur(float("inf")), WARN, words=("infinite",))
    out["huge_duration"] = Fault(with_dur(1e300), WARN, words=("huge",))
    no_ts = [dict(e) for e in events]
    del no_ts[kernels[0]]["ts"]
    out["event_without_ts"] = Fault(variant(no_ts), words=("'ts'",))
    nan_ts = [dict(e) for e in events]
    nan_ts[2]["ts"] = float("nan")
    out["nan_timestamp"] = Fault(variant(nan_ts), words=("'ts'",))
    out["event_not_object"] = Fault(variant([*events[:2], "x", *events[2:]]), words=("traceevents[2]",))
    return out


def other_run_kineto(kind: str) -> bytes:
    """The base Kineto trace as if it came from another run: another pid, or a day later."""
    pair = base_pair()
    events = [dict(e) for e in pair.kineto["traceEvents"]]
    if kind == "pid":
        for e in events:
            if e["pid"] == PID:
                e["pid"] = PID + 1
    else:
        for e in events:
            e["ts"] += 86_400e6
    return dumps({**pair.kineto, "traceEvents": events})


# ---- ET+ (converter input) ---------------------------------------------------------------------------------


def etplus_doc(layout: str = "chakra") -> dict[str, Any]:
    """The base pair linked in memory: a valid ET+ document."""
    from chakra.device.loader import build_kineto_trace
    from chakra.host.loader import build_host_trace
    from chakra.link import link_traces

    pair = base_pair(layout)
    return link_traces(build_host_trace(json.loads(dumps(pair.host)), "host.json"),
                       build_kineto_trace(json.loads(dumps(pair.kineto)), "kineto.json"))


def etplus_faults(layout: str = "chakra") -> dict[str, Fault]:
    doc = etplus_doc(layout)
    out = json_faults(dumps(doc), "nodes")
    nodes = doc["nodes"]
    ops = [i for i, n in enumerate(nodes) if "ts" in n and n.get("cat") is None and n["id"] != 1
           and not n["name"].startswith("[")]
    gpu = [i for i, n in enumerate(nodes) if n.get("cat") == "kernel"]

    def variant(new_nodes: list[Any]) -> bytes:
        return json.dumps({**doc, "nodes": new_nodes}).encode()

    def copy() -> list[dict[str, Any]]:
        return [dict(n) for n in nodes]

    dup = copy()
    dup.append(dict(nodes[ops[0]]))
    out["duplicate_node_ids"] = Fault(variant(dup), words=("duplicate",))
    # two ops of one thread, a before b: b waits for a by call order; a sync_dep of a on b closes a cycle
    a = ops[0]
    b = next(i for i in ops[1:] if nodes[i].get("kineto_tid") == nodes[a].get("kineto_tid")
             and nodes[i]["ts"] > nodes[a]["ts"])
    cyc = copy()
    cyc[a]["sync_dep"] = [cyc[b]["id"]]
    out["dependency_cycle"] = Fault(variant(cyc), WARN, words=("cycle",))
    missing = copy()
    missing[ops[1]]["sync_dep"] = [987654]
    missing[ops[2]]["inter_thread_dep"] = 987655
    out["dependency_to_missing_node"] = Fault(variant(missing), WARN, words=("987654", "missing"))
    parent_key = "ctrl_deps" if layout == "chakra" else "parent"
    orphan_gpu = copy()
    orphan_gpu[gpu[0]][parent_key] = 555555
    out["gpu_node_missing_launcher"] = Fault(variant(orphan_gpu), WARN, words=("555555", "missing"))

    def with_dur(value: Any) -> list[dict[str, Any]]:
        evs = copy()
        for i in (ops[0], gpu[0]):
            evs[i]["dur"] = evs[i]["inclusive_dur"] = evs[i]["exclusive_dur"] = value
        return evs

    out["nan_duration"] = Fault(variant(with_dur(float("nan"))), WARN, words=("ts/dur",))
    out["negative_duration"] = Fault(variant(with_dur(-30.0)), WARN, words=("ts/dur",))
    out["huge_duration"] = Fault(variant(with_dur(1e300)), WARN, words=("ts/dur",))
    out["infinite_duration"] = Fault(variant(with_dur(float("inf"))), WARN, words=("ts/dur",))
    bad_ts = copy()
    bad_ts[ops[0]]["ts"] = "yesterday"
    out["timestamp_not_a_number"] = Fault(variant(bad_ts), WARN, words=("ts/dur",))
    return out


# ---- Chakra protobuf ET ------------------------------------------------------------------------------------


def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def et_bytes(messages: list[Any]) -> bytes:
    return b"".join(varint(len(m.SerializeToString())) + m.SerializeToString() for m in messages)


def _node(nid: int, ctrl: tuple[int, ...] = (), data: tuple[int, ...] = (), dur: int = 5) -> Any:
    from chakra import schema as pb

    n = pb.Node(id=nid, name=f"op{nid}", type=pb.COMP_NODE, ctrl_deps=list(ctrl), data_deps=list(data),
                start_time_micros=10 * nid, duration_micros=dur)
    a = n.attr.add()
    a.name, a.bool_val = "is_cpu_op", True
    return n


def _meta() -> Any:
    from chakra import schema as pb

    m = pb.GlobalMetadata(version="0.0.4")
    a = m.attr.add()
    a.name, a.int64_val = "rank", 0
    return m


def valid_et() -> bytes:
    return et_bytes([_meta(), _node(1), _node(2, (1,)), _node(3, (1,), (2,)), _node(4, (), (3,))])


def et_faults() -> dict[str, Fault]:
    """Damaged Chakra protobuf ETs (replay, jsonizer, visualizer, stats)."""
    good = valid_et()
    rnd = random.Random(11)
    noise = bytes(rnd.randrange(256) for _ in range(400))
    # a first byte whose varint length runs past the end: the reader must say "truncated", not crash
    noise = b"\xff\x7f" + noise
    return {
        "empty": Fault(b"", words=("empty",), suffix=".et"),
        "random_bytes": Fault(noise, words=("message", "truncated", "protobuf"), suffix=".et"),
        "truncated_last_message": Fault(good[:-3], words=("truncated",), suffix=".et"),
        "truncated_gzip": Fault(gz(good)[:40], words=("gzip",), suffix=".et.gz"),
        "json_instead_of_et": Fault(b'{"nodes": 3}', words=("protobuf", "message", "truncated", "json",
                                                            "chakra"), suffix=".et"),
        "duplicate_node_ids": Fault(et_bytes([_meta(), _node(1), _node(2, (1,)), _node(2, (1,))]),
                                    words=("duplicate",), suffix=".et"),
        "ctrl_dep_missing_node": Fault(et_bytes([_meta(), _node(1), _node(2, (77,))]),
                                       words=("77",), suffix=".et"),
        "dependency_cycle": Fault(et_bytes([_meta(), _node(1, (3,)), _node(2, (1,)), _node(3, (), (2,))]),
                                  words=("cycle",), suffix=".et"),
        "huge_duration": Fault(et_bytes([_meta(), _node(1, dur=2**64 - 1), _node(2, (1,))]), WARN,
                               words=(), suffix=".et"),
        "metadata_only": Fault(et_bytes([_meta()]), words=("no node",), suffix=".et"),
        "non_utf8_name": Fault(good.replace(b"op2", b"o\xff2", 1), words=("utf-8", "protobuf"), suffix=".et"),
    }


def et_json_faults() -> dict[str, Fault]:
    """Damaged JSON for the jsonizer's JSON -> protobuf direction (the format it writes itself)."""
    node = {"id": 1, "name": "op1", "type": "COMP_NODE", "duration_micros": "5",
            "attr": [{"name": "is_cpu_op", "bool_val": True}]}
    doc = {"format": "chakra_et_json", "version": 1, "global_metadata": {"version": "0.0.4"}, "nodes": [node]}
    good = dumps(doc)

    def nodes(*ns: Any) -> bytes:
        return dumps({**doc, "nodes": list(ns)})

    return {
        "truncated_json": Fault(good[:-20], words=("json",)),
        "nodes_not_a_list": Fault(dumps({**doc, "nodes": 3}), words=("nodes",)),
        "id_not_a_number": Fault(nodes({**node, "id": "abc"}), words=("nodes[0]",)),
        "negative_id": Fault(nodes({**node, "id": -5}), words=("out of range",)),
        "huge_id": Fault(nodes({**node, "id": 2**70}), words=("out of range",)),
        "int32_overflow": Fault(nodes({**node, "attr": [{"name": "comm_tag", "int32_val": 2**40}]}),
                                words=("out of range",)),
        "empty_node": Fault(nodes({}), words=("empty",)),
        "unknown_field": Fault(nodes({**node, "colour": "red"}), words=("colour",)),
        "metadata_not_object": Fault(dumps({**doc, "global_metadata": [1]}), words=("global_metadata",)),
    }


# ---- simulator CSV (timeline) ------------------------------------------------------------------------------


def valid_sim_csv() -> bytes:
    rows = [
        "issue,npu_id=0,curr_cycle=1000,node_id=1,node_name=op1",
        "callback,npu_id=0,curr_cycle=5000,node_id=1,node_name=op1",
        "issue,npu_id=1,curr_cycle=2000,node_id=2,node_name=op2",
        "callback,npu_id=1,curr_cycle=3000,node_id=2,node_name=op2",
    ]
    return ("\n".join(rows) + "\n").encode()


def sim_faults() -> dict[str, Fault]:
    good = valid_sim_csv()
    return {
        "empty": Fault(b"", words=("empty", "no issue"), suffix=".csv"),
        "truncated_gzip": Fault(gz(good)[:30], words=("gzip",), suffix=".csv.gz"),
        "non_utf8": Fault(good.replace(b"op1", b"op\xff\xfe", 1), WARN, words=(), suffix=".csv"),
        "not_a_sim_log": Fault(b"a,b,c\n1,2,3\n", words=("no issue",), suffix=".csv"),
        "binary_garbage": Fault(bytes(random.Random(5).randrange(256) for _ in range(200)),
                                words=("no issue", "utf-8", "gzip"), suffix=".csv"),
        "npu_out_of_range": Fault(good.replace(b"npu_id=1", b"npu_id=9"), words=("npu",), suffix=".csv"),
        "callback_before_issue": Fault(good.replace(b"curr_cycle=5000", b"curr_cycle=10"),
                                       words=("callback",), suffix=".csv"),
        "bad_cycle_number": Fault(good.replace(b"curr_cycle=1000", b"curr_cycle=abc"),
                                  words=("line 1", "cycle"), suffix=".csv"),
    }


# ---- archives (integration harness) ------------------------------------------------------------------------


def tgz(folder: str, files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{folder}/{name}" if folder else name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def archive_faults(folder: str) -> dict[str, Fault]:
    """Archives named ``<folder>.tgz`` for ``integration_tests.py --num_ranks 1``."""
    pair = base_pair()
    host, kin = dumps(pair.host), dumps(pair.kineto)
    good = tgz(folder, {"chakra_host_et_0.json": host, "kineto_0.json": kin})
    return {
        "empty": Fault(b"", words=("archive",), suffix=".tgz"),
        "truncated_tgz": Fault(good[: len(good) // 2], words=("archive",), suffix=".tgz"),
        "not_an_archive": Fault(b"hello world\n" * 20, words=("archive",), suffix=".tgz"),
        # two folders, none named like the archive (a flat archive is accepted: extracted into <folder>/)
        "no_folder": Fault(tgz("", {"a/chakra_host_et_0.json": host, "b/kineto_0.json": kin}),
                           words=("folder",), suffix=".tgz"),
        "missing_kineto": Fault(tgz(folder, {"chakra_host_et_0.json": host}), words=("kineto",),
                                suffix=".tgz"),
        "truncated_host_et": Fault(tgz(folder, {"chakra_host_et_0.json": host[:100], "kineto_0.json": kin}),
                                   words=("chakra_host_et_0.json",), suffix=".tgz"),
        "kineto_not_json": Fault(tgz(folder, {"chakra_host_et_0.json": host, "kineto_0.json": b"\xff" * 50}),
                                 words=("kineto_0.json",), suffix=".tgz"),
    }


def write_fault(directory: Path, name: str, fault: Fault, stem: str | None = None) -> Path:
    path = directory / f"{stem or name}{fault.suffix}"
    path.write_bytes(fault.data)
    return path
