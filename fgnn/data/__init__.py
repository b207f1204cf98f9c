"""Datasets: the container and its loaders (Planetoid, OGB raw, synthetic, on-disk)."""

from fgnn.data.dataset import Dataset, Features

__all__ = ["Dataset", "Features"]
