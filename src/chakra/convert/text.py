"""ASTRA-sim 1.0 text workloads -> one Chakra protobuf ET per NPU (``chakra_converter Text``).

The input (``../shared/traces/astrasim_text/README.md``): line 1 the parallelism kind and its options,
line 2 the layer count, then one line per layer: ``name reserved fwd_cycles fwd_comm fwd_bytes ig_cycles
ig_comm ig_bytes wg_cycles wg_comm wg_bytes update_cycles``.

**What runs where.**  ASTRA-sim 1.0 gives every phase (forward, input gradient, weight gradient) of a kind
a set of network dimensions its collective runs over; a phase without one issues no collective even when
the line names one.  Dimension 0 is the innermost, i.e. blocks of consecutive ranks.  Here:

=============================  ===================  ==================  ================================
kind                           forward / input grad  weight grad         groups
=============================  ===================  ==================  ================================
MICRO                          --                    world               only the collectives, chained
DATA                           --                    world
HYBRID_DLRM(_ENHANCED)         layer 0: world        world               layer 0 (embedding) is all-world
MODEL, DISTRIBUTED_INFERENCE   world                 --                  inference: forward pass only
HYBRID_DATA_MODEL              model group           data group          model = consecutive blocks of M
HYBRID_MODEL_DATA              model group           data group          data = consecutive blocks of N/M
HYBRID_TRANSFORMER(_FWD_IN..)  model group           data group          model = consecutive blocks of M
=============================  ===================  ==================  ================================

M is the model-parallel group size: ``model_parallel_NPU_group: M`` on line 1, else ``--model-parallel-size``,
else the largest divisor of N not above sqrt(N) (a square-ish 2-D split; the log says which).  A data group
holds the ranks with the same position in every model group.  Groups other than the world are numbered
from 1 and written as ``<prefix>.comm_group.json`` (``{"<pg id>": [ranks]}``, ASTRA-sim's
``--comm-group-configuration``); each COMM node's ``pg_name`` is its rank's group id, ``"0"`` the world.  A
collective whose group has one rank, or whose size is 0, is left out (nothing to exchange).

**Order of a pass** (what ASTRA-sim 1.0's workload loop waits for; every edge is a ``data_dep``):

* forward, layer by layer: a layer's forward waits for the previous layer's forward compute, or for its
  collective when there is one (blocking), and for its own weights from the previous pass (below).
  HYBRID_DLRM: the embedding's forward all-to-all is not waited for by the bottom MLP; the first layer after
  the last bottom layer (line 1, 2nd field, or ``DLRM_LAST_BOTTOM_LAYER: K``) waits for it.
* backward, last layer first.  DATA / DLRM: weight-gradient compute, its collective (not waited for by
  the next compute), then the input-gradient compute (not for layer 0).  DLRM: after the input gradient of
  the first top layer the embedding's input-gradient all-to-all starts; the embedding's weight gradient
  waits for it.  MODEL / hybrids / Transformer: input-gradient compute, its collective (blocking; none for
  layer 0, whose input gradient nobody needs), weight-gradient compute, its collective (not waited for).
* weight update: a layer's ``update_cycles`` (ASTRA-sim 1.0's delay between the end of the weight-gradient
  collective and the layer counting as updated) is a node ``<layer>.WU`` after that collective (or after the
  weight-gradient compute when there is none), only when non-zero.  It is a delay, not GPU work, so it is
  written as a CPU COMP node (``is_cpu_op`` true): it then does not hold the GPU's compute slot in the
  simulator.  The next pass's forward of the layer waits for it: passes are chained through each layer.
* MICRO: only the weight-gradient collectives, each waiting for the one before (ASTRA-sim 1.0 runs no
  compute for micro-benchmarks).

**Time unit.**  The text gives cycles of ASTRA-sim 1.0's 1 GHz clock (one cycle = 1 ns); ASTRA-sim 2.0 reads
``duration_micros`` as microseconds (a COMP node of 1000 runs 1,000,000 ns).  So ``duration_micros =
round(cycles * cycle_ns / 1000)`` with ``cycle_ns`` = 1 by default (``--cycle-ns`` for another clock;
``--cycle-ns 1000`` reproduces the reference converter, which wrote cycles as microseconds).  Rounding to
whole microseconds is the format's limit; the log gives the total before and after.

Every COMP and COMM node has ``is_cpu_op`` false except the WU delay; COMM nodes carry ``comm_type``
(int64), ``comm_size`` (int64 bytes) and ``pg_name``.  No METADATA node (the simulator aborts on one).

**``astrasim_safe``** (``--astrasim-safe``): the hybrid kinds run all-reduces in both the model and the
data group of a rank, which makes this ASTRA-sim build free memory twice at exit and, depending on the
heap, abort (:func:`astrasim_split` says why and what is measured); with the option the all-reduces of one
of the two scopes are written as a reduce-scatter followed by an all-gather of ``ceil(S/n)`` bytes (what
a ring all-reduce is; the simulator gives both forms the same time), marked ``orig_comm_type`` /
``orig_comm_size``.  Without it the converter warns when a workload has that shape.
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from chakra import formats as wire
from chakra import schema as pb
from chakra.convert.core import ET_VERSION
from chakra.errors import TraceFormatError, UsageError
from chakra.io import read_bytes, write_messages
from chakra.io.atomic import write_bytes_atomic

log = logging.getLogger(__name__)

#: text comm type -> CollectiveCommType
_TEXT_COLLECTIVES = ("all_reduce", "all_to_all", "all_gather", "reduce_scatter")
COMM_TYPES: dict[str, int] = {c.replace("_", "").upper(): pb.COLLECTIVE_TYPES[c] for c in _TEXT_COLLECTIVES}
_COMM_NAMES = {pb.COLLECTIVE_TYPES[c]: c.upper() for c in _TEXT_COLLECTIVES}

# scopes of a phase's collective
WORLD, MODEL, DATA = "world", "model", "data"

# kind -> (forward scope, input-gradient scope, weight-gradient scope, backward style)
#   style "wg": weight gradient first (data parallel); "ig": input gradient first; "micro"; "inference"
_KINDS: dict[str, tuple[str | None, str | None, str | None, str]] = {
    "MICRO": (None, None, WORLD, "micro"),
    "DATA": (None, None, WORLD, "wg"),
    "HYBRID_DLRM": (None, None, WORLD, "wg"),
    "HYBRID_DLRM_ENHANCED": (None, None, WORLD, "wg"),
    "MODEL": (WORLD, WORLD, None, "ig"),
    "DISTRIBUTED_INFERENCE": (WORLD, WORLD, None, "inference"),
    "HYBRID_DATA_MODEL": (MODEL, MODEL, DATA, "ig"),
    "HYBRID_MODEL_DATA": (MODEL, MODEL, DATA, "ig"),
    "HYBRID_TRANSFORMER": (MODEL, MODEL, DATA, "ig"),
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": (MODEL, MODEL, DATA, "ig"),
}
KINDS = tuple(_KINDS)
_DLRM = ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED")
_HYBRID = ("HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")


# ---- the parsed workload -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a layer: its compute cycles and the collective after it (``comm`` None = none)."""

    cycles: int
    comm: int | None
    size: int


