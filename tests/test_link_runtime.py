"""Link prediction through launch.py, the Python API and the factored runtime (issue 20).

* The Sampler executor's link samples: no seed edge (nor its reverse) reaches its own input
  with exclusion on, and the same check finds leaks with it off (the leakage test at the runtime
  level, on the packed sample a Trainer receives); negatives are never a known training edge.
* Evaluation on the executors: the reported validation and test AUC / AP are exactly those of
  the recipe run in one process (chunks of pairs, each with its own generator).
* An end-to-end run on 4 logical devices through ``launch.py`` (Cora, a few epochs): AUC well
  above chance and a valid report that names the task and the GAE recipe.
* Checkpoints and ``--resume`` of a link job.
* Config, recipe and CLI: the GAE recipe with no flags on Planetoid, flags win, what link jobs
  refuse, the report schema.
"""

from __future__ import annotations

import json

import pytest
import torch

from fgnn.config import JobConfig, LinkConfig, ModelConfig, SamplerConfig, TrainConfig
from fgnn.data import load_dataset
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.transport import pack_sample, unpack_sample
from fgnn.link.edges import EdgeSet
from fgnn.tasks.link import LinkSampling, LinkTask
from fgnn.sampling import KHop

TINY = "rmat:scale=7,edge_factor=6,feat_dim=8,num_classes=2,train_frac=0.5,seed=3"


def _job(exclude: str = "reverse", **kw) -> JobConfig:
    return JobConfig(dataset=TINY, task="link", link=LinkConfig(exclude=exclude),
                     sampler=SamplerConfig(fanouts=(1000, 1000)), **kw)


def _executor(cfg: JobConfig, batch_size: int = 32):
    """A Sampler executor of a link job, in this process, and the job's LinkTask."""
    ds = load_dataset(cfg.dataset)
    task = LinkTask.build(cfg, ds)
    train = task.training_dataset(ds)
    ex = SamplerExecutor(train.graph, KHop(cfg.sampler.fanouts), torch.arange(task.size("train")),
                         batch_size, seed=cfg.train.seed, task=task.sampling(),
                         eval_idx={s: torch.arange(task.size(s)) for s in ("val", "test")})
    return ex, task


