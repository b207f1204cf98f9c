import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fgnn.graph import CSRGraph

from conftest import random_graph

# 0 -> 1, 1 -> 2, 2 -> 0, 2 -> 1   (row = destination: the neighbours it aggregates from)
EDGES = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])


def test_from_edge_index_rows_are_destinations():
    g = CSRGraph.from_edge_index(EDGES, num_nodes=3)
    assert g.indptr.tolist() == [0, 1, 3, 4]
    assert g.indices.tolist() == [2, 0, 2, 1]
    assert g.degrees().tolist() == [1, 2, 1]
    assert g.in_degrees().tolist() == [1, 1, 2]


def test_reverse_transposes_and_roundtrips():
    g = random_graph(50, 300, seed=1, weighted=True)
    r = g.reverse()
    assert r.num_edges == g.num_edges
    src, dst = g.edge_index()
    rsrc, rdst = r.edge_index()
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(zip(rdst.tolist(), rsrc.tolist()))
    rr = r.reverse()
    assert torch.equal(rr.indptr, g.indptr) and torch.equal(rr.indices, g.indices)
    assert torch.allclose(rr.weights, g.weights)


def test_symmetrize_and_dedup():
    g = CSRGraph.from_edge_index(torch.tensor([[0, 0, 1], [1, 1, 0]]), symmetrize=True, dedup=True)
    assert g.num_edges == 2
    assert g.indices.tolist() == [1, 0]


def test_from_scipy_keeps_weights():
    m = sp.csr_matrix(np.array([[0, 2.0, 0], [0, 0, 3.0], [1.0, 0, 0]]))
    g = CSRGraph.from_scipy(m)
    assert g.indices.tolist() == [1, 2, 0]
    assert g.weights.tolist() == [2.0, 3.0, 1.0]


def test_to_device(device):
    g = random_graph(20, 60).to(device)
    assert g.indptr.device.type == torch.device(device).type
    assert g.pin_memory().num_edges == 60


@pytest.mark.parametrize("indptr,indices,match", [
    ([0, 2, 1, 2], [0, 1], "non-decreasing"),
    ([0, 1, 2], [0, 5], "outside"),
    ([1, 1, 2], [0, 1], r"indptr\[0\]"),
    ([0, 1, 3], [0, 1], "does not match"),
])
def test_inconsistent_csr_is_rejected(indptr, indices, match):
    with pytest.raises(ValueError, match=match):
        CSRGraph(torch.tensor(indptr), torch.tensor(indices))


def test_bad_edge_index_is_rejected():
    with pytest.raises(ValueError, match="shape"):
        CSRGraph.from_edge_index(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="negative"):
        CSRGraph.from_edge_index(torch.tensor([[0, -1], [1, 0]]))
    with pytest.raises(ValueError, match="num_nodes"):
        CSRGraph.from_edge_index(torch.tensor([[0, 7], [1, 0]]), num_nodes=3)
    with pytest.raises(ValueError, match="non-negative"):
        CSRGraph.from_edge_index(EDGES, weights=torch.tensor([1.0, -1.0, 1.0, 1.0]))
