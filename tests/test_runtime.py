"""The runtime on Ray with logical GPUs: exactly-once training in every mode, switching, faults.

Ray starts once for the module (4 logical GPUs on CPU); executors take no CPU resource, so the
8 or so actors of a job fit on the shared cores. No timing assertions.
"""

from __future__ import annotations

import os

import pytest
import torch

ray = pytest.importorskip("ray")

from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,  # noqa: E402
                         SamplerConfig, TrainConfig)
from fgnn.data.synthetic import rmat_dataset  # noqa: E402
from fgnn.executors.fault_injection import FaultSpec  # noqa: E402
from fgnn.runtime.driver import Runtime, RuntimeFailure  # noqa: E402
from fgnn.executors.scheduler import epoch_batches  # noqa: E402
from fgnn.monitor.stats import RunResult  # noqa: E402

DEVICES = 4
#: the gradient exchange the runtime tests run on (``FGNN_TEST_EXCHANGE=collective`` runs the
#: fault tests against the collective exchange)
EXCHANGE = os.environ.get("FGNN_TEST_EXCHANGE", "server")


@pytest.fixture(scope="module")
def dataset():
    # 512 vertices, 160 training seeds -> 10 mini-batches of 16 per epoch
    return rmat_dataset(scale=9, edge_factor=8, feat_dim=16, num_classes=4, train_frac=0.3125,
                        val_frac=0.1, test_frac=0.1, seed=0)


def job(mode: str = "factored", devices: int = 3, samplers=None, epochs: int = 2,
        switching: bool = True, checkpoint_dir=None, batch_size: int = 16,
        dropout: float = 0.0) -> JobConfig:
    return JobConfig(
        model=ModelConfig("sage", hidden=16, dropout=dropout),
        sampler=SamplerConfig(fanouts=(4, 4)),
        cache=CacheConfig(policy="degree", cache_ratio=0.25),
        train=TrainConfig(epochs=epochs, batch_size=batch_size, lr=0.01, seed=1,
                          checkpoint_dir=checkpoint_dir),
        runtime=RuntimeConfig(mode=mode, devices=devices, samplers=samplers,
                              switching=switching, queue_size=4, exchange=EXCHANGE))


def assert_exactly_once(rt: Runtime, result: RunResult, dataset, cfg: JobConfig) -> None:
    trained = rt.details  # every epoch trains, the warm-up epoch included
    assert len(trained) == len(result.epochs) == cfg.train.epochs
    for d, stats in zip(trained, result.epochs):
        total = len(epoch_batches(dataset.train_idx, cfg.train.batch_size, cfg.train.seed,
                                  d["epoch"], rt.step_tasks))
        assert d["task_ids"] == list(range(total)), d["task_ids"]  # each acknowledged once
        assert d["applied"] == {t: 1 for t in range(total)}        # each gradient applied once
        assert stats.batches == total
        # one optimizer step per mini-batch, whatever the number of devices
        assert d["steps"] == len(epoch_batches(dataset.train_idx, cfg.train.batch_size,
                                               cfg.train.seed, d["epoch"]))


@pytest.mark.parametrize("mode", ["factored", "time-sharing", "single"])
def test_every_minibatch_trained_exactly_once(ray_cluster, dataset, mode):
    cfg = job(mode, devices=2)
    calls = []
    epochs = []
    rt = Runtime(cfg, dataset, on_batch=lambda *a: calls.append(a), on_epoch=epochs.append)
    result = rt.run()
    assert_exactly_once(rt, result, dataset, cfg)
    tasks = 10 * rt.step_tasks  # 10 mini-batches, each cut into one task per device
    assert [c[1] for c in calls if c[0] == 0] == list(range(1, tasks + 1))
    assert all(c[2] == tasks for c in calls) and len(epochs) == 2
    a = result.allocation
    assert {"devices", "samplers", "trainers", "K", "device_kind"} <= set(a)
    assert a["device_kind"] == "logical"
    e = result.epochs[0]
    assert e.sample.S > 0 and e.train_s > 0 and e.bytes_host_to_device > 0
    assert 0.0 <= e.hit_rate <= 1.0 and e.queue_depth
    assert set(result.final) == {"train_acc", "val_acc", "test_acc"}
    assert isinstance(rt.model, torch.nn.Module)
    assert set(result.preprocess) == {"load_s", "hotness_s", "startup_s", "sizing_s",
                                      "cache_fill_s", "relayout_s"}
    assert result.preprocess["startup_s"] > 0 and result.preprocess["cache_fill_s"] > 0
    # the first epoch trains without the cache (warm-up), the next with it (time-sharing and
    # single give the topology's bytes out of this tiny budget: no cache there)
    assert [x.warmup for x in result.epochs] == [True, False]
    assert e.hit_rate == 0.0 and (result.epochs[1].hit_rate > 0) == (mode == "factored")
    if mode == "factored":
        assert a["samplers"] + a["trainers"] == 2 and a["K"] > 0
        assert e.sample.C > 0 and e.sample.M > 0
        assert rt.details[0]["warmup"] and not rt.details[1]["warmup"]
    elif mode == "time-sharing":
        assert (a["samplers"], a["trainers"]) == (2, 2) and e.sample.C == 0
        assert a["alpha_resident"] <= a["alpha"]
    else:
        assert (a["devices"], a["samplers"], a["trainers"]) == (1, 1, 0)
        assert e.switches == 1  # the one device alternates: its standby trains the epoch
        assert max(e.queue_depth) >= 1


