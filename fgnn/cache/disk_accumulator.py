"""The dynamic storage access accumulator of GIDS (§3.2, Eq. 2-3).

Storage reaches its peak IOPs only with enough requests in flight. GIDS models one feature
aggregation as an initial stage ``T_i`` (until the first data arrives), a steady state ``T_s`` at
peak IOPs and a termination stage ``T_t``::

    N_access = IOP_achieved * (T_i + T_s + T_t) * N_ssd          (Eq. 2)
    T_s      = N_access / IOP_peak                                (Eq. 3)

``N_access`` is the number of concurrent storage accesses to keep outstanding. Substituting Eq. 3
into Eq. 2 (one SSD) gives the closed form

    N_access = IOP_achieved * (T_i + T_t) / (1 - IOP_achieved / IOP_peak),

finite when ``IOP_achieved < IOP_peak``. With ``N_ssd`` SSDs each SSD serves ``N_access / N_ssd`` of
the accesses at its own ``IOP_peak``, so Eq. 3 holds per SSD (``T_s = (N_access / N_ssd) /
IOP_peak``) and the solution is ``N_ssd`` times the one-SSD value -- the linear scaling §3.2 states
("the required number of concurrent storage accesses scales linearly with the number of SSDs").

The accumulator then samples further mini-batches ahead until the node accesses gathered reach a
threshold; since the CPU buffer and the device cache redirect part of the node accesses away from
storage, it tracks the redirected share ``r`` and raises the threshold accordingly (§3.2, last
paragraph): ``threshold = ceil(N_access / ((1 - r) * a))`` node accesses, where ``a`` is the number
of storage accesses (4 KiB pages) one storage-bound node access costs.

Note: with the §4.2 Optane constants (IOP_peak 1.5 M, T_i = 11 + 25 us, T_t = 5 us) and a 95 %
target the closed form gives 1168.5 accesses; the paper quotes 812 from its model without the
intermediate values, so that figure is not reproduced here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

__all__ = ["StorageAccessModel", "AccessAccumulator", "eq2_num_accesses", "eq3_steady_time"]


def eq2_num_accesses(iop_achieved: float, t_initial: float, t_steady: float,
                     t_termination: float, num_ssd: int = 1) -> float:
    """GIDS Eq. 2: ``N_access = IOP_achieved * (T_i + T_s + T_t) * N_ssd`` (times in seconds)."""
    return iop_achieved * (t_initial + t_steady + t_termination) * num_ssd


def eq3_steady_time(num_accesses: float, iop_peak: float) -> float:
    """GIDS Eq. 3: ``T_s = N_access / IOP_peak`` (seconds)."""
    return num_accesses / iop_peak


@dataclass
class StorageAccessModel:
    """Storage parameters of GIDS Eq. 2-3.

    Attributes:
        iop_peak: peak IOPs of one SSD (4 KiB reads); Optane 1.5e6, Samsung 980 Pro 7e5 (§4.2).
        iop_achieved: average IOPs per SSD to reach; give this or ``target_fraction``.
        t_initial: T_i in seconds: device latency plus launch overhead (§4.2 adds 25 us).
        t_termination: T_t in seconds (§4.2: 5 us).
        num_ssd: N_ssd, SSDs attached to one device.
        target_fraction: ``iop_achieved = target_fraction * iop_peak`` when ``iop_achieved`` is
            None (e.g. 0.95, §4.2).
    """

    iop_peak: float = 7.0e5
    iop_achieved: Optional[float] = None
    t_initial: float = 324e-6 + 25e-6
    t_termination: float = 5e-6
    num_ssd: int = 1
    target_fraction: float = 0.95

    def __post_init__(self) -> None:
        if self.iop_peak <= 0:
            raise ValueError(f"StorageAccessModel.iop_peak must be > 0, got {self.iop_peak}")
        if self.iop_achieved is None:
            if not 0.0 < self.target_fraction < 1.0:
                raise ValueError(f"StorageAccessModel.target_fraction must lie in (0, 1), got "
                                 f"{self.target_fraction}")
            self.iop_achieved = self.target_fraction * self.iop_peak
        if not 0.0 < self.iop_achieved < self.iop_peak:
            raise ValueError(f"StorageAccessModel.iop_achieved must lie in (0, iop_peak="
                             f"{self.iop_peak}), got {self.iop_achieved} (Eq. 2-3 have no finite "
                             f"solution at or above the peak)")
        if self.t_initial < 0 or self.t_termination < 0:
            raise ValueError(f"StorageAccessModel: t_initial and t_termination must be >= 0, got "
                             f"{self.t_initial}, {self.t_termination}")
        if self.num_ssd < 1:
            raise ValueError(f"StorageAccessModel.num_ssd must be >= 1, got {self.num_ssd}")

    def required_accesses(self) -> float:
        """N_access solving Eq. 2 and Eq. 3 together (see the module docstring)."""
        a, p = self.iop_achieved, self.iop_peak
        per_ssd = a * (self.t_initial + self.t_termination) / (1.0 - a / p)
        return per_ssd * self.num_ssd

    def steady_time(self) -> float:
        """T_s of Eq. 3 at the solution, per SSD (seconds)."""
        return eq3_steady_time(self.required_accesses() / self.num_ssd, self.iop_peak)


class AccessAccumulator:
    """Decides how many mini-batches to merge so enough storage accesses are in flight (§3.2).

    Args:
        num_accesses: N_access, storage accesses to keep outstanding (from
            :meth:`StorageAccessModel.required_accesses` or measured).
        accesses_per_row: initial ``a``, storage accesses (pages) per storage-bound node access;
            ``ceil(row_bytes / page)`` is the natural start. Refined from observed counts.
        max_redirect: cap on the redirected share ``r`` (keeps the threshold finite).

    Raises:
        ValueError: on non-positive arguments.
    """

    def __init__(self, num_accesses: float, accesses_per_row: float = 1.0,
                 max_redirect: float = 0.99) -> None:
        if num_accesses <= 0:
            raise ValueError(f"AccessAccumulator: num_accesses must be > 0, got {num_accesses}")
        if accesses_per_row <= 0:
            raise ValueError(f"AccessAccumulator: accesses_per_row must be > 0, got "
                             f"{accesses_per_row}")
        if not 0.0 <= max_redirect < 1.0:
            raise ValueError(f"AccessAccumulator: max_redirect must lie in [0, 1), got "
                             f"{max_redirect}")
        self.num_accesses = float(num_accesses)
        self.initial_accesses_per_row = float(accesses_per_row)
        self.max_redirect = float(max_redirect)
        self.node_accesses = 0
        self.redirected = 0
        self.storage_accesses = 0

    @classmethod
    def from_model(cls, model: StorageAccessModel, row_bytes: int, page_size: int = 4096,
                   **kwargs) -> "AccessAccumulator":
        """Build from Eq. 2-3 with ``a = ceil(row_bytes / page_size)``."""
        return cls(model.required_accesses(), math.ceil(row_bytes / page_size), **kwargs)

    def update(self, node_accesses: int, redirected: int, storage_accesses: int) -> None:
        """Record one aggregation: node accesses, those served by CPU buffer or device cache, and
        the storage accesses (pages) the rest cost."""
        if min(node_accesses, redirected, storage_accesses) < 0 or redirected > node_accesses:
            raise ValueError(f"AccessAccumulator.update: need 0 <= redirected <= node_accesses and "
                             f"storage_accesses >= 0, got {node_accesses}, {redirected}, "
                             f"{storage_accesses}")
        self.node_accesses += int(node_accesses)
        self.redirected += int(redirected)
        self.storage_accesses += int(storage_accesses)

    @property
    def redirect_ratio(self) -> float:
        """r: share of node accesses redirected to CPU/device memory so far (capped)."""
        if self.node_accesses == 0:
            return 0.0
        return min(self.redirected / self.node_accesses, self.max_redirect)

    @property
    def accesses_per_row(self) -> float:
        """a: storage accesses per storage-bound node access (observed, else the initial value)."""
        bound = self.node_accesses - self.redirected
        if bound <= 0 or self.storage_accesses == 0:
            return self.initial_accesses_per_row
        return self.storage_accesses / bound

    def threshold(self) -> int:
        """Node accesses to gather before issuing reads: ``ceil(N_access / ((1 - r) * a))``."""
        # Exact rational arithmetic on the integer counts (no 1 - 0.8 = 0.19999... rounding).
        n_acc = Fraction(self.num_accesses)
        if self.node_accesses == 0:
            r = Fraction(0)
        else:
            cap = Fraction(self.max_redirect).limit_denominator(10**9)
            r = min(Fraction(self.redirected, self.node_accesses), cap)
        bound = self.node_accesses - self.redirected
        if bound <= 0 or self.storage_accesses == 0:
            a = Fraction(self.initial_accesses_per_row)
        else:
            a = Fraction(self.storage_accesses, bound)
        return math.ceil(n_acc / ((1 - r) * a))

    def __repr__(self) -> str:
        return (f"AccessAccumulator(N_access={self.num_accesses:.1f}, r={self.redirect_ratio:.3f},"
                f" a={self.accesses_per_row:.3f}, threshold={self.threshold()})")
