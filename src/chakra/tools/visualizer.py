"""Draw a Chakra ET: ``.pdf``/``.png``/``.svg`` through graphviz's ``dot``, ``.dot`` text, ``.graphml``.

An ET+ JSON input is drawn too, with its call tree (parent -> child) as the solid edges.

A real trace has thousands of nodes, and graphviz's ``dot`` layout time grows with the square of nodes +
edges (measured below); so before running it the drawing formats estimate how long ``dot`` will take and
refuse a graph it cannot lay out within ``max_seconds`` (or with more than ``max_nodes`` nodes), saying how to
narrow it or to draw the ``coarse`` view (:mod:`chakra.tools.coarse`: a column per thread or stream, one
box per phase of it and per collective, time running down).  ``.dot`` text and ``.graphml`` need no layout
and are written at any size.  While ``dot`` runs a spinner with the
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
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chakra.errors import ChakraError, TraceFormatError, UsageError
from chakra.io import atomic_output
from chakra.tools.stats import EtGraph, GraphNode, graph_nodes, id_names, load_graph, warn_graph_problems
from chakra.tunables import COARSE_BOXES, DOT_SECONDS_K, DRAW_MAX_NODES, DRAW_MAX_SECONDS, LABEL_NAME_MAX

log = logging.getLogger(__name__)


DRAW_FORMATS = ("pdf", "png", "svg")
FORMATS = (*DRAW_FORMATS, "dot", "graphml")

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
    lanes: list[tuple[str, list[int]]] = field(default_factory=list)   # coarse view: columns (name, boxes)
    lane_edges: list[tuple[int, int]] = field(default_factory=list)    # coarse view: a lane's next box
    rows: list[list[int]] = field(default_factory=list)   # coarse view: boxes side by side, in time order
    left_out: int = 0                   # coarse view: roots and metadata nodes, not in any box


def estimate_dot_seconds(nodes: int, edges: int) -> float:
    """How long ``dot`` takes to lay out a graph of this size (the measured model above)."""
    size = nodes + edges
    return DOT_SECONDS_K * size * size


def coarsen(sel: Selection, boxes: int = COARSE_BOXES) -> Selection:
    """The coarse view (:mod:`chakra.tools.coarse`): one box per phase of a thread or stream, each
    communication op its own box, the dependencies between them; about ``boxes`` boxes when the phases
    that sync points and collectives make are fewer.  A box's id is that of its first op."""
    from chakra.tools.coarse import box_label, coarsen_graph, lane_name

    if boxes < 1:
        raise UsageError("--coarse must be at least 1")
    c = coarsen_graph(sel.nodes, sel.ctrl_edges, sel.data_edges, boxes)
    if not c.boxes:
        raise TraceFormatError("no node is left to draw coarse: the filters kept only roots and metadata "
                               "nodes", sel.graph.path)
    nodes = c.nodes
    # times from the measured window's start (.et), from the first op (ET+: Kineto's clock); none untimed
    origin = (min(n.start for n in nodes) if sel.graph.format != "et" else 0.0) if any(
        n.start for n in nodes) else None
    out: list[GraphNode] = []
    labels: dict[int, str] = {}
    for box in c.boxes:
        first = nodes[box.members[0]]
        comm = first.comm if len(box.members) == 1 else None
        out.append(GraphNode(id=first.id, name=f"{lane_name(box.lane)} from op {first.id}", kind=first.kind,
                             is_cpu=first.is_cpu, dur=sum(nodes[i].dur for i in box.members), comm=comm,
                             comm_size=first.comm_size if comm else 0, start=first.start, lane=box.lane))
        labels[first.id] = box_label(box, nodes, origin)
    ids = [n.id for n in out]
    lanes = []
    for lane, bs in c.lanes.items():
        ops = sum(len(c.boxes[b].members) for b in bs)
        lanes.append((f"{lane_name(lane)}: {ops:,} op{'' if ops == 1 else 's'}", [ids[b] for b in bs]))
    return Selection(sel.graph, out, [(ids[a], ids[b]) for a, b in c.ctrl_edges],
                     [(ids[a], ids[b]) for a, b in c.data_edges], labels, merged_from=len(nodes),
                     left_out=c.left_out,
                     lanes=lanes, lane_edges=[(ids[a], ids[b]) for a, b in c.lane_edges],
                     rows=[[ids[b] for b in row] for row in c.rows])


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
    filtered = not (lo is None and hi is None and pattern is None and head is None)
    which: list[int] = []
    for k, (nid, text) in enumerate(id_names(graph) if filtered else ()):
        if lo is not None and nid < lo:
            continue
        if hi is not None and nid > hi:
            continue
        if pattern is not None and not pattern.search(text):
            continue
        which.append(k)         # positions in file order (a .et's nodes are made for these only)
        if head is not None and len(which) >= head:
            break
    kept = graph_nodes(graph, which if filtered else None)
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
    if sel.lanes:
        left = f"; {sel.left_out:,} roots and metadata nodes left out" if sel.left_out else ""
        title = (f"{Path(sel.graph.path).name}{rank} - {sel.merged_from:,} nodes in {len(sel.nodes)} boxes: "
                 f"the phases of each thread and stream (a column), each collective apart{left}\n"
                 "time runs down; (idle N µs): the lane was idle that long before the phase, (waited): it "
                 "waited for another lane\nsolid: ctrl dep, dashed: data dep, grey: the lane's next phase; "
                 "blue CPU, green GPU, orange/yellow comm")
    else:
        title = (f"{Path(sel.graph.path).name}{rank} - {len(sel.nodes)} nodes\n"
                 "solid: ctrl dep, dashed: data dep; blue CPU, green GPU, orange/yellow comm")
    if layout != "auto":
        rankdir = layout
    else:   # a coarse view is a column per lane, time downwards: it grows tall, not wide
        rankdir = "TB" if sel.lanes else choose_layout(sel)
    lines = [
        "digraph chakra_et {",
        f"  label={_dot_quote(title)}; labelloc=t; fontname=Helvetica;",
        # nslimit=1 bounds dot's network simplex for x coordinates: without it 200 trace nodes take minutes
        f"  rankdir={rankdir}; nodesep=0.25; ranksep={0.15 if sel.lanes else 0.35}; nslimit=1;",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10'
        + (', margin="0.06,0.03"];' if sel.lanes else "];"),
        "  edge [arrowsize=0.6];",
    ]
    for n in sel.nodes:
        color = _COLORS.get((n.kind, n.is_cpu), "white")
        lines.append(f"  n{n.id} [label={_dot_quote(sel.labels.get(n.id) or _label(n))}, fillcolor={color}, "
                     f"tooltip={_dot_quote(n.name)}];")
    if sel.lanes:
        lines += _lane_lines(sel)
    # the coarse view's rows place its boxes: a dependency does not constrain the layout too (a third less
    # of dot's time, narrower)
    free = ", constraint=false" if sel.lanes else ""
    for a, b in sel.ctrl_edges:
        lines.append(f"  n{a} -> n{b}" + (f" [{free[2:]}];" if free else ";"))
    for a, b in sel.data_edges:
        lines.append(f"  n{a} -> n{b} [style=dashed, color=gray30{free}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _lane_lines(sel: Selection) -> list[str]:
    """The coarse view's columns (a cluster per lane: its name on top, its boxes joined in order) and rows
    (``rank=same`` with a node of an invisible spine h -> r0 -> r1 -> ..., so row k is drawn above row
    k + 1; the names are row h)."""
    # newrank: rank=same across clusters; size: at most 41 inches (3,936 px at dot's 96 dpi) wide, a PNG at
    # most 32,767 px tall (cairo's limit): a larger drawing is scaled down to fit
    lines = ['  newrank=true; size="41,340";']
    for k, (name, ids) in enumerate(sel.lanes):
        lines.append(f"  subgraph cluster_{k} {{ label=\"\"; style=rounded; color=gray60; "
                     f"h{k} [shape=plaintext, style=\"\", fontsize=11, label={_dot_quote(name)}]; "
                     + " ".join(f"n{i};" for i in ids) + " }")
        lines.append(f"  h{k} -> n{ids[0]} [style=invis, weight=20];")
    for a, b in sel.lane_edges:
        lines.append(f"  n{a} -> n{b} [color=gray75, arrowhead=none, weight=20];")
    lines.append('  node [shape=point, style=invis, width=0, height=0, label=""];')
    lines.append("  " + " -> ".join(["h", *(f"r{k}" for k in range(len(sel.rows)))]) + " [style=invis];")
    lines.append("  { rank=same; h; " + " ".join(f"h{k};" for k in range(len(sel.lanes))) + " }")
    for k, row in enumerate(sel.rows):
        lines.append(f"  {{ rank=same; r{k}; " + " ".join(f"n{i};" for i in row) + " }")
    return lines


def write_graphml(sel: Selection, path: str | os.PathLike[str]) -> None:
    import networkx as nx

    g: nx.MultiDiGraph[int] = nx.MultiDiGraph()
    for n in sel.nodes:
        g.add_node(n.id, name=n.name, type=n.kind, duration_micros=n.dur,
                   side={True: "cpu", False: "gpu", None: ""}[n.is_cpu], comm=n.comm or "",
                   comm_size=n.comm_size, pg_name=n.pg_name)
    for a, b in sel.ctrl_edges:
        g.add_edge(a, b, dep="ctrl")
    for a, b in sel.data_edges:
        g.add_edge(a, b, dep="data")
    for a, b in sel.lane_edges:
        g.add_edge(a, b, dep="lane")
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


def drawn_size(sel: Selection) -> tuple[int, int]:
    """Nodes and edges of the dot text: a coarse view's lane names, spine and lane order too."""
    nodes = len(sel.nodes)
    edges = len(sel.ctrl_edges) + len(sel.data_edges)
    if sel.lanes:
        nodes += 2 * len(sel.lanes) + len(sel.rows) + 1
        edges += len(sel.lane_edges) + len(sel.lanes) + len(sel.rows)
    return nodes, edges


def _check_drawable(sel: Selection, fmt: str, max_nodes: int, max_seconds: float) -> tuple[float, str]:
    """Refuse a drawing (.pdf/.png/.svg) of more than ``max_nodes`` nodes or that dot would need more than
    ``max_seconds`` to lay out; .dot and .graphml need no layout and are written at any size.  Returns
    the estimate and what is drawn (for messages)."""
    nodes, edges = drawn_size(sel)
    estimate = estimate_dot_seconds(nodes, edges)
    what = f"{len(sel.nodes):,} {'boxes' if sel.lanes else 'nodes'} and {edges:,} edges"
    if fmt not in DRAW_FORMATS:
        return estimate, what
    if sel.lanes and (len(sel.nodes) > max_nodes or estimate > max_seconds):
        comm = sum(1 for n in sel.nodes if n.comm is not None)
        limit = (f"limit --max-nodes {max_nodes}" if len(sel.nodes) > max_nodes else
                 f"graphviz's dot would need about {estimate:,.0f} s, limit --max-seconds {max_seconds:g}")
        raise UsageError(
            f"the coarse view has {len(sel.nodes):,} boxes, too many to draw ({limit}): each of its {comm:,} "
            "communication ops and each point where a thread or stream waits is a box of its own; narrow the "
            "graph with --node-range A:B, raise the limit, or write .dot / .graphml (no layout)")
    if len(sel.nodes) > max_nodes:
        raise UsageError(
            f"{len(sel.nodes)} nodes are too many to draw (limit --max-nodes {max_nodes}); narrow the graph "
            f"with --node-range A:B, --name REGEX or --head N, draw --coarse (the phases of each thread and "
            "stream), raise --max-nodes, or write .dot / .graphml (no layout)")
    if estimate > max_seconds:
        raise UsageError(
            f"{what}: graphviz's dot would need about {estimate:,.0f} s to lay this out (limit --max-seconds "
            f"{max_seconds:g}); draw a coarser view with --coarse (the phases of each thread and stream), "
            "narrow it with --node-range A:B, --name REGEX or --head N, raise --max-seconds, or write .dot / "
            ".graphml (no layout)")
    return estimate, what


def visualize(inputs: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
              rank: int | None = None, node_range: str | None = None, name: str | None = None,
              head: int | None = None, max_nodes: int = DRAW_MAX_NODES, layout: str = "auto",
              coarse: int | None = None, max_seconds: float = DRAW_MAX_SECONDS,
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
    estimate, what = _check_drawable(sel, fmt, max_nodes, max_seconds)
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
