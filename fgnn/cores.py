"""How many logical devices this machine's CPU cores can start (issue 39).

Each logical device is one or two executor processes that import torch and start together; on
2 cores, 64 devices meant 46 Ray workers at once, a load of 50, no epoch in 5 minutes and a
raylet that exited. :func:`check_device_cores` refuses a layout of more than
:data:`MAX_DEVICES_PER_CORE` logical devices per core this process may run on, before Ray starts.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["MAX_DEVICES_PER_CORE", "usable_cores", "check_device_cores"]

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
