"""Draw a Chakra ET: ``.pdf``/``.png``/``.svg`` through graphviz's ``dot``, ``.dot`` text, ``.graphml``.

An ET+ JSON input is drawn too, with its call tree (parent -> child) as the solid edges.

A real trace has thousands of nodes, and graphviz's ``dot`` layout time grows with the square of nodes +
edges (measured below); so before running it the drawing formats estimate how long ``dot`` will take and
refuse a graph it cannot lay out within ``max_seconds`` (or with more than ``max_nodes`` nodes), saying how to
narrow it or to draw the ``coarse`` view (consecutive ops of one side merged into a few dozen boxes).
``.graphml`` is data for other tools, not a drawing, and has no limit.  While ``dot`` runs a spinner with the
elapsed time and the estimate shows on a terminal; ``dot`` is stopped after ``timeout`` seconds with a message
that says what to do instead.  Filters, applied in this order:
``rank`` (which file of several), ``node_range`` (ids A..B inclusive), ``name`` (regular expression searched
in the node name), ``head`` (the first N remaining nodes in file order).  Only the edges between kept nodes
are drawn: ctrl deps solid, data deps dashed.  Labels: id, name (cut to 48 characters), type, CPU/GPU side,
duration.  Layout: top-to-bottom, or left-to-right when the graph is much wider than deep (``layout="auto"``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chakra.errors import ChakraError, TraceFormatError, UsageError
from chakra.io import atomic_output
from chakra.tools.stats import EtGraph, GraphNode, load_graph, warn_graph_problems

log = logging.getLogger(__name__)

DEFAULT_MAX_NODES = 2000
DEFAULT_MAX_SECONDS = 30.0
DEFAULT_COARSE_BOXES = 60

# dot's time, measured on DLRM rank 0 converted (dlrm_8r_v100, 1,936 nodes, 3,066 edges), its first N nodes
# to SVG, graphviz 2.43 on a 2-core machine shared with other jobs, with the nslimit=1 the dot text sets:
#   200 nodes + 298 edges: 0.7 s;  400 + 601: 3.2 s;  800 + 1,286: 13.8 s;  all 1,936 + 3,082: 112 s (and a
#   crash of dot 2.43).  Quadratic in nodes + edges: t = K * (nodes + edges) ** 2 with K = 3.2e-6 s.
# Without nslimit (dot's default network simplex for x coordinates) 200 nodes took more than 5 minutes.
DOT_SECONDS_K = 3.2e-6
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
    labels: dict[int, str] = field(default_factory=dict)   # node id -> label, instead of the usual one
    merged_from: int = 0                # coarse view: how many nodes were merged into these boxes


def estimate_dot_seconds(nodes: int, edges: int) -> float:
    """How long ``dot`` takes to lay out a graph of this size (the measured model above)."""
    size = nodes + edges
    return DOT_SECONDS_K * size * size


def _side(n: GraphNode) -> str:
    if n.comm:
        return "comm"
    return {True: "CPU", False: "GPU", None: "other"}[n.is_cpu]


def coarsen(sel: Selection, boxes: int = DEFAULT_COARSE_BOXES) -> Selection:
    """A coarser view: consecutive nodes (file order) of one side merged into about ``boxes`` boxes.

    Sides are CPU ops, GPU ops, communication and the rest; each gets boxes in proportion to its nodes
    (at least one).  A box is labelled with its id range, its op count, its total duration and its three
    heaviest op names; an edge is drawn between two boxes when any of their nodes has one (ctrl solid, data
    dashed when there is no ctrl edge).  The order of a trace is kept: the first box of a side holds its
    first ops.
    """
    if boxes < 1:
        raise UsageError("--coarse must be at least 1")
    by_side: dict[str, list[GraphNode]] = {}
    for n in sel.nodes:
        by_side.setdefault(_side(n), []).append(n)
    total = len(sel.nodes)
    box_of: dict[int, int] = {}
    out_nodes: list[GraphNode] = []
    labels: dict[int, str] = {}
    for side, members in by_side.items():
        want = max(1, round(boxes * len(members) / total))
        size = math.ceil(len(members) / want)
        for start in range(0, len(members), size):
            chunk = members[start:start + size]
            first = chunk[0]
            dur = sum(n.dur for n in chunk)
            heavy: Counter[str] = Counter()
            for n in chunk:
                heavy[n.name if len(n.name) <= 32 else n.name[:31] + "…"] += n.dur or 0.0001
            top = ", ".join(name for name, _ in heavy.most_common(3))
            ids = f"{first.id}" if len(chunk) == 1 else f"{first.id}..{chunk[-1].id}"
            label = f"{side}: {len(chunk)} op{'s' if len(chunk) > 1 else ''} (ids {ids}) {dur:,.0f} µs\n{top}"
            box = GraphNode(id=first.id, name=f"{side} ops {ids}", kind=first.kind, is_cpu=first.is_cpu,
                            dur=dur, comm=first.comm if side == "comm" else None)
            out_nodes.append(box)
            labels[box.id] = label
            for n in chunk:
                box_of[n.id] = box.id
    ctrl = list(dict.fromkeys((box_of[a], box_of[b]) for a, b in sel.ctrl_edges if box_of[a] != box_of[b]))
    has_ctrl = set(ctrl)
    data = list(dict.fromkeys((box_of[a], box_of[b]) for a, b in sel.data_edges
                              if box_of[a] != box_of[b] and (box_of[a], box_of[b]) not in has_ctrl))
    out_nodes.sort(key=lambda n: n.id)
    return Selection(sel.graph, out_nodes, ctrl, data, labels, merged_from=len(sel.nodes))


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
    what = (f"{sel.merged_from} nodes merged into {len(sel.nodes)} boxes" if sel.merged_from
            else f"{len(sel.nodes)} nodes")
    title = (f"{Path(sel.graph.path).name}{rank} - {what}\n"
             "solid: ctrl dep, dashed: data dep; blue CPU, green GPU, orange/yellow comm")
    rankdir = choose_layout(sel) if layout == "auto" else layout
    lines = [
        "digraph chakra_et {",
        f"  label={_dot_quote(title)}; labelloc=t; fontname=Helvetica;",
        # nslimit=1 bounds dot's network simplex for x coordinates: without it 200 trace nodes take minutes
        f"  rankdir={rankdir}; nodesep=0.25; ranksep=0.35; nslimit=1;",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
        "  edge [arrowsize=0.6];",
    ]
    for n in sel.nodes:
        color = _COLORS.get((n.kind, n.is_cpu), "white")
        lines.append(f"  n{n.id} [label={_dot_quote(sel.labels.get(n.id) or _label(n))}, fillcolor={color}, "
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


@contextlib.contextmanager
def _spinner(show: bool, text: str) -> Iterator[None]:
    """A spinner with the elapsed time on stderr while ``dot`` works (rich refreshes it in its own thread)."""
    if not show:
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        bar.add_task(text, total=None)
        yield


def render_dot(dot_text: str, fmt: str, path: str | os.PathLike[str], *, timeout: float | None = None,
               progress: bool = False, what: str = "the graph") -> None:
    """Run graphviz's ``dot`` (stopped after ``timeout`` s) and write its output atomically."""
    exe = shutil.which("dot")
    if exe is None:
        raise ChakraError("graphviz's 'dot' program is not installed; it is needed for "
                          f".{fmt} output (on Debian/Ubuntu: apt-get install graphviz), "
                          "or write .dot / .graphml instead")
    try:
        proc = subprocess.Popen([exe, f"-T{fmt}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        raise ChakraError(f"could not run graphviz's dot: {exc}") from None
    try:
        with _spinner(progress, f"graphviz dot: laying out {what}"):
            out, err = proc.communicate(dot_text.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ChakraError(f"graphviz's dot did not finish laying out {what} in {timeout:g} s (--timeout) "
                          "and was stopped: draw a coarser view with --coarse, fewer nodes with --node-range "
                          "A:B, --name REGEX or --head N, or give a longer --timeout", path) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode != 0 or not out:
        msg = err.decode(errors="replace").strip().splitlines()
        last = msg[-1] if msg else "no output"
        how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}")
        raise ChakraError(f"graphviz's dot failed ({how}) on {what}: {last}; a smaller graph (--coarse, "
                          "--head N) may go through")
    with atomic_output(path) as fh:
        fh.write(out)


def visualize(inputs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
              rank: int | None = None, node_range: str | None = None, name: str | None = None,
              head: int | None = None, max_nodes: int = DEFAULT_MAX_NODES, layout: str = "auto",
              coarse: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
              timeout: float | None = None, progress: bool = False) -> Selection:
    """Load, filter (and with ``coarse`` merge into about that many boxes) and write; returns what was
    drawn (for the caller's message).  ``timeout`` defaults to three times the estimate, at least 60 s."""
    fmt = output_format(output)
    if layout not in ("auto", "TB", "LR"):
        raise UsageError(f"--layout {layout!r}: use auto, TB or LR")
    if max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1")
    if head is not None and head < 1:
        raise UsageError("--head must be at least 1")
    if max_seconds <= 0 or (timeout is not None and timeout <= 0):
        raise UsageError("--max-seconds and --timeout must be positive")
    graph = pick_rank(inputs, rank)
    warn_graph_problems(graph)
    sel = select(graph, parse_range(node_range), name, head)
    if not sel.nodes:
        raise TraceFormatError("no node is left after the filters (check --node-range / --name)", graph.path)
    if coarse is not None:
        sel = coarsen(sel, coarse)
    if fmt != "graphml" and len(sel.nodes) > max_nodes:
        raise UsageError(
            f"{len(sel.nodes)} nodes are too many to draw (limit --max-nodes {max_nodes}); narrow the graph "
            f"with --node-range A:B, --name REGEX or --head N, draw --coarse (about {DEFAULT_COARSE_BOXES} "
            "boxes), raise --max-nodes, or write .graphml"
        )
    edges = len(sel.ctrl_edges) + len(sel.data_edges)
    estimate = estimate_dot_seconds(len(sel.nodes), edges)
    what = f"{len(sel.nodes):,} nodes and {edges:,} edges"
    if fmt in DRAW_FORMATS and estimate > max_seconds:
        raise UsageError(
            f"{what}: graphviz's dot would need about {estimate:,.0f} s to lay this out (limit --max-seconds "
            f"{max_seconds:g}); draw a coarser view with --coarse (about {DEFAULT_COARSE_BOXES} boxes of "
            "consecutive ops), narrow it with --node-range A:B, --name REGEX or --head N, raise "
            "--max-seconds, or write .dot / .graphml (no layout)"
        )
    if fmt == "graphml":
        write_graphml(sel, output)
    elif fmt == "dot":
        with atomic_output(output) as fh:
            fh.write(to_dot(sel, layout).encode())
    else:
        if timeout is None:
            timeout = max(60.0, 3 * estimate)
        log.info("%s: laying out %s with graphviz's dot (about %.1f s)", graph.path, what, estimate)
        render_dot(to_dot(sel, layout), fmt, output, timeout=timeout, progress=progress,
                   what=f"{what} (estimated {estimate:,.1f} s)")
    return sel
