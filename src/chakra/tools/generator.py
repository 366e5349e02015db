"""``chakra_generator``: synthetic Chakra ETs that exercise the simulator, one ``PREFIX.<rank>.et`` per rank.

Workloads (``--workloads``, any of):

* ``collectives`` - one collective per file over all N ranks, for every type asked (``all_reduce``,
  ``all_gather``, ``reduce_scatter``, ``all_to_all``) and every size: ``<out>all_reduce_1MiB.<rank>.et``.
  The size is the node's ``comm_size`` as ASTRA-sim reads it (all-gather: what each rank contributes).
* ``basic`` - the reference generator's compute-only set: ``one_comp_node``, ``two_comp_nodes_independent``,
  ``two_comp_nodes_dependent`` (each node ``--compute-us``).  Its metadata and memory-node files are not
  made: the simulator aborts on a METADATA node.
* ``dp`` - a data-parallel training step of ``--layers`` layers: forward, then per layer (last first) the
  weight gradient, its all-reduce of ``--comm-bytes`` over all ranks, which the next compute does not wait
  for, and the input gradient; ``--steps`` steps, each layer's next forward waiting for its all-reduce.
* ``tp`` - a tensor-parallel step: groups of ``--tp-size`` consecutive ranks; each layer's forward and
  input gradient end in an all-reduce of ``--comm-bytes`` in the group (blocking, Megatron style); with
  N > tp-size the weight gradients are all-reduced across the groups too (data parallel), and the groups
  go to ``<out>tp.comm_group.json``.

``dp`` and ``tp`` are written one rank at a time (memory does not grow with ``--num-npus``); ``--jitter PCT
--seed S`` scales each of their compute nodes by its own factor in [1 - PCT/100, 1 + PCT/100], drawn per
rank and node from a generator seeded by S, so that no two ranks are alike (a whole-job replay cannot
recognise equal ranks) and the same seed gives the same files.

``dp`` and ``tp`` are built as ASTRA-sim 1.0 workloads (DATA, HYBRID_TRANSFORMER) by
:mod:`chakra.convert.text`, so they share its node order and checks; ``tp`` is written with its
``astrasim_safe`` rewrite, since the simulator it feeds frees memory twice when one collective type runs in
two groups of a rank.  Every compute node is GPU work (``is_cpu_op`` false) of ``--compute-us``.

Output names: ``--output-prefix out/gen`` gives ``out/gen_all_reduce_1MiB.0.et``; a prefix that is a folder
(``out/``, or an existing directory) gives ``out/all_reduce_1MiB.0.et``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chakra import formats as wire
from chakra import schema as pb
from chakra.convert.text import ET_VERSION, Layer, Phase, TextWorkload, write_workload
from chakra.errors import UsageError
from chakra.io import write_messages

log = logging.getLogger(__name__)

COLLECTIVES: dict[str, int] = {
    c: pb.COLLECTIVE_TYPES[c] for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")}
WORKLOADS = ("collectives", "basic", "dp", "tp")

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """``65536``, ``64K``, ``64KiB``, ``1M``, ``1MiB``, ``2G`` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"size {text!r} is not a byte count (e.g. 65536, 64KiB, 1MiB)")
    value = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if value < 1:
        raise UsageError(f"size {text!r} must be at least 1 byte")
    return value


