"""Decoding a heavy host ET (and its Kineto trace): generic JSON parsers against typed msgspec decoding.

    python benchmarks/bench_decode.py HOST_ET [--kineto KINETO] [--variants orjson,msgspec,...]

The yardstick for issue 13's typed decoding: how long it takes, and how much memory it holds, to turn the
file into Python objects, before any linking.  Every variant runs in a **fresh subprocess** with the cyclic
GC off (as the loaders run), the input bytes read first (``read s``), then decoded (``decode s``); the
result is kept, like a loader's model.  Reported per variant:

* ``peak MB``: the process's high-water mark (``VmHWM``), input bytes included;
* ``kept MB``: RSS once decoded and the input bytes dropped, minus RSS before reading: what stays in
  memory.  msgspec's ``Raw`` values are views into the input buffer, so with them the whole input stays
  alive (``msgspec``); ``msgspec-copy`` copies each ``Raw`` out (``Raw.copy()``) and releases the buffer.

Host ET variants (1.1.1-chakra.0.0.4 layout, or flat 1.0.1 detected from the schema string):

* ``json`` / ``orjson``: ``json.loads`` / ``orjson.loads`` of the whole file (dicts and lists);
* ``load_host_et``: the project's loader (``chakra.host.loader.load_host_et``, reads the file itself);
* ``msgspec``: ``msgspec.json`` into Structs declaring only what the linker and converter use: the top
  level (schema, pid, time, start_ts, finish_ts, nodes) and per node id, name, ctrl_deps, ``attrs`` as a
  list of (name, type, value) Structs, ``inputs`` / ``outputs`` as ``msgspec.Raw`` (passed through);
* ``msgspec-copy``: the same, each ``Raw`` copied out of the input buffer;
* ``msgspec-nametype``: attrs as (name, value) Structs, the ``type`` string skipped (what the attr types
  cost: the converter would then derive them from the names);
* ``msgspec-rawattrs``: ``attrs`` as ``Raw`` too (the floor of what a typed decoder can do here).

Kineto variants (``--kineto``): ``json``, ``orjson``, ``load_kineto`` (the project's loader) and
``msgspec``: events as Structs (ph, cat, name, pid, tid, ts, dur, args) with ``args`` a Struct of the
fields the linker reads (External id, Record function id, correlation, stream, device, the collective
fields), every other key skipped by the decoder.

msgspec is not a dependency of the project: ``pip install msgspec`` to run its variants (skipped with a
note otherwise).  Prints a markdown table; ``--json FILE`` writes the numbers.  Never run from the tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HOST_VARIANTS = ("json", "orjson", "load_host_et", "msgspec", "msgspec-copy", "msgspec-nametype",
                 "msgspec-rawattrs")
KINETO_VARIANTS = ("json", "orjson", "load_kineto", "msgspec")
MB = float(1 << 20)


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


try:
    import msgspec
except ImportError:  # the msgspec variants are skipped
    msgspec = None

if msgspec is not None:
    # Only what the linker and the converter read; every other key is skipped by the decoder.

    class Attr(msgspec.Struct, gc=False):
        """One entry of a chakra-layout node's ``attrs``."""

        name: str
        type: str = ""
        value: Any = None

    class ChakraNode(msgspec.Struct, gc=False):
        id: int
        name: str
        ctrl_deps: int = 0
        inputs: msgspec.Raw = msgspec.Raw(b"{}")
        outputs: msgspec.Raw = msgspec.Raw(b"{}")
        attrs: list[Attr] = []

    class NameValue(msgspec.Struct, gc=False):
        """An ``attrs`` entry without its type string."""

        name: str
        value: Any = None

    class ChakraNodeNV(msgspec.Struct, gc=False):
        id: int
        name: str
        ctrl_deps: int = 0
        inputs: msgspec.Raw = msgspec.Raw(b"{}")
        outputs: msgspec.Raw = msgspec.Raw(b"{}")
        attrs: list[NameValue] = []

    class ChakraDocNV(msgspec.Struct, gc=False):
        nodes: list[ChakraNodeNV]
        schema: str = ""
        pid: int | None = None
        time: str | None = None
        start_ts: int | None = None
        finish_ts: int | None = None

    class ChakraNodeRawAttrs(msgspec.Struct, gc=False):
        id: int
        name: str
        ctrl_deps: int = 0
        inputs: msgspec.Raw = msgspec.Raw(b"{}")
        outputs: msgspec.Raw = msgspec.Raw(b"{}")
        attrs: msgspec.Raw = msgspec.Raw(b"[]")

    class FlatNode(msgspec.Struct, gc=False):
        id: int
        name: str
        parent: int = 0
        rf_id: int | None = None
        fw_parent: int = 0
        seq_id: int = -1
        scope: int = 0
        tid: int = 0
        fw_tid: int = 0
        op_schema: str = ""
        inputs: msgspec.Raw = msgspec.Raw(b"[]")
        input_shapes: msgspec.Raw = msgspec.Raw(b"[]")
        input_types: msgspec.Raw = msgspec.Raw(b"[]")
        outputs: msgspec.Raw = msgspec.Raw(b"[]")
        output_shapes: msgspec.Raw = msgspec.Raw(b"[]")
        output_types: msgspec.Raw = msgspec.Raw(b"[]")

    class ChakraDoc(msgspec.Struct, gc=False):
        nodes: list[ChakraNode]
        schema: str = ""
        pid: int | None = None
        time: str | None = None
        start_ts: int | None = None
        finish_ts: int | None = None

    class ChakraDocRawAttrs(msgspec.Struct, gc=False):
        nodes: list[ChakraNodeRawAttrs]
        schema: str = ""
        pid: int | None = None
        time: str | None = None
        start_ts: int | None = None
        finish_ts: int | None = None

    class FlatDoc(msgspec.Struct, gc=False):
        nodes: list[FlatNode]
        schema: str = ""
        pid: int | None = None
        time: str | None = None
        start_ts: int | None = None
        finish_ts: int | None = None

    class KinetoArgs(msgspec.Struct, gc=False):
        external_id: int | None = msgspec.field(default=None, name="External id")
        rf_id: int | None = msgspec.field(default=None, name="Record function id")
        correlation: int | None = None
        stream: int | None = None
        device: int | None = None
        collective: str | None = msgspec.field(default=None, name="Collective name")
        pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
        in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
        out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
        dtype: str | None = None
        group_size: int | None = msgspec.field(default=None, name="Group size")

    class KinetoEvent(msgspec.Struct, gc=False):
        ph: str = ""
        cat: str = ""
        name: str = ""
        pid: int | str = 0
        tid: int | str = 0
        ts: float = 0.0
        dur: float = 0.0
        args: KinetoArgs | None = None

    class KinetoDoc(msgspec.Struct, gc=False):
        traceEvents: list[KinetoEvent]  # noqa: N815 (the file's key)
        distributedInfo: dict[str, Any] | None = None  # noqa: N815
        baseTimeNanoseconds: int | None = None  # noqa: N815


