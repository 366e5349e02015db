"""Check what-if replays against perturbed real runs of the same job.

    python benchmarks/whatif_check.py RUNS_DIR [--work DIR] [--json OUT.json]

``RUNS_DIR`` holds collections made by ``trace_collection/collect.py`` (see trace_collection/README.md,
"Perturbed runs"): ``base_<i>`` (the unperturbed job, several times), and perturbed runs of the same
job, ``strag_<i>`` (one rank sleeps inside its forward every step), ``compute_<i>`` (8x the batch:
more compute, the same gradients) and ``comm_<i>`` (8x the bytes of the extra broadcast).

Every rank of every run is linked and converted (cached in ``--work``).  A run's measured step per rank
is the median of its profiled steps (ET+ ``measured.steps``); a configuration's is the median over its
runs.  Each unperturbed run is replayed as recorded (whole job) and with the what-if matching each
perturbation; a replayed step is the median of the replayed ProfilerStep spans.  The prediction of a
perturbation is the median over the unperturbed runs, compared per rank with the perturbed runs'
measured step; the bar is 5% or the unperturbed runs' spread (max - min over median of their
measured steps), whichever is larger.

The what-ifs (what a user would ask, knowing the change but not the step time):

* straggler: ``--delay DistributedDataParallel.forward=D@R`` (the sleep, known);
* compute:   ``--scale OP=F`` for the aten ops that carry the compute, ``F`` the ratio of their
  median recorded durations in the perturbed and unperturbed runs (what a kernel benchmark of the
  larger batch would say; only ops with at least 1% of the time that changed by more than 10%); in
  the A/B runs, each op (not the collectives) plus the mean increase (without the largest recording)
  of the same op from the unperturbed to the perturbed steps (``position_factors``);
* comm:      ``--comm-size broadcast=8`` (the buffer is 8x larger, known), re-timed by the
  communication model fitted on the unperturbed run's own collectives.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from chakra.replay import ReplayError, load_graph, load_job, replay_job  # noqa: E402
from chakra.replay.whatif import WhatIf, parse_rule  # noqa: E402
from chakra.schema import COMM_COLL_NODE as COMM_COLL  # noqa: E402

STRAGGLER_MS = 20.0
STRAGGLER_RANK = 1
SIZE_FACTOR = 8.0
MIN_SHARE = 0.01
CHANGED = 0.0          # compute what-if: ops whose perturbed median differs by more than this


def _load_json(path: Path) -> Any:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def convert_run(run: Path, work: Path) -> list[Path]:
    """Link + convert every rank of a collection folder (cached); the .et paths in rank order."""
    from chakra.convert import convert_file
    from chakra.link.api import link_files

    out = work / run.name
    out.mkdir(parents=True, exist_ok=True)
    ets = []
    ranks = sorted(int(p.name.split("_")[2].split(".")[0]) for p in run.glob("host_et_*.json*"))
    for r in ranks:
        host = next(run.glob(f"host_et_{r}.json*"))
        kin = next(run.glob(f"kineto_{r}.json*"))
        plus, et = out / f"plus_{r}.json", out / f"job.{r}.et"
        if not et.exists() or et.stat().st_mtime < max(host.stat().st_mtime, kin.stat().st_mtime):
            link_files(host, kin, plus, rank=r)
            convert_file(plus, et)
        ets.append(et)
    return ets


def measured_steps(et: Path) -> list[float]:
    """The profiled step durations of a rank (ET+ ``measured.steps``, in order)."""
    plus = _load_json(et.with_name(et.name.replace("job.", "plus_").replace(".et", ".json")))
    return [float(s["dur"]) for s in plus["measured"]["steps"]]


def replayed_steps(res: Any) -> list[float]:
    """Replayed step durations: a ProfilerStep node's replayed start to the next (the last: to the end)."""
    g = res.graph
    starts = sorted((res.starts[i], name) for i, name in enumerate(g.names)
                    if name.startswith("ProfilerStep#"))
    bounds = [s for s, _ in starts] + [res.replayed_us]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def measured_named(et: Path) -> dict[int, float]:
    """Step number -> measured duration (ET+ ``measured.steps``)."""
    plus = _load_json(et.with_name(et.name.replace("job.", "plus_").replace(".et", ".json")))
    return {int(s["name"].split("#")[1]): float(s["dur"]) for s in plus["measured"]["steps"]}


