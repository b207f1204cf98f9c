"""Atomic file writes: readers see the old file or the whole new one, never a partial file."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Union

__all__ = ["atomic_open"]


@contextmanager
def atomic_open(path: Union[str, os.PathLike], mode: str = "wb") -> Iterator[IO]:
    """Open a temp file beside ``path``; on a clean exit fsync it and ``os.replace`` it onto
    ``path`` (then fsync the directory), on an exception delete it and leave ``path`` untouched.

    Args:
        path: destination; its parent directory is created.
        mode: ``"wb"`` or ``"w"``.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: mode must be 'wb' or 'w', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
