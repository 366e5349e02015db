"""``chakra replay --job`` on files that record no waits (issue 30, class 6).

Another producer's Chakra ET records each collective's duration as the rank saw it: the transfer plus the
time it waited for its peers, with nothing that tells the two apart (our converter writes the thread timing,
``wait_on`` / ``wait_post_us`` ..., and start times on the job's clock).  A whole-job replay makes every
participant wait for the last arrival itself, so it must not add the recorded wait on top: the default rule
is then ``min`` (every participant lasts the shortest recording, the last arrival's), and the output says
which rule it used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra.cli.replay import main
from chakra.io import read_messages, write_messages
from chakra.replay.api import load_job, replay_job
from chakra.schema import ALL_REDUCE, COMM_COLL_NODE, COMP_NODE, AttributeProto, GlobalMetadata, Node

# per rank (µs): forward, backward, all_reduce 1, all_reduce 2, optimizer -- a 2-rank DDP step in which
# rank 0 reaches the first all_reduce at 120 ms and rank 1 at 4 ms: rank 1's first all_reduce was
# recorded 140 ms long, 116 ms of it waiting for rank 0, then the 24 ms transfer rank 0 recorded
STEPS = {0: (70_000, 50_000, 24_000, 1_500, 500), 1: (2_000, 2_000, 140_000, 1_600, 400)}


def _node(nid: int, name: str, dur: int, deps: list[int], coll: bool = False) -> Node:
    n = Node(id=nid, name=name, type=COMM_COLL_NODE if coll else COMP_NODE, duration_micros=dur)
    n.data_deps.extend(deps)
    n.attr.append(AttributeProto(name="is_cpu_op", bool_val=not coll))
    if coll:
        n.attr.append(AttributeProto(name="comm_type", int64_val=ALL_REDUCE))
        n.attr.append(AttributeProto(name="comm_size", int64_val=27_168))
    return n


def other_producer_job(tmp_path: Path) -> list[str]:
    """The job as another tool writes it: COMP and COMM_COLL nodes with ``duration_micros`` only (no start
    times, no thread-timing attributes, no process-group table: the world's collectives)."""
    paths = []
    for rank, (fwd, bwd, ar1, ar2, opt) in STEPS.items():
        p = tmp_path / f"other.{rank}.et"
        write_messages(p, [GlobalMetadata(version="0.0.4"),
                           _node(1, "forward", fwd, []), _node(2, "backward", bwd, [1]),
                           _node(3, "all_reduce", ar1, [2], coll=True),
                           _node(4, "all_reduce", ar2, [3], coll=True),
                           _node(5, "optimizer", opt, [4])])
        paths.append(str(p))
    return paths


def test_a_coupled_collective_does_not_count_its_recorded_wait_again(tmp_path, capsys):
    paths = other_producer_job(tmp_path)
    # each alone: 146 ms (rank 0: 70 + 50 + 24 + 1.5 + 0.5; rank 1: 2 + 2 + 140 + 1.6 + 0.4)
    assert [r.replayed_us for r in replay_job(paths, couple=False)] == [146_000.0, 146_000.0]
    # together: the first all_reduce starts when rank 0 arrives (120 ms) and lasts the shortest recording,
    # rank 0's 24 ms (rank 0 arrived last and waited least): both at 144 ms; the second starts at 144 ms
    # and lasts min(1.5, 1.6) ms: 145.5 ms; then the optimizers: 146.0 and 145.9 ms. The job: 146 ms, as
    # recorded. (Adding rank 1's recorded 140 ms after rank 0's arrival gave 262 ms.)
    assert main([*paths, "--job", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["replayed_us"] == 146_000.0
    assert [r["replayed_us"] for r in summary["ranks"]] == [146_000.0, 145_900.0]
    assert [r["comm_wait_us"] for r in summary["ranks"]] == [0.0, 116_000.0]
    assert summary["collective"] == "min"
    assert "ranks 0, 1 record no waits" in summary["collective_rule"]
    # the table says which rule it used
    assert main([*paths, "--job"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "replayed 146,000.0 µs" in out
    assert "collectives: min, the shortest recording of the participants" in out
    # asked for explicitly, net still counts each wait again, and says so
    job = replay_job(paths, collective="net")
    assert job.replayed_us == 262_000.0 and job.collective == "net"
    assert "each recorded wait counts twice" in job.collective_note


def test_the_rule_follows_the_files(tmp_path, data_dir):
    """Our converter's files record their waits (net); the same files without the thread timing (as another
    producer would write them) do not (min); a job of both: min."""
    from chakra.convert import convert_file
    from chakra.link.api import link_files
    from chakra.replay.api import collective_rule

    ours = []
    for rank in (0, 1):
        plus = tmp_path / f"plus_{rank}.json"
        link_files(data_dir / "gloo_mlp_2r" / f"host_et_{rank}.json.gz",
                   data_dir / "gloo_mlp_2r" / f"kineto_{rank}.json.gz", plus, rank=rank)
        et = tmp_path / f"ours.{rank}.et"
        convert_file(str(plus), str(et))
        ours.append(str(et))
    stripped = [_strip_thread_timing(p, tmp_path / f"stripped.{r}.et") for r, p in enumerate(ours)]
    assert collective_rule(load_job(ours))[0] == "net"
    assert collective_rule(load_job(stripped))[0] == "min"
    rule, note = collective_rule(load_job([ours[0], stripped[1]]))
    assert rule == "min" and "rank 1 records no waits" in note
    job = replay_job(ours)
    assert job.collective == "net" and "the files record their waits" in job.collective_note
    assert replay_job(stripped).collective == "min"
    with pytest.raises(Exception, match="unknown collective duration 'max'"):
        replay_job(ours, collective="max")


def _strip_thread_timing(src: str, dst: Path) -> str:
    """``src`` without what records the waits: the GlobalMetadata's ``thread_timing`` and the nodes'
    thread-timing attributes."""
    md, nodes = read_messages(src, GlobalMetadata, Node)
    drop = {"thread_timing", "thread_depth", "work_before_us", "tail_us", "idle_before_us", "wait_on",
            "wait_post_us", "frees_thread"}
    for msg in (md, *nodes):
        kept = [a for a in msg.attr if a.name not in drop]
        del msg.attr[:]
        msg.attr.extend(kept)
    write_messages(dst, [md, *nodes])
    return str(dst)
