"""Allocation formula, switching profit and task hand-out (FGNN §5.3), without Ray."""

from __future__ import annotations

import math

import pytest
import torch

from fgnn.executors.scheduler import (StandbyPolicy, TaskScheduler, allocate, epoch_batches,
                                      profit, trainer_seconds)


# ---------------------------------------------------------------------------- allocate
@pytest.mark.parametrize("n_g, t_s, t_t, expected", [
    # K = T_t / T_s, N_s = ceil(N_g / (K + 1)), N_t = N_g - N_s
    (8, 1.0, 3.0, (2, 6, 3.0)),      # 8 / 4 = 2 exactly
    (8, 1.0, 2.0, (3, 5, 2.0)),      # 8 / 3 = 2.67 -> 3
    (4, 1.0, 3.0, (1, 3, 3.0)),      # 4 / 4 = 1
    (4, 2.0, 1.0, (3, 1, 0.5)),      # 4 / 1.5 = 2.67 -> 3
    (2, 1.0, 10.0, (1, 1, 10.0)),    # 2 / 11 -> 1
    (1, 1.0, 5.0, (1, 0, 5.0)),      # a single device: N_t = 0 (§7.9)
    (3, 1.0, 0.0, (3, 0, 0.0)),      # training free: every device samples
    (6, 0.25, 0.5, (2, 4, 2.0)),     # 6 / 3 = 2
])
def test_allocate_exact(n_g, t_s, t_t, expected):
    n_s, n_t, k = allocate(n_g, t_s, t_t)
    assert (n_s, n_t) == expected[:2]
    assert k == pytest.approx(expected[2], rel=0, abs=0)
    assert n_s == math.ceil(n_g / (k + 1) - 1e-9)
    assert n_s + n_t == n_g


@pytest.mark.parametrize("n_g, t_s, t_t, want", [
    (6, 0.1, 0.1, (3, 3)),   # N_g * T_s / (T_s + T_t) = 3.0000000000000004 in floats
    (7, 0.1, 0.6, (1, 6)),   # 1.0000000000000002
    (9, 0.1, 0.2, (3, 6)),   # 2.9999999999999996 (rounds down: the tolerance only forgives)
])
def test_allocate_float_noise_does_not_add_a_sampler(n_g, t_s, t_t, want):
    # inputs whose quotient, as allocate computes it, is an integer only up to rounding: an
    # exact ceiling would add a Sampler to the first two
    assert allocate(n_g, t_s, t_t)[:2] == want


def test_allocate_still_ceils_a_real_fraction():
    assert allocate(6, 0.1, 0.1 * (1 - 1e-6))[:2] == (4, 2)   # 3.0000015 -> 4


def test_allocate_on_measured_times():
    # times as a profiling epoch reports them: sums over batches divided by the batch count
    t_s = sum([0.011, 0.012, 0.013]) / 3  # 0.012
    t_t = sum([0.035, 0.037, 0.036]) / 3  # 0.036 -> K = 3
    assert allocate(8, t_s, t_t)[:2] == (2, 6)
    assert allocate(5, t_s, t_t)[:2] == (2, 3)  # 5 / 4 = 1.25 -> 2


@pytest.mark.parametrize("args, name", [
    ((0, 1.0, 1.0), "num_devices"), ((2.5, 1.0, 1.0), "num_devices"),
    ((2, 0.0, 1.0), "t_sample"), ((2, -1.0, 1.0), "t_sample"),
    ((2, float("nan"), 1.0), "t_sample"), ((2, 1.0, -0.1), "t_train"),
    ((2, 1.0, float("inf")), "t_train"),
])
def test_allocate_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        allocate(*args)


# ---------------------------------------------------------------------------- profit
@pytest.mark.parametrize("m_r, t_t, n_t, t_sb, expected", [
    (10, 2.0, 4, 3.0, 10 * 2.0 / 4 - 3.0),   # 2.0 > 0: wake the standby
    (1, 1.0, 4, 0.5, 1 * 1.0 / 4 - 0.5),     # -0.25: do not
    (2, 1.0, 2, 1.0, 0.0),                   # exactly 0: not > 0
    (0, 1.0, 3, 0.1, -0.1),                  # empty queue
    (5, 1.0, 0, 9.0, math.inf),              # no Trainer: always switch
    (0, 0.0, 0, 0.0, math.inf),
])
def test_profit_exact(m_r, t_t, n_t, t_sb, expected):
    assert profit(m_r, t_t, n_t, t_sb) == expected


