"""Typed link prediction through the factored runtime (issue 20): one relation of a typed graph.

* Leakage: with exclusion on, no seed edge of the target relation, nor its twin in the reverse
  relation, is among the message edges of its own sample (read from the packed sample a Trainer
  receives); the same check finds leaks with exclusion off (``none``) and reverse-relation leaks
  with ``self``.
* Negatives: of the destination's node type, never a known edge when filtered (and the filter is
  needed: unfiltered draws on a dense relation do hit known edges); the fixed validation/test
  negatives are never an edge of the relation, ``eval_neg_ratio`` per positive, positive-major.
* Split: train / validation / test disjoint and covering the relation; the training message
  graph holds exactly the training edges in the relation and their reverses in the reverse
  relation; the test graph adds the validation edges only; other relations untouched.
* End to end: ``fgnn.Job`` on 4 logical devices learns the planted relation (test AUC well above
  chance) and reports typed cache counters; bad ``--link-edge-type`` values are one line.
* Resume: a checkpoint records the task and the relation; ``--resume`` with another relation
  of the same size (``cites`` / ``cited_by``: same weight shapes) or another task is one line
  naming the field and both values, exit 2 before Ray, nothing written; a checkpoint without
  a relation is refused by a typed link job only; the same relation resumes (with Ray: only
  the epoch left runs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fgnn.config import (CacheConfig, JobConfig, LinkConfig, ModelConfig, RuntimeConfig,
                         SamplerConfig, TrainConfig)
from fgnn.data import load_dataset
from fgnn.executors.typed import graph_payload
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.transport import pack_sample, unpack_sample
from fgnn import HeteroKHop
from fgnn.link.hetero import reverse_of, typed_link_split, typed_negatives
from fgnn.tasks.link_typed import TypedLinkTask
from fgnn.link.edges import EdgeSet

SPEC = "hetero:papers=400,authors=120,fields=8,seed=2"
WRITES = ("author", "writes", "paper")
WRITTEN_BY = ("paper", "written_by", "author")


def _job(exclude: str = "reverse", edge_type: str = "author,writes,paper", **kw) -> JobConfig:
    return JobConfig(dataset=SPEC, task="link",
                     link=LinkConfig(exclude=exclude, edge_type=edge_type, **kw),
                     sampler=SamplerConfig(fanouts=(1000, 1000)),
                     model=ModelConfig(name="sage", hidden=16))


def _executor(cfg: JobConfig, batch_size: int = 64):
    ds = load_dataset(cfg.dataset)
    task = TypedLinkTask.build(cfg, ds)
    train = task.training_dataset(ds)
    ex = SamplerExecutor(graph_payload(train.graph), HeteroKHop(cfg.sampler.fanouts),
                         np.arange(task.size("train")), batch_size, seed=5, task=task.sampling(),
                         eval_idx={s: np.arange(task.size(s)) for s in ("val", "test")})
    return ex, task, ds


def _leaks(exclude: str) -> tuple[int, int]:
    """Positive target edges found among their own sample's ``writes`` message edges, and
    their twins among its ``written_by`` edges, over three training tasks."""
    ex, task, ds = _executor(_job(exclude))
    n_a, n_p = ds.graph.num_nodes["author"], ds.graph.num_nodes["paper"]
    fwd = rev = 0
    for t in range(3):
        s = unpack_sample(pack_sample(ex.sample(0, t)[0]))
        a, p = s.input_nodes["author"], s.input_nodes["paper"]
        src, dst, label = s.pairs
        pos = EdgeSet(torch.stack([a[src[label == 1]], p[dst[label == 1]]]), max(n_a, n_p))
        for b in s.blocks:
            if WRITES in b.edges:
                u, v = b.edges[WRITES]
                fwd += int(pos.contains(a[u], p[v]).sum())
            if WRITTEN_BY in b.edges:
                u, v = b.edges[WRITTEN_BY]
                rev += int(pos.contains(a[v], p[u]).sum())
    return fwd, rev


def test_no_seed_edge_nor_its_reverse_twin_reaches_its_own_sample():
    assert _leaks("reverse") == (0, 0)


def test_the_leakage_check_finds_leaks_with_exclusion_off_or_reverse_kept():
    fwd, rev = _leaks("none")
    assert fwd > 0 and rev > 0, (fwd, rev)
    fwd, rev = _leaks("self")
    assert fwd == 0 and rev > 0, (fwd, rev)


def test_training_negatives_are_of_the_destination_type_and_never_known_edges():
    ex, task, ds = _executor(_job(neg_ratio=3, edge_type="written_by"))  # paper -> author
    assert task.edge_type == WRITTEN_BY
    known = EdgeSet(task.split.train_pos, 400)
    for t in range(3):
        s = ex.sample(1, t)[0]
        src, dst, label = s.pairs
        p, a = s.input_nodes["paper"][src], s.input_nodes["author"][dst]
        assert int(a.max()) < ds.graph.num_nodes["author"]
        assert int((label == 0).sum()) == 3 * int((label == 1).sum())
        assert not bool(known.contains(p[label == 0], a[label == 0]).any())
        assert bool(known.contains(p[label == 1], a[label == 1]).all())
    # the filter matters: on this dense relation unfiltered draws do hit known edges
    gen = torch.Generator().manual_seed(0)
    pos = task.split.train_pos
    raw = typed_negatives(pos[0].repeat(4), 120, 4, gen)
    assert int(known.contains(raw.src, raw.dst).sum()) > 0
    filt = typed_negatives(pos[0].repeat(4), 120, 4, gen, known)
    assert not bool(known.contains(filt.src, filt.dst).any())


def test_split_is_disjoint_per_type_and_removes_reverse_twins_from_the_message_graph():
    ds = load_dataset(SPEC)
    g = ds.graph
    assert reverse_of(g, WRITES) == WRITTEN_BY
    assert reverse_of(g, ("paper", "cites", "paper")) == ("paper", "cited_by", "paper")
    sp = typed_link_split(g, WRITES, val=0.1, test=0.2, eval_neg_ratio=2, seed=1,
                          reverse=WRITTEN_BY)
    n = 400
    key = lambda e: set((e[0] * n + e[1]).tolist())  # noqa: E731
    tr, va, te = key(sp.train_pos), key(sp.val_pos), key(sp.test_pos)
    assert not (tr & va) and not (tr & te) and not (va & te)
    assert tr | va | te == key(g.edge_index(WRITES))
    msg = sp.message_graph(g, "train")
    assert key(msg.edge_index(WRITES)) == tr
    assert key(msg.edge_index(WRITTEN_BY).flip(0)) == tr  # no val/test twin in the reverse
    test_g = sp.message_graph(g, "test")
    assert key(test_g.edge_index(WRITES)) == tr | va
    assert key(test_g.edge_index(WRITTEN_BY).flip(0)) == tr | va
    for et in g.edge_types:
        if et not in (WRITES, WRITTEN_BY):
            assert torch.equal(msg.edge_index(et), g.edge_index(et))
    every = EdgeSet(g.edge_index(WRITES), n)
    for pos, neg in ((sp.val_pos, sp.val_neg), (sp.test_pos, sp.test_neg)):
        assert neg.shape[1] == 2 * pos.shape[1]
        assert torch.equal(neg[0], pos[0].repeat_interleave(2))  # positive-major
        assert not bool(every.contains(neg[0], neg[1]).any())
        assert int(neg[1].max()) < g.num_nodes["paper"]


def test_ranking_metrics_group_each_positive_with_its_own_negatives():
    ds = load_dataset(SPEC)
    task = TypedLinkTask.build(_job(eval_neg_ratio=3, hits_k=(1,)), ds)
    pairs = task.pairs("val")
    n_pos = int(pairs[2].sum())
    scores = np.concatenate([np.full(n_pos, 2.0), np.zeros(3 * n_pos)])
    scores[n_pos] = 5.0  # the first positive's first negative outranks it
    m = task.metrics("val", scores, pairs[2].numpy())
    assert m["hits@1"] == pytest.approx((n_pos - 1) / n_pos)
    assert m["mrr"] == pytest.approx((n_pos - 0.5) / n_pos)


# Measured 2026-11-25 on 2 shared CPU cores (this job): test AUC 0.77-0.81 on 4 logical
# devices after 3-4 epochs; the same job with the training labels shuffled scores 0.50-0.53.
# A dot product of the planted classes alone would reach about 0.80.
def test_typed_link_job_on_four_logical_devices_learns_the_planted_relation(ray_cluster):
    from fgnn import Job

    cfg = JobConfig(dataset="hetero:papers=1000,authors=300,fields=16,seed=0", task="link",
                    sampler=SamplerConfig(fanouts=(5, 5)),
                    model=ModelConfig(name="sage", hidden=32, dropout=0.2),
                    cache=CacheConfig(cache_ratio=0.3),
                    train=TrainConfig(epochs=3, batch_size=128, lr=0.01, seed=0),
                    runtime=RuntimeConfig(devices=4), link=LinkConfig(hits_k=(1,)))
    res = Job(cfg).run().to_dict()
    fin = res["final"]
    assert fin["test_auc"] >= 0.70 and fin["val_auc"] >= 0.70, fin
    assert fin["test_ap"] >= 0.65, fin
    assert 0.0 <= fin["test_mrr"] <= 1.0
    assert res["allocation"]["devices"] == 4
    assert set(res["epochs"][-1]["typed_cache"]) == {"paper", "field"}
    assert res["allocation"]["typed_cache"]["cached_rows"]["author"] == 0


@pytest.mark.parametrize("value, says", [("cited", "'cited' is not a relation"),
                                         ("paper,writes,author", "is not a relation"),
                                         ("a,b", "is not a relation")])
def test_a_bad_link_edge_type_is_one_line_listing_the_relations(value, says, cli_error):
    line = cli_error(["--dataset", "hetero:papers=200,authors=50", "--model", "sage",
                            "--task", "link", "--link-edge-type", value])
    assert line.startswith("launch.py: error: argument --link-edge-type: "), line
    assert says in line and "author,writes,paper" in line, line


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_the_model_embeds_both_endpoint_types_and_trains_through_the_decoder(decoder):
    from fgnn.tasks.link_typed import build_typed_link_model
    from fgnn.tasks.link import pair_loss
    from fgnn.models.hetero_sage import hetero_inputs

    cfg = _job(decoder=decoder)
    ex, task, ds = _executor(cfg)
    torch.manual_seed(0)
    train = task.training_dataset(ds)
    model = build_typed_link_model(cfg, train, task.edge_type, 2)
    s = unpack_sample(pack_sample(ex.sample(0, 0)[0]))
    h = model(s.blocks, hetero_inputs(train.graph, s))
    n_src, n_dst = int(s.pairs[0].max()) + 1, int(s.pairs[1].max()) + 1
    assert h["author"].shape[0] >= n_src and h["paper"].shape[0] >= n_dst
    assert h["author"].shape[1] == h["paper"].shape[1] == cfg.link.embed_dim
    pair_loss(model, h, s.pairs).backward()
    emb = model.encoder.embed["author"].weight.grad   # authors have no features: learned
    assert emb is not None and float(emb.abs().sum()) > 0


def test_a_typed_ondisk_graph_without_a_default_relation_asks_for_one(tmp_path, cli_error):
    from fgnn.data.ondisk_hetero import save_ondisk_hetero

    ds = load_dataset("hetero:papers=100,authors=30")
    root = save_ondisk_hetero(ds.graph, tmp_path / "typed", num_classes=ds.num_classes)
    line = cli_error(["--dataset", f"ondisk:{root}", "--model", "sage", "--task", "link"])
    assert line.startswith("launch.py: error: argument --link-edge-type: "), line
    assert "has 6 relations, name the one to predict" in line, line


def _symmetric_graph():
    """The planted graph plus ``paper-similar->paper``, symmetric (its own reverse)."""
    from fgnn import HeteroGraph

    g = load_dataset(SPEC).graph
    cites = g.edge_index(("paper", "cites", "paper"))
    sim = torch.unique(torch.cat([cites, cites.flip(0)], dim=1), dim=1)
    ei = {et: g.edge_index(et) for et in g.edge_types}
    ei[("paper", "similar", "paper")] = sim
    return HeteroGraph.from_edge_index(g.num_nodes, ei, g.features, g.labels, g.target_type)


def test_a_symmetric_relation_is_split_as_unordered_pairs_with_both_directions_excluded():
    from fgnn.tasks.link_typed import TypedLinkSampling, seed_edge_filter

    g = _symmetric_graph()
    sim = ("paper", "similar", "paper")
    assert reverse_of(g, sim) == sim and reverse_of(g, WRITES) == WRITTEN_BY
    sp = typed_link_split(g, sim, val=0.1, test=0.2, seed=0, reverse=sim)
    und = lambda e: set((torch.minimum(e[0], e[1]) * 400  # noqa: E731
                         + torch.maximum(e[0], e[1])).tolist())
    tr, va, te = und(sp.train_pos), und(sp.val_pos), und(sp.test_pos)
    assert not (tr & va) and not (tr & te) and not (va & te)
    assert tr | va | te == und(g.edge_index(sim))
    msg = sp.message_graph(g, "train").edge_index(sim)
    assert und(msg) == tr and msg.shape[1] == 2 * len(tr) - int((sp.train_pos[0]
                                                                  == sp.train_pos[1]).sum())
    every = EdgeSet(g.edge_index(sim), 400)
    assert not bool(every.contains(sp.val_neg[0], sp.val_neg[1]).any())
    # exclusion drops both directions of a seed pair in the relation itself
    pos = sp.train_pos[:, sp.train_pos[0] != sp.train_pos[1]][:, :50]
    keep = seed_edge_filter(pos, sim, sim, g.num_nodes, "reverse")
    assert not bool(keep(sim, pos[0], pos[1]).any()) and not bool(keep(sim, pos[1], pos[0]).any())
    keep = seed_edge_filter(pos, sim, sim, g.num_nodes, "self")
    assert not bool(keep(sim, pos[0], pos[1]).any()) and bool(keep(sim, pos[1], pos[0]).all())
    cfg = JobConfig(task="link", link=LinkConfig(edge_type="similar", neg_ratio=2))
    task = TypedLinkTask.build(cfg, _symmetric_dataset(g))
    samp = TypedLinkSampling(task.payload(), HeteroKHop((1000, 1000)))
    train_g = task.training_dataset(_symmetric_dataset(g)).graph
    s = samp.train_sample(train_g, torch.arange(64), torch.Generator().manual_seed(0))
    p = s.input_nodes["paper"]
    src, dst, label = s.pairs
    seeds = EdgeSet(torch.stack([p[src[label == 1]], p[dst[label == 1]]]), 400, undirected=True)
    for b in s.blocks:
        u, v = b.edges[sim]
        assert not bool(seeds.contains(p[u], p[v]).any())
    known = EdgeSet(task.split.train_pos, 400, undirected=True)
    assert not bool(known.contains(p[src[label == 0]], p[dst[label == 0]]).any())


def _symmetric_dataset(g):
    from fgnn.data.dataset_hetero import HeteroDataset

    return HeteroDataset.from_graph(g, name="sym", check_features=False)


@pytest.mark.parametrize("spec", ["author,writes,paper", "author:writes:paper",
                                  "author-writes->paper", "writes", None])
def test_link_edge_type_spellings(spec):
    from fgnn.link.hetero import resolve_edge_type

    assert resolve_edge_type(load_dataset(SPEC).graph, spec) == WRITES


# ------------------------------------------------------------------ --resume of a typed link job
RESUME_SPEC = "hetero:papers=200,authors=60,fields=8,seed=3"
CITES, CITED_BY = "paper,cites,paper", "paper,cited_by,paper"


def _typed_checkpoint(directory, task: str = "link", edge_type: str = CITES,
                      drop: tuple[str, ...] = ()) -> bytes:
    """The checkpoint a typed job's Runtime writes after epoch 0 (no Ray), without the job
    identity's fields ``drop`` (as an older fgnn wrote it); returns its bytes."""
    from pathlib import Path

    from fgnn.checkpoint import save_checkpoint
    from fgnn.cli import build_parser, config_from_args
    from fgnn.runtime.driver import CHECKPOINT_NAME, Runtime

    argv = ["--dataset", RESUME_SPEC, "--model", "sage", "--task", task]
    if task == "link":
        argv += ["--link-edge-type", edge_type]
    rt = Runtime(config_from_args(build_parser().parse_args(argv)), load_dataset(RESUME_SPEC))
    path = Path(directory) / CHECKPOINT_NAME
    extra = rt.checkpointer.extra(0)
    extra["job"] = {k: v for k, v in extra["job"].items() if k not in drop}
    save_checkpoint(path, rt.model, torch.optim.Adam(rt.model.parameters()), 0, extra=extra)
    return path.read_bytes()


