"""Pass 3 of a conversion: which nodes are communication nodes, and their Chakra comm attributes (the rules
are in ``chakra.convert.comm``'s module doc)."""

from __future__ import annotations

import logging
from collections import Counter

from chakra import schema as pb
from chakra.convert.comm import (
    CommFields,
    TensorSize,
    canonical_collective,
    comm_info,
    comm_size_bytes,
    comm_type_of,
    infer_rank,
    is_comm_kernel_name,
    kernel_collective,
    op_tensor_bytes,
    op_tensor_size,
    pair_gloo_with_c10d,
)
from chakra.convert.plan import (
    _KNOWN_COLLECTIVES,
    UNSIMULATED_COMM_TYPES,
    Comm,
    Plan,
    Tree,
    _num,
    _warn,
)
from chakra.host.collective_names import CALL, OP_NAMES, RUN, is_cpu_record, is_run_record, op_rule
from chakra.host.keys import COLLECTIVE_NAME, COMM_SIZE, PG_NAME
from chakra.host.model import CommInfo, HostOp, is_comm_name
from chakra.tunables import COMM_CHAIN_MAX

log = logging.getLogger(__name__)
_NO_OP = TensorSize(-1, -1)   # (an op the trace does not hold: matches only another such)


# -- 3. communication -----------------------------------------------------------------------------
def _op(cv: Plan, i: int) -> HostOp:
    """The HostOp of comm op ``i`` (the columns keep every comm op whole)."""
    op = cv.full[i]
    assert op is not None
    return op


def comm_chain(cv: Plan, par: list[int], j: int) -> list[int]:
    """``j`` and its ancestors while they are host comm ops (record_param_comms, nccl:*, c10d::*...)."""
    names, is_gpu = cv.names, cv.is_gpu
    chain: list[int] = []
    while j >= 0 and len(chain) < COMM_CHAIN_MAX and not is_gpu[j] and is_comm_name(names[j]):
        chain.append(j)
        j = par[j]
    return chain


def find_comm(cv: Plan, tree: Tree) -> Comm:
    full, names, ids, trace = cv.full, cv.names, cv.ids, cv.trace
    is_gpu, par = cv.is_gpu, tree.par
    groups = trace.process_groups
    infos = {}
    for i, op in enumerate(full):
        # a host comm op is kept whole by load_columns (a comm candidate, columns.is_comm_candidate)
        if op is not None and not is_gpu[i] and is_comm_name(names[i]):
            info = comm_info(op, groups)
            if info is not None:
                infos[i] = info
    cm = Comm([pb.COMP_NODE] * cv.n, infos, infer_rank(trace, {ids[i]: v for i, v in infos.items()}))
    covered: set[int] = set()
    gpu_children: set[int] = set()
    unknown = 0
    for i, g in enumerate(is_gpu):
        if not g:
            continue
        p = par[i]
        if p >= 0 and p in infos:   # only asked of comm ops below
            gpu_children.add(p)
        op = full[i]
        if op is None:   # load_columns keeps every GPU op that passes the test below
            continue
        coll_attr = op.attrs.get(COLLECTIVE_NAME)
        if not (is_comm_kernel_name(op.name) or (isinstance(coll_attr, str) and coll_attr)):
            continue
        chain = comm_chain(cv, par, par[i])
        covered.update(chain)
        f = comm_fields(cv, cm, chain, op, None, kernel=True)
        if f is None:
            unknown += 1
            continue
        set_comm(cv, cm, i, f)
    if unknown:
        _warn(cv.stats, f"{unknown} NCCL kernel(s) with no recognisable collective stay COMP nodes")
    warn_unknown_kernels(cv, gpu_children, covered)
    distinct = set(names)
    if any(is_cpu_record(nm) for nm in distinct) and any(nm.startswith("c10d::") for nm in distinct):
        def size_of(j: int) -> TensorSize:
            op = full[j]
            return op_tensor_size(op) if op is not None else _NO_OP

        pairs, extra = pair_gloo_with_c10d(names, cv.cols.rf_ids, ids, size_of)
    else:
        pairs, extra = {}, {}   # nothing to pair
    del distinct
    cm.gloo_pairs = pairs
    cm.gloo_extra = extra
    for i in infos:
        op = _op(cv, i)
        if not is_run_record(op.name) or i in gpu_children or i in extra:
            continue
        chain = comm_chain(cv, par, i)
        if any(j in covered for j in chain):
            continue
        f = comm_fields(cv, cm, chain, op, pairs.get(i), kernel=False)
        if f is None:
            continue
        set_comm(cv, cm, i, f)
        cm.cpu_comm.add(i)
    bare_calls(cv, cm, par, gpu_children, covered)
    ntype = cm.ntype
    cv.stats.comm_nodes = sum(1 for i in cm.comm if ntype[i] != pb.COMP_NODE)
    cv.stats.cpu_comm_nodes = sum(1 for i in cm.cpu_comm if ntype[i] != pb.COMP_NODE)
    warn_world_fallback(cv, cm)
    return cm


