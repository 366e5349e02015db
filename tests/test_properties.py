"""Property-based tests (hypothesis): readers never fail but with ChakraError; the stages keep invariants.

* Every reader (host ET, Kineto, ET+ -> converter, Chakra protobuf ET, stats, simulator CSV) given random
  JSON documents, trace-shaped documents with random fields, or random bytes either works or raises
  ChakraError (never KeyError, TypeError, RecursionError, OverflowError, ...).
* link -> convert -> replay on small random VALID host ET + Kineto pairs (``fault_inputs.random_pair``):
  every dependency names a node of the file, the graph is acyclic, each kernel belongs to exactly the host
  op that launched it (at most one), times are non-negative, and the replay terminates with no node
  ending before one of its dependencies started, no kernel starting before its launcher.

``max_examples`` stays small and ``deadline=None``: the suite must stay fast on two cores.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from helpers import fault_inputs as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra import schema as pb
from chakra.convert import convert_trace
from chakra.device.loader import build_kineto_trace
from chakra.errors import ChakraError
from chakra.host.loader import build_host_trace
from chakra.io import load_json, read_messages
from chakra.link import link_traces
from chakra.replay.api import replay_rank
from chakra.tools.timeline import parse_sim_log

# CHAKRA_FUZZ=10 runs ten times as many examples (a longer fuzzing session; the default keeps the suite fast)
_SCALE = max(1, int(os.environ.get("CHAKRA_FUZZ", "1")))
FAST = settings(max_examples=40 * _SCALE, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=15 * _SCALE, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# ---- strategies --------------------------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=25)

HOST_KEYS = ["id", "name", "parent", "ctrl_deps", "rf_id", "tid", "inputs", "outputs", "attrs",
             "input_shapes", "input_types", "ts", "dur", "exclusive_dur", "cat", "sync_dep",
             "inter_thread_dep", "kineto_tid", "stream", "device", "pg_name", "args"]
KINETO_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"]
ARG_KEYS = ["correlation", "External id", "Record function id", "stream", "device", "Process Group Name"]

small_ints = st.integers(min_value=-3, max_value=12)
field_values = (small_ints | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    ["X", "kernel", "cpu_op", "cuda_runtime", "cudaLaunchKernel", "aten::mm", "ProfilerStep#1",
     "record_param_comms", "## process_group:init ##", "[pytorch|profiler|execution_trace|thread]", ""])
    | st.none() | st.lists(small_ints, max_size=3)
    | st.fixed_dictionaries({"values": st.lists(small_ints, max_size=2), "shapes": st.just([]),
                             "types": st.just([])})
    | st.lists(st.fixed_dictionaries({"name": st.sampled_from(["rf_id", "tid", "pg_name", "comm_type"]),
                                      "type": st.just("int"), "value": small_ints}), max_size=3))


def _node(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), field_values, max_size=len(keys))


host_docs = st.fixed_dictionaries(
    {"nodes": st.lists(_node(HOST_KEYS), max_size=8)},
    optional={"schema": st.sampled_from(["1.0.1", "1.1.1-chakra.0.0.4", "9.9", "x"]),
              "pid": small_ints, "measured": st.dictionaries(st.sampled_from(["start_us", "dur_us"]),
                                                             field_values, max_size=2),
              "process_groups": json_values})
kineto_events = st.dictionaries(st.sampled_from(KINETO_KEYS), field_values, max_size=9).map(
    lambda e: e if not isinstance(e.get("args"), list) else {**e, "args": {}})
kineto_docs = st.fixed_dictionaries(
    {"traceEvents": st.lists(kineto_events | st.dictionaries(st.sampled_from(KINETO_KEYS), field_values)
                             .map(lambda e: {**e, "args": {k: 3 for k in ARG_KEYS[:3]}}), max_size=10)},
    optional={"distributedInfo": json_values, "baseTimeNanoseconds": small_ints})


def _only_chakra_errors(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ChakraError as exc:
        assert str(exc)  # a message a user can read
        assert "\n" not in exc.message
        return None


# ---- readers on random input -------------------------------------------------------------------------------


@FAST
@given(json_values)
def test_readers_on_random_json(doc: Any) -> None:
    _only_chakra_errors(build_host_trace, doc, "random.json")
    _only_chakra_errors(build_kineto_trace, doc, "random.json")


@FAST
@given(host_docs)
def test_host_loader_and_converter_on_trace_shaped_json(doc: dict[str, Any]) -> None:
    trace = _only_chakra_errors(build_host_trace, doc, "host.json")
    if trace is not None:
        res = _only_chakra_errors(convert_trace, trace)
        if res is not None:
            meta, nodes = res
            _check_graph(nodes)


@FAST
@given(kineto_docs)
def test_kineto_loader_on_trace_shaped_json(doc: dict[str, Any]) -> None:
    trace = _only_chakra_errors(build_kineto_trace, doc, "kineto.json")
    if trace is not None:
        for ev in trace.events:
            assert math.isfinite(ev.ts) and 0.0 <= ev.dur < math.inf and ev.excl_dur >= 0.0


_TMP = Path(tempfile.mkdtemp(prefix="chakra_props_"))


def _file(data: bytes, name: str) -> Path:
    p = _TMP / name
    p.write_bytes(data)
    return p


@FAST
@given(st.binary(max_size=300), st.sampled_from([b"", b"\x1f\x8b", b"{", b"\x0a\x05"]))
def test_readers_on_random_bytes(data: bytes, prefix: bytes) -> None:
    from chakra.replay.reader import load_graph as replay_load
    from chakra.tools.stats import load_graph as stats_load

    p = _file(prefix + data, "random.bin")
    _only_chakra_errors(load_json, p)
    _only_chakra_errors(read_messages, p, pb.GlobalMetadata, pb.Node)
    _only_chakra_errors(replay_load, p)
    _only_chakra_errors(stats_load, p)
    _only_chakra_errors(parse_sim_log, (prefix + data).decode("utf-8", "replace"), p)


@FAST
@given(st.integers(min_value=1, max_value=400), st.integers(min_value=0, max_value=2**32))
def test_truncated_protobuf_and_gzip(cut: int, seed: int) -> None:
    good = F.valid_et()
    rng = random.Random(seed)
    data = bytearray(good[: max(1, len(good) - cut % len(good))])
    if rng.random() < 0.5 and data:
        data[rng.randrange(len(data))] = rng.randrange(256)  # and one flipped byte
    for name, blob in (("t.et", bytes(data)), ("t.et.gz", gzip.compress(good)[: max(1, cut % 60)])):
        res = _only_chakra_errors(read_messages, _file(blob, name), pb.GlobalMetadata, pb.Node)
        if res is not None:
            assert all(isinstance(n, pb.Node) for n in res[1])


# ---- link -> convert -> replay on random valid traces ------------------------------------------------------


def _check_graph(nodes: list[Any]) -> None:
    """Every dependency exists and the graph is acyclic (Kahn)."""
    ids = [n.id for n in nodes]
    index = {nid: i for i, nid in enumerate(ids)}
    assert len(index) == len(ids), "duplicate node ids"
    indeg = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for d in set(n.ctrl_deps) | set(n.data_deps):
            assert d in index, f"node {n.id} depends on missing node {d}"
            users[index[d]].append(i)
            indeg[i] += 1
    ready = [i for i, k in enumerate(indeg) if k == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    assert seen == len(nodes), "dependency cycle"


pairs = st.builds(
    lambda seed, threads, top, kp, layout, step, rf: F.random_pair(
        random.Random(seed), threads=threads, top_ops=top, kernel_prob=kp, layout=layout, step=step,
        rf_ids=rf),
    st.integers(min_value=0, max_value=2**31), st.integers(min_value=1, max_value=3),
    st.integers(min_value=1, max_value=5), st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from(["chakra", "flat"]), st.booleans(), st.booleans())


@SLOW
@given(pairs)
def test_link_convert_replay_invariants(pair: F.Pair) -> None:
    host = build_host_trace(json.loads(F.dumps(pair.host)), "host.json")
    kineto = build_kineto_trace(json.loads(F.dumps(pair.kineto)), "kineto.json")
    doc = link_traces(host, kineto)

    # ET+: each kernel appears once and hangs under the op that launched it (rf ids) or none at all
    gpu = [n for n in doc["nodes"] if n.get("cat") == "kernel"]
    corrs = [n["args"]["correlation"] for n in gpu]
    assert len(corrs) == len(set(corrs)), "a kernel was attached twice"
    parent_key = "ctrl_deps" if host.layout == "chakra" else "parent"
    for n in gpu:
        assert isinstance(n[parent_key], int)
        if pair.kineto["traceEvents"] and any("Record function id" in e.get("args", {})
                                              for e in pair.kineto["traceEvents"]):
            assert n[parent_key] == pair.launcher_of[n["args"]["correlation"]]
    if any("Record function id" in e.get("args", {}) for e in pair.kineto["traceEvents"]):
        assert len(gpu) == pair.kernels
    for n in doc["nodes"]:
        for key in ("dur", "inclusive_dur", "exclusive_dur"):
            if key in n:
                assert n[key] >= 0
    ids = {n["id"] for n in doc["nodes"]}
    for n in doc["nodes"]:
        for d in n.get("sync_dep", []) + ([n["inter_thread_dep"]] if "inter_thread_dep" in n else []):
            assert d in ids

    trace = build_host_trace(json.loads(json.dumps(doc)), "et_plus.json")
    meta, nodes = convert_trace(trace)
    _check_graph(nodes)
    assert sum(1 for n in nodes if any(a.name == "is_cpu_op" and not a.bool_val for a in n.attr)) == len(gpu)

    res = replay_rank(nodes, metadata=meta)
    times = res.node_times()
    assert set(times) == {n.id for n in nodes}
    for n in nodes:
        start, end = times[n.id]
        assert 0.0 <= start <= end < math.inf
        gpu_node = any(a.name == "is_cpu_op" and not a.bool_val for a in n.attr)
        for d in set(n.ctrl_deps) | set(n.data_deps):
            # a kernel may start before its launching op ends (the launch is inside the op) and a
            # synchronising op may start before what it waits for (the wait bounds its end), but nothing
            # ends before a dependency began, and a kernel never starts before its launcher
            assert end >= times[d][0] - 1e-6, f"node {n.id} ends before its dependency {d} starts"
            if gpu_node:
                assert start >= times[d][0] - 1e-6, f"kernel {n.id} starts before its launcher {d}"
    assert 0.0 <= res.replayed_us < math.inf


# ---- valid traces with one field damaged: the whole chain fails only with ChakraError ----------------------

_BASE = F.base_pair()
_BASE_HOST = F.dumps(_BASE.host)
_BASE_KINETO = F.dumps(_BASE.kineto)
_BASE_ETPLUS = F.dumps(F.etplus_doc())


def _mutate(blob: bytes, list_key: str, pick: int, key: str, value: Any, drop: bool) -> dict[str, Any]:
    doc = json.loads(blob)
    items = doc[list_key]
    item = items[pick % len(items)]
    if drop:
        item.pop(key, None)
    elif key == "args" and isinstance(item.get("args"), dict) and isinstance(value, int):
        item["args"]["correlation"] = value  # collide or dangle correlation ids
    else:
        item[key] = value
    return doc


mutations = st.tuples(st.integers(min_value=0, max_value=200), field_values, st.booleans())


@SLOW
@given(mutations, st.sampled_from(HOST_KEYS), st.sampled_from(["host", "kineto"]),
       st.sampled_from(KINETO_KEYS))
def test_link_chain_on_one_damaged_field(mut: tuple[int, Any, bool], host_key: str, which: str,
                                         kineto_key: str) -> None:
    pick, value, drop = mut
    if which == "host":
        host_doc = _mutate(_BASE_HOST, "nodes", pick, host_key, value, drop)
        kin_doc = json.loads(_BASE_KINETO)
    else:
        host_doc, kin_doc = json.loads(_BASE_HOST), _mutate(_BASE_KINETO, "traceEvents", pick, kineto_key,
                                                            value, drop)
    host = _only_chakra_errors(build_host_trace, host_doc, "host.json")
    kineto = _only_chakra_errors(build_kineto_trace, kin_doc, "kineto.json")
    if host is None or kineto is None:
        return
    doc = _only_chakra_errors(link_traces, host, kineto)
    if doc is None:
        return
    trace = _only_chakra_errors(build_host_trace, json.loads(json.dumps(doc)), "et_plus.json")
    res = _only_chakra_errors(convert_trace, trace) if trace is not None else None
    if res is not None:
        _check_graph(res[1])
        _only_chakra_errors(replay_rank, res[1])


@SLOW
@given(mutations, st.sampled_from(HOST_KEYS))
def test_converter_on_one_damaged_etplus_field(mut: tuple[int, Any, bool], key: str) -> None:
    pick, value, drop = mut
    doc = _mutate(_BASE_ETPLUS, "nodes", pick, key, value, drop)
    trace = _only_chakra_errors(build_host_trace, doc, "et_plus.json")
    res = _only_chakra_errors(convert_trace, trace) if trace is not None else None
    if res is not None:
        meta, nodes = res
        _check_graph(nodes)
        for n in nodes:
            assert 0 <= n.start_time_micros < 2**64 and 0 <= n.duration_micros < 2**64
        out = _only_chakra_errors(replay_rank, nodes)
        if out is not None:
            assert math.isfinite(out.replayed_us)
