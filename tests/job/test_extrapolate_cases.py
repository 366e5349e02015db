"""``chakra extrapolate`` on a job built by hand: 4 ranks, two replicas of a 2-rank model group ("1": 0, 1;
"2": 2, 3), data groups "3": 0, 2 and "4": 1, 3, the world "0"; each rank a 10 µs op, an all_reduce of its
model group, a send (rank 2k -> 2k+1) or recv inside its replica, an all_reduce of its data group recording
``pg_size`` 2.  The groups are in the GlobalMetadata table, or (``metadata_node``) in a METADATA node as
ASTRA-sim's convention writes them.  Grown to 8 ranks: rank 5 is a copy of rank 1 in replica 2."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from chakra import schema as pb
from chakra.cli import extrapolate as cli
from chakra.io import read_messages, write_messages
from chakra.replay.api import replay_job

TABLE = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]},
         {"pg_name": "1", "pg_desc": "tp", "ranks": [0, 1]},
         {"pg_name": "2", "pg_desc": "tp", "ranks": [2, 3]},
         {"pg_name": "3", "pg_desc": "dp", "ranks": [0, 2]},
         {"pg_name": "4", "pg_desc": "dp", "ranks": [1, 3]}]


def _a(name: str, **kw) -> pb.AttributeProto:
    return pb.AttributeProto(name=name, **kw)


def _coll(nid: int, dep: int, pg: str, **extra) -> pb.Node:
    nd = pb.Node(id=nid, name=f"all_reduce_{pg}", type=pb.COMM_COLL_NODE, duration_micros=20, data_deps=[dep],
                 attr=[_a("is_cpu_op", bool_val=False), _a("comm_type", int64_val=pb.ALL_REDUCE),
                       _a("comm_size", int64_val=4096), _a("pg_name", string_val=pg)])
    for k, v in extra.items():
        nd.attr.append(_a(k, int64_val=v))
    return nd


def build(folder: Path, where: str = "table", peer_of: dict[int, int] | None = None) -> Path:
    """The job (module doc); ``peer_of``: rank -> the rank it sends to / receives from (default: its
    replica's other rank)."""
    peer_of = peer_of or {0: 1, 1: 0, 2: 3, 3: 2}
    text = json.dumps(TABLE)
    for r in range(4):
        meta = pb.GlobalMetadata(version="0.0.4", attr=[_a("rank", int64_val=r),
                                                        _a("world_size", int64_val=4)])
        nodes = []
        if where == "table":
            meta.attr.append(_a("process_groups", string_val=text))
        else:
            md = pb.Node(id=1, name="## process_group:init ##", type=pb.METADATA_NODE)
            md.inputs.values = str([text])
            nodes.append(md)
        nodes.append(pb.Node(id=2, name="op", type=pb.COMP_NODE, duration_micros=10,
                             attr=[_a("is_cpu_op", bool_val=False)]))
        nodes.append(_coll(3, 2, "1" if r < 2 else "2"))
        send = r % 2 == 0
        p2p = pb.Node(id=4, name="send" if send else "recv",
                      type=pb.COMM_SEND_NODE if send else pb.COMM_RECV_NODE, duration_micros=5, data_deps=[3],
                      attr=[_a("is_cpu_op", bool_val=False), _a("comm_size", int64_val=1024),
                            _a("comm_src", int32_val=r if send else peer_of[r]),
                            _a("comm_dst", int32_val=peer_of[r] if send else r), _a("comm_tag", int32_val=7)])
        nodes.append(p2p)
        nodes.append(_coll(5, 4, "3" if r % 2 == 0 else "4", pg_size=2))
        write_messages(folder / f"job.{r}.et", [meta, *nodes])
    return folder / "job"


def _read(path: Path) -> tuple[dict, dict[int, dict]]:
    md, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    meta = {a.name: pb.attr_value(a) for a in md.attr}
    out = {}
    for nd in nodes:
        out[nd.id] = {a.name: pb.attr_value(a) for a in nd.attr}
        if nd.type == pb.METADATA_NODE:
            out[nd.id]["table"] = nd.inputs.values
    return meta, out


GROWN = [("0", list(range(8))), ("1", [0, 1]), ("2", [2, 3]), ("3", [0, 2, 4, 6]), ("4", [1, 3, 5, 7]),
         ("5", [4, 5]), ("6", [6, 7])]


@pytest.mark.parametrize("where", ["table", "metadata_node"])
def test_groups_pg_sizes_and_peers_of_the_new_ranks(tmp_path, where, capsys):
    job = build(tmp_path, where)
    out = tmp_path / "big"
    assert cli.main([str(job), "--ranks", "8", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "rank r is modelled on measured rank r mod 4" in said
    assert "2 new group(s) for the new replicas (pg 5 .. 6)" in said
    meta, nodes = _read(Path(f"{out}.5.et"))
    assert (meta["rank"], meta["world_size"]) == (5, 8)
    text = meta["process_groups"] if where == "table" else ast.literal_eval(nodes[1]["table"])[0]
    table = json.loads(text)
    assert [(g["pg_name"], g["ranks"]) for g in table] == GROWN
    assert [g["pg_desc"] for g in table][-2:] == ["tp", "tp"]     # the copies keep what their model was
    assert nodes[3]["pg_name"] == "5"                              # rank 1's model group "1", in replica 2
    assert (nodes[4]["comm_src"], nodes[4]["comm_dst"]) == (4, 5)  # rank 1 received from 0: 5 from 4
    assert (nodes[5]["pg_name"], nodes[5]["pg_size"]) == ("4", 4)
    _, n6 = _read(Path(f"{out}.6.et"))
    assert (n6[3]["pg_name"], n6[4]["comm_src"], n6[4]["comm_dst"], n6[5]["pg_name"]) == ("6", 6, 7, "3")
    _, n1 = _read(Path(f"{out}.1.et"))                             # a measured rank: its groups as they were
    assert (n1[3]["pg_name"], n1[4]["comm_src"], n1[5]["pg_size"]) == ("1", 0, 4)
    assert json.loads(Path(f"{out}.comm_group.json").read_text()) == {k: v for k, v in GROWN if k != "0"}
    job8 = replay_job([Path(f"{out}.{r}.et") for r in range(8)], mode="astrasim")
    assert sorted(job8.ranks) == list(range(8))


def test_refusals_leave_nothing_written(tmp_path, capsys):
    job = build(tmp_path)
    out = tmp_path / "big"
    assert cli.main([str(job), "--ranks", "7", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--ranks 7 is not a multiple of the replica size 2" in err
    assert "e.g. 6 or 8 ranks" in err
    # rank 0 sends to rank 2, of the other replica if groups 3 and 4 are the data-parallel ones
    other = tmp_path / "cross"
    other.mkdir()
    cross = build(other, peer_of={0: 2, 1: 3, 2: 0, 3: 1})
    assert cli.main([str(cross), "--ranks", "8", "-o", str(out), "--dp-groups", "3,4"]) == 2
    err = capsys.readouterr().err
    assert "ranks 0 and 2 exchange send/recv, which would cross replicas" in err
    assert cli.main([str(job), "--ranks", "8", "-o", str(out), "--dp-groups", "9"]) == 2
    assert "no such process group" in capsys.readouterr().err
    assert not list(tmp_path.glob("big*"))
    # without --dp-groups the send/recv make the 4 ranks one replica (the descriptions' "dp" groups 3 and 4
    # do not fit them), which the world joins
    assert cli.main([str(cross), "--ranks", "6", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a multiple of the replica size 4" in err and "e.g. 4 or 8 ranks" in err
    assert cli.main([str(cross), "--ranks", "8", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "4 ranks per replica, 1 replica; no data-parallel group" in said
    assert "not the descriptions' data-parallel groups: " in said
    _, n5 = _read(Path(f"{out}.5.et"))         # rank 1's copy: received from rank 3, now from 7
    assert (n5[4]["comm_src"], n5[4]["comm_dst"]) == (7, 5)


def test_a_failure_while_writing_removes_what_was_written(tmp_path, capsys):
    job = build(tmp_path)
    (tmp_path / "big.6.et").mkdir()              # rank 6's output cannot be written
    assert cli.main([str(job), "--ranks", "8", "-o", str(tmp_path / "big")]) == 2
    assert "output path is a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.glob("big*")) == ["big.6.et"]


def test_a_job_missing_a_rank_file_is_refused(tmp_path, capsys):
    job = build(tmp_path)
    (tmp_path / "job.3.et").unlink()
    assert cli.main([str(job), "--ranks", "8", "-o", str(tmp_path / "big")]) == 1
    assert "world_size 4 in the metadata, but only 3 rank files" in capsys.readouterr().err


def test_a_progress_bar_of_the_ranks_written_on_a_terminal(tmp_path, capsys, monkeypatch):
    job = build(tmp_path)
    monkeypatch.setattr(cli, "show_progress", lambda quiet=False: not quiet)    # as on a terminal
    assert cli.main([str(job), "--ranks", "8", "-o", str(tmp_path / "big")]) == 0
    got = capsys.readouterr()
    assert "ranks written" in got.err and "8/8" in got.err and "ranks written" not in got.out
    assert cli.main([str(job), "--ranks", "8", "-o", str(tmp_path / "big"), "-q"]) == 0
    assert "ranks written" not in capsys.readouterr().err
