"""A data-parallel job's layout: which ranks form one replica of the model, which process groups span the
replicas, and how the ranks and groups of a job with more replicas follow from it (``chakra extrapolate``).

A rank's global number is read as three coordinates, ``rank = o * t * D + k * t + i``: ``k`` the replica
(its data-parallel index, ``D`` replicas), ``i`` the position inside a stride ``t`` below it (e.g. its
tensor-parallel rank) and ``o`` a coordinate above it (e.g. a pipeline stage laid out outermost); one
replica is the ``R = N / D`` ranks of one ``k``.  The groups are of three kinds:

* the **world** (``pg_name`` ``""``, or a table entry listing every rank or none): all ranks; it grows to
  all ``M``;
* **data-parallel** groups: ``{o t D + k t + i : k < D}`` for one ``(o, i)``, the same ``(t, D)`` for
  all; each grows to the ``D' = M / R`` replicas (a gradient all-reduce over it keeps its per-rank bytes);
* groups **inside a replica** (one ``k``: tensor-parallel, pipeline, ...): kept, with their ranks
  renumbered, and copied for every new replica ``k' >= D`` under a new pg id, from replica ``k' mod D``.

A job of ``M`` ranks is ``D'`` replicas; its rank ``(o, k', i)`` is modelled on the measured rank
``(o, k' mod D, i)``.  With ``o`` always 0 (the replica index outermost, as ``chakra_generator`` and
ASTRA-sim's text workloads lay a hybrid job out) that is measured rank ``r mod N``.

Which groups are the data-parallel ones: ``dp_groups`` names them; else the groups' descriptions, where
the job gave them (PyTorch's ``pg_desc``: ``DATA_PARALLEL_GROUP``, ``mesh_dp`` say data-parallel,
``TENSOR_MODEL_PARALLEL_GROUP``, ``tp_subgroup`` say inside a replica, :class:`Hints`), when they fit the
ranks; else their shape: among the ``(t, D)`` for which every group is the world, data-parallel or inside a
replica, and every send/recv pair inside one replica, the one with ``o`` always 0 and data-parallel groups
first, then (``o`` always 0) the smallest replica holding every other group, then the largest ``t``.  A job
with no group besides the world and no send/recv is ``N`` replicas of one rank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chakra.errors import UsageError

WORLD_NAMES = ("", "0")


@dataclass(slots=True)
class Layout:
    """The measured job's layout (module doc): ``n`` ranks as ``o x D x t``."""

    n: int
    t: int
    d: int
    groups: dict[str, tuple[int, ...]]          # every named group, its ranks as listed (world: all)
    world: list[str]                             # names of groups that are the world
    dp: list[str]                                # data-parallel groups (grow)
    inside: dict[str, int]                       # group -> the replica k it lies in
    how: str = ""                                # how the layout was found (for the report)

    @property
    def outer(self) -> int:
        return self.n // (self.t * self.d)

    @property
    def replica(self) -> int:
        """Ranks per replica (``R``): a job grows by whole replicas."""
        return self.n // self.d

    def coords(self, rank: int, d: int | None = None) -> tuple[int, int, int]:
        """``(o, k, i)`` of ``rank`` in a job of ``d`` replicas (default: the measured one)."""
        d = self.d if d is None else d
        return rank // (self.t * d), (rank // self.t) % d, rank % self.t

    def rank(self, o: int, k: int, i: int, d: int) -> int:
        return o * self.t * d + k * self.t + i

    def source(self, rank: int, m: int) -> int:
        """The measured rank that rank ``rank`` of a job of ``m`` ranks is modelled on."""
        o, k, i = self.coords(rank, m // self.replica)
        return self.rank(o, k % self.d, i, self.d)

    def moved(self, measured: int, k: int, m: int) -> int:
        """Measured rank ``measured`` as it is in replica ``k`` of a job of ``m`` ranks."""
        o, _, i = self.coords(measured)
        return self.rank(o, k, i, m // self.replica)

    def describe(self) -> str:
        shape = f"{self.replica} rank{'s' if self.replica != 1 else ''} per replica, {self.d} " \
            f"replica{'s' if self.d != 1 else ''}"
        if self.outer > 1:
            shape += f" (replica k holds ranks o*{self.t * self.d} + k*{self.t} + i, i < {self.t}, " \
                     f"o < {self.outer})"
        return shape + (f"; {self.how}" if self.how else "")


@dataclass(slots=True)
class Grown:
    """The groups of the larger job: ``groups`` (name -> ranks, the world included when named) and, per
    group inside a replica, the name it has in each new replica (``renamed[(name, k)]``, ``k >= D``)."""

    m: int
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    renamed: dict[tuple[str, int], str] = field(default_factory=dict)
    new: list[tuple[str, str, int]] = field(default_factory=list)   # (new name, its model, replica k)

    def name_in(self, name: str, k: int) -> str:
        return self.renamed.get((name, k), name)


def _is_world(name: str, ranks: Sequence[int], n: int) -> bool:
    """A group of every rank: pg ``""``, a table entry without ranks, or one that lists them all."""
    return name == "" or not ranks or sorted(ranks) == list(range(n))


@dataclass(slots=True)
class Hints:
    """What the files say of the layout besides the groups' ranks: each group's description (a table's
    ``pg_desc``) and the ranks that exchange send/recv (one replica holds both)."""

    descs: dict[str, str] = field(default_factory=dict)
    pairs: set[tuple[int, int]] = field(default_factory=set)

    def kind(self, name: str) -> str | None:
        """``"dp"`` for a description of a data-parallel group (``DATA_PARALLEL_GROUP``, ``mesh_dp``,
        ``dp_replicate``), ``"inside"`` for one of a group inside a replica (``tp_subgroup``,
        ``TENSOR_MODEL_PARALLEL_GROUP``, ``pipeline``, ``cp``, ``expert``), else None."""
        words = set(re.split(r"[^a-z]+", self.descs.get(name, "").lower()))
        if words & {"dp", "data", "replicate", "ddp", "fsdp", "hsdp"}:
            return "dp"
        if words & {"tp", "tensor", "model", "pipeline", "pp", "cp", "context", "expert", "ep", "mp"}:
            return "inside"
        return None


def _classify(groups: Mapping[str, tuple[int, ...]], world: list[str], n: int, t: int, d: int,
              dp_names: set[str] | None, hints: Hints) -> tuple[list[str], dict[str, int]] | str:
    """Data-parallel groups and the replica of every other one under ``(t, d)``, or why they do not fit."""
    lay = Layout(n, t, d, {}, [], [], {})
    dp: list[str] = []
    inside: dict[str, int] = {}
    for name, ranks in groups.items():
        if name in world:
            continue
        ks = {lay.coords(r)[1] for r in ranks}
        s = sorted(ranks)
        progression = d >= 2 and len(s) == d and s == [s[0] + j * t for j in range(d)] \
            and lay.coords(s[0])[1] == 0
        want_dp = (progression and hints.kind(name) != "inside") if dp_names is None else name in dp_names
        if want_dp:
            if not progression:
                return f"group {name!r} {_short(ranks)} is not {d} ranks {t} apart"
            dp.append(name)
        elif len(ks) == 1:
            inside[name] = ks.pop()
        else:
            return (f"group {name!r} {_short(ranks)} spans replicas {sorted(ks)[:4]} without being "
                    "data-parallel")
    for a, b in sorted(hints.pairs):
        if lay.coords(a)[1] != lay.coords(b)[1]:
            return f"ranks {a} and {b} exchange send/recv, which would cross replicas"
    return dp, inside


def _short(ranks: Sequence[int]) -> str:
    s = list(ranks)
    return str(s) if len(s) <= 8 else f"[{', '.join(map(str, s[:6]))}, ... {s[-1]}] ({len(s)} ranks)"


def find_layout(groups: Mapping[str, tuple[int, ...]], n: int, dp_groups: Sequence[str] | None = None,
                hints: Hints | None = None) -> Layout:
    """The layout of a job of ``n`` ranks with these groups (module doc).  ``groups``: name -> ranks (``()``:
    the world); ``dp_groups``: the names of its data-parallel groups (``[]``: none, the world alone joins
    the replicas), else those whose descriptions say so (``hints``), else found by shape.  A UsageError
    says why no layout fits the named groups."""
    hints = hints or Hints()
    full = {name: tuple(ranks) if ranks else tuple(range(n)) for name, ranks in groups.items()}
    for name, ranks in full.items():
        bad = [r for r in ranks if not 0 <= r < n]
        if bad:
            raise UsageError(f"process group {name!r} lists rank {bad[0]}, not one of the job's {n} ranks")
    world = [name for name in full if _is_world(name, groups[name], n) and hints.kind(name) != "inside"]
    if dp_groups is not None:
        named = {x for x in dp_groups if x not in world}
        unknown = sorted(named - set(full))
        if unknown:
            raise UsageError(f"--dp-groups names {', '.join(map(repr, unknown))}: no such process group "
                             f"(the job's: {', '.join(map(repr, sorted(full))) or 'none'})")
        if named:
            return _named_layout(full, world, n, named, hints, "--dp-groups")
        return _by_shape(full, world, n, named, hints, "--dp-groups none")
    said = {name for name in full if name not in world and hints.kind(name) == "dp"}
    if said:
        try:
            return _named_layout(full, world, n, said, hints, "by their descriptions")
        except UsageError as exc:      # the descriptions do not fit the ranks: by shape, saying so
            lay = _by_shape(full, world, n, None, hints, "by shape")
            lay.how += f" (not the descriptions' data-parallel groups: {exc.message})"
            return lay
    return _by_shape(full, world, n, None, hints, "by shape")


def _named_layout(full: Mapping[str, tuple[int, ...]], world: list[str], n: int, named: set[str],
                  hints: Hints, how: str) -> Layout:
    t, d = _named_shape(full, sorted(named), n)
    got = _classify(full, world, n, t, d, named, hints)
    if isinstance(got, str):
        raise UsageError(f"the process groups fit no layout with data-parallel groups "
                         f"{', '.join(map(repr, sorted(named)))}: {got}")
    lay = Layout(n, t, d, dict(full), world, *got)
    lay.how = _how(lay, how)
    return lay


def _by_shape(full: Mapping[str, tuple[int, ...]], world: list[str], n: int, named: set[str] | None,
              hints: Hints, how: str) -> Layout:
    fits: list[tuple[tuple[int, int, int], Layout]] = []
    for d in (x for x in range(1, n + 1) if n % x == 0):
        for t in (x for x in range(1, n // d + 1) if (n // d) % x == 0):
            if d == 1 and t != n:
                continue       # one replica: the whole job (t = n), whatever t would say
            got = _classify(full, world, n, t, d, named, hints)
            if isinstance(got, str):
                continue
            dp, inside = got
            outer_one = t * d == n
            # preference (module doc): o always 0 with dp groups, then o always 0 (smallest replica), then
            # the largest t
            kind = 0 if outer_one and dp else 1 if outer_one else 2
            lay = Layout(n, t, d, dict(full), world, dp, inside)
            fits.append(((kind, n // d if kind == 1 else 0, -t), lay))
    # (one replica of the whole job always fits: every group and send/recv pair lies inside it)
    fits.sort(key=lambda kv: kv[0])
    lay = fits[0][1]
    lay.how = _how(lay, how)
    return lay


def _named_shape(full: Mapping[str, tuple[int, ...]], named: list[str], n: int) -> tuple[int, int]:
    """``(t, D)`` of the data-parallel groups the user named: each ``D >= 2`` ranks ``t`` apart."""
    shapes = {}
    for name in named:
        s = sorted(full[name])
        t = s[1] - s[0] if len(s) >= 2 else 0
        if len(s) < 2 or s != [s[0] + j * t for j in range(len(s))]:
            raise UsageError(f"--dp-groups: group {name!r} {_short(full[name])} is not a data-parallel group "
                             "(two ranks or more, evenly spaced: one per replica)")
        shapes[name] = (t, len(s))
    if len(set(shapes.values())) > 1:
        a, b = sorted(shapes, key=lambda x: shapes[x])[::len(shapes) - 1]
        raise UsageError(f"--dp-groups: group {a!r} {_short(full[a])} and group {b!r} {_short(full[b])} "
                         "differ in size or spacing (every data-parallel group has one rank per replica)")
    t, d = next(iter(shapes.values()))
    if n % (t * d):
        raise UsageError(f"--dp-groups: {d} replicas {t} ranks apart do not divide the job's {n} ranks")
    return t, d


def _how(lay: Layout, how: str) -> str:
    parts = []
    if lay.dp:
        parts.append(f"data-parallel group{'s' if len(lay.dp) > 1 else ''} {', '.join(map(repr, lay.dp))} "
                     f"({how})")
    elif lay.d == 1:
        parts.append("no data-parallel group: the measured job is one replica")
    if lay.world:
        parts.append(f"world {', '.join(map(repr, lay.world))}")
    if lay.inside:
        parts.append(f"{len(lay.inside)} group{'s' if len(lay.inside) > 1 else ''} inside a replica")
    return "; ".join(parts)


def grow(lay: Layout, m: int) -> Grown:
    """The groups of a job of ``m`` ranks (module doc); a UsageError when ``m`` is no multiple of the
    replica."""
    check_size(lay, m)
    d2 = m // lay.replica
    out = Grown(m)
    for name in lay.world:
        out.groups[name] = tuple(range(m))
    for name in lay.dp:
        ranks = lay.groups[name]
        first = ranks[0]
        out.groups[name] = tuple(lay.moved(r, lay.coords(r)[1], m) for r in ranks) + \
            tuple(lay.moved(first, k, m) for k in range(lay.d, d2))
    for name, k in lay.inside.items():
        out.groups[name] = tuple(lay.moved(r, k, m) for r in lay.groups[name])
    numbers = [int(x) for x in lay.groups if x.isdigit()]
    nxt = max(numbers, default=0) + 1
    for k2 in range(lay.d, d2):
        for name, k in lay.inside.items():
            if k != k2 % lay.d:
                continue
            new = str(nxt)
            nxt += 1
            out.renamed[(name, k2)] = new
            out.groups[new] = tuple(lay.moved(r, k2, m) for r in lay.groups[name])
            out.new.append((new, name, k2))
    return out


def check_size(lay: Layout, m: int) -> None:
    """``m`` must be at least the measured ranks and a whole number of replicas (UsageError: why not)."""
    if m < lay.n:
        raise UsageError(f"--ranks {m}: extrapolation grows a job; the measured job has {lay.n} ranks")
    if m % lay.replica:
        lo = m // lay.replica * lay.replica
        raise UsageError(
            f"--ranks {m} is not a multiple of the replica size {lay.replica} ({lay.describe()}): the job "
            f"grows by whole replicas, e.g. {max(lo, lay.n)} or {lo + lay.replica} ranks")
