"""Kineto-only links of gloo jobs (no host ET): hand-made traces with the structures of the corpus's cpu_gloo
ranks that replayed outside 1% of their windows, and those ranks themselves.

Times below are µs from the window start (ProfilerStep#1 at 1000 in the traces); the replayed times were
worked out by hand from the rules of ``chakra.convert.threads`` and ``chakra.replay.plan``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chakra import schema as pb
from chakra.convert import convert_file
from chakra.io import read_messages
from chakra.link import link_files
from chakra.replay.api import replay_file

STEP = 1000.0
MAIN, WORKER_1, WORKER_2 = 100, 301, 302


def ev(cat: str, name: str, ts: float, dur: float, tid: int = MAIN, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": STEP + ts, "dur": dur,
            "args": args}


def tensor_list(numel: int) -> dict[str, Any]:
    """A c10d call's arguments as Kineto records them: a TensorList, whose dtype it does not write."""
    return {"Input type": ["TensorList", "", "", "", "Scalar"], "Input Dims": [[[numel]], [], [], [], []],
            "Concrete Inputs": ["", "", "", "", "-1"]}


def floats(numel: int) -> dict[str, Any]:
    return {"Input type": ["float"], "Input Dims": [[numel]]}


def trace(events: list[dict[str, Any]], step: float) -> dict[str, Any]:
    return {"schemaVersion": 1, "traceEvents": [ev("user_annotation", "ProfilerStep#1", 0, step), *events],
            "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2, "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "pg_size": 2,
                 "ranks": [0, 1]}]}}


def convert(tmp: Path, doc: dict[str, Any]) -> Path:
    k = tmp / "kineto_0.json"
    k.write_text(json.dumps(doc))
    link_files(None, k, tmp / "et_plus_0.json")
    convert_file(tmp / "et_plus_0.json", tmp / "job.0.et")
    return tmp / "job.0.et"


def nodes(path: Path) -> dict[tuple[str, int], pb.Node]:
    """The nodes by (name, recorded start)."""
    _, ns = read_messages(path, pb.GlobalMetadata, pb.Node)
    return {(n.name, n.start_time_micros): n for n in ns}


def attrs(n: pb.Node) -> dict[str, int]:
    return {a.name: a.int64_val for a in n.attr if a.WhichOneof("value") == "int64_val"}


def test_a_gloo_record_pairs_with_the_call_of_its_size(tmp_path: Path) -> None:
    # DDP's two buckets: c10d::allreduce_ of 17,802 elements at 100, of 8,320 at 200, both asynchronous;
    # the 17,802-float gloo:all_reduce starts first (300, one worker), the 8,320 one at 350 (another).
    # Kineto writes no dtype for the calls' TensorLists (0 bytes each), so the record's bytes cannot
    # match; its elements do.  Before, both calls were pending, sizes "differed", the latest call won:
    # the first record ran the second bucket, the launch order chained it after the other record (which
    # started 50 us later) and ddp_mlp_4r rank 1 replayed +1.24%.
    doc = trace([
        ev("cpu_op", "c10d::allreduce_", 100, 50, **tensor_list(17802)),
        ev("cpu_op", "c10d::allreduce_", 200, 50, **tensor_list(8320)),
        ev("user_annotation", "gloo:all_reduce", 300, 400, tid=WORKER_1, **floats(17802)),
        ev("user_annotation", "gloo:all_reduce", 350, 200, tid=WORKER_2, **floats(8320)),
    ], 800)
    n = nodes(convert(tmp_path, doc))
    first, second = n[("c10d::allreduce_", 100)].id, n[("c10d::allreduce_", 200)].id
    big, small = n[("gloo:all_reduce", 300)], n[("gloo:all_reduce", 350)]
    assert attrs(big)["comm_size"] == 17802 * 4 and attrs(small)["comm_size"] == 8320 * 4
    # its call, and the launch order: the first bucket's record, then the second's
    assert first in big.data_deps and small.id not in big.data_deps
    assert second in small.data_deps and big.id in small.data_deps
    rep = replay_file(tmp_path / "job.0.et")
    times = rep.node_times()
    assert times[big.id] == (300, 700) and times[small.id] == (350, 550)


def broadcast_rank(call_child: bool = False) -> dict[str, Any]:
    """tp_like_2r rank 0's first broadcast: aten::randn [98,224]; c10d::broadcast_ [290,719] enqueues the
    broadcast and waits for it; the gloo worker, idle since the window opened, runs gloo:broadcast
    [637,682]; aten::matmul [755,775] after the call.  ``call_child``: the call runs an op nested in it
    (aten::copy_ [300,700]) that outlasts the record's start."""
    events = [
        ev("cpu_op", "aten::randn", 98, 126),
        ev("cpu_op", "c10d::broadcast_", 290, 429, **tensor_list(1024)),
        ev("user_annotation", "gloo:broadcast", 637, 45, tid=WORKER_1, **floats(1024)),
        ev("cpu_op", "aten::matmul", 755, 20),
    ]
    if call_child:
        events.append(ev("cpu_op", "aten::copy_", 300, 400))
    return trace(events, 800)


def test_a_worker_idle_until_a_call_that_lost_its_wait_starts_after_its_written_end(tmp_path: Path) -> None:
    # The worker's idle [0,637] is cut back to the call's start (290): the call was still running at 637
    # (until 719), and the replay keeps the record 347 us after the call's start only while the call's
    # written end lies past 637.  But the call's own time lost its wait on that same broadcast (matmul
    # waited for it: [290,682] is waiting), its written duration is 429 - 392 = 37, its end 327: the
    # record waits for the call's written end and keeps the idle time from there, 637 - 327 = 310.
    # Before, the 347 us counted from the window start: the broadcast started at 347, 290 us early, and
    # everything after it (tp_like_2r rank 0: -1.87%).
    path = convert(tmp_path, broadcast_rank())
    n = nodes(path)
    call, rec, mm = n[("c10d::broadcast_", 290)], n[("gloo:broadcast", 637)], n[("aten::matmul", 755)]
    assert call.duration_micros == 37
    a = attrs(rec)
    assert a["wait_on"] == call.id and a["idle_before_us"] == 310 and "wait_post_us" not in a
    assert attrs(mm)["wait_on"] == rec.id and attrs(mm)["wait_post_us"] == 73
    times = replay_file(path).node_times()
    assert times[call.id] == (290, 327) and times[rec.id] == (637, 682) and times[mm.id] == (755, 775)


def test_a_worker_idle_until_a_call_with_children_keeps_its_idle_time(tmp_path: Path) -> None:
    # The same, the call running an op nested in it past 637: a call with children has no end of its own
    # in the replay (its exclusive duration is not its end), so the record keeps its whole idle time,
    # from the window start (before: 347 us of it, and the broadcast started at 347)
    path = convert(tmp_path, broadcast_rank(call_child=True))
    n = nodes(path)
    rec = n[("gloo:broadcast", 637)]
    a = attrs(rec)
    assert a["idle_before_us"] == 637 and "wait_on" not in a
    assert replay_file(path).node_times()[rec.id] == (637, 682)
