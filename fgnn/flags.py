"""Command-line flags declared on the config dataclasses, and the generic walk between them.

A config field gets a flag by its metadata (:func:`flag`): the help sentence, and where the
defaults do not fit, the flag's name, value parser, choices and metavar. A field holding a nested
config is a :func:`section` that names the help group of its fields. :func:`add_flags` turns a
root config class into ``argparse`` arguments, :func:`flag_values` reads them back as dotted
field -> value and :func:`build_config` rebuilds the nested configs from those values, so a new
config field with flag metadata is a new flag with nothing else to write.

The value parsers below (:func:`int_at_least`, :func:`float_in`, ...) raise
``argparse.ArgumentTypeError`` with one line naming what they expect and the text they got.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

__all__ = ["Flag", "Section", "Leaf", "flag", "section", "leaves", "sections", "add_flags",
           "flag_values", "build_config", "int_at_least", "float_in", "auto_count", "subset_count", "fanout_list",
           "relation_fanout", "RelationFanouts", "k_list", "host_or_off"]

#: The key of a field's ``dataclasses`` metadata that holds its :class:`Flag` or :class:`Section`.
KEY = "fgnn.flag"

_FIELD_DEFAULT = object()


@dataclass(frozen=True)
class Flag:
    """How one config field appears on the command line.

    Attributes:
        help: the help sentence; ``(default: ...)`` is appended by :func:`add_flags`.
        name: the flag, when not ``--`` + the field name with ``-`` for ``_``.
        type: the value parser; unset: ``int`` for an ``int`` field, the text otherwise (a
            ``bool`` field is a switch, ``store_true``).
        choices: the accepted values.
        metavar: the value's name in ``--help``.
        nargs: ``argparse`` nargs (``"+"``: one or more values).
        action: an ``argparse.Action`` class in place of ``store``.
        negate: a ``--no-x`` switch: the field is ``not`` the switch.
        cli_default: the parser's default, when not the field's (e.g. ``"auto"`` for a field whose
            ``None`` means auto, ``None`` for one the CLI derives from other flags).
        default_text: the parenthetical closing the help, in place of ``default: <default>``.
        group: the help group, when not the enclosing :class:`Section`'s.
    """

    help: str
    name: Optional[str] = None
    type: Optional[Callable[[str], Any]] = None
    choices: Optional[Sequence[str]] = None
    metavar: Optional[str] = None
    nargs: Optional[str] = None
    action: Optional[type] = None
    negate: bool = False
    cli_default: Any = _FIELD_DEFAULT
    default_text: Optional[str] = None
    group: Optional[str] = None


@dataclass(frozen=True)
class Section:
    """A field that holds a nested config; its fields' flags go to help group ``group``."""

    group: str


