"""Model files: a job's best-validation weights with what it takes to rebuild and re-score them.

``launch.py --save-model PATH`` (``JobConfig.save_model``) writes one after the run; it holds

* the weights ``final`` was scored with (the best validation accuracy, as
  :func:`fgnn.training.fit` keeps them) and the model's signature (class, dims, parameter shapes);
* ``meta["model"]``: model name, class, ``num_layers``, ``hidden``, ``dropout``, ``in_dim``,
  ``num_classes``;
* ``meta["sampler"]``: the sampler config and class;
* ``meta["dataset"]``: the dataset fingerprint (spec, name, nodes, edges, features, classes);
* ``meta["eval"]``: the scoring recipe of :mod:`fgnn.evaluation` (``seed``, ``batch_size``);
* ``meta["task"]`` and ``meta["link"]["edge_type"]``: what the runtime trained it for, the task
  and a typed link job's relation (:meth:`fgnn.tasks.base.Task.identity`);
* ``meta["final"]`` and ``meta["best"]``: the reported scores and the best validation epoch.

:func:`load_model` rebuilds the model, and given a dataset checks that it is the one the model
was trained on; :meth:`SavedModel.evaluate` re-scores a split with the same recipe, so it
reproduces the reported accuracy exactly. It also reads the runtime's resumable checkpoint
(``runtime.pt``), taking the best-validation weights stored there.

The identity functions here (:func:`job_identity`, :func:`check_identity`) are also what a
resumed job checks its checkpoint against, before Ray starts.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import torch
from torch import nn

from fgnn.checkpoint import (CheckpointError, _check_signature, model_signature, read_torch_file,
                             write_torch_file)

if TYPE_CHECKING:
    from fgnn.config import JobConfig
    from fgnn.data.dataset import Dataset
    from fgnn.evaluation import SplitScore
    from fgnn.sampling.base import Sampler

__all__ = ["SavedModel", "save_model", "load_model", "job_identity", "model_identity",
           "dataset_fingerprint", "check_identity", "check_content"]

_FORMAT = "fgnn-model"
_VERSION = 1
#: Fields of ``meta["model"]`` that must agree for a file to fit a model (dropout need not).
_MODEL_KEYS = ("name", "class", "num_layers", "hidden", "in_dim", "num_classes")
#: Fields of ``meta["dataset"]`` that must agree for a file to fit a dataset.
_DATASET_KEYS = ("num_nodes", "num_edges", "feat_dim", "num_classes")


# ---------------------------------------------------------------------------- identity
def _qualname(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def model_identity(model: nn.Module, dropout: Optional[float] = None) -> dict[str, Any]:
    """What a model is: its ``ModelConfig.name`` (``None`` for a custom class), class, dropout
    and dimensions."""
    from fgnn.models import MODEL_CLASSES

    name = next((k for k, cls in MODEL_CLASSES.items() if type(model) is cls), None)
    dims = {k: getattr(model, k, None) for k in ("num_layers", "hidden", "in_dim", "num_classes")}
    out = {"name": name, "class": _qualname(model), "dropout": dropout if name else None,
           **{k: (int(v) if isinstance(v, int) else None) for k, v in dims.items()}}
    if isinstance(getattr(model, "heads", None), int):  # GAT: its heads rebuild its shapes
        out["heads"] = int(model.heads)
    return out


def dataset_fingerprint(dataset: "Dataset", spec: Optional[str] = None) -> dict[str, Any]:
    """The dataset's spec, name and sizes (nodes, edges, feature dim, classes)."""
    return {"spec": spec, "name": dataset.name, "num_nodes": int(dataset.num_nodes),
            "num_edges": int(getattr(dataset, "num_edges", None) or dataset.graph.num_edges),
            "feat_dim": int(dataset.feat_dim),
            "num_classes": int(dataset.num_classes)}


def job_identity(config: "JobConfig", dataset: "Dataset", model: nn.Module,
                 sampler: "Sampler") -> dict[str, Any]:
    """Model, sampler, dataset and scoring recipe of a job (stored in checkpoints and model
    files). The dataset's entry holds its sizes and its content fingerprint
    (``content``: :func:`fgnn.data.fingerprint.content_digest`).

    Args:
        config: the job (its dataset spec, sampler, seed, batch size and dropout).
        dataset: the loaded dataset.
        model: the job's model (built-in or custom).
        sampler: the job's training sampler (it also scores, :mod:`fgnn.evaluation`).
    """
    from fgnn.data.fingerprint import content_digest
    from fgnn.evaluation import eval_chunk

    chunk = eval_chunk(config.train, dataset.feature_row_bytes)
    return {
        "model": model_identity(model, config.model.dropout),
        "sampler": {"config": asdict(config.sampler), "class": _qualname(sampler)},
        "dataset": {**dataset_fingerprint(dataset, config.dataset),
                    "content": content_digest(dataset)},
        "eval": {"seed": int(config.train.seed), "batch_size": int(chunk),
                 "mode": config.train.eval_mode},
    }


