#!/usr/bin/env python3
"""This toolkit against the reference MLCommons Chakra on the same traces, in the same run, as users run the
tools: ``chakra_trace_link`` then ``chakra_converter PyTorch --simulate`` (the ET+ written in between), each
command a fresh process timed from the outside (interpreter start-up and imports included).

    nice -n 5 python benchmarks/vs_reference.py --ref-src /path/to/chakra [--ref-python PY] [--runs 5]

Cases: the real-weight synthetic trace of ``--ops`` host ops (``run_all.synthetic_case``; the default 14,000
is run_all's CLI case, "the 5k-op trace": 14,812 host nodes, 4,821 GPU ops, ~24.5k Kineto X events), and,
when the corpus is present (``../shared/traces`` or ``$CHAKRA_TRACE_CORPUS``), ``cpu_gloo/ddp_mlp_4r`` rank 0
and ``dlrm_8r_v100`` rank 0.  Corpus inputs are gunzipped into ``--work`` first: the reference's linker reads
the host ET again with a plain ``open`` and cannot read ``.json.gz``; both tools get the same plain files.

The two codes run interleaved, one pair of each in turn (the order alternating round by round), after one
unmeasured round that writes the byte-code caches.  Printed per case: best and median seconds of each command
and of the pair, the pair's CPU seconds (user + system of its processes and of theirs: a loaded machine
stretches them less than wall time), the largest peak RSS, the ``.et`` node count of each (a sanity check),
and the ratio reference / ours of the pairs' best and medians, in wall and in CPU time; a floor measured
after each of our pairs (a fresh process that only parses the two inputs and our ET+ with ``orjson.loads``:
what making every JSON value a Python object costs, beside the 20x target); the machine
calibration (``run_all.calibrate``) before and after.  A reference command that fails is reported with its
exit code and the first sentence of its last line of stderr.

The reference is run only as an external program: ``--ref-python`` (default ``REF_SRC/.venv/bin/python``)
must import ``chakra.src.trace_link.trace_link`` and ``chakra.src.converter.converter`` from the checkout
(``pip install REF_SRC`` into that environment).  Nothing of it is part of this repository.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_all import CLI_OPS, CORPUS, calibrate, cli_pair, synthetic_case  # noqa: E402

HOW_TO_GET = """\
vs_reference.py needs a checkout of the reference MLCommons Chakra and an environment it is installed in:
    git clone https://github.com/mlcommons/chakra REF && python3 -m venv REF/.venv
    REF/.venv/bin/pip install REF        # its trace_link also needs PARAM's et_replay:
    REF/.venv/bin/pip install "git+https://github.com/facebookresearch/param.git#subdirectory=et_replay"
