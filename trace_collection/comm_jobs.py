"""Jobs of communication shapes for ``collect.py`` (``--job tp``, ``overlap``, ``rooted``, ``groups``).

Each job has the signature of ``collect.py``'s jobs: ``job(rank, world_size, device, steps, prof, opts)``;
it calls ``prof.step()`` at the end of every iteration.  PyTorch is imported inside the jobs only.
"""

from __future__ import annotations


def tp_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """Megatron-like tensor parallelism x data parallelism (2D): ``--dp D`` data-parallel replicas (default
    2) of a tensor-parallel group of ``world/D`` consecutive ranks.  Each layer is a column-parallel linear
    (its input's gradient all-reduced over the TP group in backward) then a row-parallel linear (its output
    all-reduced over the TP group in forward); the weights' gradients are all-reduced over the DP group
    (ranks r, r+tp, ...) after backward, one all_reduce per parameter."""
    import torch
    import torch.distributed as dist

    opts = opts or {}
    dp = int(opts.get("dp") or 2)
    if world_size % dp:
        raise SystemExit(f"--dp {dp} does not divide --world-size {world_size}")
    tp = world_size // dp
    # every rank creates every group, in the same order (new_group is collective over the world)
    tp_groups = [dist.new_group(ranks=list(range(g, g + tp))) for g in range(0, world_size, tp)]
    dp_groups = [dist.new_group(ranks=list(range(s, world_size, tp))) for s in range(tp)]
    tp_group, dp_group = tp_groups[rank // tp], dp_groups[rank % tp]
    hidden = int(opts.get("hidden") or 64)
    batch = int(opts.get("batch") or 16)
    shard = hidden * 4 // tp

    class ToTP(torch.autograd.Function):     # Megatron's "f": identity forward, all_reduce backward
        @staticmethod
        def forward(ctx, x):  # noqa: D102
            return x

        @staticmethod
        def backward(ctx, g):  # noqa: D102
            g = g.contiguous()
            dist.all_reduce(g, group=tp_group)
            return g

    class FromTP(torch.autograd.Function):   # Megatron's "g": all_reduce forward, identity backward
        @staticmethod
        def forward(ctx, x):  # noqa: D102
            x = x.contiguous()
            dist.all_reduce(x, group=tp_group)
            return x

        @staticmethod
        def backward(ctx, g):  # noqa: D102
            return g

    torch.manual_seed(rank % tp)
    layers = [(torch.randn(hidden, shard, device=device, requires_grad=True),
               torch.randn(shard, hidden, device=device, requires_grad=True)) for _ in range(2)]
    params = [p for pair in layers for p in pair]
    opt = torch.optim.SGD(params, lr=1e-4)
    gen = torch.Generator().manual_seed(1234 + rank // tp)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(batch, hidden, generator=gen).to(device)
        for w1, w2 in layers:
            h = torch.relu(ToTP.apply(x) @ w1)      # column-parallel
            x = FromTP.apply(h @ w2)               # row-parallel
        x.pow(2).mean().backward()
        for p in params:
            dist.all_reduce(p.grad, group=dp_group)
        opt.step()
        prof.step()


def overlap_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """Asynchronous collectives in flight together: per step an all_reduce over the pair group
    (``[0,1], [2,3], ...``), one over the strided group (``[0,2], [1,3]`` on 4 ranks) and one over the world,
    all three issued (``async_op=True``) before a stretch of compute, waited on after it (the strided one
    last, after a second stretch).  Needs a world size divisible by 2 (4 gives two 2-rank groups of each
    kind)."""
    import torch
    import torch.distributed as dist

    opts = opts or {}
    if world_size % 2:
        raise SystemExit("--job overlap needs an even --world-size")
    half = world_size // 2
    pairs = [dist.new_group(ranks=[g, g + 1]) for g in range(0, world_size, 2)]
    strided = [dist.new_group(ranks=list(range(s, world_size, half))) for s in range(half)]
    pair, stride = pairs[rank // 2], strided[rank % half]
    hidden = int(opts.get("hidden") or 128)
    a = torch.randn(hidden, hidden, device=device)
    for step in range(steps):
        big = torch.full((64 * 1024,), float(rank + step), device=device)
        mid = torch.full((16 * 1024,), float(rank), device=device)
        small = torch.full((4 * 1024,), 1.0, device=device)
        w_pair = dist.all_reduce(big, group=pair, async_op=True)
        w_stride = dist.all_reduce(mid, group=stride, async_op=True)
        w_world = dist.all_reduce(small, async_op=True)
        b = a
        for _ in range(4):
            b = torch.tanh(b @ a)
        w_pair.wait()
        w_world.wait()
        for _ in range(4):
            b = torch.tanh(b @ a)
        w_stride.wait()
        prof.step()


def rooted_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """Rooted collectives with roots other than 0, then a barrier: broadcast from the last rank, reduce to
    rank 1, gather to rank ``2 % world``, scatter from the last rank, all_reduce, barrier (any world size,
    meant for 3, 5, 6)."""
    import torch
    import torch.distributed as dist

    last = world_size - 1
    n = 1024 * world_size
    for step in range(steps):
        t = torch.full((n,), float(rank + step), device=device)
        dist.broadcast(t, src=last)
        r = t.clone()
        dist.reduce(r, dst=1 % world_size)
        g_root = 2 % world_size
        g = torch.full((n // world_size,), float(rank), device=device)
        dist.gather(g, [torch.empty_like(g) for _ in range(world_size)] if rank == g_root else None,
                    dst=g_root)
        s = torch.empty(n // world_size, device=device)
        dist.scatter(s, [torch.full((n // world_size,), float(i)) for i in range(world_size)]
                     if rank == last else None, src=last)
        dist.all_reduce(t)
        dist.barrier()
        prof.step()


def groups_job(rank: int, world_size: int, device, steps: int, prof, opts: dict | None = None) -> None:
    """Many process groups, few used: every pair of ranks gets a group (``new_group`` over all pairs, in
    order), then the strided groups ``[0,2], [1,3]`` (4 ranks; ranks of one parity in general); per step
    an all_reduce and a broadcast from its second member on this rank's strided group, then an all_reduce
    over the world.  Needs an even world size."""
    import itertools

    import torch
    import torch.distributed as dist

    if world_size % 2:
        raise SystemExit("--job groups needs an even --world-size")
    for i, j in itertools.combinations(range(world_size), 2):    # created, never used
        dist.new_group(ranks=[i, j])
    parity = [dist.new_group(ranks=list(range(p, world_size, 2))) for p in range(2)]
    mine = parity[rank % 2]
    members = list(range(rank % 2, world_size, 2))
    for step in range(steps):
        t = torch.full((8 * 1024,), float(rank + step), device=device)
        dist.all_reduce(t, group=mine)
        b = torch.full((2 * 1024,), float(rank), device=device)
        dist.broadcast(b, src=members[1], group=mine)
        dist.all_reduce(torch.ones(32 * 1024, device=device))
        prof.step()


JOBS = {"tp": tp_job, "overlap": overlap_job, "rooted": rooted_job, "groups": groups_job}
