"""Shared fixtures: device parametrisation, the Planetoid data root, seeded random graphs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from fgnn.graph import CSRGraph

REPO = Path(__file__).resolve().parents[1]
PLANETOID_ROOT = Path(os.environ.get("FGNN_PLANETOID_ROOT",
                                     REPO.parent / "shared" / "data" / "planetoid"))


def _devices() -> list[str]:
    devs = ["cpu"]
    if torch.cuda.is_available():
        devs.append("cuda:0")
    return devs


@pytest.fixture(params=_devices())
def device(request) -> str:
    """Every device-aware test runs on CPU and, when present, on the first GPU."""
    return request.param


@pytest.fixture
def planetoid_root() -> Path:
    """Directory with the raw Planetoid files; skips with the reason when absent."""
    if not (PLANETOID_ROOT / "ind.cora.graph").exists():
        pytest.skip(f"Planetoid files not found under {PLANETOID_ROOT} "
                    f"(set FGNN_PLANETOID_ROOT)")
    return PLANETOID_ROOT


def random_graph(num_nodes: int, num_edges: int, seed: int = 0,
                 weighted: bool = False) -> CSRGraph:
    """A seeded uniform random directed graph (test helper)."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    w = torch.rand(num_edges, generator=g) + 0.1 if weighted else None
    return CSRGraph.from_edge_index(ei, num_nodes=num_nodes, weights=w)