@dataclass(frozen=True, slots=True)
class Layer:
    name: str
    fwd: Phase
    ig: Phase
    wg: Phase
    update_cycles: int


@dataclass(frozen=True, slots=True)
class TextWorkload:
    """An ASTRA-sim 1.0 text workload, as read (no NPU count yet: the same file serves any N)."""

    path: str
    kind: str
    layers: tuple[Layer, ...]
    model_parallel_size: int | None = None   # model_parallel_NPU_group
    dlrm_last_bottom: int | None = None      # HYBRID_DLRM: index of the last bottom-MLP layer
    checkpoints: int = 0                     # TRANSFORMER_FWD_IN_BCKWD: recomputed layers (not modelled)


def parse_workload(path: str | os.PathLike[str]) -> TextWorkload:
    """Read a text workload; a bad line raises TraceFormatError naming the file, the line and the field."""
    spath = os.fspath(path)
    text = read_bytes(spath).decode("utf-8", errors="replace")   # a gzipped workload reads too
    return parse_text(text, spath)


def parse_text(text: str, path: str = "<text>") -> TextWorkload:
    """Parse the contents of a text workload (see :func:`parse_workload`)."""
    lines = [(i + 1, ln.split()) for i, ln in enumerate(text.splitlines())]
    lines = [(n, toks) for n, toks in lines if toks]
    if not lines:
        raise TraceFormatError("empty: expected the parallelism kind on line 1", path)
    n1, head = lines[0]
    kind = head[0]
    if kind not in _KINDS:
        raise TraceFormatError(f"line {n1}: unsupported parallelism kind {kind!r} (supported: "
                               f"{', '.join(KINDS)})", path)
    opts = _line1_options(head[1:], kind, n1, path)
    if len(lines) < 2:
        raise TraceFormatError("no layer count (line 2)", path)
    n2, count_toks = lines[1]
    count = _int(count_toks[0], path, n2, "layer count")
    if count < 1:
        raise TraceFormatError(f"line {n2}: layer count is {count}; at least 1 is needed", path)
    body = lines[2:]
    if len(body) < count:
        raise TraceFormatError(f"declares {count} layers but has {len(body)} layer lines", path)
    if len(body) > count:
        log.warning("%s: declares %d layers; the %d lines after them are ignored (as ASTRA-sim does)",
                    path, count, len(body) - count)
    layers = tuple(_layer(n, toks, path) for n, toks in body[:count])
    last_bottom = opts.get("dlrm_last_bottom")
    if kind in _DLRM:
        if last_bottom is None:
            raise TraceFormatError(f"line {n1}: {kind} needs the last bottom-MLP layer (2nd field or "
                                   "'DLRM_LAST_BOTTOM_LAYER: K')", path)
        if not 0 < last_bottom < count - 1:
            raise TraceFormatError(f"line {n1}: last bottom-MLP layer {last_bottom} is not between 1 and "
                                   f"{count - 2} (layer 0 is the embedding, a top layer must follow)", path)
    return TextWorkload(path=path, kind=kind, layers=layers,
                        model_parallel_size=opts.get("model_parallel_size"),
                        dlrm_last_bottom=last_bottom if kind in _DLRM else None,
                        checkpoints=opts.get("checkpoints", 0))


