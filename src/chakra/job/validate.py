"""``chakra validate``: the simulator's contract, checked before a user spends hours on a run.

What ASTRA-sim (with Chakra's feeder) needs of a job's ``.et`` files, whoever wrote
them (see docs/formats.md, "What consumers read", and ``../shared/astra-sim/README.md``):

per file
  * it decodes (GlobalMetadata, then Node messages) and holds at least one node;
  * node ids are unique; every ``ctrl_deps``/``data_deps`` id is a node of the file
    (a missing one aborts the simulator); the dependencies are acyclic (a cycle hangs
    it silently);
  * the attributes consumers read have the one field they read (``is_cpu_op``
    bool_val, ``comm_type``/``comm_size`` int64_val, ``comm_src/dst/tag`` int32_val,
    ``pg_name`` string_val, ...; any other field reads as 0);
  * no METADATA node (this build aborts on it: process groups go in a comm-group JSON);
  * comm nodes: ``is_cpu_op`` false; collectives of a type it runs (ALL_REDUCE,
    ALL_TO_ALL, ALL_GATHER, REDUCE_SCATTER, BROADCAST) with a ``comm_size``;
    ``pg_name`` numeric (or empty = the world) and a known group that holds the rank;
    send/recv with ``comm_src``, ``comm_dst``, ``comm_tag``, ``comm_size``, the rank
    itself on its side;

across the ranks of the job
  * every rank of a group issues the same collectives (type, size) in the same order;
  * every send has its receive (same channel, same size, in order);
  * the ranks' issue orders do not contradict each other across groups (a wait that
    never ends).

Problems are listed precisely (rank, group, position, the two differing collectives);
what is fine gets a one-line summary.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from chakra import formats as wire
from chakra import schema as pb
from chakra.convert.attrs import FIXED_FIELDS
from chakra.convert.graph import CycleError, topological_order
from chakra.errors import MISSING_RANKS_OPTION, ChakraError, UsageError
from chakra.io.naming import rank_from_filename
from chakra.io.ranks import RankClaim, group_claims, missing_ranks, missing_text
from chakra.job.etfile import COMM_NODE_TYPES, EtFile, comm_of, node_attrs, read_comm_groups, read_et
from chakra.job.match import (
    Comm,
    Instance,
    JobMatchError,
    RankComms,
    _global_order,
    world_pg,
)
from chakra.schema import COLLECTIVE_NAMES, COMM_COLL_NODE, COMM_SEND_NODE

#: attribute -> the one oneof field the simulator's reader takes it from
READ_FIELDS: dict[str, str] = {k: FIXED_FIELDS[k] for k in (
    wire.ATTR_IS_CPU_OP, wire.ATTR_NUM_OPS, wire.ATTR_TENSOR_SIZE, wire.ATTR_COMM_TYPE,
    wire.ATTR_COMM_PRIORITY, wire.ATTR_COMM_SIZE, wire.ATTR_COMM_SRC, wire.ATTR_COMM_DST, wire.ATTR_COMM_TAG,
    wire.ATTR_PG_NAME)}
RUNNABLE = frozenset({pb.ALL_REDUCE, pb.ALL_TO_ALL, pb.ALL_GATHER, pb.REDUCE_SCATTER, pb.BROADCAST})


@dataclass(slots=True)
class Problem:
    rank: int | None
    text: str

    def __str__(self) -> str:
        return self.text if self.rank is None else f"rank {self.rank}: {self.text}"


@dataclass(slots=True)
class Validation:
    ranks: list[int]
    nodes: int = 0
    collectives: int = 0          # per rank, summed
    groups: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # worth knowing, not against the contract

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (f"ok: {len(self.ranks)} rank(s), {self.nodes:,} nodes, {self.collectives:,} comm node(s) in "
                f"{self.groups} group(s): the files meet what ASTRA-sim reads")


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Files as given; an argument that is no file but a prefix ``P`` with ``P.0.et`` stands for
    ``P.0.et .. P.(n-1).et``."""
    out: list[str] = []
    for arg in inputs:
        if os.path.isfile(arg) or not os.path.isfile(f"{arg}.0.et"):
            out.append(arg)
            continue
        k = 0
        while os.path.isfile(f"{arg}.{k}.et"):
            out.append(f"{arg}.{k}.et")
            k += 1
    return out


