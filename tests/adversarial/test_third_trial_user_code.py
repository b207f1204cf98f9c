"""The third hostile trial (issue 40), user code: a custom sampler or model that breaks the
contract fgnn relies on (seeds leading ``input_nodes``, ids in range, blocks in bounds,
``(B, num_classes)`` float logits, parameters to train) is refused with one
:class:`~fgnn.tasks.contracts.UserCodeError` line naming its class and what was expected,
instead of training silently wrong or failing deep inside torch.
"""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import fgnn
from fgnn import Block, Sample
from fgnn.config import JobConfig, RuntimeConfig, SamplerConfig, TrainConfig
from fgnn.data import rmat_dataset
from fgnn.models import GCN
from fgnn.sampling import KHop, build_sampler
from fgnn.sampling.locality import LocalityAwareKHop
from fgnn.tasks.contracts import (UserCodeError, check_logits, check_sample,
                                  check_sample_layout)


@pytest.fixture(scope="module")
def data():
    return rmat_dataset(9, 8, feat_dim=8, num_classes=5, train_frac=0.4, seed=3)


class Edited(KHop):
    """A k-hop sampler whose samples ``edit`` changes: the user's sampler of these tests."""

    def __init__(self, edit):
        super().__init__([5, 5])
        self.edit = edit

    def sample(self, graph, seeds, generator=None):
        return self.edit(super().sample(graph, seeds, generator))


class Logits(nn.Module):
    """A GCN whose logits ``edit`` changes: the user's model of these tests."""

    def __init__(self, data, edit):
        super().__init__()
        self.gcn = GCN(data.feat_dim, data.num_classes, num_layers=2, hidden=16)
        self.edit = edit

    def forward(self, blocks, x):
        return self.edit(self.gcn(blocks, x))


class Constant(nn.Module):
    """A model without parameters."""

    def __init__(self, num_classes):
        super().__init__()
        self.num_classes = num_classes

    def forward(self, blocks, x):
        return torch.zeros(blocks[-1].num_dst, self.num_classes)


def _input_id(value):
    def edit(s):
        nodes = s.input_nodes.clone()
        nodes[-1] = value
        return Sample(s.seeds, s.blocks, nodes)
    return edit


def _src_past_bound(s):
    b = s.blocks[0]
    src = b.src.clone()
    src[0] = b.num_src + 5
    return Sample(s.seeds, [Block(src, b.dst, b.num_src, b.num_dst)] + s.blocks[1:],
                  s.input_nodes)


def _empty(s):
    none = torch.zeros(0, dtype=torch.long)
    return Sample(s.seeds[:0], [Block(none, none, 0, 0)] * 2, s.input_nodes[:0])


SAMPLERS = {
    "flipped seeds": (lambda s: Sample(seeds=s.seeds.flip(0), blocks=s.blocks,
                                       input_nodes=s.input_nodes),
                      r"Edited.sample returned input_nodes that do not begin with its seeds "
                      r"\(position 0: .*expected input_nodes\[:B\] == seeds"),
    "None": (lambda s: None, r"Edited.sample returned NoneType, expected a fgnn.Sample"),
    "id past N": (_input_id(10 ** 6), r"Edited.sample returned input_nodes holding 1000000; "
                                      r"expected vertex ids in \[0, 512\)"),
    "negative id": (_input_id(-3), r"Edited.sample returned input_nodes holding -3"),
    "src past bound": (_src_past_bound, r"Edited.sample: blocks\[0\].src holds local id \d+; "
                                        r"expected ids in \[0, num_src=\d+\)"),
    "empty sample": (_empty, r"Edited.sample returned a Sample whose seeds are \(0,\) for the "
                             r"32 seeds it was given"),
}

MODELS = {
    "a column too many": (lambda y: torch.cat([y, y[:, :1]], 1),
                          r"Logits.forward returned shape \(32, 6\); expected \(32, 5\) "
                          r"floating-point logits"),
    "1-D": (lambda y: y[:, 0], r"Logits.forward returned shape \(32,\); expected \(32, 5\)"),
    "integers": (lambda y: y.long(), r"Logits.forward returned int64 logits; expected"),
    "a row short": (lambda y: y[:-1], r"Logits.forward returned shape \(31, 5\)"),
    "a tuple": (lambda y: (y,), r"Logits.forward returned tuple; expected"),
}


def _job(data, sampler=None, model=None):
    cfg = JobConfig(dataset="api", sampler=SamplerConfig(fanouts=(5, 5)), recipe="off",
                    runtime=RuntimeConfig(devices=1),
                    train=TrainConfig(epochs=1, batch_size=32))
    return fgnn.Job(cfg, sampler=sampler, model=model, dataset=data, progress=False,
                    out=io.StringIO())


@pytest.mark.parametrize("case", list(SAMPLERS))
def test_a_sampler_that_breaks_the_contract_stops_the_job_naming_its_class(data, case):
    edit, match = SAMPLERS[case]
    with pytest.raises(UserCodeError, match=match) as e:
        _job(data, sampler=Edited(edit)).run()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case", list(MODELS))
def test_a_model_output_of_the_wrong_shape_or_type_stops_the_job(data, case):
    edit, match = MODELS[case]
    with pytest.raises(UserCodeError, match=match) as e:
        _job(data, model=Logits(data, edit)).run()
    assert "\n" not in str(e.value)


def test_a_model_without_parameters_is_refused_when_the_job_is_built(data):
    with pytest.raises(UserCodeError, match=r"^Constant has no trainable parameters; expected"):
        _job(data, model=Constant(data.num_classes))
    assert issubclass(UserCodeError, ValueError) and issubclass(UserCodeError, TypeError)


def test_a_faithful_custom_sampler_and_model_still_train(data):
    result = _job(data, sampler=Edited(lambda s: s),
                  model=Logits(data, lambda y: y)).run()
    assert 0.0 <= result.final["test_acc"] <= 1.0


@pytest.mark.parametrize("sampler", [
    KHop([5, 3]), KHop([5, 3], frontier="new"), KHop([4, 4], weighted=True),
    build_sampler(SamplerConfig(kind="random_walk")),
    LocalityAwareKHop([5, 3]),
], ids=["khop", "khop-new", "weighted", "random_walk", "locality"])
def test_every_built_in_sampler_keeps_the_contract(data, sampler):
    seeds = data.train_idx[:40]
    sample = sampler.sample(data.graph, seeds, torch.Generator().manual_seed(0))
    check_sample(sampler, sample, seeds)
    check_sample_layout(sampler, sample, data.num_nodes)


def test_the_logit_check_takes_any_width_without_num_classes():
    check_logits(nn.Linear(1, 1), torch.zeros(4, 9), 4, None)
    with pytest.raises(UserCodeError, match=r"^Linear.forward returned shape \(3, 9\); "
                                            r"expected \(4, num_classes\)"):
        check_logits(nn.Linear(1, 1), torch.zeros(3, 9), 4, None)