def _line1_options(toks: list[str], kind: str, lineno: int, path: str) -> dict[str, int]:
    """``key: value`` pairs of line 1 (and DLRM's bare 2nd field); unknown keys are skipped."""
    out: dict[str, int] = {}
    if kind in _DLRM and toks and not toks[0].endswith(":"):
        out["dlrm_last_bottom"] = _int(toks[0], path, lineno, "last bottom-MLP layer")
    keys = {"model_parallel_NPU_group:": "model_parallel_size", "DLRM_LAST_BOTTOM_LAYER:": "dlrm_last_bottom",
            "checkpoints:": "checkpoints"}
    for i, tok in enumerate(toks):
        if tok in keys:
            if i + 1 >= len(toks):
                raise TraceFormatError(f"line {lineno}: {tok} has no value", path)
            out[keys[tok]] = _int(toks[i + 1], path, lineno, tok.rstrip(":"))
    mp = out.get("model_parallel_size")
    if mp is not None and mp < 1:
        raise TraceFormatError(f"line {lineno}: model_parallel_NPU_group is {mp}; it must be at least 1",
                               path)
    return out


def _int(tok: str, path: str, lineno: int, what: str) -> int:
    try:
        value = int(tok)
    except ValueError:
        raise TraceFormatError(f"line {lineno}: {what} {tok!r} is not an integer", path) from None
    return value


def _layer(lineno: int, toks: list[str], path: str) -> Layer:
    if len(toks) < 12:
        raise TraceFormatError(f"line {lineno}: a layer line needs 12 fields (name, reserved, then compute, "
                               f"comm type, comm bytes for forward, input and weight gradient, then the "
                               f"update time); found {len(toks)}", path)

    def count(i: int, what: str) -> int:
        v = _int(toks[i], path, lineno, f"{toks[0]}: {what}")
        if v < 0:
            raise TraceFormatError(f"line {lineno}: {toks[0]}: {what} is negative ({v})", path)
        return v

    def phase(i: int, what: str) -> Phase:
        cycles = count(i, f"{what} compute cycles")
        ctype = toks[i + 1].upper()
        size = count(i + 2, f"{what} comm bytes")
        if ctype == "NONE":
            return Phase(cycles, None, size)
        if ctype not in COMM_TYPES:
            raise TraceFormatError(f"line {lineno}: {toks[0]}: {what} comm type {toks[i + 1]!r} is not one "
                                   f"of NONE, {', '.join(COMM_TYPES)}", path)
        return Phase(cycles, COMM_TYPES[ctype], size)

    return Layer(name=toks[0], fwd=phase(2, "forward"), ig=phase(5, "input-gradient"),
                 wg=phase(8, "weight-gradient"), update_cycles=count(11, "update cycles"))


