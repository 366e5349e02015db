"""The one table of collective names (``chakra.host.collective_names``) and the fields of the ops it names.

Kernel and op names are those real traces carry (vLLM, torch symmetric memory, NVSHMEM, DeepEP, NCCL, RCCL);
the expected implementation and collective of each is read off the name by hand.
"""

from __future__ import annotations

import pytest

from chakra.host.collective_names import (
    CALL,
    RECORD,
    RUN,
    comm_kernel,
    is_comm_kernel_name,
    is_cpu_record,
    op_rule,
)
from chakra.host.comm import canonical_collective, comm_info, comm_size_bytes, kernel_collective
from chakra.host.model import HostOp, IOInfo, ProcessGroup, is_comm_name

SYMM, VLLM_AR, NVSHMEM = "torch symmetric memory", "vLLM custom all-reduce", "NVSHMEM"


@pytest.mark.parametrize("name, impl, coll", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "NCCL/RCCL",
     "allreduce"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "NCCL/RCCL",
     "reduce_scatter"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "NCCL/RCCL", "sendrecv"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
     "unsigned long, unsigned int**, unsigned long, unsigned long)", SYMM, "allreduce"),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 8>(c10::BFloat16*)",
     SYMM, "allreduce"),
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<float, 16, 4>(float**)", SYMM, "allreduce"),
    ("void (anonymous namespace)::multimem_all_gather_kernel<16>(char*, char*)", SYMM, "allgather"),
    ("void (anonymous namespace)::multimem_one_shot_reduce_kernel<float, 16>(float*)", SYMM, "reduce"),
    ("void vllm::cross_device_reduce_1stage<c10::BFloat16, 8>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, c10::BFloat16*, int, int)", VLLM_AR, "allreduce"),
    ("void vllm::cross_device_reduce_2stage<__half, 4>(vllm::RankData*)", VLLM_AR, "allreduce"),
    ("_ZN5aiter26cross_device_reduce_2stageIDF16bLi8ELb0EEEv", VLLM_AR, "allreduce"),
    ("void quickreduce::allreduce_prototype_twoshot<AllReduceTwoshot<__half, CodecQ4<__half, 4>, true>, "
     "__half>(__half const*)", "vLLM quick all-reduce", "allreduce"),
    ("void alltoall_on_stream_kernel<float>(int, float*, float const*, unsigned long)", NVSHMEM,
     "all_to_all"),
    ("fcollect_on_stream_kernel<int>(int, int*)", NVSHMEM, "allgather"),
    ("void rdxn_on_stream_kernel<float, (rdxn_ops)0>(int, float*)", NVSHMEM, "allreduce"),
    ("barrier_on_stream_kernel_threadgroup<(threadgroup_t)3>(int)", NVSHMEM, "barrier"),
    ("void c10d::nvshmem_extension::allToAllV(void*, void*, long*, unsigned long, int)", NVSHMEM,
     "all_to_all"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)", "DeepEP", "all_to_all"),
    ("void deep_ep::internode_ll::combine<false>(void*, void*)", "DeepEP", "all_to_all"),
])
def test_communication_kernels_of_every_implementation(name: str, impl: str, coll: str) -> None:
    m = comm_kernel(name)
    assert m is not None and (m.implementation, m.collective) == (impl, coll)
    assert is_comm_kernel_name(name) and kernel_collective(name) == coll


@pytest.mark.parametrize("name", [
    "volta_sgemm_128x32_nt", "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>(float*)",
    "void deep_ep::intranode::notify_dispatch(int const*, int*)",   # the count exchange, not the dispatch
    "void moe::reduce_scatter_kernel(__nv_bfloat16 const*)",        # a MoE compute kernel of that name
    "void at::native::all_reduce_something_else(float*)",
])
def test_other_kernels_are_not_communication(name: str) -> None:
    assert comm_kernel(name) is None and not is_comm_kernel_name(name) and kernel_collective(name) == ""


