"""Placement across Trainers, the M step and locality-aware sampling, end to end.

Jobs go through ``fgnn.cli.main`` (the code path of ``launch.py``) and the checks read the JSON
report: rows and bytes per tier (local / peer / host), sample bytes, the locality scale ``s``
per epoch. Ray starts once for the module with 4 logical GPUs. No timing assertions: the
Algorithm 2 thresholds are set so that the controller's decisions do not depend on timings.
"""

from __future__ import annotations

import json
import types

import pytest
import torch

ray = pytest.importorskip("ray")

from fgnn.cli import main  # noqa: E402
from fgnn.sampling import ScaleController  # noqa: E402

DEVICES = 4
# 512 vertices, 160 training seeds: 10 mini-batches of 16 per epoch
SPEC = "rmat:scale=9,edge_factor=8,feat_dim=16,num_classes=4,train_frac=0.3125,seed=0"
ROW_BYTES = 16 * 4


def launch(tmp_path, name: str, *flags: str) -> dict:
    path = tmp_path / f"{name}.json"
    argv = ["--dataset", SPEC, "--model", "sage", "--hidden", "16", "--fanouts", "4,4",
            "--batch-size", "16", "--cache-policy", "degree", "--seed", "1",
            "--no-progress", "--dashboard-host", "off", "--report", str(path), *flags]
    assert main(argv) == 0
    return json.loads(path.read_text())


def check_tiers(report: dict) -> None:
    """Counters that must hold in every epoch of every run."""
    for e in report["epochs"]:
        rows, by = e["tier_rows"], e["tier_bytes"]
        assert {t: rows[t] * ROW_BYTES for t in rows} == by
        total = sum(rows.values())
        assert total > 0
        assert e["hit_rate"] == pytest.approx((rows["local"] + rows["peer"]) / total)
        assert e["bytes_host_to_device"] == by["host"] + e["sample_bytes"]


def test_placement_flags_put_tiers_in_the_report(ray_cluster, tmp_path):
    # 1 Sampler and 3 Trainers caching 10% of the rows each; the second epoch (after the
    # uncached warm-up) is compared. No standby: its smaller buffer reads the rest from the
    # Trainers' buffers by design (job_placement), and whether it trains depends on timing.
    # The replicate run reads its peers from the host copy (--peer-tier host), the spread one
    # maps the other Trainers' buffers (shared memory: one Ray node of logical GPUs).
    from fgnn.cache.peer_share import segments

    before = set(segments())
    common = ("--devices", "4", "--samplers", "1", "--cache-ratio", "0.1", "--epochs", "2",
              "--no-switching")
    rep = launch(tmp_path, "replicate", *common, "--placement", "replicate",
                 "--peer-tier", "host")
    spread = launch(tmp_path, "auto", *common, "--placement", "auto")
    assert set(segments()) <= before  # every Trainer's segment is gone with its job
    trainers = {f"fgnn-trainer-{d}" for d in (1, 2, 3)}
    for r, source in ((rep, "host"), (spread, "shm")):
        tier = r["allocation"]["peer_tier"]
        assert set(tier["peer_source"]) == trainers
        for name, peers in tier["peer_source"].items():
            others = {str(d) for d in (1, 2, 3)} - {name[-1]}
            assert peers == {d: source for d in others}, tier
    assert spread["allocation"]["peer_tier"]["fallbacks"] == []
    assert {f["reason"] for f in rep["allocation"]["peer_tier"]["fallbacks"]} == {
        "cache.peer_tier is host"}
    # every peer row of the spread run came from a peer's mapped buffer, none from the host
    assert spread["epochs"][1]["tier_rows"]["peer"] > 0
    assert spread["epochs"][1]["peer_host_rows"] == 0
    for r in (rep, spread):
        check_tiers(r)
        assert r["epochs"][1]["sample_bytes"] > 0  # factored: samples cross host -> device
    ra, sa = rep["allocation"], spread["allocation"]
    assert ra["placement"] == "replicate" and ra["cached_rows"][1:] == [51, 51, 51]
    # auto with 3 Trainers and the default peer cost (< 1): Rule 2, Algorithm 1
    assert sa["placement"] == "algorithm1" and sa["cached_rows"][1:] == [51, 51, 51]
    assert ra["covered_rows"] == 51 and sa["covered_rows"] > 2 * 51
    r0, s0 = rep["epochs"][1]["tier_rows"], spread["epochs"][1]["tier_rows"]
    assert r0["peer"] == 0 and s0["peer"] > 0       # Rule 1 never reads a peer
    # the same tasks draw the same samples: the spread placement leaves fewer rows on the host
    assert sum(r0.values()) == sum(s0.values())
    assert s0["host"] < r0["host"]
    assert (spread["epochs"][1]["tier_bytes"]["host"]
            < rep["epochs"][1]["tier_bytes"]["host"])


