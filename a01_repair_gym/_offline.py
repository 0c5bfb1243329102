"""Inspect's token estimate on a machine without network access.

Inspect estimates the tokens of every message with tiktoken's ``o200k_base`` encoding, which
tiktoken downloads on first use; on a machine that cannot reach it (an air-gapped evaluation box, a
CI runner without network) every ``inspect eval`` then fails before its first sample, whatever the
model. :func:`estimate_offline` keeps Inspect's own estimate wherever the encoding loads (from the
network or from ``TIKTOKEN_CACHE_DIR``) and, only where it cannot, falls back to a character count
(a token per three characters, plus Inspect's 10% buffer), saying so once in the log. The estimate
only decides when Inspect compacts a long conversation; it is never part of a score.
"""

from __future__ import annotations

import functools
import logging

CHARS_PER_TOKEN = 3.0

log = logging.getLogger(__name__)


@functools.cache
def _encoding_loads() -> bool:
    try:
        import tiktoken

        tiktoken.get_encoding("o200k_base")
        return True
    except Exception as exc:  # noqa: BLE001 - a download that failed, in whatever way
        log.warning("tiktoken's o200k_base encoding cannot be loaded (%s); token estimates use characters "
                    "instead (set TIKTOKEN_CACHE_DIR to a folder holding the encoding to use it)",
                    str(exc).splitlines()[0][:200])
        return False


def estimate_offline() -> None:
    """Put the fallback in front of Inspect's ``count_text_tokens`` (idempotent)."""
    from inspect_ai.model import _model, _tokens

    inspects = _tokens.count_text_tokens
    if getattr(inspects, "a01_offline_fallback", False):
        return

    @functools.wraps(inspects)
    def count_text_tokens(text: str) -> int:
        if _encoding_loads():
            return inspects(text)
        return max(1, int(len(text) / CHARS_PER_TOKEN * 1.1))

    count_text_tokens.a01_offline_fallback = True  # type: ignore[attr-defined]
    _tokens.count_text_tokens = count_text_tokens
    _model.count_text_tokens = count_text_tokens
