"""In-process actors pass values uncopied, and no executor lets that alias a value.

A one-device job runs its executors as in-process actors (fgnn/executors/inline.py), whose
calls hand over arguments and results as they are, where Ray would serialise a copy. That is
right only while neither side changes a value the other still holds, so these tests pin, through
in-process actors:

* a call hands a tensor over and back without a copy (the per-step gradient and weights);
* the parameter server never changes weights it handed out, keeps its own copy of a resumed
  optimizer state, and returns state snapshots that later steps leave alone;
* a gradient the Trainer changes after its push does not change the step;
* each executor is built with a sampler of its own, not the driver's;
* in-process executors fetch their constructor arguments from the store, as Ray actors do.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterator

import pytest
import torch
from torch import nn

from fgnn.executors.actors import QueueService, make_actor, stash_args, wait_stashed
from fgnn.executors.inline import InlineActor, get, put
from fgnn.exchange.ps import ParameterServer


class _Keeper:
    """Keeps what it is given; hands it back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.built = (args, kwargs)
        self.kept: Any = None

    def keep(self, value: Any) -> Any:
        self.kept = value
        return value

    def held(self) -> Any:
        return self.kept

    def constructed(self) -> tuple:
        return self.built


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


@pytest.fixture
def actors() -> Iterator[list[InlineActor]]:
    """Actors a test starts (stopped after it); the torch threads the server sets, restored."""
    started: list[InlineActor] = []
    threads = torch.get_num_threads()
    yield started
    for a in started:
        a.kill()
    torch.set_num_threads(threads)


def _server(actors: list[InlineActor], optimizer_state: Any = None) -> InlineActor:
    ps = InlineActor(ParameterServer, "fgnn-ps", _model(), 0.1, 0.0, optimizer_state)
    actors.append(ps)
    return ps


def _push(ps: InlineActor, epoch: int, task: int, grad: torch.Tensor) -> Any:
    """Claim a slot and push ``grad`` on it; the server's reply."""
    assert get(ps.claim.remote("t", None)) is not None
    return get(ps.step.remote(epoch, task, grad, "t"))


def test_a_call_hands_a_tensor_over_and_back_uncopied(actors):
    keeper = InlineActor(_Keeper, "keeper")
    actors.append(keeper)
    t = torch.arange(4.0)
    assert get(keeper.keep.remote(t)) is t
    assert get(keeper.held.remote()) is t


def test_weights_handed_out_do_not_change_with_later_steps(actors):
    ps = _server(actors)
    get(ps.begin_epoch.remote(0, 2, 1))
    version, weights = get(ps.weights.remote())
    before = weights.clone()
    assert _push(ps, 0, 0, torch.ones_like(weights)).applied
    new_version, new_weights = get(ps.weights.remote())
    assert new_version == version + 1 and not torch.equal(new_weights, before)
    assert torch.equal(weights, before)  # the caller's weights are still the old step's


def test_a_state_snapshot_is_left_alone_by_later_steps(actors):
    ps = _server(actors)
    get(ps.begin_epoch.remote(0, 2, 1))
    n = get(ps.weights.remote())[1].numel()
    _push(ps, 0, 0, torch.ones(n))  # Adam has state from here on
    state = get(ps.state.remote())
    moments = {k: v.clone() for k, v in state["optimizer"]["state"][0].items()}
    _push(ps, 0, 1, torch.full((n,), -3.0))
    assert state["version"] == 1
    for k, v in state["optimizer"]["state"][0].items():
        assert torch.equal(v, moments[k]), k


def test_the_server_keeps_its_own_copy_of_a_resumed_optimizer_state(actors):
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    resumed = opt.state_dict()
    moments = {k: v.clone() for k, v in resumed["state"][0].items()}
    ps = _server(actors, resumed)
    get(ps.begin_epoch.remote(0, 1, 1))
    n = get(ps.weights.remote())[1].numel()
    _push(ps, 0, 0, torch.ones(n))
    for k, v in resumed["state"][0].items():
        assert torch.equal(v, moments[k]), k


