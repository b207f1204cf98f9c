"""The parser is generated from the configs' flag metadata (fgnn.flags): a field with metadata is a
flag, in its group, with its help, default and parser, and the parsed flag lands on the field."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from fgnn import cli
from fgnn.cli import FLAG_FIELDS, GROUPS, build_parser, flag_for_error
from fgnn.config import JobConfig, TrainConfig
from fgnn.flags import (add_flags, build_config, flag, flag_values, int_at_least, leaves,
                        section)


@dataclass
class _Inner:
    knob_size: int = flag(3, "size of the knob", type=int_at_least(1), metavar="N")
    kind: str = flag("a", "which kind", choices=("a", "b"), name="--knob-kind")
    fast: bool = flag(True, "disable the fast path", name="--no-fast", negate=True)
    hidden_state: int = 7  # no metadata: no flag


@dataclass
class _Root:
    name: str = flag("x", "the name", group="top")
    inner: _Inner = section(_Inner, "inner things")
    verbose: bool = flag(False, "say more", group="top")


def _parser(root: type, groups=("top", "inner things")) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_flags(p, root, groups)
    return p


def test_a_small_config_gets_its_flags_groups_defaults_and_values():
    p = _parser(_Root)
    text = " ".join(p.format_help().split())
    assert "top: --name NAME the name (default: x) --verbose say more (default: False)" in text
    assert ("inner things: --knob-size N size of the knob (default: 3) --knob-kind {a,b} "
            "which kind (default: a) --no-fast disable the fast path (default: False)") in text
    assert "hidden" not in text
    values = flag_values(_Root, p.parse_args(["--knob-size", "5", "--no-fast", "--verbose"]))
    assert values == {"name": "x", "inner.knob_size": 5, "inner.kind": "a", "inner.fast": False,
                      "verbose": True}
    cfg = build_config(_Root, values)
    assert cfg == _Root(name="x", inner=_Inner(knob_size=5, fast=False), verbose=True)
    assert build_config(_Root, flag_values(_Root, p.parse_args([]))) == _Root()


def test_a_small_config_flag_uses_its_parser_and_choices(capsys):
    p = _parser(_Root)
    with pytest.raises(SystemExit):
        p.parse_args(["--knob-size", "0"])
    assert "argument --knob-size: must be an integer >= 1, got '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        p.parse_args(["--knob-kind", "c"])
    assert "argument --knob-kind: invalid choice: 'c'" in capsys.readouterr().err


def test_a_flag_in_an_unknown_group_is_refused():
    with pytest.raises(ValueError, match="name: flag group 'top' is not one of inner things"):
        _parser(_Root, groups=("inner things",))


def test_a_new_field_in_a_job_section_is_a_new_flag():
    """One line with metadata in TrainConfig (here a subclass) and launch.py has the flag."""
    train_x = dataclasses.make_dataclass(
        "TrainX", [("warmup_steps", int, flag(0, "linear warm-up steps", metavar="W",
                                              type=int_at_least(0)))], bases=(TrainConfig,))
    job_x = dataclasses.make_dataclass(
        "JobX", [("train", train_x, section(train_x, "training"))], bases=(JobConfig,))
    p = cli._Parser(prog="launch.py")
    add_flags(p, job_x, GROUPS, note=cli._recipe_notes)
    training = next(g for g in p._action_groups if g.title == "training")
    assert "--warmup-steps" in [a.option_strings[0] for a in training._group_actions]
    assert "linear warm-up steps (default: 0)" in " ".join(p.format_help().split())
    values = flag_values(job_x, p.parse_args(["--warmup-steps", "100", "--epochs", "3"]))
    cli._sampler_defaults(values)
    cfg = build_config(job_x, values)
    assert (cfg.train.warmup_steps, cfg.train.epochs) == (100, 3)
    assert "--warmup-steps" not in FLAG_FIELDS  # the real JobConfig has no such field


def _job_leaf_fields(cls: type = JobConfig, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not
                                    dataclasses.MISSING else None):
            out |= _job_leaf_fields(f.default_factory, f"{prefix}{f.name}.")
        else:
            out.add(prefix + f.name)
    return out


def test_every_job_field_has_a_flag_and_every_flag_sets_a_field():
    parser_flags = {a.option_strings[-1] for a in build_parser()._actions
                    if a.option_strings and a.dest != "help"}
    assert parser_flags - set(FLAG_FIELDS) == {"--no-progress", "--debug"}
    assert set(FLAG_FIELDS) <= parser_flags
    assert {leaf.path for leaf in leaves(JobConfig)} == set(FLAG_FIELDS.values())
    # JobConfig.recipe too: --recipe auto|off (auto resolves the dataset's, model's, task's)
    assert _job_leaf_fields() - set(FLAG_FIELDS.values()) == set()


def test_parser_defaults_are_the_config_defaults():
    parser, ref = build_parser(), JobConfig()
    derived = {"sampler.kind", "sampler.fanouts"}  # from --model (default None)
    for action in parser._actions:
        path = FLAG_FIELDS.get(max(action.option_strings, key=len, default=""))
        if path is None or path in derived:
            continue
        section_, _, name = path.rpartition(".")
        want = getattr(getattr(ref, section_) if section_ else ref, name)
        got = action.type(action.default) if isinstance(action.default, str) and action.type \
            else action.default
        if path == "runtime.switching":
            got = not got
        assert got == want, path


@pytest.mark.parametrize("message, line", [
    ("RuntimeConfig.stall_timeout_s: must be > 0. Received stall_timeout_s=0 instead.",
     "argument --stall-timeout: must be > 0. Received stall_timeout_s=0 instead."),
    ("LinkConfig.exclude: bad", "argument --exclude-seed-edges: bad"),
    ("JobConfig.task: bad", "argument --task: bad"),
    ("JobConfig.recipe: bad", "argument --recipe: bad"),
    ("JobConfig.nosuch: bad", "JobConfig.nosuch: bad"),  # no flag: the text as it is
])
def test_config_errors_name_the_flag_of_the_field(message, line):
    assert flag_for_error(ValueError(message)) == line


def test_a_relation_named_twice_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--relation-fanouts", "cites=5,3", "cites=1,1"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "launch.py: error: argument --relation-fanouts: relation 'cites' is given twice"]
    args = build_parser().parse_args(["--relation-fanouts", "cites=5,3", "a:w:b=1,0"])
    assert args.relation_fanouts == {"cites": (5, 3), "a:w:b": (1, 0)}
