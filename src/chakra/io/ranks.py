"""Which files of a folder are which rank's host ET and Kineto trace (the one finder of every multi-rank
command).

Built-in names, name patterns with ``{rank}``, ``host/`` + ``device/`` subfolders, and folders of Kineto
traces alone; :func:`find_ranks` is the one entry point.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from chakra.errors import MISSING_RANKS_OPTION, TraceFormatError, UsageError
from chakra.formats import GROUP_NAME, GROUP_PG_SIZE, GROUP_RANKS
from chakra.io.jsonio import distributed_info, trace_kind
from chakra.io.naming import EITHER_NAMES, HOST_NAMES, KINETO_NAMES, rank_from_filename
from chakra.tunables import PATHS_LISTED_MAX

log = logging.getLogger(__name__)


# Built-in file names (N = the rank, .json or .json.gz), by preference when a rank has several: the folder
# itself before host/ and device/, then the names in this order, then .json before .json.gz.  PARAM's
# rank-N.json names either trace: the subfolder (host/, device/) or the file's content says which.
_HOST_NAMES, _KINETO_NAMES, _EITHER_NAMES = HOST_NAMES, KINETO_NAMES, EITHER_NAMES
_NAMES = _HOST_NAMES + _KINETO_NAMES + _EITHER_NAMES
_NAME_RE = re.compile(r"^(" + "|".join(map(re.escape, _NAMES)) + r")(\d+)\.json(\.gz)?$")
_SUBDIRS = ("", "host", "device")
HOST_PATTERNS = ", ".join(n + "N" for n in _HOST_NAMES)
KINETO_PATTERNS = ", ".join(n + "N" for n in _KINETO_NAMES)
EITHER_PATTERNS = ", ".join(n + "N" for n in _EITHER_NAMES)
RANK_FIELD = "{rank}"


@dataclass(frozen=True, slots=True)
class RankClaim:
    """What a trace says of the job's size: it has at least ranks ``0 .. ranks-1`` (``says``: who says so,
    for a message)."""

    ranks: int
    says: str


def group_claims(groups: Iterable[tuple[str, Sequence[int], int | None]], where: str) -> list[RankClaim]:
    """Claims of a process-group table: ``(name, ranks, size)`` per group; the world's size is the job's
    (a group named ``"0"`` or ``""``, or one with ``default_pg`` semantics), any group's ranks are global
    ranks of the job."""
    out = []
    for name, ranks, size in groups:
        if ranks:
            out.append(RankClaim(max(ranks) + 1, f"process group {name!r} of {where} lists ranks "
                                                  f"{_rank_list(ranks)}"))
        elif size and str(name) in ("", "0"):
            out.append(RankClaim(size, f"the world group of {where} has {size} ranks"))
    return out


def distributed_claims(info: dict[str, Any] | None, where: str) -> list[RankClaim]:
    """Claims of a Kineto trace's ``distributedInfo``: ``world_size``, and its ``pg_config`` groups."""
    if not isinstance(info, dict):
        return []
    out = []
    ws = info.get("world_size")
    if type(ws) is int and ws > 0:
        out.append(RankClaim(ws, f"distributedInfo of {where}: world_size {ws}"))
    groups = []
    for pg in info.get("pg_config") or ():
        if isinstance(pg, dict):
            ranks = [r for r in pg.get(GROUP_RANKS) or () if type(r) is int and r >= 0]
            size = pg.get(GROUP_PG_SIZE)
            groups.append((str(pg.get(GROUP_NAME, "")), ranks, size if type(size) is int else None))
    return out + group_claims(groups, f"distributedInfo of {where}")


def _rank_list(ranks: Iterable[int]) -> str:
    rs = sorted(set(ranks))
    if len(rs) > 3 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"[{rs[0]}..{rs[-1]}]"
    return "[" + ", ".join(map(str, rs)) + "]"


def missing_ranks(held: Iterable[int], claims: Iterable[RankClaim]) -> tuple[list[int], RankClaim] | None:
    """The ranks the job has that are not ``held``, and the largest claim (what says the job has them), or
    None when nothing is missing or no trace says how many ranks the job has (nothing to check)."""
    best = max(claims, key=lambda c: c.ranks, default=None)
    if best is None:
        return None
    have = set(held)
    missing = [r for r in range(best.ranks) if r not in have]
    return (missing, best) if missing else None


