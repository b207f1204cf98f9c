"""Atomic training checkpoints that resume bitwise-identically on CPU.

A checkpoint holds the model and optimizer state, the last finished epoch, every random state the
loop draws from (torch's CPU RNG, CUDA RNGs when initialised, numpy's and Python's global RNGs,
and the sampler's :class:`torch.Generator`), a *signature* of the model (class name, constructor
dimensions and parameter shapes) and free-form ``extra`` data. It is written to a temporary file
in the destination directory, fsynced and moved into place with :func:`os.replace`, so a crash
never leaves a half-written checkpoint under the final name.

Loading uses ``torch.load(weights_only=True)``: everything stored is tensors and plain Python
values, so no pickled code runs. Every way a file can fail to load (missing, truncated, not a
torch file, a pickle payload that ``weights_only`` refuses, another model) raises one
:class:`CheckpointError` whose message is one line naming the file.

Checkpoints and model files carry a SHA-256 checksum of their payload (every tensor's bytes,
dtype and shape and every plain value, :func:`payload_digest`) under the key ``checksum``;
reading verifies it, so a file whose bytes were changed after fgnn wrote it (a disk error, a
partial copy, an edit) is refused instead of loading different weights or scores. A file
without a checksum was written by an fgnn before checksums and is refused too: nothing can
tell whether it is intact (retrain, or re-save it with that older fgnn's weights through
:func:`save_checkpoint` / :func:`fgnn.model_file.save_model`).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import random
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np
import torch
from torch import nn

from fgnn import gpu
from fgnn.atomic import atomic_open

__all__ = ["Checkpoint", "CheckpointError", "save_checkpoint", "load_checkpoint",
           "read_checkpoint", "read_torch_file", "write_torch_file", "model_signature",
           "capture_rng_state", "restore_rng_state", "payload_digest"]

_FORMAT = "fgnn-checkpoint"
#: Formats whose payload carries a checksum (checkpoints and model files).
_CHECKSUMMED = (_FORMAT, "fgnn-model")
#: Key of the checksum in a payload: ``{"sha256": hex digest of the rest}``.
CHECKSUM_KEY = "checksum"
#: First bytes of every file ``torch.save`` writes (a zip archive).
_ZIP_MAGIC = b"PK\x03\x04"
_VERSION = 1
#: Constructor dimensions recorded in the signature when the model has them.
_DIM_ATTRS = ("in_dim", "num_classes", "num_layers", "hidden")

Generators = Union[torch.Generator, Mapping[str, torch.Generator], None]


class CheckpointError(ValueError):
    """A checkpoint or model file that cannot be used; the message is one line naming the file.

    Attributes:
        path: the file.
    """

    def __init__(self, path: Union[str, os.PathLike], message: str) -> None:
        self.path = Path(path)
        super().__init__(" ".join(message.split()))  # one line, whatever the cause said


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns besides restoring state in place.

    Attributes:
        epoch: the last finished epoch stored in the checkpoint.
        extra: the ``extra`` dict given to :func:`save_checkpoint`.
        signature: the model signature stored in the checkpoint.
        path: where it was read from.
    """

    epoch: int
    extra: dict[str, Any] = field(default_factory=dict)
    signature: dict[str, Any] = field(default_factory=dict)
    path: Optional[Path] = None


def model_signature(model: nn.Module) -> dict[str, Any]:
    """The identity a checkpoint is checked against: class, dimensions and parameter shapes.

    Returns:
        ``{"class": "module.QualName", "dims": {...}, "shapes": {name: [d0, d1, ...]}}``.
    """
    cls = type(model)
    dims = {a: getattr(model, a) for a in _DIM_ATTRS if isinstance(getattr(model, a, None), int)}
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "dims": dims, "shapes": shapes}


