"""RuntimeMetrics: a no-op outside Ray, exporting through ray.util.metrics inside an actor."""

from __future__ import annotations

from pathlib import Path

import pytest

from fgnn.monitor.metrics import STAGES, RuntimeMetrics


def _exercise(m: RuntimeMetrics) -> dict:
    for stage in STAGES:
        m.stage_seconds(stage, 0.01)
    m.stage_seconds("train", 0.0)  # zero is ignored, not an error (Ray counters need > 0)
    m.queue_depth(4)
    m.cache(hits=30, misses=10, bytes_host_to_device=10 * 16 * 4)
    m.cache(hits=0, misses=0, bytes_host_to_device=0)
    for _ in range(3):
        m.batch_done(0.02)
    return m.snapshot()


def _check(snap: dict) -> None:
    assert snap["batches"] == 3
    assert snap["batch_seconds"] == pytest.approx(0.06)
    assert snap["stage_seconds"] == {s: pytest.approx(0.01) for s in STAGES}
    assert snap["queue_depth"] == 4
    assert (snap["hits"], snap["misses"]) == (30, 10)
    assert snap["hit_rate"] == pytest.approx(0.75)
    assert snap["bytes_host_to_device"] == 640


def test_noop_outside_ray():
    import ray
    if ray.is_initialized():
        pytest.skip("another test left Ray running")
    m = RuntimeMetrics("trainer", "cpu:0")
    assert not m.exporting
    _check(_exercise(m))
    assert repr(m) == "RuntimeMetrics(role='trainer', device='cpu:0')"


def test_bad_stage_and_role():
    m = RuntimeMetrics("sampler", "cpu:0")
    with pytest.raises(ValueError, match="stage='gather'"):
        m.stage_seconds("gather", 1.0)
    with pytest.raises(ValueError, match="role=''"):
        RuntimeMetrics("", "cpu:0")


def test_hit_rate_before_lookups():
    assert RuntimeMetrics("trainer", "cpu:0").hit_rate == 0.0


@pytest.mark.own_ray  # a Ray whose workers see tests/ on their path
def test_exports_inside_actor():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        # Workers import this module for ``_exercise``: put tests/ on their path.
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}})
    try:
        @ray.remote(num_cpus=0)
        class Probe:
            def run(self):
                m = RuntimeMetrics("trainer", "logical:1")
                snap = _exercise(m)
                return m.exporting, snap

        exporting, snap = ray.get(Probe.remote().run.remote())
        assert exporting
        _check(snap)
    finally:
        if started:
            ray.shutdown()
