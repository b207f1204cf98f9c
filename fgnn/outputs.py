"""A job's output paths: checked before anything runs, written independently at the end.

A job writes up to five files: the report (``--report``), its plot beside it
(:func:`fgnn.report.png_path_for`), the model file (``--save-model``), and the checkpoint
directory (``--checkpoint-dir``) with its checkpoint file in it. :func:`check_outputs` refuses,
before the data is loaded or Ray starts, every set of paths that could destroy a file that is
not the job's own:

* a file output must be a regular file or absent (never a device, FIFO, socket or directory:
  ``--report /dev/null`` is refused, as the atomic write would replace the device node), and
  must name a file (``--report ./`` or ``--save-model runs/`` name a directory);
* its nearest existing ancestor must be a directory where a file can really be created (a
  temporary file is created and removed there: ``/proc`` passes ``os.access`` as root, but
  nothing can be created in it);
* no two outputs may be the same directory entry (``--report same.pt --save-model same.pt``,
  or ``--report out.png`` whose plot is ``out.png`` itself);
* the checkpoint directory must be a directory or absent;
* no output may be, or lie inside, an input of the job (:func:`check_inputs`: the ``ondisk:DIR``
  or ``ogb:DIR`` directory, a Planetoid spec's ``ind.<name>.*`` files), compared with symlinks
  and ``..`` resolved.

:func:`lock_outputs` then takes an exclusive lock (``fcntl.flock``) for each output the job
writes, held for the job's duration: a second job on this machine writing the same report, model
file or checkpoint directory is refused before it loads data or starts Ray. The lock files are in
this user's lock directory (:func:`lock_dir`), one per resolved output path, so nothing is added
to the output directories; they stay (removing one would race with a job taking it), and a lock
dies with the process that holds it.

:func:`write_outputs` writes the model file, the plot and the report one by one; a failure of one
does not stop the others, and :class:`OutputsError` names what failed and what was kept.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from fgnn.atomic import WriteError

__all__ = ["OutputPath", "OutputsError", "OutputLocks", "output_paths", "check_outputs",
           "check_inputs", "lock_outputs", "lock_path", "lock_dir", "write_outputs", "entry"]




@dataclass(frozen=True)
class OutputPath:
    """One path a job writes.

    Attributes:
        field: the dotted config field it comes from (``report``, ``save_model``,
            ``train.checkpoint_dir``).
        what: how messages call it (``report``, ``plot``, ``model``, ``checkpoint directory``,
            ``checkpoint``).
        path: the path as configured (or derived from it).
        value: the configured value it derives from (the report path for the plot, the
            directory for the checkpoint file).
        is_dir: a directory rather than a file.
    """

    field: str
    what: str
    path: Path
    value: str
    is_dir: bool = False


def entry(path: Union[str, os.PathLike]) -> Path:
    """The directory entry a write to ``path`` replaces: its parent resolved (symlinks, ``..``),
    its own name kept (``os.replace`` replaces a symlink itself, not its target)."""
    p = Path(path).absolute()
    return Path(os.path.realpath(p.parent)) / p.name


def output_paths(report: Optional[str], save_model: Optional[str],
                 checkpoint_dir: Optional[str]) -> list[OutputPath]:
    """Every path a job with these settings writes, derived ones included."""
    from fgnn.runtime.resume import CHECKPOINT_NAME
    from fgnn.report import png_path_for

    out: list[OutputPath] = []
    if save_model:
        out.append(OutputPath("save_model", "model", Path(save_model), save_model))
    if report:
        out.append(OutputPath("report", "report", Path(report), report))
        try:
            out.append(OutputPath("report", "plot", png_path_for(report), report))
        except ValueError:  # no file name (``.``, ``/``): the report check refuses it
            pass
    if checkpoint_dir:
        ckpt = "train.checkpoint_dir"
        out.append(OutputPath(ckpt, "checkpoint directory", Path(checkpoint_dir), checkpoint_dir,
                              is_dir=True))
        out.append(OutputPath(ckpt, "checkpoint", Path(checkpoint_dir) / CHECKPOINT_NAME,
                              checkpoint_dir))
    return out


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _can_create_in(directory: Path) -> Optional[str]:
    """None when a file can be created (and removed) in ``directory``, else why not."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fgnn-probe-", dir=directory)
    except OSError as e:
        return e.strerror or type(e).__name__
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:
        pass
    return None


