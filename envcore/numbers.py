"""Numbers as people read them: a signed reward never shows as ``-0.000``.

Python's ``f"{-0.0004:+.3f}"`` gives ``-0.000``, a sign with nothing behind it, and ``f"{-0.0:+.3f}"``
does too. Every reward, difference and interval the project prints to a person goes through
:func:`signed`, which rounds first and then drops the sign of a zero. Imports nothing of the project.
"""

from __future__ import annotations

import math


def signed(value: float, digits: int = 3) -> str:
    """``value`` with an explicit sign and ``digits`` decimals; a value that rounds to zero is
    ``+0.000`` (never ``-0.000``). NaN and infinities are written as Python writes them."""
    number = float(value)
    if not math.isfinite(number):
        return f"{number:+}"
    rounded = round(number, digits)
    if rounded == 0:
        rounded = 0.0  # also turns -0.0 into +0.0
    return f"{rounded:+.{digits}f}"


def signed_percent(value: float, digits: int = 0) -> str:
    """A signed fraction as a percentage (``+12%``), never ``-0%``."""
    return signed(float(value) * 100, digits) + "%"
