"""Atomic file writes: readers see the old file or the whole new one, never a partial file."""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Union

__all__ = ["atomic_open", "WriteError"]


class WriteError(OSError):
    """A file could not be written (full disk, no permission, ...); nothing was left behind.

    ``str(err)`` is one line naming the path and the reason, e.g.
    ``cannot write runs/r.json: No space left on device (errno 28)``.

    Attributes:
        path: the destination that could not be written.
    """

    def __init__(self, path: Union[str, os.PathLike], cause: OSError) -> None:
        reason = cause.strerror or str(cause) or type(cause).__name__
        code = f" (errno {cause.errno})" if cause.errno else ""
        super().__init__(cause.errno, f"cannot write {path}: {reason}{code}")
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.strerror)


@contextmanager
def atomic_open(path: Union[str, os.PathLike], mode: str = "wb") -> Iterator[IO]:
    """Open a temp file beside ``path``; on a clean exit fsync it and ``os.replace`` it onto
    ``path`` (then fsync the directory), on an exception delete it and leave ``path`` untouched.

    Only a regular file (or nothing) is ever replaced: when ``path`` (or the file a symlink
    there points to) is a device such as ``/dev/null``, a FIFO, a socket or a directory, the
    write fails and ``path`` is left as it was.

    Args:
        path: destination; its parent directory is created.
        mode: ``"wb"`` or ``"w"``.

    Raises:
        WriteError: an ``OSError`` while creating, writing, syncing or renaming the file (a full
            disk, say), or a ``path`` that is not a regular file, re-raised as one line naming
            ``path``; the temp file is removed.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: mode must be 'wb' or 'w', got {mode!r}")
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise WriteError(path, e) from e
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _check_replaceable(path)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, WriteError):
            raise WriteError(path, e) from e
        raise
    _fsync_dir(path.parent)


def _check_replaceable(path: Path) -> None:
    """Raise ``OSError`` unless ``path`` is absent or a regular file (its symlink followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise OSError(None, f"it is {what}; fgnn replaces only regular files")


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