def test_locality_sampler_raises_the_cached_share_over_khop(ray_cluster, tmp_path):
    # lt = ut = 0: every epoch's data-loading share r > ut, so Algorithm 2 doubles s up to
    # MAXS = 8 whatever the timings: s = 1, 2, 4, 8
    common = ("--devices", "3", "--samplers", "1", "--cache-ratio", "0.1", "--epochs", "4",
              "--locality-lt", "0", "--locality-ut", "0", "--locality-max-scale", "8")
    khop = launch(tmp_path, "khop", *common, "--sampler", "khop")
    loc = launch(tmp_path, "locality", *common, "--sampler", "locality")
    check_tiers(khop)
    check_tiers(loc)
    assert [e["locality_scale"] for e in khop["epochs"]] == [None] * 4
    scales = [e["locality_scale"] for e in loc["epochs"]]
    assert scales == [1.0, 2.0, 4.0, 8.0]
    ctl = ScaleController(0.0, 0.0, 8.0)  # replay Algorithm 2 on the measured shares
    replay = [1.0] + [ctl.update(e["load_ratio"]) for e in loc["epochs"][:-1]]
    assert replay == scales
    # the local set is the Trainers' cache map: its share of the sampled rows rises with s
    share = [e["hit_rate"] for e in loc["epochs"]]
    base = sum(e["hit_rate"] for e in khop["epochs"][2:]) / 2
    print(f"\ncached share per epoch: khop {[round(e['hit_rate'], 3) for e in khop['epochs']]}, "
          f"locality {[round(x, 3) for x in share]} at s = {scales}")
    assert sum(share[2:]) / 2 > base + 0.05, (share, [e["hit_rate"] for e in khop["epochs"]])


class _OneItemQueue:
    """Stands in for the global queue actor: ``get`` hands out one item, then ``done``."""

    def __init__(self, item) -> None:
        self.items = [item]
        self.get = types.SimpleNamespace(remote=self._get)

    def _get(self, name, generation, timeout):
        if self.items:
            return ray.put(("item", self.items.pop(), 0.0))
        return ray.put(("done", None, 0.0))


def test_standby_trainer_extracts_from_the_samplers_marks(ray_cluster):
    # The executors in-process: a Sampler marks a sample against the job's holder bits, and a
    # standby Trainer (device 0, a smaller cache than the Trainers on devices 2, 3) extracts it.
    from fgnn.cache.hotness import compute_hotness
    from fgnn.cache.placement import job_placement
    from fgnn.data import load_dataset
    from fgnn.executors.queue import QueueItem
    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.executors.transport import pack_sample
    from fgnn.executors.trainer import TrainerExecutor
    from fgnn.models import GraphSAGE
    from fgnn.sampling import KHop

    ds = load_dataset(SPEC)
    hot = compute_hotness("degree", ds.graph, ds.train_idx)
    _, pl = job_placement(hot, 4, trainers=[2, 3], capacity=80, standbys=[0],
                          standby_capacity=20, strategy="algorithm1", peer_cost=0.0)
    smp = SamplerExecutor(ds.graph, KHop((4, 4)), ds.train_idx, 16, seed=1,
                          cache_map=pl.holder_bits())
    sample, _, _ = smp.sample(0, 3)
    item = QueueItem(0, 3, ref=ray.put(pack_sample(sample)), producer="fgnn-sampler-0",
                     nbytes=sample.nbytes())
    model = GraphSAGE(ds.feat_dim, ds.num_classes, num_layers=2, hidden=8)
    standby = TrainerExecutor(ds.features, ds.labels, model, pl, 0, None, _OneItemQueue(item),
                              name="fgnn-standby-0", role="standby")
    assert standby.cached_rows() == 20
    batch = standby._fetch(0, 0)
    ids = sample.input_nodes
    assert torch.equal(batch.x, ds.features[ids])                      # the right rows
    own = torch.zeros(ds.num_nodes, dtype=torch.bool)
    own[pl.buffers[0]] = True
    anywhere = pl.holder_bits() != 0
    n_local, n_any = int(own[ids].sum()), int(anywhere[ids].sum())
    assert n_local > 0 and n_any > n_local
    rec = batch.rec
    assert rec.tier_rows == {"local": n_local, "peer": n_any - n_local,
                             "host": ids.numel() - n_any,
                             "peer_host": n_any - n_local}  # no peer buffer opened here
    assert rec.tier_bytes["host"] == rec.host_bytes == (ids.numel() - n_any) * ROW_BYTES
    assert (rec.hits, rec.misses) == (n_any, ids.numel() - n_any) and rec.role == "standby"
    assert standby._fetch(0, 0) is None                                # the queue is done


