"""The report carries the exactly-once ledger of every epoch (issue 19).

Before, the ledger that the epoch loop computes stayed in ``Runtime.details``; a user could not
check from the report that a run with faults trained every batch once. In-process: the ledger
of the server's counts (with a crash's rejected duplicate, and with an injected duplicate that
got applied), its schema check and the table line. ``tests/test_runtime_exactly_once.py`` checks
the same ledger in the report of real runs with a Trainer crash.
"""

from __future__ import annotations

import copy

import pytest

from fgnn.runtime.ledger import epoch_ledger
from fgnn.monitor.stats import EpochStats, RunResult, SampleTimes
from fgnn.report import ReportError, format_report, validate_report

TASKS = 6


def _server(applied: dict[int, int], rejected: dict[int, int]) -> dict:
    attempts = {t: applied.get(t, 0) + rejected.get(t, 0) for t in range(TASKS)}
    return {"attempts": attempts, "applied": applied, "rejected": rejected}


def _crashed_once() -> dict:
    """A Trainer died after its gradient for task 2 was applied: task 2 was pushed again by
    another Trainer and rejected; a dead Sampler lost one sample, reissued."""
    return epoch_ledger(TASKS, TASKS + 1, 1, 1,
                        _server({t: 1 for t in range(TASKS)}, {2: 1}))


def _duplicate_applied() -> dict:
    """A server without the exactly-once check applied task 2 twice."""
    return epoch_ledger(TASKS, TASKS, 0, 0,
                        _server({**{t: 1 for t in range(TASKS)}, 2: 2}, {}))


def _report(*ledgers) -> dict:
    eps = [EpochStats(epoch=i, time_s=1.0, sample=SampleTimes(0.1, 0.0, 0.0), batches=TASKS,
                      loss=0.5, ledger=lg) for i, lg in enumerate(ledgers)]
    return RunResult(config={"dataset": "rmat"}, mode="factored",
                     allocation={"devices": 2, "samplers": 1, "trainers": 1, "K": None},
                     preprocess={"load_s": 0.1}, epochs=eps,
                     final={"train_acc": 0.9, "val_acc": 0.8, "test_acc": 0.7}).to_dict()


def test_ledger_counts_a_rejected_duplicate():
    lg = _crashed_once()
    assert lg == {"tasks": TASKS, "issued": TASKS + 1, "lost": 1, "reissued": 1,
                  "pushed": TASKS + 1, "applied": TASKS, "applied_twice": 0, "missing": 0,
                  "rejected": 1, "exactly_once": True}


def test_ledger_counts_an_injected_duplicate():
    lg = _duplicate_applied()
    assert lg["applied_twice"] == 1 and lg["rejected"] == 0 and not lg["exactly_once"]
    missing = epoch_ledger(TASKS, TASKS, 0, 0, _server({t: 1 for t in range(TASKS - 1)}, {}))
    assert missing["missing"] == 1 and not missing["exactly_once"]


def test_report_epochs_carry_the_ledger_and_the_table_sums_it():
    report = _report(_crashed_once(), _crashed_once())
    validate_report(report)
    assert report["epochs"][0]["ledger"]["rejected"] == 1
    text = format_report(report)
    assert (f"ledger   {2 * TASKS} tasks: every task applied exactly once; 2 samples lost, "
            f"2 reissued, {2 * (TASKS + 1)} gradients pushed, 2 rejected as duplicates") in text
    bad = format_report(_report(_crashed_once(), _duplicate_applied()))
    assert "NOT exactly once in epoch 2 (0 missing, 1 applied twice)" in bad


@pytest.mark.parametrize("mutate,match", [
    (lambda lg: lg.pop("rejected"), r"ledger\.rejected: missing"),
    (lambda lg: lg.update(applied=-1), r"ledger\.applied: must be >= 0"),
    (lambda lg: lg.update(missing=3), r"ledger\.missing: must be tasks - applied"),
    (lambda lg: lg.update(exactly_once=False), r"ledger\.exactly_once: must be true exactly"),
    (lambda lg: lg.update(exactly_once="yes"), r"ledger\.exactly_once: must be true or false"),
])
def test_a_malformed_ledger_is_refused(mutate, match):
    report = _report(_crashed_once())
    lg = copy.deepcopy(report["epochs"][0]["ledger"])
    mutate(lg)
    report["epochs"][0]["ledger"] = lg
    with pytest.raises(ReportError, match=match):
        validate_report(report)


def test_reports_without_a_ledger_still_load():
    validate_report(_report(None))
    assert "ledger " not in format_report(_report(None))
