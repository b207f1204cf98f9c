"""The job's fault injection in one spec: each Trainer's hooks, and what the spec refuses."""

from __future__ import annotations

import pickle

import pytest

from fgnn.executors.fault_injection import NO_FAULTS, FaultSpec, TrainerFaults


def test_each_trainer_gets_its_own_hooks():
    spec = FaultSpec(slow_trainers={0: 0.3, 2: 1}, crash_after_apply={1, 2})
    assert spec.for_trainer(0) == TrainerFaults(delay_s=0.3, crash_after_apply=False)
    assert spec.for_trainer(1) == TrainerFaults(delay_s=0.0, crash_after_apply=True)
    assert spec.for_trainer(2) == TrainerFaults(delay_s=1.0, crash_after_apply=True)
    assert spec.for_trainer(3) == NO_FAULTS
    # a standby is slowed like a Trainer of its index but never crashes
    assert spec.for_trainer(2, "standby") == TrainerFaults(delay_s=1.0, crash_after_apply=False)
    assert FaultSpec().for_trainer(0) == NO_FAULTS


def test_the_spec_is_frozen_and_its_own_copy():
    slow = {0: 0.5}
    spec = FaultSpec(slow_trainers=slow, crash_after_apply=[1])
    slow[0] = 9.0  # the caller's dict changes: the spec does not
    assert spec.for_trainer(0).delay_s == 0.5
    assert spec.crash_after_apply == frozenset({1})
    with pytest.raises(AttributeError):
        spec.crash_after_apply = frozenset()  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.slow_trainers[1] = 1.0  # type: ignore[index]
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert pickle.loads(pickle.dumps(spec.for_trainer(0))) == spec.for_trainer(0)


@pytest.mark.parametrize("kwargs,error,quoted", [
    ({"slow_trainers": {0: -1.0}}, ValueError, "slow_trainers[0]"),
    ({"slow_trainers": {0: float("inf")}}, ValueError, "inf"),
    ({"slow_trainers": {0: "1"}}, TypeError, "'1'"),
    ({"slow_trainers": {"0": 1.0}}, TypeError, "'0'"),
    ({"slow_trainers": {-1: 1.0}}, ValueError, "-1"),
    ({"slow_trainers": [(0, 1.0)]}, TypeError, "[(0, 1.0)]"),
    ({"crash_after_apply": {-2}}, ValueError, "-2"),
    ({"crash_after_apply": {True}}, TypeError, "True"),
    ({"crash_after_apply": 3}, TypeError, "3"),
    ({"crash_after_apply": "01"}, TypeError, "'01'"),
])
def test_bad_hooks_are_refused_quoting_the_value(kwargs, error, quoted):
    with pytest.raises(error, match="slow_trainers|crash_after_apply") as info:
        FaultSpec(**kwargs)
    assert quoted in str(info.value)


def test_trainer_hooks_refuse_bad_values():
    with pytest.raises(ValueError, match="delay_s.*-0.5"):
        TrainerFaults(delay_s=-0.5)
    with pytest.raises(TypeError, match="crash_after_apply.*1"):
        TrainerFaults(crash_after_apply=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="role.*'sampler'"):
        FaultSpec().for_trainer(0, "sampler")


def test_the_trainer_takes_only_the_typed_hooks():
    torch = pytest.importorskip("torch")
    from fgnn.executors.trainer import TrainerExecutor
    from fgnn.models import GraphSAGE

    def trainer(**kw):
        return TrainerExecutor(torch.randn(20, 4), torch.zeros(20, dtype=torch.long),
                               GraphSAGE(4, 2, num_layers=1, hidden=4), None, 0, None, None, **kw)

    assert trainer().faults == NO_FAULTS
    slow = TrainerFaults(delay_s=0.25)
    assert trainer(faults=slow).faults is slow
    with pytest.raises(TypeError, match="faults must be a TrainerFaults"):
        trainer(faults={"delay_s": 0.25})
    with pytest.raises(TypeError):
        trainer(delay_s=0.25)  # the old keyword is gone


def test_the_worker_group_hands_each_trainer_its_hooks(monkeypatch):
    """The layout's Trainer index picks the hooks (``stash_args`` recorded: the arguments the
    actor's constructor gets); a standby of a crashing index does not crash."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from fgnn.config import JobConfig
    from fgnn.runtime import workers as _workers
    from fgnn.models import GraphSAGE
    from fgnn.sampling import KHop

    built: dict[str, dict] = {}
    monkeypatch.setattr(_workers, "stash_args",
                        lambda store, name, *args, **kwargs: built.setdefault(name, kwargs))
    faults = FaultSpec(slow_trainers={0: 0.5, 1: 0.25}, crash_after_apply={0, 1})
    spec = _workers.ExecutorSpec(JobConfig(), KHop([2]), GraphSAGE(4, 2, num_layers=1, hidden=4),
                                 1, False, faults)
    refs = {k: None for k in ("graph", "train_idx", "eval_idx", "features", "labels")}
    services = SimpleNamespace(pg=None, gpus_per_device=1.0, refs=refs, queue=None, ps=None,
                               one_node=True, shared_gpu=False, torch_device="cpu",
                               exchange=None)
    group = _workers.WorkerGroup(spec, services, watchdog=None)
    group._new_trainer(1, 0)
    group._new_trainer(2, 2)
    group._new_trainer(0, 1, role="standby")
    assert {n: kw["faults"] for n, kw in built.items()} == {
        "fgnn-trainer-1": TrainerFaults(0.5, True), "fgnn-trainer-2": NO_FAULTS,
        "fgnn-standby-0": TrainerFaults(0.25, False)}


def test_the_oom_hook_is_a_trainers_own_and_pickles():
    import pickle

    from fgnn.executors.host import uses_ray
    from fgnn.config import RuntimeConfig

    spec = FaultSpec(oom_after_apply={1})
    assert spec.for_trainer(1) == TrainerFaults(oom_after_apply=True)
    assert spec.for_trainer(1, "standby") == NO_FAULTS and spec.for_trainer(0) == NO_FAULTS
    assert pickle.loads(pickle.dumps(spec)).oom_after_apply == frozenset({1})
    assert spec.ends_a_process and uses_ray(RuntimeConfig(), spec)  # Ray restarts it
    with pytest.raises(TypeError, match="oom_after_apply must be a set of Trainer indices"):
        FaultSpec(oom_after_apply=1)


def test_exhausting_memory_stops_when_the_host_runs_low(tmp_path):
    """Outside a memory group the hook must not take the machine down: with little
    ``MemAvailable`` it exits at once (status 1), allocating nothing."""
    import subprocess
    import sys

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000 kB\nMemAvailable: 1000 kB\n")
    code = ("from fgnn.executors.fault_injection import exhaust_memory; "
            f"exhaust_memory({str(meminfo)!r})")
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], timeout=60, cwd=repo,
                         env={**__import__("os").environ, "PYTHONPATH": repo})
    assert out.returncode == 1
