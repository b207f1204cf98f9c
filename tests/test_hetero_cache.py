"""The typed feature cache: PreSC visit counts per (type, id) against a brute-force neighbourhood
count, the choice of rows by visits per byte under one byte budget (against a brute-force walk),
exact typed extraction and per-type hit/miss accounting (against a brute-force count), and a
type without features."""

from __future__ import annotations

import random

import pytest
import torch

from fgnn.cache.hetero import (HeteroFeatureStore, choose_cached_rows, feature_bytes,
                               hetero_presample_counts, hetero_presc_hotness)
from fgnn.graph.hetero import row_bytes_of
from fgnn import HeteroGraph, HeteroKHop

# paper <-writes- author, paper -cites-> paper, paper <-has- topic (topic: no features)
PA = ("author", "writes", "paper")
AP = ("paper", "written_by", "author")
PP = ("paper", "cites", "paper")
TP = ("topic", "labels", "paper")
PT = ("paper", "has", "topic")
NUM = {"paper": 6, "author": 5, "topic": 3}


def _graph() -> HeteroGraph:
    gen = torch.Generator().manual_seed(0)
    writes = torch.tensor([[0, 0, 1, 2, 3, 4, 4, 4], [0, 1, 1, 2, 3, 0, 4, 5]])
    cites = torch.tensor([[1, 2, 3, 4, 5, 5], [0, 0, 1, 1, 2, 4]])
    has = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 1, 1, 2, 2]])
    return HeteroGraph.from_edge_index(
        NUM, {PA: writes, AP: writes.flip(0), PP: cites, PT: has, TP: has.flip(0)},
        {"paper": torch.randn(6, 8, generator=gen),            # 32-byte rows
         "author": torch.randn(5, 2, generator=gen)})          # 8-byte rows; topic: none


def _reference_walk(hot: dict, width: dict, budget: int, per_byte: bool = True) -> dict:
    """The documented rule, one row at a time: descending visits per byte (or visits; ties:
    type order, then id), each row taken when it still fits."""
    rows = [(-float(hot[t][v]) / (width[t] if per_byte else 1), ti, v, t)
            for ti, t in enumerate(t for t in width if width[t] > 0)
            for v in range(hot[t].numel())]
    out = {t: [] for t in width if width[t] > 0}
    left = budget
    for _, _, v, t in sorted(rows):
        if width[t] <= left:
            out[t].append(v)
            left -= width[t]
    return out


# ---------------------------------------------------------------------------- choice
def test_planted_skew_caches_the_hottest_per_byte():
    hot = {"paper": torch.tensor([40., 10., 1., 0.]), "author": torch.tensor([12., 6., 3., 0.]),
           "topic": torch.tensor([99., 99.])}
    width = {"paper": 32, "author": 8, "topic": 0}
    # per byte: author0 1.5, paper0 1.25, author1 0.75, author2 0.375, paper1 0.3125
    got = choose_cached_rows(hot, width, 48)
    assert {t: v.tolist() for t, v in got.items()} == {"paper": [0], "author": [0, 1]}
    # the raw-visits order would take paper0 (40) and paper1 (10) first: 64 bytes, over budget
    got = choose_cached_rows(hot, width, 56)           # author2 (8 B) fits after the 48
    assert got["author"].tolist() == [0, 1, 2] and got["paper"].tolist() == [0]
    # by bytes saved: paper0 (40 visits), author0 (12), then paper1 (10) no longer fits
    by_bytes = choose_cached_rows(hot, width, 56, split="global-bytes")
    assert by_bytes["paper"].tolist() == [0] and by_bytes["author"].tolist() == [0, 1, 2]
    per_byte = choose_cached_rows(hot, width, 72)     # per byte: 4 authors, 1 paper
    assert per_byte["paper"].tolist() == [0] and per_byte["author"].tolist() == [0, 1, 2, 3]
    by_bytes = choose_cached_rows(hot, width, 72, split="global-bytes")   # 2 papers, 1 author
    assert by_bytes["paper"].tolist() == [0, 1] and by_bytes["author"].tolist() == [0]
    even = choose_cached_rows(hot, width, 48, split="even")   # 24 B each: no paper row fits
    assert even["paper"].tolist() == [] and even["author"].tolist() == [0, 1, 2]
    assert "topic" not in got and "topic" not in even        # no features, no cache space


