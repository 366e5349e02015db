#!/usr/bin/env python3
"""Collect real PyTorch host ET + Kineto trace pairs for every rank of a small distributed job.

Small jobs, each run with ``world_size`` processes on localhost (communication shapes: ``comm_jobs.py``):

* ``mlp``: a DistributedDataParallel MLP (gradient all_reduce through the reducer);
* ``collectives``: explicit collectives every step: broadcast, all_gather, all_reduce (sync, async and on a
  sub-group), reduce_scatter, all_to_all, isend/irecv and barrier.

Backend: gloo on CPU; NCCL (and CUDA activities in the profiler) when there is one GPU per rank.
Launch: ``torch.multiprocessing`` by default, or torchrun-style (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/
``MASTER_PORT`` in the environment, e.g. under ``torchrun``), detected automatically.

Every rank profiles with ``torch.profiler.profile`` + ``ExecutionTraceObserver`` on one schedule and calls
``prof.step()`` each iteration, so the Kineto trace holds ``ProfilerStep#N`` windows and the host ET covers
the same steps.  Per rank it writes ``host_et_N.json`` and ``kineto_N.json`` (``.json.gz`` with ``--gzip``).

``pack`` turns such a folder into the integration harness's archive: ``NAME.tgz`` holding ``NAME/`` with
``chakra_host_et_N.json`` + ``kineto_N.json`` per rank (uncompressed inside; the archive is gzipped).

PyTorch is needed only here (the toolkit's optional extra ``collect``); the toolkit itself never imports it.
See ``trace_collection/README.md`` for the exact commands.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import socket
import sys
import tarfile
from pathlib import Path

from comm_jobs import JOBS as COMM_JOBS  # --job tp, overlap, rooted, groups (communication shapes)

JOBS = ("mlp", "collectives", "pipeline", "moe", *COMM_JOBS)
_PERTURB = ("hidden", "batch", "threads", "straggler_rank", "straggler_ms", "straggler_mode",
            "extra_broadcast", "alternate", "base_batch", "base_extra_broadcast", "step_barrier",
            "window_skew", "et_iteration", "bucket_cap_mb", "accum", "checkpoint", "backward_thread",
            "microbatches", "p2p", "repeat", "moe_group", "dp")
_PROFILING = ("compile", "prof_flags", "et_steps", "eval_every", "sleep_op_ms", "tiny_ops", "loader_workers",
              "opt_thread")


# --------------------------------------------------------------------------------------------- the jobs
def _mlp_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """DDP over a 3-layer MLP; ``opts`` perturbs it (see ``--hidden``, ``--batch``, ``--straggler-*``,
    ``--extra-broadcast``, ``--alternate`` in ``main``): the same job, one thing changed, to check
    what-if replays.  With ``alternate`` only odd-numbered steps are perturbed and even steps run
    ``base_batch`` / ``base_extra_broadcast`` (a perturbed and an unperturbed step side by side, under
    the same load of the machine)."""
    import contextlib
    import threading
    import time

    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    opts = opts or {}
    alternate = bool(opts.get("alternate"))

    def sizes(text):
        return [int(x) for x in str(text or "").split(",") if x.strip() and int(x) > 0]

    hidden = int(opts.get("hidden") or 64)
    batch = int(opts.get("batch") or 16)
    base_batch = int(opts.get("base_batch") or batch) if alternate else batch
    straggler = opts.get("straggler_rank")
    sleep_s = float(opts.get("straggler_ms") or 0.0) / 1000.0
    spin = opts.get("straggler_mode") == "spin"
    extra = sizes(opts.get("extra_broadcast"))
    base_extra = (sizes(opts.get("base_extra_broadcast") or opts.get("extra_broadcast")) if alternate
                  else extra)
    perturbed = [True]
    step_barrier = bool(opts.get("step_barrier"))
    accum = int(opts.get("accum") or 1)
    backward_thread = bool(opts.get("backward_thread"))

    class Straggle(nn.Module):
        """Sleeps inside the forward on the straggling rank (a slow host: the same ops, later)."""

        def forward(self, x):  # noqa: D102 - a pass-through
            if sleep_s > 0 and perturbed[0] and straggler is not None and rank == int(straggler):
                if spin:     # busy: the core stays taken, as on a slower host
                    until = time.perf_counter() + sleep_s
                    while time.perf_counter() < until:
                        pass
                else:        # asleep: the core is free for the other ranks meanwhile
                    time.sleep(sleep_s)
            return x

    class Checkpointed(nn.Module):
        """--checkpoint: the wrapped layers keep no activations; backward recomputes their forward."""

        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):  # noqa: D102 - recomputed in backward
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self.inner, x, use_reentrant=opts.get("checkpoint") == "reentrant")

    torch.manual_seed(0)
    middle: nn.Module = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
    if opts.get("checkpoint"):
        middle = Checkpointed(middle)
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), Straggle(), middle, nn.Linear(hidden, 8))
    model = model.to(device)
    cap = opts.get("bucket_cap_mb")    # smaller buckets: several gradient all_reduces in flight per step
    ddp = DDP(_profiling_model(model, opts), device_ids=[device.index] if device.type == "cuda" else None,
              **({"bucket_cap_mb": float(cap)} if cap else {}))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1234 + rank)
    bufs = {k: torch.zeros(k, device=device) for k in (*extra, *base_extra)}
    loader = _profiling_loader(opts, batch)
    pending_step = _PendingStep()
    for it in range(steps):
        perturbed[0] = not alternate or it % 2 == 1
        b = batch if perturbed[0] else base_batch
        x = torch.randn(b, 32, generator=gen).to(device)
        y = torch.randint(0, 8, (b,), generator=gen).to(device)
        if loader is not None:
            x, y = next(loader)
        pending_step.join()       # --opt-thread: the last step's optimizer step ends before the grads go
        opt.zero_grad(set_to_none=True)
        for micro in range(accum):    # --accum K: K-1 micro-batches under no_sync, the last one all-reduces
            xs, ys = x.chunk(accum)[micro], y.chunk(accum)[micro]
            with (ddp.no_sync() if micro < accum - 1 else contextlib.nullcontext()):
                loss = loss_fn(ddp(xs), ys)
                if backward_thread:  # backward run by another thread of the process (the caller waits)
                    worker = threading.Thread(target=loss.backward, name="backward")
                    worker.start()
                    worker.join()
                else:
                    loss.backward()
        if opts.get("opt_thread"):
            pending_step.start(opt.step)
        else:
            opt.step()
        _profiling_extras(ddp, it, opts)
        sizes_now = extra if perturbed[0] else base_extra
        if sizes_now or step_barrier:
            import torch.distributed as dist

            for k in sizes_now:          # extra traffic of chosen sizes (a gloo:broadcast each per step)
                dist.broadcast(bufs[k], src=0)
            if step_barrier:             # every rank ends the step together: no step's cost spills over
                dist.barrier()
        prof.step()
    pending_step.join()


# ------------------------------------------------------------------- profiling configurations / op shapes
def _profiling_model(model, opts: dict):
    """--compile: the model run through torch.compile before DDP wraps it (inductor on CPU: generated C++
    kernels; "Torch-Compiled Region", CompiledFunction, "## Call CompiledFxGraph ... ##" ops in the traces).
    (Compiling the DDP wrapper instead ran it eagerly here: no CompiledFunction in the traces.)"""
    if not opts.get("compile"):
        return model
    import torch

    return torch.compile(model, backend="inductor")


def _profiling_extras(ddp, it: int, opts: dict) -> None:
    """The per-step additions of the profiling shapes, after the optimizer step:
    --eval-every N: an eval forward under torch.no_grad every N-th step;
    --sleep-op-ms D: a user annotation (record_function) around a custom autograd.Function, in-place ops and
    a time.sleep of D ms (CPU time with no child op);
    --tiny-ops N: N tiny aten ops (a step of many short ops)."""
    import time

    import torch

    every = int(opts.get("eval_every") or 0)
    if every and it % every == 0:
        with torch.no_grad():
            ddp.eval()
            ddp(torch.randn(8, 32))
            ddp.train()
    sleep_ms = float(opts.get("sleep_op_ms") or 0.0)
    if sleep_ms > 0:
        class Twice(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):  # noqa: D102
                return x * 2

            @staticmethod
            def backward(ctx, g):  # noqa: D102
                return g * 2

        x = torch.randn(64, 64, requires_grad=True)
        y = Twice.apply(x)
        y.sum().backward()
        z = torch.zeros(64, 64)
        z.add_(1.0).mul_(3.0).relu_()
        with torch.profiler.record_function("user_sleep"):
            time.sleep(sleep_ms / 1000.0)
    n = int(opts.get("tiny_ops") or 0)
    if n:
        t = torch.zeros(4)
        for _ in range(n):
            t.add_(1.0)


def _profiling_loader(opts: dict, batch: int):
    """--loader-workers N: (x, y) batches from a DataLoader with N worker processes (an endless iterator),
    or None."""
    n = int(opts.get("loader_workers") or 0)
    if n <= 0:
        return None
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    gen = torch.Generator().manual_seed(99)
    data = TensorDataset(torch.randn(batch * 64, 32, generator=gen),
                         torch.randint(0, 8, (batch * 64,), generator=gen))
    loader = DataLoader(data, batch_size=batch, num_workers=n, persistent_workers=True, drop_last=True)

    def endless():
        while True:
            yield from loader

    return endless()


class _PendingStep:
    """--opt-thread: the optimizer step runs on another thread, joined when the next iteration begins (it
    overlaps the next step's data preparation and crosses the profiler's step boundary)."""

    def __init__(self) -> None:
        self.thread = None

    def start(self, fn) -> None:
        import threading

        self.thread = threading.Thread(target=fn, name="optimizer")
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None


def _profile_kwargs(opts: dict) -> dict:
    """--prof-flags: profiler options a user turns on or off (no-shapes, stack, memory, flops)."""
    flags = {f.strip() for f in str(opts.get("prof_flags") or "").split(",") if f.strip()}
    unknown = flags - {"no-shapes", "stack", "memory", "flops"}
    if unknown:
        raise SystemExit(f"--prof-flags: unknown {sorted(unknown)}")
    return {"record_shapes": "no-shapes" not in flags, "with_stack": "stack" in flags,
            "profile_memory": "memory" in flags, "with_flops": "flops" in flags}


class _ShiftedET:
    """--et-steps A:B: the ET observer records iterations A..B-1 (0-based), whatever the profiler's window;
    ``step()`` also steps the profiler."""

    def __init__(self, prof, et, first: int, end: int) -> None:
        self.prof, self.et, self.first, self.end = prof, et, first, end
        self.done = 0
        if first == 0:
            et.start()

    def step(self) -> None:
        self.prof.step()
        self.done += 1
        if self.done == self.first:
            self.et.start()
        elif self.done == self.end:
            self.et.stop()


def _collectives_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None
                     ) -> None:
    import torch
    import torch.distributed as dist

    sub = dist.new_group(ranks=list(range(world_size)))  # a second process group over the same ranks
    n = 512 * world_size  # divisible by the world size: equal reduce_scatter / all_to_all chunks
    for step in range(steps):
        t = torch.full((n,), float(rank + step), device=device)
        dist.broadcast(t, src=0)
        gathered = [torch.empty(n, device=device) for _ in range(world_size)]
        dist.all_gather(gathered, t)
        dist.all_reduce(t)
        work = dist.all_reduce(t * 2, async_op=True)
        work.wait()
        dist.all_reduce(t, group=sub)
        out = torch.empty(n // world_size, device=device)
        chunks = [c.contiguous() for c in torch.ones(n, device=device).chunk(world_size)]
        dist.reduce_scatter(out, chunks)
        a2a_out = torch.empty(n, device=device)
        dist.all_to_all_single(a2a_out, torch.arange(n, dtype=torch.float32, device=device))
        peer = (rank + 1) % world_size
        src = (rank - 1) % world_size
        recv = torch.empty(256, device=device)
        reqs = [dist.isend(torch.full((256,), float(rank), device=device), dst=peer),
                dist.irecv(recv, src=src)]
        for r in reqs:
            r.wait()
        dist.barrier()
        prof.step()


def _pipeline_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """Pipeline parallelism, one stage per rank (GPipe order): every micro-batch's activations go forward
    from stage to stage by send/recv, then its gradients come back the other way; ``--p2p async`` posts
    isend/irecv and waits on them, ``blocking`` (default) uses send/recv.  No DDP: each stage's optimizer
    steps its own layer."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    opts = opts or {}
    hidden = int(opts.get("hidden") or 64)
    batch = int(opts.get("batch") or 16)
    micro = int(opts.get("microbatches") or 4)
    is_async = opts.get("p2p") == "async"
    batched = opts.get("p2p") == "batch"
    dp = int(opts.get("dp") or 1)        # --dp D: D pipeline replicas, gradients all-reduced per stage
    if world_size % dp:
        raise SystemExit(f"--dp {dp} does not divide --world-size {world_size}")
    pp = world_size // dp
    stage_groups = [dist.new_group(ranks=list(range(s, world_size, pp))) for s in range(pp)] if dp > 1 else []
    pos = rank % pp                      # this rank's stage
    first, last = pos == 0, pos == pp - 1
    torch.manual_seed(pos)
    stage = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)).to(device)
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234)
    mb = batch // micro

    def send(t, dst: int):
        if batched:   # batch_isend_irecv of one op (as Megatron-style schedules post them)
            return dist.batch_isend_irecv([dist.P2POp(dist.isend, t, dst)])[0]
        return dist.isend(t, dst=dst) if is_async else dist.send(t, dst=dst)

    def recv(t, src: int) -> None:
        if batched:
            for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, t, src)]):
                w.wait()
        elif is_async:
            dist.irecv(t, src=src).wait()
        else:
            dist.recv(t, src=src)

    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(batch, hidden, generator=gen).to(device)
        y = torch.randn(batch, hidden, generator=gen).to(device)
        inputs, outputs, pending = [], [], []
        for m in range(micro):                       # forward of every micro-batch
            if first:
                inp = x[m * mb:(m + 1) * mb].clone()
            else:
                inp = torch.empty(mb, hidden, device=device)
                recv(inp, rank - 1)
                inp.requires_grad_(True)
            out = stage(inp)
            if not last:
                pending.append(send(out.detach(), rank + 1))
            inputs.append(inp)
            outputs.append(out)
        for m in reversed(range(micro)):             # backward, last micro-batch first
            if last:
                loss = ((outputs[m] - y[m * mb:(m + 1) * mb]) ** 2).mean()
                loss.backward()
            else:
                grad = torch.empty(mb, hidden, device=device)
                recv(grad, rank + 1)
                outputs[m].backward(grad)
            if not first:
                pending.append(send(inputs[m].grad, rank - 1))
        for w in pending:
            if w is not None:
                w.wait()
        for prm in (stage_groups and stage.parameters() or ()):
            dist.all_reduce(prm.grad, group=stage_groups[pos])
        opt.step()
        prof.step()