def child(kind: str, variant: str, path: str) -> None:
    """Decode ``path`` with ``variant`` in this fresh process; print one JSON line of measurements."""
    sys.path.insert(0, str(REPO / "src"))
    import logging

    logging.disable(logging.WARNING)
    gc.disable()
    from chakra.io import read_bytes

    info: dict[str, Any] = {"kind": kind, "variant": variant}
    decoder = None
    if variant.startswith("msgspec"):
        assert msgspec is not None
        if kind == "host":
            with open(path, "rb") as fh:
                flat = b'"schema":"1.0.1"' in fh.read(4096).replace(b" ", b"")
            doc_type: Any = {"msgspec-rawattrs": ChakraDocRawAttrs, "msgspec-nametype": ChakraDocNV}.get(
                variant, ChakraDoc)
            if flat:
                doc_type = FlatDoc
            decoder = msgspec.json.Decoder(doc_type)
        else:
            decoder = msgspec.json.Decoder(KinetoDoc)
    rss0 = _status_kb("VmRSS")
    t0 = time.perf_counter()
    data: bytes | None = None
    if variant in ("load_host_et", "load_kineto"):
        t1 = t0
        if variant == "load_host_et":
            from chakra.host.loader import load_host_et

            result: Any = load_host_et(path)
            items, idsum = len(result.ops), sum(op.id for op in result.ops)
        else:
            from chakra.device.loader import load_kineto

            result = load_kineto(path)
            items, idsum = len(result.events), 0
    else:
        data = read_bytes(path)
        t1 = time.perf_counter()
        info["bytes"] = len(data)
        if variant == "json":
            result = json.loads(data)
        elif variant == "orjson":
            import orjson

            result = orjson.loads(data)
        else:
            assert decoder is not None
            result = decoder.decode(data)
            if variant == "msgspec-copy":
                for n in result.nodes:
                    n.inputs = n.inputs.copy()
                    n.outputs = n.outputs.copy()
                    if isinstance(n, FlatNode):
                        n.input_shapes, n.input_types = n.input_shapes.copy(), n.input_types.copy()
                        n.output_shapes, n.output_types = n.output_shapes.copy(), n.output_types.copy()
        if kind == "host":
            nodes = result["nodes"] if isinstance(result, dict) else result.nodes
            items = len(nodes)
            idsum = sum(n["id"] for n in nodes) if isinstance(result, dict) else sum(n.id for n in nodes)
        else:
            events = result["traceEvents"] if isinstance(result, dict) else result.traceEvents
            xs = [e for e in events if (e.get("ph") if isinstance(e, dict) else e.ph) == "X"]
            items, idsum = len(xs), 0
    t2 = time.perf_counter()
    data = None  # dropped: only what the decoded result references stays
    info.update(read_s=t1 - t0, decode_s=t2 - t1, total_s=t2 - t0, items=items, idsum=idsum,
                peak_mb=_status_kb("VmHWM") / 1024.0, kept_mb=(_status_kb("VmRSS") - rss0) / 1024.0)
    print(json.dumps(info), flush=True)
    os._exit(0)  # no teardown of millions of objects


