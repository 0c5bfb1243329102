"""Optional fields left out of a dump while unset.

A bundle's id is the hash of its canonical JSON, so a field added to a bundle, a user or a probe
must not appear in the dump of anything written before it existed: left out while it holds ``None``,
every older bundle keeps its content hash (and its id) however many optional fields come later.
"""

from __future__ import annotations

from typing import Any


def without_unset(data: Any, *names: str) -> Any:
    """``data`` (a model's dump) without each of ``names`` whose value is ``None``."""
    if isinstance(data, dict):
        for name in names:
            if name in data and data[name] is None:
                del data[name]
    return data
