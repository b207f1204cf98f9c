"""Cache ratio from a (simulated) device budget: FGNN §6.1, PaGraph's peak-of-one-step method."""

from __future__ import annotations

import pytest
import torch

from fgnn.cache import (TensorAllocationMeter, choose_cache_ratio, measure_step_peak,
                        num_cached_rows, resident_bytes)

N, F = 10_000, 64
ROW = F * 4


def make_step(batch: int = 512, hidden: int = 128):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(F, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 8))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, F)
    y = torch.randint(0, 8, (batch,))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return model, opt, x, step


def test_meter_sees_transient_allocations():
    def step():
        a = torch.empty(1000, 1000)  # 4 MB, freed before b exists
        del a
        b = torch.empty(500, 1000)  # noqa: F841
    assert measure_step_peak(step) == 4_000_000


def test_meter_counts_activations_grads_and_optimizer_state():
    model, opt, x, step = make_step()
    params = resident_bytes(model)
    meter = TensorAllocationMeter(resident=[model, opt, x])
    peak = meter.measure(step)
    assert meter.resident_peak == params + x.numel() * 4
    # First step: hidden activations (512 x 128 floats, kept for backward) are live at the peak,
    # and grads + Adam's two moments (3 x params) are allocated during the step.
    assert meter.step_peak >= 512 * 128 * 4 + 3 * params
    assert peak == meter.resident_peak + meter.step_peak
    # Later steps: Adam's moments are resident and updated in place, zero_grad() frees the old
    # grads before backward allocates new ones; the steady-state peak repeats exactly.
    peaks = [TensorAllocationMeter(resident=[model, opt, x]).measure(step) for _ in range(3)]
    assert peaks[0] == peaks[1] == peaks[2]
    assert peaks[0] == pytest.approx(peak, rel=0.25)


@pytest.mark.parametrize("extra_rows", [0, 1234, 10 * N])
def test_alpha_leaves_peak_and_margin_free(extra_rows):
    model, opt, x, step = make_step()
    step()  # warm up: the optimizer state exists from now on
    peak = TensorAllocationMeter(resident=[model, opt, x]).measure(step)
    margin, graph = 100_000, 50_000
    budget = peak + margin + graph + extra_rows * ROW + 17  # a simulated device budget
    res = choose_cache_ratio(step, budget_bytes=budget, num_nodes=N, row_bytes=ROW,
                             margin_bytes=margin, graph_bytes=graph,
                             resident=[model, opt, x])
    assert 0.0 <= res.alpha <= 1.0
    assert res.num_cached == num_cached_rows(res.alpha, N) == min(N, extra_rows)
    # The cache leaves the measured peak + margin (+ graph) free ...
    assert res.peak_bytes + margin + graph + res.cache_bytes <= budget
    assert res.free_bytes >= 0
    # ... and is as large as that allows (one more row would not fit), unless it is all of V.
    if res.alpha < 1.0:
        assert res.peak_bytes + margin + graph + res.cache_bytes + ROW > budget


def test_budget_smaller_than_one_step_raises():
    model, opt, x, step = make_step()
    with pytest.raises(ValueError, match="smaller than one training step"):
        choose_cache_ratio(step, budget_bytes=1000, num_nodes=N, row_bytes=ROW,
                           resident=[model, opt, x])


def test_bad_arguments():
    _, _, _, step = make_step()
    with pytest.raises(ValueError, match="budget_bytes is required"):
        choose_cache_ratio(step, num_nodes=N, row_bytes=ROW)
    with pytest.raises(ValueError, match="row_bytes"):
        choose_cache_ratio(step, budget_bytes=10**9, num_nodes=N, row_bytes=0)
    with pytest.raises(ValueError, match="margin_bytes"):
        choose_cache_ratio(step, budget_bytes=10**9, num_nodes=N, row_bytes=ROW,
                           margin_bytes=-1)
    with pytest.raises(ValueError, match="step must be callable"):
        measure_step_peak(42)


def test_alpha_from_peak_matches_choose_cache_ratio_without_running_the_step():
    model, opt, x, step = make_step()
    calls = []

    def counted():
        calls.append(1)
        step()

    budget = 2_500_000
    measured = choose_cache_ratio(counted, budget_bytes=budget, num_nodes=N, row_bytes=ROW)
    assert len(calls) == 1
    from fgnn.cache.budget import alpha_from_peak

    again = choose_cache_ratio(counted, budget_bytes=budget, num_nodes=N, row_bytes=ROW,
                               peak_bytes=measured.peak_bytes)
    derived = alpha_from_peak(measured.peak_bytes, budget_bytes=budget, num_nodes=N,
                              row_bytes=ROW)
    assert len(calls) == 1                                   # the step ran once in all
    assert again == derived == measured
    with_graph = alpha_from_peak(measured.peak_bytes, budget_bytes=budget, num_nodes=N,
                                 row_bytes=ROW, graph_bytes=500_000)
    assert with_graph.num_cached == min(N, (budget - measured.peak_bytes - 500_000) // ROW)
    assert with_graph.alpha < measured.alpha and with_graph.peak_bytes == measured.peak_bytes
    with pytest.raises(ValueError, match="step"):
        choose_cache_ratio(budget_bytes=budget, num_nodes=N, row_bytes=ROW)
    with pytest.raises(ValueError, match="peak_bytes"):
        alpha_from_peak(-1, budget_bytes=budget, num_nodes=N, row_bytes=ROW)


# ---------------------------------------------------------------------------- device plans
def test_device_plan_is_the_budget_less_every_item_and_the_margin():
    from fgnn.cache.budget import SIZING_MARGIN_MIN_BYTES, plan_device_cache

    items = {"model": 1_000, "step_peak": 50_000, "lookup": 9 * 1_000, "graph": 20_000}
    plan = plan_device_cache(200_000, items, num_nodes=1_000, row_bytes=100, margin_bytes=10_000)
    # (200000 - 80000 - 10000) // 100 = 1100 rows, capped at N = 1000
    assert plan.num_cached == 1_000 and plan.alpha == 1.0
    plan = plan_device_cache(150_000, items, num_nodes=1_000, row_bytes=100, margin_bytes=10_000)
    assert plan.num_cached == 600 and plan.alpha == 0.6          # (150000 - 90000) // 100
    assert plan.free_bytes == 0 and plan.cache_bytes == 60_000
    assert plan_device_cache(150_000, items, num_nodes=1_000, row_bytes=100, margin_bytes=10_000,
                             max_alpha=0.25).num_cached == 250
    # the default margin: 5% of the budget, at least 32 MiB
    big = plan_device_cache(2 ** 30, {}, num_nodes=10, row_bytes=1)
    assert big.margin_bytes == int(0.05 * 2 ** 30)
    small = plan_device_cache(100 << 20, {}, num_nodes=10, row_bytes=1)
    assert small.margin_bytes == SIZING_MARGIN_MIN_BYTES == 32 << 20
    # a budget that cannot hold the items caches nothing and says by how much it is over
    over = plan_device_cache(50_000, items, num_nodes=1_000, row_bytes=100, margin_bytes=0)
    assert over.num_cached == 0 and over.free_bytes == -30_000
    with pytest.raises(ValueError, match="resident bytes must be >= 0"):
        plan_device_cache(10, {"graph": -1}, num_nodes=1, row_bytes=1)
