"""The exactly-once ledger of an epoch in the report (``epochs[*].ledger``).

The gradient exchange's :class:`~fgnn.exchange.exactly_once.TaskLedger` counts every gradient
pushed per task (``attempts``), applied (``applied``) and turned away (``rejected``: duplicates of
an applied task, stale epochs, dead incarnations); the
driver counts the tasks it handed to Samplers (``issued``), handed out again after a fault
(``reissued``) and the samples lost with a dead Sampler (``lost``). :func:`epoch_ledger` folds
them into the counts a user checks: a run trained every mini-batch exactly once when
``applied == tasks`` and ``applied_twice == 0`` (``exactly_once``).
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["LEDGER_KEYS", "epoch_ledger", "redelivered"]

#: Integer counts of a ledger, in the order the report's table prints them.
LEDGER_KEYS = ("tasks", "issued", "lost", "reissued", "pushed", "applied", "applied_twice",
               "missing", "rejected")


def redelivered(deliveries: Mapping[int, int]) -> int:
    """Leases the queue handed out again (task id -> times delivered): every delivery of a
    task after its first, e.g. the leases of a dead Trainer given back and taken by another."""
    return int(sum(n - 1 for n in deliveries.values() if n > 1))


def epoch_ledger(tasks: int, issued: int, lost: int, reissued: int,
                 server: Mapping[str, Mapping[int, int]]) -> dict[str, Any]:
    """The report's ledger of one training epoch.

    Args:
        tasks: tasks of the epoch (mini-batches times tasks per mini-batch).
        issued: tasks handed out to be sampled, reissues included.
        lost: samples lost with a dead Sampler before a Trainer read them.
        reissued: tasks handed out again after a fault (issued twice by the driver, or a lease
            the queue gave once more: :func:`redelivered`).
        server: the parameter server's ledger, task id -> count: ``attempts``, ``applied``,
            ``rejected``.

    Returns:
        ``tasks``, ``issued``, ``lost``, ``reissued``; ``pushed`` (gradients received);
        ``applied`` (tasks whose gradient was applied); ``applied_twice`` (tasks applied more
        than once: 0 when exactly-once holds); ``missing`` (tasks never applied); ``rejected``
        (gradients turned away as duplicates); ``exactly_once`` (every task applied once).
    """
    applied = server.get("applied", {})
    once = sum(1 for t in range(tasks) if applied.get(t, 0) >= 1)
    twice = sum(1 for n in applied.values() if n > 1)
    out = {"tasks": int(tasks), "issued": int(issued), "lost": int(lost),
           "reissued": int(reissued),
           "pushed": int(sum(server.get("attempts", {}).values())),
           "applied": int(once), "applied_twice": int(twice), "missing": int(tasks - once),
           "rejected": int(sum(server.get("rejected", {}).values()))}
    out["exactly_once"] = out["missing"] == 0 and twice == 0
    return out
