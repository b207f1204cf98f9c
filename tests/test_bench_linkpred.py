"""bench/linkpred.py: what its two sides share (split, negatives, initial weights, GCN math),
checked without PyG's neighbour sampler (torch_sparse / pyg-lib)."""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter
from pathlib import Path

import pytest
import torch

from fgnn.graph import CSRGraph

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_linkpred", REPO / "bench" / "linkpred.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _graph(n: int = 80, m: int = 500, seed: int = 0) -> CSRGraph:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    return CSRGraph.from_edge_index(ei, num_nodes=n, symmetrize=True, dedup=True)


def _pairs(t: torch.Tensor) -> Counter:
    return Counter(map(tuple, t.t().tolist()))


def test_epoch_batches_are_fgnn_draws_of_the_shared_split():
    """Every training edge once per epoch, in batches of ``batch_size``, each followed by
    ``neg_ratio`` negatives per positive that keep its source, are never a known edge nor a
    loop, and are labelled 0; the same generator seed gives the same epoch."""
    bench = _bench()
    split = bench.make_split(_graph(), seed=3)
    known = split.known_edges("train")
    batches = bench.epoch_batches(split, known, 16, 2, torch.Generator().manual_seed(5))
    seen = Counter()
    for pairs, label in batches:
        p = int(label.sum())
        assert label.tolist() == [1.0] * p + [0.0] * (2 * p) and 0 < p <= 16
        pos, neg = pairs[:, :p], pairs[:, p:]
        seen += _pairs(pos)
        assert torch.equal(neg[0], pos[0].repeat_interleave(2))           # source kept
        assert not bool(known.contains(neg[0], neg[1]).any())
        assert not bool((neg[0] == neg[1]).any())
    assert seen == _pairs(split.train_pos)                                # each edge once
    again = bench.epoch_batches(split, known, 16, 2, torch.Generator().manual_seed(5))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))


def test_pyg_message_graph_is_the_split_training_graph():
    """PyG's ``edge_index`` holds both directions of the training message edges and no
    validation or test edge; the test graph adds the validation edges."""
    bench = _bench()
    split = bench.make_split(_graph(), seed=1)
    ei = bench.message_edge_index(split, "train")
    msg = split.train_message
    assert set(_pairs(ei)) == set(_pairs(msg)) | set(_pairs(msg.flip(0)))
    held = set(_pairs(split.val_pos)) | set(_pairs(split.test_pos))
    assert not held & set(_pairs(ei)) and not held & set(_pairs(ei.flip(0)))
    test_ei = bench.message_edge_index(split, "test")
    assert set(_pairs(test_ei)) == set(_pairs(ei)) | set(_pairs(split.val_pos)) | set(
        _pairs(split.val_pos.flip(0)))


def test_ranking_negatives_are_filtered_per_test_source():
    bench = _bench()
    split = bench.make_split(_graph(), seed=2)
    neg = bench.ranking_negatives(split, 7, seed=2)
    assert neg.shape == (split.test_pos.shape[1], 7)
    src = split.test_pos[0].unsqueeze(1).expand_as(neg).reshape(-1)
    assert not bool(split.known_edges("test").contains(src, neg.reshape(-1)).any())


def test_pyg_encoder_with_fgnn_weights_gives_fgnn_embeddings():
    """``--pyg-conv mean`` is fgnn's GCN math: with fgnn's initial weights loaded, PyG's
    full-graph embeddings equal fgnn's full-neighbour ones; ``gcn`` (symmetric
    normalisation) does not."""
    pytest.importorskip("torch_geometric")
    from fgnn.link.training import embed_all

    bench = _bench()
    graph = _graph()
    feats = torch.randn(graph.num_nodes, 12, generator=torch.Generator().manual_seed(0))
    args = argparse.Namespace(hidden=8, dim=4, pyg_conv="mean")
    fg = bench.init_encoder(12, args, seed=0)
    want = embed_all(fg, feats, graph)
    for conv, same in (("mean", True), ("gcn", False)):
        args.pyg_conv = conv
        enc = bench.pyg_encoder(12, args)
        enc.load_state_dict(fg.state_dict())
        with torch.no_grad():
            got = enc(feats, graph.edge_index())
        assert torch.allclose(got, want, atol=1e-5) is same, conv


def test_main_stops_with_one_line_without_pyg(monkeypatch, capsys):
    bench = _bench()
    monkeypatch.setattr(bench, "pyg_missing", lambda: "torch_sparse is missing")
    assert bench.main(["--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "torch_sparse is missing" in err
    assert "--fgnn-only" in err