@pytest.mark.parametrize("name, role, coll, cpu", [
    ("record_param_comms", RECORD, "", False), ("c10d::_allgather_base_", CALL, "allgather", False),
    ("nccl:all_to_all", RUN, "all_to_all", False), ("gloo:all_reduce", RUN, "allreduce", True),
    ("mpi:broadcast", RUN, "broadcast", True), ("ucc:all_reduce", RUN, "allreduce", True),
    ("vllm::all_reduce", CALL, "allreduce", False), ("vllm::reduce_scatter", CALL, "reduce_scatter", False),
    ("symm_mem::multimem_all_reduce_", RUN, "allreduce", False),
    ("symm_mem::two_shot_all_reduce_", RUN, "allreduce", False),
    ("symm_mem::multimem_all_gather_out", RUN, "allgather", False),
    ("symm_mem::reduce_scatter_out", RUN, "reduce_scatter", False),
    ("symm_mem::all_to_all_vdev", RUN, "all_to_all", False),
    ("_C_custom_ar::all_reduce", RUN, "allreduce", False),
])
def test_host_ops_of_every_implementation(name: str, role: str, coll: str, cpu: bool) -> None:
    rule = op_rule(name)
    assert rule is not None and (rule.role, rule.collective, rule.on_cpu) == (role, coll, cpu)
    assert is_comm_name(name) and is_cpu_record(name) == cpu
    if coll:
        assert canonical_collective(name) == coll


@pytest.mark.parametrize("name", ["aten::all_reduce_like", "symm_mem::_async_input_mm", "symm_mem::memset32_",
                                  "_c10d_functional::wait_tensor", "vllm::unified_attention"])
def test_other_host_ops_are_not_communication(name: str) -> None:
    assert op_rule(name) is None and not is_comm_name(name)


def _t(numel: int, elem: int = 2, tid: int = 1) -> list:
    return [tid, tid, 0, numel, elem, "cuda:0"]


GROUPS = [ProcessGroup("0", "default_pg", ranks=(0, 1, 2, 3)), ProcessGroup("3", "tp", ranks=(0, 1))]


def test_an_all_gather_out_is_the_size_of_its_out_tensor_and_names_its_group() -> None:
    # symm_mem::multimem_all_gather_out(Tensor input, str group_name, Tensor(a!) out): 4 ranks, bf16,
    # 1,024 elements in, 4,096 out: 8,192 bytes (not input + out)
    op = HostOp(5, "symm_mem::multimem_all_gather_out", 1,
                inputs=IOInfo([_t(1024), "3", _t(4096, tid=2)], [[1024], [], [4096]],
                              ["Tensor(c10::BFloat16)", "String", "Tensor(c10::BFloat16)"]),
                outputs=IOInfo([_t(4096, tid=2)], [[4096]], ["Tensor(c10::BFloat16)"]))
    info = comm_info(op, GROUPS)
    assert info is not None
    assert (canonical_collective(info.collective_name), comm_size_bytes(info), info.pg_name, info.dtype) == (
        "allgather", 8192, "3", "c10::BFloat16")


def test_a_group_is_taken_only_when_the_trace_holds_it() -> None:
    # vllm::all_reduce(Tensor tensor, str group_name): vLLM's own name "tp:0" is no c10d group -> none
    # (the whole world); the op's schema says which string is the group (pg_desc "tp" of group "3")
    ins = IOInfo([_t(4096), "tp:0"], [[4096], []], ["Tensor(c10::BFloat16)", "String"])
    info = comm_info(HostOp(5, "vllm::all_reduce", 1, inputs=ins), GROUPS)
    assert info is not None and (comm_size_bytes(info), info.pg_name) == (8192, "")
    op = HostOp(6, "symm_mem::two_shot_all_reduce_", 1, op_schema=(
        "symm_mem::two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> Tensor(a!)"),
        inputs=IOInfo([_t(4096), "0", "tp"], [[4096], [], []], ["Tensor(c10::BFloat16)", "String", "String"]))
    info = comm_info(op, GROUPS)
    assert info is not None and info.pg_name == "3"        # the group_name argument, not the reduce_op
    assert comm_info(op, None).pg_name == ""                 # no table: nothing says which ranks
