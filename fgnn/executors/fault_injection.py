"""Fault injection for tests and benchmarks: which Trainers run slow, which die once (by exit,
or by the kernel's OOM killer after eating host memory).

A job passes one :class:`FaultSpec` to :class:`~fgnn.runtime.driver.Runtime` (``faults=``);
each Trainer actor gets its own :class:`TrainerFaults` (:meth:`FaultSpec.for_trainer`). Without
a spec no hook is armed. (Faults from outside the job, a ``SIGSTOP`` or ``ray.kill`` of an actor,
need no hook: the adversarial tests send them.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, NoReturn

__all__ = ["FaultSpec", "TrainerFaults", "NO_FAULTS", "exhaust_memory"]

#: Bytes :func:`exhaust_memory` adds at a time.
EAT_CHUNK_BYTES = 64 << 20
#: :func:`exhaust_memory` stops (and exits 1) when the host's ``MemAvailable`` falls below this:
#: outside a memory group it must not take the machine down.
EAT_HOST_RESERVE_BYTES = 1 << 30


def exhaust_memory(meminfo: str = "/proc/meminfo") -> NoReturn:
    """Allocate and touch host memory until the kernel's OOM killer ends this process (inside a
    memory cgroup its limit is reached first); should the host itself run low first (no group,
    or a group larger than the host's free memory), exit with status 1 instead."""
    import os

    from pathlib import Path

    from fgnn.procmem import proc_field

    eaten = []
    while (proc_field(Path(meminfo), "MemAvailable:") or 0) * 1024 > EAT_HOST_RESERVE_BYTES:
        eaten.append(b"\x01" * EAT_CHUNK_BYTES)  # written: every page is resident
    os._exit(1)


def _check_index(name: str, index: Any) -> None:
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{name}: a Trainer index must be an int, got {index!r}")
    if index < 0:
        raise ValueError(f"{name}: a Trainer index must be >= 0, got {index!r}")


def _check_delay(name: str, delay: Any) -> None:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {delay!r}")
    if not math.isfinite(delay) or delay < 0:
        raise ValueError(f"{name} must be finite and >= 0 seconds, got {delay!r}")


def _frozen_indices(indices: Iterable[int], name: str = "crash_after_apply") -> frozenset[int]:
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Iterable):
        raise TypeError(f"{name} must be a set of Trainer indices, got {indices!r}")
    out = frozenset(indices)
    for index in out:
        _check_index(name, index)
    return out


@dataclass(frozen=True)
class TrainerFaults:
    """The fault hooks of one Trainer actor.

    Attributes:
        delay_s: extra seconds per mini-batch (a deliberately slow Trainer); 0: none.
        crash_after_apply: the process exits right after the exchange applied a gradient of
            this Trainer and before its task is acknowledged; the restarted incarnation (Ray
            ``max_restarts``) trains normally.
        oom_after_apply: at the same point (with the parameter-server exchange) the process
            eats host memory until the kernel's OOM killer ends it (:func:`exhaust_memory`;
            only inside a memory group); the restarted incarnation trains normally.
    """

    delay_s: float = 0.0
    crash_after_apply: bool = False
    oom_after_apply: bool = False

    def __post_init__(self) -> None:
        _check_delay("delay_s", self.delay_s)
        for name in ("crash_after_apply", "oom_after_apply"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")


#: A Trainer with no fault armed.
NO_FAULTS = TrainerFaults()


@dataclass(frozen=True)
class FaultSpec:
    """The fault hooks of a job, by Trainer index (the order of the layout's normal Trainers,
    from 0).

    Args:
        slow_trainers: Trainer index -> extra seconds per mini-batch.
        crash_after_apply: indices of the Trainers that die once, right after the exchange
            applied a gradient of theirs and before its task is acknowledged (standby Trainers
            never crash).
        oom_after_apply: indices of the Trainers that, at the same point, eat host memory
            until the kernel's OOM killer ends them, once (the parameter-server exchange; for
            a job inside a memory group).

    Raises:
        TypeError: an index that is not an int.
        ValueError: a negative index, or a delay that is negative or not finite.
    """

    slow_trainers: Mapping[int, float] = field(default_factory=dict)
    crash_after_apply: frozenset[int] = frozenset()
    oom_after_apply: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.slow_trainers, Mapping):
            raise TypeError(f"slow_trainers must map Trainer index -> seconds, got "
                            f"{self.slow_trainers!r}")
        slow = dict(self.slow_trainers)
        for index, delay in slow.items():
            _check_index("slow_trainers", index)
            _check_delay(f"slow_trainers[{index}]", delay)
        crash = _frozen_indices(self.crash_after_apply)
        object.__setattr__(self, "slow_trainers",
                           MappingProxyType({i: float(d) for i, d in slow.items()}))
        object.__setattr__(self, "crash_after_apply", crash)
        object.__setattr__(self, "oom_after_apply",
                           _frozen_indices(self.oom_after_apply, "oom_after_apply"))

    @property
    def ends_a_process(self) -> bool:
        """Whether a hook ends a Trainer's process (the job must run on Ray to restart it)."""
        return bool(self.crash_after_apply or self.oom_after_apply)

    def for_trainer(self, index: int, role: str = "trainer") -> TrainerFaults:
        """The hooks of the Trainer ``index`` of the layout (a standby's ``crash_after_apply``
        is never set).

        Raises:
            ValueError: a ``role`` other than ``"trainer"`` or ``"standby"``.
        """
        if role not in ("trainer", "standby"):
            raise ValueError(f"role must be 'trainer' or 'standby', got {role!r}")
        return TrainerFaults(self.slow_trainers.get(index, 0.0),
                             role == "trainer" and index in self.crash_after_apply,
                             role == "trainer" and index in self.oom_after_apply)

    def __reduce__(self) -> tuple[Any, ...]:  # a mapping proxy does not pickle
        return FaultSpec, (dict(self.slow_trainers), self.crash_after_apply,
                           self.oom_after_apply)
