"""The ASTRA-sim target (``--astrasim``) and ``chakra validate`` on real jobs, and the simulator's verdict.

The simulator runs when ``../shared/astra-sim`` is beside the repository, or where ``CHAKRA_ASTRASIM`` points
(its tests skip otherwise); the
corpus tests skip without ``../shared/traces``; tests on ``tests/data`` always run.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from conftest import DATA, needs_corpus
from helpers.astrasim import ASTRASIM, SKIP_REASON

from chakra import schema as pb
from chakra.io.pbstream import read_messages
from chakra.job.astrasim import astrasim_job
from chakra.job.validate import validate
from chakra.pipeline import run_pipeline


def _sim_or_skip() -> Path:
    import subprocess

    if ASTRASIM is None:
        pytest.skip(SKIP_REASON)
    sim = ASTRASIM / "run.sh"
    binary = ASTRASIM / "bin" / "AstraSim_Analytical_Congestion_Unaware"
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if "not found" in ldd.stdout:
        pytest.skip("ASTRA-sim's runtime libraries are missing "
                    "(apt-get install -y libprotobuf32 libyaml-cpp0.7)")
    return sim


def comm_nodes(path: Path) -> list[tuple[int, dict]]:
    """The communication of a written rank (an experiment's pieces of time, timed BROADCASTs, are not)."""
    _, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    return [(n.type, attrs) for n, attrs in ((n, {a.name: pb.attr_value(a) for a in n.attr}) for n in nodes)
            if n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)
            and "timing_piece" not in attrs]


def node_types(path: Path) -> set[int]:
    _, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    return {n.type for n in nodes}


# DLRM (11 s) is slow here: the quick run simulates it (tests/pipeline/test_experiment.py) and validates its
# ASTRA-sim files (test_dlrm_uneven_all_to_all_gets_one_size_and_validate_names_it) elsewhere
CORPUS_JOBS = [pytest.param("dlrm_8r_v100", 8, marks=pytest.mark.slow), ("cpu_gloo/tp_like_2r", 2),
               ("cpu_gloo/ddp_mlp_4r", 4), ("cpu_gloo/fsdp_2r", 2), ("cpu_gloo/single_1r", 1)]


@needs_corpus
@pytest.mark.parametrize("job, n", CORPUS_JOBS)
def test_every_corpus_job_runs_in_the_simulator(corpus, tmp_path, job, n):
    sim = _sim_or_skip()
    res = run_pipeline(corpus / job, tmp_path, astrasim=True, simulator=sim)
    name = Path(job).name
    files = [tmp_path / f"{name}.{r}.et" for r in range(max(n, 2))]   # a one-rank job gets an idle NPU
    assert validate(files).ok
    sim_us = [r["simulated_us"] for r in res.summary["ranks"]]
    assert len(sim_us) == n and all(t and t > 0 for t in sim_us)
    assert all(pb.METADATA_NODE not in node_types(f) for f in files)


@needs_corpus
def test_dlrm_uneven_all_to_all_gets_one_size_and_validate_names_it(corpus, tmp_path):
    run_pipeline(corpus / "dlrm_8r_v100", tmp_path / "plain")
    plain = [tmp_path / "plain" / f"dlrm_8r_v100.{r}.et" for r in range(8)]
    # the default output keeps each rank's own sizes (read off the record_param_comms tensors): the
    # fourth collective, an all_to_allv, moves 13,568 B on six ranks, 53,248 B on rank 3, 18,944 B on rank 4
    sizes = [comm_nodes(p)[3][1]["comm_size"] for p in plain]
    assert sizes == [13568, 13568, 13568, 53248, 18944, 13568, 13568, 13568]
    res = validate(plain)
    assert [str(p) for p in res.problems] == [
        "process group 'world', collective #3: rank 0 issues all_to_all of 13,568 B (node 2326 "
        "'ncclKernel_SendRecv_RING_SIMPLE_Sum_i...'), rank 3 issues all_to_all of 53,248 B (node 2400 "
        "'ncclKernel_SendRecv_RING_SIMPLE_Sum_i...') (the simulator matches collectives by order, type and "
        "size: it stalls)"]
    report = astrasim_job(plain, tmp_path / "dlrm")
    fixed = [tmp_path / f"dlrm.{r}.et" for r in range(8)]
    assert [comm_nodes(p)[3][1]["comm_size"] for p in fixed] == [53248] * 8
    assert report.sizes_unified == 1 and report.collectives == 8 and report.comm_group is None
    assert validate(fixed).ok
    # every rank's comm nodes carry the process group's sequence numbers 147..154 (record_param_comms)
    assert [a["comm_seq"] for _, a in comm_nodes(fixed[5])] == list(range(147, 155))


