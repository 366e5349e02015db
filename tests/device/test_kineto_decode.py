"""The typed Kineto decoder (``chakra.device.decode`` + the loader's one pass) against a plain reference
reader (``tests/kineto_oracle.py``, the ``get``-call reading it replaced), on random documents full of odd
values and on every Kineto trace of the corpus; plus the cases the typed decoding adds: args kept as
text, the collective label, the file index column, top-level keys, non-UTF-8 bytes, bare NaN."""

from __future__ import annotations

import gzip
import json
import logging
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers.kineto_oracle import FIELDS, Reference, ReferenceError_, reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra.device import load_kineto
from chakra.device.loader import build_kineto_trace
from chakra.device.model import KERNEL, NO_ARGS, SYNC
from chakra.errors import TraceFormatError

_SCALE = max(1, int(os.environ.get("CHAKRA_FUZZ", "1")))


def _loaded(trace: Any) -> list[tuple[Any, ...]]:
    out = []
    for i, ev in zip(trace.file_index, trace.events):
        out.append((i, *(getattr(ev, f) for f in FIELDS[1:])))
    return out


def _same(path: Path, data: bytes, op_args: bool = False) -> None:
    """The loader and the reference agree on ``data`` (written to ``path``): both refuse it, or every
    event, the clamped durations and the counts are equal."""
    path.write_bytes(data)
    try:
        ref: Reference | None = reference(data, op_args)
    except ReferenceError_:
        ref = None
    try:
        trace = load_kineto(path, op_args=op_args)
    except TraceFormatError as exc:
        assert ref is None, f"loader refused what the reference reads: {exc}"
        assert str(path) in str(exc) and "\n" not in exc.message
        return
    assert ref is not None, "loader read what the reference refuses"
    got = _loaded(trace)
    assert len(got) == len(ref.events)
    for g, r in zip(got, ref.events):
        for name, a, b in zip(FIELDS, g, r):
            assert a == b and type(a) is type(b), (name, g, r)
    assert trace.stats["clamped_durations"] == len(ref.clamped)
    assert trace.flow_count == ref.flows
    assert {k[3:]: v for k, v in trace.stats.items() if k.startswith("ph_")} == ref.phases
    assert trace.stats["events_total"] == len(ref.events) + sum(ref.phases.values())


# ---- random documents -------------------------------------------------------------------------------------

_ints = st.integers(min_value=-3, max_value=2**62)
_odd = (st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from(["", "12", " 7 ", "1.5", "abc", "nan"]) | st.lists(st.integers(0, 3), max_size=2)
        | st.dictionaries(st.sampled_from(["a"]), st.integers(0, 3), max_size=1))
_numbers = st.floats(min_value=0, max_value=1e13, allow_nan=False) | st.integers(0, 10**6)
_names = st.sampled_from(["aten::mm", "ProfilerStep#1", "cudaLaunchKernel", "cudaMemcpy", "cudaMemcpyAsync",
                          "cudaStreamSynchronize", "cudaStreamWaitEvent", "cudaSomethingNew",
                          "hipLaunchKernel", "ncclDevKernel_AllReduce", "Memcpy HtoD", "fwd", "INVALID",
                          "cuLaunchKernel"])
_cats = st.sampled_from(["cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "hip_runtime", "kernel",
                         "gpu_memcpy", "gpu_memset", "python_function", "Trace", "Kernel", "CPU_OP", "ac2g",
                         "gpu_user_annotation"])
_arg_values = {
    "External id": _ints | _odd, "external id": _ints, "Record function id": _ints | _odd,
    "correlation": st.integers(0, 6) | _odd, "stream": st.integers(0, 30) | _odd,
    "device": st.integers(0, 3) | _odd, "Collective name": st.sampled_from(["allreduce", ""]) | st.none(),
    "wait_on_stream": st.integers(0, 30), "Input type": st.lists(st.sampled_from(["float", "Scalar"]),
                                                                  max_size=2),
    "grid": st.lists(st.integers(1, 9), max_size=3), "occupancy": st.floats(0, 1) | st.integers(0, 2**62),
}
_args = st.fixed_dictionaries({}, optional=_arg_values) | _odd
_events = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "X", "X", "X", "s", "f", "i", "M", "B"]) | st.none() | st.integers(0, 2),
    "cat": _cats | _odd, "name": _names | _odd, "pid": st.integers(0, 3) | _odd,
    "tid": st.integers(0, 3) | _odd, "ts": _numbers | _odd, "dur": _numbers | _odd | st.floats(-5, -1),
    "args": _args, "id": st.integers(0, 6) | _odd,
})
# most events well-formed: ph X with a ts, so that documents get past their first event
_usual = st.fixed_dictionaries({"ph": st.just("X"), "cat": _cats, "name": _names, "pid": st.integers(0, 2),
                                "tid": st.integers(0, 2), "ts": _numbers, "dur": _numbers},
                               optional={"args": st.fixed_dictionaries({}, optional=_arg_values)})