# ---- process groups ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """Which process group each rank uses for model- and data-parallel collectives."""

    num_npus: int
    model_parallel_size: int | None               # None: the kind uses the world only
    groups: dict[int, tuple[int, ...]]            # pg id -> global ranks (world not listed)
    model_of: tuple[int, ...] = ()                # rank -> pg id of its model group (0: world)
    data_of: tuple[int, ...] = ()

    def pg(self, scope: str, rank: int) -> tuple[str, int]:
        """(pg_name, group size) of ``scope`` for ``rank``."""
        if scope == WORLD:
            return "0", self.num_npus
        pid = (self.model_of if scope == MODEL else self.data_of)[rank]
        return str(pid), len(self.groups[pid])


def default_model_parallel_size(num_npus: int) -> int:
    """The largest divisor of N not above sqrt(N): 8 -> 2, 16 -> 4, 12 -> 3, a prime -> 1."""
    best = 1
    for d in range(1, math.isqrt(num_npus) + 1):
        if num_npus % d == 0:
            best = d
    return best


def plan_groups(kind: str, num_npus: int, model_parallel_size: int | None) -> GroupPlan:
    """Model and data groups of a hybrid kind (module doc); the world only for the other kinds."""
    if kind not in _HYBRID:
        return GroupPlan(num_npus, None, {})
    m = model_parallel_size
    if m is None or m < 1 or num_npus % m:
        raise UsageError(f"{kind} needs a model-parallel group size that divides the {num_npus} NPUs "
                         f"(got {m})")
    d = num_npus // m
    if kind == "HYBRID_MODEL_DATA":   # data groups are the consecutive blocks, model groups strided
        data = [tuple(range(g * d, (g + 1) * d)) for g in range(m)]
        model = [tuple(range(j, num_npus, d)) for j in range(d)]
    else:
        model = [tuple(range(g * m, (g + 1) * m)) for g in range(d)]
        data = [tuple(range(j, num_npus, m)) for j in range(m)]
    groups: dict[int, tuple[int, ...]] = {}
    model_of = [0] * num_npus
    data_of = [0] * num_npus
    for members, owner in [(g, model_of) for g in model] + [(g, data_of) for g in data]:
        pid = len(groups) + 1
        groups[pid] = members
        for r in members:
            owner[r] = pid
    return GroupPlan(num_npus, m, groups, tuple(model_of), tuple(data_of))


# ---- the graph of one rank -----------------------------------------------------------------------------

_GPU = pb.AttributeProto(name=wire.ATTR_IS_CPU_OP, bool_val=False)
_CPU = pb.AttributeProto(name=wire.ATTR_IS_CPU_OP, bool_val=True)


@dataclass(slots=True)
class _Graph:
    """Nodes in id order; every dependency points to an earlier id: acyclic by construction."""

    cycle_ns: float
    nodes: list = field(default_factory=list)
    cycles: int = 0          # compute cycles written (GPU nodes)
    micros: int = 0          # their duration_micros total

    def comp(self, name: str, cycles: int, deps: Sequence[int | None], *, cpu: bool = False) -> int:
        us = int(cycles * self.cycle_ns / 1000.0 + 0.5)
        if not cpu:
            self.cycles += cycles
            self.micros += us
        node = pb.Node(name=name, type=pb.COMP_NODE, duration_micros=us)
        return self._add(node, deps, _CPU if cpu else _GPU)

    def coll(self, name: str, comm: int, size: int, pg_name: str, deps: Sequence[int | None], *,
             orig: int | None = None) -> int:
        node = pb.Node(name=name, type=pb.COMM_COLL_NODE)
        attrs = [pb.AttributeProto(name=wire.ATTR_COMM_TYPE, int64_val=comm),
                 pb.AttributeProto(name=wire.ATTR_COMM_SIZE, int64_val=size),
                 pb.AttributeProto(name=wire.ATTR_PG_NAME, string_val=pg_name)]
        if orig is not None:   # half of an all-reduce written as reduce-scatter + all-gather (astrasim_safe)
            attrs += [pb.AttributeProto(name=wire.ATTR_ORIG_COMM_TYPE, int64_val=pb.ALL_REDUCE),
                      pb.AttributeProto(name=wire.ATTR_ORIG_COMM_SIZE, int64_val=orig)]
        return self._add(node, deps, _GPU, *attrs)

    def _add(self, node: pb.Node, deps: Sequence[int | None], *attrs: pb.AttributeProto) -> int:
        node.id = len(self.nodes)
        node.data_deps.extend(sorted({d for d in deps if d is not None}))
        node.attr.extend(attrs)
        self.nodes.append(node)
        return node.id