def _check_signature(saved: Mapping[str, Any], model: nn.Module, path: Path) -> None:
    """Raise :class:`CheckpointError` naming both sides when ``model`` is not the file's model."""
    now = model_signature(model)
    if saved.get("class") != now["class"]:
        raise CheckpointError(path, f"checkpoint {path} was saved from model "
                                    f"{saved.get('class')}, but the model given is {now['class']}")
    if saved.get("dims") != now["dims"]:
        raise CheckpointError(path, f"checkpoint {path} was saved from {saved.get('class')} "
                                    f"with dims {saved.get('dims')}, but the model given has "
                                    f"dims {now['dims']}")
    old, new = saved.get("shapes", {}), now["shapes"]
    if old != new:
        missing = sorted(set(old) - set(new))
        unexpected = sorted(set(new) - set(old))
        if missing or unexpected:
            raise CheckpointError(path, f"checkpoint {path} does not match the model's "
                                        f"parameters: in the checkpoint only {missing}, in the "
                                        f"model only {unexpected}")
        name = next(k for k in old if old[k] != new[k])
        raise CheckpointError(path, f"checkpoint {path} has {name} of shape {tuple(old[name])}, "
                                    f"the model given has shape {tuple(new[name])}")


# ---------------------------------------------------------------------------- RNG state
def _as_generator_dict(generators: Generators) -> dict[str, torch.Generator]:
    if generators is None:
        return {}
    if isinstance(generators, torch.Generator):
        return {"sampler": generators}
    return dict(generators)


def capture_rng_state(generators: Generators = None) -> dict[str, Any]:
    """Snapshot every random source training draws from.

    Args:
        generators: the sampler's generator, or a name -> generator mapping.

    Returns:
        A dict of tensors and plain values (safe for ``weights_only`` loading).
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos),
                  int(has_gauss), float(gauss)],
        "python": _python_state_to_plain(random.getstate()),
        "generators": {k: g.get_state() for k, g in _as_generator_dict(generators).items()},
    }
    if gpu.is_available() and gpu.initialized():
        state["cuda"] = gpu.rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any], generators: Generators = None, *,
                      global_rngs: bool = True) -> None:
    """Restore a :func:`capture_rng_state` snapshot (generators are restored in place).

    Args:
        state: the snapshot.
        generators: generator(s) to restore, named as when captured.
        global_rngs: also restore the torch/CUDA/numpy/Python global RNGs.

    Raises:
        ValueError: when a generator given has no stored state.
    """
    if global_rngs:
        torch.set_rng_state(state["torch"].cpu())
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, gauss))
        random.setstate(_plain_to_python_state(state["python"]))
        if "cuda" in state and gpu.is_available():
            gpu.set_rng_state_all([t.cpu() for t in state["cuda"]])
    stored = state.get("generators", {})
    for name, gen in _as_generator_dict(generators).items():
        if name not in stored:
            raise ValueError(f"generators: the checkpoint holds no state for generator {name!r} "
                             f"(it has {sorted(stored)})")
        gen.set_state(stored[name].cpu())


def _python_state_to_plain(state: tuple) -> list:
    version, internal, gauss_next = state
    return [version, torch.tensor(internal, dtype=torch.int64), gauss_next]


def _plain_to_python_state(plain: list) -> tuple:
    version, internal, gauss_next = plain
    return (version, tuple(int(v) for v in internal.cpu().tolist()), gauss_next)


# ---------------------------------------------------------------------------- files
def write_torch_file(path: Union[str, os.PathLike], payload: Any) -> Path:
    """``torch.save`` ``payload`` to ``path`` atomically, with a ``checksum`` of it when it is a
    checkpoint or model file (a dict whose ``format`` is ``fgnn-checkpoint`` or ``fgnn-model``).

    The payload is serialised in memory first, so a full disk surfaces as one
    :class:`~fgnn.atomic.WriteError` naming ``path`` (not as an error of torch's zip writer), and
    no partial or temporary file is left.

    Raises:
        WriteError: the file could not be written.
    """
    if isinstance(payload, dict) and payload.get("format") in _CHECKSUMMED:
        body = {k: v for k, v in payload.items() if k != CHECKSUM_KEY}
        payload = {**body, CHECKSUM_KEY: {"sha256": payload_digest(body)}}
    buf = io.BytesIO()
    torch.save(payload, buf)
    path = Path(path)
    with atomic_open(path, "wb") as f:
        f.write(buf.getbuffer())
    return path


def read_torch_file(path: Union[str, os.PathLike], what: str = "checkpoint", *,
                    map_location: Union[str, torch.device, None] = "cpu") -> Any:
    """``torch.load(path, weights_only=True)`` with every failure as one :class:`CheckpointError`.

    Args:
        path: the file.
        what: how to call the file in messages (``checkpoint``, ``model file``).
        map_location: where tensors are loaded.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        CheckpointError: unreadable, empty, truncated or corrupt, not a torch file, holding
            pickled objects that ``weights_only`` loading refuses (nothing in the file runs),
            or a checkpoint or model file whose checksum is missing or does not match.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, f"no {what} at {path}", str(path))
    if path.is_dir():
        raise CheckpointError(path, f"{what} {path} is a directory, not a file")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise CheckpointError(path, f"cannot read {what} {path}: {e.strerror or e}") from e
    if not head:
        raise CheckpointError(path, f"{what} {path} is empty (0 bytes)")
    if head != _ZIP_MAGIC:
        raise CheckpointError(path, f"{what} {path} is not a torch file (no zip header)")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(path, f"{what} {path} is truncated (its zip central directory is "
                                    f"missing; torch would fail finding central directory)")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        refused = re.search(r"GLOBAL ([\w.]+)", str(e))
        if refused:
            raise CheckpointError(path, f"{what} {path} holds pickled Python objects that fgnn "
                                        f"refuses to load (weights_only=True): it references "
                                        f"{refused.group(1)}") from e
        raise CheckpointError(path, f"{what} {path} is corrupt (its pickled data does not "
                                    f"load: {_first_sentence(e)})") from e
    except Exception as e:  # torch's zip reader: RuntimeError, EOFError, OSError, ...
        raise CheckpointError(path, f"{what} {path} is truncated or corrupt "
                                    f"({_first_sentence(e)})") from e
    _verify_checksum(payload, path, what)
    return payload


