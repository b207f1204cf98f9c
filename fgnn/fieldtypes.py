"""Type checks of config fields: a value must be of the type its dataclass field declares.

A config's ``__post_init__`` calls :func:`check_types` before its range checks, so a string for a
number or a dict for a config section is refused in one line naming the class, the field and the
value, instead of a comparison failing deep inside. By the field's annotation (``Optional[X]``
also takes ``None``):

* ``int``: an integer, not a ``bool``; an integral float (``2.0``) or a numpy integer is stored
  as the Python ``int``; a float with a fraction (``2.7``) or a value beyond 64 bits is refused
  (``ValueError``), so is anything else (``TypeError``);
* ``float``: a real number, not a ``bool`` (a numpy float is stored as a Python ``float``);
* ``bool``: ``True`` or ``False`` (or a numpy bool);
* ``str``: a string; a *path* field (named by the caller) also takes an ``os.PathLike`` and
  stores its text;
* ``tuple[int, ...]``: a sequence (not a string) of integers as above, stored as a tuple;
* a dataclass (a nested config section): an instance of it.

Other annotations (``dict``, ``Any``) are left to the config's own checks.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import typing
from typing import Any, Callable, Collection, Mapping, Optional, Union

__all__ = ["check_types", "INT_RANGE"]

#: Integers a field holds unless the caller names a narrower range: what torch's 64-bit
#: generators and tensors take.
INT_RANGE = (-(1 << 63), (1 << 63) - 1)

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotation of every init field of the dataclass ``cls`` (cached)."""
    if cls not in _HINTS:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)
                       if f.init and f.name in hints}
    return _HINTS[cls]


class _Field:
    """One field being checked: raises the error that names class, field and value."""

    def __init__(self, cls: str, name: str, value: Any) -> None:
        self.cls, self.name, self.value = cls, name, value

    def fail(self, error: type, why: str) -> None:
        raise error(f"{self.cls}.{self.name}: {why}. Received {self.name}={self.value!r} "
                    f"instead.")


def _int(f: _Field, v: Any, lo: int, hi: int, what: str = "must be an integer") -> int:
    if isinstance(v, (bool, str, bytes)) or not isinstance(v, numbers.Real):
        f.fail(TypeError, f"{what}, not {type(v).__name__}")
    if not isinstance(v, numbers.Integral):
        if not math.isfinite(float(v)) or not float(v).is_integer():
            f.fail(ValueError, f"{what}; {v!r} has a fraction"
                   if math.isfinite(float(v)) else f"{what}, not {v!r}")
    out = int(v)
    if not lo <= out <= hi:
        f.fail(ValueError, f"{what} in [{lo}, {hi}]")
    return out


def _float(f: _Field, v: Any) -> Any:
    if isinstance(v, (bool, str, bytes)) or not isinstance(v, numbers.Real):
        f.fail(TypeError, f"must be a number, not {type(v).__name__}")
    return v if type(v) in (int, float) else float(v)


def _bool(f: _Field, v: Any) -> bool:
    if not isinstance(v, bool) and type(v).__name__ != "bool_":  # numpy's bool
        f.fail(TypeError, f"must be True or False, not {type(v).__name__}")
    return bool(v)


def _str(f: _Field, v: Any, path: bool) -> str:
    if path and isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str):
        kind = "a string or an os.PathLike path" if path else "a string"
        f.fail(TypeError, f"must be {kind}, not {type(v).__name__}")
    return v


def _int_tuple(f: _Field, v: Any, lo: int, hi: int) -> tuple[int, ...]:
    if isinstance(v, (str, bytes)):
        f.fail(TypeError, "must be a sequence of integers such as (10, 5), not a string")
    try:
        items = list(v)
    except TypeError:
        f.fail(TypeError, f"must be a sequence of integers such as (10, 5), not "
                          f"{type(v).__name__}")
    return tuple(_int(f, x, lo, hi, "must hold integers") for x in items)


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``Optional[X]``, ``(hint, False)`` otherwise."""
    if typing.get_origin(hint) is Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _checker(hint: Any, path: bool, lo: int, hi: int) -> Optional[Callable[[_Field, Any], Any]]:
    """The check of a value of annotation ``hint`` (``None``: left to the config)."""
    if hint is int:
        return lambda f, v: _int(f, v, lo, hi)
    if hint is float:
        return _float
    if hint is bool:
        return _bool
    if hint is str:
        return lambda f, v: _str(f, v, path)
    if typing.get_origin(hint) is tuple and typing.get_args(hint) == (int, Ellipsis):
        return lambda f, v: _int_tuple(f, v, lo, hi)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        def section(f: _Field, v: Any) -> Any:
            if not isinstance(v, hint):
                hint_dict = f" (for a dict d: {hint.__name__}(**d))" if isinstance(v, dict) else ""
                f.fail(TypeError, f"must be a {hint.__name__}{hint_dict}, not "
                                  f"{type(v).__name__}")
            return v
        return section
    return None


def check_types(obj: Any, *, paths: Collection[str] = (),
                ranges: Optional[Mapping[str, tuple[int, int]]] = None) -> None:
    """Check (and normalise in place) every field of the dataclass instance ``obj`` against its
    annotation (module docstring).

    Args:
        obj: a dataclass instance, typically ``self`` in ``__post_init__``.
        paths: the ``str`` fields that also take an ``os.PathLike`` (stored as its text).
        ranges: field -> ``(lo, hi)``, the integers an ``int`` field may hold, both included
            (default :data:`INT_RANGE`).

    Raises:
        TypeError: a value of another type, naming the class, field and value.
        ValueError: an integer field given a float with a fraction, or an integer outside its
            range.
    """
    cls = type(obj)
    ranges = ranges or {}
    for name, hint in _hints(cls).items():
        value = getattr(obj, name)
        inner, optional = _unwrap(hint)
        if value is None and optional:
            continue
        lo, hi = ranges.get(name, INT_RANGE)
        check = _checker(inner, name in paths, lo, hi)
        if check is not None:
            setattr(obj, name, check(_Field(cls.__name__, name, value), value))
