"""``chakra extrapolate``: a measured job's ``.et`` files -> the files of a larger job of the same kind.

The larger job is more data-parallel replicas of the measured one (:mod:`chakra.job.replicas`): each new
rank is a copy of the measured rank it is modelled on (its compute, gaps and timing pieces unchanged),
with what depends on the job's size rewritten:

* the metadata: ``rank``, ``world_size`` and the process-group table (GlobalMetadata ``process_groups``
  or a METADATA node's), the world and data-parallel groups grown, the groups inside a replica copied for
  each new replica under new pg ids;
* collectives: ``pg_name`` (a group inside a replica: its copy in the rank's replica); over a grown group,
  ``pg_size`` and, when a network model is known (the experiment's ``network.yml``), ``duration_micros``
  moved by what the model adds for the larger group (ASTRA-sim times them by its network anyway; the
  replay reads the duration); ``comm_size`` is per rank and stays;
* send/recv: both ends moved into the rank's replica (a peer in another replica is refused).

Every other byte of a file is copied as it is, so the measured size gives the measured files back.  The
output is ``OUT.<rank>.et`` for every rank, ``OUT.comm_group.json`` (the groups other than the world, as
ASTRA-sim reads them), and, when the input had them, ``OUT.network.yml`` (``npus_count`` for the new size)
and ``OUT.system.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chakra import formats as wire
from chakra import schema as pb
from chakra.errors import TraceFormatError, UsageError
from chakra.io import atomic_output, read_bytes
from chakra.io.atomic import check_output_path
from chakra.io.pbstream import encode_varint, iter_frames
from chakra.job.etfile import groups_from_metadata_node, is_timing_piece, metadata_info, read_comm_groups
from chakra.job.network import NETWORK_KINDS, SYSTEM_JSON, Network, read_network_yaml, system_config
from chakra.job.replicas import Grown, Hints, Layout, find_layout, grow

COMM_TYPES = (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)
NETWORK_YML = "network.yml"


@dataclass(slots=True)
class _Source:
    """One measured rank: its frames, metadata, process-group table and the nodes a copy may rewrite."""

    path: str
    frames: list[bytes]
    meta: Any
    table: list[dict[str, Any]] | None = None       # the raw process-group table, when the file has one
    nodes: dict[int, Any] = field(default_factory=dict)   # frame index -> parsed node (comm, METADATA)


@dataclass(slots=True)
class Extrapolation:
    """What was written, and the layout it followed."""

    measured: int
    ranks: int
    layout: Layout
    grown: Grown
    outputs: list[Path] = field(default_factory=list)
    comm_group: Path | None = None
    network: Path | None = None
    system: Path | None = None
    network_text: str = ""
    groups_from: str = ""
    retimed: int = 0                                  # collectives whose duration the network re-timed
    notes: list[str] = field(default_factory=list)

    def lines(self, prefix: str) -> list[str]:
        """What was done, in words (``chakra extrapolate`` prints them)."""
        lay, grown = self.layout, self.grown
        rule = f"r mod {self.measured}" if lay.outer == 1 else \
            f"(o, k mod {lay.d}, i) of rank r = (o, k, i)"
        out = [f"{self.measured} measured ranks -> {self.ranks}: {lay.describe()} "
               f"(groups: {self.groups_from})",
               f"  rank r is modelled on measured rank {rule}"]
        out += [f"  group {name!r}: {len(lay.groups[name])} -> {len(grown.groups[name])} ranks"
                for name in lay.world + lay.dp]
        if grown.new:
            out.append(f"  {len(grown.new)} new group(s) for the new replicas (pg {grown.new[0][0]} .. "
                       f"{grown.new[-1][0]}), copies of {len(lay.inside)} group(s) inside a replica")
        if self.network_text:
            out.append(f"  network: {self.network_text}; {self.retimed} collective(s) of the measured ranks "
                       "re-timed for their grown groups")
        out += [f"  note: {note}" for note in self.notes]
        out.append(f"wrote {prefix}.{{0..{self.ranks - 1}}}.et and {self.comm_group}")
        out.append(f"  run it: {self.run_line(prefix)}   (ASTRA-sim's launcher)")
        return out

    def run_line(self, prefix: str) -> str:
        extra = "".join(f" --{k} {p}" for k, p in (("comm-group", self.comm_group), ("network", self.network),
                                                    ("system", self.system)) if p is not None)
        return f"run.sh {prefix} {self.ranks}{extra}"


def input_files(prefix: str) -> list[str]:
    """``PREFIX.0.et .. PREFIX.(n-1).et`` (``PREFIX`` may also be given as its ``.0.et`` file)."""
    if prefix.endswith(".0.et") and os.path.isfile(prefix):
        prefix = prefix[: -len(".0.et")]
    out: list[str] = []
    while os.path.isfile(f"{prefix}.{len(out)}.et"):
        out.append(f"{prefix}.{len(out)}.et")
    if not out:
        raise UsageError(f"no {os.path.basename(prefix)}.0.et: give the prefix P of the job's files P.0.et, "
                         "P.1.et, ...", prefix)
    return out


def _table_of(meta: Any, nodes: dict[int, Any], path: str) -> list[dict[str, Any]] | None:
    info = metadata_info(meta)
    text = info.get(wire.META_PROCESS_GROUPS)
    if text not in (None, ""):
        try:
            table = json.loads(text)
        except ValueError as exc:
            raise TraceFormatError(f"GlobalMetadata process_groups is not valid JSON ({exc})", path) from None
        return _checked(table, path)
    for n in nodes.values():
        if n.type == pb.METADATA_NODE and n.inputs.values:
            parsed = groups_from_metadata_node(n.inputs.values, path)
            if parsed:
                return _checked(parsed, path)
    return None


def _checked(table: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(table, list) or not all(isinstance(pg, dict) and wire.GROUP_NAME in pg for pg in table):
        raise TraceFormatError("the process-group table is not a list of groups with a pg_name", path)
    for pg in table:
        try:
            [int(r) for r in (pg.get(wire.GROUP_RANKS) or ())]
        except (TypeError, ValueError):
            raise TraceFormatError(f"process group {pg[wire.GROUP_NAME]!r} has non-integer ranks",
                                   path) from None
    return table


def read_source(path: str) -> _Source:
    frames = list(iter_frames(read_bytes(path), path))
    if not frames:
        raise TraceFormatError("file is empty", path)
    try:
        meta = pb.GlobalMetadata.FromString(frames[0])
        src = _Source(path, frames, meta)
        for j in range(1, len(frames)):
            n = pb.Node.FromString(frames[j])
            if (n.type in COMM_TYPES and not is_timing_piece(n)) or n.type == pb.METADATA_NODE:
                src.nodes[j] = n
    except Exception as exc:  # protobuf's DecodeError and friends
        raise TraceFormatError(f"not a valid protobuf Chakra ET ({type(exc).__name__})", path) from None
    src.table = _table_of(meta, src.nodes, path)
    return src


def _attrs(node: Any) -> dict[str, Any]:
    return {a.name: pb.attr_value(a) for a in node.attr}


def job_groups(sources: Sequence[_Source], comm_group: str | None
               ) -> tuple[dict[str, tuple[int, ...]], dict[str, str], Hints, str]:
    """Every process group (name -> ranks, ``()`` the world), the positional aliases of non-numeric names
    (the converter may write a group's position in the table as its pg id), what the files say of the
    layout besides (:class:`chakra.job.replicas.Hints`), and where the groups came from."""
    groups: dict[str, tuple[int, ...]] = {}
    alias: dict[str, str] = {}
    hints = Hints()
    n = len(sources)
    for s in sources:
        for pos, pg in enumerate(s.table or ()):
            name = str(pg[wire.GROUP_NAME])
            ranks = tuple(int(r) for r in (pg.get(wire.GROUP_RANKS) or ()))
            groups.setdefault(name, () if ranks == tuple(range(n)) else ranks)
            if isinstance(pg.get(wire.GROUP_DESC), str):
                hints.descs.setdefault(name, pg[wire.GROUP_DESC])
            if not name.isdigit():
                alias.setdefault(str(pos), name)
    where = "the files' process-group tables" if groups else ""
    if comm_group is not None:
        for name, ranks in read_comm_groups(comm_group).items():
            groups[name] = ranks
        where = f"{comm_group}" + (" and the files' tables" if where else "")
    alias = {a: name for a, name in alias.items() if a not in groups}
    used: set[str] = set()
    for r, s in enumerate(sources):
        for nd in s.nodes.values():
            a = _attrs(nd)
            if nd.type in COMM_TYPES:
                used.add(str(a.get(wire.ATTR_PG_NAME) or ""))
            peer = a.get(wire.ATTR_COMM_DST if nd.type == pb.COMM_SEND_NODE else wire.ATTR_COMM_SRC)
            if nd.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE) and isinstance(peer, int) and 0 <= peer < n:
                hints.pairs.add((min(r, peer), max(r, peer)))
    for used_pg in sorted(used):
        if used_pg in groups or used_pg in alias:
            continue
        if used_pg in ("", "0"):
            continue           # the world by ASTRA-sim's convention
        raise UsageError(f"collectives of process group {used_pg!r}, which no table lists: give the groups "
                         "with --comm-group FILE", sources[0].path)
    return groups, alias, hints, where or "none listed (the world alone)"


def _set(node: Any, name: str, value: Any) -> bool:
    """Set attribute ``name`` (its own oneof field) to ``value``; whether it changed."""
    for a in node.attr:
        if a.name == name:
            which = a.WhichOneof("value")
            if which is None or getattr(a, which) == value:
                return False
            setattr(a, which, value)
            return True
    return False


class _Rewrite:
    """What a copy of a measured rank changes (module doc), for one layout and size."""

    def __init__(self, lay: Layout, grown: Grown, alias: dict[str, str], net: Network | None) -> None:
        self.lay, self.grown, self.alias, self.net = lay, grown, alias, net
        self.m = grown.m
        self.retimed = 0          # (measured rank, collective) pairs re-timed

    def canonical(self, pg: str) -> str:
        return self.alias.get(pg, pg)

    def depends_on_replica(self, node: Any) -> bool:
        return node.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE) or \
            self.canonical(str(_attrs(node).get(wire.ATTR_PG_NAME) or "")) in self.lay.inside

    def table(self, table: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The process-group table of the larger job: each group's ranks as grown, then the new replicas'
        copies of the groups inside one."""
        grown = self.grown.groups
        out = []
        for pg in table:
            new = dict(pg)
            name = str(pg[wire.GROUP_NAME])
            if pg.get(wire.GROUP_RANKS) and name in grown:
                new[wire.GROUP_RANKS] = list(grown[name])
            if isinstance(pg.get(wire.GROUP_SIZE), int) and pg[wire.GROUP_SIZE] > 0 and name in grown:
                new[wire.GROUP_SIZE] = len(grown[name])
            out.append(new)
        by_name = {str(pg[wire.GROUP_NAME]): pg for pg in table}
        for name, model, _k in self.grown.new:
            if model in by_name:
                new = dict(by_name[model])
                new[wire.GROUP_NAME] = name
                new[wire.GROUP_RANKS] = list(grown[name])
                out.append(new)
        return out

    def node(self, orig: Any, src_rank: int, rank: int, k: int, where: str) -> Any:
        """The node as rank ``rank`` (replica ``k``) has it, or ``orig`` when nothing changes."""
        nd = pb.Node()
        nd.CopyFrom(orig)
        if nd.type == pb.METADATA_NODE:
            parsed = groups_from_metadata_node(nd.inputs.values, where) if nd.inputs.values else None
            if parsed and isinstance(parsed, list):
                new = self.table(_checked(parsed, where))
                if new != parsed:
                    nd.inputs.values = str([json.dumps(new)])
            return orig if nd == orig else nd
        a = _attrs(nd)
        pg = str(a.get(wire.ATTR_PG_NAME) or "")
        c = self.canonical(pg)
        if c in self.lay.inside:
            _set(nd, wire.ATTR_PG_NAME, self.grown.name_in(c, k))
        elif c in self.grown.groups or pg in ("", "0"):
            self._grown_group(nd, a, c)
        if nd.type != pb.COMM_COLL_NODE:
            for key in (wire.ATTR_COMM_SRC, wire.ATTR_COMM_DST):
                v = a.get(key)
                if isinstance(v, int):
                    _set(nd, key, self._peer(v, src_rank, k, where, nd))
        return orig if nd == orig else nd

    def _grown_group(self, nd: Any, a: dict[str, Any], c: str) -> None:
        lay, m = self.lay, self.m
        old_n = len(lay.groups[c]) if c in lay.groups else lay.n
        new_n = len(self.grown.groups[c]) if c in self.grown.groups else m
        if isinstance(a.get(wire.ATTR_PG_SIZE), int) and a[wire.ATTR_PG_SIZE] > 0:
            _set(nd, wire.ATTR_PG_SIZE, new_n)
        ctype = a.get(wire.ATTR_COMM_TYPE)
        if (self.net is None or nd.type != pb.COMM_COLL_NODE or ctype not in NETWORK_KINDS
                or new_n == old_n or nd.duration_micros <= 0):
            return
        size = a.get(wire.ATTR_COMM_SIZE) or 0
        delta = self.net.time_us(ctype, nd.type, size, new_n) - self.net.time_us(ctype, nd.type, size, old_n)
        nd.duration_micros = max(0, int(round(nd.duration_micros + delta)))
        self.retimed += 1

    def _peer(self, v: int, src_rank: int, k: int, where: str, nd: Any) -> int:
        lay = self.lay
        if not 0 <= v < lay.n:
            raise TraceFormatError(f"node {nd.id} ({nd.name}): peer rank {v} is not one of the job's {lay.n} "
                                   "ranks", where)
        if lay.coords(v)[1] != lay.coords(src_rank)[1]:
            raise UsageError(f"node {nd.id} ({nd.name}) of rank {src_rank} exchanges with rank {v}, in "
                             f"another replica ({lay.describe()}): extrapolation moves a replica's send/recv "
                             "with it, not between replicas", where)
        return lay.moved(v, k, self.m)


def _framed(frame: bytes) -> bytes:
    return encode_varint(len(frame)) + frame


@dataclass(slots=True)
class _Plan:
    """A measured rank ready to be copied: runs of unchanged frames (framed, joined) and the nodes whose
    rewrite depends on the replica (frame index -> node) between them."""

    src: _Source
    rank: int
    segments: list[bytes | int]


def _plan(src: _Source, rank: int, rw: _Rewrite) -> _Plan:
    k = rw.lay.coords(rank)[1]
    frames = list(src.frames)
    dependent = set()
    for j, nd in src.nodes.items():
        if nd.type != pb.METADATA_NODE and rw.depends_on_replica(nd):
            dependent.add(j)
            continue
        new = rw.node(nd, rank, rank, k, src.path)     # the same in every replica
        if new is not nd:
            frames[j] = new.SerializeToString()
    segments: list[bytes | int] = []
    run: list[bytes] = []
    for j in range(1, len(frames)):
        if j in dependent:
            segments.append(b"".join(run))
            segments.append(j)
            run = []
        else:
            run.append(_framed(frames[j]))
    segments.append(b"".join(run))
    return _Plan(src, rank, segments)


def _metadata(src: _Source, rank: int, m: int, rw: _Rewrite) -> bytes:
    meta = pb.GlobalMetadata()
    meta.CopyFrom(src.meta)
    _set(meta, wire.META_RANK, rank)
    _set(meta, wire.META_WORLD_SIZE, m)
    if src.table is not None and any(a.name == wire.META_PROCESS_GROUPS for a in meta.attr):
        new = rw.table(src.table)
        if new != src.table:
            _set(meta, wire.META_PROCESS_GROUPS, json.dumps(new))
    return src.frames[0] if meta == src.meta else meta.SerializeToString()


def _rank_bytes(plan: _Plan, rank: int, k: int, rw: _Rewrite) -> bytes:
    parts = [_framed(_metadata(plan.src, rank, rw.m, rw))]
    for seg in plan.segments:
        if isinstance(seg, int):
            orig = plan.src.nodes[seg]
            new = rw.node(orig, plan.rank, rank, k, plan.src.path)
            parts.append(_framed(plan.src.frames[seg] if new is orig else new.SerializeToString()))
        else:
            parts.append(seg)
    return b"".join(parts)


def _beside(prefix: str, name: str, given: str | None) -> str | None:
    if given is not None:
        if not os.path.isfile(given):
            raise UsageError("no such file", given)
        return given
    path = os.path.join(os.path.dirname(prefix) or ".", name)
    return path if os.path.isfile(path) else None


def _network(path: str | None, n: int, m: int, res: Extrapolation) -> tuple[Network | None, str | None]:
    """The network model to re-time grown collectives with (a one-dimension ring), and the network file's
    text for ``m`` NPUs."""
    if path is None:
        return None, None
    doc = read_network_yaml(path)
    counts = [int(x) for x in doc["npus_count"]]
    if _prod(counts) != n:
        raise UsageError(f"the network's npus_count {counts} is not the measured job's {n} ranks", path)
    if len(counts) == 1:
        new = [m]
    elif (counts[-1] * m) % n == 0:
        new = counts[:-1] + [counts[-1] * m // n]
    else:
        raise UsageError(f"the network's npus_count {counts}: its last dimension cannot grow by {m}/{n}",
                         path)
    text = Path(path).read_text()
    line = re.compile(r"^(\s*npus_count\s*:\s*)\[[^\]\n]*\]", re.M)
    text = f"# extrapolated to {m} NPUs by chakra extrapolate from {path}\n" + \
        line.sub(lambda mo: f"{mo.group(1)}[ {', '.join(map(str, new))} ]", text, count=1)
    topo = [str(x) for x in doc.get("topology", ["Ring"])]
    lat, bw = doc.get("latency", [None]), doc.get("bandwidth", [None])
    if len(counts) == 1 and topo == ["Ring"] and isinstance(lat[0], (int, float)) and \
            isinstance(bw[0], (int, float)) and bw[0] > 0:
        net = Network(m, float(lat[0]), float(bw[0]), source=f"from {path}")
        res.network_text = net.describe()
        return net, text
    res.notes.append(f"the network of {path} is not one ring: collective durations are kept (ASTRA-sim times "
                     "them by its network; chakra replay reads the durations)")
    return None, text


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def extrapolate(prefix: str, m: int, out_prefix: str, *, comm_group: str | None = None,
                dp_groups: Sequence[str] | None = None, network: str | None = None, system: str | None = None,
                progress: Callable[[int, int], None] | None = None) -> Extrapolation:
    """Write the ``m``-rank job extrapolated from the measured job ``prefix`` (module doc) under
    ``out_prefix``; nothing is left behind on failure.  ``progress(done, total)`` is told of each rank."""
    paths = input_files(prefix)
    prefix = paths[0][: -len(".0.et")]
    n = len(paths)
    if m < 1:
        raise UsageError(f"--ranks must be at least 1 (got {m})")
    check_output_path(out_prefix, prefix=True)
    if os.path.realpath(out_prefix) == os.path.realpath(prefix):
        raise UsageError("the output prefix is the measured job's: give another", out_prefix)
    sources = [read_source(p) for p in paths]
    _check_ranks(sources)
    if comm_group is None and all(s.table is None for s in sources) and os.path.isfile(
            f"{prefix}.comm_group.json"):
        comm_group = f"{prefix}.comm_group.json"
    groups, alias, hints, where = job_groups(sources, comm_group)
    lay = find_layout(groups, n, dp_groups, hints)
    grown = grow(lay, m)
    res = Extrapolation(n, m, lay, grown, groups_from=where)
    net, net_text = _network(_beside(prefix, NETWORK_YML, network), n, m, res)
    sys_path = _beside(prefix, SYSTEM_JSON, system)
    rw = _Rewrite(lay, grown, alias, net)
    plans = [_plan(s, r, rw) for r, s in enumerate(sources)]
    res.retimed = rw.retimed
    _write(res, plans, rw, out_prefix, net_text, sys_path, progress)
    return res


def _check_ranks(sources: Sequence[_Source]) -> None:
    n = len(sources)
    for r, s in enumerate(sources):
        info = metadata_info(s.meta)
        rank, ws = info.get(wire.META_RANK), info.get(wire.META_WORLD_SIZE)
        if isinstance(rank, int) and rank != r:
            raise TraceFormatError(f"the metadata says rank {rank}, the name rank {r}", s.path)
        if isinstance(ws, int) and ws > n:
            raise TraceFormatError(f"world_size {ws} in the metadata, but only {n} rank files "
                                   f"(.0.et .. .{n - 1}.et) were found: the job is not complete", s.path)


def _write(res: Extrapolation, plans: Sequence[_Plan], rw: _Rewrite, out_prefix: str, net_text: str | None,
           sys_path: str | None, progress: Callable[[int, int], None] | None) -> None:
    lay, m = res.layout, res.ranks
    d2 = m // lay.replica
    written: list[Path] = []
    try:
        for r in range(m):
            src = lay.source(r, m)
            out = Path(f"{out_prefix}.{r}.et")
            with atomic_output(out) as fh:
                fh.write(_rank_bytes(plans[src], r, lay.coords(r, d2)[1], rw))
            written.append(out)
            if progress is not None:
                progress(r + 1, m)
        res.outputs = list(written)
        cg = {k: list(v) for k, v in res.grown.groups.items() if not (k in ("", "0") and k in lay.world)}
        res.comm_group = _text(Path(f"{out_prefix}.comm_group.json"),
                               json.dumps(cg, indent=1, sort_keys=True) + "\n", written)
        if net_text is not None:
            res.network = _text(Path(f"{out_prefix}.{NETWORK_YML}"), net_text, written)
        if sys_path is not None or net_text is not None:
            out = Path(f"{out_prefix}.{SYSTEM_JSON}")
            if sys_path is not None:
                with atomic_output(out) as fh, open(sys_path, "rb") as src_fh:
                    shutil.copyfileobj(src_fh, fh)
                written.append(out)
                res.system = out
            else:
                res.system = _text(out, json.dumps(system_config(), indent=2) + "\n", written)
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise


def _text(path: Path, text: str, written: list[Path]) -> Path:
    with atomic_output(path) as fh:
        fh.write(text.encode())
    written.append(path)
    return path