def missing_text(missing: list[int], claim: RankClaim, why: dict[int, str] | None = None) -> str:
    """``the job has N ranks (what says so); missing: ranks a, b (what was found of them)``."""
    names = ", ".join(f"{r} ({why[r]})" if why and r in why else str(r) for r in missing)
    return (f"the job has {claim.ranks} ranks ({claim.says}); missing: rank{'s' if len(missing) > 1 else ''} "
            f"{names}")


def check_complete(held: Iterable[int], claims: Iterable[RankClaim], *, allow: bool, doing: str,
                   where: str | os.PathLike[str] | None = None, why: dict[int, str] | None = None) -> None:
    """Refuse (exit 1) a job of which ranks are missing, naming them and what says the job has them; with
    ``allow`` (:data:`MISSING_RANKS_OPTION`), say so in a warning and go on.  ``doing``: what goes on with the
    ranks held ("replaying", ...); ``why``: per missing rank, what was found of it instead."""
    held = sorted(set(held))
    found = missing_ranks(held, claims)
    if found is None:
        return
    text = missing_text(*found, why)
    these = f"rank{'s' if len(held) > 1 else ''} {', '.join(map(str, held))}"
    if allow:
        log.warning("%s%s: %s %s alone (%s)", f"{where}: " if where is not None else "", text, doing, these,
                    MISSING_RANKS_OPTION)
        return
    raise TraceFormatError(f"{text}: give every rank's files, or {MISSING_RANKS_OPTION} to go on with "
                           f"{these} alone", os.fspath(where) if where is not None else None)


class RankFiles(NamedTuple):
    """The inputs of one rank (a tuple: ``rank, host, kineto = files`` works); ``host`` is None when the
    rank's Kineto trace is linked alone."""

    rank: int
    host: Path | None
    kineto: Path