def _resume_argv(directory, edge_type: str) -> list[str]:
    return ["--dataset", RESUME_SPEC, "--model", "sage", "--task", "link", "--link-edge-type",
            edge_type, "--resume", "--checkpoint-dir", str(directory),
            "--report", str(directory / "r.json")]


def test_resuming_another_relation_of_the_same_size_is_refused_in_one_line(
        tmp_path, monkeypatch, cli_error):
    """``cites`` and ``cited_by`` have as many edges and the same model shapes: only the
    recorded relation tells the checkpoints apart. The refusal names the field and both values,
    exits 2 before Ray and writes nothing."""
    from test_checkpoint import _no_ray

    saved = _typed_checkpoint(tmp_path, edge_type=CITES)
    _no_ray(monkeypatch)
    line = cli_error(_resume_argv(tmp_path, CITED_BY))
    assert line.startswith("launch.py: error: argument --checkpoint-dir: "), line
    assert (f"was trained for link.edge_type {CITES}, but this job has link.edge_type "
            f"{CITED_BY}") in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runtime.pt"]
    assert (tmp_path / "runtime.pt").read_bytes() == saved


def test_resuming_a_typed_node_checkpoint_as_a_link_job_names_both_tasks(
        tmp_path, monkeypatch, cli_error):
    from test_checkpoint import _no_ray

    _typed_checkpoint(tmp_path, task="node")
    _no_ray(monkeypatch)
    line = cli_error(_resume_argv(tmp_path, CITES))
    assert "was trained for task node, but this job has task link" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runtime.pt"]