def _file_checks(f: EtFile, groups: dict[str, tuple[int, ...]], world: tuple[int, ...],
                 out: list[Problem]) -> list[Comm]:
    r = f.rank

    def bad(text: str) -> None:
        out.append(Problem(r, text))

    nodes = f.nodes
    if not nodes:
        bad("no nodes: the simulator aborts (\"no dependency free nodes\")")
        return []
    index: dict[int, int] = {}
    for k, n in enumerate(nodes):
        if n.id in index:
            bad(f"node id {n.id} appears twice (positions {index[n.id]} and {k})")
        index.setdefault(n.id, k)
    missing = 0
    for n in nodes:
        for kind, deps in (("ctrl_deps", n.ctrl_deps), ("data_deps", n.data_deps)):
            for d in deps:
                if d not in index:
                    missing += 1
                    if missing <= 3:
                        bad(f"node {n.id} {kind} names node {d}, which is not in the file (the simulator "
                            "aborts)")
                elif d == n.id:
                    bad(f"node {n.id} depends on itself")
    if missing > 3:
        bad(f"... {missing - 3} more dependencies on missing nodes")
    cyc, order = _cycle(nodes, index)
    if cyc:
        bad("dependency cycle (the simulator waits forever): " + " -> ".join(str(x) for x in cyc[:12])
            + (" ..." if len(cyc) > 12 else ""))
    comms: list[Comm] = []
    wrong_type = 0
    for pos, n in enumerate(nodes):
        if n.type == pb.METADATA_NODE:
            bad(f"node {n.id} is a METADATA node: this simulator aborts on it (Statistics.cc "
                "get_operator_type); convert with --astrasim, which moves the process groups to "
                "comm_group.json")
            continue
        for a in n.attr:
            want = READ_FIELDS.get(a.name)
            got = a.WhichOneof("value")
            if want is not None and got != want:
                wrong_type += 1
                if wrong_type <= 3:
                    bad(f"node {n.id} attribute {a.name!r} is a {got}; the simulator reads {want} (else 0)")
        if n.type not in COMM_NODE_TYPES:
            continue
        a = node_attrs(n)
        if a.get(wire.ATTR_IS_CPU_OP) is True:
            bad(f"comm node {n.id} ({n.name!r}) has is_cpu_op true: the simulator rejects it")
        if not isinstance(a.get(wire.ATTR_COMM_SIZE), int):
            bad(f"comm node {n.id} ({n.name!r}) has no comm_size")
        pg = str(a.get(wire.ATTR_PG_NAME) or "")
        if n.type == pb.COMM_COLL_NODE:
            ct = a.get(wire.ATTR_COMM_TYPE)
            if not isinstance(ct, int):
                bad(f"collective node {n.id} ({n.name!r}) has no comm_type")
            elif ct not in RUNNABLE:
                bad(f"collective node {n.id} ({n.name!r}) is a {COLLECTIVE_NAMES.get(ct, ct)}: the simulator "
                    "does not run it (convert with --astrasim to write it as a COMP node)")
            if pg and not pg.isdigit():
                bad(f"collective node {n.id} has pg_name {pg!r}: the simulator reads numeric group ids")
            elif not world_pg(pg):
                if pg not in groups:
                    bad(f"collective node {n.id} uses process group {pg!r}, which no process-group table "
                        f"lists (known: {sorted(groups) or 'none'}; give --comm-group FILE)")
                elif r not in (groups[pg] or world):
                    bad(f"collective node {n.id} uses process group {pg!r} whose ranks {list(groups[pg])} do "
                        f"not include rank {r}")
        else:
            for key in (wire.ATTR_COMM_SRC, wire.ATTR_COMM_DST, wire.ATTR_COMM_TAG):
                if not isinstance(a.get(key), int):
                    bad(f"{'send' if n.type == pb.COMM_SEND_NODE else 'recv'} node {n.id} has no {key}")
            own = a.get(wire.ATTR_COMM_SRC if n.type == pb.COMM_SEND_NODE else wire.ATTR_COMM_DST)
            if isinstance(own, int) and own != r:
                side = "send" if n.type == pb.COMM_SEND_NODE else "recv"
                bad(f"{side} node {n.id} names rank {own} as its own side, in the file of rank {r}")
        if wire.ATTR_TIMING_PIECE not in a:   # (a piece of time an experiment wrote as a timed BROADCAST)
            comms.append(comm_of(n, pos, f.measured_start_us, a))
    if wrong_type > 3:
        bad(f"... {wrong_type - 3} more attributes of the wrong type")
    if order is not None and comms:
        # the order the simulator issues them: dependencies first (the file's order where it is one; a
        # writer may list a collective before the one it waits for)
        place = {p: k for k, p in enumerate(order)}
        comms.sort(key=lambda c: place[c.pos])
    return comms