def payload_digest(payload: Any) -> str:
    """SHA-256 of a payload: every tensor's dtype, shape and bytes (on CPU) and every plain
    value, walked in order (dict keys in insertion order, as ``torch.load`` restores them)."""
    h = hashlib.sha256()
    _feed(h, payload)
    return h.hexdigest()


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}|".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(obj, Mapping):
        h.update(f"D{len(obj)}|".encode())
        for k, v in obj.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(obj, (list, tuple)):  # torch.Size too
        h.update(f"L{len(obj)}|".encode())
        for v in obj:
            _feed(h, v)
    else:  # None, bool, int, float, str, bytes, torch.dtype, ...
        h.update(f"{type(obj).__name__}:{obj!r}|".encode())


def _verify_checksum(payload: Any, path: Path, what: str) -> None:
    """Refuse a checkpoint or model file whose checksum is missing or does not match."""
    if not isinstance(payload, dict) or payload.get("format") not in _CHECKSUMMED:
        return
    stored = payload.get(CHECKSUM_KEY)
    if stored is None:
        raise CheckpointError(path, f"{what} {path} carries no checksum: it was written by an "
                                    f"older fgnn (before checksums), and nothing can tell whether "
                                    f"it is intact, so this fgnn refuses it; retrain, or re-save "
                                    f"it from the fgnn that wrote it")
    body = {k: v for k, v in payload.items() if k != CHECKSUM_KEY}
    want = stored.get("sha256") if isinstance(stored, dict) else None
    if want != payload_digest(body):
        raise CheckpointError(path, f"{what} {path} is corrupt: its content does not match its "
                                    f"sha256 checksum (the file changed after fgnn wrote it)")
    del payload[CHECKSUM_KEY]


