"""The task interface (fgnn.tasks): one table picks the task; each task draws its samples,
names its loss and scores; a user adds a task from the Python API and the runtime runs it.

* the table: node, link and recsys build the right task for homogeneous and typed datasets,
  an unknown name is refused in one line naming the registered ones;
* every built-in task satisfies the protocol (the executors call nothing else);
* a task registered with :func:`fgnn.tasks.register_task` trains through the factored runtime,
  its own loss on the Trainers (the epoch's reported loss is that loss, not cross-entropy).
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from fgnn.config import JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, TrainConfig
from fgnn.data.spec import load_dataset
from fgnn.tasks.link_typed import TypedLinkTask
from fgnn.tasks.link import LinkTask
from fgnn.sampling.task_sampling import SamplingSpec, TaskSampling
from fgnn.tasks import (TASKS, NodeStep, NodeTask, StepRule, Task, build_task, register_task)
from fgnn.tasks.recsys import RecsysTask

TINY = "rmat:scale=7,edge_factor=6,feat_dim=8,num_classes=2,train_frac=0.5,seed=3"
TYPED = "hetero:papers=300,authors=100,fields=8,seed=0"
#: what the custom task adds to cross-entropy: visible in the epochs' reported loss
OFFSET = 100.0


@pytest.mark.parametrize("spec, task, want", [
    (TINY, "node", NodeTask), (TINY, "link", LinkTask), (TYPED, "node", NodeTask),
    (TYPED, "link", TypedLinkTask), ("useritem:users_log2=6,items_log2=5,interactions_log2=9", "recsys",
                                     RecsysTask)])
def test_the_table_builds_each_task_on_each_graph_kind(spec, task, want):
    fields = {"model": ModelConfig(name="pinsage"),
              "sampler": SamplerConfig(kind="random_walk")} if task == "recsys" else {}
    cfg = JobConfig(dataset=spec, task=task, **fields)
    built = build_task(cfg, load_dataset(spec))
    assert type(built) is want and built.name == task
    assert isinstance(built, Task) and isinstance(built.step, StepRule)
    assert isinstance(built.sampling(), SamplingSpec)


def test_an_unregistered_task_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match="JobConfig.task: must be one of node, link, recsys.*'ranking'"):
        JobConfig(task="ranking")
    with pytest.raises(ValueError, match="new non-empty string"):
        register_task("node", NodeTask.build)


def test_node_sampling_draws_the_samplers_sample_around_the_items():
    from fgnn.sampling import KHop

    ds = load_dataset(TINY)
    spec = build_task(JobConfig(dataset=TINY), ds).sampling()
    sampling = spec.build(KHop([3]), torch.device("cpu"))
    assert isinstance(sampling, TaskSampling)
    items = ds.train_idx[:5]
    a = sampling.train_sample(ds.graph, items, torch.Generator().manual_seed(1))
    b = KHop([3]).sample(ds.graph, items, torch.Generator().manual_seed(1))
    assert torch.equal(a.seeds, items) and torch.equal(a.input_nodes, b.input_nodes)


class OffsetStep(NodeStep):
    """Cross-entropy plus a constant: trains like node classification, reports its own loss."""

    def loss(self, model, out, sample, labels):  # noqa: D102
        return F.cross_entropy(out, labels) + OFFSET


class OffsetTask(NodeTask):
    """Node classification with :class:`OffsetStep` on the Trainers."""

    def __init__(self) -> None:
        super().__init__(name="offset-node", step=OffsetStep())


def test_a_registered_task_trains_through_the_runtime_with_its_own_loss(ray_cluster):
    import ray.cloudpickle

    from fgnn.runtime.driver import Runtime

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors rebuild it
    if "offset-node" not in TASKS:
        register_task("offset-node", lambda config, dataset, model: OffsetTask())
    cfg = JobConfig(dataset=TINY, task="offset-node", sampler=SamplerConfig(fanouts=(4, 3)),
                    model=ModelConfig(name="sage", hidden=8),
                    train=TrainConfig(epochs=2, batch_size=16, lr=0.01),
                    runtime=RuntimeConfig(devices=2))
    result = Runtime(cfg, load_dataset(TINY)).run()
    assert [e.epoch for e in result.epochs] == [0, 1]
    assert all(OFFSET < e.loss < OFFSET + 10 for e in result.epochs), \
        [e.loss for e in result.epochs]                     # the task's loss, on the Trainers
    assert set(result.final) == {"train_acc", "val_acc", "test_acc"}