def test_a_gradient_changed_after_its_push_does_not_change_the_step(actors):
    """Two tasks per step: the first push's gradient is changed before the step is taken."""
    ref, ps = _server(actors), _server(actors)
    for server in (ref, ps):
        get(server.begin_epoch.remote(0, 2, 2))
    n = get(ps.weights.remote())[1].numel()
    g0, g1 = torch.linspace(-1, 1, n), torch.linspace(2, 0, n)
    for server in (ref, ps):
        assert get(server.claim.remote("t", None)) is not None
        assert get(server.claim.remote("t", None)) is not None
    get(ref.step.remote(0, 0, g0.clone(), "t"))
    get(ps.step.remote(0, 0, g0, "t"))
    g0.fill_(100.0)  # the caller reuses its buffer
    get(ref.step.remote(0, 1, g1, "t"))
    get(ps.step.remote(0, 1, g1, "t"))
    (v_ref, w_ref), (v, w) = get(ref.weights.remote()), get(ps.weights.remote())
    assert v == v_ref == 1 and torch.equal(w, w_ref)


def test_each_executor_gets_a_sampler_of_its_own(monkeypatch):
    """The driver's sampler changes (its scale, each epoch) and so does an executor's (its local
    set): the Sampler and a time-sharing Trainer's own sampler are copies of the driver's."""
    from fgnn.config import JobConfig, RuntimeConfig
    from fgnn.runtime import workers as _workers
    from fgnn.executors.fault_injection import FaultSpec
    from fgnn.models import GraphSAGE
    from fgnn.sampling import LocalityAwareKHop

    built: dict[str, tuple] = {}
    monkeypatch.setattr(_workers, "stash_args",
                        lambda store, name, *args, **kwargs: built.setdefault(name, args))
    driver = LocalityAwareKHop([2], scale=1.0)
    refs = {k: None for k in ("graph", "train_idx", "eval_idx", "features", "labels")}
    services = SimpleNamespace(pg=None, gpus_per_device=1.0, refs=refs, queue=None, ps=None,
                               one_node=True, shared_gpu=False, torch_device="cpu",
                               exchange=None)
    for mode in ("single", "time-sharing"):
        spec = _workers.ExecutorSpec(JobConfig(runtime=RuntimeConfig(mode=mode)), driver,
                                     GraphSAGE(4, 2, num_layers=1, hidden=4), 1, False,
                                     FaultSpec())
        group = _workers.WorkerGroup(spec, services, watchdog=None)
        if mode == "single":
            group._new_sampler(0)
        else:
            group._new_trainer(0, 0)
    sampler = built["fgnn-sampler-0"][1]
    local = built["fgnn-trainer-0"][10]._args[1]
    driver.scale = 4.0
    assert isinstance(sampler, LocalityAwareKHop) and isinstance(local, LocalityAwareKHop)
    assert sampler.scale == local.scale == 1.0


def test_an_in_process_executor_fetches_its_arguments_from_the_store(actors):
    """The same store calls as a Ray actor's: ``put_args`` keeps them, the executor's
    constructor reads them back (top-level refs resolved)."""
    store = InlineActor(QueueService, "fgnn-queue", 4)
    actors.append(store)
    rows = torch.arange(6)
    stashed = [stash_args(store, "fgnn-keeper-0", put(rows), 3, flag=put("on"))]
    wait_stashed(stashed)
    assert len(get(store.get_args.remote("fgnn-keeper-0"))) == 1
    keeper = make_actor(_Keeper, "fgnn-keeper-0", None, 0, 1.0, store)
    actors.append(keeper)
    args, kwargs = get(keeper.constructed.remote())
    assert args[0] is rows and args[1:] == (3,) and kwargs == {"flag": "on"}


def test_the_inline_step_bench_reports_the_round_trip_and_the_copies(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "inline_step.py"
    spec = importlib.util.spec_from_file_location("bench_inline_step", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    res = mod.main(["--in-dim", "3", "--hidden", "4", "--layers", "2", "--classes", "2",
                    "--steps", "3", "--json", str(tmp_path / "b.json")])
    assert json.loads((tmp_path / "b.json").read_text()) == res
    assert res["params"] == 3 * 4 + 4 + 4 * 2 + 2 and res["steps"] == 3
    assert res["round_trip"]["best_ms"] > 0 and res["copies_over_round_trip"] > 0
    assert torch.get_num_threads() == threads
