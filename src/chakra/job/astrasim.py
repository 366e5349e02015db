"""Make a whole job's Chakra ETs run in ASTRA-sim (the ``--astrasim`` target).

The converter writes each rank faithfully; the simulator needs more, and across ranks
(``../shared/astra-sim/README.md`` lists what this build does).  This pass reads
every rank's ``.et`` (any producer's), and writes the set so that it runs:

1. **No METADATA nodes** (they abort this simulator); the process groups reach it
   through ``comm_group.json`` instead (``{"<pg id>": [global ranks]}``, for
   ``--comm-group-configuration``), written whenever a group other than the world is
   used.  Dependencies on a removed node are removed with it.
2. **Only collectives it runs**: REDUCE, GATHER, SCATTER, BARRIER and
   REDUCE_SCATTER_BLOCK become the collective it runs over the same ranks
   (:data:`STAND_INS`) when the whole job is there, else (one rank alone: the
   converter's ``--astrasim-safe`` rule) COMP nodes of their recorded duration, as
   do collectives of a one-rank group.
3. **The collectives every rank holds, matched** (:mod:`chakra.job.match`): by
   recorded sequence number, else by order with trimming at the window edges.  A
   collective or send/recv with no counterpart on a peer becomes a COMP node of its
   recorded duration (it ran; only its partners are outside the trace), and is
   reported.
4. **One size per collective**: the largest per-rank ``comm_size`` (an all_to_allv
   moves different amounts per rank; the simulator needs one), reported with the
   spread.
5. **One issue order**: each rank's communication nodes are chained (a data
   dependency on the previous one) in one job-wide order that agrees with every
   rank's own order, so that no two ranks can each wait for the other.
6. Comm nodes get ``is_cpu_op`` false and a numeric ``pg_name`` (non-numeric names
   are numbered), and the nodes are written in a topological order.

A COMP node made from a communication node keeps what it was as ``orig_collective``
(or ``orig_comm_node``), ``orig_comm_type``, ``orig_comm_size``, ``orig_pg_name`` and
says why in ``astrasim_note``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from chakra import formats as wire
from chakra import schema as pb
from chakra.convert.graph import CycleError, topological_order
from chakra.convert.plan import UNSIMULATED_COMM_TYPES
from chakra.errors import ChakraError, UsageError
from chakra.io import atomic_output
from chakra.io.pbstream import write_messages
from chakra.job.etfile import COMM_NODE_TYPES, EtFile, node_attrs, rank_comms, read_et
from chakra.job.match import Instance, JobMatch, UnknownGroup, match_job, world_pg
from chakra.schema import COLLECTIVE_NAMES

if TYPE_CHECKING:
    from chakra.convert import ConvertReport

log = logging.getLogger(__name__)

COMM_GROUP_JSON = "comm_group.json"


@dataclass(slots=True)
class AstrasimReport:
    """What the pass wrote and changed."""

    outputs: list[Path]
    comm_group: Path | None
    ranks: list[int]
    collectives: int = 0                      # matched collectives (per job, not per rank)
    p2p: int = 0                              # matched send/recv pairs
    as_comp: dict[int, int] = field(default_factory=dict)     # rank -> comm nodes written as COMP
    metadata_dropped: int = 0
    sizes_unified: int = 0
    groups: dict[str, list[int]] = field(default_factory=dict)   # what comm_group.json holds
    cross_rank: bool = True                   # False: one rank converted alone (no matching)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.cross_rank:
            out = [f"ASTRA-sim target: {len(self.ranks)} rank(s), {self.collectives} collective(s)"
                   + (f" and {self.p2p} send/recv pair(s)" if self.p2p else "") + " matched across ranks"]
        else:
            out = ["ASTRA-sim target, one rank alone: collective order and sizes across ranks not checked "
                   "(chakra pipeline DIR --astrasim does the whole job)"]
        if self.metadata_dropped:
            out.append(f"  {self.metadata_dropped} METADATA node(s) left out (the simulator aborts on them); "
                       + (f"process groups in {self.comm_group.name}" if self.comm_group else
                          "no group other than the world"))
        if any(self.as_comp.values()):
            out.append("  written as COMP nodes of their recorded duration: "
                       + ", ".join(f"{k} on rank {r}" for r, k in sorted(self.as_comp.items()) if k))
        out.extend(f"  {n}" for n in self.notes)
        return out


def _numeric_names(files: Sequence[EtFile]) -> dict[str, str]:
    """pg name -> the numeric id written (numeric names stay; others get fresh numbers)."""
    names: set[str] = set()
    for f in files:
        names.update(f.groups)
        for n in f.nodes:
            if n.type in COMM_NODE_TYPES:
                for a in n.attr:
                    if a.name == wire.ATTR_PG_NAME and a.WhichOneof("value") == "string_val":
                        names.add(a.string_val)
    taken = {int(x) for x in names if x.isdigit()}
    out: dict[str, str] = {}
    nxt = max(taken, default=0) + 1
    for name in sorted(names):
        if name == "" or name.isdigit():
            out[name] = name
        else:
            out[name] = str(nxt)
            nxt += 1
    return out


def _set_attr(node: pb.Node, name: str, **value: object) -> None:
    for a in node.attr:
        if a.name == name:
            a.Clear()
            a.name = name
            for k, v in value.items():
                setattr(a, k, v)
            return
    node.attr.append(pb.AttributeProto(name=name, **value))


def _to_comp(node: pb.Node, why: str) -> None:
    """A communication node -> a COMP node (GPU side) of its recorded duration, keeping what it was."""
    a = node_attrs(node)
    kept = [x for x in node.attr if x.name not in wire.COMM_ATTRS]
    del node.attr[:]
    node.attr.extend(kept)
    A = pb.AttributeProto
    if node.type == pb.COMM_COLL_NODE:
        ct = a.get(wire.ATTR_COMM_TYPE)
        name = COLLECTIVE_NAMES.get(ct, str(ct)) if ct is not None else str(ct)
        node.attr.append(A(name=wire.ATTR_ORIG_COLLECTIVE, string_val=name))
        if isinstance(ct, int):
            node.attr.append(A(name=wire.ATTR_ORIG_COMM_TYPE, int64_val=ct))
    else:
        node.attr.append(A(name=wire.ATTR_ORIG_COMM_NODE, string_val="send" if node.type == pb.COMM_SEND_NODE
                           else "recv"))
    if isinstance(a.get(wire.ATTR_COMM_SIZE), int):
        node.attr.append(A(name=wire.ATTR_ORIG_COMM_SIZE, int64_val=a[wire.ATTR_COMM_SIZE]))
    node.attr.append(A(name=wire.ATTR_ORIG_PG_NAME, string_val=str(a.get(wire.ATTR_PG_NAME) or "")))
    node.attr.append(A(name=wire.ATTR_ASTRASIM_NOTE, string_val=why))
    node.attr.append(A(name=wire.ATTR_IS_CPU_OP, bool_val=False))
    node.type = pb.COMP_NODE


def _topological(nodes: list[pb.Node], path: str) -> list[pb.Node]:
    """Nodes in a topological order (the given order where it already is one); a cycle is an error."""
    ids = [n.id for n in nodes]
    present = set(ids)
    deps = []
    for n in nodes:
        d = list({*n.ctrl_deps, *n.data_deps})
        missing = next((x for x in d if x not in present), None)
        if missing is not None:
            raise ChakraError(f"node {n.id} depends on node {missing}, which is not in the file", path)
        deps.append(d)
    try:
        order = topological_order(ids, deps)
    except CycleError as exc:
        raise ChakraError(f"dependency cycle through nodes {exc.cycle[:8]}", path) from None
    return [nodes[k] for k in order]


def prepare_job(files: Sequence[EtFile], *, unknown_group: UnknownGroup = "error", cross_rank: bool = True
                ) -> tuple[JobMatch, AstrasimReport]:
    """Rewrite the decoded ranks in place for the simulator (module doc); nothing is written here.

    ``cross_rank=False`` (one rank of a job converted on its own) does steps 1, 2 and 6 only: matching,
    sizes and the job-wide order need every rank."""
    ranks = [f.rank for f in files]
    if len(set(ranks)) != len(ranks):
        raise UsageError(f"two inputs claim the same rank ({sorted(ranks)})")
    report = AstrasimReport(outputs=[], comm_group=None, ranks=sorted(ranks), cross_rank=cross_rank)
    if cross_rank:
        _stand_ins(files, report)
    comp = _unsimulated(files)
    # 3.-5. the cross-rank contract
    if cross_rank:
        match = match_job([rank_comms(f, set(comp[f.rank])) for f in files], unknown_group=unknown_group)
    else:
        match = JobMatch([], [], [])
    for x in match.left_out:
        comp[x.rank][x.comm.pos] = x.reason
    _name_told_groups(files, match)
    report.notes.extend(match.notes)
    report.notes.extend(_left_out_notes(match))
    names = _numeric_names(files)
    size_at, chains, used_groups = _count_instances(match, ranks, report)
    split_at = _all_reduces_to_split(match, report)
    for f in files:
        _rewrite_rank(f, comp[f.rank], size_at, sorted(chains[f.rank]), split_at, names, report)
    _add_groups(files, used_groups, names, report)
    return match, report


def _unsimulated(files: Sequence[EtFile]) -> dict[int, dict[int, str]]:
    """2. Per rank, the collectives the simulator does not run: position -> why (written as COMP nodes)."""
    comp: dict[int, dict[int, str]] = {f.rank: {} for f in files}
    for f in files:
        for pos, n in enumerate(f.nodes):
            if n.type == pb.COMM_COLL_NODE:
                ct = next((pb.attr_value(a) for a in n.attr if a.name == wire.ATTR_COMM_TYPE), None)
                if ct in UNSIMULATED_COMM_TYPES:
                    comp[f.rank][pos] = f"the simulator does not run {COLLECTIVE_NAMES[ct]}"
    return comp


#: what a collective the simulator does not run is written as when every rank of the job is there: the
#: collective it runs that moves the same data among the same ranks (a barrier: an all_reduce of its size)
STAND_INS = {pb.REDUCE: pb.ALL_REDUCE, pb.GATHER: pb.ALL_GATHER, pb.SCATTER: pb.REDUCE_SCATTER,
             pb.BARRIER: pb.ALL_REDUCE, pb.REDUCE_SCATTER_BLOCK: pb.REDUCE_SCATTER}


def _stand_ins(files: Sequence[EtFile], report: AstrasimReport) -> None:
    """2. The collectives the simulator does not run, on every rank of a whole job: retyped as the one it
    runs of :data:`STAND_INS` (``orig_comm_type`` keeps what it was), so that they are matched and their
    ranks wait for each other.  As COMP nodes of their recorded duration a rank that arrived early waited
    for its peers twice, once replayed and once recorded: a real 6-rank gloo job (reduce, gather, scatter
    with non-zero roots, then a barrier, per step) came out +10.6% to +11.9% on every rank."""
    count: dict[int, int] = {}
    for f in files:
        for n in f.nodes:
            if n.type != pb.COMM_COLL_NODE:
                continue
            ct = next((pb.attr_value(a) for a in n.attr if a.name == wire.ATTR_COMM_TYPE), None)
            if not isinstance(ct, int) or ct not in STAND_INS:
                continue
            _set_attr(n, wire.ATTR_COMM_TYPE, int64_val=STAND_INS[ct])
            if not any(a.name == wire.ATTR_ORIG_COMM_TYPE for a in n.attr):
                n.attr.append(pb.AttributeProto(name=wire.ATTR_ORIG_COMM_TYPE, int64_val=ct))
            count[ct] = count.get(ct, 0) + 1
    if count:
        listed = ", ".join(f"{k} {COLLECTIVE_NAMES[ct]} as {COLLECTIVE_NAMES[STAND_INS[ct]]}"
                           for ct, k in sorted(count.items()))
        report.notes.append(f"collectives the simulator does not run, written as one it runs over the same "
                            f"ranks (orig_comm_type keeps what each was): {listed} (nodes of all ranks)")


def _name_told_groups(files: Sequence[EtFile], match: JobMatch) -> None:
    """3. The process group the matcher told a collective that names none (a gloo record's, by its worker
    thread: :mod:`chakra.job.unnamed`) is written on its node, so that the simulator matches it there."""
    by_rank = {f.rank: f for f in files}
    for inst in match.instances:
        if inst.kind != pb.COMM_COLL_NODE or world_pg(inst.pg):
            continue
        for r, c in inst.members.items():
            node = by_rank[r].nodes[c.pos]
            if not any(a.name == wire.ATTR_PG_NAME and a.string_val for a in node.attr):
                _set_attr(node, wire.ATTR_PG_NAME, string_val=inst.pg)


def _count_instances(match: JobMatch, ranks: Sequence[int], report: AstrasimReport
                     ) -> tuple[dict[tuple[int, int], int], dict[int, list[int]], set[str]]:
    """The matched instances counted into ``report``; ``(size of each member, (rank, position) -> bytes;
    each rank's member positions; the process groups other than the world that run collectives)``."""
    size_at: dict[tuple[int, int], int] = {}
    chains: dict[int, list[int]] = {r: [] for r in ranks}
    used_groups: set[str] = set()
    for inst in match.instances:
        if inst.kind == pb.COMM_COLL_NODE:
            report.collectives += 1
            if not world_pg(inst.pg):
                used_groups.add(inst.pg)
        else:
            report.p2p += 1
        if len(set(inst.sizes.values())) > 1:
            report.sizes_unified += 1
        for r, c in inst.members.items():
            size_at[(r, c.pos)] = inst.size
            chains[r].append(c.pos)
    return size_at, chains, used_groups


def _all_reduces_to_split(match: JobMatch, report: AstrasimReport) -> dict[tuple[int, int], int]:
    """``(rank, position) -> group size`` of the all-reduces written as reduce-scatter + all-gather
    (:func:`double_free_split`), with the notes on them and on the conflicts left."""
    split, conflicts = double_free_split(match.instances)
    split_at: dict[tuple[int, int], int] = {}
    for inst in match.instances:
        if inst.pg in split and inst.comm_type == pb.ALL_REDUCE:
            for r, c in inst.members.items():
                split_at[(r, c.pos)] = len(inst.members)
    if split:
        report.notes.append(f"all-reduces of process group(s) {sorted(split)} written as reduce-scatter "
                            "+ all-gather: this ASTRA-sim build frees memory twice at exit (and may abort) "
                            "when a rank runs one collective type in two groups smaller than the world; the "
                            "two forms take the same simulated time")
    for r, ctype, pgs in conflicts:
        report.notes.append(f"rank {r} still runs {COLLECTIVE_NAMES.get(ctype, ctype)} in process groups "
                            f"{sorted(pgs)}: this ASTRA-sim build may abort at exit (double free)")
    return split_at


def _rewrite_rank(f: EtFile, comp: dict[int, str], size_at: dict[tuple[int, int], int], chain: list[int],
                  split_at: dict[tuple[int, int], int], names: dict[str, str], report: AstrasimReport
                  ) -> None:
    """One rank's nodes as the simulator reads them: the unsimulated collectives as COMP nodes, the
    communication nodes' attributes set, the rank's own issue order (``chain``, which match_job checked
    the job agrees with) as dependencies, all-reduces split, no METADATA node, in dependency order."""
    nodes = f.nodes
    report.as_comp[f.rank] = len(comp)
    for pos, why in comp.items():
        _to_comp(nodes[pos], why)
    for pos, n in enumerate(nodes):
        if n.type not in COMM_NODE_TYPES:
            continue
        _set_attr(n, wire.ATTR_IS_CPU_OP, bool_val=False)
        size = size_at.get((f.rank, pos))
        if size is not None:
            _set_attr(n, wire.ATTR_COMM_SIZE, int64_val=size)
        pg = next((a.string_val for a in n.attr if a.name == wire.ATTR_PG_NAME), None)
        if pg is not None and names.get(pg, pg) != pg:
            _set_attr(n, wire.ATTR_PG_NAME, string_val=names[pg])
    for a, b in zip(chain, chain[1:]):
        prev = nodes[a].id
        if prev not in nodes[b].data_deps and prev not in nodes[b].ctrl_deps:
            nodes[b].data_deps.append(prev)
    halves = {pos: n for (r, pos), n in split_at.items() if r == f.rank}
    if halves:
        nodes = f.nodes = _split_all_reduces(nodes, halves)
    f.nodes = _topological(_without_metadata(nodes, report), f.path)
    if not f.nodes:   # the simulator aborts on a rank with nothing to do ("no dependency free nodes")
        f.nodes = [_idle_node(0)]
        report.notes.append(f"rank {f.rank}: no nodes; wrote one 0-µs COMP node (an idle NPU)")


def _without_metadata(nodes: list[pb.Node], report: AstrasimReport) -> list[pb.Node]:
    """1. The METADATA nodes out, and every dependency on them."""
    meta_ids = {n.id for n in nodes if n.type == pb.METADATA_NODE}
    if not meta_ids:
        return nodes
    report.metadata_dropped += len(meta_ids)
    nodes = [n for n in nodes if n.id not in meta_ids]
    for n in nodes:
        for deps in (n.ctrl_deps, n.data_deps):
            if any(d in meta_ids for d in deps):
                kept = [d for d in deps if d not in meta_ids]
                del deps[:]
                deps.extend(kept)
    return nodes


def _add_groups(files: Sequence[EtFile], used_groups: set[str], names: dict[str, str],
                report: AstrasimReport) -> None:
    """The process groups the collectives run in (``used_groups``; for one rank on its own, every group its
    collectives name), with their members (the job's ranks for a group that lists none), into ``report``."""
    everyone = sorted(f.rank for f in files)
    if not report.cross_rank:   # every group the rank's collectives name
        for f in files:
            for n in f.nodes:
                if n.type == pb.COMM_COLL_NODE:
                    pg = next((a.string_val for a in n.attr if a.name == wire.ATTR_PG_NAME), "")
                    if not world_pg(pg):
                        used_groups.add(next((k for k, v in names.items() if v == pg), pg))
        everyone = sorted(set(everyone) | set(range(max((f.world_size or 0) for f in files))))
    for f in files:
        for pg, members in f.groups.items():
            if pg in used_groups:
                report.groups.setdefault(names.get(pg, pg), sorted(members) if members else everyone)


def double_free_split(instances: Sequence[Instance]) -> tuple[set[str], list[tuple[int, int, set[str]]]]:
    """Which groups' all-reduces to write as reduce-scatter + all-gather, and the conflicts left.

    This ASTRA-sim build frees a shared object twice at exit, and then may abort (exit 134, sometimes
    before the ranks' "finished" lines), when a rank runs one collective type in two process groups
    smaller than the world (valgrind: "Invalid free").  A ring all-reduce of S bytes over n ranks takes
    the time of a reduce-scatter of S and an all-gather of S/n in that simulator, so the groups with the
    most all-reduces keep them and a group whose ranks already keep all-reduces in another group has its
    all-reduces split.  Returns (groups to split, [(rank, type, groups)] still in two groups after it).
    """
    use: dict[int, dict[int, set[str]]] = {}
    count: dict[str, int] = {}
    members: dict[str, set[int]] = {}
    for inst in instances:
        if inst.kind != pb.COMM_COLL_NODE or world_pg(inst.pg) or inst.comm_type is None:
            continue
        members.setdefault(inst.pg, set()).update(inst.members)
        for r in inst.members:
            use.setdefault(r, {}).setdefault(inst.comm_type, set()).add(inst.pg)
        if inst.comm_type == pb.ALL_REDUCE:
            count[inst.pg] = count.get(inst.pg, 0) + 1
    split: set[str] = set()
    if any(len(use[r].get(pb.ALL_REDUCE, ())) > 1 for r in use):
        kept: dict[int, str] = {}
        for g in sorted(count, key=lambda g: (-count[g], g)):
            if any(r in kept for r in members[g]):
                split.add(g)
            else:
                kept.update((r, g) for r in members[g])
    conflicts: list[tuple[int, int, set[str]]] = []
    for r in sorted(use):
        after: dict[int, set[str]] = {}
        for ctype, pgs in use[r].items():
            for g in pgs:
                for t in ((pb.REDUCE_SCATTER, pb.ALL_GATHER) if ctype == pb.ALL_REDUCE and g in split
                          else (ctype,)):
                    after.setdefault(t, set()).add(g)
        conflicts.extend((r, t, pgs) for t, pgs in sorted(after.items()) if len(pgs) > 1)
    return split, conflicts


_HALF_NOTE = "second half of an all-reduce written as reduce-scatter + all-gather (double-free workaround)"


def _split_all_reduces(nodes: list[pb.Node], halves: dict[int, int]) -> list[pb.Node]:
    """The all-reduce at each position of ``halves`` (-> its group's size n) becomes a reduce-scatter of
    its S bytes (same id) and an all-gather of ceil(S/n) (a new id) that what followed it now waits for."""
    next_id = max(n.id for n in nodes) + 1
    renamed: dict[int, int] = {}
    added: list[pb.Node] = []
    for pos, n in sorted(halves.items()):
        x = nodes[pos]
        size = next((a.int64_val for a in x.attr if a.name == wire.ATTR_COMM_SIZE), 0)
        pg = next((a.string_val for a in x.attr if a.name == wire.ATTR_PG_NAME), "")
        _set_attr(x, wire.ATTR_COMM_TYPE, int64_val=pb.REDUCE_SCATTER)
        x.attr.append(pb.AttributeProto(name=wire.ATTR_ORIG_COMM_TYPE, int64_val=pb.ALL_REDUCE))
        x.attr.append(pb.AttributeProto(name=wire.ATTR_ORIG_COMM_SIZE, int64_val=size))
        # the measured duration goes with the all-gather: the reduce-scatter's transfer starts when every
        # member has arrived and takes no more than the network's time, so the all-gather starts on all of
        # them at once and each rank ends the pair when it ended its all-reduce.  (Left with the
        # reduce-scatter, each rank's own time came before a second meeting, and every member waited for
        # the slowest: +28..+73% on a job of overlapping all-reduces.)
        half = pb.Node(id=next_id, name=f"{x.name} [all-gather half]", type=pb.COMM_COLL_NODE,
                       start_time_micros=x.start_time_micros, duration_micros=x.duration_micros)
        x.duration_micros = 0
        half.attr.extend([pb.AttributeProto(name=wire.ATTR_IS_CPU_OP, bool_val=False),
                          pb.AttributeProto(name=wire.ATTR_COMM_TYPE, int64_val=pb.ALL_GATHER),
                          pb.AttributeProto(name=wire.ATTR_COMM_SIZE, int64_val=-(-size // max(1, n))),
                          pb.AttributeProto(name=wire.ATTR_PG_NAME, string_val=pg),
                          pb.AttributeProto(name=wire.ATTR_COMM_PRIORITY, int32_val=0),
                          pb.AttributeProto(name=wire.ATTR_ORIG_COMM_TYPE, int64_val=pb.ALL_REDUCE),
                          pb.AttributeProto(name=wire.ATTR_ORIG_COMM_SIZE, int64_val=size),
                          pb.AttributeProto(name=wire.ATTR_ASTRASIM_NOTE, string_val=_HALF_NOTE)])
        # the half runs where its all-reduce ran (a gloo record's worker thread), not on a lane of its own
        half.attr.extend(pb.AttributeProto(name=a.name, int64_val=a.int64_val) for a in x.attr
                         if a.name == wire.ATTR_TID and a.WhichOneof("value") == "int64_val")
        half.data_deps.append(x.id)
        renamed[x.id] = next_id
        added.append(half)
        next_id += 1
    for n in nodes:
        for deps in (n.ctrl_deps, n.data_deps):
            if any(d in renamed for d in deps):
                new = [renamed.get(d, d) for d in deps]
                del deps[:]
                deps.extend(new)
    return nodes + added


def _idle_node(node_id: int) -> pb.Node:
    n = pb.Node(id=node_id, name="idle", type=pb.COMP_NODE, duration_micros=0)
    n.attr.append(pb.AttributeProto(name=wire.ATTR_IS_CPU_OP, bool_val=False))
    n.attr.append(pb.AttributeProto(name=wire.ATTR_ASTRASIM_NOTE, string_val="an idle NPU"))
    return n


def pad_single_rank(files: list[EtFile], report: AstrasimReport) -> None:
    """ASTRA-sim's analytical network refuses one NPU ("npus_count (1) should be larger than 1"): a
    one-rank job gets a second, idle NPU (one 0-µs node), so that ``run.sh PREFIX 2`` runs it."""
    if len(files) != 1:
        return
    only = files[0]
    idle = 1 if only.rank == 0 else 0
    meta = pb.GlobalMetadata(version=only.meta.version or "0.0.4")
    files.append(EtFile(path=f"(idle rank {idle})", meta=meta, nodes=[_idle_node(0)], rank=idle))
    report.ranks = sorted(f.rank for f in files)
    report.notes.append(f"a one-rank job: the simulator's network needs at least 2 NPUs, so rank {idle} is "
                        "an idle NPU (one 0-µs node); run it with 2 NPUs")


def _left_out_notes(match: JobMatch) -> list[str]:
    out = []
    for r, xs in sorted(match.left_out_by_rank().items()):
        first = xs[0]
        more = f" (and {len(xs) - 1} more)" if len(xs) > 1 else ""
        out.append(f"rank {r}: {first.comm.describe()} has no counterpart: {first.reason}{more}")
    return out


def write_job(files: Sequence[EtFile], prefix: str | os.PathLike[str], report: AstrasimReport,
              comm_group_path: str | os.PathLike[str] | None = None) -> AstrasimReport:
    """Write ``PREFIX.<rank>.et`` for every rank and, when a group other than the world is used,
    ``comm_group.json`` beside them (or at ``comm_group_path``); nothing is left behind on failure."""
    written: list[Path] = []
    groups = report.groups
    try:
        for f in sorted(files, key=lambda f: f.rank):
            out = Path(f"{os.fspath(prefix)}.{f.rank}.et")
            write_messages(out, [f.meta, *f.nodes])
            written.append(out)
        cg: Path | None = None
        if groups:
            cg = (Path(comm_group_path) if comm_group_path
                  else Path(os.fspath(prefix)).parent / COMM_GROUP_JSON)
            with atomic_output(cg) as fh:
                fh.write(json.dumps(groups, indent=1, sort_keys=True).encode() + b"\n")
            written.append(cg)
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    report.outputs = [p for p in written if p.suffix == ".et"]
    report.comm_group = cg
    return report


def convert_for_astrasim(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str], *,
                         comm_group_path: str | os.PathLike[str] | None = None
                         ) -> tuple[ConvertReport, AstrasimReport]:
    """``chakra_converter --astrasim``: convert one rank, then the per-rank part of the target (no
    METADATA node, runnable collectives only, ``comm_group.json`` beside it).  One rank alone cannot be
    checked against its peers: ``chakra pipeline --astrasim`` (or :func:`astrasim_job` over every rank's
    file) does the cross-rank part."""
    from chakra.convert import convert_file

    report = convert_file(input_path, output_path, astrasim_safe=True)
    out = Path(output_path)
    idle = out.with_name(out.name[:-len(".0.et")] + ".1.et") if out.name.endswith(".0.et") else None
    try:
        f = read_et(out, 0)
        _, target = prepare_job([f], cross_rank=False)
        cg = Path(comm_group_path) if comm_group_path else out.parent / COMM_GROUP_JSON
        if target.groups:
            with atomic_output(cg) as fh:
                fh.write(json.dumps(target.groups, indent=1, sort_keys=True).encode() + b"\n")
            target.comm_group = cg
        write_messages(out, [f.meta, *f.nodes])
        target.outputs = [out]
        if idle is not None and (f.world_size or 1) == 1:   # one rank in all: an idle NPU beside it
            files = [f]
            pad_single_rank(files, target)
            write_messages(idle, [files[1].meta, *files[1].nodes])
            target.outputs.append(idle)
    except BaseException:
        out.unlink(missing_ok=True)
        if idle is not None:
            idle.unlink(missing_ok=True)
        raise
    return report, target


def astrasim_job(inputs: Sequence[str | os.PathLike[str]], prefix: str | os.PathLike[str], *,
                 unknown_group: UnknownGroup = "error", comm_groups: dict[str, tuple[int, ...]] | None = None,
                 comm_group_path: str | os.PathLike[str] | None = None) -> AstrasimReport:
    """Read every rank's ``.et`` (``inputs`` in rank order unless their metadata says otherwise), make the
    set runnable (module doc) and write it as ``PREFIX.<rank>.et`` (+ ``comm_group.json``)."""
    files = [read_et(p, pos) for pos, p in enumerate(inputs)]
    if comm_groups is not None:
        for f in files:
            f.groups = dict(comm_groups)
    _, report = prepare_job(files, unknown_group=unknown_group)
    pad_single_rank(files, report)
    write_job(files, prefix, report, comm_group_path)
    for line in report.lines():
        log.info("%s", line)
    return report
