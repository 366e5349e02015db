"""DLRM ranks whose all-reduces ran as vLLM runs them: the edit that gives a real trace the structure of a
vLLM tensor-parallel trace (``from helpers.collective_edits import ...``; tests/ is on the path).

A DLRM rank of the corpus records each all_reduce as ``c10d::allreduce_`` > ``record_param_comms`` >
``nccl:all_reduce``, which launches ``ncclKernel_AllReduce_RING_LL_Sum_float``.  A vLLM trace records
``vllm::all_reduce`` (its custom op, which calls the configured communicator) > the communicator's op
(torch symmetric memory's ``symm_mem::multimem_all_reduce_``, vLLM's custom all-reduce
``_C_custom_ar::all_reduce``), which launches that implementation's kernel, and no ``record_param_comms``;
with vLLM's pynccl, ``vllm::all_reduce`` launches NCCL's kernel itself (:data:`PYNCCL`).
The edit renames the ops and the kernel of each all_reduce so (the host ET and the Kineto trace alike),
gives the ops the arguments those ops take (vLLM's own group name ``tp:0``, which no process-group table
holds; symmetric memory's ``group_name`` ``"0"``; Kineto records string arguments as nothing), and drops
the ``record_param_comms`` record; the times,
the tensors and every other op stay as recorded.  The edited rank moves the same bytes in the same
collectives as the original: only the names say which they are.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

#: (call op, run op, kernel) of a rank's 1st, 2nd and 3rd all_reduce
VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("vllm::all_reduce", "symm_mem::multimem_all_reduce_",
     "void (anonymous namespace)::multimem_all_reduce_kernel<float, 16>(float*, unsigned long, "
     "unsigned int**, unsigned long, unsigned long)"),
    ("vllm::all_reduce", "_C_custom_ar::all_reduce",
     "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "float*, int, int)"),
    ("vllm::all_reduce", "_C_custom_ar::all_reduce",
     "void vllm::cross_device_reduce_2stage<float, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "float*, int, int)"),
)
#: vLLM's pynccl: vllm::all_reduce calls ncclAllReduce itself (no c10d op, no record), NCCL's kernel
PYNCCL: tuple[tuple[str, str | None, str | None], ...] = (("vllm::all_reduce", None, None),) * 3
VLLM_GROUP = "tp:0"


def _run_inputs(run: str, tensor: list[Any]) -> tuple[list[Any], list[Any], list[str]]:
    """(values, shapes, types) of the run op's arguments, as its schema has them."""
    numel = tensor[3]
    if run.startswith("symm_mem::"):   # (Tensor(a!) input, str reduce_op, str group_name)
        return [tensor, "sum", "0"], [[numel], [], []], ["Tensor(float)", "String", "String"]
    out = [tensor[0] + 100_000, tensor[1] + 100_000, 0, numel, tensor[4], tensor[5]]
    # _C_custom_ar::all_reduce(int fa, Tensor inp, Tensor! out, int reg_buffer, int reg_buffer_sz_bytes)
    return ([140_000_000, tensor, out, 0, 8_388_608], [[], [numel], [numel], [], []],
            ["Int", "Tensor(float)", "Tensor(float)", "Int", "Int"])


def edit_host_et(doc: dict[str, Any], variants: Any = VARIANTS) -> int:
    """Edit a DLRM host ET (1.0.1, flat) in place; return how many all_reduces were edited.  A variant
    without a run op (:data:`PYNCCL`) drops the ``nccl:all_reduce`` record too."""
    nodes = doc["nodes"]
    kids: dict[int, list[dict[str, Any]]] = {}
    for n in nodes:
        kids.setdefault(n["parent"], []).append(n)
    calls = sorted((n for n in nodes if n["name"] == "c10d::allreduce_"), key=lambda n: n["id"])
    dropped = set()
    edited = 0
    for (call_name, run_name, _), call in zip(variants, calls):
        (rpc,) = [n for n in kids[call["id"]] if n["name"] == "record_param_comms"]
        (run,) = [n for n in kids[rpc["id"]] if n["name"] == "nccl:all_reduce"]
        tensor = rpc["inputs"][0][0]
        call.update(name=call_name, inputs=[tensor, VLLM_GROUP], input_shapes=[[tensor[3]], []],
                    input_types=["Tensor(float)", "String"], outputs=[tensor], output_shapes=[[tensor[3]]],
                    output_types=["Tensor(float)"])
        if run_name is None:
            dropped.add(run["id"])
        else:
            values, shapes, types = _run_inputs(run_name, tensor)
            run.update(name=run_name, parent=call["id"], inputs=values, input_shapes=shapes,
                       input_types=types)
        dropped.add(rpc["id"])
        edited += 1
    doc["nodes"] = [n for n in nodes if n["id"] not in dropped]
    return edited


