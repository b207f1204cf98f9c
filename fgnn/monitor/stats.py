"""Per-epoch and per-run statistics: the records the runtime fills and the report writes.

Every timing says what it covers: executor stage seconds (``sample``, ``extract_s``, ``train_s``)
are summed over executors; ``time_s`` and ``eval_s`` are wall seconds on the driver, training
and validation apart; the run's preprocessing wall seconds sit in ``RunResult.preprocess``
(:data:`PREPROCESS_KEYS`) and the final scoring in ``RunResult.final_eval_s``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Optional

__all__ = ["SampleTimes", "EpochStats", "RunResult", "PREPROCESS_KEYS", "early_stop_message"]

#: Preprocessing wall seconds of a run, in the order they happen: loading the dataset, a
#: sampling-free hotness map on the driver (degree / PageRank / random; PreSC counts visits in
#: the warm-up epochs instead), starting the executor processes (overlapping the hotness),
#: planning each device's cache after the warm-up, filling the caches, and starting the
#: executors the allocation adds. Older reports hold ``presample_s`` and ``cache_build_s``.
PREPROCESS_KEYS = ("load_s", "hotness_s", "startup_s", "sizing_s", "cache_fill_s", "relayout_s")


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
    """What one epoch did; one entry of the report's ``epochs`` list.

    ``time_s`` is the epoch's training wall time and ``eval_s`` the wall time of its validation
    (0.0 when it had none); the stage times are summed over executors.
    """

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
    peer_host_rows: int = 0
    """Rows of the ``peer`` tier read from the host copy of the features, not from the peer's
    buffer: peers a Trainer could not map (another node, ``cache.peer_tier = "host"``, an open
    refused; the report's ``allocation.peer_tier`` says which and why)."""
    load_ratio: float = 0.0
    """Data-loading share of the Trainers' time, Extract / (Extract + Train) (the ``r`` of
    Song & Jiang Algorithm 2)."""
    locality_scale: Optional[float] = None
    """The scale factor ``s`` the locality-aware sampler used in this epoch (None for other
    samplers)."""
    switches: int = 0
    declines: int = 0
    """Standby runs of the epoch that ended by declining a task: the profit of the next fetch
    was not positive (FGNN §5.3)."""
    batches: int = 0
    loss: float = float("nan")
    samplers: int = 0
    trainers: int = 0
    queue_wait_s: float = 0.0
    queue_depth: list[int] = field(default_factory=list)
    """Global-queue depth sampled over the epoch."""
    val_acc: Optional[float] = None
    val_auc: Optional[float] = None
    """Link prediction: validation AUC of the epoch (None otherwise, or when not validated)."""
    val_ap: Optional[float] = None
    """Link prediction: validation average precision of the epoch."""
    eval_s: float = 0.0
    """Wall seconds of this epoch's validation pass (0 when not evaluated)."""
    warmup: bool = False
    """Trained without the feature cache: the run's first epoch(s), which measure T_s, T_t and
    memory and, for PreSC#K, pre-sample (FGNN §5.3, §6.1, §6.3)."""
    disk: Optional[dict[str, int]] = None
    """Disk-tier counters of the epoch (``--feature-tier disk``): rows per tier
    (``device_rows``, ``cpu_rows``, ``storage_rows``), storage ``bytes_read`` / ``read_calls`` /
    ``pages``, cache ``evictions``, ...; None with the memory tier."""
    typed_cache: Optional[dict[str, dict[str, int]]] = None
    """A typed dataset: node type (with features) -> ``{"hits", "misses"}``, the rows of that
    type the Trainers read from their cache and from the host in the epoch's tasks (hits +
    misses = the rows of that type the samples asked for); None for a homogeneous job."""
    ledger: Optional[dict[str, Any]] = None
    """The epoch's exactly-once ledger (:func:`fgnn.runtime.ledger.epoch_ledger`): ``tasks``,
    ``issued``, ``lost``, ``reissued``, ``pushed``, ``applied``, ``applied_twice``, ``missing``,
    ``rejected`` and ``exactly_once``; None where no ledger was kept."""

    def to_dict(self) -> dict[str, Any]:
        """The report's per-epoch record (``sample_s`` holds total, S, M, C)."""
        d = asdict(self)
        s = d.pop("sample")
        d["sample_s"] = {"total": self.sample.total, **s}
        return d

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> "EpochStats":
        """The epoch of a :meth:`to_dict` record (a checkpoint keeps them for its report); keys
        it does not know are left out."""
        d = dict(record)
        sample = {k: float(v) for k, v in dict(d.pop("sample_s", {})).items() if k != "total"}
        known = {f.name for f in fields(cls)} - {"sample"}
        return cls(sample=SampleTimes(**sample), **{k: v for k, v in d.items() if k in known})


@dataclass
class RunResult:
    """Everything a run produced, in the shape of the JSON report."""

    config: dict[str, Any]
    mode: str
    allocation: dict[str, Any]
    """``devices``, ``samplers``, ``trainers``, ``K``, ``device_kind`` (``gpu``/``logical``)."""
    preprocess: dict[str, float]
    """Wall seconds per preprocessing step, keyed by :data:`PREPROCESS_KEYS`."""
    epochs: list[EpochStats]
    final: dict[str, float]
    """``train_acc``, ``val_acc``, ``test_acc``; for link prediction ``val_auc``, ``val_ap``,
    ``test_auc``, ``test_ap`` (plus ``{val,test}_mrr`` and ``{val,test}_hits@K`` when asked
    for)."""
    final_eval_s: float = 0.0
    """Wall seconds of the final train/val/test scoring pass."""
    early_stop: Optional[dict[str, Any]] = None
    """Why training stopped before ``train.epochs`` (``None`` when it ran them all):
    ``epoch`` (the last one run, 0-based), ``patience`` (evaluations without a better validation
    accuracy), ``best_val_acc`` and ``best_epoch`` (0-based). See :func:`early_stop_message`."""
    metric: Optional[str] = None
    """The task's validation score, as the plot and table name it (``accuracy``, ``AUC``,
    ``recall@10``; :attr:`fgnn.tasks.Task.metric`); ``None``: the task's default
    (:func:`fgnn.monitor.summary.metric_name`)."""
    memory: Optional[dict[str, Any]] = None
    """Host memory: ``processes``, each process's ``pid``, ``role``, ``name``, ``peak_rss``,
    ``rss`` and the resident bytes of the files it maps (:func:`fgnn.procmem.process_memory`);
    ``topology`` (the mapped topology's files, their bytes and the resident bytes per host);
    ``plan`` (the memory plan the job started from, :mod:`fgnn.memory_plan`), set by the job."""
    timeline: Optional[dict[str, Any]] = None
    """Where the whole run's wall time went, in parts that add up to it
    (:meth:`fgnn.monitor.timeline.Timeline.close`: ``wall_s``, ``origin``, ``parts``); set by
    :class:`fgnn.Job` (``None`` for a bare runtime run)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (``timeline`` only when set)."""
        out = {
            "config": self.config,
            "mode": self.mode,
            "allocation": self.allocation,
            "preprocess": self.preprocess,
            "epochs": [e.to_dict() for e in self.epochs],
            "final": self.final,
            "final_eval_s": self.final_eval_s,
            "early_stop": self.early_stop,
            "metric": self.metric,
        }
        if self.memory is not None:
            out["memory"] = self.memory
        if self.timeline is not None:
            out["timeline"] = self.timeline
        return out


def early_stop_message(early_stop: dict[str, Any], metric: str = "accuracy") -> str:
    """Why a run stopped early, in one line with epochs numbered from 1 (as on the console);
    ``metric`` names the validation score (``AUC`` for link prediction).

    Example:
        ``early stop after epoch 7: no better validation accuracy in 3 evaluations
        (best 0.8120 at epoch 4)``
    """
    p = int(early_stop["patience"])
    return (f"early stop after epoch {int(early_stop['epoch']) + 1}: no better validation "
            f"{metric} in {p} evaluation{'' if p == 1 else 's'} "
            f"(best {float(early_stop['best_val_acc']):.4f} "
            f"at epoch {int(early_stop['best_epoch']) + 1})")
