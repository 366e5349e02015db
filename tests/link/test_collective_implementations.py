"""Collectives by any implementation: a DLRM rank whose all-reduces ran as vLLM runs them
(``helpers.collective_edits``: ``vllm::all_reduce`` > ``symm_mem::multimem_all_reduce_`` /
``_C_custom_ar::all_reduce`` > ``multimem_all_reduce_kernel`` / ``cross_device_reduce_1stage`` /
``_2stage``, no ``record_param_comms``) gives the collectives the NCCL original gives: same types, sizes
and group, from the host ET, from the Kineto trace alone and from the host ET alone; the link summary,
``chakra stats`` and a network what-if count them.  The same for a gloo job whose records are renamed to
MPI's (``mpi:*``), which runs its collectives on CPU threads as gloo does.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from pathlib import Path

import pytest
from conftest import DATA, needs_corpus
from helpers.collective_edits import PYNCCL, VARIANTS, vllm_dlrm

from chakra import schema as pb
from chakra.convert import convert_file
from chakra.io import read_messages
from chakra.link import link_files
from chakra.replay import load_graph
from chakra.replay.whatif import WhatIf, apply_whatif
from chakra.tools.stats import compute_stats

KERNELS = [k for _, _, k in VARIANTS]
# rank 0's all_reduces (record_param_comms of the original: 394,241, 112 and 226,960 floats)
SIZES = [1_576_964, 448, 907_840]


def comm_nodes(path: Path) -> list[tuple[str, int, int, int, str]]:
    """(name, node type, comm_type, comm_size, pg_name) of every comm node, in file order."""
    _, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    out = []
    for n in nodes:
        if n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            a = {x.name: pb.attr_value(x) for x in n.attr}
            out.append((n.name, n.type, a.get("comm_type"), a["comm_size"], a.get("pg_name", "")))
    return out


def _convert(host: Path | None, kineto: Path, out: Path, name: str):
    report = link_files(host, kineto, out / f"{name}.json")
    convert_file(out / f"{name}.json", out / f"{name}.0.et")
    return report, out / f"{name}.0.et"


@pytest.fixture(scope="module")
def dlrm(corpus, tmp_path_factory):
    """Rank 0 of DLRM as recorded and as vLLM would have recorded it, linked and converted both ways."""
    tmp = tmp_path_factory.mktemp("vllm_dlrm")
    edited = vllm_dlrm(corpus, tmp / "in")
    orig = corpus / "dlrm_8r_v100"
    res = {}
    for tag, folder in (("orig", orig), ("vllm", edited)):
        host, kineto = folder / "host" / "host_et_0.json.gz", folder / "device" / "kineto_0.json.gz"
        res[tag, "host"] = _convert(host, kineto, tmp, f"{tag}_host")
        res[tag, "kineto"] = _convert(None, kineto, tmp, f"{tag}_kineto")
        convert_file(host, tmp / f"{tag}_bare.0.et")
        res[tag, "bare"] = (None, tmp / f"{tag}_bare.0.et")
    return res


@needs_corpus
@pytest.mark.parametrize("how", ["host", "kineto", "bare"])
def test_vllm_all_reduces_are_the_collectives_the_nccl_ones_were(dlrm, how):
    orig, vllm = comm_nodes(dlrm["orig", how][1]), comm_nodes(dlrm["vllm", how][1])
    assert len(orig) == len(vllm) == 8
    assert [n[1:] for n in vllm] == [n[1:] for n in orig]
    reduces = [n for n in vllm if n[2] == pb.ALL_REDUCE]
    assert [n[3] for n in reduces] == SIZES and all(n[1] == pb.COMM_COLL_NODE and n[4] == "" for n in reduces)
    # the comm node is the kernel; without a Kineto trace the op that ran it
    names = KERNELS if how != "bare" else [r for _, r, _ in VARIANTS]
    assert [n[0] for n in reduces] == names


@needs_corpus
def test_a_vllm_all_reduce_through_pynccl_is_its_call_without_a_kernel(corpus, tmp_path):
    """vLLM's pynccl calls ncclAllReduce itself: ``vllm::all_reduce`` launches NCCL's kernel, with no c10d op
    and no record under it.  Linked, the kernel is the comm node (its size from the call's tensor); from
    the host ET alone, the call is."""
    folder = vllm_dlrm(corpus, tmp_path / "in", variants=PYNCCL)
    h = folder / "host" / "host_et_0.json.gz"
    linked = _convert(h, folder / "device" / "kineto_0.json.gz", tmp_path, "pynccl")[1]
    convert_file(h, bare := tmp_path / "bare.0.et")
    for et, name in ((linked, "ncclKernel_AllReduce"), (bare, "vllm::all_reduce")):
        assert len(comm_nodes(et)) == 8
        reduces = [n for n in comm_nodes(et) if n[2] == pb.ALL_REDUCE]
        assert [(n[0].split("_RING")[0], n[1], n[3], n[4]) for n in reduces] == [
            (name, pb.COMM_COLL_NODE, s, "") for s in SIZES]


@needs_corpus
@pytest.mark.parametrize("how", ["host", "kineto"])
def test_the_link_summary_counts_them(dlrm, how):
    report, _ = dlrm["vllm", how]
    assert report.collectives == {"NCCL/RCCL": 5, "torch symmetric memory": 1, "vLLM custom all-reduce": 2}
    assert report.summary().endswith(
        "; 8 communication kernels (NCCL/RCCL 5, torch symmetric memory 1, vLLM custom all-reduce 2)")
    stats = json.loads(Path(report.output_path).read_bytes())["link_stats"]
    assert (stats["nccl_kernels"], stats["gloo_collectives"], stats["collectives_other"]) == (
        5, 0, {"torch symmetric memory": 1, "vLLM custom all-reduce": 2})
    orig = dlrm["orig", how][0]
    assert orig.summary().endswith("; 8 communication kernels (NCCL/RCCL 8)")
    # an ET+ of NCCL and gloo collectives only is written as before: no key of other implementations
    assert "collectives_other" not in json.loads(Path(orig.output_path).read_bytes())["link_stats"]


@needs_corpus
def test_stats_counts_them_per_implementation(dlrm):
    rep = compute_stats([dlrm["vllm", "host"][1]])["files"][0]
    assert rep["comm"]["nodes"] == 8
    assert rep["comm"]["by_implementation"] == {
        "NCCL/RCCL": {"count": 5, "bytes": 24576 + 192 + 1536 + 13568 + 24576},
        "torch symmetric memory": {"count": 1, "bytes": SIZES[0]},
        "vLLM custom all-reduce": {"count": 2, "bytes": SIZES[1] + SIZES[2]},
    }
    assert rep["comm"]["by_type"]["ALL_REDUCE"] == {"count": 3, "bytes": sum(SIZES)}


@needs_corpus
def test_a_network_what_if_retimes_them(dlrm):
    g = load_graph(dlrm["vllm", "host"][1])
    (out,), report = apply_whatif([g], WhatIf(bandwidth_gbps=0.1))
    assert report.retimed == 8
    moved = {g.names[i]: out.delay[i] for i in range(len(g.ids)) if g.names[i] in KERNELS}
    assert len(moved) == 3 and all(d > 0 for d in moved.values())


@needs_corpus
def test_a_collective_op_whose_kernel_no_row_names_is_said(corpus, tmp_path, caplog):
    """A symmetric-memory all-reduce fused with a kernel of its own name: the op is known, its kernel is
    not; the conversion says which op's collective it cannot see instead of dropping it silently."""
    folder = vllm_dlrm(corpus, tmp_path / "in")
    p = folder / "device" / "kineto_0.json.gz"
    doc = json.loads(gzip.decompress(p.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == KERNELS[0]:
            e["name"] = "void fused_allreduce_rmsnorm_kernel<float>(float*, float const*)"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with caplog.at_level(logging.WARNING):
        _, et = _convert(folder / "host" / "host_et_0.json.gz", p, tmp_path, "fused")
    assert len(comm_nodes(et)) == 7
    assert ("1 collective op(s) launched kernels that are no known communication kernel "
            "(symm_mem::multimem_all_reduce_ x1)") in caplog.text


def _renamed(src: Path, dest: Path, old: str, new: str) -> Path:
    """A copy of a gloo job folder with every ``old`` op name prefix renamed ``new``."""
    dest.mkdir(parents=True)
    for f in src.glob("*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        events = doc.get("traceEvents", doc.get("nodes"))
        for e in events:
            if isinstance(e.get("name"), str) and e["name"].startswith(old):
                e["name"] = new + e["name"][len(old):]
        (dest / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dest


def test_mpi_records_are_cpu_collectives_as_gloo_ones_are(tmp_path):
    src = DATA / "gloo_collectives_2r"
    mpi = _renamed(src, tmp_path / "mpi", "gloo:", "mpi:")
    report, et = _convert(mpi / "host_et_0.json.gz", mpi / "kineto_0.json.gz", tmp_path, "mpi")
    _, gloo = _convert(src / "host_et_0.json.gz", src / "kineto_0.json.gz", tmp_path, "gloo")
    want = comm_nodes(gloo)
    assert len(want) > 5
    assert comm_nodes(et) == [("mpi:" + n[0][len("gloo:"):], *n[1:]) for n in want]
    # 22 records: a list-form reduce_scatter runs as one all_reduce record per chunk (3 records, 1 collective)
    assert report.collectives == {"MPI": 22} and report.summary().endswith(
        "; 22 collective records on CPU threads (MPI 22)")
    nodes = json.loads(Path(report.output_path).read_bytes())["nodes"]
    assert {n.get("comm_backend") for n in nodes if n["name"].startswith("mpi:")} == {"mpi"}
    shutil.rmtree(mpi)
