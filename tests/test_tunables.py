"""chakra.tunables is the one home of the toolkit's tunables and docs/tunables.md gives each one's reasons:
every tunable is documented with its value, and no other module defines a number that is not a format
value or a code (docs/tunables.md, "Not tunables")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from chakra import tunables

SRC = Path(__file__).resolve().parent.parent / "src" / "chakra"
DOC = SRC.parent.parent / "docs" / "tunables.md"

#: module -> its numbers that are not choices: format values, codes, sentinels (docs/tunables.md)
NOT_TUNABLES = {
    "formats.py": {"VARINT", "LEN", "VARINT_MAX", "U64_MAX", "I64_MIN", "I64_MAX", "I32_MIN", "I32_MAX"},
    "job/network.py": {"GIB"},
    "link/gpu.py": {"PRE_TRACE"},
    "replay/etdecode.py": {"_FIRST_KEY"},
    "replay/graph.py": {"COMM_STREAM"},
    "tools/jsonizer.py": {"VERSION"},
    "io/forkmap.py": {"_UNPICKLABLE", "_UNWRITABLE"},
    "host/loader.py": {"_STD_DEFAULTS"},
    "replay/engine.py": {"_CPU", "_GPU_COMP", "_GPU_COMM"},
    "replay/lanes.py": {"_WAITING", "_STARTED", "_ENDED"},
    "replay/materialize.py": {"CPU", "GPU", "COMM"},
    "device/model.py": {"HOST_OP", "ANNOTATION", "RUNTIME", "LAUNCH", "SYNC", "DRIVER", "KERNEL", "MEMCPY",
                        "MEMSET", "FLOW", "OTHER"},
}


def _tunables() -> dict[str, object]:
    return {name: value for name, value in vars(tunables).items() if name.isupper()}


def _is_number(node: ast.expr) -> bool:
    """A literal number, or numbers combined (``4 << 20``, ``-1``, ``(8, 3)``)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_number(node.left) and _is_number(node.right)
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and any(_is_number(e) for e in node.elts)
    return False


def _numbers_defined(path: Path) -> set[str]:
    """Upper-case names a module (or a class of it) sets to a number."""
    tree = ast.parse(path.read_text(), str(path))
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    found = set()
    for body in bodies:
        for node in body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
            for t in targets:
                names = t.elts if isinstance(t, ast.Tuple) else [t]
                found.update(n.id for n in names if isinstance(n, ast.Name) and n.id.lstrip("_")[:1].isupper()
                             and _is_number(node.value))
    return found


def test_every_tunable_is_documented_with_its_value():
    written = dict(re.findall(r"\*\*`([A-Z][A-Z0-9_]*) = ([^`]+)`\*\*", DOC.read_text()))
    assert set(written) == set(_tunables())
    assert {name: eval(text, {}) for name, text in written.items()} == _tunables()   # noqa: S307
    assert tunables.ETPLUS_WRITE_PIECE_COST == 2_000 and tunables.ET_WRITE_PIECE_NODES == 30_000


def test_no_other_module_defines_a_tunable():
    extra = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "tunables.py" or rel.endswith("_pb2.py"):
            continue
        names = _numbers_defined(path) - NOT_TUNABLES.get(rel, set())
        if names:
            extra[rel] = sorted(names)
    assert not extra


def test_the_check_sees_module_and_class_numbers(tmp_path: Path):
    p = tmp_path / "m.py"
    p.write_text("A = 4 << 20\n_B: int = -1\nC = 'x'\nD, E = (1, 2)\nclass K:\n    F = 0.2\n    g = 3\n")
    assert _numbers_defined(p) == {"A", "_B", "D", "E", "F"}
