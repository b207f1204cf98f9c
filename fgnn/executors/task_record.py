"""The record of one task (a mini-batch, or a chunk of an evaluation pass) on its way through a
Trainer: taken from the global queue, extracted, trained or scored, acknowledged.

A Trainer builds a :class:`TaskRecord` when it takes a task (:meth:`TrainerExecutor._take
<fgnn.executors.trainer.TrainerExecutor>`), each stage fills its fields, and the acknowledgement
carries it to the :class:`~fgnn.executors.queue.GlobalQueue` (which stamps ``task_id`` and
``consumer``); the driver's :class:`~fgnn.runtime.epoch.EpochCoordinator` sums the epoch's
records into its :class:`~fgnn.monitor.stats.EpochStats` and details. No torch here: the queue
actor imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["TaskRecord"]


@dataclass
class TaskRecord:
    """One task's times and counters (seconds are ``time.perf_counter`` differences).

    Attributes:
        role: ``"trainer"`` or ``"standby"``: the Trainer that took the task.
        wait_s: seconds the queue's ``get`` waited for an item.
        rpc_s: seconds of the queue calls beyond that wait.
        producer: the Sampler that produced the sample (``"scheduler"`` for a raw task).
        nbytes: approximate bytes of the sample (what the C step copies).
        fetch_s: seconds to fetch the sample from the object store (0 for a raw task).
        S: time-sharing: seconds the Trainer's own sampling took (the S step).
        M: time-sharing: seconds its marking took (the M step).
        extract_s: seconds of the Extract (cache, peer, host or disk rows, labels).
        hits: input rows served from device caches (own and peers').
        misses: input rows read from host memory (or the disk tiers' CPU buffer and storage).
        host_bytes: bytes of the rows that crossed host -> device.
        tier_rows: rows by tier (``local``, ``peer``, ``host``), and ``peer_host``: the
            ``peer`` rows read from the host copy; empty with the disk tier.
        tier_bytes: bytes by tier (``local``, ``peer``, ``host``); empty with the disk tier.
        typed: a typed dataset: node type -> ``[hits, misses]``; None otherwise.
        disk: the disk tiers' counters of the task
            (:meth:`~fgnn.cache.disk_tiers.DiskTiers.take_stats`); None without the disk tier.
        loss: the training loss (None for an evaluation chunk).
        applied: whether the exchange applied the gradient (False: a rejected duplicate); None
            for an evaluation chunk, or while a collective step is pending.
        deferred: the collective exchange acknowledges the task once its step is applied.
        train_s: seconds of the training step less its wait for other Trainers' work.
        sync_s: seconds of the gradient exchange (claim, push or delivery, the step's weights).
        step_wait_s: seconds waiting for other Trainers' work of the step.
        exchange_parts: ``sync_s`` by part, ``x_*`` name -> seconds (``x_claim_s``,
            ``x_push_s``, ``x_deliver_s``, ...), in the order the exchange measured them.
        stall_s: seconds the Trainer waited for this task's fetch and Extract (what its
            prefetch did not hide).
        split: an evaluation chunk's split (None: a training task).
        eval_s: seconds of an evaluation chunk's forward.
        correct: an evaluation chunk's correct predictions.
        count: an evaluation chunk's scored items.
        loss_sum: an evaluation chunk's summed loss.
        pair_scores: a pair task's chunk: the pairs' scores in pair order (numpy), else None.
        pair_labels: a pair task's chunk: the pairs' labels (numpy), else None.
        task_id: the task (stamped by the queue's ``ack``; -1 before).
        consumer: the Trainer that acknowledged it (stamped by the queue's ``ack``).
    """

    role: str = "trainer"
    wait_s: float = 0.0
    rpc_s: float = 0.0
    producer: str = ""
    nbytes: int = 0
    fetch_s: float = 0.0
    S: float = 0.0
    M: float = 0.0
    extract_s: float = 0.0
    hits: int = 0
    misses: int = 0
    host_bytes: int = 0
    tier_rows: dict[str, int] = field(default_factory=dict)
    tier_bytes: dict[str, int] = field(default_factory=dict)
    typed: Optional[dict[str, list[int]]] = None
    disk: Optional[dict[str, int]] = None
    loss: Optional[float] = None
    applied: Optional[bool] = None
    deferred: bool = False
    train_s: float = 0.0
    sync_s: float = 0.0
    step_wait_s: float = 0.0
    exchange_parts: dict[str, float] = field(default_factory=dict)
    stall_s: float = 0.0
    split: Optional[str] = None
    eval_s: float = 0.0
    correct: int = 0
    count: int = 0
    loss_sum: float = 0.0
    pair_scores: Any = None
    pair_labels: Any = None
    task_id: int = -1
    consumer: str = ""

    @property
    def evaluation(self) -> bool:
        """Whether this is a chunk of an evaluation pass (scored, not trained)."""
        return self.split is not None
