"""How many logical devices this machine's CPU cores can start (issue 39).

Each logical device is one or two executor processes that import torch and start together; on
2 cores, 64 devices meant 46 Ray workers at once, a load of 50, no epoch in 5 minutes and a
raylet that exited. :func:`check_device_cores` refuses a layout of more than
:data:`MAX_DEVICES_PER_CORE` logical devices per core this process may run on, before Ray starts.
:func:`layout_refusal` is the same check for ``launch.py`` before it imports torch (about 1 s on
an idle 2-core machine, 10-20 s under a load of 20), on a machine that shows no GPU.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Optional

__all__ = ["MAX_DEVICES_PER_CORE", "usable_cores", "check_device_cores", "gpu_may_be_present",
           "layout_refusal"]

#: Device files a CUDA (NVIDIA), ROCm (AMD) or WSL GPU shows, each a glob pattern.
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")

#: Logical devices one CPU core can start and train in step.
MAX_DEVICES_PER_CORE = 4


def usable_cores() -> int:
    """The CPU cores this process may run on: its scheduler affinity where the platform has
    one, else ``os.cpu_count()`` (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_device_cores(devices: int, cores: Optional[int] = None) -> Optional[str]:
    """Why ``devices`` logical devices are too many for ``cores`` (default
    :func:`usable_cores`), or None when they fit (at most :data:`MAX_DEVICES_PER_CORE` each)."""
    cores = usable_cores() if cores is None else int(cores)
    most = MAX_DEVICES_PER_CORE * cores
    if devices <= most:
        return None
    return (f"{devices} logical devices are more than this machine's {cores} CPU core"
            f"{'s' if cores != 1 else ''} can start ({MAX_DEVICES_PER_CORE} per core: at most "
            f"{most}); lower --devices, or join a cluster with --address")


def gpu_may_be_present() -> bool:
    """Whether torch might see a GPU here, told without importing torch: a GPU device file
    (:data:`GPU_DEVICE_FILES`) exists and ``CUDA_VISIBLE_DEVICES`` does not hide every device.
    A false "maybe" only defers the check to :meth:`fgnn.job.Job.validate`."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES)


def layout_refusal(runtime: Any) -> Optional[str]:
    """Why the local layout of ``runtime`` (a :class:`~fgnn.config.RuntimeConfig`) is more than
    this machine's cores can start (:func:`check_device_cores`), told before torch is imported;
    None when it fits, when it joins a cluster (``address``), or when a GPU may be present (GPUs
    bound a layout themselves; :meth:`fgnn.job.Job.validate` checks once torch says which)."""
    if runtime.address not in (None, "local") or gpu_may_be_present():
        return None
    return check_device_cores(runtime.devices_used)