_docs = st.fixed_dictionaries({"traceEvents": st.lists(_usual | _usual | _events, max_size=12)},
                              optional={"distributedInfo": st.just({"rank": 1}), "schemaVersion": st.just(1)})


@settings(max_examples=150 * _SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=_docs, op_args=st.booleans(), indent=st.booleans())
def test_decoder_equals_reference_on_random_documents(tmp_path: Path, doc: dict[str, Any], op_args: bool,
                                                      indent: bool) -> None:
    # json.dumps writes bare NaN / Infinity for non-finite floats, as PyTorch does
    data = json.dumps(doc, indent=1 if indent else None).encode()
    logging.disable(logging.WARNING)
    try:
        _same(tmp_path / "k.json", data, op_args)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.slow
def test_decoder_equals_reference_on_corpus(corpus: Path, data_dir: Path, tmp_path: Path) -> None:
    files = sorted(corpus.rglob("kineto*.json.gz")) + sorted((corpus / "kineto_only").glob("*.json.gz"))
    files += sorted(data_dir.rglob("kineto*.json*"))
    assert len(files) >= 24
    for f in files:
        _same(tmp_path / "k.json", gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes(),
              op_args="kineto_only" in str(f))


# ---- what the typed decoding adds -------------------------------------------------------------------------

def _write(tmp_path: Path, events: list[Any], **top: Any) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({**top, "traceEvents": events}, indent=2))
    return path


GPU_ARGS = {"External id": 7, "device": 0, "stream": 7, "correlation": 3, "grid": [1, 2, 3],
            "est. achieved occupancy %": 12.5, "memory bandwidth (GB/s)": 23.730163767181967}


def test_gpu_args_texts_are_kept_at_their_own_size() -> None:
    """orjson's output sits in a ~4 KB buffer: kept per GPU event, 325k of them cost the 1M link 1.5 GB."""
    import tracemalloc

    import msgspec

    from chakra.device.decode import args_text

    raws = [msgspec.Raw(orjson.dumps({"ph": "X", "cat": "kernel", "name": "k", "args": {**GPU_ARGS,
                                                                                      "correlation": i}}))
            for i in range(2000)]
    tracemalloc.start()
    try:
        kept = [args_text(r, i, "t.json") for i, r in enumerate(raws)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept[5] == orjson.dumps({**GPU_ARGS, "correlation": 5})
    assert held / len(kept) < 400   # ~170 bytes of text + the object; 4 KB each when orjson's buffer stays


def test_gpu_args_with_a_number_orjson_refuses_keep_the_files_text() -> None:
    import msgspec

    from chakra.device.decode import args_text

    raw = msgspec.Raw(b'{"ph": "X", "cat": "kernel", "args": {"bandwidth": 1e400, "stream": 7}}')
    assert args_text(raw, 0, "t.json") == b'{"bandwidth": 1e400, "stream": 7}'


def test_gpu_args_kept_as_orjson_text_and_decoded_when_asked(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0.5,
               "dur": 2.0, "args": {"correlation": 3, "External id": 7, "cbid": 211}},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3.0, "dur": 1.25,
               "args": GPU_ARGS},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
               "ts": 9.0, "dur": 1.0, "args": {"stream": 7, "cbid": 131}}]
    tr = load_kineto(_write(tmp_path, events))
    launch, kernel, sync = tr.events
    # the kernel's args: the file's object (key order included), a new dict each time; kept as the text
    # orjson writes for it (what ET+ holds), not as indented in the file
    assert kernel.args_source == orjson.dumps(GPU_ARGS)
    assert kernel.args == GPU_ARGS and list(kernel.args) == list(GPU_ARGS)
    assert kernel.args is not kernel.args
    assert orjson.dumps(kernel.args) == orjson.dumps(GPU_ARGS)
    # a synchronizing call keeps its args decoded; a launch keeps none (its ids are fields)
    assert sync.kind == SYNC and sync.args == {"stream": 7, "cbid": 131}
    assert launch.args is NO_ARGS and (launch.correlation, launch.external_id) == (3, 7)
    assert (kernel.kind, kernel.stream, kernel.device, kernel.correlation) == (KERNEL, 7, 0, 3)
    assert list(tr.file_index) == [0, 1, 2]


