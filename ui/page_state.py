"""Gradio's per-page state, made fair to every visitor of a public page.

Gradio keeps a state for every browser page it has seen, keyed by a session hash the page's script
makes up, and creates one for any hash a request names. Past its capacity it forgets the least
recently used page without running the page's delete callbacks. On a public Space that lets one
visitor with a script evict everyone else's page (a request per made-up hash), and an evicted page's
play session kept its slot until its idle timeout, so later visitors were refused.

:class:`PageStates` replaces the page's state holder (:func:`guard_page_states`) and changes two
things:

* **New pages are rationed per visitor.** A visitor (one client address, as
  :class:`~envcore.server.guard.ClientPolicy` finds it behind a proxy) may start at most
  ``A01_UI_NEW_PAGES_PER_CLIENT`` pages (default 12) in ``A01_UI_NEW_PAGES_WINDOW_S`` seconds (default
  600); a request naming one more new hash is refused with HTTP 429 before any state is made. A person
  reloading the page now and then never meets the limit; a script making up hashes does at once, and
  to evict a page it would need more addresses than the page has pages divided by the allowance.
* **A forgotten page closes its sessions.** When a page's state is dropped for capacity, its delete
  callbacks run (the play and live-agent sessions it held are closed) and the session hub closes
  everything the page opened, so its slots are free for the next visitor.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException
from gradio.state_holder import StateHolder

from envcore.server.guard import CURRENT_CLIENT, ClientPolicy
from envcore.settings import positive_int, seconds

DEFAULT_NEW_PAGES_PER_CLIENT = 12
DEFAULT_NEW_PAGES_WINDOW_S = 600.0


class PageStates(StateHolder):
    """A :class:`gradio.state_holder.StateHolder` that rations new pages per visitor and closes what a
    forgotten page held (see the module docstring)."""

    def configure(self, *, policy: ClientPolicy, on_forget: Callable[[str], Any], per_client: int,
                  window_s: float, clock: Callable[[], float] = time.monotonic) -> PageStates:
        self.policy, self.on_forget = policy, on_forget
        self.per_client, self.window_s, self.clock = per_client, window_s, clock
        self.started: dict[str, deque[float]] = defaultdict(deque)
        """When each capped visitor started its recent pages."""
        return self

    def __getitem__(self, session_id: str) -> Any:
        if session_id not in self.session_data:
            self._admit(CURRENT_CLIENT.get())
        return super().__getitem__(session_id)

    def _admit(self, client: str | None) -> None:
        if not self.policy.is_capped(client):
            return
        now = self.clock()
        with self.lock:
            recent = self.started[client]  # type: ignore[index]
            while recent and now - recent[0] > self.window_s:
                recent.popleft()
            if len(recent) >= self.per_client:
                raise HTTPException(status_code=429, detail=(
                    f"this address opened {len(recent)} pages in the last {self.window_s / 60:.0f} minutes, the most "
                    "one visitor may: use a page you have open, or try again later"))
            recent.append(now)
            for stale in [c for c, times in self.started.items() if not times or now - times[-1] > self.window_s]:
                del self.started[stale]

    def update(self, session_id: str) -> None:
        with self.lock:
            if session_id in self.session_data:
                self.session_data.move_to_end(session_id)
            forgotten = list(itertools.islice(self.session_data, max(len(self.session_data) - self.capacity, 0)))
        for evicted in forgotten:  # their callbacks run outside the lock
            self.forget(evicted)

    def forget(self, session_id: str) -> None:
        """Drop a page's state, running its delete callbacks, and close what it opened."""
        try:
            self.delete_state(session_id)
        finally:
            with self.lock:
                self.session_data.pop(session_id, None)
                self.time_last_used.pop(session_id, None)
            self.on_forget(session_id)


def guard_page_states(blocks: Any, *, policy: ClientPolicy, on_forget: Callable[[str], Any],
                      environ: Any = None) -> PageStates:
    """Make the state holder of mounted ``blocks`` a :class:`PageStates` (the one object Gradio's app
    and the blocks share), configured from the environment."""
    holder = blocks.state_holder
    holder.__class__ = PageStates
    return holder.configure(
        policy=policy, on_forget=on_forget,
        per_client=positive_int("A01_UI_NEW_PAGES_PER_CLIENT", DEFAULT_NEW_PAGES_PER_CLIENT, environ=environ),
        window_s=seconds("A01_UI_NEW_PAGES_WINDOW_S", DEFAULT_NEW_PAGES_WINDOW_S, environ=environ, zero=False),
    )
