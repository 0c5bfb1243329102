"""The live app behind an episode's request tool: one worker with the current code.

An agent explores the app by sending it requests between patches. :class:`LiveApp` keeps one worker
loaded with the episode's current files; :meth:`LiveApp.update` (after each patch) drops it, and
the next request loads the new code in a fresh worker, so the agent always talks to what it wrote,
from a clean state. A request that crashes or hangs the app comes back as a response with
``status=None`` and an ``error`` saying what happened; the next request gets a fresh worker. A
worker idle for ``limits.idle_s`` is stopped by the sandbox's reaper and reloaded on demand (the
next response says the app was restarted, since its state is gone).

A request sent as a seeded user is signed with that user's credentials (:mod:`envcore.runner.actors`);
a user who signs in with a login request does so once per worker, before its first request there,
so again after every restart (a patch, a crash, an idle stop). A login that fails answers the request
with ``status=None`` and why, without sending it.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from envcore.runner.actors import Actors, ActorSession
from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest, HttpResponse
from envcore.sandbox.pool import AppLoadFailure, Sandbox, Worker, WorkerGone


class LiveApp:
    """One episode's running app. Thread-safe; requests are served one at a time."""

    def __init__(self, sandbox: Sandbox, source: AppSource, actors: Actors | None = None) -> None:
        self.sandbox = sandbox
        self.source = source
        self.actors: Actors = actors or {}
        """The seeded users' credentials, for requests sent as one of them."""
        self._session: ActorSession | None = None
        """What the actors' logins granted on the current worker (a new worker starts a new one)."""
        self.restarts = 0
        """Times a new worker was started for the same code (after a crash, hang or idle stop)."""
        self.load_error: str | None = None
        self._worker: Worker | None = None
        self._served_this_code = False
        self._lock = threading.Lock()
        sandbox.register_live(self)

    def update(self, source: AppSource) -> None:
        """Serve ``source`` from the next request on (the old worker is stopped now)."""
        with self._lock:
            self.source = source
            self.load_error = None
            self._served_this_code = False
            self._stop()

    def request(self, request: HttpRequest, *, actor: str | None = None) -> HttpResponse:
        """Send one request to the app as it is now, signed as ``actor`` (``None``: as it is).
        Raises :class:`KeyError` for an ``actor`` that is not a seeded user."""
        if actor is not None:
            ActorSession(self.actors).credentials(actor)
        with self._lock:
            restarted = False
            if self._worker is None:
                restarted = self._served_this_code
                try:
                    worker = self.sandbox.spawn(self.source)
                    worker.wait_ready(self.sandbox.limits.load_timeout_s)
                except AppLoadFailure as exc:
                    self.load_error = str(exc)
                    return HttpResponse(None, error=f"the app failed to load: {exc}")
                self._worker = worker
                self._session = ActorSession(self.actors)
                self.load_error = None
                if restarted:
                    self.restarts += 1
            try:
                if actor is not None:
                    signed = self._signed(request, actor)
                    if isinstance(signed, HttpResponse):
                        return signed
                    request = signed
                response = self._worker.request(request, self.sandbox.limits.request_timeout_s)
            except WorkerGone as exc:
                self._stop()
                self._served_this_code = True
                return HttpResponse(None, error=f"{exc}; the next request starts the app afresh")
            self._served_this_code = True
            if restarted:
                note = "the app was restarted since the last request (its in-memory state was reset)"
                response = dataclasses.replace(response, note=note)
            return response

    def _signed(self, request: HttpRequest, actor: str) -> HttpRequest | HttpResponse:
        """``request`` signed as ``actor`` on the current worker, after its login there if it needs
        one; or the answer saying why its login failed. May raise :class:`WorkerGone` (the login
        crashed the app)."""
        assert self._worker is not None and self._session is not None
        session = self._session
        if session.needs_login(actor):
            reply = self._worker.request(session.login_request(actor), self.sandbox.limits.request_timeout_s)
            session.record_login(actor, reply)
            self._served_this_code = True
        failure = session.login_failure(actor)
        if failure is not None:
            return HttpResponse(None, error=f"not sent: {failure}", not_sent=failure)
        return session.sign(request, actor)

    @property
    def running(self) -> bool:
        return self._worker is not None

    @property
    def pid(self) -> int | None:
        return self._worker.pid if self._worker else None

    def stop_if_idle(self, idle_s: float) -> bool:
        """Stop the worker if it has served nothing for ``idle_s``; called by the sandbox's reaper."""
        if not self._lock.acquire(blocking=False):
            return False  # busy serving: not idle
        try:
            if self._worker is not None and time.monotonic() - self._worker.last_used >= idle_s:
                self._stop()
                return True
            return False
        finally:
            self._lock.release()

    def _stop(self) -> None:
        self._session = None
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self) -> "LiveApp":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
