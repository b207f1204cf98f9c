"""GCN / GraphSAGE / PinSAGE layers and models on tiny drawn blocks: exact values, gradients,
edge weights and input validation."""

import math

import pytest
import torch

from fgnn.config import ModelConfig
from fgnn.models import (GCN, MODEL_CLASSES, GCNConv, GraphSAGE, PinSAGE, PinSAGEConv, SAGEConv,
                         build_model, edge_weight_sum, weighted_mean, weighted_sum)
from fgnn.sampling import Block

# One block over 5 local vertices; the dst vertices 0 and 1 are a prefix of the src vertices.
#
#      2 --w=1--> 0 <--w=2-- 3            4 --w=1--> 1 <--w=1-- 0
#                 ^
#                 1 (w=3)
SRC = torch.tensor([2, 3, 1, 4, 0])
DST = torch.tensor([0, 0, 0, 1, 1])
W = torch.tensor([1.0, 2.0, 3.0, 1.0, 1.0])
X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [4.0, 0.0], [0.0, 6.0]])


def block(weights=W, dtype=torch.float32) -> Block:
    return Block(SRC, DST, num_src=5, num_dst=2,
                 weights=None if weights is None else weights.to(dtype))


def _set_identity(linear: torch.nn.Linear, scale: float = 1.0) -> None:
    with torch.no_grad():
        linear.weight.copy_(scale * torch.eye(linear.out_features, linear.in_features))
        if linear.bias is not None:
            linear.bias.zero_()


# ------------------------------------------------------------------ aggregation helpers
def test_weighted_sum_and_mean_by_hand():
    # dst 0: 1*x2 + 2*x3 + 3*x1 = [10, 5], total weight 6; dst 1: x4 + x0 = [1, 6], weight 2.
    assert torch.equal(weighted_sum(X, SRC, DST, 2, W), torch.tensor([[10.0, 5.0], [1.0, 6.0]]))
    assert torch.equal(edge_weight_sum(DST, 2, W), torch.tensor([6.0, 2.0]))
    assert torch.allclose(weighted_mean(X, SRC, DST, 2, W),
                          torch.tensor([[5 / 3, 5 / 6], [0.5, 3.0]]))
    # Unweighted mean: dst 0 = (x2 + x3 + x1) / 3.
    assert torch.allclose(weighted_mean(X, SRC, DST, 2), torch.tensor([[2.0, 1.0], [0.5, 3.0]]))


def test_weighted_mean_of_isolated_destination_is_zero():
    out = weighted_mean(X, SRC, DST, 3, W)  # dst 2 has no in-edges
    assert torch.equal(out[2], torch.zeros(2))


def test_weighted_mean_gradcheck_float64():
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(5, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: weighted_mean(a, SRC, DST, 2, b), (x, w))


# ------------------------------------------------------------------ exact layer outputs
def test_gcn_conv_right_normalisation_with_self_loop():
    conv = GCNConv(2, 2)
    _set_identity(conv.linear)
    # dst 0: (x0 + 1*x2 + 2*x3 + 3*x1) / (1 + 6); dst 1: (x1 + x4 + x0) / (1 + 2)
    expected = torch.tensor([[11 / 7, 5 / 7], [1 / 3, 7 / 3]])
    assert torch.allclose(conv(block(), X), expected)


def test_sage_conv_self_plus_weighted_mean():
    conv = SAGEConv(2, 2)
    _set_identity(conv.lin_self)
    _set_identity(conv.lin_neigh, 2.0)
    # dst 0: x0 + 2 * [5/3, 5/6]; dst 1: x1 + 2 * [0.5, 3]
    expected = torch.tensor([[13 / 3, 5 / 3], [1.0, 7.0]])
    assert torch.allclose(conv(block(), X), expected)