def replayed_named(res: Any) -> dict[int, float]:
    """Step number -> replayed duration (a ProfilerStep node's replayed start to the next's)."""
    g = res.graph
    starts = sorted((res.starts[i], int(name.split("#")[1])) for i, name in enumerate(g.names)
                    if name.startswith("ProfilerStep#"))
    bounds = [s for s, _ in starts] + [res.replayed_us]
    return {k: b - a for (a, k), b in zip(starts, bounds[1:])}


def parity_rules(ets: list[Path]) -> list[str]:
    """``OP=F`` for the aten ops with >= 1% of the time whose median duration in the odd (perturbed)
    steps differs from the even ones' by more than 10%: what a kernel benchmark would tell."""
    odd: dict[str, list[float]] = defaultdict(list)
    even: dict[str, list[float]] = defaultdict(list)
    share: dict[str, float] = defaultdict(float)
    for et in ets:
        g = load_graph(et)
        steps = sorted((g.starts[i], int(nm.split("#")[1])) for i, nm in enumerate(g.names)
                       if nm.startswith("ProfilerStep#"))
        import bisect

        keys = [s for s, _ in steps]
        tot = sum(g.durations) or 1.0
        for i, nm in enumerate(g.names):
            k = bisect.bisect_right(keys, g.starts[i]) - 1
            if k < 0 or g.durations[i] <= 0:
                continue
            (odd if steps[k][1] % 2 else even)[nm].append(g.durations[i])
            share[nm] += g.durations[i] / tot / len(ets)
    rules = []
    for nm, sh in sorted(share.items(), key=lambda x: -x[1]):
        if sh < MIN_SHARE or not nm.startswith("aten::") or not odd[nm] or not even[nm]:
            continue
        f = statistics.median(odd[nm]) / statistics.median(even[nm])
        if abs(f - 1.0) > 0.10:
            rules.append(f"^{_escape(nm)}$={f:.3f}")
    return rules


def position_factors(g: Any) -> tuple[list[float], int]:
    """Per node of one rank: the factor that adds to an op (not a collective) the increase of the op at
    the same place (same thread, same position, same name) from the even (unperturbed) to the odd
    (perturbed) steps, in mean time without each side's largest recording.  What a benchmark of each op
    at both sizes would say, op by op, on this busy machine; an op's own recording (a preempted op) is
    kept, not scaled up."""
    import bisect

    n = len(g.ids)
    steps = sorted((g.starts[i], int(nm.split("#")[1])) for i, nm in enumerate(g.names)
                   if nm.startswith("ProfilerStep#"))
    keys = [st for st, _ in steps]
    seqs: dict[tuple[int, Any], list[int]] = defaultdict(list)   # (step, lane) -> nodes in start order
    for i in sorted(range(n), key=lambda i: (g.starts[i], g.ids[i])):
        k = bisect.bisect_right(keys, g.starts[i]) - 1
        if k >= 0 and g.lanes[i] is not None and not g.names[i].startswith("ProfilerStep#"):
            seqs[(steps[k][1], g.lanes[i])].append(i)
    durs: dict[tuple[Any, int, int], list[float]] = defaultdict(list)   # (lane, position, parity)
    names: dict[tuple[Any, int], str] = {}
    for (step, lane), seq in seqs.items():
        for pos, i in enumerate(seq):
            if names.setdefault((lane, pos), g.names[i]) == g.names[i]:
                durs[(lane, pos, step % 2)].append(g.durations[i])
    factor = [1.0] * n
    scaled = 0
    for (step, lane), seq in seqs.items():
        for pos, i in enumerate(seq):
            odd, even = durs.get((lane, pos, 1)), durs.get((lane, pos, 0))
            if not odd or not even or g.types[i] == COMM_COLL or g.durations[i] <= 0:
                continue
            mo, me = _trimmed_mean(odd), _trimmed_mean(even)
            if me > 0 and abs(mo / me - 1.0) > CHANGED:
                # the op's typical increase, added to this recording (its own noise is not scaled up)
                factor[i] = max(0.0, g.durations[i] + mo - me) / g.durations[i]
                scaled += step % 2 == 0
    return factor, scaled