def _moe_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """An MoE-like step: tokens go to the experts by all_to_all_single with uneven splits inside an
    expert-parallel sub-group (``--moe-group G`` consecutive ranks; default 2), come back by the reverse
    all_to_all, and the dense gradients are all-reduced over the world."""
    import torch
    import torch.distributed as dist

    opts = opts or {}
    size = int(opts.get("moe_group") or 2)
    if world_size % size:
        raise SystemExit(f"--moe-group {size} does not divide --world-size {world_size}")
    groups = [dist.new_group(ranks=list(range(g, g + size))) for g in range(0, world_size, size)]
    group = groups[rank // size]
    me = rank % size
    hidden = int(opts.get("hidden") or 64)

    def tokens(src: int, dst: int) -> int:   # uneven: every (sender, receiver) pair its own count
        return 8 * (1 + src + 3 * dst)

    send_splits = [tokens(me, j) * hidden for j in range(size)]
    recv_splits = [tokens(j, me) * hidden for j in range(size)]
    torch.manual_seed(rank)
    expert = torch.randn(hidden, hidden, device=device)
    dense = torch.randn(hidden * hidden, device=device)
    for _ in range(steps):
        x = torch.randn(sum(send_splits), device=device)
        routed = torch.empty(sum(recv_splits), device=device)
        dist.all_to_all_single(routed, x, output_split_sizes=recv_splits, input_split_sizes=send_splits,
                               group=group)
        y = (routed.view(-1, hidden) @ expert).reshape(-1)
        back = torch.empty(sum(send_splits), device=device)
        dist.all_to_all_single(back, y, output_split_sizes=send_splits, input_split_sizes=recv_splits,
                               group=group)
        grad = dense * back.sum()
        dist.all_reduce(grad)
        prof.step()


# ------------------------------------------------------------------------------------------------ a rank
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_rank(rank: int, world_size: int, job: str, out_dir: str, steps: int, wait: int, warmup: int,
             active: int, opts: dict | None = None) -> None:
    """Initialise the process group, profile ``job`` on this rank, write its two traces."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    torch.set_num_threads(int((opts or {}).get("threads") or 1))
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)

    out = Path(out_dir)
    host_path = out / f"host_et_{rank}.json"
    kineto_path = out / f"kineto_{rank}.json"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else [])
    et = ExecutionTraceObserver().register_callback(str(host_path))

    cycles = [0]

    def on_ready(p) -> None:
        # --repeat R: called once per wait/warmup/active cycle; kineto_N.json keeps the last cycle (as a
        # handler writing one fixed path does), cycles/kineto_N.cK.json every cycle
        if int((opts or {}).get("repeat") or 1) > 1:
            import shutil

            (out / "cycles").mkdir(exist_ok=True)
            one = out / "cycles" / f"kineto_{rank}.c{cycles[0]}.json"
            p.export_chrome_trace(str(one))      # (a trace is exported once)
            cycles[0] += 1
            shutil.copyfile(one, kineto_path)
            return
        p.export_chrome_trace(str(kineto_path))

    # --window-skew R:K: rank R starts (and stops) profiling K steps later than the others, as on-demand
    # profiling triggered on every rank at its own moment does: the ranks' windows hold different collectives
    skew_rank, _, skew_steps = str((opts or {}).get("window_skew") or "-1:0").partition(":")
    skew = int(skew_steps or 0)
    late = skew if rank == int(skew_rank) else 0
    total = max(steps, wait + warmup + active) + skew
    run = {"mlp": _mlp_job, "collectives": _collectives_job, "pipeline": _pipeline_job, "moe": _moe_job,
           **COMM_JOBS}[job]
    one = (opts or {}).get("et_iteration")
    if one is not None:
        # --et-iteration K: the profiler runs over all iterations without a schedule (no prof.step(), so no
        # ProfilerStep windows), the ET observer over iteration K alone (PARAM's linker test pairs)
        total = max(steps, int(one) + 1)
        with profile(activities=activities, on_trace_ready=on_ready, record_shapes=True):
            run(rank, world_size, device, total, _OneIterationET(et, int(one)), opts)
    else:
        repeat = int((opts or {}).get("repeat") or 1)
        plan = schedule(wait=wait + late, warmup=warmup, active=active, repeat=repeat)
        total = max(total, (wait + warmup + active) * repeat + skew)
        kw = _profile_kwargs(opts or {})
        shifted = (opts or {}).get("et_steps")
        if shifted:       # --et-steps A:B: the observer on its own steps, not the profiler's window
            a, _, b = str(shifted).partition(":")
            total = max(total, int(b))
            with profile(activities=activities, schedule=plan, on_trace_ready=on_ready, **kw) as prof:
                run(rank, world_size, device, total, _ShiftedET(prof, et, int(a), int(b)), opts)
        else:
            with profile(activities=activities, schedule=plan, on_trace_ready=on_ready,
                         execution_trace_observer=et, **kw) as prof:
                run(rank, world_size, device, total, prof, opts)
    et.unregister_callback()
    if use_cuda:
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


class _OneIterationET:
    """What the jobs call ``prof.step()`` on at the end of each iteration when the ET observer records one
    iteration only: it starts the observer before iteration ``k`` and stops it after it (no profiler step)."""

    def __init__(self, et, k: int) -> None:
        self.et = et
        self.k = k
        self.done = 0          # iterations finished
        if k == 0:
            et.start()

    def step(self) -> None:
        self.done += 1
        if self.done == self.k:
            self.et.start()
        elif self.done == self.k + 1:
            self.et.stop()


def _spawn_entry(rank: int, world_size: int, job: str, out_dir: str, steps: int, wait: int, warmup: int,
                 active: int, opts: dict | None = None) -> None:
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world_size)
    run_rank(rank, world_size, job, out_dir, steps, wait, warmup, active, opts)


# --------------------------------------------------------------------------------------------- packing
_RANK_FILE = re.compile(r"^(host_et|kineto)_(\d+)\.json(\.gz)?$")


def _read_maybe_gz(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def rank_files(folder: Path) -> dict[int, dict[str, Path]]:
    """``{rank: {"host_et": path, "kineto": path}}`` of a collection folder (``.json`` or ``.json.gz``)."""
    found: dict[int, dict[str, Path]] = {}
    for p in sorted(folder.iterdir()):
        m = _RANK_FILE.match(p.name)
        if m:
            found.setdefault(int(m.group(2)), {})[m.group(1)] = p
    for rank, files in found.items():
        if set(files) != {"host_et", "kineto"}:
            missing = "host_et" if "host_et" not in files else "kineto"
            raise SystemExit(f"{folder}: rank {rank} lacks its {missing} file")
    if not found:
        raise SystemExit(f"{folder}: no host_et_N.json(.gz) / kineto_N.json(.gz) files")
    return dict(sorted(found.items()))


def pack(folder: Path, archive: Path) -> Path:
    """Write ``archive`` (NAME.tgz) holding ``NAME/chakra_host_et_N.json`` + ``NAME/kineto_N.json``.

    Deterministic: sorted members, mtime 0, owner root, so re-packing the same traces gives the same bytes.
    """
    name = archive.name
    for suffix in (".tgz", ".tar.gz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    files = rank_files(folder)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        def add(arcname: str, data: bytes, is_dir: bool = False) -> None:
            info = tarfile.TarInfo(arcname)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if is_dir:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))

        add(name, b"", is_dir=True)
        for rank, pair in files.items():
            add(f"{name}/chakra_host_et_{rank}.json", _read_maybe_gz(pair["host_et"]))
            add(f"{name}/kineto_{rank}.json", _read_maybe_gz(pair["kineto"]))
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.part")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(buf.getvalue())
    os.replace(tmp, archive)
    return archive


def gzip_folder(folder: Path) -> None:
    """Replace every ``host_et_N.json`` / ``kineto_N.json`` by a ``.json.gz`` (mtime 0, level 9)."""
    for p in sorted(folder.glob("*.json")):
        if _RANK_FILE.match(p.name):
            target = p.with_name(p.name + ".gz")
            with open(target, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                          compresslevel=9) as gz:
                gz.write(p.read_bytes())
            p.unlink()


def check_folder(folder: Path) -> list[str]:
    """One line per rank: node count, ProfilerStep windows, process groups seen (a sanity report)."""
    lines = []
    for rank, pair in rank_files(folder).items():
        host = json.loads(_read_maybe_gz(pair["host_et"]))
        kin = json.loads(_read_maybe_gz(pair["kineto"]))
        steps = sorted({e["name"] for e in kin.get("traceEvents", [])
                        if str(e.get("name", "")).startswith("ProfilerStep#")})
        names = [n.get("name", "") for n in host.get("nodes", [])]
        comms = sum(1 for n in names if n.startswith(("c10d::", "record_param_comms", "nccl:")))
        lines.append(f"rank {rank}: host ET schema {host.get('schema')} {len(names)} nodes "
                     f"({comms} comm ops), Kineto {len(kin.get('traceEvents', []))} events, steps {steps}")
    return lines


# ------------------------------------------------------------------------------------------------- main
def collect(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env_rank = os.environ.get("RANK")
    opts = {k: getattr(args, k) for k in (*_PERTURB, *_PROFILING) if getattr(args, k) is not None}
    common = (args.job, str(out), args.steps, args.wait, args.warmup, args.active, opts)
    if env_rank is not None and os.environ.get("WORLD_SIZE"):
        # torchrun-style: this process is one rank; torchrun (or the user) set the rendezvous variables
        run_rank(int(env_rank), int(os.environ["WORLD_SIZE"]), *common)
        if int(env_rank) != 0:
            return 0
        # rank 0 finishes after the final barrier, so every rank has written its files
    else:
        import torch.multiprocessing as mp

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        mp.spawn(_spawn_entry, args=(args.world_size, *common), nprocs=args.world_size, join=True)
    if args.gzip:
        gzip_folder(out)
    for line in check_folder(out):
        print(line)
    if args.archive:
        print(f"packed {pack(out, Path(args.archive))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="run a small distributed job and write host ET + Kineto per rank")
    c.add_argument("--job", choices=JOBS, default="mlp")
    c.add_argument("--world-size", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    c.add_argument("--out", required=True, help="folder for host_et_N.json + kineto_N.json")
    c.add_argument("--steps", type=int, default=0, help="iterations (at least wait+warmup+active)")
    c.add_argument("--wait", type=int, default=1)
    c.add_argument("--warmup", type=int, default=1)
    c.add_argument("--active", type=int, default=2, help="profiled steps (ProfilerStep windows)")
    c.add_argument("--gzip", action="store_true", help="write .json.gz files")
    g = c.add_argument_group("perturbations (--job mlp; to check what-if replays against real runs)")
    g.add_argument("--hidden", type=int, help="hidden width of the MLP (default 64)")
    g.add_argument("--bucket-cap-mb", type=float,
                   help="DDP's gradient bucket size (MB; default DDP's 25): smaller, several all_reduces per "
                        "step, in flight together on gloo's worker threads")
    g.add_argument("--batch", type=int, help="batch size (default 16): more compute, same gradients")
    g.add_argument("--threads", type=int, help="torch intra-op threads per rank (default 1)")
    g.add_argument("--straggler-rank", type=int, help="the rank that sleeps inside its forward every step")
    g.add_argument("--straggler-ms", type=float, help="how long it sleeps (ms)")
    g.add_argument("--straggler-mode", choices=("sleep", "spin"), default="sleep",
                   help="sleep (frees its core meanwhile) or spin (keeps it busy, like a slower host)")
    g.add_argument("--extra-broadcast", metavar="NELEM[,NELEM...]",
                   help="broadcast float32 buffers of these sizes from rank 0 every step (extra traffic)")
    g.add_argument("--alternate", action="store_true",
                   help="perturb odd-numbered steps only; even steps run --base-batch / "
                        "--base-extra-broadcast and no straggler (A/B under the same machine load)")
    g.add_argument("--step-barrier", action="store_true",
                   help="end every step with a barrier (a rank's step then holds its own costs only: the "
                        "source of a broadcast otherwise runs ahead into the next step)")
    g.add_argument("--base-batch", type=int, help="--alternate: the batch of the unperturbed steps")
    g.add_argument("--base-extra-broadcast", metavar="NELEM[,NELEM...]",
                   help="--alternate: the broadcasts of the unperturbed steps")
    g.add_argument("--window-skew", metavar="RANK:STEPS",
                   help="RANK starts and stops profiling STEPS steps after the other ranks (profiler windows "
                        "that cut the job at different collectives)")
    c.add_argument("--et-iteration", type=int, metavar="K",
                   help="the profiler records all --steps iterations without a schedule (no ProfilerStep "
                        "windows), the ET observer iteration K alone (0-based): a host ET of one iteration "
                        "and a Kineto trace of many, as PARAM's linker test pairs are made")
    s = c.add_argument_group("other shapes")
    s.add_argument("--accum", type=int, metavar="K",
                   help="--job mlp: gradient accumulation, K micro-batches per step, the first K-1 under "
                        "DDP's no_sync (one all_reduce per step)")
    s.add_argument("--checkpoint", choices=("reentrant", "nonreentrant"),
                   help="--job mlp: activation checkpointing of the middle layer (backward recomputes it)")
    s.add_argument("--backward-thread", action="store_true",
                   help="--job mlp: run loss.backward() on another thread of the process (joined)")
    s.add_argument("--microbatches", type=int, help="--job pipeline: micro-batches per step (default 4)")
    s.add_argument("--p2p", choices=("blocking", "async", "batch"), default=None,
                   help="--job pipeline: send/recv (default), isend/irecv + wait, or batch_isend_irecv")
    s.add_argument("--dp", type=int, metavar="D",
                   help="--job pipeline: D pipeline replicas (rank r is stage r %% (world/D)), each stage's "
                        "gradients all-reduced over its replicas' group; --job tp: D data-parallel "
                        "replicas of the tensor-parallel group (default 2)")
    s.add_argument("--moe-group", type=int, metavar="G",
                   help="--job moe: ranks per expert-parallel sub-group (default 2)")
    s.add_argument("--repeat", type=int, metavar="R",
                   help="the profiler schedule's repeat: R wait/warmup/active cycles; the host ET holds "
                        "every cycle's active steps, kineto_N.json the last cycle's, cycles/ each cycle's")
    f = c.add_argument_group("profiling configurations and op shapes (--job mlp, except --prof-flags and "
                             "--et-steps: any job)")
    f.add_argument("--compile", action="store_true", help="torch.compile the DDP model (inductor on CPU)")
    f.add_argument("--prof-flags", metavar="FLAG[,FLAG...]",
                   help="profiler options: no-shapes (record_shapes=False), stack (with_stack), memory "
                        "(profile_memory), flops (with_flops)")
    f.add_argument("--et-steps", metavar="A:B",
                   help="the ET observer records iterations A..B-1 (0-based) instead of the profiler's "
                        "active window (host ET and Kineto covering different, partly overlapping steps)")
    f.add_argument("--eval-every", type=int, metavar="N",
                   help="an eval forward under no_grad every N-th step")
    f.add_argument("--sleep-op-ms", type=float, metavar="D",
                   help="per step: a custom autograd.Function, in-place ops and a record_function "
                        "'user_sleep' around time.sleep(D ms)")
    f.add_argument("--tiny-ops", type=int, metavar="N", help="per step: N tiny in-place aten ops")
    f.add_argument("--loader-workers", type=int, metavar="N",
                   help="batches from a DataLoader with N worker processes")
    f.add_argument("--opt-thread", action="store_true",
                   help="the optimizer step on another thread, joined when the next iteration begins")
    c.add_argument("--archive", help="also pack NAME.tgz for the integration harness")
    p = sub.add_parser("pack", help="pack a collection folder into NAME.tgz (NAME/chakra_host_et_N.json ...)")
    p.add_argument("--src", required=True)
    p.add_argument("--archive", required=True)
    k = sub.add_parser("check", help="print a one-line summary per rank of a collection folder")
    k.add_argument("--src", required=True)
    args = parser.parse_args(argv)
    if args.cmd == "collect":
        return collect(args)
    if args.cmd == "pack":
        print(f"packed {pack(Path(args.src), Path(args.archive))}")
        return 0
    for line in check_folder(Path(args.src)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