def _cycle(nodes: list, index: dict[int, int]) -> tuple[list[int], list[int] | None]:
    """The ids of one dependency cycle, or [] and the positions of the nodes in a topological order that
    keeps the file's order where it is one (dependencies on missing nodes are reported apart)."""
    deps = [[d for d in {*x.ctrl_deps, *x.data_deps} if d in index] for x in nodes]
    try:
        return [], topological_order([x.id for x in nodes], deps)
    except CycleError as exc:
        return [*exc.cycle, exc.cycle[0]], None


def _job_checks(ranks: list[RankComms], groups: dict[str, tuple[int, ...]], out: list[Problem],
                subset: bool = False) -> int:
    """Cross-rank checks; returns the number of groups seen.  ``subset``: the ranks are some of the job's
    (``--allow-missing-ranks``): a group's members outside them are left out of its checks."""
    before = len(out)
    everyone = tuple(sorted(rc.rank for rc in ranks))
    job = set(everyone)
    by_group: dict[str, dict[int, list[Comm]]] = {}
    channels: dict[tuple[int, int, int], dict[str, list[Comm]]] = {}
    for rc in ranks:
        for c in rc.comms:
            if c.kind == COMM_COLL_NODE:
                pg = "" if world_pg(c.pg) else c.pg
                members = (groups.get(pg) or everyone) if pg else everyone
                if pg and pg not in groups:
                    continue   # reported per file
                d = by_group.setdefault(pg, {x: [] for x in members if not subset or x in job})
                d.setdefault(rc.rank, []).append(c)
            elif c.peer is not None:
                src, dst = (rc.rank, c.peer) if c.kind == COMM_SEND_NODE else (c.peer, rc.rank)
                ch = channels.setdefault((src, dst, c.tag), {"send": [], "recv": []})
                ch["send" if c.kind == COMM_SEND_NODE else "recv"].append(c)
    instances: list[Instance] = []
    for pg, seqs in sorted(by_group.items()):
        label = "'world'" if not pg else repr(pg)
        absent = [x for x in seqs if x not in job]
        if absent:
            out.append(Problem(None, f"process group {label}: rank(s) {absent} are members, not in the job"))
            continue
        in_group = sorted(seqs)
        ref = in_group[0]
        counts = {x: len(seqs[x]) for x in in_group}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{k} on rank {x}" for x, k in counts.items())
            out.append(Problem(None, f"process group {label}: the ranks issue different numbers of "
                                     f"collectives: {listed}"))
        differ = 0
        for k in range(max(counts.values())):
            row = {x: (seqs[x][k] if k < len(seqs[x]) else None) for x in in_group}
            first = row[ref]
            odd = next((x for x in in_group[1:] if first is None or row[x] is None
                        or first.comm_type != row[x].comm_type or first.size != row[x].size), None)  # type: ignore[union-attr]
            if odd is None:
                instances.append(Instance(label=f"collective #{k} of process group {label}", pg=pg,
                                          kind=COMM_COLL_NODE, comm_type=first.comm_type,  # type: ignore[union-attr]
                                          members=dict(row)))  # type: ignore[arg-type]
                continue
            differ += 1
            if differ <= 3:
                a = "nothing" if first is None else first.describe()
                b = "nothing" if row[odd] is None else row[odd].describe()  # type: ignore[union-attr]
                out.append(Problem(None, f"process group {label}, collective #{k}: rank {ref} issues {a}, "
                                         f"rank {odd} issues {b} (the simulator matches collectives by "
                                         "order, type and size: it stalls)"))
        if differ > 3:
            out.append(Problem(None, f"process group {label}: ... {differ - 3} more differing position(s)"))
    for (src, dst, tag), sides in sorted(channels.items()):
        sends, recvs = sides["send"], sides["recv"]
        what = f"send/recv {src}->{dst} tag {tag}"
        if dst not in job or src not in job:
            out.append(Problem(None, f"{what}: rank {dst if dst not in job else src} is not in the job"))
            continue
        for k in range(max(len(sends), len(recvs))):
            s = sends[k] if k < len(sends) else None
            v = recvs[k] if k < len(recvs) else None
            if s is None or v is None or s.size != v.size:
                a = "no send" if s is None else s.describe()
                b = "no recv" if v is None else v.describe()
                out.append(Problem(None, f"{what} #{k}: rank {src} has {a}, rank {dst} has {b}"))
                break
            instances.append(Instance(label=f"{what} #{k}", pg="", kind=COMM_SEND_NODE, comm_type=None,
                                      members={src: s, dst: v}))
    types: dict[tuple[int, int], set[str]] = {}   # (rank, type) -> groups smaller than the world
    for pg, seqs in by_group.items():
        if pg and len(seqs) < len(everyone):
            for r, cs in seqs.items():
                for c in cs:
                    if c.comm_type is not None:
                        types.setdefault((r, c.comm_type), set()).add(pg)
    for (r, ctype), pgs in sorted(types.items()):
        if len(pgs) > 1:
            what = COLLECTIVE_NAMES.get(ctype, str(ctype))
            text = (f"runs {what} in process groups {sorted(pgs)}, both smaller than the world: this "
                    "ASTRA-sim build frees memory twice at exit and may abort (exit 134); --astrasim "
                    "rewrites all-reduces to avoid it")
            out.append(Problem(r, text))
    if len(out) == before:
        try:
            _global_order(ranks, instances)
        except JobMatchError as exc:
            out.append(Problem(None, exc.message))
    return len(by_group)


