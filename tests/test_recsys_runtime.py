"""PinSAGE as a recommender through the factored runtime and ``launch.py`` (issue 20).

* ``useritem:...`` loads the planted user-item graph items first; a user's row lists exactly
  its training items, never its held-out one.
* A Sampler executor's training sample is drawn from the task's own generator
  (:func:`task_generator`) and its examples use only the user's training items (never the
  held-out item), for the user the task holds.
* An end-to-end ``Runtime`` run on 2 logical devices recommends far above popularity, and its
  item cache is exact: every input row is an item, and a degree cache of exactly the items'
  rows hits every row after the warm-up (users, never read, rank below every item).
* ``launch.py --task recsys`` on 4 logical devices writes a valid report with recall@10, the
  ceiling and popularity, and resumes from its checkpoint; bad combinations fail in one line.
"""

from __future__ import annotations

import torch

from fgnn.config import CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig, \
    TrainConfig
from fgnn.data import load_dataset
from fgnn.executors.common import task_generator
from fgnn.tasks.recsys import RecsysSampling, RecsysTask
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.transport import pack_sample, unpack_sample
from fgnn.executors.scheduler import epoch_batches, step_tasks
from fgnn.data.useritem import RecsysDataset
from fgnn.models.pinsage_rec import NEGATIVE, POSITIVE, QUERY

SPEC = "useritem:users_log2=11,items_log2=9,interactions_log2=15,seed=0"


def _config(devices: int = 2, epochs: int = 8, **cache) -> JobConfig:
    return JobConfig(dataset=SPEC, task="recsys", recipe="pinsage-rec",
                     sampler=SamplerConfig(kind="random_walk", num_walks=20, walk_length=4,
                                           top_k=10, num_layers=2),
                     model=ModelConfig(name="pinsage", hidden=128, dropout=0.0),
                     cache=CacheConfig(**cache),
                     train=TrainConfig(epochs=epochs, batch_size=512, lr=3e-3,
                                       weight_decay=0.0, seed=1),
                     runtime=RuntimeConfig(devices=devices, switching=False))


def test_the_spec_lays_items_first_and_keeps_held_out_items_out_of_the_graph():
    ds = load_dataset(SPEC)
    assert isinstance(ds, RecsysDataset)
    n_i, n_u = ds.num_items, ds.num_users
    assert (n_i, n_u) == (512, 2048) and ds.graph.num_nodes == n_i + n_u
    g = ds.graph
    for u in (0, 7, 2047):
        row = g.indices[g.indptr[n_i + u]:g.indptr[n_i + u + 1]].long()
        assert sorted(row.tolist()) == sorted(ds.history[u].tolist())
        assert int(ds.heldout[u]) not in row.tolist()
    assert torch.count_nonzero(ds.features[n_i:]) == 0  # user rows are never read
    assert torch.equal(ds.train_idx, torch.arange(n_i, n_i + n_u))


def test_sampler_examples_come_from_the_task_generator_and_use_training_items_only():
    ds = load_dataset(SPEC)
    task = RecsysTask.build(_config(), ds)
    payload = task.payload()
    ex = SamplerExecutor(ds.graph, None, torch.arange(task.size("train")).numpy(), 256, 7,
                         task=task.sampling())
    held = ds.heldout
    history = [set(h.tolist()) for h in ds.history]
    for epoch, t in ((0, 0), (1, 3), (2, 5)):
        got, _, _ = ex.sample(epoch, t)
        ids = epoch_batches(torch.arange(task.size("train")), 256, 7, epoch, 1)[t]
        want = RecsysSampling(payload).train_sample(ds.graph, ids, task_generator(7, epoch, t))
        assert torch.equal(got.pairs, want.pairs) and torch.equal(got.input_nodes,
                                                                  want.input_nodes)
        back = unpack_sample(pack_sample(got))
        assert torch.equal(back.pairs, got.pairs)
        local, example, role, item = got.pairs
        assert torch.equal(got.seeds[local], item)  # local ids point at the right seeds
        assert int(got.input_nodes.max()) < ds.num_items  # inputs are items, never users
        users = task.users[ids] - ds.num_items
        n_q = int((role == QUERY).sum())
        assert n_q == 8 * ids.numel() and int((role == NEGATIVE).sum()) == task.negatives
        for r, e, i in zip(role.tolist(), example.tolist(), item.tolist()):
            if r in (QUERY, POSITIVE):
                u = int(users[e])
                assert i in history[u] and i != int(held[u]), (u, i)
        pos = item[role == POSITIVE]
        q = item[role == QUERY].view(-1, 8)
        assert not (q == pos.unsqueeze(1)).any()  # a query never holds its positive


