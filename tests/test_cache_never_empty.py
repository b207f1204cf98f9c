"""The default factored run caches rows (issue 39): on the 1 GiB of a logical device the
evaluation chunk the user did not set shrinks to leave the cache room (α > 0, hits after the
PreSC pre-sampling); a cache forced empty says which term took the budget."""

from __future__ import annotations


import pytest

from fgnn.cache.budget import plan_device_cache
from fgnn.cache.eval_bound import bounded_eval_ratio, chunk_for_ratio, empty_cache_reason
from fgnn.config import CacheConfig, JobConfig, RuntimeConfig, TrainConfig
from fgnn.data import load_dataset
from fgnn.recipes import resolve_recipe


def test_the_bound_leaves_the_cache_its_room():
    # 900 MiB excess against 1000 MiB free: half of it, as the cache wants more than 500
    r = bounded_eval_ratio(125.0, 900, 1000, 800)
    assert r == pytest.approx(1 + 124 * 500 / 900)
    # the cache wants only 32: everything else may go to the evaluation
    assert bounded_eval_ratio(125.0, 900, 1000, 32) == 125.0
    assert bounded_eval_ratio(125.0, 2000, 1000, 32) == pytest.approx(1 + 124 * 968 / 2000)
    # the training terms fill the budget: no chunk makes room, so the chunk stays
    assert bounded_eval_ratio(125.0, 900, -5, 32) == 125.0
    assert chunk_for_ratio(2.5, 66, 2) == 82 and chunk_for_ratio(0.5, 66, 2) == 33


def test_an_empty_plan_names_the_term_and_the_flag():
    plan = plan_device_cache(2 ** 30, {"step_peak": 10 << 20, "eval_chunk": 2 << 30},
                             num_nodes=100, row_bytes=4)
    why = empty_cache_reason(plan, "presc", None)
    assert why["term"] == "eval_chunk" and why["flag"] == "--eval-batch-size"
    assert "--device-memory" in why["line"] and "eval_chunk" in why["line"]
    assert empty_cache_reason(plan, "none", None) is None  # no cache asked for
    assert empty_cache_reason(plan_device_cache(2 ** 30, {}, num_nodes=100, row_bytes=4),
                              "presc", None) is None


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def rmat16():
    return load_dataset("rmat:scale=16")


def _run(dataset, devices: int, **cache):
    from fgnn.runtime.driver import Runtime

    cfg = resolve_recipe(JobConfig(dataset="rmat:scale=16",
                                   train=TrainConfig(epochs=2),
                                   runtime=RuntimeConfig(devices=devices),
                                   cache=CacheConfig(**cache)))
    lines: list[str] = []
    rt = Runtime(cfg, dataset)
    rt.timeline.announce = lines.append
    return rt.run(), lines


@pytest.mark.parametrize("devices", [3, 4])
def test_the_default_factored_run_caches_rows(ray_cluster, rmat16, devices):
    result, lines = _run(rmat16, devices)
    a = result.allocation
    assert a["alpha"] > 0 and a["alpha_resident"] > 0, a["cache_plans"]
    assert a["cache_empty"] is None
    # after the pre-sampling epoch the Trainers read rows from their caches
    assert result.epochs[-1].hit_rate > 0
    assert any("evaluation chunks of" in line for line in lines)


def test_a_forced_empty_cache_says_why(ray_cluster, rmat16):
    result, lines = _run(rmat16, 3, device_memory_gib=0.01)
    a = result.allocation
    assert a["alpha"] == 0 and a["cache_empty"]["term"] in a["cache_plans"]["full"]["resident"]
    said = [line for line in lines if "feature cache empty" in line]
    assert len(said) == 1 and "--device-memory" in said[0]
    assert not any("evaluation chunks of" in line for line in lines)  # no chunk makes room