def test_collective_label(tmp_path: Path) -> None:
    k = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1.0, "dur": 1.0}
    events = [{**k, "name": "a", "args": {"Collective name": "allreduce", "stream": 7}},
              {**k, "name": "b", "args": {"Collective name": None}},
              {**k, "name": "c", "args": {"stream": 7}},
              {**k, "name": "d"},
              {**k, "name": "e", "args": {"Collective name": "allreduce", "stream": "7"}}]  # lenient path
    tr = load_kineto(_write(tmp_path, events))
    assert [ev.collective for ev in tr.events] == [True, True, False, False, True]
    assert tr.events[4].stream == 7


def test_top_level_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, [], schemaVersion=1, baseTimeNanoseconds=5, host_name="vm", traceName="t.json",
                  somethingNew={"a": 1})
    tr = load_kineto(path)
    # the keys of the table are kept in extra; others are skipped unread
    assert tr.extra == {"schemaVersion": 1, "host_name": "vm", "baseTimeNanoseconds": 5}
    assert tr.trace_name == "t.json"


def test_huge_ids_stay_exact(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
               "args": {"External id": 2**70 + 1, "Record function id": 2**64}}]
    ev = load_kineto(_write(tmp_path, events)).events[0]
    assert (ev.external_id, ev.rf_id) == (2**70 + 1, 2**64)


def test_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    head = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, '
            b'"dur": 2, ')
    path = tmp_path / "k.json"
    # in args no stage reads: never decoded, not an error
    path.write_bytes(head + b'"args": {"Input type": ["\xff\xfe"], "External id": 4}}]}')
    assert load_kineto(path).events[0].external_id == 4
    # in a name, and in the args of a GPU op (kept for ET+): an error naming the event
    path.write_bytes(head.replace(b'"a"', b'"\xff"') + b'"args": {}}]}')
    with pytest.raises(TraceFormatError, match=r"traceEvents\[0\] is not valid JSON"):
        load_kineto(path)
    path.write_bytes(head.replace(b"cpu_op", b"kernel") + b'"args": {"grid": "\xff"}}]}')
    with pytest.raises(TraceFormatError, match=r"traceEvents\[0\] is not valid JSON"):
        load_kineto(path)


def test_bare_nan_is_null(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "k.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
                    '"ts": 1.5, "dur": 2, "args": {"stream": 7, "occupancy": NaN, "x": -Infinity}}]}')
    with caplog.at_level(logging.INFO, logger="chakra.device.decode"):
        ev = load_kineto(path).events[0]
    assert ev.args == {"stream": 7, "occupancy": None, "x": None}  # what ET+ says of them (orjson: null)
    assert any("NaN" in r.getMessage() for r in caplog.records)


def test_number_out_of_float_range(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text('{"traceEvents": [{"ph": "M", "name": "x"}, '
                    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e400, "dur": 1}]}')
    with pytest.raises(TraceFormatError, match=r"traceEvents\[1\] is not valid JSON"):
        load_kineto(path)


def test_build_from_a_parsed_document_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TraceFormatError, match="not a JSON document"):
        build_kineto_trace({"traceEvents": [{"ph": "X", "ts": 2**70}]}, "mem.json")


def test_number_out_of_float_range_at_the_top_level(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text('{"distributedInfo": {"rank": 1e400}, "traceEvents": []}')
    with pytest.raises(TraceFormatError, match="not valid JSON .*out of range"):
        load_kineto(path)
