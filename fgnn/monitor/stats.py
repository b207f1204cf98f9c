"""Per-epoch and per-run statistics: the records the runtime fills and the report writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

__all__ = ["SampleTimes", "EpochStats", "RunResult"]


@dataclass
class SampleTimes:
    """The Sample stage split as in FGNN Table 5: S (sampling), M (marking cached vertices),
    C (copying the sample into the global queue), all in seconds summed over the epoch."""

    S: float = 0.0
    M: float = 0.0
    C: float = 0.0

    @property
    def total(self) -> float:
        """S + M + C."""
        return self.S + self.M + self.C


@dataclass
class EpochStats:
    """What one epoch did; one entry of the report's ``epochs`` list."""

    epoch: int
    time_s: float = 0.0
    sample: SampleTimes = field(default_factory=SampleTimes)
    extract_s: float = 0.0
    train_s: float = 0.0
    hit_rate: float = 0.0
    """Share of input rows served from a device cache, the Trainer's own or a peer's (the
    share of sampled vertices the caches hold)."""
    bytes_host_to_device: int = 0
    """Host→device bytes: feature rows read from the host tier plus ``sample_bytes``."""
    sample_bytes: int = 0
    """Bytes of the samples copied host→device (factored and single mode: the Samplers' output
    goes through the host-memory queue; 0 in time-sharing, which samples on the device)."""
    tier_rows: dict = field(default_factory=lambda: {"local": 0, "peer": 0, "host": 0})
    """Input feature rows by where they were read: the Trainer's own cache, a peer device's
    cache, host memory."""
    tier_bytes: dict = field(default_factory=lambda: {"local": 0, "peer": 0, "host": 0})
    """Feature bytes by tier (``host`` = the feature part of ``bytes_host_to_device``)."""
    load_ratio: float = 0.0
    """Data-loading share of the Trainers' time, Extract / (Extract + Train) (the ``r`` of
    Song & Jiang Algorithm 2)."""
    locality_scale: Optional[float] = None
    """The scale factor ``s`` the locality-aware sampler used in this epoch (None for other
    samplers)."""
    switches: int = 0
    batches: int = 0
    loss: float = float("nan")
    samplers: int = 0
    trainers: int = 0
    queue_wait_s: float = 0.0
    queue_depth: list[int] = field(default_factory=list)
    """Global-queue depth sampled over the epoch."""
    val_acc: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        """The report's per-epoch record (``sample_s`` holds total, S, M, C)."""
        d = asdict(self)
        s = d.pop("sample")
        d["sample_s"] = {"total": self.sample.total, **s}
        return d


@dataclass
class RunResult:
    """Everything a run produced, in the shape of the JSON report."""

    config: dict[str, Any]
    mode: str
    allocation: dict[str, Any]
    """``devices``, ``samplers``, ``trainers``, ``K``, ``device_kind`` (``gpu``/``logical``)."""
    preprocess: dict[str, float]
    """``load_s``, ``presample_s``, ``cache_build_s``."""
    epochs: list[EpochStats]
    final: dict[str, float]
    """``train_acc``, ``val_acc``, ``test_acc``."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        return {
            "config": self.config,
            "mode": self.mode,
            "allocation": self.allocation,
            "preprocess": self.preprocess,
            "epochs": [e.to_dict() for e in self.epochs],
            "final": self.final,
        }