@pytest.mark.parametrize("split", ["global", "global-bytes"])
@pytest.mark.parametrize("seed", range(6))
def test_choice_matches_brute_force_walk_and_holds_the_budget(seed, split):
    rng = random.Random(seed)
    width = {"a": rng.choice([4, 12, 40]), "b": rng.choice([4, 8, 64]), "c": 0,
             "d": rng.choice([8, 12])}
    hot = {t: torch.tensor([float(rng.choice([0, 1, 2, 3, 5, 8, 13, 100])) for _ in
                            range(rng.randint(1, 30))]) for t in width}
    total = sum(width[t] * hot[t].numel() for t in width)
    for budget in (0, 3, 7, 40, total // 3, total // 2, total - 1, total, total + 100):
        got = choose_cached_rows(hot, width, budget, split=split)
        ref = _reference_walk(hot, width, budget, per_byte=split == "global")
        assert {t: v.tolist() for t, v in got.items()} == ref, budget
        used = sum(width[t] * v.numel() for t, v in got.items())
        assert used <= budget
        if budget >= total:
            assert used == total


def test_choice_refuses_bad_input():
    hot = {"a": torch.ones(3)}
    with pytest.raises(ValueError, match="budget_bytes must be a non-negative int, got -1"):
        choose_cached_rows(hot, {"a": 4}, -1)
    with pytest.raises(ValueError, match="split must be one of"):
        choose_cached_rows(hot, {"a": 4}, 8, split="half")
    with pytest.raises(ValueError, match="hotness lacks node type 'b'"):
        choose_cached_rows(hot, {"a": 4, "b": 4}, 8)
    with pytest.raises(ValueError, match=r"hotness\['a'\] must be a 1-D tensor without NaN"):
        choose_cached_rows({"a": torch.tensor([1., float("nan")])}, {"a": 4}, 8)


# ---------------------------------------------------------------------------- PreSC
def _khop_sets(g: HeteroGraph, seed_type: str, seed: int, hops: int) -> dict[str, set]:
    """Every node reached within ``hops`` typed hops of ``seed`` (full neighbourhoods)."""
    seen = {t: set() for t in g.node_types}
    seen[seed_type].add(seed)
    frontier = {t: set(s) for t, s in seen.items()}
    for _ in range(hops):
        new = {t: set() for t in g.node_types}
        for et in g.edge_types:
            src, dst = g.edge_index(et).tolist()
            for u, v in zip(src, dst):
                if v in frontier[et[2]]:
                    new[et[0]].add(u)
        frontier = new
        for t in seen:
            seen[t] |= new[t]
    return seen


def test_presc_counts_match_brute_force_neighbourhoods():
    g = _graph()
    sampler = HeteroKHop([100, 100])              # covers every neighbourhood: deterministic
    train = torch.tensor([0, 2, 3, 5])
    counts = hetero_presample_counts(g, sampler, "paper", train, epochs=2, batch_size=1,
                                     generator=torch.Generator().manual_seed(1))
    expect = {t: torch.zeros(n) for t, n in NUM.items()}
    for s in train.tolist():
        for t, ids in _khop_sets(g, "paper", s, 2).items():
            expect[t][list(ids)] += 2.0
    assert set(counts) == set(NUM)
    for t in NUM:
        assert torch.equal(counts[t], expect[t]), t
    hot = hetero_presc_hotness(g, sampler, "paper", train, epochs=2, batch_size=1)
    assert all(torch.equal(hot[t], expect[t] / 2) for t in NUM)


def test_presc_counts_equal_the_rows_extraction_reads():
    g = _graph()
    sampler = HeteroKHop({PA: [2, 1], AP: [1, 1], PP: [1, 2]})
    counts = hetero_presample_counts(g, sampler, "paper", torch.ones(6, dtype=torch.bool),
                                     batch_size=2, generator=torch.Generator().manual_seed(3))
    ref = {t: torch.zeros(n) for t, n in NUM.items()}
    gen = torch.Generator().manual_seed(3)
    order = torch.arange(6)[torch.randperm(6, generator=gen)]
    for seeds in torch.split(order, 2):
        for t, ids in sampler.sample_type(g, "paper", seeds, gen).input_nodes.items():
            for v in ids.tolist():
                ref[t][v] += 1
    assert all(torch.equal(counts[t], ref[t]) for t in NUM)


def test_presc_refuses_bad_seeds():
    g, s = _graph(), HeteroKHop([1])
    with pytest.raises(ValueError, match="seed_type 'venue' is not a node type"):
        hetero_presample_counts(g, s, "venue", torch.tensor([0]))
    with pytest.raises(ValueError, match=r"train_idx holds id 9, outside num_nodes\['paper'\]"):
        hetero_presample_counts(g, s, "paper", torch.tensor([0, 9]))
    with pytest.raises(ValueError, match="train_idx mask has length 2"):
        hetero_presample_counts(g, s, "paper", torch.ones(2, dtype=torch.bool))


# ---------------------------------------------------------------------------- extraction
@pytest.mark.parametrize("split", ["global", "global-bytes", "even"])
def test_extract_is_exact_and_hits_plus_misses_match_brute_force(split):
    g = _graph()
    sampler = HeteroKHop([2, 2])
    gen = torch.Generator().manual_seed(7)
    hot = hetero_presc_hotness(g, sampler, "paper", torch.arange(6), batch_size=2,
                               generator=gen)
    budget = 3 * 32 + 2 * 8 + 4                      # not a multiple of either width
    store = HeteroFeatureStore.build(g, hot, budget, split=split)
    assert row_bytes_of(g) == {"paper": 32, "author": 8, "topic": 0}
    assert store.nbytes <= budget and set(store.cache_bytes()) == {"paper", "author"}
    assert store.cached_ids("topic").numel() == 0
    want = {t: [0, 0] for t in ("paper", "author")}     # brute force [hits, rows]
    for step in range(8):
        sample = sampler.sample_type(g, "paper", torch.tensor([step % 6, (step + 3) % 6]), gen)
        x = store.extract(sample)
        assert set(x) == set(NUM)
        for t in ("paper", "author"):
            assert torch.equal(x[t], g.features[t][sample.input_nodes[t]])
            cached = set(store.cached_ids(t).tolist())
            ids = sample.input_nodes[t].tolist()
            want[t][0] += sum(v in cached for v in ids)
            want[t][1] += len(ids)
        assert torch.equal(x["topic"], sample.input_nodes["topic"])   # embedding ids
    stats = store.stats()
    assert set(stats) == {"paper", "author"}                           # topic reads no row
    for t, (hits, rows) in want.items():
        assert (stats[t].hits, stats[t].misses, stats[t].peer) == (hits, rows - hits, 0), t
    assert sum(want[t][0] for t in want) > 0 and sum(w[1] - w[0] for w in want.values()) > 0
    tot = store.total_stats()
    assert tot.hits == sum(w[0] for w in want.values())
    assert tot.lookups == sum(w[1] for w in want.values())
    assert tot.bytes["device"] == sum(want[t][0] * row_bytes_of(g)[t] for t in want)
    done = store.reset_stats()
    assert done["paper"].hits == want["paper"][0] and store.stats()["paper"].lookups == 0


def test_count_advances_like_extract():
    g = _graph()
    hot = {t: torch.arange(n, dtype=torch.float32) for t, n in NUM.items()}
    a = HeteroFeatureStore.build(g, hot, 64)
    b = HeteroFeatureStore.build(g, hot, 64)
    gen = torch.Generator().manual_seed(0)
    for seeds in (torch.tensor([0, 1]), torch.tensor([5])):
        sample = HeteroKHop([3, 3]).sample_type(g, "paper", seeds, gen)
        a.extract(sample)
        b.count(sample)
    assert {t: s.as_dict() for t, s in a.stats().items()} == \
        {t: s.as_dict() for t, s in b.stats().items()}


def test_whole_budget_hits_everything_and_zero_budget_nothing():
    g = _graph()
    hot = {t: torch.ones(n) for t, n in NUM.items()}
    sample = HeteroKHop([2, 2]).sample_type(g, "paper", torch.tensor([0, 4]),
                                       torch.Generator().manual_seed(0))
    assert feature_bytes(g) == 6 * 32 + 5 * 8
    full = HeteroFeatureStore.build(g, hot, feature_bytes(g))
    none = HeteroFeatureStore.build(g, hot, 0)
    full.extract(sample)
    x = none.extract(sample)
    for t in ("paper", "author"):
        n = sample.input_nodes[t].numel()
        assert (full.stats()[t].hits, full.stats()[t].misses) == (n, 0)
        assert (none.stats()[t].hits, none.stats()[t].misses) == (0, n)
        assert torch.equal(x[t], g.features[t][sample.input_nodes[t]])


def test_featureless_graph_and_bad_cached_ids():
    g = HeteroGraph.from_edge_index({"u": 3, "i": 2}, {("u", "r", "i"): torch.tensor([[0], [1]])})
    store = HeteroFeatureStore.build(g, {"u": torch.ones(3), "i": torch.ones(2)}, 1 << 20)
    assert store.nbytes == 0 and store.stats() == {}
    sample = HeteroKHop([1]).sample_type(g, "i", torch.tensor([1]))
    assert torch.equal(store.extract(sample)["u"], torch.tensor([0]))
    with pytest.raises(ValueError, match="cached names node type 'topic', which has no features"):
        HeteroFeatureStore(_graph().features, {"topic": torch.tensor([0])})
    with pytest.raises(ValueError, match=r"cached\['author'\]: ids holds 7, outside \[0, 5\)"):
        HeteroFeatureStore(_graph().features, {"author": torch.tensor([0, 7])})
    with pytest.raises(ValueError, match=r"cached\['author'\] must be 1-D ids without repeats"):
        HeteroFeatureStore(_graph().features, {"author": torch.tensor([1, 1])})
