"""The root cause of an error in one line, for the console: what an executor raised, not Ray's
wrapper of it.

An exception inside an executor reaches the driver as Ray's ``RayTaskError`` (or, when it was
raised while the actor was built, an ``ActorDiedError``). Its text starts with Ray's coloured
header line (``\\x1b[36mray::SamplerExecutor.sample_task()\\x1b[39m (pid=..., ip=...)``) and
ends, after the remote traceback, with the line that matters (``ValueError: seeds must be
distinct``). :func:`root_cause` unwraps the chain (``err.cause``, a cause that is itself a
``RayTaskError`` of a call the executor made) to the innermost exception and returns
``Type: first line of its message``; where Ray kept only the text (an ``ActorDiedError``, a
cause that could not be pickled) it reads the last exception line of the traceback text.
:func:`strip_ansi` removes terminal colour codes from any text.
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["root_cause", "strip_ansi"]

#: Longest cause text :func:`root_cause` returns; longer ones end with ``...``.
MAX_CHARS = 300

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# ``Name: message`` at the start of a line: the exception line of a Python traceback
_EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|"
                             r"Interrupt|Failure|Warning|Loss|Finished)(?:\([\w.]+\))?): (.*)$")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (terminal colours)."""
    return _ANSI.sub("", text)


def _innermost(err: BaseException) -> BaseException:
    """Follow ``.cause`` through Ray's task errors to the exception the remote code raised."""
    seen = {id(err)}
    while _is_ray_wrapper(err):
        cause = getattr(err, "cause", None)
        if not isinstance(cause, BaseException) or id(cause) in seen:
            break
        seen.add(id(cause))
        err = cause
    return err


def _is_ray_wrapper(err: BaseException) -> bool:
    """Whether ``err`` is one of Ray's errors that carry another's text (a task or actor
    error, or the plain ``RayError`` Ray puts in place of a cause it could not pickle)."""
    names = {c.__name__ for c in type(err).__mro__}
    return bool(names & {"RayTaskError", "RayActorError"}) or type(err).__name__ == "RayError"


def _from_text(text: str) -> Optional[str]:
    """The last ``Type: message`` line of a traceback text, with the message's first line."""
    found = None
    for line in strip_ansi(text).splitlines():
        m = _EXCEPTION_LINE.match(line.rstrip())
        if m and not m.group(1).startswith("ray::"):
            found = f"{m.group(1)}: {m.group(2).strip()}"
    return found


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."


def root_cause(err: BaseException) -> str:
    """``Type: message`` of the innermost cause of ``err``, in one line without colour codes.

    Args:
        err: any exception; Ray's ``RayTaskError`` and ``RayActorError`` are unwrapped.

    Returns:
        E.g. ``ValueError: seeds must be distinct`` for a ``RayTaskError(ValueError)``; for an
        error that wraps nothing, its own type and first line.
    """
    inner = _innermost(err)
    if not _is_ray_wrapper(inner):
        lines = [ln for ln in strip_ansi(str(inner)).splitlines() if ln.strip()]
        return _clip(f"{type(inner).__name__}: {lines[0]}" if lines else type(inner).__name__)
    text = getattr(inner, "traceback_str", None) or str(inner)
    found = _from_text(text) or _from_text(str(inner))
    if found:
        return _clip(found)
    lines = [ln for ln in strip_ansi(str(inner)).splitlines()
             if ln.strip() and not ln.lstrip().startswith("ray::")]
    name = type(inner).__name__
    return _clip(f"{name}: {lines[0]}" if lines else name)
