"""The one exactly-once ledger of both gradient exchanges (fgnn/exchange/exactly_once.py) and the
one interface the driver sees (fgnn/exchange/api.py), without Ray.

* a hand-made sequence of pushes (a duplicate, another epoch, a dead incarnation, a revoked
  delivery, a new epoch) gives exact counts, and the report's ledger folds them;
* the parameter server and the collective's step ledger each own one :class:`TaskLedger` and
  answer ``ledger()`` with today's keys;
* both offer every method of :class:`GradientExchange` with its signature.
"""

from __future__ import annotations

import inspect

import pytest
from torch import nn

from fgnn.runtime.ledger import epoch_ledger
from fgnn.exchange.exactly_once import TaskLedger
from fgnn.exchange.api import GradientExchange
from fgnn.exchange.ps import ParameterServer
from fgnn.exchange.step_ledger import StepLedger

REPORT_KEYS = ["epoch", "attempts", "applied", "rejected", "by", "steps", "busy_s"]


def _push(led: TaskLedger, epoch: int, task: int, consumer: str, incarnation) -> bool:
    """One gradient delivered, in the order both exchanges count it."""
    led.attempt(task)
    if led.stale(consumer, incarnation) or not led.admit(epoch, task):
        led.reject(task)
        return False
    led.apply(task, consumer)
    return True


def test_a_hand_made_sequence_gives_exact_counts():
    led = TaskLedger()
    led.reset(0, tasks=4, group=2)
    led.enroll("a", 1)
    led.enroll("b", 1)
    assert led.slots(0) == 2
    assert _push(led, 0, 0, "a", 1)
    assert _push(led, 0, 1, "b", 1)
    assert not _push(led, 0, 0, "b", 1)       # a duplicate of an applied task
    assert not _push(led, 1, 2, "a", 1)       # a gradient of another epoch
    led.enroll("a", 2)                        # a restarted
    assert not _push(led, 0, 2, "a", 1)       # a late push of the dead incarnation
    assert led.slots(0) == 2 and led.slots(1) == 2
    assert _push(led, 0, 2, "a", 2)
    assert led.slots(0) == 1                  # one task left
    assert _push(led, 0, 3, "b", None)        # no incarnation: not checked
    assert led.complete() and led.slots(0) == 0
    led.revoke(3)                             # b died before its step was reduced
    assert not led.complete() and led.accepted == 3
    assert _push(led, 0, 3, "a", 2)           # so the task counts again, from a
    led.steps, led.busy_s = 2, 0.5
    assert led.report() == {
        "epoch": 0, "attempts": {0: 2, 1: 1, 2: 3, 3: 2}, "applied": {0: 1, 1: 1, 2: 1, 3: 1},
        "rejected": {0: 1, 2: 2}, "by": {0: "a", 1: "b", 2: "a", 3: "a"}, "steps": 2,
        "busy_s": 0.5}
    assert list(led.report()) == REPORT_KEYS
    folded = epoch_ledger(4, 4, 0, 0, led.report())
    assert folded == {"tasks": 4, "issued": 4, "lost": 0, "reissued": 0, "pushed": 8,
                      "applied": 4, "applied_twice": 0, "missing": 0, "rejected": 3,
                      "exactly_once": True}


def test_a_reset_clears_the_counts_and_keeps_the_enrolment():
    led = TaskLedger()
    led.reset(0, tasks=2)
    led.enroll("a", 2)
    assert _push(led, 0, 0, "a", 2)
    led.reset(1, tasks=2, group=2)
    assert led.report() == {"epoch": 1, "attempts": {}, "applied": {}, "rejected": {},
                            "by": {}, "steps": 0, "busy_s": 0.0}
    assert led.accepted == 0 and led.slots(0) == 2
    assert led.admit(1, 0) and not led.admit(0, 0)   # task 0 counts again, in epoch 1 only
    assert led.stale("a", 1) and not led.stale("a", 2) and led.incarnation("a") == 2
    led.retire("a")
    assert led.stale("a", 2) and not led.enrolled("a") and led.incarnation("a") is None
    assert not led.stale("a", None)


@pytest.mark.parametrize("field,kwargs", [("group", {"group": 0}), ("tasks", {"tasks": -1})])
def test_a_bad_plan_is_a_value_error_naming_it_and_resets_nothing(field, kwargs):
    led = TaskLedger()
    led.reset(3, tasks=1)
    assert _push(led, 3, 0, "a", None)
    with pytest.raises(ValueError, match=field):
        led.reset(4, **kwargs)
    assert led.epoch == 3 and led.report()["applied"] == {0: 1}


#: runtime.exchange -> (a new exchange, the key its ledger() adds to the TaskLedger's)
EXCHANGES = {"server": (lambda: ParameterServer(nn.Linear(2, 2), lr=0.1), "claim_s"),
             "collective": (StepLedger, "generation")}


@pytest.mark.parametrize("exchange", list(EXCHANGES))
def test_each_exchange_owns_one_task_ledger_and_reports_todays_keys(exchange):
    make, own = EXCHANGES[exchange]
    service = make()
    assert type(service._tasks) is TaskLedger
    service.begin_epoch(2, tasks=3, group=2)
    assert service.epoch == 2 and service.slots() == 2
    assert list(service.ledger()) == REPORT_KEYS + [own]
    with pytest.raises(ValueError, match="group"):
        service.begin_epoch(3, tasks=3, group=0)
    assert service.epoch == 2


def _protocol_methods() -> list[str]:
    return [n for n, v in vars(GradientExchange).items()
            if inspect.isfunction(v) and not n.startswith("_")]


def test_the_interface_names_the_drivers_methods():
    assert sorted(_protocol_methods()) == ["begin_epoch", "ledger", "release", "slots",
                                           "state", "weights"]


@pytest.mark.parametrize("exchange", list(EXCHANGES))
def test_both_exchanges_offer_the_interface_with_its_signatures(exchange):
    service = EXCHANGES[exchange][0]()
    cls = type(service)
    assert isinstance(service, GradientExchange)
    for name in _protocol_methods():
        want = list(inspect.signature(getattr(GradientExchange, name)).parameters.values())
        have = list(inspect.signature(getattr(cls, name)).parameters.values())
        assert [(p.name, p.default) for p in have[:len(want)]] == \
               [(p.name, p.default) for p in want], f"{cls.__name__}.{name}"
        extra = [p.name for p in have[len(want):] if p.default is inspect.Parameter.empty]
        assert not extra, f"{cls.__name__}.{name} needs more than the interface: {extra}"
