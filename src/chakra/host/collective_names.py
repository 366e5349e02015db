"""Which host ops and GPU kernels are collectives, of which implementation, and which collective: the one
table the linker, the converter, Kineto-only links, ``chakra stats`` and ``chakra summary`` ask.

A collective shows in a trace as up to four records, each of one *role*:

* ``record`` -- ``record_param_comms``: PyTorch's record of a c10d collective's parameters (collective,
  element counts, dtype, process group, sequence number), whatever the backend.  Never a comm node; its
  fields, where present, come first.
* ``call`` -- the op a program calls, which names the collective and holds its tensors: ``c10d::allreduce_``,
  vLLM's ``vllm::all_reduce``.  Never a comm node itself.
* ``run`` -- the op that runs it: a process-group backend's record (``nccl:all_reduce``, ``gloo:all_reduce``,
  ``mpi:*``, ``ucc:*``, ``xccl:*``) or an implementation's own op (torch symmetric memory's
  ``symm_mem::multimem_all_reduce_``, vLLM's custom all-reduce ``_C_custom_ar::all_reduce``).  When the
  trace holds no communication kernel of it (a CPU backend such as gloo or MPI, a host ET alone, a kernel
  the profiler missed), the ``run`` op is the comm node.
* a communication *kernel* (:data:`KERNELS`): the comm node of a GPU collective.  Kernels are recognised by
  name, or because Kineto labels them with a ``Collective name``.

The collective of a prefixed op (``c10d::``, ``nccl:``, ``gloo:`` ...) is the rest of its name in any
spelling (:func:`canonical_collective`: ``_allgather_base_`` -> ``allgather``); the ops of
:data:`OP_NAMES` have theirs in the table.  ``_c10d_functional::*`` ops are not listed: each calls a
``c10d::*`` op, which is.  Fused kernels that compute as well as communicate (an all-reduce fused with a
norm) and the small count exchanges before a DeepEP dispatch (``notify_dispatch``) are not listed: they stay
compute nodes.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

RECORD = "record"
CALL = "call"
RUN = "run"
NCCL = "NCCL/RCCL"   # the implementation name of NCCL's (and RCCL's) records and kernels

#: The canonical collective names every stage uses.
CANONICAL_COLLECTIVES: tuple[str, ...] = (
    "allreduce", "allgather", "reduce_scatter", "broadcast", "all_to_all", "reduce", "gather",
    "scatter", "barrier", "send", "recv", "wait",
)

#: Spellings seen in host ETs, Kineto args and c10d/nccl/gloo op names, keyed by the *compact* form
#: (lower case, without ``_``, ``-`` and spaces), mapped to the canonical name.  ``_base``,
#: ``_coalesced``, ``_into_tensor`` and similar variants move the same bytes as their plain form.
COLLECTIVE_ALIASES: dict[str, str] = {
    # allreduce
    "allreduce": "allreduce", "allreducecoalesced": "allreduce", "allreducesparse": "allreduce",
    # allgather
    "allgather": "allgather", "allgatherbase": "allgather", "allgatherintotensor": "allgather",
    "allgatherintotensorcoalesced": "allgather", "allgathercoalesced": "allgather",
    "allgatherv": "allgather", "allgathertensor": "allgather", "allgatherobject": "allgather",
    # reduce_scatter
    "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
    "reducescattertensor": "reduce_scatter", "reducescattertensorcoalesced": "reduce_scatter",
    "reducescattercoalesced": "reduce_scatter", "reducescatterv": "reduce_scatter",
    "reducescatterblock": "reduce_scatter",
    # broadcast
    "broadcast": "broadcast", "broadcastcoalesced": "broadcast", "bcast": "broadcast",
    # all_to_all
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "alltoallbase": "all_to_all",
    "alltoallsingle": "all_to_all",
    # rooted collectives
    "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    # synchronisation
    "barrier": "barrier", "monitoredbarrier": "barrier",
    # point to point
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "recvanysource": "recv",
    "sendrecv": "send",
    # completion of an async collective (record_param_comms "wait")
    "wait": "wait",
}


class OpRule(NamedTuple):
    """What the table says of a host op name."""

    implementation: str   # "NCCL/RCCL", "gloo", "vLLM custom all-reduce", ...
    role: str             # RECORD, CALL or RUN
    collective: str       # canonical; "" for record_param_comms (its fields say it)
    on_cpu: bool = False  # a RUN record that does the work on a CPU thread (gloo, MPI, UCC)


#: Prefixed host ops: (prefix, implementation, role, runs on a CPU thread); the collective is the rest of
#: the name.  ``nccl:*`` records are RCCL's too (PyTorch's ProcessGroupNCCL on ROCm).
OP_PREFIXES: tuple[tuple[str, str, str, bool], ...] = (
    ("c10d::", "PyTorch c10d", CALL, False),
    ("nccl:", NCCL, RUN, False),
    ("gloo:", "gloo", RUN, True),
    ("mpi:", "MPI", RUN, True),
    ("ucc:", "UCC", RUN, True),
    ("xccl:", "oneCCL (XCCL)", RUN, False),
)

_VLLM = "vLLM"
_SYMM = "torch symmetric memory"
_NVSHMEM = "NVSHMEM"

#: Host ops by exact name, grouped: (implementation, role, canonical collective, names).
_NAMED_OPS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("PyTorch c10d", RECORD, "", ("record_param_comms",)),
    # vLLM's custom ops (vllm/distributed/parallel_state.py): they call whichever communicator is set up
    # (custom all-reduce, symmetric memory, pynccl, torch.distributed)
    (_VLLM, CALL, "allreduce", ("vllm::all_reduce", "vllm::inplace_all_reduce", "vllm::outplace_all_reduce")),
    (_VLLM, CALL, "allgather", ("vllm::all_gather",)),
    (_VLLM, CALL, "reduce_scatter", ("vllm::reduce_scatter",)),
    # vLLM's one-/two-shot custom all-reduce over CUDA IPC, and its quick all-reduce (ROCm)
    ("vLLM custom all-reduce", RUN, "allreduce", ("_C_custom_ar::all_reduce",)),
    ("vLLM quick all-reduce", RUN, "allreduce", ("_C_custom_ar::qr_all_reduce",)),
    # torch symmetric memory (torch/csrc/distributed/c10d/symm_mem, TORCH_LIBRARY_FRAGMENT(symm_mem))
    (_SYMM, RUN, "allreduce", tuple(f"symm_mem::{name}" for name in (
        "multimem_all_reduce_", "multimem_one_shot_all_reduce", "multimem_one_shot_all_reduce_out",
        "one_shot_all_reduce", "one_shot_all_reduce_out", "one_shot_all_reduce_copy",
        "one_shot_all_reduce_copy_out", "two_shot_all_reduce_", "two_shot_all_reduce_out"))),
    (_SYMM, RUN, "reduce", ("symm_mem::multimem_one_shot_reduce_out",)),
    (_SYMM, RUN, "allgather", ("symm_mem::multimem_all_gather_out",)),
    (_SYMM, RUN, "reduce_scatter", ("symm_mem::reduce_scatter_out",)),
    # ... over NVSHMEM
    (_NVSHMEM, RUN, "broadcast", ("symm_mem::nvshmem_broadcast",)),
    (_NVSHMEM, RUN, "all_to_all", tuple(f"symm_mem::{name}" for name in (
        "nvshmem_all_to_all", "all_to_all_vdev", "all_to_all_vdev_2d", "all_to_all_vdev_2d_offset"))),
)
#: Host ops by exact name: name -> (implementation, role, canonical collective).
OP_NAMES: dict[str, tuple[str, str, str]] = {
    name: (implementation, role, collective) for implementation, role, collective, names in _NAMED_OPS
    for name in names}

#: Communication kernels: (implementation, regular expression searched in the kernel name, collective).
#: An empty collective: the expression's first group names it (any spelling, :func:`canonical_collective`).
KERNELS: tuple[tuple[str, str, str], ...] = (
    # ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_SendRecv, rcclKernel_*; ncclDevKernel_Generic
    # (RCCL) names no collective: its host ops do
    (NCCL, r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", ""),
    # vllm::cross_device_reduce_1stage<c10::BFloat16, 8>(...) (one-shot), _2stage (two-shot); aiter's too
    ("vLLM custom all-reduce", r"cross_device_reduce_[12]stage", "allreduce"),
    ("vLLM quick all-reduce", r"quickreduce::allreduce_prototype_", "allreduce"),
    # (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>, one_shot_all_reduce_kernel,
    # two_shot_all_reduce_kernel_inplace, multimem_all_gather_kernel, multimem_one_shot_reduce_kernel
    (_SYMM, r"(?<![A-Za-z0-9_])(?:multimem_(?:one_shot_)?|one_shot_|two_shot_)(all_reduce|all_gather|reduce)"
            r"_kernel", ""),
    # NVSHMEM's on-stream collectives (alltoall_on_stream_kernel<float>, fcollect = all_gather, rdxn = an
    # all-reduce: every PE gets the result) and torch's NVSHMEM all_to_all_vdev kernels
    (_NVSHMEM, r"(?<![A-Za-z0-9_])(alltoall|fcollect|broadcast|bcast|rdxn|reducescatter|reduce|barrier|"
               r"sync_all)[A-Za-z0-9_]*?_on_stream_kernel", ""),
    (_NVSHMEM, r"nvshmem_extension::allToAllV", "all_to_all"),
    # DeepEP's expert-parallel dispatch and combine (intranode, internode, internode_ll): all-to-alls
    ("DeepEP", r"deep_ep::(?:[A-Za-z_]+::)?(?:dispatch|combine)(?![A-Za-z0-9_])", "all_to_all"),
)

#: NVSHMEM's own words for its collectives
_NVSHMEM_WORDS = {"fcollect": "allgather", "rdxn": "allreduce", "reduce": "allreduce", "sync_all": "barrier"}

_COMPACT_RE = re.compile(r"[\s_\-]+")


def canonical_collective(name: str) -> str:
    """Canonical collective name of any spelling (``c10d::allreduce_`` -> ``allreduce``).

    Accepts bare names (``all_to_allv``, ``_allgather_base``, ``ALLREDUCE``), op names with a prefix of
    :data:`OP_PREFIXES` and the ops of :data:`OP_NAMES` (``symm_mem::multimem_all_reduce_`` ->
    ``allreduce``).  An unknown name is returned lower-cased and stripped of ``_`` at both ends, so callers
    can test ``result in CANONICAL_COLLECTIVES``.
    """
    if not name:
        return ""
    named = OP_NAMES.get(name)
    if named is not None and named[2]:
        return named[2]
    base = name.rsplit(":", 1)[-1] if ":" in name else name
    compact = _COMPACT_RE.sub("", base).lower()
    hit = COLLECTIVE_ALIASES.get(compact)
    if hit is not None:
        return hit
    return base.strip("_ ").lower()


_PREFIXES = tuple(p for p, _, _, _ in OP_PREFIXES)
_RULES: dict[str, OpRule | None] = {}


def op_rule(name: str) -> OpRule | None:
    """What the table says of host op ``name`` (None: not a communication op)."""
    hit: OpRule | None | Literal[False] = _RULES.get(name, False)   # (False: not seen yet)
    if hit is not False:
        return hit
    rule: OpRule | None = None
    named = OP_NAMES.get(name)
    if named is not None:
        rule = OpRule(named[0], named[1], named[2])
    elif name.startswith(_PREFIXES):
        for prefix, impl, role, on_cpu in OP_PREFIXES:
            if name.startswith(prefix):
                rule = OpRule(impl, role, canonical_collective(name[len(prefix):]), on_cpu)
                break
    if len(_RULES) < 100_000:
        _RULES[name] = rule
    return rule


def is_comm_op_name(name: str) -> bool:
    """A host op of any role in the table (record_param_comms, c10d::*, nccl:*, gloo:*, vllm::all_reduce,
    symm_mem::* collectives ...)."""
    return name in OP_NAMES or name.startswith(_PREFIXES)


#: Name prefixes of the records that run their collective on a CPU thread (``is_cpu_record``), for loops
#: over every op
CPU_RECORD_PREFIXES = tuple(p for p, _, _, on_cpu in OP_PREFIXES if on_cpu)
#: The implementations whose records run on CPU threads (gloo, MPI, UCC)
CPU_IMPLEMENTATIONS = frozenset(impl for _, impl, _, on_cpu in OP_PREFIXES if on_cpu)


def is_run_record(name: str) -> bool:
    """A host op that runs a collective (role ``run``): it is the comm node when no kernel of it is."""
    rule = op_rule(name)
    return rule is not None and rule.role == RUN


def is_cpu_record(name: str) -> bool:
    """A ``run`` record that does the work on a CPU thread: ``gloo:*``, ``mpi:*``, ``ucc:*``."""
    rule = op_rule(name)
    return rule is not None and rule.on_cpu


def is_backend_record(name: str) -> bool:
    """A process-group backend's own record (``nccl:*``, ``gloo:*``, ``mpi:*`` ...): it holds only the
    input tensor of its collective."""
    rule = op_rule(name)
    return rule is not None and rule.role == RUN and name not in OP_NAMES


class KernelMatch(NamedTuple):
    implementation: str
    collective: str       # canonical; NCCL kernels: their collective word as spelt ("generic": none)


_KERNEL_RES = tuple((impl, re.compile(expr), coll) for impl, expr, coll in KERNELS)
_NCCL_PREFIXES = ("ncclKernel", "ncclDevKernel", "rcclKernel", "rcclDevKernel")
_KERNEL_CACHE: dict[str, KernelMatch | None] = {}


def comm_kernel(name: str) -> KernelMatch | None:
    """The implementation and collective of a communication kernel, by its name; None for any other
    kernel.  Remembered per name (a trace repeats a few kernel names many times)."""
    hit: KernelMatch | None | Literal[False] = _KERNEL_CACHE.get(name, False)   # (False: not seen yet)
    if hit is not False:
        return hit
    found: KernelMatch | None = None
    for impl, expr, coll in _KERNEL_RES:
        m = expr.search(name)
        if m is None:
            continue
        if coll:
            found = KernelMatch(impl, coll)
        elif impl == _NVSHMEM:
            word = m.group(1)
            found = KernelMatch(impl, "barrier" if word.startswith("barrier") else
                                canonical_collective(_NVSHMEM_WORDS.get(word, word)))
        else:   # NCCL/RCCL: the kernel's collective word, as spelt (Generic -> "generic": no collective)
            word = m.group(1)
            found = KernelMatch(impl, "sendrecv" if word == "SendRecv" else canonical_collective(word))
        break
    if len(_KERNEL_CACHE) < 100_000:
        _KERNEL_CACHE[name] = found
    return found


def is_comm_kernel_name(name: str) -> bool:
    """A communication kernel of any implementation of :data:`KERNELS`, by its name."""
    if name.startswith(_NCCL_PREFIXES):
        return True
    hit = _KERNEL_CACHE.get(name, False)
    if hit is False:
        hit = comm_kernel(name)
    return hit is not None


def kernel_collective(name: str) -> str:
    """Canonical collective of a communication kernel by its name (``ncclKernel_AllReduce_RING_LL_Sum_float``
    -> ``allreduce``, ``ncclDevKernel_SendRecv`` -> ``sendrecv``); "" when the name does not say."""
    m = comm_kernel(name)
    return m.collective if m is not None else ""


def implementation_of(name: str, *, kernel: bool) -> str:
    """The implementation a kernel or host op ``name`` belongs to ("" when it is no communication)."""
    if kernel:
        m = comm_kernel(name)
        return m.implementation if m is not None else ""
    rule = op_rule(name)
    return rule.implementation if rule is not None else ""


__all__ = [
    "CALL",
    "CANONICAL_COLLECTIVES",
    "COLLECTIVE_ALIASES",
    "CPU_IMPLEMENTATIONS",
    "CPU_RECORD_PREFIXES",
    "KERNELS",
    "NCCL",
    "OP_NAMES",
    "OP_PREFIXES",
    "RECORD",
    "RUN",
    "KernelMatch",
    "OpRule",
    "canonical_collective",
    "comm_kernel",
    "implementation_of",
    "is_backend_record",
    "is_comm_kernel_name",
    "is_comm_op_name",
    "is_cpu_record",
    "is_run_record",
    "kernel_collective",
    "op_rule",
]