then: python benchmarks/vs_reference.py --ref-src REF [--ref-python REF/.venv/bin/python]"""

_REF_LINK = "from chakra.src.trace_link.trace_link import main; main()"
_REF_CONVERT = "from chakra.src.converter.converter import main; main()"


class Run(NamedTuple):
    seconds: float
    peak_mb: float
    rc: int
    err: str


def _ref_cmd(py: str, code: str, args: list[str], tmp: Path) -> Run:
    """``py -c code args`` in a fresh process: wall seconds, peak RSS (``wait4``), exit code, the first
    sentence of the last stderr line."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    err_path = tmp / "ref.stderr"
    with open(err_path, "wb") as err:
        t = time.perf_counter()
        proc = subprocess.Popen([py, "-c", code, *args], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = err_path.read_text(errors="replace").strip().splitlines()
    last = lines[-1].split(". ")[0][:160] if lines else ""
    return Run(wall, usage.ru_maxrss / 1024.0, proc.returncode, last)


def ref_pair(py: str, host: Path, kineto: Path, tmp: Path) -> tuple[Run, Run]:
    """The reference's ``chakra_trace_link`` then ``chakra_converter PyTorch --simulate`` (outputs in
    ``tmp``)."""
    etplus, et, log = tmp / "ref_et_plus.json", tmp / "ref.0.et", tmp / "ref_convert.log"
    for p in (etplus, et, log):
        p.unlink(missing_ok=True)
    link = _ref_cmd(py, _REF_LINK, ["--chakra-host-trace", str(host), "--chakra-device-trace", str(kineto),
                                    "--output-file", str(etplus)], tmp)
    if link.rc:
        return link, Run(float("nan"), float("nan"), -1, "(not run: the link failed)")
    conv = _ref_cmd(py, _REF_CONVERT, ["--log-filename", str(log), "PyTorch", "--input", str(etplus),
                                       "--output", str(et), "--simulate"], tmp)
    return link, conv


def our_pair(host: Path, kineto: Path, tmp: Path) -> tuple[Run, Run]:
    """This checkout's two commands (``run_all.cli_pair``: each as its console script runs it)."""
    link, conv = cli_pair(host, kineto, tmp)
    return (Run(link[0], max(link[1], link[3]), link[2], ""),
            Run(conv[0], max(conv[1], conv[3]), conv[2], ""))


_PARSE = "import orjson, sys\nfor p in sys.argv[1:]:\n    with open(p, 'rb') as f: orjson.loads(f.read())"


def parse_only(host: Path, kineto: Path, tmp: Path) -> Run:
    """A floor beside the pair: one fresh process of this interpreter that only parses the host ET, the
    Kineto trace and our ET+ with ``orjson.loads`` (every JSON value made a Python object), no other work."""
    return _ref_cmd(sys.executable, _PARSE, [str(host), str(kineto), str(tmp / "et_plus.json")], tmp)


def et_nodes(path: Path) -> int | None:
    """Nodes of a length-delimited protobuf ``.et`` (the frames after the GlobalMetadata's), not decoded."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    pos, frames = 0, 0
    while pos < len(data):
        size, shift = 0, 0
        while True:
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        pos += size
        frames += 1
    return frames - 1


def cases(ops: int, work: Path, which: set[str]) -> list[tuple[str, Path, Path]]:
    """(name, plain host ET, plain Kineto trace) of each case asked for and present."""
    out = []
    if "synth" in which:
        _, name, host, kineto = synthetic_case(ops, work)
        out.append((f"synthetic {name} host ops", host, kineto))
    corpus = {"gloo": ("cpu_gloo/ddp_mlp_4r rank 0", CORPUS / "cpu_gloo" / "ddp_mlp_4r", "", ""),
              "dlrm": ("dlrm_8r_v100 rank 0", CORPUS / "dlrm_8r_v100", "host/", "device/")}
    for key, (name, folder, hsub, ksub) in corpus.items():
        host_gz, kineto_gz = folder / f"{hsub}host_et_0.json.gz", folder / f"{ksub}kineto_0.json.gz"
        if key not in which or not host_gz.exists():
            continue
        plain = work / "corpus" / key
        plain.mkdir(parents=True, exist_ok=True)
        for src, dst in ((host_gz, plain / "host_et_0.json"), (kineto_gz, plain / "kineto_0.json")):
            if not dst.exists():
                with gzip.open(src, "rb") as fin, open(dst, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
        out.append((name, plain / "host_et_0.json", plain / "kineto_0.json"))
    return out


def measure(name: str, host: Path, kineto: Path, py: str, runs: int, tmp: Path) -> dict[str, Any]:
    """Interleaved rounds of both codes on one case (round 0 unmeasured: byte-code caches)."""
    res: dict[str, list[tuple[Run, Run]]] = {"ours": [], "reference": []}
    parse: list[float] = []
    cpu: dict[str, list[float]] = {"ours": [], "reference": []}
    codes = {"ours": lambda: our_pair(host, kineto, tmp),
             "reference": lambda: ref_pair(py, host, kineto, tmp)}
    for k in range(runs + 1):
        order = list(codes) if k % 2 == 0 else list(reversed(codes))
        for code in order:
            before = _children_cpu()
            pair = codes[code]()
            if k:
                res[code].append(pair)
                cpu[code].append(_children_cpu() - before)
            print(f"  {name} [{code} {k or 'warm-up'}]: link {pair[0].seconds:.2f} s (exit {pair[0].rc}), "
                  f"convert --simulate {pair[1].seconds:.2f} s (exit {pair[1].rc})", file=sys.stderr,
                  flush=True)
            if code == "ours" and k:
                parse.append(parse_only(host, kineto, tmp).seconds)
            if code == "reference" and (pair[0].rc or pair[1].rc):
                res[code] = [pair]   # a failure does not get better by repeating it
                codes.pop(code)
                break
    nodes = {"ours": et_nodes(tmp / "trace.0.et"), "reference": et_nodes(tmp / "ref.0.et")}
    return {"case": name, "runs": res, "cpu": cpu, "parse": parse, "et_nodes": nodes}


def _children_cpu() -> float:
    """User + system CPU seconds of the waited-for child processes so far (theirs and their own children's):
    a pair's CPU time, which a loaded machine stretches less than its wall time."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _cell(xs: list[float]) -> str:
    return f"{min(xs):.2f} / {statistics.median(xs):.2f}"


def report(m: dict[str, Any]) -> str:
    lines = [f"### {m['case']}", "",
             "| code | link best / median s | convert --simulate best / median s | pair best / median s "
             "| pair CPU best / median s | peak MB | .et nodes |", "|---|---|---|---|---|---|---|"]
    pairs: dict[str, list[float]] = {}
    for code, rounds in m["runs"].items():
        link, conv = rounds[0]
        if link.rc or conv.rc:
            bad = link if link.rc else conv
            which = "chakra_trace_link" if link.rc else "chakra_converter"
            lines.append(f"| {code} | {which} exit {bad.rc}: {bad.err} | | | | | |")
            continue
        ls, cs = [r[0].seconds for r in rounds], [r[1].seconds for r in rounds]
        pairs[code] = [a + b for a, b in zip(ls, cs)]
        peak = max(max(r[0].peak_mb, r[1].peak_mb) for r in rounds)
        lines.append(f"| {code} | {_cell(ls)} | {_cell(cs)} | {_cell(pairs[code])} | {_cell(m['cpu'][code])} "
                     f"| {peak:.0f} | {m['et_nodes'][code]} |")
    if len(pairs) == 2:
        ours, ref = pairs["ours"], pairs["reference"]
        ocpu, rcpu = m["cpu"]["ours"], m["cpu"]["reference"]
        lines += ["", f"reference / ours: {min(ref) / min(ours):.1f}x (best), "
                      f"{statistics.median(ref) / statistics.median(ours):.1f}x (median), "
                      f"{len(ours)} runs each; CPU time {min(rcpu) / min(ocpu):.1f}x (best), "
                      f"{statistics.median(rcpu) / statistics.median(ocpu):.1f}x (median)"]
    if m["parse"] and "reference" in pairs:
        lines += ["", "parse floor (one fresh process: orjson.loads of the host ET, the Kineto trace and the "
                      f"ET+, nothing else): {_cell(m['parse'])} s best / median; 20x the reference's best "
                      f"pair would be {min(pairs['reference']) / 20:.2f} s"]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref-src", type=Path, help="a checkout of the reference MLCommons Chakra")
    ap.add_argument("--ref-python", help="an interpreter that imports the reference "
                                         "(default REF_SRC/.venv/bin/python)")
    ap.add_argument("--ops", type=int, default=CLI_OPS,
                    help=f"host ops of the synthetic case (default {CLI_OPS:,})")
    ap.add_argument("--runs", type=int, default=3, help="measured rounds per code and case (default 3)")
    ap.add_argument("--cases", default="synth,gloo,dlrm", help="synth, gloo, dlrm (comma separated)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "chakra_bench")
    a = ap.parse_args()
    if a.ref_src is None or not (a.ref_src / "src" / "trace_link" / "trace_link.py").is_file():
        print(("--ref-src is missing" if a.ref_src is None else f"--ref-src {a.ref_src}: no src/trace_link/")
              + "\n" + HOW_TO_GET, file=sys.stderr)
        return 2
    py = a.ref_python or str(a.ref_src / ".venv" / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    imports = "import chakra.src.trace_link.trace_link, chakra.src.converter.converter"
    probe = subprocess.run([py, "-c", imports], capture_output=True, text=True, env=env)
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        print(f"--ref-python {py}: cannot import the reference ({last})\n{HOW_TO_GET}", file=sys.stderr)
        return 2
    todo = cases(a.ops, a.work, {c.strip() for c in a.cases.split(",")})
    calib = [calibrate()]
    results = []
    with tempfile.TemporaryDirectory(prefix="chakra-vsref-") as d:
        for name, host, kineto in todo:
            tmp = Path(d) / name.replace(" ", "_").replace("/", "_").replace(",", "")
            tmp.mkdir()
            results.append(measure(name, host, kineto, py, a.runs, tmp))
    calib.append(calibrate())
    print(f"machine calibration before / after (run_all.calibrate, s): {calib[0]:.3f} / {calib[1]:.3f}; "
          f"reference: {a.ref_src} ({py})")
    for m in results:
        print("\n" + report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