def size_label(n: int) -> str:
    """1048576 -> ``1MiB``, 65536 -> ``64KiB``, 1000 -> ``1000B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


@dataclass(slots=True)
class GenSpec:
    """What to generate (the command's options)."""

    num_npus: int = 8
    workloads: Sequence[str] = WORKLOADS
    collectives: Sequence[str] = tuple(COLLECTIVES)
    sizes: Sequence[int] = (1 << 16, 1 << 20)
    layers: int = 4
    steps: int = 1
    compute_us: int = 10
    comm_bytes: int = 1 << 20
    tp_size: int | None = None      # None: all ranks
    jitter_pct: float = 0.0         # dp / tp: each compute node's duration x a seeded factor in 1 +- pct/100
    seed: int = 0


@dataclass(slots=True)
class Generated:
    """One workload written: ``prefix.<rank>.et`` for every rank (and its comm-group file, if any)."""

    name: str
    prefix: str
    num_npus: int
    nodes_per_rank: int
    comm_nodes_per_rank: int
    comm_group: str | None = None
    notes: list[str] = field(default_factory=list)


def _check(spec: GenSpec) -> None:
    if spec.num_npus < 1:
        raise UsageError(f"--num-npus must be at least 1 (got {spec.num_npus})")
    bad = [w for w in spec.workloads if w not in WORKLOADS]
    if bad:
        raise UsageError(f"unknown workload {bad[0]!r} (choose from {', '.join(WORKLOADS)}, or all)")
    bad = [c for c in spec.collectives if c not in COLLECTIVES]
    if bad:
        raise UsageError(f"unknown collective {bad[0]!r} (choose from {', '.join(COLLECTIVES)})")
    if spec.num_npus < 2 and any(w != "basic" for w in spec.workloads):
        raise UsageError("collectives need at least 2 ranks: pass --num-npus 2 or more "
                         "(or --workloads basic)")
    for name in ("layers", "steps"):
        if getattr(spec, name) < 1:
            raise UsageError(f"--{name} must be at least 1 (got {getattr(spec, name)})")
    if spec.compute_us < 0:
        raise UsageError(f"--compute-us must not be negative (got {spec.compute_us})")
    if spec.comm_bytes < 1 or any(s < 1 for s in spec.sizes):
        raise UsageError("sizes must be at least 1 byte")
    if not 0.0 <= spec.jitter_pct < 100.0:
        raise UsageError(f"--jitter must be a percentage in [0, 100) (got {spec.jitter_pct:g})")
    tp = spec.tp_size
    if "tp" in spec.workloads and tp is not None and (tp < 2 or spec.num_npus % tp):
        raise UsageError(f"--tp-size {tp} must be at least 2 and divide --num-npus {spec.num_npus}")


def output_base(prefix: str | os.PathLike[str]) -> str:
    """``out/gen`` -> ``out/gen_``; ``out/`` or an existing folder -> ``out/`` (file names follow)."""
    p = os.fspath(prefix)
    if p.endswith(("/", os.sep)) or os.path.isdir(p):
        return os.path.join(p, "")
    return p + "_"


def _make_folder(base: str) -> None:
    """A prefix that names a folder (``out/``) is created, one level only: a missing parent is a typo."""
    folder = os.path.dirname(base)
    if base.endswith(os.sep) and folder and not os.path.isdir(folder):
        if not os.path.isdir(os.path.dirname(folder) or "."):
            raise UsageError(f"output folder {folder}: its parent does not exist")
        os.mkdir(folder)


def generate(spec: GenSpec, output_prefix: str | os.PathLike[str], progress: Any = None) -> list[Generated]:
    """Write every workload of ``spec``; return what was written, in order.  ``progress(name, done, total)``
    is told of each rank written of the training workloads (written one rank at a time)."""
    _check(spec)
    base = output_base(output_prefix)
    _make_folder(base)
    out: list[Generated] = []
    for workload in WORKLOADS:   # a fixed order, whatever the order asked
        if workload not in spec.workloads:
            continue
        if workload == "collectives":
            for name in spec.collectives:
                for size in spec.sizes:
                    out.append(_one_collective(base, spec.num_npus, name, size))
        elif workload == "basic":
            out.extend(_basic(base, spec))
        else:
            out.append(_training(base, spec, workload, progress))
    return out


def _meta(name: str, rank: int, n: int) -> pb.GlobalMetadata:
    return pb.GlobalMetadata(version=ET_VERSION, attr=[
        pb.AttributeProto(name="source", string_val="chakra_generator"),
        pb.AttributeProto(name="workload", string_val=name),
        pb.AttributeProto(name=wire.META_RANK, int64_val=rank),
        pb.AttributeProto(name=wire.META_WORLD_SIZE, int64_val=n),
    ])


_GPU = pb.AttributeProto(name=wire.ATTR_IS_CPU_OP, bool_val=False)


def _write_all(base: str, name: str, n: int, nodes: list[pb.Node]) -> Generated:
    prefix = f"{base}{name}"
    for rank in range(n):
        write_messages(f"{prefix}.{rank}.et", [_meta(name, rank, n), *nodes])
    comm = sum(1 for x in nodes if x.type == pb.COMM_COLL_NODE)
    return Generated(name, prefix, n, len(nodes), comm)


def _one_collective(base: str, n: int, name: str, size: int) -> Generated:
    node = pb.Node(id=0, name=name.upper(), type=pb.COMM_COLL_NODE, attr=[
        _GPU,
        pb.AttributeProto(name=wire.ATTR_COMM_TYPE, int64_val=COLLECTIVES[name]),
        pb.AttributeProto(name=wire.ATTR_COMM_SIZE, int64_val=size),
        pb.AttributeProto(name=wire.ATTR_PG_NAME, string_val="0"),
    ])
    return _write_all(base, f"{name}_{size_label(size)}", n, [node])


def _basic(base: str, spec: GenSpec) -> list[Generated]:
    def comp(i: int, deps: Sequence[int] = ()) -> pb.Node:
        return pb.Node(id=i, name="COMP_NODE", type=pb.COMP_NODE, duration_micros=spec.compute_us,
                       data_deps=list(deps), attr=[_GPU])

    n = spec.num_npus
    return [_write_all(base, "one_comp_node", n, [comp(0)]),
            _write_all(base, "two_comp_nodes_independent", n, [comp(0), comp(1)]),
            _write_all(base, "two_comp_nodes_dependent", n, [comp(0), comp(1, [0])])]


def _training(base: str, spec: GenSpec, workload: str, progress: Any = None) -> Generated:
    c, s = spec.compute_us, spec.comm_bytes
    if workload == "dp":
        kind, mp = "DATA", None
        layer = Layer("layer", Phase(c, None, 0), Phase(c, None, 0), Phase(c, pb.ALL_REDUCE, s), 0)
    else:
        kind, mp = "HYBRID_TRANSFORMER", spec.tp_size or spec.num_npus
        ar = Phase(c, pb.ALL_REDUCE, s)
        layer = Layer("layer", ar, ar, ar, 0)
    layers = tuple(Layer(f"layer{i}", layer.fwd, layer.ig, layer.wg, 0) for i in range(spec.layers))
    wl = TextWorkload(path=f"generator:{workload}", kind=kind, layers=layers, model_parallel_size=mp)
    prefix = f"{base}{workload}"
    # cycle_ns=1000: the workload's "cycles" are the microseconds asked for
    tick = (lambda done: progress(workload, done, spec.num_npus)) if progress is not None else None
    rep = write_workload(wl, prefix, spec.num_npus, spec.steps, cycle_ns=1000.0, astrasim_safe=True,
                         source="chakra_generator", jitter=spec.jitter_pct / 100.0, seed=spec.seed,
                         progress=tick)
    return Generated(workload, prefix, spec.num_npus, rep.nodes_per_rank[0], rep.comm_nodes_per_rank[0],
                     rep.comm_group_path, rep.notes)
