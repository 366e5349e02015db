"""One rank's Chakra protobuf ET as the job-level passes read it: metadata, nodes, process groups.

Whoever produced the file (this toolkit, the reference converter, a generator), the
process groups come from the ``process_groups`` attribute of ``GlobalMetadata``
(this toolkit) or from a METADATA node's inputs (ASTRA-sim's convention: the
``str()`` of a one-element list holding the JSON text), or from a comm-group JSON
the user gives (``{"<pg id>": [ranks]}``, what ASTRA-sim's
``--comm-group-configuration`` reads).
"""

from __future__ import annotations

import ast
import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chakra import formats as wire
from chakra import schema as pb
from chakra.errors import TraceFormatError
from chakra.io.pbstream import read_messages

if TYPE_CHECKING:
    from chakra.job.match import Comm, RankComms

log = logging.getLogger(__name__)

COMM_NODE_TYPES = frozenset((pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE))


def metadata_info(metadata: Any) -> dict[str, Any]:
    """The GlobalMetadata attributes as plain Python values."""
    out: dict[str, Any] = {}
    if metadata is None:
        return out
    for attr in metadata.attr:
        out[attr.name] = pb.attr_value(attr)
    return out


def int_or_none(value: Any) -> int | None:
    """``int(value)``, or None where it has none (None, a non-numeric string)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def parse_process_groups(text: Any, world_size: int | None, where: str | None = None
                         ) -> dict[str, tuple[int, ...]]:
    """``process_groups`` JSON text (or an already parsed list) -> {pg_name: ranks}.

    An empty ``ranks`` list means the whole world and stays ``()`` here; the job
    resolves it to the ranks it holds.
    """
    if text in (None, ""):
        return {}
    groups = text
    if isinstance(text, (str, bytes)):
        try:
            groups = json.loads(text)
        except ValueError as exc:
            raise TraceFormatError(f"GlobalMetadata process_groups is not valid JSON ({exc})",
                                   where) from None
    if not isinstance(groups, list):
        raise TraceFormatError("GlobalMetadata process_groups must be a JSON list", where)
    out: dict[str, tuple[int, ...]] = {}
    for i, pg in enumerate(groups):
        if not isinstance(pg, dict) or wire.GROUP_NAME not in pg:
            raise TraceFormatError(f"process group #{i} has no pg_name", where)
        try:
            ranks = tuple(int(r) for r in (pg.get(wire.GROUP_RANKS) or ()))
        except (TypeError, ValueError):
            raise TraceFormatError(f"process group {pg[wire.GROUP_NAME]!r} has non-integer ranks",
                                   where) from None
        if world_size and ranks == tuple(range(world_size)):
            ranks = ()
        out[str(pg[wire.GROUP_NAME])] = ranks
    # The converter may write non-numeric group names as their position in the table (what the
    # simulator accepts); accept those too when they do not clash with a real name.
    for i, pg in enumerate(groups):
        name = str(pg[wire.GROUP_NAME])
        if not name.isdigit():
            out.setdefault(str(i), out[name])
    return out


def groups_from_metadata_node(values: str, where: str | None) -> Any:
    """ASTRA-sim's METADATA payload: the ``str()`` of a one-element list holding the JSON text."""
    try:
        outer = ast.literal_eval(values)
        if isinstance(outer, list) and outer and isinstance(outer[0], str):
            return json.loads(outer[0])
        if isinstance(outer, list):
            return outer
    except (ValueError, SyntaxError):
        pass
    log.debug("%s: METADATA node inputs are not a process-group table; ignored", where)
    return None


def read_comm_groups(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """ASTRA-sim's communicator-group file, ``{"<pg id>": [global ranks], ...}`` -> {pg_name: ranks}."""
    from chakra.io import load_json

    doc = load_json(path)
    if not isinstance(doc, dict):
        raise TraceFormatError('a comm-group file is a JSON object {"<pg id>": [global ranks], ...}', path)
    out: dict[str, tuple[int, ...]] = {}
    for key, ranks in doc.items():
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                                  for r in ranks):
            raise TraceFormatError(f"group {key!r}: expected a list of global ranks (integers >= 0), got "
                                   f"{str(ranks)[:60]}", path)
        out[str(key)] = tuple(ranks)
    return out