def _leaks(exclude: str) -> int:
    """Positive target edges (either direction) found among the message edges of their own
    sample, over one training epoch of the Sampler executor, read from the packed sample a
    Trainer receives."""
    ex, task = _executor(_job(exclude))
    n_tasks = -(-task.size("train") // ex.batch_size)
    leaks = 0
    for t in range(n_tasks):
        sample = unpack_sample(pack_sample(ex.sample(0, t)[0]))
        nodes = sample.input_nodes
        src, dst, label = sample.pairs
        targets = EdgeSet(torch.stack([nodes[src[label == 1]], nodes[dst[label == 1]]]),
                          task.split.num_nodes, undirected=True)
        for b in sample.blocks:  # message u -> v: u = src (sender), v = dst (receiver)
            leaks += int(targets.contains(nodes[b.src], nodes[b.dst]).sum())
    return leaks


def test_no_target_edge_reaches_its_own_sampled_input():
    assert _leaks("reverse") == 0


def test_the_leakage_check_fails_with_exclusion_switched_off():
    """The same check, with ``exclude='none'``: full fanouts keep every edge, so each target
    edge is in its own input (this is what the check above guards against)."""
    assert _leaks("none") > 0


def test_exclude_self_still_leaks_the_reverse_direction():
    assert _leaks("self") > 0


def test_link_samples_carry_pairs_negatives_and_labels():
    cfg = dataclass_replace_link(_job(), neg_ratio=3)
    ex, task = _executor(cfg, batch_size=16)
    sample = ex.sample(1, 0)[0]
    src, dst, label = sample.pairs
    assert int(label.sum()) == 16 and label.numel() <= 16 * 4
    pos_ids = ex.seeds_of(1, 0)
    nodes = sample.seeds
    want = {tuple(e) for e in task.split.train_pos[:, pos_ids].t().tolist()}
    got = {(int(nodes[s]), int(nodes[d])) for s, d in zip(src[label == 1], dst[label == 1])}
    assert got == want
    known = task.split.known_edges("train")
    neg = label == 0
    assert int(neg.sum()) > 16  # 3 per positive, a filtered draw may drop a few
    assert not bool(known.contains(nodes[src[neg]], nodes[dst[neg]]).any())
    # the evaluation chunks: the split's pairs in order, labels as in the split
    ev = ex.sample(-1, 0, plan=_plan(task, ("val",), 8))[0]
    want = task.pairs("val")[:, :8]
    assert torch.equal(ev.seeds[ev.pairs[0]], want[0]) and torch.equal(ev.pairs[2], want[2])


def dataclass_replace_link(cfg: JobConfig, **kw) -> JobConfig:
    import dataclasses

    return dataclasses.replace(cfg, link=dataclasses.replace(cfg.link, **kw))


def _plan(task: LinkTask, splits, batch: int, seed: int = 0):
    from fgnn.evaluation import EvalPlan

    return EvalPlan(tuple(splits), tuple(task.size(s) for s in splits), batch, seed)


# ---------------------------------------------------------------------------- config & CLI
def _cli(argv):
    from fgnn.cli import build_parser, config_from_args

    return config_from_args(build_parser().parse_args(argv))


def test_gae_recipe_with_no_flags_on_planetoid_and_flags_win():
    cfg = _cli(["--dataset", "cora", "--task", "link"])
    assert cfg.task == "link" and cfg.recipe == "gae"
    assert (cfg.model.name, cfg.model.hidden, cfg.link.embed_dim, cfg.model.dropout) == \
        ("gcn", 32, 16, 0.0)
    assert (cfg.train.lr, cfg.train.epochs, cfg.train.batch_size) == (0.01, 200, 512)
    assert (cfg.link.val, cfg.link.test, cfg.link.decoder) == (0.05, 0.10, "dot")
    assert cfg.sampler.fanouts == (1000, 1000)
    cfg = _cli(["--dataset", "cora", "--task", "link", "--embed-dim", "8", "--epochs", "3",
                "--decoder", "mlp", "--neg-ratio", "2", "--exclude-seed-edges", "none"])
    assert (cfg.link.embed_dim, cfg.train.epochs, cfg.link.decoder, cfg.link.neg_ratio,
            cfg.link.exclude) == (8, 3, "mlp", 2, "none")
    assert _cli(["--dataset", "cora"]).recipe == "kipf-welling"
    assert _cli(["--dataset", TINY, "--task", "link"]).recipe == "fgnn-7.1"


@pytest.mark.parametrize("argv, flag", [
    (["--model", "pinsage"], "--model"),
    (["--reorder", "hot-first"], "--reorder"),
    (["--eval-mode", "layerwise"], "--eval-mode"),
    (["--sampler", "locality"], "--sampler"),
    (["--link-val", "0.5", "--link-test", "0.5"], "--link-test"),
])
def test_what_link_jobs_refuse_is_one_line_naming_the_flag(argv, flag, capsys):
    from fgnn.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--dataset", TINY, "--task", "link", "--no-progress"] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"launch.py: error: argument {flag}: "), err


def test_link_config_validation():
    with pytest.raises(ValueError, match="LinkConfig.exclude"):
        LinkConfig(exclude="both")
    with pytest.raises(ValueError, match="LinkConfig.neg_ratio"):
        LinkConfig(neg_ratio=0)
    with pytest.raises(ValueError, match="JobConfig.task"):
        JobConfig(task="graph")
    with pytest.raises(ValueError, match="JobConfig.save_model"):
        JobConfig(task="link", save_model="m.pt")


def test_link_report_schema():
    from fgnn.report import ReportError, validate_report

    base = {"config": {"task": "link", "recipe": "gae"}, "mode": "factored",
            "allocation": {"devices": 1, "samplers": 1, "trainers": 0, "K": None},
            "preprocess": {"load_s": 0.1},
            "epochs": [{"epoch": 0, "time_s": 1.0, "extract_s": 0.1, "train_s": 0.1,
                        "sample_s": {"total": 0.1, "S": 0.1, "M": 0.0, "C": 0.0},
                        "hit_rate": 0.0, "bytes_host_to_device": 1, "switches": 0,
                        "batches": 1, "loss": 0.6, "val_auc": 0.8, "val_ap": 0.7}],
            "final": {"val_auc": 0.8, "val_ap": 0.7, "test_auc": 0.81, "test_ap": 0.75,
                      "test_hits@10": 0.5}}
    validate_report(base)
    bad = json.loads(json.dumps(base))
    del bad["final"]["test_ap"]
    with pytest.raises(ReportError, match="final.test_ap"):
        validate_report(bad)
    bad = json.loads(json.dumps(base))
    bad["final"]["test_hits@10"] = 1.5
    with pytest.raises(ReportError, match="test_hits@10"):
        validate_report(bad)


# ---------------------------------------------------------------------------- the runtime
def _reference(model, cfg: JobConfig, task: LinkTask, chunk: int) -> dict[str, float]:
    """The evaluation recipe in this process: every split's pairs in order, in chunks of
    ``chunk``, chunk ``i`` sampled with ``eval_generator(seed, split, i)``."""
    from fgnn.evaluation import eval_generator
    from fgnn.tasks.link import pair_scores
    from fgnn.training import extract_features

    ds = load_dataset(cfg.dataset)
    train = task.training_dataset(ds)
    ls = LinkSampling(task.payload(), KHop(cfg.sampler.fanouts))
    model.eval()
    out = {}
    for split in ("val", "test"):
        ids = torch.arange(task.size(split))
        scores, labels = [], []
        for i, part in enumerate(torch.split(ids, chunk)):
            s = ls.eval_sample(train.graph, split, part, eval_generator(cfg.train.seed, split, i))
            rec = pair_scores(model, model(s.blocks, extract_features(ds.features,
                                                                      s.input_nodes)), s.pairs)
            scores.append(rec["pair_scores"])
            labels.append(rec["pair_labels"])
        import numpy as np

        m = task.metrics(split, np.concatenate(scores), np.concatenate(labels))
        out.update({f"{split}_{k}": v for k, v in m.items()})
    return out


def test_reported_link_scores_are_the_evaluation_recipe(ray_cluster):
    """Three devices, sampled fanouts (the chunks' generators matter), a few epochs: the final
    scores the executors computed equal the in-process recipe with the best weights."""
    from fgnn.config import RuntimeConfig
    from fgnn.runtime.driver import Runtime

    cfg = JobConfig(dataset=TINY, task="link", sampler=SamplerConfig(fanouts=(4, 3)),
                    model=ModelConfig(name="sage", hidden=16, dropout=0.0),
                    link=LinkConfig(embed_dim=8, eval_neg_ratio=3, hits_k=(1, 3)),
                    train=TrainConfig(epochs=3, batch_size=64, lr=0.01, eval_batch_size=40),
                    runtime=RuntimeConfig(devices=3))
    rt = Runtime(cfg, load_dataset(TINY))
    result = rt.run()
    ref = _reference(rt.model, cfg, rt.task, 40)
    assert set(result.final) == set(ref)
    for k, v in ref.items():
        assert result.final[k] == pytest.approx(v, abs=1e-6), k
    assert all(e.val_auc is not None and e.val_acc is None for e in result.epochs)


def test_link_run_on_four_logical_devices_through_launch(ray_cluster, planetoid_root,
                                                         tmp_path, capsys):
    """Cora through ``launch.py`` with the GAE recipe and a few epochs: AUC well above 0.5, a
    valid report naming the task and the recipe; the same job resumed from its checkpoint runs
    only the epochs left."""
    from fgnn.cli import main
    from fgnn.report import load_report

    report = tmp_path / "r.json"
    argv = ["--dataset", "cora", "--data-root", str(planetoid_root), "--task", "link",
            "--devices", "4", "--no-progress", "--dashboard-host", "off",
            "--checkpoint-dir", str(tmp_path / "ck")]
    assert main(argv + ["--epochs", "6", "--report", str(report)]) == 0
    rep = load_report(report)  # validates
    assert rep["config"]["task"] == "link" and rep["config"]["recipe"] == "gae"
    assert rep["allocation"]["devices"] == 4
    fin = rep["final"]
    assert fin["test_auc"] > 0.7 and fin["test_ap"] > 0.65 and fin["val_auc"] > 0.7, fin
    assert len(rep["epochs"]) == 6 and all(e["val_auc"] is not None for e in rep["epochs"])
    out = capsys.readouterr().out
    assert "task link, model " in out and "recipe gae" in out and "test_auc" in out
    resumed = tmp_path / "r2.json"
    assert main(argv + ["--epochs", "8", "--resume", "--report", str(resumed)]) == 0
    rep2 = load_report(resumed)
    assert [e["epoch"] for e in rep2["epochs"]] == [6, 7]
    assert rep2["final"]["test_auc"] > 0.7


def test_resuming_a_node_checkpoint_as_a_link_job_fails_before_ray(tmp_path, monkeypatch,
                                                                    capsys):
    """A node-classification checkpoint is not a link job's: one line naming both tasks."""
    from test_checkpoint import TINY as NODE_TINY
    from test_checkpoint import _launch_fails, _no_ray, _runtime_checkpoint

    _runtime_checkpoint(tmp_path, model="sage", dataset=NODE_TINY)
    _no_ray(monkeypatch)
    line = _launch_fails(["--dataset", NODE_TINY, "--model", "sage", "--task", "link",
                          "--resume", "--checkpoint-dir", str(tmp_path)], capsys)
    assert "was trained for task node, but this job has task link" in line, line