def test_pinsage_conv_importance_pooling_concat_and_l2_norm():
    conv = PinSAGEConv(2, 2)
    _set_identity(conv.Q)
    with torch.no_grad():
        conv.W.weight.copy_(torch.cat([torch.eye(2), torch.eye(2)], dim=1))  # W [h; n] = h + n
        conv.W.bias.zero_()
    # n_0 = (1*x2 + 2*x3 + 3*x1) / 6 = [5/3, 5/6]; z_0 = x0 + n_0 = [8/3, 5/6] ∝ [16, 5]
    # n_1 = (x4 + x0) / 2 = [0.5, 3];              z_1 = x1 + n_1 = [0.5, 4]  ∝ [1, 8]
    expected = torch.tensor([[16 / math.sqrt(281), 5 / math.sqrt(281)],
                             [1 / math.sqrt(65), 8 / math.sqrt(65)]])
    out = conv(block(), X)
    assert torch.allclose(out, expected)
    assert torch.allclose(out.norm(dim=1), torch.ones(2))


def test_pinsage_conv_gradcheck_float64():
    torch.manual_seed(0)
    conv = PinSAGEConv(3, 4).double()
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(5, dtype=torch.float64) + 0.5).requires_grad_()

    def f(x_, w_):
        return conv(Block(SRC, DST, 5, 2, w_), x_)

    assert torch.autograd.gradcheck(f, (x, w))


@pytest.mark.parametrize("conv_cls", [GCNConv, SAGEConv, PinSAGEConv])
def test_edge_weight_equals_repeated_edge(conv_cls):
    """An edge of weight 2 aggregates like the same edge sampled twice with weight 1."""
    torch.manual_seed(0)
    conv = conv_cls(2, 3)
    weighted = Block(torch.tensor([1, 2]), torch.tensor([0, 0]), 3, 1, torch.tensor([2.0, 1.0]))
    repeated = Block(torch.tensor([1, 1, 2]), torch.tensor([0, 0, 0]), 3, 1)
    x = torch.randn(3, 2)
    assert torch.allclose(conv(weighted, x), conv(repeated, x), atol=1e-6)
    assert not torch.allclose(conv(weighted, x), conv(Block(torch.tensor([1, 2]),
                                                            torch.tensor([0, 0]), 3, 1), x))


@pytest.mark.parametrize("conv_cls", [GCNConv, SAGEConv])
def test_wide_input_multiplies_first_with_same_result(conv_cls):
    """in_dim > out_dim multiplies before aggregating; the result is the same linear map."""
    torch.manual_seed(0)
    narrow = conv_cls(6, 2).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    out = narrow(block(dtype=torch.float64), x)
    if conv_cls is GCNConv:
        agg = (weighted_sum(x, SRC, DST, 2, W.double()) + x[:2]) / (edge_weight_sum(
            DST, 2, W, torch.float64) + 1).unsqueeze(-1)
        ref = narrow.linear(agg) + narrow.bias
    else:
        ref = narrow.lin_self(x[:2]) + narrow.lin_neigh(weighted_mean(x, SRC, DST, 2,
                                                                      W.double()))
    assert torch.allclose(out, ref)


# ------------------------------------------------------------------ models
def two_blocks():
    """A 2-layer sample: 5 input nodes -> 3 -> 2 seeds."""
    b0 = Block(torch.tensor([3, 4, 0, 2]), torch.tensor([0, 1, 2, 2]), 5, 3)
    b1 = Block(torch.tensor([2, 1]), torch.tensor([0, 1]), 3, 2)
    return [b0, b1]


