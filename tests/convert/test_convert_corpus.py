"""chakra.convert on the real traces of ../shared/traces, checked through the independent wire reader."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import CORPUS, needs_corpus
from helpers.et_checks import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, METADATA_NODE, check_et

from chakra.convert import convert_file

pytestmark = [needs_corpus, pytest.mark.corpus]


def _files(pattern: str) -> list[str]:
    if CORPUS is None:
        return []
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob(pattern))


DLRM_ETPLUS = _files("dlrm_8r_v100/et_plus_2023/et_plus_*.json.gz")
BARE = _files("cpu_gloo/*/host_et_*.json.gz") + _files("host_only/*.json.gz")


def _convert(corpus, rel, tmp_path):
    out = tmp_path / "out.0.et"
    report = convert_file(corpus / rel, out)
    return report, out


def _load(path):
    with gzip.open(path) as fh:
        return json.load(fh)


def test_corpus_lists_are_complete():
    assert len(DLRM_ETPLUS) == 8
    assert len(BARE) == 12


@pytest.mark.parametrize("rel", DLRM_ETPLUS)
def test_dlrm_etplus_rank_converts(corpus, rel, tmp_path):
    report, out = _convert(corpus, rel, tmp_path)
    meta, nodes = check_et(out)
    src = _load(corpus / rel)
    # every node kept, under its original id
    assert {n.id for n in nodes} == {n["id"] for n in src["nodes"]}
    assert report.stats.timed
    rank = int(rel.rsplit("_", 1)[1].split(".")[0])
    assert meta["rank"].value == rank       # inferred from record_param_comms' rank input
    # GPU ops keep their Kineto duration
    gpu = {n["id"]: n["dur"] for n in src["nodes"] if "cat" in n}
    got = {n.id: n.duration_micros for n in nodes if n.id in gpu}
    assert got == gpu


@pytest.mark.parametrize("rel", BARE)
def test_bare_host_et_converts(corpus, rel, tmp_path):
    report, out = _convert(corpus, rel, tmp_path)
    meta, nodes = check_et(out)
    src = _load(corpus / rel)
    assert len(nodes) == len(src["nodes"])
    assert not report.stats.timed and all(n.duration_micros == 0 for n in nodes)
    has_init = any(n["name"] == "## process_group:init ##" for n in src["nodes"])
    assert sum(n.type == METADATA_NODE for n in nodes) == int(has_init)


def test_dlrm_rank0_one_comm_node_per_nccl_kernel_with_host_tensor_sizes(corpus, tmp_path):
    report, out = _convert(corpus, "dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz", tmp_path)
    _, nodes = check_et(out)
    kineto = _load(corpus / "dlrm_8r_v100/device/kineto_0.json.gz")
    nccl_kernels = [e for e in kineto["traceEvents"]
                    if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    comm = {n.id: n for n in nodes if n.type == COMM_COLL_NODE}
    assert len(comm) == len(nccl_kernels) == 8
    # worked out by hand from the nccl:* host op above each kernel (num_elem x elem_bytes):
    # 6144 float, 24 long, 384 int, 3392 int, 394241 float, 6144 float, 112 float, 226960 float
    sizes = {nid: n.attrs["comm_size"].value for nid, n in comm.items()}
    assert sizes == {729: 24576, 1070: 192, 1100: 1536, 1105: 13568, 1251: 1576964, 1595: 24576,
                     1668: 448, 1854: 907840}
    types = {nid: n.attrs["comm_type"].value for nid, n in comm.items()}
    # ncclKernel_SendRecv under nccl:all_to_all is an all_to_all (6); AllReduce is 0
    assert types == {729: 6, 1070: 6, 1100: 6, 1105: 6, 1251: 0, 1595: 6, 1668: 0, 1854: 0}
    # the same sizes, recomputed from the ET+ file: each kernel's parent is its nccl:* op
    src = {n["id"]: n for n in _load(corpus / "dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz")["nodes"]}
    for nid, size in sizes.items():
        host = src[src[nid]["parent"]]
        assert host["name"].startswith("nccl:")
        assert size == sum(t[3] * t[4] for t in host["inputs"] if isinstance(t, list) and len(t) == 6)
    # collectives of one process group are ordered: each depends on the previous one
    order = sorted(comm.values(), key=lambda n: n.start_time_micros)
    for prev, cur in zip(order, order[1:]):
        assert prev.id in cur.data_deps


def test_dlrm_rank0_durations_are_exclusive(corpus, tmp_path):
    _, out = _convert(corpus, "dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz", tmp_path)
    _, nodes = check_et(out)
    n = {x.id: x for x in nodes}
    # record_param_comms 727 (ts ...742, dur 81) holds nccl:all_to_all 728 (ts ...757, dur 62): 81 - 62 = 19
    assert n[727].duration_micros == 19 and n[728].duration_micros == 62
    # the CPU ops of one thread never overlap once each runs its exclusive time: the sum of exclusive
    # durations of thread-1 ops equals the thread root's span minus its idle gaps, so it is below it
    src = _load(corpus / "dlrm_8r_v100/et_plus_2023/et_plus_0.json.gz")["nodes"]
    roots = {x["tid"]: x["dur"] for x in src if x["name"].endswith("|thread]")}
    for tid, span in roots.items():
        total = sum(n[x["id"]].duration_micros for x in src if "cat" not in x and x["tid"] == tid)
        assert 0 < total <= span + 5   # +rounding


def test_tp_like_collectives(corpus, tmp_path):
    _, out = _convert(corpus, "cpu_gloo/tp_like_2r/host_et_0.json.gz", tmp_path)
    meta, nodes = check_et(out)
    n = {x.id: x for x in nodes}
    comm = {x.id: x for x in nodes if x.type in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE)}
    types = {i: (x.type, x.attrs["comm_type"].value if "comm_type" in x.attrs else None)
             for i, x in comm.items()}
    # broadcast 5, all_gather 2, all_reduce 0, reduce_scatter 7 (gloo records it as all_reduce under
    # c10d::_reduce_scatter_base_), all_to_all 6, barrier 9, one send and one recv
    assert types == {12: (7, 5), 45: (7, 2), 71: (7, 2), 101: (7, 0), 245: (7, 7), 279: (7, 6),
                     289: (5, None), 291: (6, None), 311: (7, 0), 318: (7, 0), 331: (7, 5), 348: (7, 0),
                     373: (7, 0), 384: (7, 9)}
    # 1024 floats broadcast; reduce_scatter moves the 8192-float input; all_to_all 16 floats
    assert n[12].attrs["comm_size"].value == 4096
    assert n[245].attrs["comm_size"].value == 32768
    assert n[279].attrs["comm_size"].value == 64
    # rank 0 sends to rank 1 and receives from it (rank read off the one-rank group "solo_0")
    assert meta["rank"].value == 0
    s, r = n[289].attrs, n[291].attrs
    assert (s["comm_src"].value, s["comm_dst"].value, s["comm_tag"].value) == (0, 1, 0)
    assert (r["comm_src"].value, r["comm_dst"].value) == (1, 0)
    # the c10d wrappers stay CPU COMP nodes that the comm node waits for
    assert n[11].type == 4 and n[11].attrs["is_cpu_op"].value is True
    assert 11 in n[12].ctrl_deps + n[12].data_deps
    # METADATA: three groups with numeric names; the one-rank group keeps its rank
    assert meta["world_size"].value == 2
    groups = json.loads(meta["process_groups"].value)
    assert [(g["pg_name"], g["ranks"]) for g in groups] == [("0", [0, 1]), ("1", [0, 1]), ("2", [0])]


def test_host_only_nccl_metadata_and_comm(corpus, tmp_path):
    _, out = _convert(corpus, "host_only/ddp_2gpu_rank0_1.0.2-chakra.0.0.4.json.gz", tmp_path)
    meta, nodes = check_et(out)
    comm = [x for x in nodes if x.type == COMM_COLL_NODE]
    # ten nccl:all_gather of one float each on 2 ranks, in process group "0" (from the 1.0.2 backend id);
    # comm_size = max(in, out): the record_param_comms output (node 30 for node 31) holds 2 floats = 8 B
    assert len(comm) == 10
    assert {(x.attrs["comm_type"].value, x.attrs["comm_size"].value, x.attrs["pg_name"].value)
            for x in comm} == {(2, 8, "0")}
    md = [x for x in nodes if x.type == METADATA_NODE][0]
    assert md.inputs["values"] == ("['[{\"pg_name\": \"0\", \"pg_desc\": \"\", \"backend_config\": "
                                   "\"cuda:nccl\", \"ranks\": [0, 1], \"group_size\": 2, "
                                   "\"group_count\": 1}]']")


LINKABLE = [("dlrm_8r_v100/host/host_et_0.json.gz", "dlrm_8r_v100/device/kineto_0.json.gz", 0),
            ("cpu_gloo/tp_like_2r/host_et_1.json.gz", "cpu_gloo/tp_like_2r/kineto_1.json.gz", 1),
            ("cpu_gloo/ddp_mlp_4r/host_et_2.json.gz", "cpu_gloo/ddp_mlp_4r/kineto_2.json.gz", 2)]


@pytest.mark.parametrize(("host", "kineto", "rank"), LINKABLE)
def test_our_linker_output_converts(corpus, tmp_path, host, kineto, rank):
    link = pytest.importorskip("chakra.link.api")
    etplus = tmp_path / "et_plus.json"
    link.link_files(corpus / host, corpus / kineto, etplus, rank=rank)
    report = convert_file(etplus, tmp_path / f"out.{rank}.et")
    meta, nodes = check_et(tmp_path / f"out.{rank}.et")
    src = json.loads(etplus.read_text())
    assert meta["rank"].value == rank and meta["measured_window"].value == src["measured"]["window"]
    assert meta["measured_start_us"].value == src["measured"]["start_us"]
    by = {n.id: n for n in nodes}
    # the sync and inter-thread dependencies of ET+ are written, as data deps
    n_sync = n_inter = 0
    waited_for = {n.attrs["wait_on"].value for n in nodes if "wait_on" in n.attrs}
    for x in src["nodes"]:
        for d in x.get("sync_dep", []):
            # a synchronize whose waiting was found became a wait of the op after it (convert.threads):
            # the op itself then no longer depends on the GPU op, and something waits on that stream
            assert d in by[x["id"]].data_deps or d in by[x["id"]].ctrl_deps or waited_for
            n_sync += 1
        if "inter_thread_dep" in x:
            assert x["inter_thread_dep"] in by[x["id"]].data_deps + by[x["id"]].ctrl_deps
            n_inter += 1
    assert report.stats.sync_edges == n_sync and report.stats.inter_thread_edges == n_inter
    assert n_sync + n_inter > 0
    # durations: CPU ops their exclusive time net of the blocking waits found in it (those became
    # dependencies, convert.threads), GPU ops their Kineto duration (rounded to µs)
    cut = 0
    for x in src["nodes"]:
        if "exclusive_dur" in x:
            excl = max(0, int(x["exclusive_dur"] + 0.5))
            assert by[x["id"]].duration_micros <= excl
            cut += excl - by[x["id"]].duration_micros
    assert 0 < cut <= report.stats.waited_us and report.stats.waits > 0
    if rank == 0:
        comm = {n.id: n.attrs["comm_size"].value for n in nodes if n.type == COMM_COLL_NODE}
        assert sorted(comm.values()) == sorted([24576, 192, 1536, 13568, 1576964, 24576, 448, 907840])