def _describe_model(m: Mapping[str, Any]) -> str:
    what = f"{m['name']} model" if m.get("name") else f"custom model {m.get('class')}"
    dims = [f"{m['num_layers']} layers"] if m.get("num_layers") else []
    if m.get("hidden"):
        dims.append(f"hidden {m['hidden']}")
    return f"{what} ({', '.join(dims)})" if dims else what


def _describe_dataset(d: Mapping[str, Any]) -> str:
    return (f"{d.get('name')} ({d.get('num_nodes')} nodes, {d.get('num_edges')} edges, "
            f"{d.get('feat_dim')} features, {d.get('num_classes')} classes)")


def check_identity(path: Union[str, os.PathLike], what: str, saved: Mapping[str, Any],
                   now: Mapping[str, Any], now_is: str = "this job is") -> None:
    """Raise one line naming both sides when a file's model or dataset is not the current one.

    Args:
        path: the file.
        what: ``checkpoint`` or ``model file``.
        saved: the file's identity (:func:`job_identity` form; ``dataset`` may be absent).
        now: the current identity; a missing ``model`` or ``dataset`` is not compared.
        now_is: how the message introduces the current side.

    Raises:
        CheckpointError: e.g. ``model file m.pt holds a sage model (2 layers, hidden 256) for
            cora (2708 nodes, ...); this job is gcn model (3 layers, hidden 256) on rmat-12
            (4096 nodes, ...)``.
    """
    sm, nm = saved.get("model"), now.get("model")
    sd, nd = saved.get("dataset"), now.get("dataset")
    model_differs = bool(sm and nm and any(sm.get(k) != nm.get(k) for k in _MODEL_KEYS))
    data_differs = bool(sd and nd and any(sd.get(k) != nd.get(k) for k in _DATASET_KEYS))
    if not (model_differs or data_differs):
        return
    file_side = _describe_model(sm) if sm else "a model"
    if sd:
        file_side += f" for {_describe_dataset(sd)}"
    if nm and nd:
        now_side = f"{_describe_model(nm)} on {_describe_dataset(nd)}"
    else:
        now_side = _describe_model(nm) if nm else _describe_dataset(nd)
    raise CheckpointError(path, f"{what} {path} holds a {file_side}; {now_is} "
                                f"{'a ' if nm else ''}{now_side}")


def check_content(path: Union[str, os.PathLike], what: str, saved: Mapping[str, Any],
                  now: Mapping[str, Any]) -> None:
    """Raise one line when a file's dataset has the current sizes but other contents: its
    content fingerprint (``dataset.content``, :func:`fgnn.data.fingerprint.content_digest`)
    differs in a part. A file without one (written before fingerprints) is not compared.

    Args:
        path: the file.
        what: ``checkpoint`` or ``model file``.
        saved: the file's identity (:func:`job_identity` form).
        now: the current identity.

    Raises:
        CheckpointError: naming the file, the current dataset (name and spec) and the parts
            that differ (graph, features, labels, splits).
    """
    from fgnn.data.fingerprint import PARTS

    had = (saved.get("dataset") or {}).get("content")
    nd = now.get("dataset") or {}
    has = nd.get("content")
    if not isinstance(had, Mapping) or not isinstance(has, Mapping):
        return
    differ = [p for p in PARTS if had.get(p) != has.get(p)]
    if not differ:
        return
    spec = f" (--dataset {nd['spec']})" if nd.get("spec") else ""
    raise CheckpointError(path, f"{what} {path} was trained on other data than this job's "
                                f"dataset {nd.get('name')}{spec}: the sizes match, but its "
                                f"{', '.join(differ)} differ (content fingerprint); resume on "
                                f"the dataset it was trained on, or train without --resume")


# ---------------------------------------------------------------------------- files
@dataclass
class SavedModel:
    """A model read by :func:`load_model`, with the metadata stored beside its weights.

    Attributes:
        model: the rebuilt model with the stored weights, in eval mode (CPU).
        meta: ``model``, ``sampler``, ``dataset``, ``eval`` (and, for a model file, ``final``
            and ``best``) as described in the module docstring.
        path: the file read.
    """

    model: nn.Module
    meta: dict[str, Any] = field(default_factory=dict)
    path: Optional[Path] = None

    @property
    def final(self) -> dict[str, Any]:
        """The scores the job reported (empty for a runtime checkpoint)."""
        return dict(self.meta.get("final") or {})

    def eval_sampler(self) -> "Sampler":
        """The sampler the job scored with, rebuilt from the stored config.

        Raises:
            CheckpointError: the job used a custom sampler class (pass it to :meth:`evaluate`).
        """
        from fgnn.config import SamplerConfig
        from fgnn.sampling import build_sampler

        smp = self.meta.get("sampler") or {}
        sampler = build_sampler(SamplerConfig(**smp.get("config", {})))
        if smp.get("class") not in (None, _qualname(sampler)):
            raise CheckpointError(self.path or "?", f"model file {self.path} was scored with a "
                                  f"custom sampler {smp['class']}; pass it as sampler=")
        return sampler

    def evaluate(self, dataset: "Dataset", split: str = "test",
                 sampler: Optional["Sampler"] = None,
                 device: Union[str, torch.device] = "cpu") -> "SplitScore":
        """Score a split with the job's recipe (:func:`fgnn.evaluation.evaluate_split`, or
        :func:`~fgnn.evaluation.evaluate_layerwise` for a job that scored layer-wise).

        Args:
            dataset: the dataset the model was trained on.
            split: ``train``, ``val`` or ``test``.
            sampler: the job's sampler; defaults to :meth:`eval_sampler`.
            device: where the model runs.
        """
        from fgnn.evaluation import evaluate_layerwise, evaluate_split

        rec = self.meta.get("eval") or {}
        if rec.get("mode") == "layerwise":
            return evaluate_layerwise(self.model, dataset.graph, dataset.features,
                                      dataset.labels, getattr(dataset, f"{split}_idx"), device)
        return evaluate_split(self.model.to(device), dataset, split,
                              sampler if sampler is not None else self.eval_sampler(),
                              int(rec.get("batch_size", 8000)), int(rec.get("seed", 0)), device)