@pytest.mark.parametrize("cls", [GCN, GraphSAGE, PinSAGE])
def test_model_output_shape_and_extra_rows_ignored(cls, device):
    torch.manual_seed(0)
    model = cls(4, 3, num_layers=2, hidden=8, dropout=0.0).to(device)
    blocks = [b.to(device) for b in two_blocks()]
    x = torch.randn(7, 4, device=device)  # 2 rows beyond blocks[0].num_src
    out = model(blocks, x)
    assert out.shape == (2, 3)
    assert torch.allclose(out, model(blocks, x[:5]))
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("cls", [GCN, GraphSAGE, PinSAGE])
def test_model_rejects_feature_dim_mismatch(cls):
    model = cls(4, 3, num_layers=2, hidden=8)
    with pytest.raises(ValueError, match=r"expected in_dim=4, got x.shape\[1\]=6"):
        model(two_blocks(), torch.randn(5, 6))


@pytest.mark.parametrize("cls", [GCN, GraphSAGE, PinSAGE])
def test_model_rejects_wrong_block_count(cls):
    model = cls(4, 3, num_layers=3, hidden=8)
    with pytest.raises(ValueError, match="got 2 blocks but the model has num_layers=3"):
        model(two_blocks(), torch.randn(5, 4))


def test_model_rejects_too_few_feature_rows_and_unchained_blocks():
    model = GCN(4, 3, num_layers=2, hidden=8)
    with pytest.raises(ValueError, match="reads num_src=5 rows but only 4"):
        model(two_blocks(), torch.randn(4, 4))
    b0, b1 = two_blocks()
    b1 = Block(b1.src, b1.dst, 4, 2)  # reads 4 rows, layer 0 produced 3
    with pytest.raises(ValueError, match=r"blocks\[1\]: reads num_src=4 rows but only 3"):
        model([b0, b1], torch.randn(5, 4))


@pytest.mark.parametrize("kwargs,match", [
    ({"hidden": 0}, "hidden=0"),
    ({"num_layers": 0}, "num_layers=0"),
    ({"dropout": 1.0}, "dropout=1.0"),
    ({"input_dropout": -0.1}, "input_dropout=-0.1"),
    ({"activation": "swishy"}, "'swishy'"),
])
def test_model_rejects_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GraphSAGE(4, 3, **kwargs)


def test_eval_mode_is_deterministic_and_dropout_acts_in_training():
    torch.manual_seed(0)
    model = GraphSAGE(4, 3, num_layers=2, hidden=16, dropout=0.5)
    x = torch.randn(5, 4)
    model.eval()
    assert torch.equal(model(two_blocks(), x), model(two_blocks(), x))
    model.train()
    assert not torch.equal(model(two_blocks(), x), model(two_blocks(), x))


@pytest.mark.parametrize("name", ["gcn", "sage", "pinsage"])
def test_build_model(name):
    model = build_model(ModelConfig(name, hidden=32, dropout=0.1), in_dim=10, num_classes=4,
                        num_layers=2)
    assert isinstance(model, MODEL_CLASSES[name])
    assert (model.in_dim, model.num_classes, model.num_layers, model.hidden) == (10, 4, 2, 32)
    assert model.dropout.p == 0.1
    assert model(two_blocks(), torch.randn(5, 10)).shape == (2, 4)


def test_sparse_aware_dropout_matches_dropout_semantics():
    from fgnn.models.aggregate import SparseAwareDropout

    torch.manual_seed(0)
    x = torch.zeros(400, 100)
    x[torch.arange(400), torch.randint(0, 100, (400,))] = 2.0  # 1% non-zero
    drop = SparseAwareDropout(0.25)
    out = drop(x)
    assert bool((out[x == 0] == 0).all())  # zeros stay zero
    kept = out[x != 0]
    assert bool(((kept == 0) | torch.isclose(kept, torch.tensor(2.0 / 0.75))).all())  # rescaled
    assert 0.65 < float((kept != 0).float().mean()) < 0.85  # about 1 - p kept
    drop.eval()
    assert drop(x) is x
    dense = torch.rand(50, 20) + 0.1
    drop.train()
    out = drop(dense)  # dense input: ordinary dropout
    assert bool(((out == 0) | torch.isclose(out, dense / 0.75)).all())
    assert bool((out == 0).any())
