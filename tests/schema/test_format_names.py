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

#: the names as the formats spell them (docs/formats.md); a .et node attribute's constant is ATTR_ and the
#: name in capitals, a GlobalMetadata attribute's META_ and the name, a host ET / ET+ key's the name
ET_ATTRS = tuple("""
    is_cpu_op num_ops tensor_size comm_type comm_priority comm_size comm_seq comm_src comm_dst comm_tag
    pg_name pg_size orig_collective orig_comm_type orig_comm_size orig_pg_name orig_comm_node tid stream
    device rf_id fw_parent seq_id scope fw_tid op_schema timing_piece timing_of host_tid cat correlation
    external_id astrasim_note thread_depth work_before_us tail_us idle_before_us wait_on wait_post_us
    frees_thread""".split())
META_ATTRS = tuple("""rank world_size process_groups measured_start_us measured_dur_us measured_window
    thread_timing experiment_timing""".split())
GROUP_FIELDS = {"GROUP_NAME": "pg_name", "GROUP_DESC": "pg_desc", "GROUP_RANKS": "ranks",
                "GROUP_BACKEND": "backend_config", "GROUP_SIZE": "group_size", "GROUP_PG_SIZE": "pg_size",
                "GROUP_COUNT": "group_count"}
NODE_KEYS = tuple("""rf_id fw_parent fw_tid seq_id scope tid op_schema collective_name pg_name pg_desc pg_size
    comm_size rank world_size process_groups""".split())
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
    for prefix, spelt in (("ATTR_", ET_ATTRS), ("META_", META_ATTRS)):
        assert [getattr(formats, prefix + name.upper(), None) for name in spelt] == list(spelt)
    assert {k: getattr(formats, k, None) for k in GROUP_FIELDS} == GROUP_FIELDS
    assert [getattr(keys, name.upper(), None) for name in NODE_KEYS] == list(NODE_KEYS)
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
    names = {*ET_ATTRS, *META_ATTRS, *GROUP_FIELDS.values(), *NODE_KEYS} - COMMON
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