def _check_one(out: OutputPath) -> Optional[str]:
    """Why ``out`` cannot be written safely, or None."""
    p = out.path.absolute()
    try:
        st = os.stat(p)                      # follows a symlink: its target must be safe too
    except (FileNotFoundError, NotADirectoryError):  # an ancestor is a file: said below
        st = None
    except OSError as e:
        return f"cannot be checked ({e.strerror or type(e).__name__})"
    who = f"its {out.what} {p} " if out.what in ("plot", "checkpoint") else ""
    example = {"report": "run.json", "model": "model.pt"}.get(out.what)
    give = f"; give a file such as {example}" if example else ""
    if example and (out.value.endswith(("/", os.sep)) or Path(out.value).name in ("", ".", "..")):
        return f"names a directory, not a file{give}"
    if st is not None:
        if out.is_dir and not stat.S_ISDIR(st.st_mode):
            kind = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
            return f"is {kind}, not a directory"
        if not out.is_dir and stat.S_ISDIR(st.st_mode):
            return f"{who}is a directory{give}"
        if not out.is_dir and not stat.S_ISREG(st.st_mode):
            return (f"{who}is {_kind(st.st_mode)}; fgnn writes only regular files and never "
                    f"replaces anything else")
    anc = p if (out.is_dir and st is not None) else p.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        return f"cannot be written ({anc} is not a directory)"
    why = _can_create_in(anc)
    if why is not None:
        return f"cannot be written ({anc} is not a writable directory: {why})"
    return None


def check_outputs(outputs: list[OutputPath], error: Callable[[str, object, str], Exception]) \
        -> None:
    """Refuse unsafe or colliding output paths (see the module docstring).

    Args:
        outputs: from :func:`output_paths`.
        error: builds the exception from ``(field, value, why)``, e.g.
            :class:`fgnn.job.JobConfigError`.

    Raises:
        what ``error`` builds, for the first unsafe path.
    """
    seen: dict[Path, OutputPath] = {}
    for out in outputs:
        why = _check_one(out)
        if why is not None:
            raise error(out.field, out.value, why)
        key = entry(out.path)
        for other_key, other in seen.items():
            if other_key == key:
                subject = (f"its {out.what} {out.path}" if out.what in ("plot", "checkpoint")
                           else str(out.path))
                raise error(out.field, out.value,
                            f"{subject} is the same file as the {other.what} {other.path}; "
                            f"give each output its own path")
            inner, outer = (out, other) if other_key in key.parents else (other, out)
            if entry(outer.path) in entry(inner.path).parents and not outer.is_dir:
                raise error(out.field, out.value,
                            f"the {inner.what} {inner.path} would be inside the {outer.what} "
                            f"file {outer.path}; give each output its own path")
        seen[key] = out


def _overwritten_input(out: OutputPath, inputs: list[Path]) -> Optional[str]:
    """Why writing ``out`` would replace or write into one of ``inputs``, or None."""
    where = {entry(out.path), out.path.resolve()}   # the entry replaced, and a symlink's target
    subject = f"its {out.what} {out.path}" if out.what in ("plot", "checkpoint") else str(out.path)
    for inp in inputs:
        if inp in where:
            what = "the dataset directory" if inp.is_dir() else "the dataset's input file"
            return f"{subject} is {what} {inp}; write outputs outside the dataset"
        if any(inp in p.parents for p in where):
            hit = " and would overwrite a file of it" if out.path.exists() else ""
            return (f"{subject} lies inside the dataset directory {inp}{hit}; write outputs "
                    f"outside the dataset")
    return None


def check_inputs(outputs: list[OutputPath], inputs: list[Path],
                 error: Callable[[str, object, str], Exception]) -> None:
    """Refuse an output that is, or lies inside, an input of the job.

    Args:
        outputs: from :func:`output_paths`.
        inputs: resolved input files and directories
            (:func:`fgnn.data.spec.input_paths`).
        error: builds the exception from ``(field, value, why)``.

    Raises:
        what ``error`` builds, for the first output that would overwrite an input.
    """
    resolved = [Path(p).resolve() for p in inputs]
    for out in outputs:
        why = _overwritten_input(out, resolved)
        if why is not None:
            raise error(out.field, out.value, why)


def lock_dir() -> Path:
    """This user's directory of output locks: ``<tmp>/fgnn-locks-<uid>`` (mode 0700), created
    on first use.

    Raises:
        OSError: it cannot be created, or it is not a directory of this user's that only this
            user can write (another user could otherwise hold or remove the locks).
    """
    uid = os.getuid()
    d = Path(tempfile.gettempdir()) / f"fgnn-locks-{uid}"
    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        raise OSError(f"{d} is not a directory of this user's that only this user can write")
    return d