def job_claims(files: Sequence[EtFile], groups: dict[str, tuple[int, ...]], comm_group: str | None
               ) -> list[RankClaim]:
    """What the files (and a comm-group file) say of how many ranks the job has: the world size in their
    metadata, their process-group tables (GlobalMetadata or a METADATA node), the ``pg_size`` recorded on a
    collective of the world group."""
    out: list[RankClaim] = []
    for f in files:
        where = os.path.basename(f.path)
        if f.world_size:
            out.append(RankClaim(f.world_size, f"world_size {f.world_size} in the metadata of {where}"))
        out += group_claims(((pg, m, None) for pg, m in f.groups.items()), where)
        pg_size = wire.ATTR_PG_SIZE
        sizes = [a[pg_size] for n in f.nodes if n.type == pb.COMM_COLL_NODE
                 for a in [node_attrs(n)] if type(a.get(pg_size)) is int and a[pg_size] > 0
                 and world_pg(str(a.get(wire.ATTR_PG_NAME) or ""))]
        if sizes:
            out.append(RankClaim(max(sizes), f"a world collective of {where} records pg_size {max(sizes)}"))
    if comm_group is not None:
        out += group_claims(((pg, m, None) for pg, m in groups.items()), os.path.basename(comm_group))
    return out


def validate(inputs: Sequence[str | os.PathLike[str]], *, comm_group: str | os.PathLike[str] | None = None,
             network: str | os.PathLike[str] | None = None, allow_missing_ranks: bool = False) -> Validation:
    """Check a job's (or one rank's) files; decoding errors raise, contract problems are returned.
    ``network``: the ASTRA-sim network file the job is to run with (its NPUs must be the job's ranks).

    A job of which the files say it has more ranks than were given (:func:`job_claims`) is a problem naming
    the missing ranks (the simulator waits forever for them), or with ``allow_missing_ranks`` a note, and the
    ranks given are checked among themselves."""
    if not inputs:
        raise UsageError("no files to validate")
    files: list[EtFile] = []
    for pos, p in enumerate(inputs):
        hint = rank_from_filename(p)
        files.append(read_et(p, hint if hint is not None else pos))
    seen: dict[int, str] = {}
    for f in files:
        if f.rank in seen:
            raise ChakraError(f"two files claim rank {f.rank}: {seen[f.rank]} and {f.path}")
        seen[f.rank] = f.path
    groups: dict[str, tuple[int, ...]] = {}
    if comm_group is not None:
        groups = read_comm_groups(comm_group)
    else:
        for f in files:
            for pg, m in f.groups.items():
                groups.setdefault(pg, m)
    ranks = sorted(seen)
    world = tuple(range(max(max(ranks) + 1, max((f.world_size or 0) for f in files))))
    res = Validation(ranks=ranks)
    lacking = missing_ranks(ranks, job_claims(files, groups, None if comm_group is None else str(comm_group)))
    if lacking is not None:
        text = missing_text(*lacking)
        if allow_missing_ranks:
            these = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
            res.notes.append(f"{text}: checked {these} alone ({MISSING_RANKS_OPTION})")
        else:
            res.problems.append(Problem(None, f"{text} (ASTRA-sim waits for them forever): give every rank's "
                                              f"file, or {MISSING_RANKS_OPTION} to check these alone"))
    comms: list[RankComms] = []
    for f in sorted(files, key=lambda f: f.rank):
        res.nodes += len(f.nodes)
        cs = _file_checks(f, groups, world, res.problems)
        res.collectives += len(cs)
        comms.append(RankComms(f.rank, cs, dict(f.groups), f.path))
    if len(files) == 1 and (files[0].world_size or 1) == 1:
        # not the file's fault, the network's: said, not counted as a problem
        res.notes.append("a one-rank job: ASTRA-sim's analytical network refuses one NPU (npus_count should "
                         "be larger than 1); run it with an idle second rank (chakra pipeline --astrasim and "
                         "chakra_converter --astrasim write one)")
    if network is not None:
        _network_checks(network, ranks, groups, res.problems)
    if len(files) > 1:
        res.groups = _job_checks(comms, {k: v for k, v in groups.items() if not world_pg(k)}, res.problems,
                                 allow_missing_ranks)
    else:
        res.groups = len({c.pg for rc in comms for c in rc.comms if c.kind == COMM_COLL_NODE})
    return res


