"""Multi-device placement: Rule 1, Song & Jiang Algorithm 1 (Rule 2), DataTiering interleaving."""

from __future__ import annotations

import pytest
import torch

from fgnn.cache import (Placement, clique_placement, interleaved_placement,
                        replicate_placement)
from fgnn.cache.lookup import CacheLookup
from fgnn.cache.placement import bits_dtype, choose_placement, expected_cost, job_placement

# Song & Jiang §3.2 worked example: access frequency f = [4, 6, 6, 6, 5, 5] over N_t = 6 training
# nodes, p = f / N_t, two NVLink GPUs with BSIZE = 2, α = 0.3.
P_EXAMPLE = torch.tensor([4, 6, 6, 6, 5, 5], dtype=torch.float64) / 6


def lookup(pl: Placement, device: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Song & Jiang's dense ``(dev_num, buf_pos)`` of ``device``, read off its CacheLookup."""
    lk = CacheLookup.from_placement(pl, device)
    ids = torch.arange(pl.num_nodes)
    dev_num = lk.devices(ids)
    buf_pos = ids.clone()
    for d in range(pl.num_devices):
        sel = dev_num == d
        if bool(sel.any()):
            buf_pos[sel] = lk.positions(d, ids[sel])
    return dev_num, buf_pos


def test_algorithm1_reproduces_worked_example():
    pl = clique_placement(P_EXAMPLE, num_devices=2, capacity=2, alpha=0.3)
    # V = [1, 2, 3, 4, 5, 0]; B1 = [1, 2] -> [1, 3]; iteration 2 skipped; B2 = [1, 2] -> [4, 2].
    assert [b.tolist() for b in pl.buffers] == [[1, 3], [4, 2]]
    for dev in (0, 1):  # identical on both GPUs: no duplicates left (paper numbers GPUs from 1)
        dev_num, buf_pos = lookup(pl, dev)
        assert dev_num.tolist() == [-1, 0, 1, 0, 1, -1]  # paper: [-1, 1, 2, 1, 2, -1]
        assert buf_pos.tolist() == [0, 0, 1, 1, 0, 5]    # host rows are the vertex ids
    assert pl.covered() == 4


def test_algorithm1_stops_at_first_unprofitable_replacement():
    # With α = 1 the first test p(3) > 1 * p(2) fails (1 > 1 is false): Rule 1's replicas stay.
    pl = clique_placement(P_EXAMPLE, 2, 2, alpha=1.0)
    assert [b.tolist() for b in pl.buffers] == [[1, 2], [1, 2]]
    # Steep probabilities: the second round's candidate is too cold for α = 0.5.
    p = torch.tensor([1.0, 0.9, 0.8, 0.3, 0.1, 0.05])
    pl = clique_placement(p, 2, 3, alpha=0.5)
    # round 0: old = V[2] = 2 (p .8), new = 3 (p .3 < .4) -> stop at once
    assert [b.tolist() for b in pl.buffers] == [[0, 1, 2], [0, 1, 2]]
    pl = clique_placement(p, 2, 3, alpha=0.3)
    # round 0: 3 replaces 2 on GPU 0 (.3 > .24); round 1: old = 1 (p .9), new = 4: .1 < .27 stop
    assert [b.tolist() for b in pl.buffers] == [[0, 1, 3], [0, 1, 2]]


def test_algorithm1_alpha_zero_spreads_and_balances_p_sum():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(1000, generator=g) + 0.01
    n, bsize = 4, 50
    pl = clique_placement(p, n, bsize, alpha=0.0)
    assert pl.covered() == n * bsize  # all duplicates replaced: n * BSIZE distinct vertices
    order = torch.argsort(p, descending=True)
    assert set(torch.cat(pl.buffers).tolist()) == set(order[: n * bsize].tolist())
    held = pl.holders()
    assert int(held[:, order[0]].sum()) == 1  # even the hottest vertex keeps one copy
    # every vertex keeps exactly one copy and p_sum of the new vertices is balanced
    assert bool((held.sum(0)[order[: n * bsize]] == 1).all())
    p_sum = torch.stack([p[b].sum() for b in pl.buffers])
    assert float(p_sum.max() - p_sum.min()) < 0.05 * float(p_sum.mean())


def test_rule1_replicates_hottest():
    pl = replicate_placement(P_EXAMPLE, 3, 2)
    assert [b.tolist() for b in pl.buffers] == [[1, 2]] * 3
    dev_num, buf_pos = lookup(pl, 2)
    assert dev_num.tolist() == [-1, 2, 2, -1, -1, -1]  # always read locally
    assert buf_pos.tolist() == [0, 0, 1, 3, 4, 5]


def test_interleaved_with_replicated_part():
    h = torch.arange(10, 0, -1).float()  # vertex 0 hottest
    pl = interleaved_placement(h, num_devices=2, capacity=3, replicated=1)
    assert [b.tolist() for b in pl.buffers] == [[0, 1, 3], [0, 2, 4]]
    dev_num, buf_pos = lookup(pl, 1)
    assert dev_num.tolist()[:6] == [1, 0, 1, 0, 1, -1]  # local copy of 0 wins
    assert buf_pos.tolist()[:6] == [0, 1, 1, 2, 2, 5]
    flat = interleaved_placement(h, 2, 2)
    assert [b.tolist() for b in flat.buffers] == [[0, 2], [1, 3]]


def test_lookup_prefers_local_then_lowest_peer():
    pl = Placement([torch.tensor([5]), torch.tensor([5, 1]), torch.tensor([1])], 6)
    assert lookup(pl, 0)[0].tolist() == [-1, 1, -1, -1, -1, 0]
    assert lookup(pl, 2)[0].tolist() == [-1, 2, -1, -1, -1, 0]
    assert lookup(pl, 2)[1].tolist() == [0, 0, 2, 3, 4, 0]


@pytest.mark.parametrize("call,match", [
    (lambda: clique_placement(P_EXAMPLE, 2, 2, alpha=1.5), "alpha"),
    (lambda: clique_placement(P_EXAMPLE, 0, 2, alpha=0.3), "num_devices"),
    (lambda: replicate_placement(P_EXAMPLE, 2, -1), "capacity"),
    (lambda: replicate_placement(torch.zeros(2, 3), 2, 1), "1-D"),
    (lambda: interleaved_placement(P_EXAMPLE, 2, 2, replicated=3), "replicated"),
    (lambda: Placement([torch.tensor([1, 1])], 3), "twice"),
    (lambda: CacheLookup.from_placement(replicate_placement(P_EXAMPLE, 2, 1), 2), "device"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def literal_algorithm1(p: torch.Tensor, n: int, bsize: int, alpha: float) -> list[list[int]]:
    """Song & Jiang Algorithm 1 line by line (new vertices taken in order, as the example does)."""
    v = torch.argsort(p, descending=True, stable=True).tolist()
    bsize = min(bsize, len(v))
    b = [v[:bsize] for _ in range(n)]
    b = [list(x) for x in b]
    p_sum = [0.0] * n
    replaced, i, ordered = 0, 0, list(range(n))
    limit = min(len(v), n * bsize) - bsize
    while replaced < limit:
        if i % n == 0:
            ordered = sorted(range(n), key=lambda d: (p_sum[d], d))
        if i % n == n - 1:
            i += 1
            continue
        device = ordered[i % n]
        new_node = v[bsize + replaced]
        old_idx = bsize - 1 - i // n
        if float(p[new_node]) > alpha * float(p[v[old_idx]]):
            b[device][old_idx] = new_node
            p_sum[device] += float(p[new_node])
            replaced += 1
        else:
            break
        i += 1
    return b


@pytest.mark.parametrize("n,bsize,alpha", [(2, 5, 0.3), (3, 7, 0.0), (4, 10, 0.5), (3, 40, 0.2)])
def test_algorithm1_matches_literal_listing(n, bsize, alpha):
    p = torch.rand(60, generator=torch.Generator().manual_seed(n * 100 + bsize)) ** 3
    got = clique_placement(p, n, bsize, alpha)
    assert [b.tolist() for b in got.buffers] == literal_algorithm1(p, n, bsize, alpha)


# ---------------------------------------------------------------------------- cost model, auto
def test_expected_cost_eq3_on_worked_example():
    # B1 = [1, 3], B2 = [4, 2]: B_gpu = {1, 2, 3, 4}; host-only rows 0 and 5 (p = 4/6 + 5/6).
    spread = clique_placement(P_EXAMPLE, 2, 2, alpha=0.3)
    rep = replicate_placement(P_EXAMPLE, 2, 2)
    # c = 0.3: GPU 1 reads {2, 4} from GPU 2 (1 + 5/6), GPU 2 reads {1, 3} from GPU 1 (2):
    # max(1.5 + 0.3 * 11/6, 1.5 + 0.3 * 2) = 2.1; Rule 1 leaves 32/6 - 2 on the host.
    assert expected_cost(spread, P_EXAMPLE, 0.3) == pytest.approx(2.1)
    assert expected_cost(rep, P_EXAMPLE, 0.3) == pytest.approx(32 / 6 - 2)
    # c >= 1 (no fast link, Eq. 3 second case): every remote row costs C_cpu.
    assert expected_cost(spread, P_EXAMPLE, 1.0) == pytest.approx(32 / 6 - 1 - 5 / 6)
    assert expected_cost(rep, P_EXAMPLE, 2.0) == pytest.approx(32 / 6 - 2)


def test_auto_follows_the_cost_model_and_the_device_count():
    name, pl = choose_placement("auto", P_EXAMPLE, 2, 2, peer_cost=0.3)
    assert name == "algorithm1" and [b.tolist() for b in pl.buffers] == [[1, 3], [4, 2]]
    assert choose_placement("auto", P_EXAMPLE, 2, 2, peer_cost=1.0)[0] == "replicate"  # Rule 1
    assert choose_placement("auto", P_EXAMPLE, 1, 2, peer_cost=0.0)[0] == "replicate"  # 1 device
    # explicit strategies are taken as given; algorithm1 with c >= 1 replaces nothing (Eq. 7)
    assert choose_placement("replicate", P_EXAMPLE, 2, 2, 0.0)[1].covered() == 2
    name, pl = choose_placement("algorithm1", P_EXAMPLE, 2, 2, peer_cost=3.0)
    assert name == "algorithm1" and [b.tolist() for b in pl.buffers] == [[1, 2], [1, 2]]


def test_every_algorithm1_replacement_lowers_every_devices_cost():
    # Eq. 7 makes each replacement pay off for the device that makes it, and the new row helps
    # all others: the greedy result never costs more than Rule 1 in Eq. 4.
    for seed in range(5):
        p = torch.rand(80, generator=torch.Generator().manual_seed(seed)) ** 2
        for c in (0.0, 0.2, 0.6):
            spread = clique_placement(p, 3, 12, alpha=c)
            assert expected_cost(spread, p, c) <= expected_cost(replicate_placement(p, 3, 12),
                                                               p, c) + 1e-12


def test_job_placement_trainers_share_standbys_cache_their_hottest():
    h = torch.arange(20, 0, -1).float()  # vertex 0 hottest
    name, pl = job_placement(h, num_devices=5, trainers=[2, 3], capacity=4, standbys=[0],
                             standby_capacity=2, strategy="algorithm1", peer_cost=0.0)
    assert name == "algorithm1" and pl.num_devices == 5
    assert [b.tolist() for b in pl.buffers[2:4]] == \
        [b.tolist() for b in clique_placement(h, 2, 4, 0.0).buffers]
    assert pl.buffers[0].tolist() == [0, 1]                       # standby: its own hottest rows
    assert pl.buffers[1].numel() == 0 and pl.buffers[4].numel() == 0  # nothing cached there
    dev_num, _ = lookup(pl, 0)
    assert dev_num[:2].tolist() == [0, 0]                         # local first
    assert set(dev_num[2:8].tolist()) <= {2, 3} and dev_num[8:].eq(-1).all()
    rep = job_placement(h, 5, [2, 3], 4, [0], 2, strategy="auto", peer_cost=1.0)
    assert rep[0] == "replicate" and rep[1].buffers[2].tolist() == [0, 1, 2, 3]
    assert job_placement(h, 2, [], 4, [0], 3)[1].buffers[0].tolist() == [0, 1, 2]  # single mode


def test_holder_bits_one_bit_per_device():
    pl = Placement([torch.tensor([5, 1]), torch.tensor([], dtype=torch.long),
                    torch.tensor([1, 2])], 6)
    bits = pl.holder_bits()
    assert bits.dtype == torch.uint8 and bits.tolist() == [0, 1 | 4, 4, 0, 0, 1]
    assert [bits_dtype(n) for n in (1, 8, 9, 15, 16, 31, 32, 63)] == \
        [torch.uint8] * 2 + [torch.int16] * 2 + [torch.int32] * 2 + [torch.int64] * 2
    wide = Placement([torch.tensor([d]) for d in range(40)], 40)
    assert wide.holder_bits().tolist() == [1 << d for d in range(40)]
    with pytest.raises(ValueError, match="num_devices"):
        bits_dtype(64)


@pytest.mark.parametrize("call,match", [
    (lambda: choose_placement("spread", P_EXAMPLE, 2, 2, 0.2), "strategy"),
    (lambda: choose_placement("auto", P_EXAMPLE, 2, 2, -0.1), "peer_cost"),
    (lambda: expected_cost(replicate_placement(P_EXAMPLE, 2, 2), P_EXAMPLE[:5], 0.2), "entries"),
    (lambda: job_placement(P_EXAMPLE, 3, [1, 2], 2, [1], 1), "distinct"),
    (lambda: job_placement(P_EXAMPLE, 3, [3], 2), "distinct"),
    (lambda: job_placement(P_EXAMPLE, 3, [1], 2, strategy="x"), "strategy"),
])
def test_placement_choice_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