def test_a_run_repeats_exactly_with_the_same_seed(ray_cluster, dataset):
    """Dropout draws from a per-task seed in the Trainer (like the sampling), so two runs of one
    job train the same weights; a Trainer's unseeded global RNG made every run different."""
    cfg = job("single", devices=1, epochs=2, dropout=0.5)
    runs = []
    for _ in range(2):
        rt = Runtime(cfg, dataset, evaluate=False)
        result = rt.run()
        runs.append(([e.loss for e in result.epochs],
                     [p.detach().clone() for p in rt.model.parameters()]))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def test_all_sampler_allocation_without_switching_keeps_one_trainer(ray_cluster, dataset,
                                                                     monkeypatch):
    # The formula can give every device to sampling (K small); FGNN then trains on standbys
    # (P = +inf). With switching off there are none, so the runtime must keep one Trainer.
    import fgnn.runtime.driver as runtime_mod

    monkeypatch.setattr(runtime_mod, "allocate", lambda n_g, t_s, t_t: (n_g, 0, 0.05))
    cfg = job(devices=2, epochs=1, switching=False)
    rt = Runtime(cfg, dataset)
    result = rt.run()
    assert (result.allocation["samplers"], result.allocation["trainers"]) == (1, 1)
    assert_exactly_once(rt, result, dataset, cfg)


def test_slow_trainer_makes_the_standby_take_batches(ray_cluster, dataset):
    cfg = job(devices=2, samplers=1, epochs=1)
    rt = Runtime(cfg, dataset, faults=FaultSpec(slow_trainers={0: 0.3}))
    result = rt.run()
    assert_exactly_once(rt, result, dataset, cfg)
    d = rt.details[-1]
    assert result.epochs[0].switches == 1
    assert d["standby_batches"].get("fgnn-standby-0", 0) > 0
    assert d["batches_by"]["fgnn-standby-0"] == d["standby_batches"]["fgnn-standby-0"]
    assert set(rt.actor_names) == {"fgnn-sampler-0", "fgnn-standby-0", "fgnn-trainer-1"}
    assert result.epochs[0].declines == sum(d["standby_declines"].values())


def test_a_standby_without_profit_declines_and_the_report_counts_it(ray_cluster, dataset):
    # FGNN §5.3: a standby takes a task only when P = M_r * T_t / N_t - T_t' > 0. A one-task
    # queue leaves M_r <= 1 when the Sampler's share is done and the slow standby wakes: with
    # N_t = 1 and T_t' estimated as T_t, P <= 0 at its first check, so it must decline and train
    # nothing (a standby that never declined would take the task left in the queue).
    from dataclasses import replace

    cfg = job(devices=2, samplers=1, epochs=1)
    cfg = replace(cfg, runtime=replace(cfg.runtime, queue_size=1))
    rt = Runtime(cfg, dataset, faults=FaultSpec(slow_trainers={0: 0.3}))
    result = rt.run()
    assert_exactly_once(rt, result, dataset, cfg)
    d = rt.details[-1]
    assert d["standby_declines"] == {"fgnn-standby-0": 1}
    assert result.epochs[0].declines == 1 and result.epochs[0].switches == 0
    assert d["batches_by"].get("fgnn-standby-0", 0) == 0


