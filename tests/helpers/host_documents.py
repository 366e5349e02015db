"""Random host ET / ET+ documents of both layouts (hypothesis strategies) shared by the decoder and column
tests."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-05, 1e16, 1.5, 0.1, 2.0 ** 70, 1e-300]),
    st.text(max_size=6),
    st.sampled_from(["<None>", "cuda:0", 'q"u\\o/te', "é\u2028", "a b", "Tensor(float)"]))


json_values = st.recursive(
    _scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=2),
    max_leaves=8)


_STD = ["rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema"]


_ETP = ["ts", "dur", "inclusive_dur", "exclusive_dur", "kineto_tid", "inter_thread_dep", "sync_dep", "cat",
        "ph", "stream", "device", "pid", "args", "pg_name", "collective_name", "comm_size", "comm_backend"]


_NAMES = st.sampled_from(["aten::mm", "aten::add", "record_param_comms", "nccl:all_reduce", "c10d::send",
                          "[pytorch|profiler|execution_trace|thread]",
                          "[pytorch|profiler|execution_graph|thread]", "ProfilerStep#3", "gloo:all_reduce",
                          "x y", "#weird"])


@st.composite
def _chakra_io(draw: Any) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return None
    d = {"values": draw(json_values), "shapes": draw(json_values), "types": draw(json_values)}
    if draw(st.booleans()):
        d["strides"] = draw(st.one_of(st.none(), json_values))
    if draw(st.integers(0, 5)) == 0:
        d["extra"] = 1   # dropped
    return d


@st.composite
def _chakra_node(draw: Any, nid: int) -> dict[str, Any]:
    n: dict[str, Any] = {"id": nid, "name": draw(_NAMES)}
    k = draw(st.integers(0, 6))
    if k < 4:
        n["ctrl_deps"] = draw(st.integers(0, 40))
    elif k == 4:
        n["ctrl_deps"] = draw(st.one_of(st.none(), st.lists(st.integers(0, 40), max_size=2)))
    for key in ("inputs", "outputs"):
        if draw(st.integers(0, 5)):
            n[key] = draw(_chakra_io())
    if draw(st.integers(0, 5)):
        names = list(_STD) if draw(st.booleans()) else draw(st.lists(st.sampled_from(_STD), max_size=7))
        names += draw(st.lists(st.sampled_from(["kernel_backend", "kernel_file", "tensor_range", "pg_name",
                                                "rf_id", "dtype"]), max_size=3))
        attrs = []
        for name in names:
            a: dict[str, Any] = {"name": name}
            if draw(st.integers(0, 3)):
                a["type"] = draw(st.sampled_from(["uint64", "int64", "string", "bool", "double"]))
            a["value"] = draw(json_values) if draw(st.integers(0, 3)) == 0 else draw(st.integers(-1, 99))
            attrs.append(a)
        n["attrs"] = attrs
    extras = st.sampled_from(_ETP + ["tid", "rf_id", "future_key"])
    for key in draw(st.lists(extras, max_size=4, unique=True)):
        n[key] = draw(json_values)
    return _shuffled(draw, n)


@st.composite
def _flat_node(draw: Any, nid: int) -> dict[str, Any]:
    n: dict[str, Any] = {"name": draw(_NAMES), "id": nid}
    if draw(st.integers(0, 5)):
        n["parent"] = draw(st.integers(0, 40))
    for key in draw(st.lists(st.sampled_from(_STD), max_size=7, unique=True)):
        n[key] = draw(st.integers(-1, 99)) if draw(st.booleans()) else draw(json_values)
    for key in ("inputs", "outputs"):
        if draw(st.integers(0, 5)):
            n[key] = draw(st.one_of(st.lists(json_values, max_size=4),
                                    st.sampled_from([None, [], 0, "", False])))
    for key in ("input_shapes", "input_types", "output_shapes", "output_types", "input_strides",
                "output_strides"):
        if draw(st.integers(0, 2)):
            n[key] = draw(json_values)
    for key in draw(st.lists(st.sampled_from(_ETP + ["ctrl_deps", "future_key"]), max_size=4, unique=True)):
        n[key] = draw(json_values)
    return _shuffled(draw, n)


def _shuffled(draw: Any, n: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.permutations(list(n)))
    return {k: n[k] for k in keys}


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    layout = draw(st.sampled_from(["flat", "chakra"]))
    ids = draw(st.lists(st.integers(1, 40), min_size=1, max_size=12, unique=True))
    make = _flat_node if layout == "flat" else _chakra_node
    nodes = [draw(make(i)) for i in ids]
    doc: dict[str, Any] = {"schema": draw(st.sampled_from(["1.0.1", "1.1.1-chakra.0.0.4", "9.9.9", None])),
                           "pid": 7, "nodes": nodes}
    if draw(st.booleans()):
        doc["finish_ts"] = 5
    return doc
