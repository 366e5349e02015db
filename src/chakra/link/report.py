"""What a link did: the ET+ ``link_stats`` (docs/formats.md, "ET+"), the log lines that summarise them,
and the :class:`LinkReport` that ``chakra.link.api.link_files`` returns."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from chakra.device.model import KinetoTrace
from chakra.host.collective_names import CPU_IMPLEMENTATIONS, CPU_RECORD_PREFIXES
from chakra.host.model import HostOp, HostTrace
from chakra.link.deps import SyncStats
from chakra.link.gpu import GpuAttachment
from chakra.link.kineto_only import KINETO_ONLY
from chakra.link.match import MatchResult, host_operators
from chakra.link.window import Window
from chakra.tunables import WARN_MATCH_RATE

#: the summary lines are the linker's (logged by link_traces, under its name)
log = logging.getLogger("chakra.link.api")


@dataclass(slots=True)
class LinkReport:
    """What one link did (also what ``chakra.pipeline.link.link_folder`` returns per rank)."""

    host_path: str | None  # None: linked from the Kineto trace alone
    kineto_path: str
    output_path: str | None
    rank: int | None
    strategy: str
    window: str
    host_ops: int
    matched: int
    match_rate: float
    gpu_ops: int
    gpu_attached: int
    gpu_attach_rate: float
    sync_deps: int
    inter_thread_deps: int
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    # GPU ops in the window: all but those launched in iterations the host ET did not record (and those
    # launched before the trace that ended before the window).  ``gpu_attached`` counts those attached
    # to their launching host op; ``gpu_launched_before_trace`` those that ran in the window without a
    # launching call in the trace (64 on DLRM rank 1), in the graph without a host op;
    # ``gpu_attach_rate_in_window`` the share of the window's GPU ops in the graph, both kinds.
    gpu_ops_in_window: int = 0
    gpu_attach_rate_in_window: float = 1.0
    gpu_launched_before_trace: int = 0
    step: dict[str, Any] | None = None   # --step: the step and the host nodes kept / dropped
    # events of categories nothing models (chakra.device.model.NOTHING_TO_MODEL): category -> count
    not_modelled: dict[str, int] = field(default_factory=dict)
    # implementation -> communication kernels, or records of a collective run on CPU threads (gloo, MPI)
    collectives: dict[str, int] = field(default_factory=dict)

    def _gpu_summary(self) -> str:
        """``a/b GPU ops attached (x%)``, or that there are none (a CPU-only trace: not "0/0 (100.0%)")."""
        total = self.gpu_ops_in_window
        if not total:
            return ("no GPU ops" if not self.gpu_ops else
                    f"no GPU ops in the window ({self.gpu_ops:,} outside it)")
        before = self.gpu_launched_before_trace
        return (f"{self.gpu_attached + before}/{total} GPU ops attached "
                f"({100 * self.gpu_attach_rate_in_window:.1f}%"
                + (f", {before} launched before the trace: on their streams, no host op" if before else "")
                + ")")

    def summary(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "no rank recorded"
        if self.strategy == KINETO_ONLY:
            head = (f"{who}: {self.host_ops} host nodes from the Kineto trace alone "
                    f"(window {self.window}); ")
        else:
            head = (f"{who}: {self.matched}/{self.host_ops} host ops matched "
                    f"({100 * self.match_rate:.1f}%, {self.strategy}, window {self.window}); ")
        return (
            head
            + self._gpu_summary()
            + f"; {self.sync_deps} sync deps, {self.inter_thread_deps} inter-thread deps; "
            + _collectives_text(self.collectives)
            + (f"; {self.step['step']} only: {self.step['host_nodes_kept']} host nodes kept, "
               f"{self.step['host_nodes_dropped']} dropped" if self.step else "")
            + ("; not modelled: " + ", ".join(f"{n} {cat} events" for cat, n in self.not_modelled.items())
               if self.not_modelled else "")
        )


def _collectives_text(found: dict[str, int]) -> str:
    """``8 communication kernels (NCCL/RCCL 5, vLLM custom all-reduce 3)``, ``22 collective records on CPU
    threads (gloo 22)`` (a record per chunk of a collective gloo runs in chunks), ``no communication``."""
    parts = []
    for what, cpu in (("communication kernel", False), ("collective record", True)):
        mine = {k: v for k, v in found.items() if (k in CPU_IMPLEMENTATIONS) == cpu}
        n = sum(mine.values())
        if n:
            parts.append(f"{n} {what}{'s' if n != 1 else ''}{' on CPU threads' if cpu else ''} ("
                         + ", ".join(f"{k} {v}" for k, v in mine.items()) + ")")
    return ", ".join(parts) or "no communication"


def kept_counts(host: HostTrace, match: MatchResult, keep: set[int]) -> tuple[int, int]:
    """(host ops, matched ones) among the host nodes ``keep`` holds."""
    ops = [op.id for op in host_operators(host) if op.id in keep]
    return len(ops), sum(1 for oid in ops if oid in match.host_to_event)


def link_stats(
    kineto: KinetoTrace,
    window: Window,
    match: MatchResult,
    gpu: GpuAttachment,
    collectives: dict[str, Any],
    it_deps: dict[int, int],
    it_skipped: int,
    gap_us: float,
    s_deps: dict[int, list[int]],
    s_stats: SyncStats,
    kept: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """ET+ ``link_stats``.  ``kept``: (host ops, matched) of the ops the ET+ keeps, when it keeps some only
    (``--step``, or steps the Kineto trace lacks left out): the match rate is theirs.
    ``gpu_attach_rate`` counts the GPU ops that could be attached to their host
    op: not those launched before the trace began (no launching call) nor those of iterations the host ET
    did not record; ``gpu_attach_rate_in_window`` is the share of the window's GPU ops in the graph: those
    attached and those launched before the trace (``gpu_orphans_no_launch``, no launching call) that ran
    in the window, without a host op; those that ended before the window began are not its work
    (``gpu_no_launch_before_window``, written when there are some)."""
    events = kineto.events
    attachable = gpu.total - gpu.no_launch - gpu.outside_window
    before_window = gpu.no_launch - gpu.pre_trace
    in_window_gpu = gpu.total - gpu.outside_window - before_window
    host_ops, matched = kept if kept is not None else (match.host_ops, match.matched)
    lo, hi = window.lo, window.hi
    if lo == -math.inf and hi == math.inf:
        in_window = len(match.event_to_host)
    else:
        in_window = sum(1 for p in match.event_to_host if lo <= events[p].ts < hi)  # window.contains
    stats: dict[str, Any] = {
        "strategy": match.strategy,
        "window": window.name,
        "window_reason": window.reason,
        "host_ops": host_ops,
        "matched": matched,
        "match_rate": round(matched / host_ops, 6) if host_ops else 1.0,
        "matched_second_round": match.second_round,
        "second_round_order_dropped": match.order_dropped,
        "rf_name_mismatch": match.rf_name_mismatch,
        "kineto_host_events": match.kineto_candidates,
        "kineto_unmatched": match.kineto_candidates - in_window,
        "threads": [
            {
                "host_tid": t.host_tid,
                "kineto_tid": t.kineto_tid,
                "host_ops": t.host_ops,
                "kineto_events": t.kineto_events,
                "matched": t.matched,
            }
            for t in match.threads
        ],
        "gpu_ops": gpu.total,
        "gpu_attached": gpu.attached,
        "gpu_attach_rate": round(gpu.attached / attachable, 6) if attachable else 1.0,
        "gpu_ops_in_window": in_window_gpu,
        "gpu_attach_rate_in_window": (round((gpu.attached + gpu.pre_trace) / in_window_gpu, 6)
                                      if in_window_gpu else 1.0),
        "gpu_orphans_no_launch": gpu.no_launch,
        "gpu_orphans_outside_window": gpu.outside_window,
        "gpu_orphans_no_host_op": gpu.no_host_op,
        **collectives,
        "inter_thread_deps": len(it_deps),
        "inter_thread_gap_us": gap_us,
        "inter_thread_skipped_order": it_skipped,
        "sync_calls": s_stats.calls,
        "sync_deps": s_stats.deps,
        "sync_ops": len(s_deps),
        "sync_no_host_op": s_stats.no_host_op,
        "sync_unknown_stream": s_stats.unknown_stream,
        "sync_nothing_to_wait": s_stats.nothing_to_wait,
        "sync_dropped_late": s_stats.dropped_late,
        "sync_dropped_order": s_stats.dropped_order,
    }
    if before_window:
        stats["gpu_no_launch_before_window"] = before_window
    if kineto.not_modelled:
        stats["not_modelled"] = dict(kineto.not_modelled)
    return stats


def log_summary(name: str, s: dict[str, Any]) -> None:
    pre = s["gpu_orphans_no_launch"] - s.get("gpu_no_launch_before_window", 0)
    if s["strategy"] == KINETO_ONLY:
        log.info("%s: %d host nodes from the Kineto trace's cpu_op / user_annotation events (no host ET; "
                 "window %s)", name, s["host_ops"], s["window"])
    else:
        log.info(
            "%s: %d/%d host ops matched (%.1f%%, strategy %s, window %s)",
            name,
            s["matched"],
            s["host_ops"],
            100 * s["match_rate"],
            s["strategy"],
            s["window"],
        )
    log.info(
        "%s: %d/%d GPU ops of the window attached (%d of them launched before the trace, without a host op; "
        "%d more launched outside the window, %d without an enclosing host op); %d sync deps on %d ops, "
        "%d inter-thread deps",
        name,
        s["gpu_attached"] + pre,
        s["gpu_ops_in_window"],
        pre,
        s["gpu_orphans_outside_window"],
        s["gpu_orphans_no_host_op"],
        s["sync_deps"],
        s["sync_ops"],
        s["inter_thread_deps"],
    )
    if s["match_rate"] < WARN_MATCH_RATE:
        log.warning(
            "%s: only %.1f%% of the host ops matched a Kineto event (below %.0f%%)",
            name,
            100 * s["match_rate"],
            100 * WARN_MATCH_RATE,
        )
    if s["gpu_attach_rate"] < WARN_MATCH_RATE:
        log.warning("%s: only %.1f%% of the GPU ops found their host op", name, 100 * s["gpu_attach_rate"])


#: the ``link_stats`` counts a LinkReport carries as they are
_COPIED = ("strategy", "window", "host_ops", "matched", "match_rate", "gpu_ops", "gpu_attached",
           "gpu_attach_rate", "sync_deps", "inter_thread_deps", "gpu_ops_in_window",
           "gpu_attach_rate_in_window")


def report_of(doc: dict[str, Any], host_path: str | None, kineto_path: str, out: str | None) -> LinkReport:
    """The report of a written ET+ document (``out``) from its ``link_stats``."""
    s = doc["link_stats"]
    return LinkReport(
        host_path=host_path, kineto_path=kineto_path, output_path=out, rank=doc["rank"],
        **{name: s[name] for name in _COPIED},
        gpu_launched_before_trace=s["gpu_orphans_no_launch"] - s.get("gpu_no_launch_before_window", 0),
        step=s.get("step"),
        not_modelled=s.get("not_modelled", {}),
        collectives={k: v for k, v in (("NCCL/RCCL", s["nccl_kernels"]), ("gloo", s["gloo_collectives"]),
                                       *s.get("collectives_other", {}).items()) if v},
    )


def warn_unlinked(host: HostTrace, kineto: KinetoTrace, window: Window, match: MatchResult,
                  keep: set[int] | None) -> None:
    """The link's warnings about work one trace holds and the other lacks: :func:`warn_lost_records`
    and :func:`warn_unrecorded_threads`."""
    warn_lost_records(kineto, window, match.event_to_host)
    warn_unrecorded_threads(host, match.host_to_event, keep)


def warn_unrecorded_threads(host: HostTrace, host_to_event: dict[int, int], keep: set[int] | None) -> None:
    """Warn about the host threads none of whose (kept) operators matched a Kineto event: the profiler did
    not record that thread, so its ops are in the graph without a time.  A thread started by Python after
    the profiler began is recorded by the ExecutionTraceObserver but not by the profiler (collect.py
    --opt-thread: the optimizer steps on their own threads, 14 of 474 ops, 97% matched and no warning)."""
    per_tid: dict[int, list[HostOp]] = {}
    hit: set[int] = set()
    for op in host_operators(host):
        if keep is not None and op.id not in keep:
            continue
        per_tid.setdefault(op.tid, []).append(op)
        if op.id in host_to_event:
            hit.add(op.tid)
    lost = {tid: ops for tid, ops in per_tid.items() if tid not in hit}
    if lost and hit:
        count = sum(len(some) for some in lost.values())
        first = min((op for some in lost.values() for op in some), key=lambda op: op.id).name
        log.warning("%s: no op of host thread(s) %s matched a Kineto event (%d op(s), e.g. %s): the profiler "
                    "did not record those threads (started after profiling began?); their ops take no time "
                    "in the graph", host.path, ", ".join(map(str, sorted(lost))), count, first)


def warn_lost_records(kineto: KinetoTrace, window: Window, event_to_host: dict[int, int]) -> None:
    """Warn about the collectives run on CPU threads (gloo, MPI, UCC records) that the Kineto trace holds
    inside the window and no host op matched: the graph lacks them.  The observer records an op when it
    ends: a gloo:all_reduce record still running when the observer stopped (its Kineto event ended 6.2 ms
    after ProfilerStep#3, collect.py --prof-flags) is in the Kineto trace only, and the job replay then
    said its peer 'recorded no counterpart'."""
    events = kineto.events
    spans = [(s.ts, s.ts + s.dur) for s in window.steps] or [(window.lo, window.hi)]
    lost = [events[p] for p in kineto.op_positions
            if p not in event_to_host and events[p].name.startswith(CPU_RECORD_PREFIXES)
            and any(lo <= events[p].ts < hi for lo, hi in spans)]
    if lost:
        first = lost[0]
        start = min(lo for lo, _ in spans)
        at = (f"{first.ts - start:,.1f} us into the window" if math.isfinite(start)
              else f"at {first.ts:.1f} us")
        log.warning("%s: %d collective record(s) inside the window match no host op and are not in the graph "
                    "(e.g. %s %s, %s us long, thread %s): the host ET lacks them (its observer stopped "
                    "before they ended?)", kineto.path, len(lost), first.name, at, f"{first.dur:,.1f}",
                    first.tid)
