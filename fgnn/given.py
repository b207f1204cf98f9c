"""Which fields of a dataclass config the user gave: a recipe fills only the others.

A value equal to the default is still a value the user set (``TrainConfig(epochs=200)`` keeps
200 under any recipe), so "given" cannot be read off the values (issue 39). :func:`track_given`
wraps a dataclass's ``__init__`` to record the names of the arguments it was called with;
:func:`given_of` reads them back. ``dataclasses.replace(obj, **changes)`` builds a new object
from every field, so the wrapper recognises a call from ``replace`` and records ``obj``'s given
fields plus the fields whose values ``replace`` changed (by identity: a field passed its own
current value counts as given only if it was).

The record is an ordinary instance attribute (:data:`ATTR`), so it survives pickling (Ray ships
configs to the executors) and copying, and takes no part in ``==`` or ``asdict``. ``launch.py``
does not need it: it knows the flags typed (``fgnn.cli``'s ``given_dests``).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any, Optional, TypeVar

__all__ = ["ATTR", "track_given", "given_of"]

#: The instance attribute holding the given field names (a frozenset).
ATTR = "_fgnn_given"

T = TypeVar("T")

#: The code objects of ``dataclasses.replace`` (and its 3.13 worker ``_replace``).
_REPLACE_CODES = tuple(f.__code__ for f in (getattr(dataclasses, "replace", None),
                                           getattr(dataclasses, "_replace", None))
                       if f is not None and hasattr(f, "__code__"))


def track_given(cls: type[T]) -> type[T]:
    """Class decorator (above ``@dataclass``): every instance records the fields its
    constructor was given (:func:`given_of`)."""
    init = cls.__init__
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = frozenset(names[:len(args)]) | frozenset(kwargs)
        source = _replaced_object(cls)
        if source is not None:
            before = given_of(source)
            changed = {n for n in kwargs if getattr(source, n, _MISSING) is not kwargs[n]}
            given = frozenset(changed | (before if before is not None else set(kwargs)))
        object.__setattr__(self, ATTR, given)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


_MISSING = object()


def _replaced_object(cls: type) -> Optional[Any]:
    """The object ``dataclasses.replace`` is copying when it calls ``cls(...)`` now, else
    None (the caller two frames up: this function's caller is the wrapped ``__init__``)."""
    frame = sys._getframe(2)
    if frame.f_code not in _REPLACE_CODES:
        return None
    obj = frame.f_locals.get("obj")
    return obj if type(obj) is cls else None


def given_of(obj: Any) -> Optional[frozenset[str]]:
    """The fields ``obj``'s constructor was given; None for an object not tracked (a class
    without :func:`track_given`, or one built without calling ``__init__``)."""
    value = getattr(obj, ATTR, None)
    return value if isinstance(value, frozenset) else None
