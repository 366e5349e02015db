"""The package is layered: a stage imports only the stages below it (docs/design.md, "Layers"), read off
the source with ``ast`` (module-level and function-level imports alike)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "chakra"

#: bottom to top; a package may import its own modules and any package of a lower layer
LAYERS: list[tuple[str, ...]] = [
    ("__init__", "errors", "formats", "lazy", "schema", "tunables"),
    ("io",),
    ("host", "device"),
    ("link",),
    ("convert",),
    ("job",),
    ("replay",),
    ("pipeline",),
    ("tools",),
    ("cli", "src"),
]
LEVEL = {pkg: k for k, pkgs in enumerate(LAYERS) for pkg in pkgs}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports() -> dict[str, set[str]]:
    modules = {_module(p) for p in SRC.rglob("*.py")}
    return {_module(path): _imports_of(path.read_text(), str(path), modules) for path in SRC.rglob("*.py")}


def _imports_of(source: str, name: str, modules: set[str]) -> set[str]:
    """The chakra modules a source file imports (``modules``: those that exist)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "chakra":
            found.add(node.module)
            # `from pkg import module` imports the module
            found.update(m for m in (f"{node.module}.{a.name}" for a in node.names) if m in modules)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "chakra")
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.startswith("chakra.")
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            found.add(node.args[0].value)   # importlib.import_module("chakra.x") imports chakra.x too
    return found


def test_every_package_has_a_layer():
    packages = {_package(m) for m in _imports()}
    assert packages <= set(LEVEL), sorted(packages - set(LEVEL))


def test_nothing_imports_upward():
    upward = []
    for module, targets in _imports().items():
        mine = _package(module)
        for t in targets:
            theirs = _package(t)
            if theirs != mine and LEVEL[theirs] > LEVEL[mine]:
                upward.append(f"{module} imports {t}")
    assert not upward, "\n".join(sorted(upward))


def test_a_named_import_module_call_counts_as_an_import():
    src = ("import importlib\nfrom importlib import import_module\n"
           "def f():\n    importlib.import_module('chakra.replay')\n    import_module('chakra.job.match')\n"
           "    importlib.import_module(name)\n")
    assert _imports_of(src, "x.py", set()) == {"chakra.replay", "chakra.job.match"}


def test_no_import_cycles_between_modules():
    """Within a package too: two modules that import each other (at any depth) are one module in disguise."""
    imports = _imports()
    modules = set(imports)
    graph = {m: {t for t in targets if t in modules and t != m} for m, targets in imports.items()}
    assert "chakra.pipeline.run" in graph["chakra.pipeline.commands"]   # `from ... import` counts
    for pkg in [m for m in modules if m.count(".") == 1]:   # a package's __init__ re-exports its modules
        graph[pkg] = {t for t in graph[pkg] if not t.startswith(pkg + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:   # Tarjan's strongly connected components (the graph is a few hundred nodes)
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


TESTS = Path(__file__).resolve().parent
#: tests of the package as a whole (every stage at once), not of one subpackage
WHOLE_PACKAGE_TESTS = {"test_layers.py", "test_properties.py", "test_tunables.py"}
#: test_schema_alias imports the reference-API script to run it, the way a user runs it; it shares nothing
SCRIPT_IMPORTS = {("test_schema_alias.py", "test_reference_api")}


def test_tests_mirror_the_package() -> None:
    """tests/<pkg>/ holds the tests of src/chakra/<pkg>/; shared code lives in tests/helpers/ only."""
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - {"helpers", "data"} <= packages, folders - {"helpers", "data"} - packages
    top = {p.name for p in TESTS.glob("test_*.py")}
    assert top <= WHOLE_PACKAGE_TESTS, top - WHOLE_PACKAGE_TESTS


def test_no_test_module_imports_another() -> None:
    bad = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                last = name.split(".")[-1]
                if last.startswith("test_") and (path.name, last) not in SCRIPT_IMPORTS:
                    bad.append(f"{path.relative_to(TESTS)} imports {name}")
    assert not bad, bad


REPO = SRC.parent.parent
#: where code cites documents: a ``.md`` path inside the repository, or a bare upper-case name (at its root);
#: ``../`` paths are outside it (the simulator's and the corpus's READMEs)
CITATION = re.compile(r'(?<![\w./-])((?:[\w-]+/)+[\w.-]+\.md|[A-Z][A-Z_]*\.md)\b'
                      r'(?:(?:,\s*|\s+)"([^"\n]+)")?')


def test_the_design_doc_lists_these_layers() -> None:
    """docs/design.md, "Layers", is the order this module enforces, so the document cannot drift from it."""
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", (REPO / "docs" / "design.md").read_text(), re.M)
    assert [tuple(re.findall(r"`([^`]+)`", names)) for _, names in rows] == LAYERS


def test_every_document_the_code_cites_exists() -> None:
    """Each document the code names is in the repository, and each section it names (``FILE, "Title"``) is
    a heading of that document."""
    bad = []
    for top in ("src", "tests", "benchmarks", "ci_tools", "trace_collection"):
        for path in sorted((REPO / top).rglob("*.py")):
            for m in CITATION.finditer(path.read_text()):
                doc, section = REPO / m.group(1), m.group(2)
                where = f"{path.relative_to(REPO)} cites {m.group(1)}"
                if not doc.is_file():
                    bad.append(where)
                elif section is not None and not re.search(
                        r"^#+ " + re.escape(section), doc.read_text(), re.M):
                    bad.append(f'{where}, "{section}": no such heading')
    assert not bad, "\n".join(bad)
