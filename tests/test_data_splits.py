"""Splits given as node ids or as PyG-style boolean masks, wherever a split is accepted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fgnn.data import Dataset, load_ondisk, save_dataset, split_ids
from fgnn.graph import CSRGraph

N = 6


def _dataset(**splits) -> Dataset:
    #   0 -> 1 -> 2 -> 3 -> 4 -> 5   (a path; row v lists v - 1)
    g = CSRGraph.from_edge_index(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]), num_nodes=N)
    base = dict(train_idx=torch.tensor([0, 1]), val_idx=torch.tensor([2]),
                test_idx=torch.tensor([3]))
    base.update(splits)
    return Dataset("path", g, torch.rand(N, 2), torch.tensor([0, 1, 0, 1, 0, 1]), num_classes=2,
                   **base)


@pytest.mark.parametrize("mask", [
    torch.tensor([True, False, False, True, True, False]),
    np.array([True, False, False, True, True, False]),
    [True, False, False, True, True, False],
], ids=["tensor", "numpy", "list"])
def test_boolean_mask_becomes_ids(mask):
    ds = _dataset(train_idx=mask)
    assert ds.train_idx.dtype == torch.int64 and ds.train_idx.tolist() == [0, 3, 4]


@pytest.mark.parametrize("ids", [torch.tensor([5, 0], dtype=torch.int32),
                                 np.array([5, 0], dtype=np.uint16), [5, 0], []])
def test_integer_ids_of_any_dtype(ids):
    ds = _dataset(val_idx=ids)
    assert ds.val_idx.dtype == torch.int64 and ds.val_idx.tolist() == list(ids)


@pytest.mark.parametrize("value, match", [
    (torch.ones(5, dtype=torch.bool), r"'path': test_idx is a boolean mask of length 5, but the "
                                      r"graph has 6 nodes"),
    (torch.zeros(0, dtype=torch.bool), "boolean mask of length 0"),
    (torch.tensor([0.0, 1.0]), "test_idx must hold integer node ids or be a boolean mask, got "
                               "dtype torch.float32"),
    (torch.ones(N, 2, dtype=torch.bool), r"test_idx must be 1-D .* got shape \(6, 2\)"),
    (np.array(["a", "b"]), "test_idx must hold integer node ids or be a boolean mask"),
    (torch.tensor([1, 6]), r"test_idx holds node id 6, outside \[0, 6\)"),
])
def test_bad_split_one_clear_error(value, match):
    with pytest.raises(ValueError, match=match) as e:
        _dataset(test_idx=value)
    assert len(str(e.value).splitlines()) == 1


def test_split_ids_function():
    assert split_ids(np.array([False, True]), 2).tolist() == [1]
    with pytest.raises(ValueError, match="my split is a boolean mask of length 1"):
        split_ids([True], 2, what="my split")


def test_ondisk_split_may_be_a_mask(tmp_path):
    out = tmp_path / "ds"
    save_dataset(_dataset(), out)
    mask = np.array([False, True, False, False, True, True])
    np.save(out / "train_idx.npy", mask)
    assert load_ondisk(out).train_idx.tolist() == [1, 4, 5]
    np.save(out / "train_idx.npy", mask[:4])
    with pytest.raises(ValueError, match=r"train_idx is a boolean mask of length 4, but the "
                                         r"graph has 6 nodes"):
        load_ondisk(out)


@pytest.mark.parametrize("split", ["train_idx", "val_idx", "test_idx"])
def test_duplicate_id_in_a_split_is_refused(split):
    with pytest.raises(ValueError, match=rf"^dataset 'path': {split} lists node 4 more than "
                                         rf"once"):
        _dataset(**{split: torch.tensor([5, 4, 4])})
    with pytest.raises(ValueError, match=rf"{split} lists node 4 more than once"):
        _dataset(**{split: [4, 5, 4]})


def test_ondisk_duplicate_id_is_refused_at_load(tmp_path):
    out = tmp_path / "ds"
    save_dataset(_dataset(), out)
    np.save(out / "test_idx.npy", np.array([3, 5, 3]))
    with pytest.raises(ValueError, match=r"test_idx lists node 3 more than once"):
        load_ondisk(out)


def test_hetero_duplicate_id_is_refused():
    from fgnn.data import load_dataset
    d = load_dataset("hetero:papers=50,authors=10,fields=4,seed=1")
    d.val_idx = torch.cat([d.val_idx, d.val_idx[:1]])
    with pytest.raises(ValueError, match=rf"val_idx lists node {int(d.val_idx[0])} more than"):
        d.validate(check_features=False)


@pytest.mark.parametrize("splits, pair, shared", [
    (dict(val_idx=[0, 1, 2], test_idx=[3]), "train_idx and val_idx share 2 node ids", 2),
    (dict(test_idx=[1, 3]), "train_idx and test_idx share 1 node id,", 1),
    (dict(val_idx=[2, 3], test_idx=[2, 3]), "val_idx and test_idx share 2 node ids", 2),
])
def test_overlapping_splits_warn_once_naming_the_pair(splits, pair, shared):
    with pytest.warns(UserWarning, match=pair) as rec:
        _dataset(**splits)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert f"share {shared} node" in str(rec[0].message)


def test_disjoint_splits_do_not_warn():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = _dataset()
        d.warn_unscorable()


def test_single_training_class_warns_naming_it():
    g = CSRGraph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), num_nodes=N)
    d = Dataset("one", g, torch.rand(N, 2), torch.zeros(N, dtype=torch.int64), num_classes=4,
                train_idx=[0, 1], val_idx=[2], test_idx=[3])
    with pytest.warns(UserWarning, match=r"every labelled training node has class 0 "
                                         r"\(num_classes=4\)"):
        d.warn_unscorable()
    d.num_classes = 1
    with pytest.raises(ValueError, match="num_classes=1"):  # still refused
        d.check_trainable()


@pytest.mark.parametrize("empty", ["val_idx", "test_idx"])
def test_empty_held_out_split_warns_naming_it(empty):
    d = _dataset(**{empty: []})
    with pytest.warns(UserWarning, match=rf"'path': {empty} is empty, so its accuracy cannot "
                                         rf"be computed"):
        d.warn_unscorable()