def flag(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with default ``default`` and the flag ``Flag(help, **kw)``."""
    return dataclasses.field(default=default, metadata={KEY: Flag(help, **kw)})


def section(factory: Callable[[], Any], group: str) -> Any:
    """A dataclass field holding a nested config built by ``factory``, flags in ``group``."""
    return dataclasses.field(default_factory=factory, metadata={KEY: Section(group)})


@dataclass(frozen=True)
class Leaf:
    """A config field with a flag, as :func:`leaves` finds it.

    Attributes:
        path: the dotted field (``"model.hidden"``; ``"dataset"`` on the root).
        flag: the flag (``"--hidden"``).
        dest: the attribute of the parsed namespace.
        spec: the field's :class:`Flag`.
        group: the help group.
        default: the parser's default.
        switch: a ``bool`` field (``store_true``).
        parse: the value parser (``None``: the text as given).
    """

    path: str
    flag: str
    dest: str
    spec: Flag
    group: str
    default: Any
    switch: bool
    parse: Optional[Callable[[str], Any]]


def leaves(root: type, prefix: str = "", group: str = "") -> list[Leaf]:
    """Every field with a flag under the dataclass ``root``, in declaration order (a section's
    fields in its place)."""
    out: list[Leaf] = []
    for f in dataclasses.fields(root):
        meta = f.metadata.get(KEY)
        if isinstance(meta, Section):
            out += leaves(f.default_factory, f"{prefix}{f.name}.", meta.group)
        elif isinstance(meta, Flag):
            name = meta.name or "--" + f.name.replace("_", "-")
            default = f.default if meta.cli_default is _FIELD_DEFAULT else meta.cli_default
            out.append(Leaf(path=prefix + f.name, flag=name, dest=name[2:].replace("-", "_"),
                            spec=meta, group=meta.group or group,
                            default=(not default) if meta.negate else default,
                            switch=f.type in (bool, "bool"),
                            parse=meta.type or (int if f.type in (int, "int") else None)))
    return out


def sections(root: type, prefix: str = "") -> dict[str, type]:
    """Dotted path -> config class of ``root`` (path ``""``) and of every :class:`Section` under
    it (``"sampler"``, ...)."""
    out = {prefix.rstrip("."): root}
    for f in dataclasses.fields(root):
        if isinstance(f.metadata.get(KEY), Section):
            out.update(sections(f.default_factory, f"{prefix}{f.name}."))
    return out


def add_flags(parser: argparse.ArgumentParser, root: type, groups: Sequence[str],
              note: Callable[[str], str] = lambda path: "") -> dict[str, Any]:
    """Add a flag for every field of ``root`` with flag metadata to ``parser``.

    Args:
        parser: the parser to extend.
        root: the root config dataclass.
        groups: the help groups in the order ``--help`` lists them.
        note: dotted field -> text appended inside the help's default parenthetical.

    Returns:
        Group title -> its argument group (to add flags that set no field).

    Raises:
        ValueError: a field names a group not in ``groups``.
    """
    made = {title: parser.add_argument_group(title) for title in groups}
    found = leaves(root)
    for leaf in found:
        if leaf.group not in made:
            raise ValueError(f"{leaf.path}: flag group {leaf.group!r} is not one of "
                             f"{', '.join(groups)}")
    for leaf in sorted(found, key=lambda leaf: groups.index(leaf.group)):  # usage: group order
        s = leaf.spec
        kw: dict[str, Any] = dict(dest=leaf.dest, default=leaf.default,
                                  help=f"{s.help} ({s.default_text or 'default: %(default)s'}"
                                       f"{note(leaf.path)})")
        if leaf.switch:
            kw["action"] = "store_true"
        else:
            kw.update(type=leaf.parse, choices=s.choices, metavar=s.metavar, nargs=s.nargs)
            if s.action is not None:
                kw["action"] = s.action
        made[leaf.group].add_argument(leaf.flag, **kw)
    return made


def flag_values(root: type, args: argparse.Namespace) -> dict[str, Any]:
    """Dotted field -> value of every flag of ``root`` in the parsed ``args``."""
    return {leaf.path: (not getattr(args, leaf.dest)) if leaf.spec.negate
            else getattr(args, leaf.dest) for leaf in leaves(root)}


def build_config(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """``cls`` built from dotted ``values`` (fields not in them keep their defaults); nested
    configs are built first, in declaration order, each validating itself.

    Raises:
        ValueError: from a config's own validation.
    """
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        if isinstance(f.metadata.get(KEY), Section):
            kwargs[f.name] = build_config(f.default_factory, values, path + ".")
        elif path in values:
            kwargs[f.name] = values[path]
    return cls(**kwargs)


# ---------------------------------------------------------------------- value parsers
def int_at_least(lo: int) -> Callable[[str], int]:
    """A parser of integers ``>= lo``."""
    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        return v
    parse.__name__ = f"int>={lo}"
    return parse


def float_in(lo: float, hi: Optional[float], *, lo_open: bool = False, hi_open: bool = False,
             auto: bool = False) -> Callable[[str], Optional[float]]:
    """A parser of finite numbers in ``[lo, hi]`` (``hi`` None: no bound; ``*_open``: the bound
    excluded); with ``auto``, the text ``auto`` is ``None``."""
    rng = f"{'(' if lo_open else '['}{lo:g}, {'inf' if hi is None else format(hi, 'g')}" \
          f"{')' if hi_open or hi is None else ']'}"
    what = f"'auto' or a number in {rng}" if auto else f"a number in {rng}"

    def parse(text: str) -> Optional[float]:
        if auto and text == "auto":
            return None
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if (not math.isfinite(v) or v < lo or (lo_open and v == lo) or (hi is not None and v > hi)
                or (hi is not None and hi_open and v == hi)):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    parse.__name__ = "float"
    return parse


def auto_count(text: str) -> Optional[int]:
    """``auto`` -> None, else an integer >= 1."""
    if text == "auto":
        return None
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer >= 1, got {text!r}")
    return int(text)


def subset_count(text: str) -> Optional[int]:
    """``auto`` -> None, ``all`` -> 0, else an integer >= 1."""
    if text == "all":
        return 0
    try:
        return auto_count(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be 'auto', 'all' or an integer >= 1, got {text!r}") from None


def fanout_list(text: str) -> tuple[int, ...]:
    """``15,10,5`` -> ``(15, 10, 5)``: positive integers."""
    parts = text.split(",")
    if not text.strip() or not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts) \
            or any(int(p) < 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be comma-separated positive integers such as 15,10,5, got {text!r}")
    return tuple(int(p) for p in parts)


def relation_fanout(text: str) -> tuple[str, tuple[int, ...]]:
    """``cites=10,5`` -> ``("cites", (10, 5))``: a relation and fanouts >= 0."""
    rel, eq, fan = text.partition("=")
    parts = fan.split(",")
    if not eq or not rel.strip() or not all(re.fullmatch(r"\s*\d+\s*", p) for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be REL=F1,F2,... (a relation, rel or src:rel:dst, and one fanout >= 0 per "
            f"layer) such as cites=10,5, got {text!r}")
    return rel.strip(), tuple(int(p) for p in parts)


class RelationFanouts(argparse.Action):
    """Stores the :func:`relation_fanout` pairs of one flag as a dict relation -> fanouts; a
    relation named twice is an error naming it."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: D102
        out: dict[str, tuple[int, ...]] = {}
        for rel, fan in values:
            if rel in out:
                raise argparse.ArgumentError(self, f"relation {rel!r} is given twice")
            out[rel] = fan
        setattr(namespace, self.dest, out)


def k_list(text: str) -> tuple[int, ...]:
    """``10,50`` -> ``(10, 50)``: positive integers."""
    parts = text.split(",")
    if not text.strip() or not all(re.fullmatch(r"\s*\d+\s*", p) and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"must be comma-separated positive integers such as 10,50, got {text!r}")
    return tuple(int(p) for p in parts)


def host_or_off(text: str) -> Optional[str]:
    """A host; ``off``, ``none`` or the empty text -> None."""
    if text.lower() in ("off", "none", ""):
        return None
    return text