@dataclass(slots=True)
class RankBuild:
    nodes: list
    compute_cycles: int
    compute_micros: int
    skipped: dict[str, int]   # why collectives were left out -> how many


def build_rank(wl: TextWorkload, rank: int, plan: GroupPlan, num_passes: int,
               cycle_ns: float = 1.0, split: str | None = None) -> RankBuild:
    """The node list of one rank (module doc); ``nodes[i].id == i``.  ``split``: the scope (MODEL or DATA)
    whose all-reduces are written as reduce-scatter + all-gather (:func:`astrasim_split`)."""
    f_scope, i_scope, w_scope, style = _KINDS[wl.kind]
    g = _Graph(cycle_ns)
    skipped: dict[str, int] = {}
    dlrm = wl.kind in _DLRM
    # DLRM: the first top-MLP layer (after the last bottom one: the parser requires it of a DLRM workload)
    first_top = wl.dlrm_last_bottom + 1 if wl.dlrm_last_bottom is not None else -1
    layers = wl.layers

    def coll(layer: Layer, tag: str, phase: Phase, scope: str | None,
             deps: Sequence[int | None]) -> int | None:
        if phase.comm is None:
            return None
        if scope is None:
            why = f"{tag} collectives ({wl.kind} runs none there)"
            skipped[why] = skipped.get(why, 0) + 1
            return None
        pg_name, size = plan.pg(scope, rank)
        if size < 2 or phase.size == 0:
            why = f"{tag} collectives over {'a one-rank group' if size < 2 else '0 bytes'}"
            skipped[why] = skipped.get(why, 0) + 1
            return None
        name = f"{layer.name}.{tag}"
        if scope == split and phase.comm == pb.ALL_REDUCE:
            rs = g.coll(f"{name}.REDUCE_SCATTER", pb.REDUCE_SCATTER, phase.size, pg_name, deps,
                        orig=phase.size)
            return g.coll(f"{name}.ALL_GATHER", pb.ALL_GATHER, -(-phase.size // size), pg_name, [rs],
                          orig=phase.size)
        return g.coll(f"{name}.{_COMM_NAMES[phase.comm]}", phase.comm, phase.size, pg_name, deps)

    def scopes(i: int) -> tuple[str | None, str | None, str | None]:
        if dlrm and i == 0:   # ASTRA-sim 1.0 runs the embedding's collectives over every dimension
            return WORLD, WORLD, WORLD
        return f_scope, i_scope, w_scope

    if style == "micro":
        last: int | None = None
        for _ in range(num_passes):
            for layer in layers:
                c = coll(layer, "WG", layer.wg, w_scope, [last])
                last = c if c is not None else last
        return RankBuild(g.nodes, g.cycles, g.micros, skipped)

    updated: list[int | None] = [None] * len(layers)   # what the next pass's forward of a layer waits for
    for _ in range(num_passes):
        prev: list[int | None] = []
        emb_a2a: int | None = None
        for i, layer in enumerate(layers):
            deps = [*prev, updated[i]]
            if dlrm and i == first_top:
                deps.append(emb_a2a)
            f = g.comp(f"{layer.name}.FWD", layer.fwd.cycles, deps)
            c = coll(layer, "FWD", layer.fwd, scopes(i)[0], [f])
            if dlrm and i == 0:
                emb_a2a, prev = c, [f]           # the bottom MLP does not wait for the embedding's all-to-all
            else:
                prev = [c if c is not None else f]
        if style == "inference":
            updated[0] = prev[0]
            continue
        emb_ig: int | None = None
        for i in range(len(layers) - 1, -1, -1):
            layer = layers[i]
            _, ig_scope, wg_scope = scopes(i)
            if style == "wg":
                w = g.comp(f"{layer.name}.WG", layer.wg.cycles, [*prev, emb_ig if i == 0 else None])
                wc = coll(layer, "WG", layer.wg, wg_scope, [w])
                if i > 0:
                    ig = g.comp(f"{layer.name}.IG", layer.ig.cycles, [w])
                    prev = [ig]
                    if dlrm and i == first_top:
                        emb_ig = coll(layers[0], "IG", layers[0].ig, scopes(0)[1], [ig])
            else:
                ig = g.comp(f"{layer.name}.IG", layer.ig.cycles, prev)
                igc = coll(layer, "IG", layer.ig, ig_scope, [ig]) if i > 0 else None
                w = g.comp(f"{layer.name}.WG", layer.wg.cycles, [ig])
                wc = coll(layer, "WG", layer.wg, wg_scope, [w])
                prev = [igc if igc is not None else ig, w]
            done = wc if wc is not None else w
            if layer.update_cycles:
                done = g.comp(f"{layer.name}.WU", layer.update_cycles, [done], cpu=True)
            updated[i] = done
    return RankBuild(g.nodes, g.cycles, g.micros, skipped)


# ---- the simulator's one-plan-per-collective-type limit -----------------------------------------------


def scope_types(wl: TextWorkload, plan: GroupPlan) -> dict[str, set[int]]:
    """The collective types each sub-group scope (MODEL, DATA) carries on a rank."""
    f_scope, i_scope, w_scope, style = _KINDS[wl.kind]
    out: dict[str, set[int]] = {MODEL: set(), DATA: set()}
    if not plan.groups:
        return out
    phases = {"micro": [(w_scope, "wg")], "inference": [(f_scope, "fwd")]}.get(
        style, [(f_scope, "fwd"), (i_scope, "ig"), (w_scope, "wg")])
    for layer in wl.layers:
        for scope, attr in phases:
            ph: Phase = getattr(layer, attr)
            if scope in out and ph.comm is not None and ph.size and plan.pg(scope, 0)[1] > 1:
                out[scope].add(ph.comm)
    return out


def astrasim_split(wl: TextWorkload, plan: GroupPlan) -> tuple[str | None, list[str]]:
    """Which scope's all-reduces to write as reduce-scatter + all-gather so that no collective type runs in
    two process groups of one rank, and what conflict is left (empty when none).

    Why: this ASTRA-sim build gives each (process group, collective type) a plan that, for a group smaller
    than the world, frees the simulator's shared implementation object of that type when the run ends; a
    rank whose collectives of one type go to two groups frees it twice (valgrind: "Invalid free", a
    4-byte block), and glibc then aborts the simulator (exit 134) after, or sometimes before, the ranks'
    "finished" lines are logged.  In that simulator's ring algorithm an all-reduce of S bytes over n ranks
    takes the time of a reduce-scatter of S followed by an all-gather of S/n (measured equal within 40 ns
    from 64 KiB to 128 MiB), so the rewrite keeps the times.
    """
    types = scope_types(wl, plan)
    if not types[MODEL] & types[DATA]:
        return None, []
    for scope, other in ((MODEL, DATA), (DATA, MODEL)):
        if pb.ALL_REDUCE in types[scope]:
            after = (types[scope] - {pb.ALL_REDUCE}) | {pb.REDUCE_SCATTER, pb.ALL_GATHER}
            if not after & types[other]:
                return scope, []
    return None, sorted(_COMM_NAMES[t] for t in types[MODEL] & types[DATA])


# ---- files ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class TextReport:
    """What :func:`convert_text` wrote."""

    input_path: str
    prefix: str
    kind: str
    num_npus: int
    num_passes: int
    files: list[str]
    nodes_per_rank: list[int]
    comm_nodes_per_rank: list[int]
    model_parallel_size: int | None
    comm_group_path: str | None
    groups: dict[int, tuple[int, ...]]
    compute_cycles: int
    compute_micros: int
    notes: list[str] = field(default_factory=list)


def comm_group_json(groups: dict[int, tuple[int, ...]]) -> bytes:
    """ASTRA-sim's ``--comm-group-configuration`` file: ``{"<pg id>": [global ranks]}``."""
    body = {str(k): list(v) for k, v in sorted(groups.items())}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n"


def convert_text(input_path: str | os.PathLike[str], prefix: str | os.PathLike[str], num_npus: int,
                 num_passes: int = 1, *, model_parallel_size: int | None = None, cycle_ns: float = 1.0,
                 comm_group_path: str | os.PathLike[str] | None = None,
                 astrasim_safe: bool = False) -> TextReport:
    """Convert one text workload into ``<prefix>.<rank>.et`` for ranks 0..N-1 (and the comm-group JSON
    when groups other than the world are used: ``comm_group_path``, default ``<prefix>.comm_group.json``).

    Everything is parsed and built before the first file is written; each file appears complete or not
    at all.
    """
    if num_npus < 1:
        raise UsageError(f"--num-npus must be at least 1 (got {num_npus})")
    if num_passes < 1:
        raise UsageError(f"--num-passes must be at least 1 (got {num_passes})")
    if not cycle_ns > 0 or math.isinf(cycle_ns):
        raise UsageError(f"--cycle-ns must be a positive number (got {cycle_ns})")
    wl = parse_workload(input_path)
    return write_workload(wl, prefix, num_npus, num_passes, model_parallel_size=model_parallel_size,
                          cycle_ns=cycle_ns, comm_group_path=comm_group_path, astrasim_safe=astrasim_safe)


def write_workload(wl: TextWorkload, prefix: str | os.PathLike[str], num_npus: int, num_passes: int = 1, *,
                   model_parallel_size: int | None = None, cycle_ns: float = 1.0,
                   comm_group_path: str | os.PathLike[str] | None = None, astrasim_safe: bool = False,
                   source: str = "astrasim-1.0 text", jitter: float = 0.0, seed: int = 0,
                   progress: Callable[[int], None] | None = None) -> TextReport:
    """Build and write a parsed workload (the generator builds :class:`TextWorkload` s in memory too;
    ``source`` names where the workload came from in each file's GlobalMetadata), one rank at a time.
    ``jitter`` (a fraction): each compute node's duration is scaled by a seeded per-rank, per-node factor
    in [1 - jitter, 1 + jitter]; ``progress(ranks written)`` after each rank."""
    sprefix = os.fspath(prefix)
    notes: list[str] = []
    mp = _choose_model_parallel(wl, num_npus, model_parallel_size, notes)
    plan = plan_groups(wl.kind, num_npus, mp)
    split, conflict = astrasim_split(wl, plan)
    if split is not None and astrasim_safe:
        notes.append(f"--astrasim-safe: all-reduces of the {split} groups written as reduce-scatter + "
                     "all-gather (one collective type per process group on each rank)")
    elif split is not None or conflict:
        types = ", ".join(conflict) if conflict else "ALL_REDUCE"
        log.warning("%s: each rank runs %s in both its model and its data group; ASTRA-sim (this build) "
                    "double-frees memory at exit for that and may abort (exit 134) %s", wl.path, types,
                    "even with --astrasim-safe (no rewrite avoids it)" if conflict else
                    "- pass --astrasim-safe to write one group's all-reduces as reduce-scatter + all-gather")
    if not astrasim_safe:
        split = None
    if wl.kind == "HYBRID_TRANSFORMER_FWD_IN_BCKWD" and wl.checkpoints:
        notes.append(f"{wl.checkpoints} checkpointed layers: the forward recomputation inside the backward "
                     "pass is not modelled (converted as HYBRID_TRANSFORMER)")
    if wl.kind in ("HYBRID_DLRM_ENHANCED",):
        notes.append("HYBRID_DLRM_ENHANCED is converted with the HYBRID_DLRM order")

    first = build_rank(wl, 0, plan, num_passes, cycle_ns, split)
    if not first.nodes:
        raise TraceFormatError("no node to write: every collective was left out and there is no compute "
                               f"({'; '.join(f'{v} {k}' for k, v in first.skipped.items())})", wl.path)
    for why, n in first.skipped.items():
        notes.append(f"left out on every rank: {n} {why}")
    if jitter:
        notes.append(f"every compute node's duration scaled by a factor in [{1 - jitter:g}, {1 + jitter:g}] "
                     f"drawn per rank and node (seed {seed})")

    files: list[str] = []
    sizes: list[int] = []
    comms: list[int] = []
    for rank in range(num_npus):     # one rank at a time: memory does not grow with the ranks
        b = first if rank == 0 else build_rank(wl, rank, plan, num_passes, cycle_ns, split)
        if jitter:
            _jitter(b.nodes, jitter, seed, rank)
        sizes.append(len(b.nodes))
        comms.append(sum(1 for n in b.nodes if n.type == pb.COMM_COLL_NODE))
        meta = pb.GlobalMetadata(version=ET_VERSION, attr=[
            pb.AttributeProto(name="source", string_val=source),
            pb.AttributeProto(name="input_file", string_val=os.path.basename(wl.path)),
            pb.AttributeProto(name="parallelism", string_val=wl.kind),
            pb.AttributeProto(name=wire.META_RANK, int64_val=rank),
            pb.AttributeProto(name=wire.META_WORLD_SIZE, int64_val=num_npus),
            pb.AttributeProto(name="num_passes", int64_val=num_passes),
            pb.AttributeProto(name="cycle_ns", double_val=cycle_ns),
        ])
        path = f"{sprefix}.{rank}.et"
        write_messages(path, [meta, *b.nodes])
        files.append(path)
        if progress is not None:
            progress(rank + 1)

    cg_path: str | None = None
    if plan.groups:
        cg_path = os.fspath(comm_group_path) if comm_group_path else f"{sprefix}.comm_group.json"
        write_bytes_atomic(cg_path, comm_group_json(plan.groups))
    if first.compute_cycles:
        c, us = first.compute_cycles, first.compute_micros
        exact = c * cycle_ns / 1000
        notes.append(f"GPU compute per rank: {c:,} cycles x {cycle_ns:g} ns = {exact:,.1f} us, written as "
                     f"{us:,} whole us ({(us / exact - 1) * 100:+.2f}% from rounding)")
    for note in notes:
        log.info("%s: %s", wl.path, note)
    return TextReport(
        input_path=wl.path, prefix=sprefix, kind=wl.kind, num_npus=num_npus, num_passes=num_passes,
        files=files, nodes_per_rank=sizes, comm_nodes_per_rank=comms,
        model_parallel_size=plan.model_parallel_size, comm_group_path=cg_path, groups=plan.groups,
        compute_cycles=first.compute_cycles, compute_micros=first.compute_micros, notes=notes)


def _jitter(nodes: list[Any], pct: float, seed: int, rank: int) -> None:
    """Scale each compute node's duration by its own factor in [1 - pct, 1 + pct], drawn from a generator
    seeded by (seed, rank): no two ranks alike, the same files for the same seed."""
    rng = random.Random(seed * 1_000_003 + rank)
    for n in nodes:
        if n.type == pb.COMP_NODE and n.duration_micros:
            n.duration_micros = max(0, round(n.duration_micros * rng.uniform(1.0 - pct, 1.0 + pct)))


def _choose_model_parallel(wl: TextWorkload, num_npus: int, given: int | None,
                           notes: list[str]) -> int | None:
    if wl.kind not in _HYBRID:
        if given is not None:
            notes.append(f"--model-parallel-size {given} ignored: {wl.kind} uses the whole world")
        return None
    if given is not None:
        if wl.model_parallel_size is not None and given != wl.model_parallel_size:
            notes.append(f"model-parallel group size {given} (option) instead of the file's "
                         f"model_parallel_NPU_group: {wl.model_parallel_size}")
        m = given
        source = "option"
    elif wl.model_parallel_size is not None:
        m, source = wl.model_parallel_size, "model_parallel_NPU_group"
    else:
        m, source = default_model_parallel_size(num_npus), "default: largest divisor of N not above sqrt(N)"
    if m < 1 or num_npus % m:
        raise UsageError(f"{wl.kind}: the model-parallel group size {m} ({source}) does not divide "
                         f"--num-npus {num_npus}; pick N as a multiple of {m}")
    notes.append(f"model-parallel groups of {m} ranks, data-parallel groups of {num_npus // m} ({source})")
    return m
