"""Draw a Chakra ET: ``.pdf``/``.png``/``.svg`` through graphviz's ``dot``, ``.dot`` text, ``.graphml``.

An ET+ JSON input is drawn too, with its call tree (parent -> child) as the solid edges.

A real trace has thousands of nodes; graphviz takes minutes and draws an unreadable hairball past a few
thousand, so drawing formats refuse graphs larger than ``max_nodes`` with a message saying how to narrow
them (``.graphml`` is data for other tools, not a drawing, and has no limit).  Filters, applied in this order:
``rank`` (which file of several), ``node_range`` (ids A..B inclusive), ``name`` (regular expression searched
in the node name), ``head`` (the first N remaining nodes in file order).  Only the edges between kept nodes
are drawn: ctrl deps solid, data deps dashed.  Labels: id, name (cut to 48 characters), type, CPU/GPU side,
duration.  Layout: top-to-bottom, or left-to-right when the graph is much wider than deep (``layout="auto"``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chakra.errors import ChakraError, TraceFormatError, UsageError
from chakra.io import atomic_output
from chakra.tools.stats import EtGraph, GraphNode, load_graph, warn_graph_problems

DEFAULT_MAX_NODES = 2000
DRAW_FORMATS = ("pdf", "png", "svg")
FORMATS = (*DRAW_FORMATS, "dot", "graphml")
LABEL_NAME_MAX = 48

# fill colours per kind (graphviz X11 names)
_COLORS = {
    ("COMP_NODE", True): "lightblue",
    ("COMP_NODE", False): "palegreen",
    ("COMM_COLL_NODE", False): "orange",
    ("COMM_COLL_NODE", True): "orange",
    ("COMM_SEND_NODE", False): "gold",
    ("COMM_RECV_NODE", False): "khaki",
    ("METADATA_NODE", None): "lightgrey",
}


@dataclass(slots=True)
class Selection:
    """The nodes kept and the edges among them."""

    graph: EtGraph
    nodes: list[GraphNode]
    ctrl_edges: list[tuple[int, int]]   # (dep, node)
    data_edges: list[tuple[int, int]]


def output_format(path: str | os.PathLike[str]) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise UsageError(f"unsupported output format {suffix or '(none)'!r} of {path}: use one of "
                         + ", ".join("." + f for f in FORMATS))
    return suffix


def parse_range(text: str | None) -> tuple[int | None, int | None]:
    """``"A:B"`` -> (A, B) inclusive; either side may be empty."""
    if text is None:
        return None, None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if not m:
        raise UsageError(f"--node-range {text!r}: expected A:B with node ids (A: or :B also work)")
    lo = int(m.group(1)) if m.group(1) else None
    hi = int(m.group(2)) if m.group(2) else None
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"--node-range {text!r}: the first id is larger than the second")
    return lo, hi


def pick_rank(paths: Sequence[str | os.PathLike[str]], rank: int | None) -> EtGraph:
    """Load the input to draw: the only one, or the one of ``rank`` (from its metadata, else its name)."""
    if not paths:
        raise UsageError("no input file given")
    if rank is None:
        if len(paths) > 1:
            raise UsageError(f"{len(paths)} inputs given: choose one with --rank")
        return load_graph(paths[0])
    seen = []
    for p in paths:
        g = load_graph(p)
        if g.rank == rank or (len(paths) == 1 and g.rank is None):
            return g
        seen.append(f"{Path(p).name}={g.rank}")
    raise UsageError(f"no input is rank {rank} (ranks found: {', '.join(seen)})")


def select(graph: EtGraph, node_range: tuple[int | None, int | None] = (None, None),
           name: str | None = None, head: int | None = None) -> Selection:
    lo, hi = node_range
    pattern = None
    if name is not None:
        try:
            pattern = re.compile(name)
        except re.error as exc:
            raise UsageError(f"--name {name!r} is not a valid regular expression ({exc})") from None
    kept = []
    for n in graph.nodes:
        if lo is not None and n.id < lo:
            continue
        if hi is not None and n.id > hi:
            continue
        if pattern is not None and not pattern.search(n.name):
            continue
        kept.append(n)
        if head is not None and len(kept) >= head:
            break
    ids = {n.id for n in kept}
    ctrl = [(d, n.id) for n in kept for d in dict.fromkeys(n.ctrl_deps) if d in ids]
    data = [(d, n.id) for n in kept for d in dict.fromkeys(n.data_deps) if d in ids]
    return Selection(graph, kept, ctrl, data)


def _label(n: GraphNode) -> str:
    name = n.name if len(n.name) <= LABEL_NAME_MAX else n.name[: LABEL_NAME_MAX - 1] + "…"
    side = {True: "CPU", False: "GPU", None: ""}[n.is_cpu]
    kind = n.kind.replace("_NODE", "")
    extra = f" {n.comm}" if n.comm and n.comm not in ("SEND", "RECV", "UNKNOWN") else ""
    dur = f"{n.dur:g} µs"
    return f"{n.id}: {name}\n{kind}{extra} {side}  {dur}".replace("  ", " ").strip()


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def choose_layout(sel: Selection) -> str:
    """``TB`` for deep graphs, ``LR`` for wide ones.

    Real ETs fan out (one op's output feeds dozens of ops), which top-to-bottom draws as one very wide row of
    wide boxes; left-to-right stacks that row vertically and stays readable.  Levels are longest-path depths
    (Kahn's order over the kept edges; nodes on a cycle keep level 0).
    """
    index = {n.id: i for i, n in enumerate(sel.nodes)}
    succ: list[list[int]] = [[] for _ in sel.nodes]
    indeg = [0] * len(sel.nodes)
    for a, b in dict.fromkeys(sel.ctrl_edges + sel.data_edges):
        succ[index[a]].append(index[b])
        indeg[index[b]] += 1
    level = [0] * len(sel.nodes)
    queue = [i for i, d in enumerate(indeg) if d == 0]
    while queue:
        i = queue.pop()
        for j in succ[i]:
            level[j] = max(level[j], level[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                queue.append(j)
    widths: dict[int, int] = {}
    for lv in level:
        widths[lv] = widths.get(lv, 0) + 1
    depth = len(widths)
    return "LR" if max(widths.values(), default=0) > 2 * depth else "TB"


def to_dot(sel: Selection, layout: str = "auto") -> str:
    """The selection as graphviz text (written by hand: no dependency on pydot's quoting rules)."""
    rank = f" (rank {sel.graph.rank})" if sel.graph.rank is not None else ""
    title = (f"{Path(sel.graph.path).name}{rank} - {len(sel.nodes)} nodes\n"
             "solid: ctrl dep, dashed: data dep; blue CPU, green GPU, orange/yellow comm")
    rankdir = choose_layout(sel) if layout == "auto" else layout
    lines = [
        "digraph chakra_et {",
        f"  label={_dot_quote(title)}; labelloc=t; fontname=Helvetica;",
        f"  rankdir={rankdir}; nodesep=0.25; ranksep=0.35;",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
        "  edge [arrowsize=0.6];",
    ]
    for n in sel.nodes:
        color = _COLORS.get((n.kind, n.is_cpu), "white")
        lines.append(f"  n{n.id} [label={_dot_quote(_label(n))}, fillcolor={color}, "
                     f"tooltip={_dot_quote(n.name)}];")
    for a, b in sel.ctrl_edges:
        lines.append(f"  n{a} -> n{b};")
    for a, b in sel.data_edges:
        lines.append(f"  n{a} -> n{b} [style=dashed, color=gray30];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graphml(sel: Selection, path: str | os.PathLike[str]) -> None:
    import networkx as nx

    g = nx.MultiDiGraph()
    for n in sel.nodes:
        g.add_node(n.id, name=n.name, type=n.kind, duration_micros=n.dur,
                   side={True: "cpu", False: "gpu", None: ""}[n.is_cpu], comm=n.comm or "",
                   comm_size=n.comm_size, pg_name=n.pg_name)
    for a, b in sel.ctrl_edges:
        g.add_edge(a, b, dep="ctrl")
    for a, b in sel.data_edges:
        g.add_edge(a, b, dep="data")
    with atomic_output(path) as fh:
        nx.write_graphml(g, fh)


def render_dot(dot_text: str, fmt: str, path: str | os.PathLike[str]) -> None:
    """Run graphviz's ``dot`` and write its output atomically."""
    exe = shutil.which("dot")
    if exe is None:
        raise ChakraError("graphviz's 'dot' program is not installed; it is needed for "
                          f".{fmt} output (on Debian/Ubuntu: apt-get install graphviz), "
                          "or write .dot / .graphml instead")
    try:
        proc = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, check=False)
    except OSError as exc:
        raise ChakraError(f"could not run graphviz's dot: {exc}") from None
    if proc.returncode != 0 or not proc.stdout:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        last = msg[-1] if msg else "no output"
        raise ChakraError(f"graphviz's dot failed (exit {proc.returncode}): {last}")
    with atomic_output(path) as fh:
        fh.write(proc.stdout)


def visualize(inputs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
              rank: int | None = None, node_range: str | None = None, name: str | None = None,
              head: int | None = None, max_nodes: int = DEFAULT_MAX_NODES, layout: str = "auto") -> Selection:
    """Load, filter and write; returns what was drawn (for the caller's message)."""
    fmt = output_format(output)
    if layout not in ("auto", "TB", "LR"):
        raise UsageError(f"--layout {layout!r}: use auto, TB or LR")
    if max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1")
    if head is not None and head < 1:
        raise UsageError("--head must be at least 1")
    graph = pick_rank(inputs, rank)
    warn_graph_problems(graph)
    sel = select(graph, parse_range(node_range), name, head)
    if not sel.nodes:
        raise TraceFormatError("no node is left after the filters (check --node-range / --name)", graph.path)
    if fmt != "graphml" and len(sel.nodes) > max_nodes:
        raise UsageError(
            f"{len(sel.nodes)} nodes are too many to draw (limit --max-nodes {max_nodes}); narrow the graph "
            "with --node-range A:B, --name REGEX or --head N, raise --max-nodes, or write .graphml"
        )
    if fmt == "graphml":
        write_graphml(sel, output)
    elif fmt == "dot":
        with atomic_output(output) as fh:
            fh.write(to_dot(sel, layout).encode())
    else:
        render_dot(to_dot(sel, layout), fmt, output)
    return sel
