"""Files of a dataset directory: only files inside it are read.

A loader reads a fixed set of names inside its directory (``ondisk:DIR``, the Planetoid root,
an OGB dataset's ``raw/`` and ``split/``). A symlink there whose target lies outside the
directory (``labels.npy -> /etc/passwd``) is refused before it is opened, so a dataset cannot
make fgnn read, or echo in an error, a file the user did not put in it. Links that stay inside
the directory are followed.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["inside_root"]


def inside_root(root: str | os.PathLike, path: str | os.PathLike, what: str) -> Path:
    """``path`` when it (its symlinks followed) lies inside ``root``.

    Args:
        root: the dataset directory.
        path: a file of it (``root / name``).
        what: how messages call the file's kind, e.g. ``on-disk file``.

    Returns:
        ``path`` unchanged.

    Raises:
        ValueError: one line naming the file, without its target or contents.
    """
    path = Path(path)
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise ValueError(f"{what} {path} is a symlink that leaves the dataset directory "
                         f"{root}; fgnn reads only files inside it (copy the file in instead)")
    return path