def measure(kind: str, variant: str, path: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, variant, str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-1:])
        return {"kind": kind, "variant": variant, "error": f"exit {proc.returncode}: {tail}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def table(rows: list[dict[str, Any]], title: str, size: int) -> str:
    out = [f"### {title} ({size / MB:.0f} MB)", "",
           "| variant | items | read s | decode s | total s | MB/s | peak MB | kept MB | same nodes |",
           "|---|---|---|---|---|---|---|---|---|"]
    ref = next((r for r in rows if r["variant"] == "orjson" and "error" not in r), None)
    for r in rows:
        if "error" in r:
            out.append(f"| {r['variant']} | {r['error'][:120]} | | | | | | | |")
            continue
        same = "-" if ref is None else ("yes" if (r["items"], r["idsum"]) == (ref["items"], ref["idsum"])
                                        or (r["kind"] == "kineto" and r["items"] == ref["items"]) else "NO")
        out.append(f"| {r['variant']} | {r['items']:,} | {r['read_s']:.2f} | {r['decode_s']:.2f} | "
                   f"{r['total_s']:.2f} | {size / MB / r['total_s']:.0f} | {r['peak_mb']:.0f} | "
                   f"{r['kept_mb']:.0f} | {same} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(*argv[1:4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host", type=Path, help="host ET (.json or .json.gz)")
    ap.add_argument("--kineto", type=Path, default=None, help="also the Kineto trace")
    ap.add_argument("--variants", default=None, help="comma separated (default: all that can run)")
    ap.add_argument("--json", type=Path, default=None, help="write the measurements here")
    a = ap.parse_args(argv)
    have_msgspec = msgspec is not None
    if not have_msgspec:
        print("msgspec is not installed (pip install msgspec): its variants are skipped", file=sys.stderr)
    wanted = set(a.variants.split(",")) if a.variants else None
    results: dict[str, list[dict[str, Any]]] = {}
    md = []
    for kind, path, variants in (("host", a.host, HOST_VARIANTS), ("kineto", a.kineto, KINETO_VARIANTS)):
        if path is None:
            continue
        rows = []
        for v in variants:
            if (wanted and v not in wanted) or (v.startswith("msgspec") and not have_msgspec):
                continue
            r = measure(kind, v, path)
            rows.append(r)
            what = r.get("error") or (f"{r['total_s']:.2f} s, peak {r['peak_mb']:.0f} MB, "
                                      f"kept {r['kept_mb']:.0f} MB")
            print(f"  {kind} {v:>17}: {what}", file=sys.stderr, flush=True)
        results[kind] = rows
        size = next((r["bytes"] for r in rows if "bytes" in r), path.stat().st_size)
        md.append(table(rows, f"{kind}: {path}", size))
    text = "\n".join(md)
    print(text)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
