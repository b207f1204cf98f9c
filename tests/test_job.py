"""fgnn.Job end to end (one shared Ray instance), with the sampler and model from docs/api.md."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import ray
import torch

import fgnn
from fgnn.config import JobConfig, RuntimeConfig, SamplerConfig, TrainConfig
from fgnn.data import load_dataset
from fgnn.job import Job, JobConfigError, check_address, describe_devices
from fgnn.report import png_path_for, validate_report

REPO = Path(__file__).resolve().parents[1]
TINY = "rmat:scale=8,edge_factor=4,feat_dim=16,num_classes=4,train_frac=0.3,seed=1"


def _doc_namespace() -> dict:
    """Exec the example classes of docs/api.md (their ``__main__`` parts do not run)."""
    text = (REPO / "docs" / "api.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
              if "class " in b and "torch_geometric" not in b]  # PyG's: tests/test_pyg_blocks.py
    assert len(blocks) == 3, "docs/api.md should hold the sampler, model and task examples"
    ns: dict = {"__name__": "fgnn_api_doc"}  # not importable: Ray pickles the classes by value
    for b in blocks:
        exec(compile(b, "docs/api.md", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def doc():
    return _doc_namespace()


def test_doc_sampler_builds_valid_samples(doc):
    #   3 ──> 0 <── 1 <── 2 <── 3      edge u -> v: v aggregates from (samples) u
    g = fgnn.CSRGraph.from_edge_index(torch.tensor([[1, 2, 3, 3], [0, 1, 0, 2]]), num_nodes=4)
    s = doc["FigureSevenKHop"](sizes=(2, 2)).sample(g, torch.tensor([0]),
                                                    torch.Generator().manual_seed(0))
    assert s.num_layers == 2
    assert s.input_nodes[0].item() == 0                     # seeds first
    assert len(set(s.input_nodes.tolist())) == s.input_nodes.numel()
    out, inp = s.blocks[-1], s.blocks[0]
    assert out.num_dst == 1 and inp.num_src == s.input_nodes.numel()
    assert out.num_src == inp.num_dst                       # layers chain
    for b in s.blocks:
        assert b.num_dst <= b.num_src
        assert int(b.src.max()) < b.num_src and int(b.dst.max()) < b.num_dst
        for u, v in zip(b.src.tolist(), b.dst.tolist()):   # every edge is a real edge
            gu, gv = s.input_nodes[u].item(), s.input_nodes[v].item()
            assert gu in g.indices[g.indptr[gv]:g.indptr[gv + 1]].tolist()


def test_doc_model_shapes(doc):
    g = fgnn.CSRGraph.from_edge_index(torch.tensor([[1, 2, 3, 3], [0, 1, 0, 2]]), num_nodes=4)
    s = doc["FigureSevenKHop"](sizes=(2, 2)).sample(g, torch.tensor([0, 2]))
    model = doc["MeanSAGE"](in_dim=5, num_classes=3, hidden=8, num_layers=2)
    out = model(s.blocks, torch.randn(s.input_nodes.numel(), 5))
    assert out.shape == (2, 3)


def test_job_with_custom_sampler_and_model(doc, ray_cluster, tmp_path):
    data = load_dataset(TINY)
    cfg = JobConfig(dataset=TINY, sampler=SamplerConfig(fanouts=(4, 4)),
                    runtime=RuntimeConfig(devices=2, samplers=1),
                    train=TrainConfig(epochs=2, batch_size=32, lr=0.01),
                    report=str(tmp_path / "out" / "r.json"))
    out = io.StringIO()
    model = doc["MeanSAGE"](data.feat_dim, data.num_classes, hidden=16, num_layers=2)
    job = fgnn.Job(cfg, sampler=doc["FigureSevenKHop"](sizes=(4, 4)), model=model,
                   dataset=data, progress=False, out=out)
    result = job.run()

    assert ray.is_initialized()  # a Ray the caller started stays up
    assert isinstance(result, fgnn.RunResult) and isinstance(job.model, torch.nn.Module)
    log = out.getvalue()
    assert "2 devices" in log and "report" in log
    assert job.dashboard_url is None and "dashboard off" in log
    report = json.loads(Path(cfg.report).read_text())
    validate_report(report)
    assert report["mode"] == "factored"
    assert report["allocation"]["devices"] == 2 and report["allocation"]["samplers"] == 1
    assert report["allocation"]["device_kind"] in ("gpu", "logical")
    assert report["preprocess"]["load_s"] >= 0
    assert len(report["epochs"]) == 2 and all(e["batches"] > 0 for e in report["epochs"])
    assert report["config"]["runtime"]["devices"] == 2
    # the report and the console name the model that ran: the custom one by its class
    assert report["allocation"]["model"] == "MeanSAGE" and "model MeanSAGE" in log
    from fgnn.report import format_report
    assert "model MeanSAGE" in format_report(report)
    assert png_path_for(cfg.report).read_bytes()[:4] == b"\x89PNG"
    # a Job runs once: a second run would start from these weights and report it as fresh
    weights = {k: v.clone() for k, v in job.model.state_dict().items()}
    with pytest.raises(RuntimeError, match=r"has run already.*create a new fgnn\.Job"):
        job.run()
    assert all(torch.equal(v, job.model.state_dict()[k]) for k, v in weights.items())
    assert job.result is result


def test_doc_task_registers_and_trains_through_a_job(doc, ray_cluster, tmp_path):
    from fgnn.tasks import TASKS, register_task

    step = doc["SmoothedStep"](0.2)
    out, labels = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    assert torch.allclose(step.loss(None, out, None, labels), torch.nn.functional.cross_entropy(
        out, labels, label_smoothing=0.2))
    if "smoothed-node" not in TASKS:
        register_task("smoothed-node", lambda config, dataset, model:
                      doc["SmoothedNodeTask"](0.1))
    cfg = JobConfig(dataset=TINY, task="smoothed-node", sampler=SamplerConfig(fanouts=(4, 4)),
                    runtime=RuntimeConfig(devices=2), train=TrainConfig(epochs=2, batch_size=32),
                    report=str(tmp_path / "r.json"))
    result = fgnn.Job(cfg, progress=False, out=io.StringIO()).run()
    assert len(result.epochs) == 2 and all(e.loss == e.loss for e in result.epochs)
    report = json.loads(Path(cfg.report).read_text())
    validate_report(report)
    assert report["config"]["task"] == "smoothed-node"


def test_job_rejects_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="JobConfig"):
        Job({"dataset": "cora"})
    with pytest.raises(TypeError, match="Sampler"):
        Job(JobConfig(), sampler=lambda g, s: None)
    with pytest.raises(TypeError, match="Module"):
        Job(JobConfig(), model=object())
    with pytest.raises(JobConfigError, match="data_root"):
        Job(JobConfig(dataset="cora", data_root=str(tmp_path / "missing"))).validate()
    with pytest.raises(JobConfigError, match=r"report.*directory"):
        Job(JobConfig(report=str(tmp_path))).validate()


def test_check_address():
    check_address(None)
    check_address("auto")
    with pytest.raises(JobConfigError, match="HOST:PORT"):
        check_address("nonsense")
    with pytest.raises(JobConfigError, match="cannot reach"):
        check_address("ray://127.0.0.1:1", timeout=1.0)


def test_describe_devices():
    kind, line = describe_devices(8)
    if torch.cuda.device_count() >= 8:
        assert kind == "gpu" and "CUDA" in line
    else:
        assert kind == "logical" and "8 devices: Ray logical GPUs on CPU" in line
    kind, line = describe_devices(4, cluster_gpus=6)
    assert "Ray cluster" in line and "6 GPU" in line


def test_empty_test_split_trains_and_writes_its_report(ray_cluster, tmp_path):
    data = load_dataset(TINY)
    data.test_idx = torch.zeros(0, dtype=torch.int64)
    cfg = JobConfig(dataset=TINY, sampler=SamplerConfig(fanouts=(4, 4)),
                    runtime=RuntimeConfig(devices=2), train=TrainConfig(epochs=1, batch_size=32),
                    report=str(tmp_path / "r.json"))
    with pytest.warns(UserWarning, match="test_idx is empty"):
        fgnn.Job(cfg, dataset=data, progress=False, out=io.StringIO()).run()
    report = json.loads(Path(cfg.report).read_text())
    validate_report(report)
    assert report["final"]["test_acc"] is None and report["final"]["val_acc"] is not None


def test_patience_with_an_empty_validation_split_is_refused_before_ray(tmp_path):
    data = load_dataset(TINY)
    data.val_idx = torch.zeros(0, dtype=torch.int64)
    cfg = JobConfig(dataset=TINY, train=TrainConfig(epochs=2, patience=2),
                    report=str(tmp_path / "r.json"))
    with pytest.raises(JobConfigError, match=r"train.patience.*empty validation split"):
        fgnn.Job(cfg, dataset=data, progress=False, out=io.StringIO()).run()
    assert not (tmp_path / "r.json").exists()


def test_an_auto_batch_is_said_in_one_line_and_recorded(ray_cluster, tmp_path):
    """No batch size set: the job settles one from the training split, prints it and records
    it with the recipe it resolved (issue 31)."""
    data = load_dataset(TINY)
    n = int(data.train_idx.numel())
    out = io.StringIO()
    cfg = JobConfig(dataset=TINY, sampler=SamplerConfig(fanouts=(4, 4)),
                    runtime=RuntimeConfig(devices=2), train=TrainConfig(epochs=1),
                    report=str(tmp_path / "r.json"))
    job = fgnn.Job(cfg, dataset=data, progress=False, out=out)
    job.run()
    batch = -(-n // 10)
    assert (f"fgnn: batch size {batch} ({n} training nodes; set --batch-size to override)"
            in out.getvalue().splitlines())
    report = json.loads(Path(cfg.report).read_text())
    assert report["config"]["train"]["batch_size"] == batch
    assert report["config"]["recipe"] == "fgnn-7.1" and job.config.recipe == "fgnn-7.1"
    assert report["epochs"][0]["ledger"]["tasks"] >= 10        # about ten steps, not one
