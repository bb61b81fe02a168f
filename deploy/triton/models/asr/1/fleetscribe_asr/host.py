"""How a partition's process uses its host: the CUDA scheduling flag of
its GPU context (model parameter cuda_sync) and torch's CPU threads
(cpu_threads). On a GPU, a partition sleeps while it waits for the GPU
(blocking, the default; spin, yield, or auto: CUDA's choice, which spins
while there are fewer processes than CPUs, so eight partitions kept eight
CPUs busy waiting), and torch's CPU work runs on 2 threads (0: torch's
default, one a core, which in eight partitions at once spun the host's 16
CPUs and halved the length mix on an H200: docs/benchmarks.md, "Host
CPUs"). On a CPU both are left to torch."""

from __future__ import annotations

from collections.abc import Callable

from .options import HostOptions

# The CUDA driver's scheduling flags (CU_CTX_SCHED_*) of the parameter cuda_sync.
CUDA_SYNC = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}


def set_cuda_sync(mode: str, ordinal: int) -> str:
    """Sets how the host thread waits for the GPU ordinal (parameter
    cuda_sync) on its primary context, before anything creates it (torch's
    runtime retains that context, flags and all). Returns what the driver
    then reports, for the log; "auto" leaves the driver alone."""
    if mode not in CUDA_SYNC:
        raise ValueError(f"model parameter cuda_sync={mode!r}: want {', '.join(CUDA_SYNC)}")
    if mode == "auto":
        return "auto"
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    calls: list[tuple[str, Callable[[], int]]] = [
        ("cuInit", lambda: cuda.cuInit(0)),
        ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), ordinal)),
        ("cuDevicePrimaryCtxSetFlags", lambda: set_flags(dev, CUDA_SYNC[mode])),
        ("cuDevicePrimaryCtxGetState", lambda: cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))),
    ]
    for name, call in calls:
        err = call()
        if err != 0:
            raise RuntimeError(f"cuda_sync={mode}: {name} failed (CUDA driver error {err})")
    return "%s (flags %#x)" % (mode, flags.value)


def set_cpu_threads(n: int) -> None:
    """Caps torch's intra-op CPU threads at n (parameter cpu_threads)."""
    import torch

    torch.set_num_threads(n)


def configure(opts: HostOptions, kind: str, ordinal: int) -> str:
    """Applies cuda_sync and cpu_threads for an instance of kind (GPU or
    CPU) on GPU ordinal; returns what was set, for the ready line."""
    gpu = kind == "GPU"
    opts.check()  # on a CPU too: a typo is an error wherever it runs
    threads = opts.threads(gpu)
    said = set_cuda_sync(opts.cuda_sync, ordinal) if gpu else "cpu"
    if threads > 0:
        set_cpu_threads(threads)
    return f"cuda_sync {said}, cpu_threads {threads}"