def _trimmed_mean(v: list[float]) -> float:
    """The mean without the largest value (when there are 4 or more): the expected time of an op on a
    busy machine (its share of preemptions) without the one preemption that would dominate it."""
    v = sorted(v)
    return statistics.fmean(v[:-1] if len(v) >= 4 else v)


def ab_check(runs: Path, work: Path) -> dict[str, Any]:
    """The A/B runs (``ab_<kind>_<i>``, collected with ``--alternate``): per run and rank, the even
    (unperturbed) steps replayed with the what-if against the odd (perturbed) steps measured."""
    out: dict[str, Any] = {}
    for d in sorted(runs.iterdir()):
        if not (d.is_dir() and d.name.startswith("ab_") and any(d.glob("kineto_*"))):
            continue
        kind = d.name[3:].rsplit("_", 1)[0]
        ets = convert_run(d, work)
        if kind.startswith("strag"):
            w = WhatIf(delay=[parse_rule(f"DistributedDataParallel.forward={STRAGGLER_MS * 1000:g}"
                                         f"@{STRAGGLER_RANK}", "delay")])
        elif kind == "comm":
            w = WhatIf(comm_size=[parse_rule(f"broadcast={SIZE_FACTOR:g}")])
        else:
            w = None
        try:
            rec = replay_job(ets)
            if w is not None:
                pred = replay_job(ets, whatif=w)
            else:       # compute: each aten op scaled by its own perturbed/unperturbed ratio
                from dataclasses import replace

                graphs = load_job(ets)
                scaled = []
                for g in graphs:
                    f, k = position_factors(g)
                    scaled.append(replace(g, factor=f))
                    per_step = k // max(1, sum(1 for nm in g.names if nm.startswith("ProfilerStep#")) // 2)
                w = WhatIf()
                w_text = [f"each op (~{per_step} a step) + its mean increase in the perturbed steps"]
                pred = replay_job(scaled)
        except ReplayError as exc:
            print(f"skipped {d.name}: {exc}", file=sys.stderr)
            continue
        rows = {}
        for res in rec:
            r = res.rank
            meas = measured_named(ets[r])
            rep = replayed_named(res)
            prd = replayed_named(pred.ranks[r])
            even = sorted(k for k in meas if k % 2 == 0)
            odd = sorted(k for k in meas if k % 2 == 1)
            half = [statistics.median(meas[k] for k in even[0::2]),
                    statistics.median(meas[k] for k in even[1::2])]
            rows[r] = {
                "steps": {"unperturbed_measured": [meas[k] for k in even],
                          "unperturbed_replayed": [rep[k] for k in even],
                          "perturbed_measured": [meas[k] for k in odd],
                          "predicted": [prd[k] for k in even]},
                "unperturbed_measured": statistics.median(meas[k] for k in even),
                "unperturbed_replayed": statistics.median(rep[k] for k in even),
                "spread": abs(half[0] - half[1]) / statistics.median(meas[k] for k in even),
                "perturbed_measured": statistics.median(meas[k] for k in odd),
                "predicted": statistics.median(prd[k] for k in even),
            }
        out[d.name] = {"kind": kind, "whatif": w.describe() if kind != "compute" else w_text, "ranks": rows}
    return out


def pooled_ab(res: dict[str, Any]) -> dict[str, Any]:
    """Per kind and rank, every run's steps together: the median unperturbed step measured and replayed,
    the median perturbed step measured and predicted; the spread of the unperturbed job over its runs
    (max - min of the runs' median unperturbed steps, over their median)."""
    kinds: dict[str, dict[int, dict[str, list[float]]]] = {}
    per_run: dict[str, dict[int, list[float]]] = {}
    whatif: dict[str, list[str]] = {}
    for run in res.values():
        k = run["kind"]
        whatif.setdefault(k, run["whatif"])
        for r, row in run["ranks"].items():
            d = kinds.setdefault(k, {}).setdefault(r, defaultdict(list))
            for key, v in row["steps"].items():
                d[key] += v
            per_run.setdefault(k, {}).setdefault(r, []).append(row["unperturbed_measured"])
    out: dict[str, Any] = {}
    for k, ranks in kinds.items():
        out[k] = {"whatif": whatif[k], "runs": len(next(iter(per_run[k].values()))), "ranks": {}}
        for r, d in ranks.items():
            runs_u = per_run[k][r]
            out[k]["ranks"][r] = {key: statistics.median(v) for key, v in d.items()}
            out[k]["ranks"][r]["spread"] = (max(runs_u) - min(runs_u)) / statistics.median(runs_u)
            out[k]["ranks"][r]["steps"] = len(d["perturbed_measured"])
    return out


