"""Datasets: the container, its loaders (Planetoid, OGB raw, synthetic, on-disk, on-disk
heterogeneous) and converters from PyG / DGL / OGB objects."""

from fgnn.data.convert import from_dgl, from_ogb, from_pyg
from fgnn.data.dataset import Dataset, Features, split_ids
from fgnn.data.ogb import load_ogb
from fgnn.data.ondisk import load_ondisk, save_dataset, write_features_npy_chunked
from fgnn.data.ondisk_hetero import load_ondisk_hetero, save_ondisk_hetero
from fgnn.data.planetoid import load_planetoid
from fgnn.data.spec import load_dataset, parse_spec
from fgnn.data.synthetic import rmat_dataset, uniform_dataset

__all__ = [
    "Dataset",
    "Features",
    "split_ids",
    "from_pyg",
    "from_dgl",
    "from_ogb",
    "load_dataset",
    "parse_spec",
    "load_planetoid",
    "load_ogb",
    "load_ondisk",
    "save_dataset",
    "load_ondisk_hetero",
    "save_ondisk_hetero",
    "write_features_npy_chunked",
    "rmat_dataset",
    "uniform_dataset",
]
