"""A progress bar for long commands (quiet when stderr is not a terminal, unless forced)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from tqdm import tqdm


@contextmanager
def progress_bar(total: int, desc: str) -> Iterator[Callable[[int], None]]:
    disable = not sys.stderr.isatty() and not os.environ.get("ENVCORE_PROGRESS")
    bar = tqdm(total=total, desc=desc, unit="scenario", disable=disable, file=sys.stderr, dynamic_ncols=True)
    last = 0

    def update(done: int) -> None:
        nonlocal last
        bar.update(done - last)
        last = done

    try:
        yield update
    finally:
        bar.close()
