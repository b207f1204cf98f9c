"""Remapper: scratch-array dedup + remap (fgnn.sampling.remap)."""

from __future__ import annotations

import pytest
import torch

from fgnn.sampling.remap import Remapper

from test_sampling_khop import twin  # noqa: F401 - a fixture: both twins of the remap


def reference(seeds: list[int], hops: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Dictionary reference: seeds first, then new vertices in order of first occurrence."""
    local = {v: i for i, v in enumerate(seeds)}
    nodes = list(seeds)
    out = []
    for cand in hops:
        ids = []
        for v in cand:
            if v not in local:
                local[v] = len(nodes)
                nodes.append(v)
            ids.append(local[v])
        out.append(ids)
    return nodes, out


@pytest.mark.parametrize("trial", range(4))
def test_matches_reference(twin, device, trial):
    g = torch.Generator().manual_seed(trial)
    n = 1000
    seeds = torch.randperm(n, generator=g)[:50]
    hops = [torch.randint(0, n, (size,), generator=g) for size in (0, 300, 2000, 5)]
    rm = Remapper()
    rm.begin(seeds.to(device), n)
    got = [rm.add(h.to(device)).cpu() for h in hops]
    nodes = rm.end().cpu()
    ref_nodes, ref_hops = reference(seeds.tolist(), [h.tolist() for h in hops])
    assert nodes.tolist() == ref_nodes
    for a, b, h in zip(got, ref_hops, hops):
        assert a.tolist() == b
        assert torch.equal(nodes[a], h)  # local ids map back to the global ids


def test_scratch_is_reset_and_reused(twin):
    rm = Remapper()
    rm.begin(torch.tensor([5, 2]), 10)
    rm.add(torch.tensor([7, 7, 2, 9]))
    assert rm.size == 4 and rm.nodes().tolist() == [5, 2, 7, 9]
    rm.end()
    scratch = rm._scratch
    assert bool((scratch == rm._empty).all())
    rm.begin(torch.tensor([9]), 10)
    assert rm.add(torch.tensor([5, 9])).tolist() == [1, 0]
    assert rm.end().tolist() == [9, 5]
    assert rm._scratch is scratch  # allocated once per (device, N)
    rm.begin(torch.tensor([0]), 20)
    assert rm._scratch.numel() == 20
    rm.end()


@pytest.mark.parametrize("seeds, match", [([3, 1, 3], "seeds must be distinct.*vertex 3"),
                                          ([3, 1, 7], "vertex 7, outside \\[0, 5\\)"),
                                          ([-1, 1], "vertex -1, outside")])
@pytest.mark.parametrize("then", ["add", "add-nothing", "end"])
def test_bad_seeds_raise_at_the_first_sync_and_leave_clean_state(twin, seeds, match, then):
    """begin() defers the range/repeat check to the first add()'s host sync (or end())."""
    rm = Remapper()
    rm.begin(torch.tensor(seeds), 5)  # no sync here: the sample runs on clamped seeds
    with pytest.raises(ValueError, match=match):
        if then == "add":
            rm.add(torch.tensor([0, 2, 4]))
        elif then == "add-nothing":
            rm.add(torch.tensor([], dtype=torch.int64))
        else:
            rm.end()
    rm.abort()
    assert bool((rm._scratch == rm._empty).all())
    rm.begin(torch.tensor([3, 1]), 5)
    assert rm.add(torch.tensor([1, 4])).tolist() == [1, 2]
    rm.end()


def test_begin_twice_is_a_lifecycle_error():
    rm = Remapper()
    rm.begin(torch.tensor([0]), 3)
    with pytest.raises(RuntimeError):
        rm.begin(torch.tensor([1]), 3)
    rm.abort()
    rm.begin(torch.tensor([1]), 3)
    assert rm.end().tolist() == [1]


def test_large_hops_are_processed_in_chunks(twin):
    """A hop longer than the scratch array's position range is split; numbering is unchanged."""
    g = torch.Generator().manual_seed(5)
    cand = torch.randint(0, 300, (100,), generator=g)
    rm = Remapper()
    rm.begin(torch.tensor([7, 3]), 300)
    rm._base = rm._empty - 8  # only 7 positions per pass
    got = rm.add(cand)
    nodes = rm.end()
    ref_nodes, (ref,) = reference([7, 3], [cand.tolist()])
    assert got.tolist() == ref and nodes.tolist() == ref_nodes


def test_pickled_sampler_leaves_its_scratch_array_behind():
    """A sampler used on the driver ships to each executor without its O(N) scratch array."""
    import pickle

    from fgnn.sampling import KHop
    from conftest import random_graph

    g = random_graph(200_000, 400_000, seed=1)
    sampler = KHop([5, 5])
    sampler.sample(g, torch.arange(64), torch.Generator().manual_seed(0))
    assert sampler._remap._scratch is not None  # the driver-side copy keeps it
    blob = pickle.dumps(sampler)
    assert len(blob) < 10_000, len(blob)  # 200k int32 entries would be 800 kB
    clone = pickle.loads(blob)
    a = clone.sample(g, torch.arange(64), torch.Generator().manual_seed(3))
    b = sampler.sample(g, torch.arange(64), torch.Generator().manual_seed(3))
    assert torch.equal(a.input_nodes, b.input_nodes)
    assert Remapper.scratch_bytes(200_000) == 800_000
