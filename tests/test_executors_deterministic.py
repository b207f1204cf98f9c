"""``--deterministic`` (issue 18, defect 11): CUDA's ``index_add_`` adds in a varying order, so
a GPU run does not repeat exactly with its seed. With the flag, every executor process turns on
torch's deterministic algorithms (which include a deterministic CUDA ``index_add``) and cuBLAS's
fixed workspace; without it nothing changes. Checked on the executors' own constructors with
``torch.use_deterministic_algorithms`` recorded (a CPU has no nondeterministic kernel to show).
Before the flag, the executors took no such argument and the CLI had no flag: these tests fail.
"""

from __future__ import annotations

import os

import pytest
import torch

from fgnn.cli import build_parser, config_from_args
from fgnn.executors import common as _common


@pytest.fixture
def recorded(monkeypatch):
    calls: list[tuple[bool, bool]] = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms",
                        lambda mode, *, warn_only=False: calls.append((mode, warn_only)))
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    return calls


def _sampler(deterministic: bool):
    from conftest import random_graph
    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.sampling import KHop

    return SamplerExecutor(random_graph(30, 100), KHop([2]), torch.arange(8), 4, 0,
                           deterministic=deterministic)


def _trainer(deterministic: bool):
    from fgnn.executors.trainer import TrainerExecutor
    from fgnn.models import GraphSAGE

    return TrainerExecutor(torch.randn(20, 4), torch.zeros(20, dtype=torch.long),
                           GraphSAGE(4, 2, num_layers=1, hidden=4), None, 0, None, None,
                           deterministic=deterministic)


@pytest.mark.parametrize("make", [_sampler, _trainer], ids=["sampler", "trainer"])
def test_executors_turn_on_deterministic_algorithms_only_when_asked(make, recorded):
    make(False)
    assert recorded == [] and "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    make(True)
    assert recorded == [(True, True)]  # warn_only: an op without a kernel warns, never stops
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == _common.CUBLAS_DETERMINISTIC


def test_the_flag_reaches_the_config():
    parser = build_parser("launch.py")
    assert config_from_args(parser.parse_args([])).train.deterministic is False
    assert config_from_args(parser.parse_args(["--deterministic"])).train.deterministic is True


@pytest.mark.parametrize("flag", [False, True])
def test_the_runtime_passes_the_flag_to_every_executor(flag, monkeypatch):
    """The WorkerGroup builds each Sampler and Trainer actor with ``train.deterministic``
    (``stash_args`` recorded: the arguments the actor's constructor gets)."""
    from types import SimpleNamespace

    from fgnn.config import JobConfig, TrainConfig
    from fgnn.runtime import workers as _workers
    from fgnn.executors.fault_injection import FaultSpec
    from fgnn.models import GraphSAGE
    from fgnn.sampling import KHop

    built: dict[str, dict] = {}
    monkeypatch.setattr(_workers, "stash_args",
                        lambda store, name, *args, **kwargs: built.setdefault(name, kwargs))
    spec = _workers.ExecutorSpec(JobConfig(train=TrainConfig(deterministic=flag)), KHop([2]),
                                 GraphSAGE(4, 2, num_layers=1, hidden=4), 1, False,
                                 FaultSpec())
    refs = {k: None for k in ("graph", "train_idx", "eval_idx", "features", "labels")}
    services = SimpleNamespace(pg=None, gpus_per_device=1.0, refs=refs, queue=None, ps=None,
                               one_node=True, shared_gpu=False, torch_device="cpu",
                               exchange=None)
    group = _workers.WorkerGroup(spec, services, watchdog=None)
    group._new_sampler(0)
    group._new_trainer(1, 0)
    group._new_trainer(0, 1, role="standby")
    assert {n: kw["deterministic"] for n, kw in built.items()} == {
        "fgnn-sampler-0": flag, "fgnn-trainer-1": flag, "fgnn-standby-0": flag}