def test_caches_are_placed_over_the_layout_the_allocation_chose(ray_cluster, monkeypatch):
    # The first (warm-up, uncached) epoch runs with 1 Sampler and Trainers on devices 1-3; the
    # allocation then asks for 2 Samplers. The caches are placed after that re-layout, over the
    # final Trainers (2, 3), and every mini-batch's marks agree with its consumer's placement
    # (a Trainer refuses marks against another map).
    import fgnn.runtime.driver as runtime_mod
    from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,
                             SamplerConfig, TrainConfig)
    from fgnn.data import load_dataset
    from fgnn.runtime.driver import Runtime

    monkeypatch.setattr(runtime_mod, "allocate", lambda n_g, t_s, t_t: (2, n_g - 2, 1.0))
    cfg = JobConfig(model=ModelConfig("sage", hidden=8, dropout=0.0),
                    sampler=SamplerConfig(fanouts=(4, 4)),
                    cache=CacheConfig(policy="degree", cache_ratio=0.1, placement="algorithm1"),
                    train=TrainConfig(epochs=2, batch_size=16, lr=0.01, seed=1),
                    runtime=RuntimeConfig(devices=4, queue_size=4))
    ds = load_dataset(SPEC)
    rt = Runtime(cfg, ds, evaluate=False)
    result = rt.run()
    a = result.allocation
    assert (a["samplers"], a["trainers"], a["placement"]) == (2, 2, "algorithm1")
    assert a["cached_rows"][2:] == [51, 51] and a["covered_rows"] > 51
    assert set(rt.actor_names) == {"fgnn-sampler-0", "fgnn-sampler-1", "fgnn-standby-0",
                                   "fgnn-standby-1", "fgnn-trainer-2", "fgnn-trainer-3"}
    from fgnn.executors.scheduler import epoch_batches

    d = rt.details[1]
    total = len(epoch_batches(ds.train_idx, 16, 1, 1, rt.step_tasks))
    assert d["applied"] == {t: 1 for t in range(total)}
    e = result.epochs[1]
    assert e.tier_rows["peer"] > 0 and sum(e.tier_rows.values()) > 0


@pytest.mark.slow
def test_bench_compares_placements_with_sample_bytes_counted(ray_cluster):
    import importlib.util
    from pathlib import Path

    from fgnn.data import load_dataset

    path = Path(__file__).resolve().parents[1] / "bench" / "runtime.py"
    spec = importlib.util.spec_from_file_location("fgnn_bench_runtime", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = bench._parse(["--dataset", SPEC, "--devices", "4", "--samplers", "1",
                         "--cache-ratio", "0.1", "--epochs", "2", "--batch-size", "16",
                         "--fanouts", "4", "4", "--modes", "factored",
                         "--placements", "replicate,algorithm1", "--cache-policy", "degree",
                         "--no-switching"])  # no standby reading peers (see above)
    ds = load_dataset(SPEC)
    rows = [bench.run_mode(args, ds, "factored", p) for p in args.placement_list]
    rep, spread = rows
    assert [r["label"] for r in rows] == ["factored/replicate", "factored/algorithm1"]
    for r in rows:  # host -> device = feature rows from the host tier + the samples
        assert r["sample_bytes_host_to_device"] > 0
        assert r["bytes_host_to_device"] == pytest.approx(
            r["feature_bytes_host_to_device"] + r["sample_bytes_host_to_device"])
    assert rep["tier_share"]["peer"] == 0 and spread["tier_share"]["peer"] > 0
    assert spread["sample_bytes_host_to_device"] == rep["sample_bytes_host_to_device"]
    ratio = bench.ratios(rows)["factored/algorithm1"]
    assert ratio["feature_bytes_host_to_device"] < ratio["bytes_host_to_device"] < 1.0
    with pytest.raises(SystemExit):
        bench._parse(["--placements", "spread"])


def test_replicated_rows_are_held_once_a_host_on_logical_devices(ray_cluster, tmp_path):
    """Rule 1's Trainers on logical devices (host memory) map the first one's buffer instead
    of filling a copy each: one buffer a host, the same rows and hits as private copies."""
    from fgnn.cache.peer_share import segments

    before = set(segments())
    common = ("--devices", "4", "--samplers", "1", "--cache-ratio", "0.1", "--epochs", "2",
              "--no-switching", "--placement", "replicate")
    shared = launch(tmp_path, "shared", *common)
    own = launch(tmp_path, "own", *common, "--peer-tier", "host")
    assert set(segments()) <= before  # the one segment is gone with its job
    assert shared["allocation"]["peer_tier"]["buffers"] == {"exported": 3, "distinct": 1}
    assert shared["allocation"]["cached_rows"] == own["allocation"]["cached_rows"]
    assert shared["epochs"][1]["tier_rows"] == own["epochs"][1]["tier_rows"]
    check_tiers(shared)