def print_pooled(pooled: dict[str, Any]) -> None:
    print("| perturbation (runs) | what-if | rank | unperturbed step measured (µs) | replayed as recorded | "
          "spread of the unperturbed runs | perturbed step measured (µs) | predicted (µs) | error | "
          "bar: max(5%, spread) | within |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for k, v in pooled.items():
        w = "; ".join(v["whatif"])
        for r, row in v["ranks"].items():
            e0 = 100 * (row["unperturbed_replayed"] / row["unperturbed_measured"] - 1)
            e = 100 * (row["predicted"] / row["perturbed_measured"] - 1)
            bar = max(5.0, 100 * row["spread"])
            print(f"| {k} ({v['runs']}) | {w[:70]} | {r} | {row['unperturbed_measured']:,.0f} | "
                  f"{row['unperturbed_replayed']:,.0f} ({e0:+.1f}%) | {100 * row['spread']:.1f}% | "
                  f"{row['perturbed_measured']:,.0f} | {row['predicted']:,.0f} | {e:+.1f}% | {bar:.1f}% | "
                  f"{'yes' if abs(e) <= bar else 'NO'} |")


def print_ab(res: dict[str, Any]) -> None:
    print("| run | what-if | rank | unperturbed measured (µs) | replayed (error) | spread | perturbed "
          "measured (µs) | predicted (µs) | error | bar | within |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, run in res.items():
        w = "; ".join(run["whatif"])
        for r, row in run["ranks"].items():
            e0 = 100 * (row["unperturbed_replayed"] / row["unperturbed_measured"] - 1)
            e = 100 * (row["predicted"] / row["perturbed_measured"] - 1)
            bar = max(5.0, 100 * row["spread"])
            print(f"| {name} | {w[:70]} | {r} | {row['unperturbed_measured']:,.0f} | "
                  f"{row['unperturbed_replayed']:,.0f} ({e0:+.1f}%) | {100 * row['spread']:.1f}% | "
                  f"{row['perturbed_measured']:,.0f} | {row['predicted']:,.0f} | {e:+.1f}% | {bar:.1f}% | "
                  f"{'yes' if abs(e) <= bar else 'NO'} |")


def op_medians(ets: list[Path]) -> tuple[dict[str, float], float]:
    """Median recorded duration per op name (all ranks), and the mean total time per rank."""
    by: dict[str, list[float]] = defaultdict(list)
    total = 0.0
    for et in ets:
        g = load_graph(et)
        for name, d, t in zip(g.names, g.durations, g.types):
            if t != 1 and d > 0:
                by[name].append(d)
                total += d
    return {k: statistics.median(v) for k, v in by.items()}, total / max(1, len(ets))


def compute_rules(base: list[list[Path]], pert: list[list[Path]]) -> list[str]:
    """``OP=F`` for the ops with >= 1% of the time whose median duration changed by more than 10%."""
    share: dict[str, float] = defaultdict(float)
    med_b: dict[str, list[float]] = defaultdict(list)
    med_p: dict[str, list[float]] = defaultdict(list)
    for ets in base:
        m, _ = op_medians(ets)
        for k, v in m.items():
            med_b[k].append(v)
        for et in ets:
            g = load_graph(et)
            tot = sum(g.durations)
            for name, d in zip(g.names, g.durations):
                share[name] += d / tot / (len(base) * len(ets))
    for ets in pert:
        m, _ = op_medians(ets)
        for k, v in m.items():
            med_p[k].append(v)
    rules = []
    for name, sh in sorted(share.items(), key=lambda x: -x[1]):
        if sh < MIN_SHARE or name not in med_p or not name.startswith("aten::"):
            continue   # compute is in the aten ops; the others' recorded times hold waits and Python
        f = statistics.median(med_p[name]) / statistics.median(med_b[name])
        if abs(f - 1.0) > 0.10:
            rules.append(f"^{_escape(name)}$={f:.3f}")
    return rules


def _escape(name: str) -> str:
    import re

    return re.escape(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/chakra_whatif_check"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ab", action="store_true",
                    help="the A/B runs (ab_<kind>_<i>, collected with --alternate)")
    args = ap.parse_args(argv)
    if args.ab:
        res = ab_check(args.runs, args.work)
        print("Per run (8 unperturbed and 8 perturbed steps each; spread: the two halves of its unperturbed "
              "steps):")
        print_ab(res)
        print("\nAll runs of a perturbation together:")
        print_pooled(pooled_ab(res))
        if args.json:
            args.json.write_text(json.dumps(res, indent=1, default=str))
        return 0
    runs: dict[str, list[list[Path]]] = defaultdict(list)
    for d in sorted(args.runs.iterdir()):
        if d.is_dir() and "_" in d.name and not d.name.startswith("ab_") and any(d.glob("kineto_*")):
            kind = d.name.rsplit("_", 1)[0]
            runs[kind].append(convert_run(d, args.work))
    base = runs.get("base", [])
    if not base:
        print("no base_<i> runs", file=sys.stderr)
        return 2
    ranks = range(len(base[0]))

    def measured(cfg: str) -> dict[int, float]:
        per_run = [[statistics.median(measured_steps(et)) for et in ets] for ets in runs[cfg]]
        return {r: statistics.median(x[r] for x in per_run) for r in ranks}

    base_meas = {r: [statistics.median(measured_steps(ets[r])) for ets in base] for r in ranks}
    spread = {r: (max(v) - min(v)) / statistics.median(v) for r, v in base_meas.items()}
    whatifs: dict[str, WhatIf] = {
        "strag": WhatIf(delay=[parse_rule(f"DistributedDataParallel.forward={STRAGGLER_MS * 1000:g}"
                                          f"@{STRAGGLER_RANK}", "delay")]),
        "comm": WhatIf(comm_size=[parse_rule(f"broadcast={SIZE_FACTOR:g}")]),
    }
    if runs.get("compute"):
        whatifs["compute"] = WhatIf(scale=[parse_rule(r) for r in compute_rules(base, runs["compute"])])
    table: dict[str, Any] = {"spread": spread, "configs": {}}
    as_recorded = {r: [] for r in ranks}   # type: dict[int, list[float]]
    preds: dict[str, dict[int, list[float]]] = {k: {r: [] for r in ranks} for k in whatifs}
    usable = []
    for ets in base:
        try:
            rec = replay_job(ets)
        except ReplayError as exc:   # a collective cut by the window edge on one rank only
            print(f"skipped {ets[0].parent.name}: {exc}", file=sys.stderr)
            continue
        usable.append(ets)
        for res in rec:
            as_recorded[res.rank].append(statistics.median(replayed_steps(res)))
        for kind, w in whatifs.items():
            job = replay_job(ets, whatif=w)
            for res in job:
                preds[kind][res.rank].append(statistics.median(replayed_steps(res)))
    runs["base"] = usable                     # the unperturbed row: the runs that replayed
    m_base = measured("base")
    table["configs"]["base"] = {r: {"measured": m_base[r], "predicted": statistics.median(as_recorded[r])}
                                for r in ranks}
    for kind, w in whatifs.items():
        if not runs.get(kind):
            continue
        m = measured(kind)
        table["configs"][kind] = {r: {"measured": m[r], "predicted": statistics.median(preds[kind][r]),
                                      "whatif": w.describe()} for r in ranks}
    print(f"unperturbed runs: {len(base)}; measured median step per rank and run (µs): "
          + "; ".join(f"rank {r}: " + ", ".join(f"{v:,.0f}" for v in base_meas[r]) for r in ranks))
    print("spread of the unperturbed runs: " + ", ".join(f"rank {r} {100 * spread[r]:.1f}%" for r in ranks))
    print("| run | what-if | rank | measured step (µs) | predicted (µs) | error | bar | within |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for kind, rows in table["configs"].items():
        for r, row in rows.items():
            err = 100.0 * (row["predicted"] - row["measured"]) / row["measured"]
            bar = max(5.0, 100.0 * spread[r])
            w = "; ".join(row.get("whatif", ["(as recorded)"]))
            ok = "yes" if abs(err) <= bar else "NO"
            print(f"| {kind} ({len(runs[kind])} runs) | {w[:80]} | {r} | {row['measured']:,.0f} | "
                  f"{row['predicted']:,.0f} | {err:+.1f}% | {bar:.1f}% | {ok} |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
