"""The device seam: every CUDA-only call of fgnn goes through this module.

fgnn's multi-GPU path (pinned staging, non-blocking copies, copy streams, events, peak-memory
meters, CUDA IPC, NCCL groups, CUDA RNG state) is written against these functions, never against
``torch.cuda`` directly, so that a test can swap in a recording fake device
(``tests/fake_cuda.py``) that runs on the CPU and enforces the CUDA rules fgnn relies on.

Each function here is the real torch call for a real device and nothing more. Code on the CPU
path never reaches them beyond :func:`is_cuda` / :func:`device_of` / :func:`on_cuda`, which are a
single attribute compare. A fake replaces the module's attributes (``monkeypatch.setattr``), so
callers must call ``gpu.name(...)`` through the module, not import the names.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Optional, Sequence

import torch

__all__ = ["current_device", "current_stream", "device_count", "device_of",
           "device_uuid", "empty_host", "empty_pinned", "event", "initialized", "ipc_export", "ipc_open",
           "is_available", "is_cuda", "is_host", "max_memory_allocated", "max_memory_reserved",
           "mem_get_info", "memory_allocated", "memory_reserved", "nccl_options",
           "nccl_process_group", "copy_into", "ipc_is_cuda",
           "new_stream", "nvml_process_bytes", "on_cuda", "pin", "record_stream",
           "reset_peak", "rng_state_all", "set_device", "set_rng_state_all", "synchronize",
           "to_device", "total_memory", "use_stream"]

# -- which memory a device or tensor is ----------------------------------------------------------

def is_cuda(device: torch.device) -> bool:
    """Whether ``device`` is a GPU."""
    return device.type == "cuda"


def is_host(device: torch.device) -> bool:
    """Whether ``device`` is host memory."""
    return device.type == "cpu"


def device_of(t: torch.Tensor) -> torch.device:
    """The device holding ``t``."""
    return t.device


def on_cuda(t: torch.Tensor) -> bool:
    """Whether ``t`` lives in GPU memory."""
    return t.device.type == "cuda"


def is_available() -> bool:
    """Whether this process can use CUDA."""
    return torch.cuda.is_available()


def device_count() -> int:
    """How many GPUs this process sees."""
    return torch.cuda.device_count()


def initialized() -> bool:
    """Whether this process has initialised CUDA (made a context)."""
    return torch.cuda.is_initialized()


def current_device() -> int:
    """The index of this thread's current GPU."""
    return torch.cuda.current_device()


def set_device(device: torch.device) -> None:
    """Make ``device`` this thread's current GPU."""
    torch.cuda.set_device(device)


# -- pinned memory and copies --------------------------------------------------------------------

def pin(t: torch.Tensor) -> torch.Tensor:
    """A page-locked host copy of ``t`` (``t`` itself if already pinned)."""
    return t if t.is_pinned() else t.pin_memory()