def _lagging_dlrm(corpus: Path, dest: Path) -> Path:
    """DLRM with the last NCCL kernel of ranks 2 and 5 never seen by the profiler (its host record
    stays) and rank 2's GPU running 3 ms behind its host: where host-recorded and GPU collectives used to
    be ordered by their own start times, rank 2's last all_reduce landed before two GPU collectives."""
    shutil.copytree(corpus / "dlrm_8r_v100" / "host", dest / "host")
    (dest / "device").mkdir()
    for r in range(8):
        src = corpus / "dlrm_8r_v100" / "device" / f"kineto_{r}.json.gz"
        if r not in (2, 5):
            shutil.copy(src, dest / "device" / src.name)
            continue
        d = json.loads(gzip.decompress(src.read_bytes()))
        ev = d["traceEvents"]
        last = max((e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                   key=lambda e: e["ts"])
        d["traceEvents"] = [e for e in ev if e is not last]
        if r == 2:
            for e in d["traceEvents"]:
                if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                    e["ts"] += 3000
        (dest / "device" / src.name).write_bytes(gzip.compress(json.dumps(d).encode()))
    return dest


@needs_corpus
def test_a_collective_the_profiler_missed_on_the_gpu_keeps_its_launch_place(corpus, tmp_path):
    folder = _lagging_dlrm(corpus, tmp_path / "in")
    run_pipeline(folder, tmp_path / "out", name="lag")
    files = [tmp_path / "out" / f"lag.{r}.et" for r in range(8)]
    seqs = [[(a["comm_type"], a["comm_seq"]) for _, a in comm_nodes(p)] for p in files]
    # launch order on every rank: all_to_all x4 (seq 147-150), all_reduce 151, all_to_all 152, all_reduce
    # 153, 154; on ranks 2 and 5 the last one is the host record nccl:all_reduce (no kernel in the trace)
    expected = [(6, 147), (6, 148), (6, 149), (6, 150), (0, 151), (6, 152), (0, 153), (0, 154)]
    assert seqs == [expected] * 8
    assert comm_nodes(files[2])[-1][1]["comm_size"] == 907840
    problems = [str(p) for p in validate(files).problems]
    assert len(problems) == 1 and problems[0].startswith("process group 'world', collective #3:")


@needs_corpus
def test_validate_names_metadata_nodes_and_unsupported_collectives(corpus, tmp_path):
    run_pipeline(corpus / "cpu_gloo" / "tp_like_2r", tmp_path)
    res = validate([tmp_path / f"tp_like_2r.{r}.et" for r in range(2)])
    text = [str(p) for p in res.problems]
    assert text == [
        "rank 0: node 3 is a METADATA node: this simulator aborts on it (Statistics.cc get_operator_type); "
        "convert with --astrasim, which moves the process groups to comm_group.json",
        "rank 0: collective node 384 ('gloo:barrier') is a barrier: the simulator does not run it (convert "
        "with --astrasim to write it as a COMP node)",
        "rank 1: node 3 is a METADATA node: this simulator aborts on it (Statistics.cc get_operator_type); "
        "convert with --astrasim, which moves the process groups to comm_group.json",
        "rank 1: collective node 380 ('gloo:barrier') is a barrier: the simulator does not run it (convert "
        "with --astrasim to write it as a COMP node)"]


def test_project_collectives_job_one_collective_per_call_and_the_simulator_runs_it(tmp_path):
    # gloo runs the list-form reduce_scatter_ as two all_reduce records on two worker threads: one
    # collective of 4,096 B (2 x 512 floats), not a reduce_scatter plus a stray 2,048 B all_reduce
    run_pipeline(DATA / "gloo_collectives_2r", tmp_path, astrasim=True)
    files = [tmp_path / f"gloo_collectives_2r.{r}.et" for r in range(2)]
    for r, f in enumerate(files):
        peer = 1 - r   # isend to the next rank of the ring, irecv from the previous one: the other rank
        step = [(7, None, 5, 4096), (7, None, 2, 8192), (7, None, 0, 4096), (7, None, 0, 4096),
                (7, None, 0, 4096), (7, None, 7, 4096), (7, None, 6, 4096), (5, peer, None, 1024),
                (6, peer, None, 1024), (7, None, 0, 0)]
        got = [(t, a.get("comm_dst") if t == 5 else a.get("comm_src"), a.get("comm_type"), a["comm_size"])
               for t, a in comm_nodes(f)]
        # two profiled steps, same on both ranks; the barrier, which the simulator does not run, is an
        # all_reduce of its size (0 B) over the same ranks: its ranks still wait for each other
        assert got == step + step
    assert validate(files).ok
    sim = _sim_or_skip()
    import subprocess

    out = subprocess.run([str(sim), str(tmp_path / "gloo_collectives_2r"), "2"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "astra-sim: 2/2 ranks finished" in out.stdout


@needs_corpus
def test_a_vllm_all_reduce_job_runs_in_the_simulator_with_its_all_reduces(corpus, tmp_path):
    """Ranks 0 and 1 of DLRM as a 2-rank job whose all-reduces ran as vLLM runs them
    (``helpers.collective_edits``: symmetric memory's multimem kernel, vLLM's one- and two-shot custom
    all-reduce, no record_param_comms): ``chakra pipeline --astrasim --simulator`` runs it with the three
    all-reduces as collectives of every rank, matched across the ranks by order."""
    from helpers import astrasim
    from helpers.collective_edits import VARIANTS, vllm_dlrm

    from chakra.cli import pipeline as pipeline_cli

    sim = _sim_or_skip()
    folder = vllm_dlrm(corpus, tmp_path / "vllm", (0, 1), world_size=2)
    out = tmp_path / "out"
    assert pipeline_cli.main([str(folder), "-o", str(out), "--astrasim", "--simulator", str(sim), "-q"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["astrasim"]["collectives"] == 8
    assert all(r["simulated_us"] > 0 for r in summary["ranks"])
    files = [out / f"vllm.{r}.et" for r in range(2)]
    for f in files:
        _, nodes = read_messages(f, pb.GlobalMetadata, pb.Node)
        reduces = [(n.name, {a.name: pb.attr_value(a) for a in n.attr}) for n in nodes
                   if n.type == pb.COMM_COLL_NODE and n.name in [k for _, _, k in VARIANTS]]
        assert [(a["comm_type"], a["comm_size"]) for _, a in reduces] == [
            (pb.ALL_REDUCE, 1_576_964), (pb.ALL_REDUCE, 448), (pb.ALL_REDUCE, 907_840)]
    assert validate(files).ok
    # the simulator moves their bytes: at 0.1 GB/s a ring all-reduce of S bytes over 2 ranks sends S per
    # rank, 2,485,252 B in all = 24.9 ms, more than the 11.7 ms the job takes without them
    times_ns = astrasim.run(out / "vllm", 2, None, "--bandwidth", "0.1")
    assert min(times_ns.values()) > 24_852_520


def test_comm_group_json_for_a_subgroup(tmp_path):
    from chakra.io.pbstream import write_messages

    groups = json.dumps([{"pg_name": "0", "ranks": []}, {"pg_name": "5", "ranks": [1, 2]}])

    def rank_file(r: int, pgs: list[str]) -> Path:
        meta = pb.GlobalMetadata(version="0.0.4", attr=[pb.AttributeProto(name="rank", int64_val=r),
                                                        pb.AttributeProto(name="world_size", int64_val=3),
                                                        pb.AttributeProto(name="process_groups",
                                                                          string_val=groups)])
        nodes = [pb.Node(id=1, name="meta", type=pb.METADATA_NODE)]
        prev = None
        for k, pg in enumerate(pgs):
            n = pb.Node(id=10 + k, name=f"ar{k}", type=pb.COMM_COLL_NODE, duration_micros=5,
                        attr=[pb.AttributeProto(name="is_cpu_op", bool_val=False),
                              pb.AttributeProto(name="comm_type", int64_val=pb.ALL_REDUCE),
                              pb.AttributeProto(name="comm_size", int64_val=1024),
                              pb.AttributeProto(name="pg_name", string_val=pg)])
            if prev is not None:
                n.data_deps.append(prev)
            prev = n.id
            nodes.append(n)
        path = tmp_path / f"in.{r}.et"
        write_messages(path, [meta, *nodes])
        return path

    inputs = [rank_file(0, ["0"]), rank_file(1, ["0", "5"]), rank_file(2, ["5", "0"])]
    with pytest.raises(Exception, match="contradicting orders"):
        astrasim_job(inputs, tmp_path / "bad")   # ranks 1 and 2 order the two groups differently
    inputs[2] = rank_file(2, ["0", "5"])
    report = astrasim_job(inputs, tmp_path / "job")
    assert json.loads((tmp_path / "comm_group.json").read_text()) == {"5": [1, 2]}
    assert report.metadata_dropped == 3 and report.collectives == 2
    assert validate([tmp_path / f"job.{r}.et" for r in range(3)],
                    comm_group=tmp_path / "comm_group.json").ok
    sim = _sim_or_skip()
    import subprocess

    cg = str(tmp_path / "comm_group.json")
    out = subprocess.run([str(sim), str(tmp_path / "job"), "3", "--comm-group", cg], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_all_reduces_in_two_subgroups_of_a_rank_are_split_and_run(tmp_path):
    # tensor- and data-parallel groups of 4 ranks: tp {0,1} {2,3}, dp {0,2} {1,3}; every rank all-reduces in
    # both, which this ASTRA-sim build double-frees at exit; the dp groups' all-reduces (the groups whose
    # ranks already keep all-reduces in a tp group) become reduce-scatter 4096 B + all-gather 2048 B
    from chakra.io.pbstream import write_messages

    groups = {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}
    table = json.dumps([{"pg_name": k, "ranks": v} for k, v in groups.items()])

    def rank_file(r: int) -> Path:
        tp = "1" if r < 2 else "2"
        dp = "3" if r % 2 == 0 else "4"
        meta = pb.GlobalMetadata(version="0.0.4", attr=[pb.AttributeProto(name="rank", int64_val=r),
                                                        pb.AttributeProto(name="world_size", int64_val=4),
                                                        pb.AttributeProto(name="process_groups",
                                                                          string_val=table)])
        nodes = []
        for k, pg in enumerate((tp, dp)):
            nodes.append(pb.Node(id=10 + k, name=f"ar{k}", type=pb.COMM_COLL_NODE, duration_micros=5,
                                 data_deps=[10] if k else [],
                                 attr=[pb.AttributeProto(name="is_cpu_op", bool_val=False),
                                       pb.AttributeProto(name="comm_type", int64_val=pb.ALL_REDUCE),
                                       pb.AttributeProto(name="comm_size", int64_val=4096),
                                       pb.AttributeProto(name="pg_name", string_val=pg)]))
        nodes.append(pb.Node(id=20, name="after", type=pb.COMP_NODE, duration_micros=3, data_deps=[11],
                             attr=[pb.AttributeProto(name="is_cpu_op", bool_val=False)]))
        path = tmp_path / f"in.{r}.et"
        write_messages(path, [meta, *nodes])
        return path

    inputs = [rank_file(r) for r in range(4)]
    cg_in = tmp_path / "groups_in.json"
    cg_in.write_text(json.dumps(groups))
    assert [str(p) for p in validate(inputs, comm_group=cg_in).problems][0] == (
        "rank 0: runs all_reduce in process groups ['1', '3'], both smaller than the world: this ASTRA-sim "
        "build frees memory twice at exit and may abort (exit 134); --astrasim rewrites all-reduces to avoid "
        "it")
    report = astrasim_job(inputs, tmp_path / "tpdp")
    split_note = "process group(s) ['3', '4'] written as reduce-scatter + all-gather"
    assert any(split_note in n for n in report.notes)
    for r in range(4):
        _, nodes = read_messages(tmp_path / f"tpdp.{r}.et", pb.GlobalMetadata, pb.Node)
        by_id = {n.id: n for n in nodes}
        kinds = [(n.id, {a.name: pb.attr_value(a) for a in n.attr}.get("comm_type"),
                  {a.name: pb.attr_value(a) for a in n.attr}.get("comm_size")) for n in nodes
                 if n.type == pb.COMM_COLL_NODE]
        assert kinds == [(10, pb.ALL_REDUCE, 4096), (11, pb.REDUCE_SCATTER, 4096), (21, pb.ALL_GATHER, 2048)]
        assert list(by_id[21].data_deps) == [11] and list(by_id[20].data_deps) == [21]
    assert validate([tmp_path / f"tpdp.{r}.et" for r in range(4)], comm_group=tmp_path / "comm_group.json").ok
    assert json.loads((tmp_path / "comm_group.json").read_text()) == groups
    sim = _sim_or_skip()
    import subprocess

    cg = str(tmp_path / "comm_group.json")
    for _ in range(3):   # the double free aborted some runs, not all: run it a few times
        out = subprocess.run([str(sim), str(tmp_path / "tpdp"), "4", "--comm-group", cg], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout + out.stderr
    if shutil.which("valgrind"):   # the double free itself: in the input, and not after the split
        net = tmp_path / "network.yml"
        net.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 150 ]\nlatency: [ 500 ]\n")
        binary = sim.parent / "bin" / "AstraSim_Analytical_Congestion_Unaware"
        for prefix, broken in (("in", True), ("tpdp", False)):
            logs = tmp_path / f"logs_{prefix}"
            logs.mkdir()
            vg = subprocess.run(
                ["valgrind", "-q", str(binary), f"--workload-configuration={tmp_path / prefix}",
                 f"--system-configuration={sim.parent / 'configs' / 'system.json'}",
                 f"--remote-memory-configuration={sim.parent / 'configs' / 'remote_memory.json'}",
                 f"--network-configuration={net}", f"--comm-group-configuration={cg}",
                 f"--logging-folder={logs}"], capture_output=True, text=True, timeout=600)
            assert ("Invalid free" in vg.stderr) == broken, vg.stderr[-2000:]


def test_harness_astrasim_target(tmp_path):
    import io

    from chakra.pipeline.harness import run_integration
    out = io.StringIO()
    rc = run_integration(DATA / "gloo_collectives_2r.tgz", 2, 0.05, against_measured=True, job=True,
                         extract_dir=tmp_path, out=out, astrasim=True)
    assert rc == 0 and out.getvalue().count("Validation successful") == 2
    files = [tmp_path / "gloo_collectives_2r" / f"chakra.{r}.et" for r in range(2)]
    assert validate(files).ok
    assert all(pb.METADATA_NODE not in node_types(f) for f in files)


def test_windows_cut_at_different_collectives(tmp_path):
    # tests/data/gloo_skew_2r (trace_collection/collect.py --straggler-rank 1 --straggler-ms 20 --window-skew
    # 1:1): rank 1 profiled steps 3-5, rank 0 steps 2-4; each rank's window holds three DDP all_reduces of
    # 27,168 B, so counts and sizes agree and only the end times tell which are the same: rank 0's ends at
    # +0/+37/+61 ms and rank 1's at +33/+62/+93 ms (from rank 0's first) pair rank 0's 2nd and 3rd with rank
    # 1's 1st and 2nd (4 and 1 ms apart; unshifted they would be 33, 25 and 32 ms apart)
    from chakra.job.etfile import rank_comms, read_et
    from chakra.replay.api import replay_job

    run_pipeline(DATA / "gloo_skew_2r", tmp_path / "plain")
    files = [tmp_path / "plain" / f"gloo_skew_2r.{r}.et" for r in range(2)]
    ends = [[c.end for c in rank_comms(read_et(f, r)).comms] for r, f in enumerate(files)]
    assert [len(e) for e in ends] == [3, 3]
    assert abs(ends[0][1] - ends[1][0]) < 5000 and abs(ends[0][2] - ends[1][1]) < 5000
    assert min(abs(a - b) for a, b in zip(ends[0], ends[1])) > 20000
    job = replay_job(files)
    assert job.groups == 2
    for r in range(2):
        assert abs(job.ranks[r].error_pct) < 1.0
    report = astrasim_job(files, tmp_path / "skew")
    assert report.collectives == 2 and report.as_comp == {0: 1, 1: 1}
    first0 = rank_comms(read_et(files[0], 0)).comms[0].node_id
    last1 = rank_comms(read_et(files[1], 1)).comms[-1].node_id
    left = [n for n in report.notes if "has no counterpart" in n]
    assert f"(node {first0} 'gloo:all_reduce')" in left[0] and f"(node {last1} 'gloo:all_reduce')" in left[1]
    assert validate([tmp_path / f"skew.{r}.et" for r in range(2)]).ok
    sim = _sim_or_skip()
    import subprocess

    out = subprocess.run([str(sim), str(tmp_path / "skew"), "2"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_corpus
@pytest.mark.parametrize("name", [
    # (the H100 trace, 9-10 s, is slow: mi300x_bert_small is the same case, a one-GPU inference trace)
    pytest.param("h100_owlv2_large", marks=pytest.mark.slow), "mi300x_bert_small",
    "mi300x_resnet_act_checkpoint"])
def test_kineto_only_traces_convert_to_what_the_simulator_reads(corpus, tmp_path, name):
    # linked from the Kineto trace alone, converted with --astrasim: validate passes (the one-GPU inference
    # traces get an idle second NPU beside them, the 8-rank MI300X training rank 0 keeps its 12 collectives)
    from chakra.cli import converter
    from chakra.link import link_files

    link_files(None, corpus / "kineto_only" / f"{name}.json.gz", tmp_path / "e.json")
    assert converter.main(["-i", str(tmp_path / "e.json"), "-o", str(tmp_path / "k.0.et"), "--astrasim"]) == 0
    single = name != "mi300x_resnet_act_checkpoint"
    files = [tmp_path / "k.0.et"] + ([tmp_path / "k.1.et"] if single else [])
    res = validate(files, allow_missing_ranks=not single)     # MI300X: rank 0 alone of the 8
    assert res.ok, [str(p) for p in res.problems]
    assert res.collectives == (0 if single else 12)
    if not single:
        assert res.notes == ["the job has 8 ranks (world_size 8 in the metadata of k.0.et); missing: ranks "
                             "1, 2, 3, 4, 5, 6, 7: checked rank 0 alone (--allow-missing-ranks)"]
        assert not validate(files).ok
    if single:
        sim = _sim_or_skip()
        import subprocess

        out = subprocess.run([str(sim), str(tmp_path / "k"), "2"], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_validate_compares_collectives_in_the_order_the_simulator_issues_them(tmp_path):
    """A file may list a collective before the one it waits for (the experiment writes nodes by id; the
    converter's ids are the host ET's, which numbers a record when it ends): the simulator issues them by
    their dependencies, and so does validate compare them."""
    from chakra.io.pbstream import write_messages

    def coll(nid: int, size: int, deps: list[int]) -> pb.Node:
        return pb.Node(id=nid, name=f"all_reduce_{size}", type=pb.COMM_COLL_NODE, duration_micros=5,
                       data_deps=deps, attr=[pb.AttributeProto(name="is_cpu_op", bool_val=False),
                                             pb.AttributeProto(name="comm_type", int64_val=pb.ALL_REDUCE),
                                             pb.AttributeProto(name="comm_size", int64_val=size)])

    paths = []
    for r, nodes in enumerate(([coll(1, 4096, []), coll(2, 1024, [1])],
                               [coll(1, 1024, [2]), coll(2, 4096, [])])):   # rank 1: 4,096 B first too
        meta = pb.GlobalMetadata(version="0.0.4", attr=[pb.AttributeProto(name="rank", int64_val=r),
                                                        pb.AttributeProto(name="world_size", int64_val=2)])
        paths.append(tmp_path / f"job.{r}.et")
        write_messages(paths[-1], [meta, *nodes])
    res = validate(paths)
    assert res.ok, res.problems
    # listed in the other order for real: a mismatch, named
    write_messages(paths[1], [pb.GlobalMetadata(version="0.0.4", attr=[
        pb.AttributeProto(name="rank", int64_val=1), pb.AttributeProto(name="world_size", int64_val=2)]),
        coll(1, 1024, []), coll(2, 4096, [1])])
    res = validate(paths)
    assert not res.ok and "collective #0: rank 0 issues all_reduce of 4,096 B" in res.problems[0].text
