"""A recipe fills only the fields the user did not set (issue 39): a field set to its default
value -- in a ``JobConfig`` built in Python or as a typed ``launch.py`` flag -- keeps that value,
for every field every recipe can set."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from fgnn.cli import _DEST_FIELDS, build_parser, config_from_args
from fgnn.config import RECIPES, JobConfig, ModelConfig, TrainConfig
from fgnn.given import given_of
from fgnn.recipes import (GAE_RECIPE, KIPF_RECIPE, PINSAGE_REC_RECIPE, given_fields,
                          resolve_recipe)

#: recipe -> (dataset, model, task) that selects it, and the recipe
CONTEXTS = {
    "kipf-welling": (("cora", "gcn", "node"), KIPF_RECIPE),
    "gae": (("cora", "gcn", "link"), GAE_RECIPE),
    "pinsage-rec": (("useritem:num_users=100", "pinsage", "recsys"), PINSAGE_REC_RECIPE),
}
try:  # GAT's recipe, where it is built in
    from fgnn.recipes import VELICKOVIC_RECIPE
    CONTEXTS["velickovic"] = (("cora", "gat", "node"), VELICKOVIC_RECIPE)
except ImportError:  # pragma: no cover
    pass

CASES = [(name, field) for name, (_, recipe) in CONTEXTS.items() for field in recipe.values]
_DEFAULT = JobConfig()


def _default(field: str):
    section, _, name = field.partition(".")
    return getattr(getattr(_DEFAULT, section), name)


def test_every_recipe_with_values_is_covered():
    from fgnn import recipes

    named = {r.name for r in vars(recipes).values() if isinstance(r, recipes.Recipe) and r.values}
    assert named <= set(CONTEXTS) and set(CONTEXTS) <= set(RECIPES)


@pytest.mark.parametrize("name,field", CASES)
def test_a_python_field_set_to_its_default_keeps_it(name, field):
    (dataset, model, task), recipe = CONTEXTS[name]
    section, _, attr = field.partition(".")
    value = _default(field)
    # (where the recipe's value is the default too, the case holds either way)
    sections = {"model": {"name": model}}
    sections.setdefault(section, {})[attr] = value
    built = {s: type(getattr(_DEFAULT, s))(**kw) for s, kw in sections.items()}
    cfg = resolve_recipe(JobConfig(dataset=dataset, task=task, **built))
    assert cfg.recipe == name
    assert getattr(getattr(cfg, section), attr) == value, field
    # the fields not set still take the recipe's values
    for other, v in recipe.values.items():
        if other != field and other.partition(".")[0] != "sampler":
            s, _, a = other.partition(".")
            assert getattr(getattr(cfg, s), a) == v, other


def _flag(field: str) -> str:
    dests = [d for d, f in _DEST_FIELDS.items() if f == field]
    for action in build_parser()._actions:
        if action.dest in dests:
            return action.option_strings[0]
    raise AssertionError(f"no flag for {field}")


def _text(value) -> str:
    if value is None:  # the auto of --batch-size
        return "auto"
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


@pytest.mark.parametrize("name,field", CASES)
def test_a_flag_typed_at_its_default_keeps_it(name, field):
    (dataset, model, task), _ = CONTEXTS[name]
    value = _default(field)
    argv = ["--dataset", dataset, "--model", model, "--task", task, _flag(field), _text(value)]
    cfg = config_from_args(build_parser().parse_args(argv))
    section, _, attr = field.partition(".")
    assert cfg.recipe == name and getattr(getattr(cfg, section), attr) == value


def test_the_given_fields_survive_replace_and_pickling():
    cfg = JobConfig(dataset="cora", train=TrainConfig(epochs=10, lr=0.01))
    assert given_fields(cfg) == {"dataset", "train.epochs", "train.lr"}
    again = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, weight_decay=0.0))
    assert given_fields(again) == {"dataset", "train.epochs", "train.lr", "train.weight_decay"}
    assert given_fields(pickle.loads(pickle.dumps(again))) == given_fields(again)
    assert given_of(ModelConfig("sage")) == {"name"}
    resolved = resolve_recipe(cfg)
    assert (resolved.train.epochs, resolved.train.lr, resolved.train.batch_size) == \
        (10, 0.01, KIPF_RECIPE.values["train.batch_size"])