def edit_kineto(doc: dict[str, Any], world_size: int | None = None, variants: Any = VARIANTS) -> int:
    """Edit a DLRM Kineto trace in place (``world_size``: also the job's size in ``distributedInfo``);
    return how many all_reduces were edited."""
    ev = doc["traceEvents"]
    calls = sorted((e for e in ev if e.get("name") == "c10d::allreduce_"), key=lambda e: e["ts"])
    kernels = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
    dropped = []
    for (call_name, run_name, kernel_name), call in zip(variants, calls):
        lo, hi = call["ts"], call["ts"] + call["dur"]
        inside = [e for e in ev if e.get("ph") == "X" and e.get("tid") == call["tid"] and lo <= e["ts"] <= hi]
        (rpc,) = [e for e in inside if e["name"] == "record_param_comms"]
        (run,) = [e for e in inside if e["name"] == "nccl:all_reduce"]
        (launch,) = [e for e in inside if e["name"] == "cudaLaunchKernel"
                     and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
        kernel = kernels[launch["args"]["correlation"]]
        assert kernel["name"].startswith("ncclKernel_AllReduce")
        numel = run["args"]["Input Dims"][0][0]
        call["name"] = call_name
        # (Kineto records a string argument as nothing: type "", no concrete value)
        call["args"].update({"Input Dims": [[numel], []], "Input type": ["float", ""],
                             "Concrete Inputs": ["", ""]})
        dropped.append(rpc)
        if run_name is None:      # the launch is the call's own
            dropped.append(run)
            continue
        run["name"], run["cat"] = run_name, "cpu_op"
        if run_name.startswith("symm_mem::"):
            run["args"].update({"Input Dims": [[numel], [], []], "Input type": ["float", "", ""],
                                "Concrete Inputs": ["", "", ""]})
        else:
            run["args"].update({"Input Dims": [[], [numel], [numel], [], []],
                                "Input type": ["Scalar", "float", "float", "Scalar", "Scalar"],
                                "Concrete Inputs": ["140000000", "", "", "0", "8388608"]})
        kernel["name"] = kernel_name
    doc["traceEvents"] = [e for e in ev if not any(e is d for d in dropped)]
    if world_size is not None:
        doc["distributedInfo"]["world_size"] = world_size
    return sum(1 for d in dropped if d["name"] == "record_param_comms")


def _read(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def vllm_dlrm(corpus: Path, dest: Path, ranks: tuple[int, ...] = (0,), *, world_size: int | None = None,
              host: bool = True, variants: Any = VARIANTS) -> Path:
    """``dest/host/host_et_N.json.gz`` (when ``host``) and ``dest/device/kineto_N.json.gz`` of the edited
    DLRM ranks ``ranks``; ``world_size``: the job's size written into the Kineto traces (2 for a 2-rank
    job made of ranks 0 and 1); ``variants``: :data:`VARIANTS` or :data:`PYNCCL`."""
    src = corpus / "dlrm_8r_v100"
    for r in ranks:
        if host:
            h = _read(src / "host" / f"host_et_{r}.json.gz")
            assert edit_host_et(h, variants) == 3
            _write(dest / "host" / f"host_et_{r}.json.gz", h)
        k = _read(src / "device" / f"kineto_{r}.json.gz")
        assert edit_kineto(k, world_size, variants) == 3
        _write(dest / "device" / f"kineto_{r}.json.gz", k)
    return dest