def lock_path(out: OutputPath, directory: Optional[Path] = None) -> Path:
    """The lock file of an output, in ``directory`` (default :func:`lock_dir`): named by the
    output's name and a hash of its resolved path (:func:`entry`; a checkpoint directory
    resolved whole), so every spelling of one path has one lock and nothing is added to the
    output's own directory."""
    import hashlib

    target = Path(os.path.realpath(out.path)) if out.is_dir else entry(out.path)
    digest = hashlib.blake2b(os.fsencode(target), digest_size=12).hexdigest()
    return (directory or lock_dir()) / f"{target.name or 'root'}-{digest}.lock"


class OutputLocks:
    """Exclusive locks on a job's outputs (:func:`lock_outputs`), held until :meth:`release`
    (or the process ends: the kernel drops a ``flock`` with its last file descriptor). A
    context manager that releases on exit."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    def release(self) -> None:
        """Drop every lock (closing its file descriptor); a second call does nothing."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def __enter__(self) -> "OutputLocks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_outputs(outputs: list[OutputPath], error: Callable[[str, object, str], Exception],
                 directory: Optional[Path] = None) -> OutputLocks:
    """Lock the report, the model file and the checkpoint directory of a job (the plot and the
    checkpoint file go with them), each with ``fcntl.flock(LOCK_EX | LOCK_NB)`` on its
    :func:`lock_path`; the lock dies with the process that holds it.

    Args:
        outputs: from :func:`output_paths` (already checked by :func:`check_outputs`).
        error: builds the exception from ``(field, value, why)``.
        directory: where the lock files are (default :func:`lock_dir`).

    Raises:
        what ``error`` builds when another job (or another open of the same lock file in this
        process) holds a lock, or a lock file cannot be created; no lock is kept then.
    """
    import fcntl

    fds: list[int] = []
    try:
        for out in outputs:
            if out.what not in ("report", "model", "checkpoint directory"):
                continue
            try:
                lock = lock_path(out, directory)
                fds.append(os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                                   0o600))
            except OSError as e:
                raise error(out.field, out.value, f"cannot create its lock file "
                                                  f"({e.strerror or e})") from e
            try:
                fcntl.flock(fds[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise error(out.field, out.value,
                            f"another running job is writing this {out.what} (it holds the "
                            f"lock {lock}); wait for that job to end, or give another "
                            f"path") from None
    except BaseException:
        OutputLocks(fds).release()
        raise
    return OutputLocks(fds)


class OutputsError(WriteError):
    """Some of a job's final outputs could not be written; the others were.

    ``str(err)`` is one line, e.g. ``could not write report /x/r.json: Permission denied
    (errno 13); kept: model /a/m.pt, plot /a/r.png``.

    Attributes:
        failed: ``[(field, what, path, reason), ...]`` of every output that failed.
        kept: ``[(field, what, path), ...]`` of every output written.
    """

    def __init__(self, failed: list[tuple[str, str, Path, WriteError]],
                 kept: list[tuple[str, str, Path]]) -> None:
        first = failed[0][3]
        super().__init__(failed[0][2], OSError(first.errno, str(first)))
        self.failed = [(f, w, p, _reason(e, p)) for f, w, p, e in failed]
        self.kept = kept

    def describe(self, name: Callable[[str, str], str] = lambda field, what: what) -> str:
        """The one-line message, naming each output that failed with ``name(field, what)`` (the
        CLI passes its flags) and each one kept by what it is."""
        bad = "; ".join(f"could not write {name(f, w)} {p}: {why}" for f, w, p, why in self.failed)
        kept = ", ".join(f"{w} {p}" for _, w, p in self.kept) or "nothing"
        return f"{bad}; kept: {kept}"

    def __str__(self) -> str:
        return self.describe()


def _reason(err: WriteError, path: Path) -> str:
    text = str(err)
    prefix = f"cannot write {path}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def write_outputs(writers: list[tuple[str, str, Path, Callable[[], object]]]) \
        -> list[tuple[str, str, Path]]:
    """Run each ``(field, what, path, write)`` in turn; a :class:`WriteError` of one does not
    stop the next.

    Returns:
        ``(field, what, path)`` of every output written.

    Raises:
        OutputsError: at least one write failed (after all were tried).
    """
    kept: list[tuple[str, str, Path]] = []
    failed: list[tuple[str, str, Path, WriteError]] = []
    for field, what, path, write in writers:
        try:
            write()
        except WriteError as e:
            failed.append((field, what, path, e))
        else:
            kept.append((field, what, path))
    if failed:
        raise OutputsError(failed, kept)
    return kept
