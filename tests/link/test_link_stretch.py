"""A host ET of one iteration, a Kineto trace of many, no ProfilerStep (issue 30, class 2).

The linker links the stretch of the Kineto trace that the host ET recorded, and measures it; it refuses pairs
of which no stretch aligns, and pairs whose start times are days apart (``--force`` links them anyway).

The pairs: ``tests/data/gloo_one_iter_2r`` was collected so (``trace_collection/collect.py --et-iteration 4``:
the profiler over 8 iterations, the ET observer over the fifth; PyTorch 2.13 writes the host ops' rf_ids as
``Record function id`` on that iteration's Kineto events, 0 on the others'); the others are made from corpus
traces by the edits that create the structure (``helpers/stretch_pairs.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from helpers.stretch_pairs import (
    copy_span,
    drop_host_steps,
    drop_kineto_steps,
    keep_host_ops,
    read,
    repeat_kineto,
    rf_ids,
    steps_of,
    strip_rf,
    write,
)

from chakra.cli import trace_link
from chakra.errors import TraceFormatError
from chakra.link import link_files

COLLECTED = Path(__file__).resolve().parents[1] / "data" / "gloo_one_iter_2r"
CPU = ("cpu_op", "user_annotation")
STRETCH = "host_et_stretch"   # the measured window's name (chakra.link.stretch.STRETCH)


def _ops(kineto: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in kineto["traceEvents"] if e.get("ph") == "X" and e.get("cat") in CPU]


def _span(events: list[dict[str, Any]]) -> tuple[float, float]:
    return min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events)


def _recorded(kineto: dict[str, Any], main_tid: Any) -> tuple[float, float]:
    """Where the host ET's iteration lies in a collected Kineto trace: the span of the main thread's ops that
    carry a Record function id of the ET observer (not 0), but its ``## process_group:init ##`` (a metadata
    node of the host ET, recorded as the observer starts)."""
    return _span([e for e in _ops(kineto) if e["tid"] == main_tid and e["args"].get("Record function id")
                  and not e["name"].startswith("## process_group")])


def _timed(doc: dict[str, Any]) -> dict[int, float]:
    """Host node id -> ts of its matched Kineto event (GPU nodes have a stream)."""
    return {n["id"]: n["ts"] for n in doc["nodes"] if "ts" in n and "stream" not in n}


# ---- the collected pair ------------------------------------------------------------------------------------

# read off the committed files: the main thread's tid and the span of its ops in the recorded iteration
COLLECTED_MAIN = {0: 12412, 1: 12413}
COLLECTED_US = {0: 12674.274, 1: 12194.130}


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("ids", ["Record function id", "names only"])
def test_collected_one_iteration_links_that_iteration(rank: int, ids: str, tmp_path: Path) -> None:
    kineto = read(COLLECTED / f"kineto_{rank}.json.gz")
    lo, hi = _recorded(kineto, COLLECTED_MAIN[rank])
    everything = _span(_ops(kineto))
    assert hi - lo == pytest.approx(COLLECTED_US[rank], abs=1e-3)
    assert everything[1] - everything[0] > 5 * (hi - lo)     # the trace holds much more than the iteration
    kpath = COLLECTED / f"kineto_{rank}.json.gz"
    if ids == "names only":
        kpath = write(tmp_path / "kineto.json", strip_rf(kineto))
    out = tmp_path / "et_plus.json"
    report = link_files(COLLECTED / f"host_et_{rank}.json.gz", kpath, out)
    doc = read(out)
    assert report.matched == report.host_ops == 226
    assert report.strategy == ("rf_id" if ids == "Record function id" else "alignment")
    # on main: window kineto_span, measured 489,276 us (rank 0) / 74,039 us (rank 1), the whole trace
    assert doc["measured"]["window"] == STRETCH
    assert doc["measured"]["start_us"] == lo
    assert doc["measured"]["dur_us"] == pytest.approx(hi - lo)
    assert all(lo <= ts < hi for ts in _timed(doc).values())


def test_names_alone_pick_the_ops_the_ids_pick(tmp_path: Path) -> None:
    """Without Record function ids, every host op gets the event the ids give it (12 iterations of names
    alike: the first after the observer's ## process_group:init ## event)."""
    kineto = read(COLLECTED / "kineto_0.json.gz")
    by_ids, by_names = tmp_path / "ids.json", tmp_path / "names.json"
    link_files(COLLECTED / "host_et_0.json.gz", COLLECTED / "kineto_0.json.gz", by_ids)
    link_files(COLLECTED / "host_et_0.json.gz", write(tmp_path / "k.json", strip_rf(kineto)), by_names)
    a, b = read(by_ids), read(by_names)
    assert len(_timed(a)) == 226 and _timed(a) == _timed(b)
    assert "after the ET observer started" in b["link_stats"]["window_reason"]


def test_without_the_start_mark_the_slowed_iteration_is_taken(tmp_path: Path) -> None:
    """No Record function id and no ## process_group:init ## event (older PyTorch): of the iterations whose
    names align alike, the one the observer slowed down (its callbacks run inside every op it records)."""
    kineto = strip_rf(read(COLLECTED / "kineto_0.json.gz"))
    lo, hi = _recorded(read(COLLECTED / "kineto_0.json.gz"), COLLECTED_MAIN[0])
    kineto["traceEvents"] = [e for e in kineto["traceEvents"]
                             if not str(e.get("name")).startswith("## process_group")]
    out = tmp_path / "et_plus.json"
    link_files(COLLECTED / "host_et_0.json.gz", write(tmp_path / "k.json", kineto), out)
    doc = read(out)
    assert (doc["measured"]["start_us"], doc["measured"]["dur_us"]) == (lo, pytest.approx(hi - lo))
    assert "ran slowest in" in doc["link_stats"]["window_reason"]


def test_collected_one_iteration_replays_its_iteration(tmp_path: Path) -> None:
    """On main: measured = the whole trace (489,276 and 74,039 us), replay -3.43% and -21.02%."""
    from chakra.pipeline import run_pipeline

    result = run_pipeline(COLLECTED, tmp_path / "out", jobs=1)
    for r in result.ranks:
        assert r.measured_us == pytest.approx(COLLECTED_US[r.rank], abs=1e-3)
        assert abs(r.error_pct) < 1.0


# ---- made from corpus traces -------------------------------------------------------------------------------


def _gloo_step2(corpus: Path) -> tuple[dict[str, Any], dict[str, Any], Any, Any]:
    """cpu_gloo/ddp_mlp_4r rank 0: its host ET cut to ProfilerStep#2's ops, no ProfilerStep node; its Kineto
    trace; a filter of the events of step 2; the main thread."""
    folder = corpus / "cpu_gloo" / "ddp_mlp_4r"
    kineto = read(folder / "kineto_0.json.gz")
    s2 = steps_of(kineto)["ProfilerStep#2"]

    def in_step2(e: dict[str, Any]) -> bool:
        return s2[0] <= e["ts"] < s2[1]

    host = drop_host_steps(keep_host_ops(read(folder / "host_et_0.json.gz"), rf_ids(kineto, in_step2)))
    main = next(e["tid"] for e in _ops(kineto) if e["name"] == "ProfilerStep#2")
    return host, kineto, in_step2, main


@pytest.mark.parametrize("ids", ["Record function id", "names only"])
def test_gloo_step_repeated(corpus: Path, ids: str, tmp_path: Path) -> None:
    """Step 2 of a DDP rank run five times over; the host ET recorded the fourth, which ran 1.25x slower.  On
    main: measured 127,951 us (all five); with names only, none of the 228 ops matched in the fourth."""
    host, kineto, in_step2, main = _gloo_step2(corpus)
    many = repeat_kineto(kineto, 5, 3, slow=1.25, keep=in_step2)
    if ids == "names only":
        many = strip_rf(many)
    start, end = copy_span(kineto, 5, 3, slow=1.25, keep=in_step2)
    lo, hi = _span([e for e in _ops(many) if e["tid"] == main and start <= e["ts"] < end])
    out = tmp_path / "et_plus.json"
    report = link_files(write(tmp_path / "h.json", host), write(tmp_path / "k.json", many), out)
    doc = read(out)
    assert report.matched == report.host_ops == 228           # read off: the ops of ProfilerStep#2
    assert (doc["measured"]["start_us"], doc["measured"]["dur_us"]) == (lo, pytest.approx(hi - lo))
    assert all(start <= ts < end for ts in _timed(doc).values())


def test_host_et_of_one_step_kineto_of_two(corpus: Path, tmp_path: Path) -> None:
    """The host ET cut to ProfilerStep#2, the Kineto trace of both steps, no ProfilerStep: step 2 is measured
    (on main: the events are right, by Record function id, but the window is both steps, 50,496 us)."""
    host, kineto, in_step2, main = _gloo_step2(corpus)
    lo, hi = _span([e for e in _ops(kineto) if e["tid"] == main and in_step2(e)
                    and not e["name"].startswith("ProfilerStep")])
    out = tmp_path / "et_plus.json"
    link_files(write(tmp_path / "h.json", host), write(tmp_path / "k.json", drop_kineto_steps(kineto)), out)
    doc = read(out)
    assert (doc["measured"]["start_us"], doc["measured"]["dur_us"]) == (lo, pytest.approx(hi - lo))
    assert hi - lo == pytest.approx(21258.548, abs=1e-3)      # ProfilerStep#2 is 21,320 us
    assert all(lo <= ts < hi for ts in _timed(doc).values())


def _dlrm(corpus: Path, tmp_path: Path, slow: float) -> tuple[Path, Path, tuple[float, float]]:
    """DLRM rank 0 (V100, NCCL): its step run four times over, the host ET (no ProfilerStep node) of the
    third, which ran ``slow`` times slower; no Record function id.  Also where the third copy lies."""
    folder = corpus / "dlrm_8r_v100"
    kineto = read(folder / "device" / "kineto_0.json.gz")
    host = write(tmp_path / "h.json", drop_host_steps(read(folder / "host" / "host_et_0.json.gz")))
    return host, write(tmp_path / "k.json", repeat_kineto(kineto, 4, 2, slow=slow)), \
        copy_span(kineto, 4, 2, slow=slow)


def test_dlrm_one_iteration_attaches_its_gpu_ops(corpus: Path, tmp_path: Path) -> None:
    """On main: 261/1044 GPU ops attached (25.0%), measured 71,834 us, replay -80.05%."""
    from chakra.convert import convert_file
    from chakra.replay.api import replay_file

    host, kin, (start, end) = _dlrm(corpus, tmp_path, 1.3)
    out = tmp_path / "et_plus.json"
    report = link_files(host, kin, out)
    doc = read(out)
    assert report.matched == report.host_ops == 1672
    assert report.gpu_attached == report.gpu_ops_in_window == 261      # all of that step's (read off)
    assert all(start <= ts < end for ts in _timed(doc).values())
    assert doc["measured"]["window"] == STRETCH and start <= doc["measured"]["start_us"] < end
    convert_file(out, tmp_path / "r.et")
    rep = replay_file(tmp_path / "r.et")
    assert abs(rep.replayed_us / rep.measured_us - 1) < 0.01


def test_dlrm_identical_iterations_warn(corpus: Path, tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """Four copies alike in names and times: nothing tells them apart; the first is linked, with a warning."""
    host, kin, _ = _dlrm(corpus, tmp_path, 1.0)
    first = copy_span(read(corpus / "dlrm_8r_v100" / "device" / "kineto_0.json.gz"), 4, 0)
    with caplog.at_level(logging.WARNING):
        report = link_files(host, kin, tmp_path / "et_plus.json")
    assert report.gpu_attached == report.gpu_ops_in_window == 261
    assert all(first[0] <= ts < first[1] for ts in _timed(read(tmp_path / "et_plus.json")).values())
    assert "4 stretches align alike with the host ET and ran alike: linked the first" in caplog.text


# ---- refusals ----------------------------------------------------------------------------------------------


def _unrelated(corpus: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The host ET of one program (single_1r's conv net) and the Kineto trace of another (fsdp_2r), both
    without ProfilerStep, recorded minutes apart (same day)."""
    gloo = corpus / "cpu_gloo"
    return (write(tmp_path / "h.json", drop_host_steps(read(gloo / "single_1r" / "host_et_0.json.gz"))),
            write(tmp_path / "k.json", drop_kineto_steps(read(gloo / "fsdp_2r" / "kineto_0.json.gz"))))


def test_no_stretch_aligns_is_refused(corpus: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """On main: linked, 141/255 host ops "matched" to ops of another program, exit 0."""
    host, kin = _unrelated(corpus, tmp_path)
    out = tmp_path / "et_plus.json"
    with pytest.raises(TraceFormatError, match=r"no stretch of the Kineto trace aligns with the host ET "
                       r".*h\.json: at best 11 of the 255 ops of its thread 1 match in order \(4\.3%"):
        link_files(host, kin, out)
    argv = ["--chakra-host-trace", str(host), "--chakra-device-trace", str(kin), "-o", str(out)]
    assert trace_link.main(argv) == 1
    err = capsys.readouterr().err
    assert "k.json: no stretch of the Kineto trace aligns" in err and "(--force links anyway)" in err
    assert not out.exists()
    assert trace_link.main([*argv, "--force"]) == 0
    assert out.exists()
