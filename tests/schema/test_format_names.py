"""The names of the formats have one home each (docs/formats.md, where the names live): a .et node's
attributes and the GlobalMetadata's in ``chakra.formats`` (``ATTR_*``, ``META_*``), a process-group record's
fields there too (``GROUP_*``), a host ET / ET+ node's keys in ``chakra.host.keys``.  No other module of
``src/`` spells one of them as a string, except where the same spelling means something else (below)."""

from __future__ import annotations

import ast
from pathlib import Path

from chakra import formats
from chakra.host import keys

SRC = Path(__file__).resolve().parents[2] / "src" / "chakra"

#: the names as the formats spell them (docs/formats.md), by their home's constant
ET_ATTRS = {
    "ATTR_IS_CPU_OP": "is_cpu_op", "ATTR_NUM_OPS": "num_ops", "ATTR_TENSOR_SIZE": "tensor_size",
    "ATTR_COMM_TYPE": "comm_type", "ATTR_COMM_PRIORITY": "comm_priority", "ATTR_COMM_SIZE": "comm_size",
    "ATTR_COMM_SEQ": "comm_seq", "ATTR_COMM_SRC": "comm_src", "ATTR_COMM_DST": "comm_dst",
    "ATTR_COMM_TAG": "comm_tag", "ATTR_PG_NAME": "pg_name", "ATTR_PG_SIZE": "pg_size",
    "ATTR_ORIG_COLLECTIVE": "orig_collective", "ATTR_ORIG_COMM_TYPE": "orig_comm_type",
    "ATTR_ORIG_COMM_SIZE": "orig_comm_size", "ATTR_ORIG_PG_NAME": "orig_pg_name",
    "ATTR_ORIG_COMM_NODE": "orig_comm_node", "ATTR_TID": "tid", "ATTR_STREAM": "stream",
    "ATTR_DEVICE": "device",
    "ATTR_RF_ID": "rf_id", "ATTR_FW_PARENT": "fw_parent", "ATTR_SEQ_ID": "seq_id", "ATTR_SCOPE": "scope",
    "ATTR_FW_TID": "fw_tid", "ATTR_OP_SCHEMA": "op_schema", "ATTR_TIMING_PIECE": "timing_piece",
    "ATTR_TIMING_OF": "timing_of", "ATTR_HOST_TID": "host_tid", "ATTR_CAT": "cat",
    "ATTR_CORRELATION": "correlation", "ATTR_EXTERNAL_ID": "external_id",
    "ATTR_ASTRASIM_NOTE": "astrasim_note",
    "ATTR_THREAD_DEPTH": "thread_depth", "ATTR_WORK_BEFORE_US": "work_before_us", "ATTR_TAIL_US": "tail_us",
    "ATTR_IDLE_BEFORE_US": "idle_before_us", "ATTR_WAIT_ON": "wait_on", "ATTR_WAIT_POST_US": "wait_post_us",
    "ATTR_FREES_THREAD": "frees_thread",
    "META_RANK": "rank", "META_WORLD_SIZE": "world_size", "META_PROCESS_GROUPS": "process_groups",
    "META_MEASURED_START_US": "measured_start_us", "META_MEASURED_DUR_US": "measured_dur_us",
    "META_MEASURED_WINDOW": "measured_window", "META_THREAD_TIMING": "thread_timing",
    "META_EXPERIMENT_TIMING": "experiment_timing",
    "GROUP_NAME": "pg_name", "GROUP_DESC": "pg_desc", "GROUP_RANKS": "ranks",
    "GROUP_BACKEND": "backend_config",
    "GROUP_SIZE": "group_size", "GROUP_PG_SIZE": "pg_size", "GROUP_COUNT": "group_count",
}
NODE_KEYS = {
    "RF_ID": "rf_id", "FW_PARENT": "fw_parent", "FW_TID": "fw_tid", "SEQ_ID": "seq_id", "SCOPE": "scope",
    "TID": "tid", "OP_SCHEMA": "op_schema", "COLLECTIVE_NAME": "collective_name", "PG_NAME": "pg_name",
    "PG_DESC": "pg_desc", "PG_SIZE": "pg_size", "COMM_SIZE": "comm_size", "RANK": "rank",
    "WORLD_SIZE": "world_size", "PROCESS_GROUPS": "process_groups",
}
#: spellings other formats use too (Kineto's args and distributedInfo, reports' own keys, Python attribute
#: names): too common to police
COMMON = {"rank", "ranks", "world_size", "tid", "stream", "device", "cat", "correlation", "measured_window"}
#: (module, string): where the spelling means something else
OTHER_MEANING = {
    *(("host/model.py", name) for name in ("rf_id", "fw_parent", "seq_id", "scope", "fw_tid", "op_schema")),
    # (HostOp's fields)
    ("device/decode.py", "rf_id"), ("device/decode.py", "external_id"),   # KinetoEvent fields
    ("link/match.py", "rf_id"),          # the name of a matching method
    ("link/report.py", "host_tid"),      # a key of the link report
    ("tools/stats.py", "pg_name"),       # a column heading
    ("tools/summary.py", "pg_name"), ("tools/summary.py", "pg_desc"),
    ("tools/summary.py", "process_groups"),   # summary.json's own keys
}


def test_each_name_is_defined_once_in_its_home():
    assert {k: getattr(formats, k, None) for k in ET_ATTRS} == ET_ATTRS
    assert {k: getattr(keys, k, None) for k in NODE_KEYS} == NODE_KEYS
    assert formats.COMM_ATTRS == {"comm_type", "comm_size", "pg_name", "comm_priority", "comm_src",
                                  "comm_dst", "comm_tag", "comm_seq", "is_cpu_op"}
    assert formats.THREAD_TIMING_ATTRS == ("thread_depth", "work_before_us", "tail_us", "idle_before_us",
                                           "wait_on", "wait_post_us", "frees_thread")


def _spelt(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """The string constants of ``path`` that are one of ``names``, leaving out docstrings and the names of
    Python attributes (``__slots__``, ``attrgetter(...)``)."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        elif isinstance(node, ast.Call) and "attrgetter" in (getattr(node.func, "id", None),
                                                             getattr(node.func, "attr", None)):
            skip.update(id(a) for a in node.args)
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__slots__" for t in node.targets):
            skip.update(id(c) for c in ast.walk(node.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in skip]


def test_no_module_spells_a_format_name_outside_its_home():
    names = (set(ET_ATTRS.values()) | set(NODE_KEYS.values())) - COMMON
    homes = {SRC / "formats.py", SRC / "host" / "keys.py", SRC / "schema" / "et_def_pb2.py"}
    found = [f"{path.relative_to(SRC)}:{line}: {value!r}"
             for path in sorted(SRC.rglob("*.py")) if path not in homes
             for line, value in _spelt(path, names)
             if (path.relative_to(SRC).as_posix(), value) not in OTHER_MEANING]
    assert not found, "\n".join(found)


def test_a_spelling_in_code_is_found_and_one_in_a_docstring_or_an_attrgetter_is_not(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""pg_name in a docstring"""\nfrom operator import attrgetter\n'
                 'GET = attrgetter("pg_name")\n\n\ndef f(a):\n    return a.get("pg_name"), "pg_name"\n')
    assert _spelt(p, {"pg_name"}) == [(7, "pg_name"), (7, "pg_name")]
