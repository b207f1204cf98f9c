"""PyG layers run on fgnn's blocks unchanged (issue 39): ``Block.edge_index`` and ``Block.size``
are what PyG's ``MessagePassing`` reads, and docs/api.md's model of PyG layers trains through a
``Job`` -- with a local layer that consumes ``edge_index`` and ``size`` exactly as PyG's
``SAGEConv`` does, and with PyG's own where ``torch_geometric`` is installed."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import fgnn
from fgnn.config import JobConfig, SamplerConfig, TrainConfig
from fgnn.sampling import KHop
from fgnn.sampling.base import Block

REPO = Path(__file__).resolve().parents[1]
IMPORT = "from torch_geometric.nn import SAGEConv\n"


class LocalSAGEConv(nn.Module):
    """PyG's ``SAGEConv(aggr="mean")`` contract, written out: ``forward(x, edge_index,
    size)`` with ``x`` a ``(x_src, x_dst)`` pair, messages from ``edge_index[0]`` (``j``, among
    ``size[0]`` sources) to ``edge_index[1]`` (``i``, among ``size[1]`` targets), PyG's size
    checks, then ``lin_l(mean_j x_j) + lin_r(x_i)``."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin_l = nn.Linear(in_dim, out_dim)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, x, edge_index: torch.Tensor, size=None) -> torch.Tensor:
        x_src, x_dst = x if isinstance(x, tuple) else (x, x)
        assert edge_index.dim() == 2 and edge_index.shape[0] == 2 and edge_index.dtype == torch.long
        if size is None:
            size = (x_src.shape[0], x_dst.shape[0])
        # MessagePassing._set_size: a tensor's rows must match the size given for its side
        if x_src.shape[0] != size[0] or x_dst.shape[0] != size[1]:
            raise ValueError(f"Encountered tensor with size {x_src.shape[0]}/{x_dst.shape[0]} "
                             f"in dimension 0, but expected size {size}")
        j, i = edge_index[0], edge_index[1]
        assert bool((j < size[0]).all()) and bool((i < size[1]).all())
        total = x_src.new_zeros(size[1], x_src.shape[1]).index_add_(0, i, x_src[j])
        count = torch.bincount(i, minlength=size[1]).clamp_min(1).unsqueeze(-1)
        return self.lin_l(total / count) + self.lin_r(x_dst)


def _doc_model(conv: type) -> type:
    """The PyG-layer model class of docs/api.md, its ``SAGEConv`` being ``conv``."""
    text = (REPO / "docs" / "api.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                 if "torch_geometric" in b and "class " in b)
    assert IMPORT in block
    ns: dict = {"__name__": "fgnn_pyg_doc", "SAGEConv": conv}
    exec(compile(block.replace(IMPORT, ""), "docs/api.md", "exec"), ns)
    return ns["PyGSAGE"]


def test_a_block_gives_pygs_edge_index_and_size():
    b = Block(torch.tensor([2, 3, 0]), torch.tensor([0, 1, 1]), num_src=4, num_dst=2)
    assert torch.equal(b.edge_index, torch.tensor([[2, 3, 0], [0, 1, 1]]))
    assert b.size == (4, 2) and b.edge_index.dtype == torch.long


def test_the_local_layer_runs_on_sampled_blocks(tiny_graph_and_features):
    graph, x = tiny_graph_and_features
    s = KHop((3, 3)).sample(graph, torch.tensor([0, 5, 9]), torch.Generator().manual_seed(0))
    model = _doc_model(LocalSAGEConv)(x.shape[1], 4, hidden=8)
    assert model(s.blocks, x[s.input_nodes]).shape == (3, 4)


@pytest.fixture
def tiny_graph_and_features():
    from fgnn.data import load_dataset

    ds = load_dataset("rmat:scale=7,edge_factor=4,feat_dim=8,num_classes=4,seed=2")
    return ds.graph, ds.features.tensor() if hasattr(ds.features, "tensor") else ds.features


def _train(conv: type, root: Path) -> dict:
    from fgnn.data import load_dataset

    data = load_dataset("cora", str(root))
    cfg = JobConfig(dataset="cora", data_root=str(root), sampler=SamplerConfig(fanouts=(10, 10)),
                    train=TrainConfig(epochs=30, batch_size=140, lr=0.01, weight_decay=5e-4,
                                      seed=0))
    model = _doc_model(conv)(data.feat_dim, data.num_classes)
    job = fgnn.Job(cfg, model=model, dataset=data, progress=False, out=io.StringIO())
    result = job.run()
    assert result.allocation["model"] == "PyGSAGE"
    return result.final


def test_the_doc_model_of_pyg_layers_trains_through_a_job(planetoid_root):
    final = _train(LocalSAGEConv, planetoid_root)
    assert final["test_acc"] > 0.7, final          # a 2-layer GraphSAGE on Cora: about 0.78


def test_pygs_own_sageconv_trains_through_a_job(planetoid_root):
    pyg = pytest.importorskip("torch_geometric.nn")
    final = _train(pyg.SAGEConv, planetoid_root)
    assert final["test_acc"] > 0.7, final


def test_pygs_gatconv_trains_through_a_job(planetoid_root):
    """bench/pyg_model.py's model of two PyG ``GATConv`` layers (their default self loops) on
    fgnn's blocks, with the ``velickovic`` recipe's settings of ``--model gat``: the Job names it
    and it learns Cora in 40 epochs (the full 200 reach about 82%: docs/benchmarks.md)."""
    pytest.importorskip("torch_geometric.nn")
    from conftest import load_bench

    bench = load_bench("pyg_model")
    cfg = bench.gat_config(str(planetoid_root), seed=0, epochs=40)
    assert cfg.recipe == "velickovic" and cfg.model.heads == 8 and cfg.model.dropout == 0.6
    model = bench.pyg_model_for(cfg, 1433, 7)
    assert [type(c).__name__ for c in model.convs] == ["GATConv", "GATConv"]
    assert model.convs[0].heads == 8 and model.convs[0].add_self_loops
    row = bench.run_side("pyg", cfg)
    assert row["model"] == "PyGGAT" and row["recipe"] == "velickovic"
    assert row["test_acc"] > 0.7, row               # untrained: about 0.14 (7 classes)