@dataclass(slots=True)
class EtFile:
    """A decoded rank file: GlobalMetadata, nodes in file order, and what the job passes need."""

    path: str
    meta: Any
    nodes: list[Any]
    rank: int
    world_size: int | None = None
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    measured_start_us: float | None = None


def job_of_metadata(info: dict[str, Any], rank: int | None, where: str | None
                    ) -> tuple[int | None, int | None, dict[str, tuple[int, ...]]]:
    """What the GlobalMetadata attributes ``info`` (:func:`metadata_info`) say of the job: the rank (else
    ``rank``), the world size (None unless > 0) and the process groups."""
    r = int_or_none(info.get(wire.META_RANK))
    ws = int_or_none(info.get(wire.META_WORLD_SIZE))
    ws = ws if ws and ws > 0 else None
    groups = parse_process_groups(info.get(wire.META_PROCESS_GROUPS), ws, where)
    return (r if r is not None and r >= 0 else rank), ws, groups


def read_et(path: str | os.PathLike[str], rank: int) -> EtFile:
    """Decode one rank's ``.et``; ``rank`` is used when the metadata names none."""
    meta, nodes = read_messages(path, pb.GlobalMetadata, pb.Node)
    where = str(path)
    info = metadata_info(meta)
    r, ws, groups = job_of_metadata(info, rank, where)
    f = EtFile(where, meta, nodes, rank if r is None else r, ws, groups)
    if not f.groups:
        for n in nodes:
            if n.type == pb.METADATA_NODE and n.inputs.values:
                parsed = groups_from_metadata_node(n.inputs.values, where)
                if parsed:
                    f.groups = parse_process_groups(parsed, ws, where)
                    break
    mstart = info.get(wire.META_MEASURED_START_US)
    f.measured_start_us = float(mstart) if isinstance(mstart, (int, float)) else None
    return f


def node_attrs(node: Any) -> dict[str, Any]:
    return {a.name: pb.attr_value(a) for a in node.attr}


def comm_of(node: Any, pos: int, base: float | None, attrs: dict[str, Any] | None = None) -> Comm:
    """The matcher's record of a COMM_* node (``base``: the file's measured_start_us, for end times)."""
    from chakra.job.match import Comm  # (the job matcher: not loaded by the replay reader, which reads this)

    a = node_attrs(node) if attrs is None else attrs
    kind = node.type
    peer = (int_or_none(a.get(wire.ATTR_COMM_DST if kind == pb.COMM_SEND_NODE else wire.ATTR_COMM_SRC))
            if kind != pb.COMM_COLL_NODE else None)
    end = start = None
    if base is not None and node.start_time_micros:
        start = base + node.start_time_micros
        end = start + node.duration_micros
    seq = a.get(wire.ATTR_COMM_SEQ)
    return Comm(pos=pos, node_id=node.id, kind=kind,
                comm_type=int_or_none(a.get(wire.ATTR_COMM_TYPE)) if kind == pb.COMM_COLL_NODE else None,
                size=int_or_none(a.get(wire.ATTR_COMM_SIZE)) or 0, pg=str(a.get(wire.ATTR_PG_NAME) or ""),
                peer=peer, tag=int_or_none(a.get(wire.ATTR_COMM_TAG)) or 0,
                seq=seq if isinstance(seq, int) else None, end=end, start=start, name=node.name,
                thread=int_or_none(a.get(wire.ATTR_TID)))


def is_timing_piece(node: Any) -> bool:
    """A node an ASTRA-sim experiment added for a piece of time (chakra.replay.materialize): a COMM node
    that is not communication."""
    return any(a.name == wire.ATTR_TIMING_PIECE for a in node.attr)


def rank_comms(f: EtFile, skip: set[int] | None = None) -> RankComms:
    """The rank's comm nodes in file order (a topological order: the order the simulator meets them);
    ``skip``: positions not to include."""
    from chakra.job.match import RankComms

    comms = []
    for pos, n in enumerate(f.nodes):
        if n.type in COMM_NODE_TYPES and (skip is None or pos not in skip) and not is_timing_piece(n):
            comms.append(comm_of(n, pos, f.measured_start_us))
    return RankComms(rank=f.rank, comms=comms, groups=dict(f.groups), path=f.path)