def _first_sentence(err: BaseException) -> str:
    text = " ".join(str(err).split())
    first = re.split(r"(?<=\.)\s", text, maxsplit=1)[0] if text else ""
    return first.rstrip(".") or type(err).__name__


# ---------------------------------------------------------------------------- save / load
def save_checkpoint(path: Union[str, os.PathLike], model: nn.Module,
                    optimizer: Optional[torch.optim.Optimizer] = None, epoch: int = 0, *,
                    generator: Generators = None,
                    extra: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a checkpoint atomically (temp file in the same directory, fsync, ``os.replace``).

    Args:
        path: destination file; parent directories are created.
        model: the model whose ``state_dict`` and signature are stored.
        optimizer: its ``state_dict`` is stored when given.
        epoch: the last finished epoch (resuming starts at ``epoch + 1``).
        generator: the sampler's generator, or a name -> generator mapping.
        extra: tensors and plain Python values to store alongside (history, best weights, ...).

    Returns:
        The checkpoint path.

    Raises:
        ValueError: for a negative ``epoch``.
        WriteError: the file could not be written (e.g. a full disk); no file is left behind.
    """
    if int(epoch) < 0:
        raise ValueError(f"epoch must be >= 0, got epoch={epoch!r}")
    payload = {
        "format": _FORMAT,
        "version": _VERSION,
        "signature": model_signature(model),
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "epoch": int(epoch),
        "rng": capture_rng_state(generator),
        "extra": dict(extra or {}),
    }
    return write_torch_file(path, payload)


def read_checkpoint(path: Union[str, os.PathLike],
                    map_location: Union[str, torch.device, None] = "cpu") -> dict[str, Any]:
    """Read a checkpoint's payload without restoring anything (see :func:`load_checkpoint`).

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        CheckpointError: an unreadable file, or not an fgnn checkpoint of this version.
    """
    path = Path(path)
    payload = read_torch_file(path, "checkpoint", map_location=map_location)
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise CheckpointError(path, f"{path} is not an fgnn checkpoint (no {_FORMAT!r} header)")
    if payload.get("version") != _VERSION:
        raise CheckpointError(path, f"{path} has checkpoint version {payload.get('version')}, "
                                    f"this fgnn reads version {_VERSION}")
    return payload


def load_checkpoint(path: Union[str, os.PathLike], model: nn.Module,
                    optimizer: Optional[torch.optim.Optimizer] = None, *,
                    generator: Generators = None, restore_rng: bool = True,
                    map_location: Union[str, torch.device, None] = "cpu",
                    payload: Optional[Mapping[str, Any]] = None) -> Checkpoint:
    """Check that a checkpoint belongs to ``model`` and restore it in place.

    Args:
        path: a file written by :func:`save_checkpoint`.
        model: receives the stored weights; must have the stored class and shapes.
        optimizer: receives the stored optimizer state when given.
        generator: generator(s) to restore, named as when saved.
        restore_rng: also restore the torch/CUDA/numpy/Python global RNG states (generators
            given are restored either way).
        map_location: where tensors are loaded (model/optimizer loading moves them on).
        payload: the file's content when already read with :func:`read_checkpoint`.

    Returns:
        The epoch, ``extra`` and signature stored.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        CheckpointError: (a ``ValueError``, one line) when the file cannot be read, is not an
            fgnn checkpoint, was saved from another model (the message names both), or holds no
            optimizer state while one is requested.
    """
    path = Path(path)
    if payload is None:
        payload = read_checkpoint(path, map_location)
    _check_signature(payload["signature"], model, path)
    if optimizer is not None and payload["optimizer"] is None:
        raise CheckpointError(path, f"checkpoint {path} holds no optimizer state but an "
                                    f"optimizer was given")
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    restore_rng_state(payload["rng"], generator, global_rngs=restore_rng)
    return Checkpoint(epoch=int(payload["epoch"]), extra=payload["extra"],
                      signature=payload["signature"], path=path)