def bare_calls(cv: Plan, cm: Comm, par: list[int], launchers: set[int], covered: set[int]) -> None:
    """A call of an implementation's own (``vllm::all_reduce``) under which the trace holds no other comm op
    and no kernel (vLLM's pynccl calls NCCL itself; a host ET alone has no kernel) is the comm node of its
    collective, as a ``run`` record is."""
    names, infos = cv.names, cm.infos
    calls = [i for i in infos if names[i] in OP_NAMES and OP_NAMES[names[i]][1] == CALL]
    if not calls:
        return
    # comm ops with one below
    above = {k for j in infos if j not in calls for k in comm_chain(cv, par, j)[1:]}
    for i in calls:
        if i in launchers or i in covered or i in above or i in cm.comm:
            continue
        f = comm_fields(cv, cm, comm_chain(cv, par, i), _op(cv, i), None, kernel=False)
        if f is not None:
            set_comm(cv, cm, i, f)
            cm.cpu_comm.add(i)


def warn_unknown_kernels(cv: Plan, launchers: set[int], covered: set[int]) -> None:
    """One warning for the collective ops (role ``run``) that launched GPU work of which no kernel is a
    communication kernel of the table: their collective is not seen as one (its kernels stay COMP nodes)."""
    names = cv.names
    silent = Counter(names[i] for i in launchers if i not in covered and is_run_record(names[i]))
    if silent:
        listed = ", ".join(f"{name} x{n}" for name, n in sorted(silent.items()))
        _warn(cv.stats, f"{cv.trace.path}: {sum(silent.values())} collective op(s) launched kernels that "
                        f"are no known communication kernel ({listed}): they stay COMP nodes, which the "
                        "network model and the simulator do not see as communication")


def set_comm(cv: Plan, cm: Comm, i: int, f: CommFields) -> None:
    cm.comm[i] = f
    if f.collective == "send":
        cm.ntype[i] = pb.COMM_SEND_NODE
    elif f.collective == "recv":
        cm.ntype[i] = pb.COMM_RECV_NODE
    elif cv.astrasim_safe and f.comm_type in UNSIMULATED_COMM_TYPES:
        cm.ntype[i] = pb.COMP_NODE   # replayed by its recorded duration (module doc)
        cv.stats.comm_as_comp += 1
    else:
        cm.ntype[i] = pb.COMM_COLL_NODE


def warn_world_fallback(cv: Plan, cm: Comm) -> None:
    """One warning when comm nodes fall back to the whole world ("") although the process-group
    table holds groups of different ranks: the trace does not say which one was meant."""
    groups = [g for g in cv.trace.process_groups if g.ranks]
    if len({frozenset(g.ranks) for g in groups}) < 2:
        return
    fallback = sum(1 for f in cm.comm.values() if not f.pg_name)
    if not fallback:
        return
    listed = ", ".join(f"{cv.pgn.numeric(g.pg_name) or g.pg_name} {list(g.ranks)}" for g in groups)
    _warn(cv.stats, f"{cv.trace.path}: {fallback} comm node(s) name no process group (gloo records "
                      "do not say which group they used) and get pg_name \"\" (the whole world), "
                      f"though the process groups differ; any of these could have been meant: {listed}")


def group_of_size(cv: Plan, cm: Comm, call: CommInfo) -> str:
    """The process group a c10d call without a named group used, when its per-rank split list says how
    many ranks it spans and one group of this rank has that many: ``c10d::alltoall_base_``'s
    ``input_split_sizes`` (an MoE's uneven all_to_all on an expert group; gloo's record names no group, and
    taken for the world the job coupled the two expert groups' all_to_alls into one).  "" otherwise."""
    n = len(call.in_split_size or call.out_split_size)
    groups = cv.trace.process_groups
    if not n or n == max((len(g.ranks) for g in groups), default=0):
        return ""                       # (the world's size: the world, as without the list)
    me = cm.rank
    fits = {g.pg_name for g in groups if len(g.ranks) == n and (me is None or me in g.ranks)}
    return fits.pop() if len(fits) == 1 else ""