@pytest.mark.parametrize("spelling", [CITES, "cites"])
def test_resuming_the_same_relation_passes_every_check(tmp_path, monkeypatch, capsys, spelling):
    """The same relation (in any spelling) gets past every check and only then starts Ray."""
    from fgnn.cli import main
    from test_checkpoint import _no_ray

    _typed_checkpoint(tmp_path, edge_type=CITES)
    _no_ray(monkeypatch)
    assert main(_resume_argv(tmp_path, spelling) + ["--no-progress", "--ray"]) == 1
    assert "Ray was started" in capsys.readouterr().err


def test_a_checkpoint_that_records_no_relation_is_refused_by_a_typed_link_job(
        tmp_path, monkeypatch, cli_error):
    """Written before checkpoints recorded the relation: nothing tells which one it was
    trained for, so a typed link job refuses it (even for the relation it was trained for)."""
    from test_checkpoint import _no_ray

    _typed_checkpoint(tmp_path, edge_type=CITES, drop=("link",))
    _no_ray(monkeypatch)
    line = cli_error(_resume_argv(tmp_path, CITES))
    assert (f"records no link.edge_type (written by an fgnn before checkpoints recorded the "
            f"relation), so nothing tells which relation it was trained for; this job has "
            f"link.edge_type {CITES}") in line, line


