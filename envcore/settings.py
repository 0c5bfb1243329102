"""Numbers a server reads from ``A01_*`` environment variables, each checked the same way.

A variable that is unset or blank takes its default. One set to a value it cannot take (``many``,
``0`` sessions, ``-5`` seconds, ``nan``, ``1e9`` where 60 is the most) raises :class:`SettingError`,
whose message names the variable, what it takes and what it was given. That happens while the server
is built, before it listens, and ``python app.py`` prints that one line and exits 2, instead of a
traceback or, worse, a server that runs with a limit nobody meant (zero sessions, a negative
timeout).

This module imports nothing of the project, so every layer (the environment, the server, the page)
can read its settings through it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping


class SettingError(ValueError):
    """An environment variable holds a value its setting cannot take; the message says which and why."""


def _raw(variable: str, environ: Mapping[str, str] | None) -> str:
    return (os.environ if environ is None else environ).get(variable, "").strip()


def positive_int(variable: str, default: int, *, unit: str = "integer",
                 environ: Mapping[str, str] | None = None) -> int:
    """``variable`` as a whole number of at least 1 (plain digits), or ``default`` when unset or blank.
    ``unit`` only words the message (``number of bytes``)."""
    value = _raw(variable, environ)
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise SettingError(f"{variable} must be a positive {unit}, not {value!r}")
    return int(value)


def seconds(variable: str, default: float, *, minimum: float = 0.0, maximum: float = math.inf,
            zero: bool = True, environ: Mapping[str, str] | None = None) -> float:
    """``variable`` as a finite number of seconds from ``minimum`` to ``maximum`` (zero excluded unless
    ``zero``), or ``default`` when unset or blank."""
    value = _raw(variable, environ)
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if math.isfinite(number) and minimum <= number <= maximum and (zero or number != 0):
        return number
    if maximum < math.inf:
        wanted = f"a number of seconds from {minimum:g} to {maximum:g}"
    else:
        wanted = "a number of seconds" + (" above 0" if not zero else f" of at least {minimum:g}")
    raise SettingError(f"{variable} must be {wanted}, not {value!r}")