def comm_fields(cv: Plan, cm: Comm, chain: list[int], own: HostOp, c10d_pair: int | None, *, kernel: bool
            ) -> CommFields | None:
    """Comm attributes of the comm node ``own`` (a communication kernel, or a ``run`` host record).

    Sources, most specific first: the c10d call of a gloo record, ET+'s own annotation
    (``collective_name``/``comm_size``/``pg_name`` on the node), record_param_comms, the ``run``
    record's name and tensors, the call (``c10d::*``, ``vllm::all_reduce``), the kernel name.
    """
    names, infos = cv.names, cm.infos
    backend = rpc = c10d = None   # the chain's innermost run record, record_param_comms and call
    for j in chain:
        name = names[j]
        rule = op_rule(name)
        if rule is None:
            continue
        if backend is None and rule.role == RUN:
            backend = j
        elif rpc is None and name == "record_param_comms":
            info = infos.get(j)
            if info is not None and canonical_collective(info.collective_name) != "wait":
                rpc = j
        elif c10d is None and rule.role == CALL:
            c10d = j
    if c10d_pair is not None:
        c10d = c10d_pair
    found: list[str] = []
    if backend is not None and is_cpu_record(names[backend]) and c10d is not None:
        found.append(names[c10d])   # gloo: the c10d call says what the collective really is
    oa = own.attrs
    ca = oa.get(COLLECTIVE_NAME)
    if isinstance(ca, str) and ca:
        found.append(ca)
    if rpc is not None:
        found.append(infos[rpc].collective_name)
    if backend is not None:
        found.append(names[backend])
    if c10d is not None:
        found.append(names[c10d])
    if kernel:
        found.append(kernel_collective(own.name))
    collective = ""
    for nm in found:
        c = canonical_collective(nm)
        if c in _KNOWN_COLLECTIVES:
            collective = c
            break
        if c == "sendrecv" and not collective:
            collective = "all_to_all"   # SendRecv kernel with no host op naming it: DLRM-style all_to_all
    if not collective:
        return None
    # size: max(input bytes, output bytes) of the collective (module doc, "comm_size"), over every
    # record of it: the backend record has only the input tensor, record_param_comms and the c10d
    # call have both sides, ET+'s comm_size is the linker's max(in, out) of whatever it found.
    size = 0
    if backend is not None:   # an op of the table by name has its size in its info (host.comm module doc)
        named = infos.get(backend) if names[backend] in OP_NAMES else None
        size = comm_size_bytes(named) if named is not None else op_tensor_bytes(_op(cv, backend))
    pair_size = comm_size_bytes(infos[c10d_pair]) if c10d_pair is not None and c10d_pair in infos else 0
    if _num(oa.get(COMM_SIZE)) and not pair_size:
        # (a gloo record's ET+ size is its ET parent's, and with several async collectives pending the
        # host ET may record it under another call than the one it ran: its launch-order pair decides)
        size = max(size, int(oa[COMM_SIZE]))
    if rpc is not None:
        size = max(size, comm_size_bytes(infos[rpc]))
    if c10d is not None and c10d in infos:
        size = max(size, comm_size_bytes(infos[c10d]))
    if not size and kernel:
        size = op_tensor_bytes(own)   # the launcher's tensors, copied onto the GPU node by ET+
    pg = ""
    if rpc is not None:
        pg = infos[rpc].pg_name
    if not pg and isinstance(oa.get(PG_NAME), str):
        pg = oa[PG_NAME]
    if not pg:
        for j in chain:
            info = infos.get(j)
            if info is not None and info.pg_name:
                pg = info.pg_name
                break
    if not pg and c10d is not None and c10d in infos:
        pg = group_of_size(cv, cm, infos[c10d])
    pg = cv.pgn.numeric(pg)
    f = CommFields(collective, comm_type_of(collective), size, pg)
    if rpc is not None:
        f.seq = infos[rpc].seq
    if collective in ("send", "recv"):
        info = infos.get(c10d) if c10d is not None else None
        peer = info.peer if info is not None and info.peer is not None else -1
        f.tag = info.tag if info is not None and info.tag is not None else 0
        if peer >= 0:
            peer = cv.pgn.global_rank(pg, peer)
        me = cm.rank if cm.rank is not None else -1
        f.src, f.dst = (me, peer) if collective == "send" else (peer, me)
    return f
