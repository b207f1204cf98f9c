"""The evaluation working set bounded to fit beside the cache, and why a cache came out empty.

An evaluation chunk of the default size (:func:`fgnn.evaluation.default_eval_chunk`: up to 4096
seeds) can be a hundred times a training task's seeds (a batch of 66 over 2 Trainers), and the
sizing of :mod:`fgnn.cache.sizing` budgets ``ratio × step_peak`` for it: on the 1 GiB of a
logical device that excess alone took every byte and left the feature cache empty (issue 39).

:func:`bounded_eval_ratio` caps that excess when the chunk was not set by the user: the
evaluation may take at most :data:`EVAL_SHARE` of what the budget leaves after the training
terms and the margin, or more where the cache holds every row it may hold anyway. The runtime
then evaluates in chunks of ``ratio × task seeds`` seeds (:func:`chunk_for_ratio`).

:func:`empty_cache_reason` names, for a plan whose cache holds no row, the term that took the
memory and the flag that changes it: one console line, and the report's
``allocation.cache_empty``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

__all__ = ["EVAL_SHARE", "bounded_eval_ratio", "chunk_for_ratio", "empty_cache_reason"]

#: Share of what the training terms and the margin leave on a device that the evaluation chunk's
#: excess may take when it was not set (``--eval-batch-size``): the rest is the cache's.
EVAL_SHARE = 0.5

#: The flag that shrinks each term, besides ``--device-memory`` (which raises the budget).
_TERM_FLAGS = {
    "eval_chunk": "--eval-batch-size", "gather": "--eval-batch-size",
    "step_peak": "--batch-size", "fragmentation": "--batch-size", "model": "--hidden",
    "sampler": "--fanouts", "ipc_queue": "--queue-size", "context": "--gpus-per-device",
    "nccl": "--exchange",
}


def bounded_eval_ratio(ratio: float, extra_bytes: int, free_bytes: int,
                       cache_bytes_wanted: int, share: float = EVAL_SHARE) -> float:
    """The largest evaluation ratio (chunk seeds / task seeds, at most ``ratio``) whose excess
    leaves the cache its room.

    The excess grows linearly with the ratio (:func:`fgnn.cache.sizing.device_terms`), from 0
    at 1 to ``extra_bytes`` at ``ratio``. It may take ``max(share × free_bytes, free_bytes −
    cache_bytes_wanted)``: half of what is free, or everything the cache cannot use. Where the
    training terms leave nothing free, no chunk makes room and ``ratio`` stays.

    Args:
        ratio: the ratio of the chunk in force (``>= 1``).
        extra_bytes: the terms' sum at ``ratio`` less their sum at 1.
        free_bytes: the budget less the terms at ratio 1 and the margin.
        cache_bytes_wanted: the bytes of every row the cache may hold (``α`` cap × N × row).
        share: :data:`EVAL_SHARE`.

    Raises:
        ValueError: for ``ratio < 1`` or a share outside ``(0, 1]``.
    """
    if ratio < 1.0 or not 0.0 < share <= 1.0:
        raise ValueError(f"ratio must be >= 1 and share in (0, 1], got {ratio}, {share}")
    if ratio == 1.0 or extra_bytes <= 0 or free_bytes <= 0:
        return ratio  # (no room for a cache row whatever the chunk: the plan says why)
    allowed = max(share * free_bytes, free_bytes - cache_bytes_wanted)
    if extra_bytes <= allowed:
        return ratio
    return 1.0 + (ratio - 1.0) * allowed / extra_bytes


def chunk_for_ratio(ratio: float, batch_size: int, step_tasks: int) -> int:
    """Seeds of an evaluation chunk ``ratio`` times a training task's
    (``⌈batch_size / step_tasks⌉`` seeds), at least one task's."""
    seeds = -(-int(batch_size) // max(1, int(step_tasks)))
    return max(seeds, int(math.floor(ratio * seeds + 1e-9)))


def empty_cache_reason(plan: Any, policy: str, cache_ratio: Optional[float]
                       ) -> Optional[dict[str, Any]]:
    """Why ``plan`` (a :class:`~fgnn.cache.budget.DeviceCachePlan`) caches no row, or None
    when it caches some or no cache was asked for (``--cache-policy none``).

    Returns:
        ``{"term", "bytes", "budget_bytes", "flag", "line"}``: the largest term, its bytes,
        the budget, the flag that changes it, and one console line saying so.
    """
    if plan is None or plan.num_cached > 0 or policy == "none":
        return None
    if cache_ratio == 0:
        return {"term": "cache_ratio", "bytes": 0, "budget_bytes": plan.budget_bytes,
                "flag": "--cache-ratio",
                "line": "feature cache empty (alpha 0): --cache-ratio 0 asks for none"}
    terms: Mapping[str, int] = plan.resident
    term = max(terms, key=lambda k: terms[k]) if terms else "margin"
    took = terms.get(term, plan.margin_bytes)
    flag = _TERM_FLAGS.get(term, "--device-memory")
    change = "raise --device-memory" + ("" if flag == "--device-memory" else f" or change {flag}")
    line = (f"feature cache empty (alpha 0): of the {_mib(plan.budget_bytes)} device budget, "
            f"{term} takes {_mib(took)} (all terms {_mib(sum(terms.values()))}, margin "
            f"{_mib(plan.margin_bytes)}); {change}")
    return {"term": term, "bytes": int(took), "budget_bytes": int(plan.budget_bytes),
            "flag": flag, "line": line}


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MiB"