def test_profit_negative_and_policy():
    assert profit(3, 0.1, 3, 0.2) == pytest.approx(-0.1)
    pol = StandbyPolicy(t_train=0.1, num_trainers=3, t_standby=0.2)
    assert not pol.should_fetch(3)
    assert pol.should_fetch(7)              # 0.7 / 3 - 0.2 = 0.033
    assert not pol.should_fetch(7, 0.3)     # measured T_t' replaces the estimate
    assert StandbyPolicy(1.0, 0, 5.0).should_fetch(0)  # N_t = 0: +inf


def test_a_standby_declines_at_zero_profit_and_takes_above_it():
    # FGNN §5.3: the standby is woken only when P > 0; P == 0 (it would finish together with
    # the normal Trainers) declines. Exact binary values: P is exactly 0 at M_r = 4.
    pol = StandbyPolicy(t_train=0.5, num_trainers=2, t_standby=1.0)
    assert profit(4, 0.5, 2, 1.0) == 0.0
    assert not pol.should_fetch(4)
    assert pol.should_fetch(5)                      # P = 0.25
    assert not pol.should_fetch(2, 0.5)             # measured T_t' = 0.5: P = 0 again
    assert pol.should_fetch(2, 0.25)


def test_trainer_seconds_is_extract_plus_train_per_batch():
    assert trainer_seconds(1.0, 3.0, 8) == 0.5
    assert trainer_seconds(0.0, 0.0, 0) == 0.0


@pytest.mark.parametrize("args, name", [
    ((-1, 1.0, 1, 1.0), "remaining"), ((1, -1.0, 1, 1.0), "t_train"),
    ((1, 1.0, -1, 1.0), "num_trainers"), ((1, 1.0, 1, float("nan")), "t_standby"),
])
def test_profit_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        profit(*args)


# ---------------------------------------------------------------------------- tasks
def test_epoch_batches_cover_train_idx_once_and_are_seeded():
    idx = torch.arange(10, 110)
    b = epoch_batches(idx, 32, seed=3, epoch=1)
    assert [len(x) for x in b] == [32, 32, 32, 4]
    assert torch.equal(torch.cat(b).sort().values, idx)
    assert all(torch.equal(x, y) for x, y in zip(b, epoch_batches(idx, 32, 3, 1)))
    assert not torch.equal(torch.cat(b), torch.cat(epoch_batches(idx, 32, 3, 2)))
    with pytest.raises(ValueError, match="batch_size"):
        epoch_batches(idx, 0, 0, 0)


def test_task_scheduler_dynamic_handout_and_faults():
    s = TaskScheduler(5)
    assert [s.next_task(0), s.next_task(1), s.next_task(0)] == [0, 1, 2]
    s.task_sampled(0)
    assert s.in_flight() == [1, 2] and s.in_flight(0) == [2]
    assert s.sampler_failed(0) == [2]       # back to the front
    assert s.next_task(1) == 2
    assert not s.sampler_finished(0)        # tasks still pending
    for sampler in (1, 1):
        s.task_sampled(s.next_task(sampler))
    s.task_sampled(1)
    s.task_sampled(2)
    assert s.pending == 0 and s.sampler_finished(0) and s.sampler_finished(1)
    s.extend([3])                           # a lost sample is handed out again
    assert s.next_task(0) == 3 and not s.sampler_finished(0)
    assert s.issued == 7
    with pytest.raises(ValueError, match="num_tasks"):
        TaskScheduler(-1)


def test_the_standby_and_the_allocation_take_the_same_t_t():
    """T_t is Extract + Train per mini-batch (§5.3) for both: the standby's profit leaves the
    evaluation seconds out, as the allocation does."""
    from types import SimpleNamespace

    from fgnn.runtime.epoch import EpochCoordinator

    recs = [SimpleNamespace(role="trainer", extract_s=0.25, train_s=0.5, eval_s=4.0),
            SimpleNamespace(role="trainer", extract_s=0.25, train_s=1.0, eval_s=4.0),
            SimpleNamespace(role="standby", extract_s=9.0, train_s=9.0, eval_s=0.0)]
    ep = SimpleNamespace(acc=SimpleNamespace(records=recs),
                         trainers=[SimpleNamespace(alive=True), SimpleNamespace(alive=False)])
    pol = EpochCoordinator._standby_policy(SimpleNamespace(warm_t_train=None), ep)
    assert pol.t_train == trainer_seconds(0.5, 1.5, 2) == 1.0
    assert pol.num_trainers == 1
