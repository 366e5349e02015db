"""A job given without some of its ranks (issue 30, class 7): ``chakra validate``, ``chakra replay --job``
and ``chakra pipeline`` refuse it (exit 1) naming the missing ranks, where the traces say how many ranks the
job has (a process-group table in the metadata or a METADATA node, a comm-group file, distributedInfo, the
``pg_size`` recorded on a world collective); ``--allow-missing-ranks`` goes on with the ranks given.  A file
that cannot say is not refused.

The jobs are built by hand: three ranks, each a 10 µs op and then an all_reduce of the world group
(``pg_name`` "0"); only ranks 0 and 2 are given.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chakra import schema as pb
from chakra.cli import pipeline as pipeline_cli
from chakra.cli import replay as replay_cli
from chakra.cli import validate as validate_cli
from chakra.io import write_messages
from chakra.job.validate import validate

DATA = Path(__file__).resolve().parents[1] / "data"
TABLE = json.dumps([{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2]}])


def _a(name: str, **kw) -> pb.AttributeProto:
    return pb.AttributeProto(name=name, **kw)


def rank_file(folder: Path, r: int, says: str) -> Path:
    """Rank ``r`` of the 3-rank job; ``says`` how its file tells the job's size: ``table`` (GlobalMetadata
    process_groups), ``metadata_node`` (ASTRA-sim's METADATA node), ``world_size``, ``pg_size`` (on the
    collective), or ``nothing``."""
    meta = pb.GlobalMetadata(version="0.0.4", attr=[_a("rank", int64_val=r),
                                                    _a("measured_start_us", double_val=1000.0),
                                                    _a("measured_dur_us", double_val=20.0)])
    if says == "table":
        meta.attr.append(_a("process_groups", string_val=TABLE))
    if says == "world_size":
        meta.attr.append(_a("world_size", int64_val=3))
    nodes = []
    if says == "metadata_node":
        md = pb.Node(id=1, name="## process_group:init ##", type=pb.METADATA_NODE)
        md.inputs.values = str([TABLE])
        nodes.append(md)
    nodes.append(pb.Node(id=2, name="op", type=pb.COMP_NODE, duration_micros=10, start_time_micros=0,
                         attr=[_a("is_cpu_op", bool_val=True), _a("tid", int64_val=1)]))
    coll = pb.Node(id=3, name="all_reduce", type=pb.COMM_COLL_NODE, duration_micros=10,
                   start_time_micros=10, data_deps=[2],
                   attr=[_a("is_cpu_op", bool_val=False), _a("comm_type", int64_val=pb.ALL_REDUCE),
                         _a("comm_size", int64_val=4096), _a("pg_name", string_val="0")])
    if says == "pg_size":
        coll.attr.append(_a("pg_size", int64_val=3))
    nodes.append(coll)
    path = folder / f"job.{r}.et"
    write_messages(path, [meta, *nodes])
    return path


SAYS = {"table": "process group '0' of job.0.et lists ranks [0, 1, 2]",
        "metadata_node": "process group '0' of job.0.et lists ranks [0, 1, 2]",
        "world_size": "world_size 3 in the metadata of job.0.et",
        "pg_size": "a world collective of job.0.et records pg_size 3"}


@pytest.mark.parametrize("says", list(SAYS))
def test_validate_and_replay_refuse_a_job_missing_a_rank(tmp_path, capsys, says):
    files = [str(rank_file(tmp_path, r, says)) for r in (0, 2)]
    text = f"the job has 3 ranks ({SAYS[says]}); missing: rank 1"
    # validate: before, "ok: 2 rank(s) ... the files meet what ASTRA-sim reads"
    assert validate_cli.main([*files]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{text} (ASTRA-sim waits for them forever): give every rank's file, or "
                          "--allow-missing-ranks to check these alone\n")
    res = validate(files, allow_missing_ranks=True)
    assert res.notes == [f"{text}: checked ranks 0, 2 alone (--allow-missing-ranks)"]
    assert not any("missing" in str(p) for p in res.problems)
    # (a METADATA node is a problem of its own for this simulator)
    assert res.ok == (says != "metadata_node")
    # replay --job: before, the all_reduce coupled over ranks 0 and 2 without a word
    assert replay_cli.main([*files, "--job"]) == 1
    err = capsys.readouterr().err
    assert err == (f"chakra replay: error: {text}: give every rank's files, or --allow-missing-ranks to go "
                   "on with ranks 0, 2 alone\n")
    assert replay_cli.main([*files, "--job", "--json", "--allow_missing_ranks"]) == 0
    got = capsys.readouterr()
    assert f"{text}: replaying ranks 0, 2 alone (--allow-missing-ranks)" in got.err
    assert [r["rank"] for r in json.loads(got.out)["ranks"]] == [0, 2]
    # one rank alone is not a whole job: replayed without a check
    assert replay_cli.main([files[0], "--json"]) == 0


def test_files_that_cannot_say_are_not_refused_and_a_comm_group_file_says_it_too(tmp_path, capsys):
    # files that say nothing of the job's size: not refused
    files = [str(rank_file(tmp_path, r, "nothing")) for r in (0, 2)]
    assert validate_cli.main(files) == 0
    assert capsys.readouterr().out.startswith("ok: 2 rank(s)")
    assert replay_cli.main([*files, "--job", "--json"]) == 0
    # the comm-group file lists rank 2 in group 5: ranks 0..2 exist
    (tmp_path / "cg.json").write_text(json.dumps({"5": [1, 2]}))
    res = validate(files, comm_group=tmp_path / "cg.json")
    assert "the job has 3 ranks (process group '5' of cg.json lists ranks [1, 2]); missing: rank 1" in \
        str(res.problems[0])
    assert replay_cli.main([*files, "--job", "--comm-group", str(tmp_path / "cg.json")]) == 1
    assert "process group '5' of job.0.et lists ranks [1, 2]); missing: rank 1" in capsys.readouterr().err


def test_pipeline_refuses_a_folder_missing_both_files_of_a_rank(tmp_path, capsys):
    # gloo_mlp_2r without rank 1 (its Kineto traces' distributedInfo: world_size 2): before, rank 0 alone was
    # linked, converted and replayed without a word
    src = tmp_path / "job"
    src.mkdir()
    for name in ("host_et_0.json.gz", "kineto_0.json.gz"):
        shutil.copy(DATA / "gloo_mlp_2r" / name, src / name)
    for extra in ([], ["--job"]):
        assert pipeline_cli.main([str(src), "-o", str(tmp_path / "out"), "-q", *extra]) == 1
        assert capsys.readouterr().err == (
            f"chakra pipeline: error: {src}: the job has 2 ranks (distributedInfo of kineto_0.json.gz: "
            "world_size 2); missing: rank 1: give every rank's files, or --allow-missing-ranks to go on with "
            "rank 0 alone\n")
        assert not (tmp_path / "out").exists()
    argv = [str(src), "-o", str(tmp_path / "out"), "-q", "--job", "--allow-missing-ranks"]
    assert pipeline_cli.main(argv) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0]


def test_the_option_is_one_name_in_the_three_commands():
    for cli in (validate_cli, replay_cli, pipeline_cli):
        p = cli.build_parser()
        args = p.parse_args(["x", "-o", "y", "--allow-missing-ranks"] if cli is pipeline_cli
                            else ["x", "--allow-missing-ranks"])
        assert args.allow_missing_ranks is True
        assert "--allow-missing-ranks" in p.format_help()
