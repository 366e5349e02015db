"""File-level conversion: load ET+ / host ET, convert, write the length-delimited stream atomically."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from chakra.convert.core import ConvertStats, stream_serialized
from chakra.convert.write import FrameReader, WriteNodes
from chakra.io import atomic_output
from chakra.io.gcpause import release
from chakra.io.pbstream import write_frames

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConvertReport:
    """What ``convert_file`` did: inputs, counts, warnings, timings and (with ``--simulate``, set by the
    command) the replay."""

    input_path: str
    output_path: str
    stats: ConvertStats
    load_s: float = 0.0
    convert_s: float = 0.0
    write_s: float = 0.0
    bytes_written: int = 0
    simulated: bool = False
    replayed_us: float | None = None
    completion_lines: int = 0

    @property
    def nodes(self) -> int:
        return self.stats.nodes

    @property
    def warnings(self) -> list[str]:
        return self.stats.warnings

    def summary(self) -> dict[str, Any]:
        s = self.stats
        return {
            "input": self.input_path, "output": self.output_path, "nodes": s.nodes, "by_type": s.by_type,
            "cpu_ops": s.cpu_ops, "gpu_ops": s.gpu_ops, "comm_nodes": s.comm_nodes,
            "cpu_comm_nodes": s.cpu_comm_nodes, "comm_as_comp": s.comm_as_comp, "ctrl_edges": s.ctrl_edges,
            "data_edges": s.data_edges,
            "sync_edges": s.sync_edges, "inter_thread_edges": s.inter_thread_edges, "timed": s.timed,
            "rank": s.rank, "bytes": self.bytes_written, "load_s": round(self.load_s, 3),
            "convert_s": round(self.convert_s, 3), "write_s": round(self.write_s, 3),
            "replayed_us": self.replayed_us, "warnings": len(s.warnings),
        }


def convert_file(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str], *,
                 astrasim_safe: bool = False, reader: FrameReader[Any] | None = None) -> ConvertReport:
    """Convert one ET+ JSON (or bare host ET; ``.json`` or gzip) into a Chakra protobuf ET.

    The output appears complete or not at all.  With ``astrasim_safe`` the collectives the simulator
    does not run (REDUCE, GATHER, SCATTER, BARRIER, REDUCE_SCATTER_BLOCK) are written as COMP nodes of
    their recorded duration (``chakra.convert.core`` module doc).  ``chakra_converter --simulate``
    replays the file after this (:mod:`chakra.replay.written`), its nodes read as they are written:
    ``reader`` (see :func:`write_et`).
    """
    from chakra.io import gc_paused

    # The cyclic GC stays off from load to write (see chakra.io.gcpause); re-enabled between the
    # stages it would walk the whole loaded trace again each time.
    with gc_paused():
        return _convert_file(input_path, output_path, astrasim_safe, reader)


def _convert_file(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str],
                  astrasim_safe: bool, reader: FrameReader[Any] | None) -> ConvertReport:
    from chakra.convert.columns import load_columns

    t0 = time.perf_counter()
    # per-node columns and pre-serialised pieces (convert.columns): no million HostOps
    trace, columns, ser = load_columns(input_path)
    t1 = time.perf_counter()
    # nodes are built while they are serialised: never a million messages alive at once
    meta, write_nodes, stats = stream_serialized(trace, astrasim_safe=astrasim_safe, columns=columns,
                                                 serializer=ser)
    del trace, columns, ser   # the writer holds what it needs
    t2 = time.perf_counter()
    write_et(output_path, meta, write_nodes, reader)
    if reader is None:   # (a --simulate replay comes next: the plan is freed first, as its memory is wanted)
        release(write_nodes)   # kept to the end of a command's process, not freed
    del write_nodes
    t3 = time.perf_counter()
    report = ConvertReport(os.fspath(input_path), os.fspath(output_path), stats,
                           load_s=t1 - t0, convert_s=t2 - t1, write_s=t3 - t2,
                           bytes_written=os.path.getsize(output_path))
    log.info("%s -> %s: %d nodes %s in %.2fs", report.input_path, report.output_path, stats.nodes,
             stats.by_type, t3 - t0)
    return report


def write_et(output_path: str | os.PathLike[str], meta: Any, write_nodes: WriteNodes,
             reader: FrameReader[Any] | None = None) -> None:
    """The GlobalMetadata and the nodes (``stream_serialized``'s writer) as a length-delimited file,
    atomically.

    ``reader``: reads the nodes' frames as they are written (``SerialNodes.write_parts``), and is given
    ``written(path, pieces, meta)`` once the file is in place."""
    path = os.fspath(output_path)
    with atomic_output(path) as fh:
        write_frames(fh.write, (meta,), path)
        pieces = write_nodes(fh, path, reader)
    if reader is not None:
        assert pieces is not None   # (a list of the pieces' results when there is a reader)
        reader.written(path, pieces, meta)


def add_log_file(path: str | os.PathLike[str]) -> None:
    """Send the log to ``path`` too: truncated once, then opened in append mode (``--simulate`` appends
    its completion lines to the same file: :mod:`chakra.replay.written`)."""
    from chakra.io.sniff import log_file_handler

    handler = log_file_handler(path)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))
    # a log file asked for gets what was done (INFO) whatever the console shows (WARNING by default; the
    # console handler of chakra.cli.common.setup_logging filters by its own level)
    root = logging.getLogger()
    level = min(root.getEffectiveLevel(), logging.INFO)
    handler.setLevel(level)
    root.setLevel(level)
    root.addHandler(handler)