@dataclass(frozen=True, slots=True)
class RankNaming:
    """How the files of a folder are found (``chakra pipeline --host-pattern / --device-pattern /
    --kineto-only``).

    A pattern is a path relative to the folder with ``{rank}`` where the rank is (digits) and shell
    wildcards (``*``, ``?``, ``[...]``) elsewhere, e.g. ``et_{rank}.json`` or
    ``kineto/worker{rank}_*.pt.trace.json``; a pattern ending in ``.json`` also finds ``.json.gz``.  A
    pattern replaces the built-in names of its kind.  ``kineto_only``: every rank from its Kineto trace
    alone, host ETs ignored (also what happens when the folder holds no host ET at all)."""

    host_pattern: str | None = None
    device_pattern: str | None = None
    kineto_only: bool = False


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """``{rank}`` -> a digits group; ``*``, ``?`` and ``[...]`` as in a shell, never across ``/``."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith(RANK_FIELD, i):
            out.append(r"(\d+)")
            i += len(RANK_FIELD)
            continue
        ch = pattern[i]
        if ch == "*":
            out.append(r"[^/]*")
        elif ch == "?":
            out.append(r"[^/]")
        elif ch == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(ch))
            else:
                body = pattern[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + (r"(\.gz)?" if pattern.endswith(".json") else ""))


def _check_pattern(option: str, pattern: str, by_content: bool = False) -> None:
    """A pattern holds ``{rank}`` once; a Kineto pattern (``by_content``) may hold none: each trace is then
    the rank its ``distributedInfo`` records."""
    if pattern.count(RANK_FIELD) != 1 and not (by_content and RANK_FIELD not in pattern):
        raise UsageError(f"{option} {pattern!r}: put {RANK_FIELD} exactly once where the rank is "
                         "(e.g. 'et_{rank}.json')" + (", or nowhere to take each trace's rank from its "
                                                      "distributedInfo" if by_content else ""))
    if pattern.startswith("/") or ".." in Path(pattern).parts:
        raise UsageError(f"{option} {pattern!r}: give a path inside the folder")


def _pattern_files(root: Path, pattern: str, option: str) -> dict[int, Path]:
    """``{rank: file}`` of the files under ``root`` that match ``pattern`` (see :class:`RankNaming`); a
    pattern without ``{rank}`` (Kineto traces): by the rank each trace records."""
    if RANK_FIELD not in pattern:
        globs = [pattern, pattern + ".gz"] if pattern.endswith(".json") else [pattern]
        return _kinetos_by_content(root, [p for g in globs for p in root.glob(g) if p.is_file()],
                                   f"{option} {pattern!r}")
    regex = _pattern_regex(pattern)
    glob = re.sub(r"\*+", "*", pattern.replace(RANK_FIELD, "*"))   # "*{rank}" is one wildcard, not "**"
    found: dict[int, tuple[bool, Path]] = {}
    for g in ([glob, glob + ".gz"] if pattern.endswith(".json") else [glob]):
        for p in root.glob(g):
            m = regex.fullmatch(p.relative_to(root).as_posix())
            if not m or not p.is_file():
                continue
            rank = int(m.group(1))
            gz = bool(m.lastindex and m.lastindex > 1 and m.group(m.lastindex))
            old = found.get(rank)
            if old is None or (old[0] and not gz):
                found[rank] = (gz, p)
            elif old[0] == gz and old[1] != p:
                raise UsageError(f"{option} {pattern!r} matches two files of rank {rank}: "
                                 f"{old[1].relative_to(root)} and {p.relative_to(root)}")
    return {r: v[1] for r, v in found.items()}


def _kinetos_by_content(root: Path, files: Iterable[Path], what: str, have: Iterable[int] = ()
                        ) -> dict[int, Path]:
    """``{rank: file}`` of Kineto traces by the rank their ``distributedInfo`` records, but for the ranks
    of ``have``: a trace that records none is skipped (said at INFO level); a ``.json`` and its
    ``.json.gz`` are one trace (the ``.json`` read); two other traces of one rank are refused, naming both
    (``what``: how they were found)."""
    out: dict[int, Path] = {}
    skip = set(have)
    for p in sorted(files, key=lambda f: (f.name.removesuffix(".gz"), f.name.endswith(".gz"), f)):
        rank = _recorded_rank(distributed_info(p), -1)
        if rank < 0:
            log.info("%s: no rank in its name or its distributedInfo; skipped", p)
            continue
        if rank in skip:
            continue
        old = out.get(rank)
        if old is None:
            out[rank] = p
        elif not (old.parent == p.parent and old.name == p.name.removesuffix(".gz")):
            raise UsageError(f"{root}: {old.relative_to(root)} and {p.relative_to(root)} ({what}) are both "
                             f"rank {rank} by their distributedInfo: keep one trace per rank, or name them "
                             "with --device-pattern (e.g. 'kineto_{rank}.json')")
    return out


def _unnamed_traces(root: Path, sub: str, kind: str) -> list[Path]:
    """The traces of ``kind`` (:func:`trace_kind`) in ``root`` or its ``sub`` folder whose names are none of
    the folder's rank names."""
    return [p for d in (root, root / sub) if d.is_dir() for p in _json_files(d)
            if not _NAME_RE.match(p.name) and trace_kind(p) == kind]


def _unnamed_hosts(root: Path) -> list[Path]:
    """Host ETs in ``root`` or ``host/`` whose names say no rank (this toolkit's ET+ outputs, which do, are
    no input)."""
    return [p for p in _unnamed_traces(root, "host", "host") if rank_from_filename(p) is None]


def _unnamed_kinetos(root: Path, named: dict[int, Path]) -> dict[int, Path]:
    """Kineto traces in ``root`` or ``device/`` whose names say no rank (``tensorboard_trace_handler``'s
    ``WORKER.TIMESTAMP.pt.trace.json``), by the rank their ``distributedInfo`` records, for the ranks no
    built-in name gave (:func:`_kinetos_by_content`)."""
    files = _unnamed_traces(root, "device", "kineto")
    if not files:
        return {}
    return _kinetos_by_content(root, files, "Kineto traces whose names say no rank", named)


