"""What a scenario's split allows to be shown: its hidden suite and reference fix, or words only.

A scenario of the ``train`` or ``val`` split is for learning: its hidden probes, their requests and its
reference fix may be shown once an episode is over. A ``test`` scenario (and one of a split nobody
knows) is the benchmark: its hidden suite is told in words, its reference fix is its answer key and is
never shown. The verifier (:mod:`envcore.verifier.disclosure`), the episode log's readers and the
Space all ask :func:`disclosure_for`; it lives here, below all of them, so that the page can ask it
without loading the grader.
"""

from __future__ import annotations

from typing import Literal

Disclosure = Literal["full", "words"]

SHOWN_IN_FULL = ("train", "val")
"""Splits whose hidden suites and reference fixes may be shown."""


def disclosure_for(split: str | None) -> Disclosure:
    """How much of a hidden suite a scenario of ``split`` may show: all of it for ``train`` and ``val``,
    words only for ``test`` and for a split nobody knows."""
    return "full" if split in SHOWN_IN_FULL else "words"
