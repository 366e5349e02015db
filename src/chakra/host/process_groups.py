"""Process groups: the ``## process_group:init ##`` payload and Kineto ``distributedInfo.pg_config``.

The host ET records one group per record of a JSON list (schema 1.1.0+) or of a
Python ``repr`` of the same list (1.0.x).  A group whose ``ranks`` list is empty
spans the whole world; we resolve it to ``range(world_size)`` so that every
later stage can read global ranks without knowing this convention.

The Python-repr form is parsed with ``ast.literal_eval`` (literals only), never
``eval``: a trace is untrusted input.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from chakra import formats as wire
from chakra.host.model import ProcessGroup

log = logging.getLogger(__name__)

DEFAULT_PG_NAME = "0"


class PayloadError(ValueError):
    """The payload is neither a JSON list nor a Python literal list of group records."""


def _decode_payload(payload: Any) -> list[Any]:
    if isinstance(payload, list):
        return payload
    if not isinstance(payload, str):
        raise PayloadError(f"payload is a {type(payload).__name__}, expected a string")
    text = payload.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            raise PayloadError(
                f"payload is neither JSON nor a Python literal ({exc.__class__.__name__})") from None
    # The simulator's METADATA form wraps the JSON text in a one-element list: "['[{...}]']".
    if isinstance(data, (list, tuple)) and len(data) == 1 and isinstance(data[0], str):
        return _decode_payload(data[0])
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, (list, tuple)):
        raise PayloadError(f"payload decodes to a {type(data).__name__}, expected a list of groups")
    return list(data)


def _as_int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return default


def _record_to_group(rec: Any, i: int) -> ProcessGroup:
    if not isinstance(rec, Mapping):
        raise PayloadError(f"group record {i} is a {type(rec).__name__}, expected an object")
    if wire.GROUP_NAME not in rec:
        raise PayloadError(f"group record {i} has no pg_name")
    ranks = rec.get(wire.GROUP_RANKS) or ()
    if not isinstance(ranks, (list, tuple)):
        raise PayloadError(f"group record {i} ({rec[wire.GROUP_NAME]}): ranks is not a list")
    backend_id = rec.get("backend_id")
    return ProcessGroup(
        pg_name=str(rec[wire.GROUP_NAME]),
        pg_desc=str(rec.get(wire.GROUP_DESC) or ""),
        backend=str(rec.get(wire.GROUP_BACKEND) or rec.get("backend") or ""),
        ranks=tuple(_as_int(r) for r in ranks),
        group_size=_as_int(rec.get(wire.GROUP_SIZE, rec.get(wire.GROUP_PG_SIZE, 0))),
        group_count=_as_int(rec.get(wire.GROUP_COUNT, 0)),
        backend_id=backend_id if isinstance(backend_id, int) and not isinstance(backend_id, bool) else None,
    )


def infer_world_size(groups: Iterable[ProcessGroup]) -> int | None:
    """World size from the default group "0" (its group_size, else its explicit ranks)."""
    for g in groups:
        if g.pg_name == DEFAULT_PG_NAME:
            if g.group_size > 0:
                return g.group_size
            if g.ranks:
                return len(g.ranks)
    return None


def resolve_ranks(groups: list[ProcessGroup], world_size: int | None) -> list[ProcessGroup]:
    """Replace empty ``ranks`` by ``range(world_size)`` in place (and return the list).

    ``world_size`` None: taken from the default group.  A group left with no
    ranks (world size unknown) keeps ``()``.
    """
    if world_size is None:
        world_size = infer_world_size(groups)
    if world_size is None or world_size <= 0:
        return groups
    full = tuple(range(world_size))
    for g in groups:
        if not g.ranks:
            if g.group_size and g.group_size != world_size:
                log.warning(
                    "process group %s: empty ranks but group_size %d != world size %d; using all ranks",
                    g.pg_name, g.group_size, world_size,
                )
            g.ranks = full
            if not g.group_size:
                g.group_size = world_size
    return groups


def parse_pg_init(payload: Any, world_size: int | None = None) -> list[ProcessGroup]:
    """Parse the ``## process_group:init ##`` payload (``inputs.values[0]``).

    Accepts the JSON text (1.1.0+), the Python repr (1.0.x), the simulator's
    ``"['[...]']"`` wrapping, or an already decoded list.  Raises PayloadError
    (a ValueError) on anything else; the loader turns it into a TraceFormatError
    naming the file and node.
    """
    records = _decode_payload(payload)
    groups = [_record_to_group(rec, i) for i, rec in enumerate(records)]
    return resolve_ranks(groups, world_size)


def groups_from_kineto(dist_info: Mapping[str, Any] | list[Any] | None,
                       world_size: int | None = None) -> list[ProcessGroup]:
    """Process groups from Kineto ``distributedInfo`` (or its ``pg_config`` list).

    Kineto writes ``pg_name, pg_desc, backend_config, pg_size, ranks``;
    ``group_count`` comes from ``distributedInfo.pg_count`` when present.
    """
    if dist_info is None:
        return []
    count = 0
    if isinstance(dist_info, Mapping):
        configs = dist_info.get("pg_config") or []
        count = _as_int(dist_info.get("pg_count", 0))
        if world_size is None and dist_info.get("world_size") is not None:
            world_size = _as_int(dist_info.get("world_size"), 0) or None
    else:
        configs = dist_info
    if isinstance(configs, Mapping):  # some PyTorch versions write a dict keyed by pg name
        configs = [dict(v, pg_name=k) if isinstance(v, Mapping) else v for k, v in configs.items()]
    groups = []
    for i, rec in enumerate(configs):
        g = _record_to_group(rec, i)
        if not g.group_count:
            g.group_count = count
        groups.append(g)
    return resolve_ranks(groups, world_size)


def merge_process_groups(primary: list[ProcessGroup], secondary: list[ProcessGroup]) -> list[ProcessGroup]:
    """Union of two group tables by pg_name; ``primary`` wins, empty fields are filled from ``secondary``.

    Order: primary's groups first, then groups only ``secondary`` knows.  Returns new objects.
    """
    out: dict[str, ProcessGroup] = {}
    for g in primary:
        out[g.pg_name] = ProcessGroup(g.pg_name, g.pg_desc, g.backend, g.ranks, g.group_size,
                                      g.group_count, g.backend_id)
    for g in secondary:
        have = out.get(g.pg_name)
        if have is None:
            out[g.pg_name] = ProcessGroup(g.pg_name, g.pg_desc, g.backend, g.ranks, g.group_size,
                                          g.group_count, g.backend_id)
            continue
        have.pg_desc = have.pg_desc or g.pg_desc
        have.backend = have.backend or g.backend
        have.ranks = have.ranks or g.ranks
        have.group_size = have.group_size or g.group_size
        have.group_count = have.group_count or g.group_count
        if have.backend_id is None:
            have.backend_id = g.backend_id
    return list(out.values())


def group_to_record(g: ProcessGroup) -> dict[str, Any]:
    """The ET+ ``process_groups`` record of a group (ranks resolved, as a list)."""
    return {
        wire.GROUP_NAME: g.pg_name,
        wire.GROUP_DESC: g.pg_desc,
        wire.GROUP_BACKEND: g.backend,
        wire.GROUP_RANKS: list(g.ranks),
        wire.GROUP_SIZE: g.group_size,
        wire.GROUP_COUNT: g.group_count,
    }