def _scan(root: Path, naming: RankNaming | None = None) -> tuple[dict[int, Path], dict[int, Path]]:
    """``(host ETs, Kineto traces)`` by rank: by the patterns of ``naming``, else by the built-in names."""
    naming = naming or RankNaming()
    best_host: dict[int, tuple[tuple[int, int, int], Path]] = {}
    best_kineto: dict[int, tuple[tuple[int, int, int], Path]] = {}
    builtin_host = naming.host_pattern is None and not naming.kineto_only
    builtin_kineto = naming.device_pattern is None
    if builtin_host or builtin_kineto:
        for di, sub in enumerate(_SUBDIRS):
            d = root / sub if sub else root
            if not d.is_dir():
                continue
            for p in d.iterdir():
                m = _NAME_RE.match(p.name)
                if not m or not p.is_file():
                    continue
                prefix = m.group(1)
                kind: str | None
                if prefix in _HOST_NAMES:
                    kind = "host"
                elif prefix in _KINETO_NAMES:
                    kind = "kineto"
                else:  # rank-N: the subfolder says which, else the content
                    kind = {"host": "host", "device": "kineto"}.get(sub) or trace_kind(p)
                    if kind is None:
                        log.warning("%s: neither a host ET ('nodes') nor a Kineto trace ('traceEvents') in "
                                    "its first MiB; skipped", p)
                        continue
                if kind == "host" and not builtin_host or kind == "kineto" and not builtin_kineto:
                    continue
                table = best_host if kind == "host" else best_kineto
                rank = int(m.group(2))
                key = (di, _NAMES.index(prefix), 1 if m.group(3) else 0)
                old = table.get(rank)
                if old is None or key < old[0]:
                    table[rank] = (key, p)
    hosts = {r: v[1] for r, v in best_host.items()}
    kinetos = {r: v[1] for r, v in best_kineto.items()}
    if builtin_kineto:
        for rank, p in _unnamed_kinetos(root, kinetos).items():
            kinetos.setdefault(rank, p)
    if naming.host_pattern is not None and not naming.kineto_only:
        _check_pattern("--host-pattern", naming.host_pattern)
        hosts = _pattern_files(root, naming.host_pattern, "--host-pattern")
    if naming.device_pattern is not None:
        _check_pattern("--device-pattern", naming.device_pattern, by_content=True)
        kinetos = _pattern_files(root, naming.device_pattern, "--device-pattern")
    return hosts, kinetos


def _looked_for(naming: RankNaming, rank: int | None = None, what: str = "both") -> str:
    """What the finder looked for, for an error message (``N`` replaced by ``rank`` when given)."""
    def names(text: str) -> str:
        return text if rank is None else ", ".join(n.replace("N", str(rank)) for n in text.split(", "))

    parts = []
    if what in ("both", "host") and not naming.kineto_only:
        parts.append(f"host ETs matching {naming.host_pattern!r}" if naming.host_pattern is not None
                     else f"host ETs named {names(HOST_PATTERNS)}")
    if what in ("both", "kineto"):
        parts.append(f"Kineto traces matching {naming.device_pattern!r}" if naming.device_pattern is not None
                     else f"Kineto traces named {names(KINETO_PATTERNS)}")
    if (what == "both" or what == "host" and naming.host_pattern is None
            or what == "kineto" and naming.device_pattern is None):
        parts.append(f"either named {names(EITHER_PATTERNS)} (told apart by subfolder or content)")
    builtin = naming.host_pattern is None or naming.device_pattern is None
    where = " (.json or .json.gz, in the folder and its host/ and device/ subfolders)" if builtin else ""
    return "; ".join(parts) + where


_OTHER_NAMES = ("Other names: --host-pattern / --device-pattern, e.g. --device-pattern "
                "'traces/worker{rank}.pt.trace.json'")


def _rank_span(ranks: Iterable[int]) -> str:
    rs = sorted(ranks)
    what = "rank" if len(rs) == 1 else "ranks"
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{what} {rs[0]}-{rs[-1]}"
    return f"{what} " + ", ".join(map(str, rs))


def _some(names: list[str]) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > PATHS_LISTED_MAX else ""
    return ", ".join(names[:PATHS_LISTED_MAX]) + more


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))