def _network_checks(path: str | os.PathLike[str], ranks: list[int], groups: dict[str, tuple[int, ...]],
                    out: list[Problem]) -> None:
    """The network file against the job: its NPUs (the product of ``npus_count``) are the job's ranks (a
    one-rank job: 2, with its idle NPU), and every process group's ranks are among them."""
    from chakra.job.network import npus_of, read_network_yaml

    net = read_network_yaml(path)
    npus = npus_of(net)
    want = max(len(ranks), 2)
    if npus != want:
        out.append(Problem(None, f"{path}: the network has {npus} NPUs (npus_count {net['npus_count']}), "
                                 f"the job {want} ranks"))
    for key in ("topology", "bandwidth", "latency"):
        if len(net.get(key, [])) != len(net["npus_count"]):
            out.append(Problem(None, f"{path}: {key} has {len(net.get(key, []))} entries for "
                                     f"{len(net['npus_count'])} dimensions"))
    for pg, members in sorted(groups.items()):
        outside = sorted(set(members) - set(range(npus)))
        if outside:
            out.append(Problem(None, f"process group {pg!r} names rank(s) {outside}, which the network "
                                     f"({npus} NPUs) does not have"))


def validate_command(inputs: Sequence[str], *, comm_group: str | None = None, limit: int = 20,
                     stream: TextIO | None = None, network: str | None = None,
                     allow_missing_ranks: bool = False) -> int:
    import sys

    out = stream if stream is not None else sys.stdout
    res = validate(expand_inputs(inputs), comm_group=comm_group, network=network,
                   allow_missing_ranks=allow_missing_ranks)
    for note in res.notes:
        out.write(f"note: {note}\n")
    if res.ok:
        out.write(res.summary() + "\n")
        return 0
    for p in res.problems[:limit]:
        out.write(f"{p}\n")
    if len(res.problems) > limit:
        out.write(f"... and {len(res.problems) - limit} more problem(s)\n")
    out.write(f"not ok: {len(res.problems)} problem(s) in {len(res.ranks)} rank(s)\n")
    return 1


__all__ = ["Problem", "Validation", "expand_inputs", "validate", "validate_command"]