def test_a_recsys_job_refuses_other_datasets_models_and_tasks_in_one_line(cli_error):
    line = cli_error
    small = "useritem:users_log2=6,items_log2=5,interactions_log2=9"
    got = line(["--dataset", "rmat:scale=6,feat_dim=4", "--task", "recsys", "--model",
                "pinsage"])
    assert got.startswith("launch.py: error: argument --task: 'recsys' needs a user-item "
                          "dataset (useritem:...)"), got
    got = line(["--dataset", small, "--task", "recsys", "--model", "sage"])
    assert got.startswith("launch.py: error: argument --model: 'sage' is not supported with "
                          "task 'recsys'"), got
    got = line(["--dataset", small, "--model", "pinsage"])
    assert got.startswith("launch.py: error: argument --task: 'node' is not supported on the "
                          "user-item dataset"), got
    got = line(["--dataset", "useritem:users_log2=6,wings=2", "--task", "recsys"])
    assert "unknown key 'wings' for useritem" in got, got


def _rows_requested(ds: RecsysDataset, cfg: JobConfig, task: RecsysTask, epoch: int) -> int:
    """Input rows of ``epoch``'s training samples, recomputed from the task generators."""
    parts = step_tasks(cfg.runtime.mode, cfg.runtime.devices)
    sampling = RecsysSampling(task.payload())
    rows = 0
    for t, ids in enumerate(epoch_batches(torch.arange(task.size("train")),
                                          cfg.train.batch_size, cfg.train.seed, epoch, parts)):
        s = sampling.train_sample(ds.graph, ids, task_generator(cfg.train.seed, epoch, t))
        assert int(s.input_nodes.max()) < ds.num_items
        rows += int(s.input_nodes.numel())
    return rows


# Thresholds (measured 2026-11-25 on 2 shared CPU cores, this spec and job): test recall@10
# 0.40 on 2 devices (ceiling 0.78, popularity 0.06). With the positives shuffled among the
# task's examples (a loss that learns nothing about users), test recall fell to the popularity
# level (docs/benchmarks.md); the test asks for 4x popularity and 0.35x the ceiling. With the
# user rows left at their degree hotness (RecsysCachePlanner.policy_hotness a no-op), users
# displace the rarest items and the hit rate falls to 0.537: the cache assertion fails.
def test_runtime_recommends_far_above_popularity_and_caches_items_exactly(ray_cluster):
    from fgnn.runtime.driver import Runtime

    ds = load_dataset(SPEC)
    cfg = _config(2, 8, policy="degree", cache_ratio=ds.num_items / ds.graph.num_nodes)
    res = Runtime(cfg, ds).run().to_dict()
    fin = res["final"]
    assert fin["test_recall@10"] >= 4 * fin["test_popularity@10"], fin
    assert fin["test_ratio_to_ceiling"] >= 0.35, fin
    assert 0 < fin["test_popularity@10"] < fin["test_ceiling@10"] <= 1
    assert res["allocation"]["covered_rows"] == ds.num_items  # the items' rows, no user row
    task = RecsysTask.build(cfg, ds)
    for ep in res["epochs"]:
        rows = sum(ep["tier_rows"].values())
        assert rows == _rows_requested(ds, cfg, task, ep["epoch"]), ep["epoch"]
        if ep["warmup"]:
            assert ep["hit_rate"] == 0.0
        else:  # every input is an item, and every item row is cached
            assert ep["hit_rate"] == 1.0 and ep["tier_rows"]["host"] == 0, ep["tier_rows"]


def test_launch_trains_a_recommender_on_4_devices_and_writes_a_report(ray_cluster, tmp_path,
                                                                    capsys):
    from fgnn.cli import main
    from fgnn.report import load_report

    first, report = tmp_path / "r1.json", tmp_path / "r.json"
    argv = ["--dataset", SPEC, "--task", "recsys", "--model", "pinsage", "--devices", "4",
            "--seed", "2", "--no-progress", "--dashboard-host", "off",
            "--checkpoint-dir", str(tmp_path / "ck")]
    assert main(argv + ["--epochs", "5", "--report", str(first)]) == 0
    epochs = load_report(first)["epochs"]
    assert len(epochs) == 5 and epochs[0]["hit_rate"] == 0 and epochs[-1]["hit_rate"] > 0
    # resumed from its checkpoint, the job runs only the epoch left
    assert main(argv + ["--epochs", "6", "--resume", "--report", str(report)]) == 0
    rep = load_report(report)  # validates the schema
    assert [e["epoch"] for e in rep["epochs"]] == [5]
    assert rep["config"]["recipe"] == "pinsage-rec"
    fin = rep["final"]
    assert fin["test_recall@10"] >= 3 * fin["test_popularity@10"], fin
    out = capsys.readouterr().out
    assert "test_recall@10" in out and "test_ceiling@10" in out and "test_popularity@10" in out