def test_killed_trainers_mid_epoch_still_train_each_batch_once(ray_cluster, dataset):
    # epoch 0: trainer 2 is killed and restarted by Ray; epoch 1: trainer 3 is killed for good
    cfg = job(devices=4, samplers=1, epochs=2, switching=False)
    kills = {0: ("fgnn-trainer-2", False), 1: ("fgnn-trainer-3", True)}
    killed = []

    def on_batch(epoch, done, total, loss):
        if done == 3 and epoch in kills and epoch not in killed:
            name, for_good = kills[epoch]
            ray.kill(ray.get_actor(name), no_restart=for_good)
            killed.append(epoch)

    rt = Runtime(cfg, dataset, on_batch=on_batch,
                 faults=FaultSpec(slow_trainers={0: 0.1, 1: 0.1, 2: 0.1}))
    result = rt.run()
    assert killed == [0, 1]
    assert_exactly_once(rt, result, dataset, cfg)
    assert "fgnn-standby-0" not in rt.actor_names         # switching off: no standby
    assert result.epochs[0].switches == result.epochs[1].switches == 0
    # restarted and back at work, then the job goes on with one Trainer fewer
    assert [e.trainers for e in result.epochs] == [3, 2]


def test_an_oom_killed_trainer_is_named_and_its_leases_counted_as_reissued(ray_cluster,
                                                                          dataset):
    """Issue 40: a Trainer the kernel's OOM killer ends (here killed through Ray, with the
    memory group's kill counter faked) is named in one line, Ray restarts it, and the epoch's
    ledger counts the leases it held, handed out again, as reissued (it said 0)."""
    from fgnn.data.oom import OomKill
    from fgnn.monitor.timeline import Timeline

    class OneKill:
        def __init__(self):
            self.left = 1

        def new_kill(self):
            self.left -= 1
            return OomKill("/sys/fs/cgroup/memory/a3", 1, 4 << 30, 4 << 30) if \
                self.left == 0 else None

    cfg = job(devices=4, samplers=1, epochs=1, switching=False)
    killed, said = [], []

    def on_batch(epoch, done, total, loss):
        if done == 3 and not killed:
            ray.kill(ray.get_actor("fgnn-trainer-2"), no_restart=False)
            killed.append(epoch)

    rt = Runtime(cfg, dataset, on_batch=on_batch, timeline=Timeline(announce=said.append),
                 faults=FaultSpec(slow_trainers={0: 0.1, 1: 0.1, 2: 0.1}))
    rt.workers.oom = OneKill()
    result = rt.run()
    assert killed == [0]
    assert_exactly_once(rt, result, dataset, cfg)
    named = [s for s in said if "OOM killer" in s]
    assert named == rt.workers.oom_deaths and len(named) == 1, said
    assert named[0].startswith("warning: Trainer 2 was killed by the kernel's OOM killer "
                               "(its memory group /sys/fs/cgroup/memory/a3 peaked at 4.0 GiB "
                               "of its 4.0 GiB limit); Ray restarts it"), named
    assert result.epochs[0].ledger["reissued"] >= 1, result.epochs[0].ledger


def test_killed_sampler_mid_epoch_resamples_its_lost_batches(ray_cluster, dataset):
    # the restarted Sampler re-samples the tasks in flight and those whose samples it owned;
    # 20 tasks of 8 seeds, so that back-pressure holds tasks in flight when the kill comes
    cfg = job(devices=2, samplers=1, epochs=2, switching=False, batch_size=8)
    killed = []

    def on_batch(epoch, done, total, loss):
        if epoch == 0 and done == 2 and not killed:
            ray.kill(ray.get_actor("fgnn-sampler-0"), no_restart=False)
            killed.append(done)

    rt = Runtime(cfg, dataset, on_batch=on_batch, faults=FaultSpec(slow_trainers={0: 0.1}))
    result = rt.run()
    assert killed
    assert_exactly_once(rt, result, dataset, cfg)
    assert [e.samplers for e in result.epochs] == [1, 1]
    first = [d for d in rt.details if d["epoch"] == 0][0]
    assert first["reissued"] >= 1          # in-flight and lost tasks were sampled again
    print("lost samples re-sampled:", first["lost_samples"], "re-issued:", first["reissued"])


def test_no_trainer_left_stops_with_a_resumable_checkpoint(ray_cluster, dataset, tmp_path):
    cfg = job(devices=2, samplers=1, epochs=2, switching=False, checkpoint_dir=str(tmp_path))

    def on_batch(epoch, done, total, loss):
        if epoch == 1 and done == 2:
            ray.kill(ray.get_actor("fgnn-trainer-1"), no_restart=True)

    rt = Runtime(cfg, dataset, on_batch=on_batch, faults=FaultSpec(slow_trainers={0: 0.1}))
    with pytest.raises(RuntimeFailure, match="Trainer") as info:
        rt.run()
    assert info.value.checkpoint is not None and info.value.checkpoint.exists()
    from fgnn.checkpoint import load_checkpoint

    ckpt = load_checkpoint(info.value.checkpoint, rt.model, restore_rng=False)
    assert ckpt.extra["runtime"]["finished_epoch"] == 0
    # resume: the job continues with epoch 1 only
    cfg2 = job(devices=2, samplers=1, epochs=2, switching=False, checkpoint_dir=str(tmp_path))
    cfg2.train.resume = True
    result = Runtime(cfg2, dataset).run()
    assert [e.epoch for e in result.epochs] == [1]