def save_model(path: Union[str, os.PathLike], model: nn.Module, identity: Mapping[str, Any], *,
               final: Optional[Mapping[str, float]] = None,
               best: Optional[Mapping[str, Any]] = None) -> Path:
    """Write a model file atomically (:func:`fgnn.checkpoint.write_torch_file`).

    Args:
        path: destination; parent directories are created.
        model: the weights to store (its ``state_dict`` and signature).
        identity: :func:`job_identity` of the job.
        final: the reported ``train_acc``/``val_acc``/``test_acc``.
        best: ``{"epoch": ..., "val_acc": ...}`` of the stored weights.

    Raises:
        WriteError: the file could not be written; nothing is left behind.
    """
    meta = {k: dict(v) if isinstance(v, Mapping) else v for k, v in identity.items()}
    meta["final"] = {k: float(v) for k, v in (final or {}).items()}
    meta["best"] = dict(best or {})
    payload = {"format": _FORMAT, "version": _VERSION, "signature": model_signature(model),
               "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
               "meta": meta}
    return write_torch_file(path, payload)


def _read(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
    """(meta, state_dict, signature) of a model file or a runtime checkpoint."""
    payload = read_torch_file(path, "model file")
    fmt = payload.get("format") if isinstance(payload, dict) else None
    if fmt == _FORMAT:
        if payload.get("version") != _VERSION:
            raise CheckpointError(path, f"model file {path} has version "
                                        f"{payload.get('version')}, this fgnn reads {_VERSION}")
        return payload["meta"], payload["state_dict"], payload["signature"]
    if fmt == "fgnn-checkpoint":
        extra = payload.get("extra") or {}
        if "job" not in extra:
            raise CheckpointError(path, f"checkpoint {path} carries no model metadata (written "
                                        f"by fgnn.training.fit or an older fgnn); load it with "
                                        f"fgnn.checkpoint.load_checkpoint into a model you build")
        state = extra.get("best_state") or payload["model"]
        return dict(extra["job"]), state, payload["signature"]
    raise CheckpointError(path, f"{path} is not an fgnn model file or checkpoint (no "
                                f"{_FORMAT!r} header)")


def load_model(path: Union[str, os.PathLike], dataset: Optional["Dataset"] = None, *,
               model: Optional[nn.Module] = None) -> SavedModel:
    """Read a model file (or a runtime checkpoint's best weights) and rebuild the model.

    Args:
        path: written by ``--save-model`` / :func:`save_model`, or a runtime ``runtime.pt``.
        dataset: when given, must be the dataset the model was trained on (same nodes, edges,
            feature dim and classes); the check runs before any weight is loaded.
        model: a model to load the weights into, needed for a custom model class (built-in
            models are rebuilt from the stored config).

    Returns:
        The :class:`SavedModel` (model in eval mode, metadata, path).

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: (a ``ValueError``, one line naming the file) unreadable or not an fgnn
            file, trained on another dataset, or another model than ``model`` (names both).
    """
    path = Path(path)
    meta, state, signature = _read(path)
    if dataset is not None:
        check_identity(path, "model file", meta, {"dataset": dataset_fingerprint(dataset)},
                       now_is="the dataset given is")
    m = meta.get("model") or {}
    if model is None:
        if not m.get("name"):
            raise CheckpointError(path, f"model file {path} holds a {_describe_model(m)}; pass "
                                        f"an instance as model= to load its weights into")
        from fgnn.config import ModelConfig
        from fgnn.models import build_model

        cfg = ModelConfig(m["name"], hidden=int(m["hidden"]), dropout=float(m["dropout"] or 0.0),
                          **({"heads": int(m["heads"])} if m.get("heads") else {}))
        model = build_model(cfg, int(m["in_dim"]), int(m["num_classes"]), int(m["num_layers"]))
    else:
        check_identity(path, "model file", meta, {"model": model_identity(model)},
                       now_is="the model given is")
    _check_signature(signature, model, path)
    model.load_state_dict(state)
    model.eval()
    return SavedModel(model=model, meta=meta, path=path)