def test_a_node_checkpoint_without_task_or_relation_still_resumes(tmp_path, monkeypatch, capsys):
    """Written before checkpoints recorded the task: a node job has no relation to compare,
    and the model and dataset checks still pass it."""
    from fgnn.cli import main
    from test_checkpoint import _no_ray

    _typed_checkpoint(tmp_path, task="node", drop=("task", "link"))
    _no_ray(monkeypatch)
    assert main(["--dataset", RESUME_SPEC, "--model", "sage", "--resume", "--checkpoint-dir",
                 str(tmp_path), "--no-progress", "--ray"]) == 1
    assert "Ray was started" in capsys.readouterr().err


def test_a_typed_link_run_resumes_its_relation_and_refuses_another(ray_cluster, tmp_path,
                                                                    capsys):
    """Through ``launch.py`` with Ray: the checkpoint of a ``cites`` run is refused by a
    ``cited_by`` job (exit 2, one line, nothing written, the checkpoint unchanged) and resumed
    by the ``cites`` job, which runs only the epoch left."""
    from fgnn.cli import main
    from fgnn.report import load_report

    ck = tmp_path / "ck"
    argv = ["--dataset", RESUME_SPEC, "--model", "sage", "--hidden", "16", "--fanouts", "5,5",
            "--task", "link", "--devices", "2", "--batch-size", "256", "--no-progress",
            "--dashboard-host", "off", "--checkpoint-dir", str(ck)]
    assert main(argv + ["--link-edge-type", "cites", "--epochs", "1"]) == 0
    saved = (ck / "runtime.pt").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv + ["--link-edge-type", CITED_BY, "--epochs", "2", "--resume",
                     "--report", str(tmp_path / "other.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert (f"was trained for link.edge_type {CITES}, but this job has link.edge_type "
            f"{CITED_BY}") in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert sorted(p.name for p in ck.iterdir()) == ["runtime.pt"]
    assert (ck / "runtime.pt").read_bytes() == saved
    resumed = tmp_path / "r2.json"
    assert main(argv + ["--link-edge-type", CITES, "--epochs", "2", "--resume",
                        "--report", str(resumed)]) == 0
    rep = load_report(resumed)
    assert [ep["epoch"] for ep in rep["epochs"]] == [1]
    assert rep["config"]["link"]["edge_type"] == CITES


def test_an_untyped_link_checkpoint_records_no_relation_and_resumes(tmp_path, monkeypatch,
                                                                     capsys):
    """A link job on a homogeneous graph records ``link.edge_type`` None and resumes."""
    from pathlib import Path

    from fgnn.checkpoint import read_checkpoint, save_checkpoint
    from fgnn.cli import build_parser, config_from_args, main
    from fgnn.runtime.driver import CHECKPOINT_NAME, Runtime
    from test_checkpoint import TINY, _no_ray

    argv = ["--dataset", TINY, "--model", "sage", "--task", "link"]
    rt = Runtime(config_from_args(build_parser().parse_args(argv)), load_dataset(TINY))
    path = Path(tmp_path) / CHECKPOINT_NAME
    save_checkpoint(path, rt.model, torch.optim.Adam(rt.model.parameters()), 0,
                    extra=rt.checkpointer.extra(0))
    job = read_checkpoint(path)["extra"]["job"]
    assert (job["task"], job["link"]) == ("link", {"edge_type": None})
    _no_ray(monkeypatch)
    assert main(argv + ["--resume", "--checkpoint-dir", str(tmp_path), "--no-progress",
                        "--ray"]) == 1
    assert "Ray was started" in capsys.readouterr().err