def test_bad_input(ray_cluster, dataset):
    with pytest.raises(ValueError, match="config"):
        Runtime("factored", dataset)
    with pytest.raises(ValueError, match="devices"):
        Runtime(job(devices=int(ray.cluster_resources()["GPU"]) + 1), dataset).run()
    with pytest.raises(ValueError, match="switching"):
        Runtime(job(devices=1, switching=False), dataset).run()


def _bench_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "runtime.py"
    spec = importlib.util.spec_from_file_location("fgnn_bench_runtime", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_bench_factored_moves_fewer_bytes_than_time_sharing(ray_cluster):
    # a cache of half the 8 MiB of features: the factored Trainers keep it all, while a
    # time-sharing device also holds the 2 MiB topology and ranks by degree; the second epoch
    # (after the uncached warm-up) is compared
    bench = _bench_module()
    spec = "rmat:scale=14,edge_factor=16,feat_dim=128,train_frac=0.05,seed=0"
    args = bench._parse(["--dataset", spec, "--devices", "2", "--cache-ratio", "0.5",
                         "--epochs", "2", "--batch-size", "256",
                         "--modes", "factored,time-sharing"])
    from fgnn.data import load_dataset

    ds = load_dataset(spec)
    rows = [bench.run_mode(args, ds, m) for m in args.mode_list]
    ratio = bench.ratios(rows)["time-sharing"]["bytes_host_to_device"]
    assert rows[0]["alpha"] > rows[1]["alpha"]
    assert ratio > 1.0, rows


def test_ondisk_features_reach_trainers_as_a_file_not_through_the_object_store(
        ray_cluster, dataset, tmp_path, monkeypatch):
    # an ondisk:DIR dataset: its features are a memmap; the runtime ships a descriptor and each
    # Trainer maps features.npy itself; ray.put never sees the (N, F) matrix
    import numpy as np

    from fgnn.data import load_dataset, save_dataset
    from fgnn.executors.common import MemmapFeatures

    save_dataset(dataset, tmp_path / "ds")
    ds = load_dataset(f"ondisk:{tmp_path / 'ds'}")
    assert isinstance(ds.features, np.memmap)
    put_shapes = []
    real_put = ray.put

    def spy_put(value, *a, **kw):
        put_shapes.append(getattr(value, "shape", None))
        return real_put(value, *a, **kw)

    monkeypatch.setattr(ray, "put", spy_put)
    cfg = job("factored", devices=2, epochs=1)
    hosts = []

    def on_epoch(stats):  # the executors are alive here; ask each Trainer where its host tier is
        hosts.extend(ray.get([e.handle.host_info.remote() for e in rt._execs
                              if e.role in ("trainer", "standby")]))

    rt = Runtime(cfg, ds, on_epoch=on_epoch, evaluate=False)
    result = rt.run()
    assert_exactly_once(rt, result, ds, cfg)
    assert isinstance(rt._refs["features"], MemmapFeatures)
    assert rt._refs["features"].path == str((tmp_path / "ds" / "features.npy").resolve())
    assert tuple(ds.features.shape) not in put_shapes, put_shapes
    assert hosts and all(h["kind"] == "file" and h["path"] == rt._refs["features"].path
                         for h in hosts), hosts


def test_memmap_descriptor_maps_the_same_rows(tmp_path):
    import numpy as np

    from fgnn.executors.common import MemmapFeatures, features_payload

    a = np.arange(3000 * 8, dtype=np.float32).reshape(3000, 8)
    np.save(tmp_path / "f.npy", a)
    m = np.load(tmp_path / "f.npy", mmap_mode="r")
    for view, want in ((m, a), (m[1000:], a[1000:]), (m[7:2500], a[7:2500])):
        d = MemmapFeatures.of(view)
        assert d is not None and d.shape == want.shape
        assert np.array_equal(d.open(), want)
    assert MemmapFeatures.of(m[:, :4]) is None                 # strided: not one file range
    assert MemmapFeatures.of(a) is None                        # in memory
    assert isinstance(features_payload(torch.from_numpy(a)), np.ndarray)
