"""A fanout far above every degree (``--fanouts 100000`` on Cora) is clamped by the degree.

The old sampler ran Floyd's algorithm with a Python loop of ``fanout²/2`` vector comparisons per
hop, so a fanout of 100000 ran for minutes with no output. Now the aten ops a hop dispatches do
not grow with the fanout (a hop keeps ``min(fanout, degree)`` neighbours per vertex), and the
sample is every neighbour of every vertex reached. Its time is measured by
``bench/sampling.py`` (``huge_fanout``), not asserted here.
"""

from __future__ import annotations

import torch

from fgnn.data import load_planetoid
from fgnn.monitor.dispatch_count import count_dispatch
from fgnn.sampling import KHop
from fgnn.sampling.kernels import use_kernel


def test_fanout_100000_on_cora_takes_every_neighbour_in_a_small_fanouts_ops(planetoid_root):
    graph = load_planetoid("cora", planetoid_root).graph
    seeds = torch.arange(140)  # Cora's training vertices
    sample, counter = count_dispatch(KHop([100_000, 100_000]).sample, graph, seeds,
                                     torch.Generator().manual_seed(0))
    # the same twin on both sides: a fanout above the CPU twin's range takes the
    # launch-bounded (CUDA) kernels on any device, so the small fanout is counted on them too
    with use_kernel("cuda"):
        small = count_dispatch(KHop([15, 10]).sample, graph, seeds,
                               torch.Generator().manual_seed(0))[1]
    # ops independent of the fanout, up to ceil(log2) pointer-jumping rounds of 3 ops per hop
    max_deg = int(graph.degrees().max())
    rounds = 2 * ((max_deg - 1).bit_length() - (15 - 1).bit_length())
    assert counter.ops <= small.ops + 3 * rounds, (counter.ops, small.ops)
    assert counter.syncs == small.syncs
    deg = graph.degrees()
    for block in sample.blocks:  # every vertex keeps all of its neighbours
        per_dst = torch.bincount(block.dst, minlength=block.num_dst)
        assert torch.equal(per_dst, deg.index_select(0, sample.input_nodes[: block.num_dst]))