def _what_is_there(root: Path, naming: RankNaming, hosts: dict[int, Path], kinetos: dict[int, Path],
                   kineto_only: bool) -> str:
    """Why no rank was found, in words: the traces found without their partner, the JSON files whose names
    say no rank (and what their content is), the traces one folder down."""
    said = []
    if hosts and not kinetos:
        said.append(f"host ETs of {_rank_span(hosts)} ({_some(sorted(p.name for p in hosts.values()))}) "
                    "without Kineto partners: each rank needs its Kineto trace too (a host ET alone converts "
                    "without timing: chakra_converter PyTorch --input HOST_ET)")
    elif hosts and kinetos and not kineto_only:
        said.append(f"host ETs of {_rank_span(hosts)} and Kineto traces of {_rank_span(kinetos)}: no rank "
                    "has both")
    known = {p.resolve() for p in (*hosts.values(), *kinetos.values())}
    others = [p for sub in _SUBDIRS for d in [root / sub if sub else root] if d.is_dir()
              for p in _json_files(d) if p.resolve() not in known]
    if others:
        kinds = [trace_kind(p) for p in others[:20]]
        content = ", ".join(_plural(kinds.count(k), name) for k, name in (("host", "host ET"),
                                                                           ("kineto", "Kineto trace"))
                            if kinds.count(k))
        if content and len(kinds) < len(others):
            content += f" of the first {len(kinds)}"
        said.append(f"{_plural(len(others), 'JSON file')} whose names say no rank: "
                    f"{_some([p.relative_to(root).as_posix() for p in others])}"
                    + (f" (by content: {content})" if content else ""))
    with_ranks, other = [], []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in _SUBDIRS):
        sub_hosts, sub_kinetos = _scan(d, naming)
        ranks = set(sub_kinetos) if kineto_only or not sub_hosts else set(sub_hosts) & set(sub_kinetos)
        if ranks:
            with_ranks.append(f"{d.name}/ ({_plural(len(ranks), 'rank')})")
        elif _json_files(d):
            other.append(f"{d.name}/")
    if with_ranks:
        said.append(f"traces one folder down: {_some(with_ranks)}: give one of those folders")
    if other:
        said.append(f"JSON files of other names one folder down, in {_some(other)}")
    if not said:
        said.append("no JSON file in the folder (nor in host/ or device/)")
    return "Found " + "; ".join(said) + ". " + _OTHER_NAMES


def _recorded_rank(info: dict[str, Any] | None, named: int) -> int:
    """The rank a Kineto trace's ``distributedInfo`` records, else ``named`` (its file name's)."""
    own = (info or {}).get("rank")
    return own if type(own) is int and own >= 0 else named


def _own_ranks(kinetos: dict[int, Path], infos: dict[Path, dict[str, Any] | None], root: Path
               ) -> dict[int, Path]:
    """Kineto traces linked alone, by the rank each records (``distributedInfo.rank``), else by the rank of
    its name ({rank} of the pattern): never a number of a name over the trace's own rank."""
    out: dict[int, Path] = {}
    for named, p in sorted(kinetos.items()):
        rank = _recorded_rank(infos.get(p), named)
        if rank != named:
            log.info("%s: distributedInfo says rank %d (the name says %d): rank %d", p, rank, named, rank)
        if rank in out:
            raise TraceFormatError(f"{out[rank].name} and {p.name} are both rank {rank} (their "
                                   "distributedInfo or their names say so)", os.fspath(root))
        out[rank] = p
    return out


