"""gloo collectives of real 4-rank jobs (tests/data, trace_collection --job tp, --job overlap)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from conftest import DATA

from chakra import schema as pb
from chakra.io.pbstream import read_messages
from chakra.pipeline import run_pipeline


def comm_nodes(path: Path) -> list[tuple[int, dict]]:
    """The communication nodes of a written rank: (type, attributes); the pieces of time left out."""
    _, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    out = []
    for n in nodes:
        attrs = {a.name: pb.attr_value(a) for a in n.attr}
        comm = n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)
        if comm and "timing_piece" not in attrs:
            out.append((n.type, attrs))
    return out


def test_an_async_gloo_collective_has_the_size_of_the_call_it_ran(tmp_path):
    """tests/data/gloo_overlap_4r: three async all_reduces issued back to back (65,536, 16,384 and 4,096
    floats).  The host ET recorded rank 0's second gloo:all_reduce under the first call (its parent), and
    the linker's comm_size (the parent's, 262,144 B) won over the call it ran by launch order: the group's
    members disagreed on its size (65,536 B on ranks 1-3).  Now each record has its own call's size."""
    run_pipeline(DATA / "gloo_overlap_4r", tmp_path, jobs=1)
    for r in range(4):
        sizes = Counter(a["comm_size"] for _, a in comm_nodes(tmp_path / f"gloo_overlap_4r.{r}.et"))
        assert sizes == {262144: 2, 65536: 2, 16384: 2}, r
