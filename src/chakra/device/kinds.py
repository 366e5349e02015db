"""Which kind of Kineto event is this: the runtime/driver call names that launch or synchronize (the
category of an event gives its base kind: ``chakra.device.model.CATEGORY_KIND``).

Parsing is driven by these tables, not by scattered string tests, so that a new
runtime call or a renamed category is a one-line change.

Decisions (see also ``loader.py``):

- A synchronous copy (``cudaMemcpy``, ``cudaMemcpy2D``, ``hipMemcpy``, ``hipMemcpyWithStream``, ...: a
  ``*Memcpy*`` call whose name does not contain ``Async``) both launches GPU work and blocks the host.  Its
  kind is LAUNCH (so that the copy it starts is attached to it through ``launch_by_correlation``), and
  ``KinetoEvent.is_sync`` is True so that the linker can also treat it as a synchronisation point.
- ``cudaStreamWaitEvent`` is listed as synchronizing (docs/formats.md, "Kineto trace"): kind SYNC.
- A runtime or driver call whose name is not a known launch is still a launch when its correlation id
  matches a GPU event (decided after the whole file is read, see the loader).  The ``INVALID`` runtime
  events of the DLRM traces (cbid 409, zero duration) match no GPU event and stay RUNTIME.
"""

from __future__ import annotations

from chakra.device.model import LAUNCH, SYNC

LAUNCH_NAMES = frozenset(
    (
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cuLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "cuGraphLaunch",
        "cudaMemsetAsync",
        "cudaMemset",
        "cudaMemcpyAsync",
        "cudaMemcpyPeerAsync",
        "cudaMemcpy2DAsync",
        "cudaMemcpy3DAsync",
        "cudaMemcpyToSymbolAsync",
        "cudaMemcpyFromSymbolAsync",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipGraphLaunch",
        "hipMemcpyAsync",
        "hipMemsetAsync",
        "hipMemset",
    )
)

# Synchronous copies: they launch a copy AND block the host until it is done.
SYNC_LAUNCH_NAMES = frozenset(
    (
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyPeer",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpyDtoD",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        "hipMemcpyDtoD",
    )
)

SYNC_NAMES = frozenset(
    (
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaStreamWaitEvent",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuStreamWaitEvent",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipStreamWaitEvent",
    )
)

_LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "hipLaunch", "hipExtLaunch", "hipModuleLaunch",
                    "hipExtModuleLaunch", "cuMemsetD")

_name_cache: dict[tuple[int, str], tuple[int, bool]] = {}


def runtime_kind(base: int, name: str) -> tuple[int, bool]:
    """Refine a RUNTIME/DRIVER event by its call name: ``(kind, is_sync)``.

    Names repeat a lot (hundreds of thousands of ``cudaLaunchKernel``), so results are cached.
    """
    key = (base, name)
    hit = _name_cache.get(key)
    if hit is not None:
        return hit
    if name in SYNC_LAUNCH_NAMES:
        res = (LAUNCH, True)
    elif name in LAUNCH_NAMES or name.startswith(_LAUNCH_PREFIXES):
        res = (LAUNCH, False)
    elif name in SYNC_NAMES:
        res = (SYNC, True)
    elif ("Memcpy" in name or "Memset" in name) and name.startswith(("cuda", "hip", "cu")):
        # unlisted copy/set variants: asynchronous ones launch, synchronous copies launch and block
        res = (LAUNCH, "Async" not in name and "Memcpy" in name)
    else:
        res = (base, False)
    if len(_name_cache) < 100_000:
        _name_cache[key] = res
    return res