def empty_pinned(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised page-locked host tensor."""
    return torch.empty(tuple(shape), dtype=dtype, pin_memory=True)


def empty_host(shape: Sequence[int], dtype: torch.dtype, pinned: bool) -> torch.Tensor:
    """An uninitialised host tensor, page-locked when ``pinned``."""
    return empty_pinned(shape, dtype) if pinned else torch.empty(tuple(shape), dtype=dtype)


def to_device(t: torch.Tensor, device: torch.device, non_blocking: bool = True) -> torch.Tensor:
    """``t`` copied onto ``device``, queued on the current stream when ``non_blocking`` (the
    source must stay untouched until the copy is done: an event or a synchronise)."""
    return t.to(device, non_blocking=non_blocking)


def copy_into(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = True) -> torch.Tensor:
    """``dst.copy_(src)``: device to pinned host memory, or any copy, without blocking."""
    return dst.copy_(src, non_blocking=non_blocking)


# -- streams, events, synchronisation ------------------------------------------------------------

def new_stream(device: torch.device) -> Any:
    """A new CUDA stream on ``device``."""
    return torch.cuda.Stream(device)


def current_stream(device: torch.device) -> Any:
    """This thread's current stream on ``device``."""
    return torch.cuda.current_stream(device)


@contextlib.contextmanager
def use_stream(stream: Any) -> Iterator[None]:
    """Queue the enclosed copies and kernels on ``stream``."""
    with torch.cuda.stream(stream):
        yield


def record_stream(t: torch.Tensor, stream: Any) -> None:
    """Tell the caching allocator that ``stream`` uses ``t`` (made on another stream)."""
    t.record_stream(stream)


def event(timing: bool = False) -> Any:
    """A CUDA event (``timing``: with ``elapsed_time``)."""
    return torch.cuda.Event(enable_timing=timing)


def synchronize(device: torch.device) -> None:
    """Block the host until everything queued on ``device`` is done."""
    torch.cuda.synchronize(device)


# -- memory --------------------------------------------------------------------------------------

def reset_peak(device: torch.device) -> None:
    """Restart the allocator's peak counters of ``device``."""
    torch.cuda.reset_peak_memory_stats(device)


def max_memory_allocated(device: torch.device) -> int:
    """The allocator's peak of allocated bytes on ``device`` since the last reset."""
    return int(torch.cuda.max_memory_allocated(device))


def max_memory_reserved(device: torch.device) -> int:
    """The allocator's peak of reserved bytes on ``device``."""
    return int(torch.cuda.max_memory_reserved(device))


def memory_allocated(device: torch.device) -> int:
    """Bytes allocated by tensors on ``device`` now."""
    return int(torch.cuda.memory_allocated(device))


def memory_reserved(device: torch.device) -> int:
    """Bytes the caching allocator holds on ``device`` now."""
    return int(torch.cuda.memory_reserved(device))


def mem_get_info(device: torch.device) -> tuple[int, int]:
    """``(free, total)`` bytes of the GPU, as the driver counts them."""
    free, total = torch.cuda.mem_get_info(device)
    return int(free), int(total)


def total_memory(device: torch.device) -> int:
    """The GPU's memory in bytes."""
    return int(torch.cuda.get_device_properties(device).total_memory)


def device_uuid(device: torch.device) -> str:
    """The physical GPU's UUID (the same in every process, whatever its device numbering)."""
    return str(torch.cuda.get_device_properties(device).uuid)


def nvml_process_bytes(device: torch.device) -> Optional[int]:
    """Device bytes NVML counts for this process on ``device``; None where not measurable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(device))
        used = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                if p.pid == os.getpid()]
    except Exception:  # noqa: BLE001 - no NVML, no permission, no such process: not measured
        return None
    return None if not used or used[0] is None else int(used[0])


# -- RNG -----------------------------------------------------------------------------------------

def rng_state_all() -> list[torch.Tensor]:
    """The CUDA RNG state of every visible GPU."""
    return torch.cuda.get_rng_state_all()


def set_rng_state_all(states: Sequence[torch.Tensor]) -> None:
    """Restore :func:`rng_state_all`."""
    torch.cuda.set_rng_state_all(list(states))


# -- IPC and NCCL --------------------------------------------------------------------------------

def ipc_export(t: torch.Tensor) -> tuple[Any, tuple]:
    """``(rebuild function, its arguments)`` of torch's CUDA IPC reduction of ``t``."""
    from torch.multiprocessing.reductions import reduce_tensor

    fn, args = reduce_tensor(t)
    return fn, tuple(args)


def ipc_is_cuda(fn: Any) -> bool:
    """Whether ``fn`` (from :func:`ipc_export`) rebuilds a CUDA tensor over IPC."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    return fn is rebuild_cuda_tensor


def ipc_open(args: Sequence[Any]) -> torch.Tensor:
    """Map another process's exported tensor (the arguments of ``rebuild_cuda_tensor``)."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    return rebuild_cuda_tensor(*args)


def nccl_options() -> Any:
    """A fresh ``ProcessGroupNCCL.Options``."""
    import torch.distributed as dist

    return dist.ProcessGroupNCCL.Options()


def nccl_process_group(store: Any, rank: int, size: int, opts: Any,
                       device: torch.device) -> Any:
    """``ProcessGroupNCCL(store, rank, size, opts)``; ``device`` is the rank's GPU (NCCL takes
    one rank per GPU; torch binds the group to the thread's current device)."""
    import torch.distributed as dist

    del device  # torch reads the current device; a fake checks it
    return dist.ProcessGroupNCCL(store, rank, size, opts)