def find_ranks(folder: str | os.PathLike[str], ranks: Iterable[int] | None = None,
               naming: RankNaming | None = None, complete: bool = False, allow_missing: bool | None = None
               ) -> list[RankFiles]:
    """The host ET + Kineto trace of every rank of ``folder``, by rank.

    Looks in ``folder`` itself and in its ``host/`` and ``device/`` subfolders for the built-in names
    (host ETs ``chakra_host_et_N``, ``host_et_N``, ``et_N`` (PARAM), ``pytorch_et_N``; Kineto traces
    ``kineto_N``, ``chakra_device_trace_N``, ``kineto_trace_N``; PARAM's ``rank-N`` / ``rank_N`` /
    ``rankN`` for either, told apart by the subfolder or the file's first MiB; ``.json`` or ``.json.gz``;
    when a rank has several, the folder itself, then the names in that order, then ``.json`` before
    ``.json.gz`` win), or for the patterns of ``naming`` (:class:`RankNaming`).

    When the folder holds Kineto traces and no host ET at all (or ``naming.kineto_only``), every rank
    is its Kineto trace alone (``RankFiles.host`` None).  Otherwise, without ``ranks``, every rank that
    has both files (a rank with only one is skipped with a warning); with ``ranks``, exactly those, and
    a missing file is an error.  Nothing found is a UsageError that lists what was looked for.
    ``complete`` (a whole-job replay, an ASTRA-sim job: every rank is needed): a rank with only one of
    its two files is an error instead of a warning.

    A Kineto trace linked alone is the rank its ``distributedInfo`` records, else the rank of its name.
    ``allow_missing`` (None: not checked): when the Kineto traces' ``distributedInfo`` says how many ranks the
    job has (``world_size``, the process groups' ranks), a rank without its files is an error naming it
    (:func:`check_complete`), or with ``allow_missing`` a warning (the ranks found go on alone).
    """
    naming = naming or RankNaming()
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    hosts, kinetos = _scan(root, naming)
    kineto_only = naming.kineto_only
    if not kineto_only and not hosts and kinetos:
        unnamed = _unnamed_hosts(root)
        if unnamed:
            names = _some([p.relative_to(root).as_posix() for p in unnamed])
            raise UsageError(f"{root}: Kineto traces of {_rank_span(kinetos)} and host ETs whose names say "
                             f"no rank ({names}): name them host_et_N.json or give --host-pattern (or "
                             "--kineto-only to link the Kineto traces alone)")
        log.info("%s: no host ET found (looked for %s): linking each rank's Kineto trace alone", root,
                 _looked_for(naming, what="host"))
        kineto_only = True
    infos = {p: distributed_info(p) for p in kinetos.values()} \
        if kineto_only or allow_missing is not None else {}
    if kineto_only:
        kinetos = _own_ranks(kinetos, infos, root)
    if ranks is not None:
        out = []
        for r in ranks:
            if not kineto_only and r not in hosts:
                raise TraceFormatError(f"no host ET for rank {r} (looked for "
                                       f"{_looked_for(naming, r, 'host')})", os.fspath(root))
            if r not in kinetos:
                raise TraceFormatError(f"no Kineto trace for rank {r} (looked for "
                                       f"{_looked_for(naming, r, 'kineto')})", os.fspath(root))
            out.append(RankFiles(r, None if kineto_only else hosts[r], kinetos[r]))
        return out
    if kineto_only:
        found = sorted(kinetos)
    else:
        found = sorted(set(hosts) & set(kinetos))
    if not found:
        raise UsageError(f"{root}: no traces found; looked for {_looked_for(naming)}. "
                         f"{_what_is_there(root, naming, hosts, kinetos, kineto_only)}")
    partial = [] if kineto_only else sorted(set(hosts) ^ set(kinetos))
    if allow_missing is not None:
        claims = [c for p in kinetos.values() for c in distributed_claims(infos.get(p), p.name)]
        why = {r: f"only a {'host ET' if r in hosts else 'Kineto trace'}" for r in partial}
        # the ranks held are those the traces record where they say (a misnamed file is not a missing rank)
        held = [_recorded_rank(infos.get(kinetos[r]), r) if r in kinetos else r for r in found]
        check_complete(held, claims, allow=allow_missing, doing="going on with", where=root, why=why)
    if not kineto_only:
        if partial and complete and not allow_missing:
            which = ", ".join(f"rank {r} has only a {'host ET' if r in hosts else 'Kineto'} file"
                              for r in partial)
            raise TraceFormatError(f"{which}: the whole job needs every rank's host ET and Kineto trace "
                                   "(without --job and --astrasim the others are done alone)",
                                   os.fspath(root))
        for r in partial:
            log.warning("%s: rank %d has only a %s file; skipped%s", root, r,
                        "host ET" if r in hosts else "Kineto",
                        "" if r in hosts else " (--kineto-only links every rank's Kineto trace alone)")
    return [RankFiles(r, None if kineto_only else hosts[r], kinetos[r]) for r in found]


