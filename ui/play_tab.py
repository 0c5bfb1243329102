"""The Play tab: a person plays one episode by hand, with the agent's own tools.

Every button is one tool of the registry sent through the session facade, so a human episode is
stepped, budgeted, refused and graded exactly like an agent's, and is logged in the shared
episode-log format as a human-eval result (``source`` ``human``). Opening a file is a ``read_file``
step (the log shows what the player looked at); applying an edited file sends the ``apply_patch``
diff between the file as the episode holds it and the editor's text; the diff, the visible tests and
the submission are ``view_diff``, ``run_tests`` and ``submit``. Hidden probes are shown only after
submit, from :meth:`~envcore.server.sessions.SessionHub.verdict`.

Every mistake is a message beside the control that made it (:data:`MESSAGE_SLOTS`, see
:mod:`ui.wiring`), never an error overlay, and costs nothing: no step, no lost text, no lost
episode. Messages use the page's own words: what the environment tells an agent ("reset to start
another") is said as the page's button says it ("press New episode", :func:`page_words`).

Choices:

* **The editor never loses what the player typed** (:class:`EditorState`). The editor cannot undo a
  patch: applying it is refused once the file has changed since it was opened. Text typed and not
  applied yet is kept whatever replaces the editor's content: opening another file keeps it as that
  file's draft (reopening the file brings it back); a pasted diff that changes the open file keeps it
  on top of the patched file when it still applies there, and otherwise sets it aside in a box under
  the editor, with a message saying so. New episode and Submit, which would drop or not grade it,
  ask first: the first press says what is not applied, a second press goes on.
* **A friendly first episode** (:func:`first_scenario`): a visitor's first New episode, with every
  choice left as the page shows it, plays one fixed tier-1 scenario whose app is a single file, on a
  held-out split when the cache has one; later episodes (and a first one with any choice made)
  follow the visitor's choices.
* **Every split of the cache** is offered (:func:`split_choices`), read from the cache, never a list
  written here.

A response shows its status, every header and the body; the requests of the episode are listed,
newest first; diffs are coloured (:mod:`ui.diff_view`).

:class:`PlayController` holds the actions (plain methods returning named outputs, see
:mod:`ui.wiring`); :func:`build` lays out the components and binds them.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import gradio as gr
import pandas as pd

from envcore.cache import ScenarioCache
from envcore.env.actions import A01Observation, A01State
from envcore.env.environment import ResetError
from envcore.env.hints import HINTS
from envcore.env.render import response_headers
from envcore.patching import PatchError, apply_patch, make_diff
from envcore.server.sessions import HUMAN_STEP_BUDGETS, SessionError, SessionHub, Visitor, human_agent_id
from ui import diff_view, rollout_view, safe, teaching_view
from ui.wiring import NOTICE, QUICK, REFUSED, UserError, wire

ANY = "any"
ANONYMOUS = "(anonymous)"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
LOG_COLUMNS = ["step", "tool", "refused", "ms"]
PROBE_COLUMNS = list(rollout_view.PROBE_COLUMNS)
PROBE_WIDTHS = ["100px", "120px", "90px", "90px", "300px", "260px", "200px"]
"""Fixed widths (the table scrolls sideways in its own box on a narrow screen): shares of a phone's width
broke every header into letters."""
MESSAGE_SLOTS = ("new", "code", "search", "patch", "http", "tests", "submit", "hint")
"""Where the tab's messages appear: beside New episode, the editor, search, the pasted diff, Send, the
test and diff buttons, Submit, and the hint button."""
EVENT_OPTIONS = QUICK
"""A Play step needs no queue to be bounded: each session runs one at a time and the hub caps the
sessions. Starting an episode and submitting (a sandbox's start, the whole hidden suite) keep it."""
QUEUED: dict[str, Any] = {"queue": True}
SETTLE_WAIT_S = 3.0
"""How long the checklist waits, after a request, for the coach to judge it."""
NO_EPISODE = "No episode yet: pick a scenario (or leave everything as it is) and press **New episode**."
DEFAULT_SPLIT = "test"
"""The split the page offers first (when the cache has it): held out, as the agents' evaluation is."""
FIRST_EPISODE_NOTE = ("A friendly first scenario: tier 1, its app in one file. The next New episode follows "
                      "your choices above.")
PAGE_WORDS = (
    ("reset to start another", "press New episode to start another"),
    ("call reset first", "press New episode first"),
    ("start one first", "press New episode first"),
    ("start a new episode", "press New episode"),
)
"""What the environment and the session hub say to an agent or an API client, as this page says it
(its button is *New episode*: there is no "reset" on the page)."""
SET_ASIDE_KEPT = 5
"""Texts kept in the set-aside box at most (the newest)."""


def _option(value: Any) -> str | None:
    return None if value in (None, "", ANY) else str(value)


def _seed(value: Any) -> int | None:
    """The seed box's text: empty draws a seed; anything else must be a non-negative integer."""
    text = str(value).strip() if value is not None else ""
    if not text:
        return None
    if not text.isdigit() or len(text) > 18:
        raise UserError(f"The seed must be a non-negative integer (or empty to draw one), not {text[:20]!r}.")
    return int(text)


def _budget(value: Any) -> int:
    """The step budget: the slider's value, brought into its range (a request can send any number)."""
    try:
        budget = int(float(value))
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"The step budget must be a number from {HUMAN_STEP_BUDGETS[0]} to "
                        f"{HUMAN_STEP_BUDGETS[1]}.") from None
    return min(max(budget, HUMAN_STEP_BUDGETS[0]), HUMAN_STEP_BUDGETS[1])


def page_words(text: str) -> str:
    """``text`` with the environment's words for its actions replaced by the page's (:data:`PAGE_WORDS`)."""
    for said, shown in PAGE_WORDS:
        text = text.replace(said, shown)
    return text


def split_choices(cache: ScenarioCache) -> tuple[list[str], str]:
    """The Split dropdown: ``any`` and every split the cache holds (:meth:`ScenarioCache.splits`), and
    the one shown first (:data:`DEFAULT_SPLIT` when the cache has it, else ``any``)."""
    splits = cache.splits()
    return [ANY, *splits], DEFAULT_SPLIT if DEFAULT_SPLIT in splits else ANY


def _code_files(files: dict[str, str]) -> list[str]:
    return [path for path in files if path.endswith(".py")]


def first_scenario(cache: ScenarioCache) -> str | None:
    """The scenario a new visitor plays first, or ``None`` when the cache has no tier-1 scenario whose
    app is one file.

    Why this one: a newcomer should meet the game at its easiest and see the whole app at once. So a
    tier-1 scenario (the simplest bugs) whose app is a single Python file (nothing to hunt for across
    files; its data files aside), the shortest such app first, then by id, so every visitor meets the
    same one and it is the same on every start. A held-out split is preferred (the cache's splits other
    than ``train`` and ``val``, in its order: ``test`` first), so a visitor's first score stands beside
    the agents' held-out scores; then ``val``, then ``train``."""
    splits = cache.splits()
    order = [s for s in splits if s not in ("train", "val")] + [s for s in ("val", "train") if s in splits]
    for split in order:
        found = []
        for scenario_id in cache.ids(split=split, tier=1):
            try:
                files = cache.load(scenario_id).files
            except Exception:  # a corrupt entry is the cache's problem, reported where it is served
                continue
            code = _code_files(files)
            if len(code) == 1:
                found.append((files[code[0]].count("\n"), scenario_id))
        if found:
            return min(found)[1]
    return None


def _same_text(text: str, base: str) -> bool:
    """Whether the editor's ``text`` is ``base`` (editors drop the final newline)."""
    return text == base or text + "\n" == base


def _rebase(base: str, text: str, current: str) -> str | None:
    """The edit from ``base`` to ``text`` applied to ``current`` (the file after another patch), or
    ``None`` when it does not apply there (the patch changed the same lines)."""
    if text and not text.endswith("\n") and base.endswith("\n"):
        text += "\n"
    edit = make_diff({"f": base}, {"f": text})
    if not edit:
        return current
    try:
        return apply_patch({"f": current}, edit)["f"]
    except (PatchError, KeyError):
        return None


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EditorState:
    """What the page keeps about the editor (its ``editing`` state): the file it was filled from and
    that file's text then (``base``), drafts of other files, texts set aside, and the question asked.

    A page state may hold anything a request sent, so :meth:`of` reads it defensively."""

    path: str = ""
    base: str | None = None
    drafts: dict[str, tuple[str, str]] = field(default_factory=dict)
    """By path, ``(base, text)``: unapplied text of a file the player left for another."""
    set_aside: tuple[tuple[str, str], ...] = ()
    """``(path, text)``: unapplied text that no longer fits its file (a patch changed the same lines)."""
    asked: str = ""
    """``<action>:<fingerprint>`` of the unapplied text a New episode or Submit asked about."""

    @classmethod
    def of(cls, editing: Any) -> EditorState:
        if not isinstance(editing, dict):
            return cls()
        path = editing.get("path") if isinstance(editing.get("path"), str) else ""
        base = editing.get("base") if isinstance(editing.get("base"), str) else None
        drafts = {p: (d[0], d[1]) for p, d in (editing.get("drafts") or {}).items()
                  if isinstance(p, str) and isinstance(d, (list, tuple)) and len(d) == 2
                  and all(isinstance(x, str) for x in d)} if isinstance(editing.get("drafts"), dict) else {}
        aside = tuple((a[0], a[1]) for a in editing.get("set_aside") or () if isinstance(a, (list, tuple))
                      and len(a) == 2 and all(isinstance(x, str) for x in a))
        asked = editing.get("asked") if isinstance(editing.get("asked"), str) else ""
        return cls(path, base, drafts, aside, asked)

    def state(self) -> dict[str, Any]:
        """The page state: only what is set (an editor with nothing pending is ``{"path", "base"}``)."""
        out: dict[str, Any] = {"path": self.path, "base": self.base} if self.path else {}
        if self.drafts:
            out["drafts"] = {p: list(d) for p, d in self.drafts.items()}
        if self.set_aside:
            out["set_aside"] = [list(a) for a in self.set_aside]
        if self.asked:
            out["asked"] = self.asked
        return out

    def unapplied(self, text: str | None) -> bool:
        """Whether the editor's ``text`` differs from the file it was filled from."""
        return bool(self.path) and self.base is not None and text is not None and not _same_text(text, self.base)

    def pending(self, text: str | None) -> list[str]:
        """The files with text not applied yet: the open one (when edited), then the drafts."""
        return ([self.path] if self.unapplied(text) else []) + [p for p in self.drafts if p != self.path]

    def aside(self, path: str, text: str) -> EditorState:
        return replace(self, set_aside=((*self.set_aside, (path, text)))[-SET_ASIDE_KEPT:])


def set_aside_update(editor: EditorState) -> Any:
    """The box under the editor that holds texts set aside (hidden while there are none)."""
    if not editor.set_aside:
        return gr.update(value="", visible=False)
    text = "\n\n".join(f"# ----- {path}: your text, not applied -----\n{body}" for path, body in editor.set_aside)
    files = ", ".join(dict.fromkeys(path for path, _ in editor.set_aside))
    return gr.update(value=text, visible=True,
                     label=f"Set aside: your unapplied text of {files} (a patch changed the same lines; copy what you need)")


class PlayController:
    """The Play tab's actions; each returns a dict of named outputs (see :func:`build`).

    ``editing`` (a page state, :class:`EditorState`) is what the editor was filled from: ``{"path":
    ..., "base": text}``, with drafts and texts set aside when there are any. Applying the editor's
    text is refused when the file has changed since (another patch was applied), so an editor that
    shows an older version can never undo a fix; after every patch the editor shows the file as the
    workspace holds it, with the player's unapplied edit kept on top of it when it still applies
    (see the module docstring). Actions that may replace the editor's text take the editor's text
    too (``text``; ``None``: not known, nothing unapplied)."""

    def __init__(self, hub: SessionHub) -> None:
        self.hub = hub
        self.default_split = split_choices(hub.runtime.cache)[1] if hub is not None else DEFAULT_SPLIT
        self._first: tuple[str | None] | None = None
        self._first_lock = threading.Lock()

    # ----- helpers -----------------------------------------------------------------------------
    def first_scenario(self) -> str | None:
        """:func:`first_scenario` of the cache served, found once."""
        with self._first_lock:
            if self._first is None:
                self._first = (first_scenario(self.hub.runtime.cache),)
            return self._first[0]

    def _session(self, sid: str | None) -> str:
        if not self.hub.has_episode(sid):
            raise UserError("No episode is running in this tab yet (or it expired): press New episode first.")
        return str(sid)

    def _step(self, sid: str | None, action: dict[str, Any]) -> tuple[str, A01Observation]:
        sid = self._session(sid)
        try:
            return sid, self.hub.step(sid, action)
        except SessionError as exc:
            raise UserError(page_words(str(exc))) from None

    def _progress(self, session_id: str, observation: A01Observation | None = None, *, show_diff: bool = False,
                  **named: Any) -> dict[str, Any]:
        """The status line and the checklist (and with ``show_diff`` the current diff), from one read of
        the episode's state; the refusal of ``observation`` (if any) for the action's message."""
        state = self.hub.state(session_id)
        if show_diff:
            named["diff"] = diff_view.diff_html(state.diff)
        if observation is not None and observation.error:
            named[REFUSED] = f"Refused: {page_words(observation.error)}"
        named.setdefault("checklist", teaching_view.checklist_markdown(self.hub.checklist(session_id)))
        return {"status": status_text(state), **named}

    def _patched(self, sid: str, observation: A01Observation, editing: Any, text: str | None = None
                 ) -> dict[str, Any]:
        """After a patch: the diff, the file list, and the open file as the workspace now holds it, with
        the player's unapplied edit of it (``text``) kept: left as it is when the patch did not touch
        the file, put on top of the patched file when it still applies there, else set aside."""
        if observation.error:
            return self._progress(sid, observation)
        named: dict[str, Any] = {"files": gr.update(choices=observation.files), NOTICE: observation.text}
        editor = replace(EditorState.of(editing), asked="")
        path = editor.path
        if path:
            held = editor.unapplied(text)
            current = self.hub.current_file(sid, path)
            notes = [observation.text]
            if current is None:
                if held:
                    editor = editor.aside(path, str(text))
                    notes.append(f"Your unapplied edit of {path} is set aside under the editor.")
                    named["set_aside"] = set_aside_update(editor)
                named.update(editor=gr.update(value="", label=f"{path} (deleted by the patch)"))
                editor = replace(editor, path="", base=None)
            elif held and current == editor.base:
                notes.append(f"Your unapplied edit of {path} stays in the editor (this patch did not change it).")
            elif held:
                merged = _rebase(str(editor.base), str(text), current)
                if merged is not None:
                    notes.append(f"Your unapplied edit of {path} is kept on top of the patched file (not applied yet).")
                    named.update(editor=gr.update(value=merged, label=path))
                else:
                    editor = editor.aside(path, str(text))
                    notes.append(f"This patch changed the lines you were editing in {path}: your unapplied text is "
                                 "set aside under the editor (copy what you need); the editor shows the file now.")
                    named.update(editor=gr.update(value=current, label=path), set_aside=set_aside_update(editor))
                editor = replace(editor, base=current)
            else:
                named.update(editor=gr.update(value=current, label=path))
                editor = replace(editor, base=current)
            named[NOTICE] = " ".join(n for n in notes if n)
        named["editing"] = editor.state()
        return self._progress(sid, show_diff=True, **named)

    def _ask_first(self, action: str, editing: Any, text: str | None, question: str) -> dict[str, Any] | None:
        """The question to ask before ``action`` drops or leaves out the player's unapplied text, or
        ``None`` to go on (nothing unapplied, or this very text was asked about on the last press)."""
        editor = EditorState.of(editing)
        pending = editor.pending(text)
        if not pending:
            return None
        mark = f"{action}:{_fingerprint(pending, text, editor.drafts)}"
        if editor.asked == mark:
            return None
        files = ", ".join(pending)
        return {"editing": replace(editor, asked=mark).state(), REFUSED: question.format(files=files)}

    # ----- actions -----------------------------------------------------------------------------
    def new_episode(self, sid: str | None, split: str, bug_class: str, tier: str, domain: str, scenario: str,
                    seed: str | int | None, budget: float, nickname: str, editing: Any = None,
                    text: str | None = None, *, visitor: Visitor | None = None) -> dict[str, Any]:
        seed = _seed(seed)
        max_steps = _budget(budget)
        if self.hub.has_episode(sid) and not self.hub.state(str(sid)).done:
            asked = self._ask_first("new", editing, text, (
                "Your edit of {files} is not applied yet, and a new episode starts on another app. Press Apply "
                "edit first to keep it in this episode, or press New episode again to start anyway."))
            if asked is not None:
                return asked
        chosen = _option((scenario or "").strip())
        first = (sid is None and chosen is None and seed is None and split in (self.default_split, None, "")
                 and all(_option(v) is None for v in (bug_class, tier, domain)))
        if first:
            chosen = self.first_scenario()
            first = chosen is not None
        opened = None
        try:
            if not self.hub.is_open(sid):
                sid = opened = self.hub.open(visitor=visitor)
            assert sid is not None
            observation = self.hub.reset(
                sid, seed=seed, split=_option(split),
                tier=None if _option(tier) is None else int(tier), bug_class=_option(bug_class),
                domain=_option(domain), scenario=chosen, max_steps=max_steps,
                agent_id=human_agent_id(nickname, sid))
        except (SessionError, ResetError) as exc:
            if opened:  # a session opened for an episode that could not start must not keep its slot
                self.hub.close(opened)
            raise UserError(page_words(str(exc))) from None
        intro = observation.result or {}
        users = [u["username"] for u in intro.get("users", [])]
        out = self._progress(
            sid, sid=sid, task=task_markdown(intro),
            files=gr.update(choices=observation.files, value=None),
            editor=gr.update(value="", label="File (open one on the left)"),
            editing=EditorState(set_aside=EditorState.of(editing).set_aside).state(),
            as_user=gr.update(choices=[ANONYMOUS, *users], value=users[0] if users else ANONYMOUS),
            response="",
            history=history_markdown(None),
            tests=pd.DataFrame(columns=PROBE_COLUMNS),
            diff=diff_view.diff_html(""),
            verdict="",
            breakdown=rollout_view.breakdown_frame(None),
            probes=pd.DataFrame(columns=PROBE_COLUMNS),
            search_results="",
            log=pd.DataFrame(columns=LOG_COLUMNS),
            hints=teaching_view.hints_markdown([], HINTS[0]),
            debrief="",
            reference_fix=teaching_view.reference_fix_html(None),
            **{f"{slot}_msg": "" for slot in MESSAGE_SLOTS if slot != "new"},
        )
        if first:
            out[NOTICE] = FIRST_EPISODE_NOTE
        return out

    def open_file(self, sid: str | None, path: str | None, editing: Any = None, text: str | None = None
                  ) -> dict[str, Any]:
        """Open ``path`` in the editor (a ``read_file`` step). Unapplied text of the file open before is
        kept as its draft; a draft of ``path`` comes back (on top of the file as it is now when another
        patch changed it, or set aside when it no longer applies there)."""
        if not path:
            return {}
        editor = replace(EditorState.of(editing), asked="")
        if editor.path == path and editor.unapplied(text):
            return {}  # the file is open with the player's edit: opening it again would replace that
        sid, observation = self._step(sid, {"tool": "read_file", "path": path})
        content = (observation.result or {}).get("content")
        if content is None:
            return self._progress(sid, observation)
        notes = []
        drafts = dict(editor.drafts)
        if editor.unapplied(text):
            drafts[editor.path] = (str(editor.base), str(text))
            notes.append(f"Your unapplied edit of {editor.path} is kept: open {editor.path} again to go on with it.")
        current = self.hub.current_file(sid, path)
        shown = current if current is not None else content
        named: dict[str, Any] = {}
        draft = drafts.pop(path, None)
        editor = replace(editor, path=path, base=shown, drafts=drafts)
        if draft is not None:
            base, draft_text = draft
            merged = draft_text if base == shown else _rebase(base, draft_text, shown)
            if merged is not None:
                shown = merged
                notes.append(f"Your unapplied edit of {path} is back (not applied yet).")
            else:
                editor = editor.aside(path, draft_text)
                named["set_aside"] = set_aside_update(editor)
                notes.append(f"A patch changed the lines of your unapplied edit of {path}: it is set aside under "
                             "the editor (copy what you need).")
        if notes:
            named[NOTICE] = " ".join(notes)
        return self._progress(sid, observation, editor=gr.update(value=shown, label=path), editing=editor.state(),
                              **named)

    def apply_edit(self, sid: str | None, editing: Any, text: str) -> dict[str, Any]:
        sid = self._session(sid)
        path = _editing_path(editing)
        if not path:
            raise UserError("Open a file on the left first, edit it, then press Apply edit.")
        current = self.hub.current_file(sid, path)
        if current is None:
            raise UserError(f"{path} is not a file of this app (any more): open another file.")
        if isinstance(editing, dict) and editing.get("base") is not None and editing["base"] != current:
            raise UserError(f"{path} has changed since it was opened here (another patch was applied), so "
                            "applying this editor would undo that change. Your text is still in the editor: "
                            "copy what you need, open the file again, and redo your edit there.")
        if text and not text.endswith("\n") and current.endswith("\n"):
            text += "\n"  # editors drop the final newline; keep the file's
        diff = make_diff({path: current}, {path: text})
        if not diff:
            raise UserError("The editor holds the file as it is: nothing to apply.")
        sid, observation = self._step(sid, {"tool": "apply_patch", "diff": diff})
        return self._patched(sid, observation, editing)

    def apply_diff(self, sid: str | None, diff: str, editing: Any, text: str | None = None) -> dict[str, Any]:
        sid = self._session(sid)
        if not (diff or "").strip():
            raise UserError("Paste a unified diff first (--- a/path, +++ b/path, @@ hunks).")
        sid, observation = self._step(sid, {"tool": "apply_patch", "diff": diff})
        return self._patched(sid, observation, editing, text)

    def search(self, sid: str | None, query: str) -> dict[str, Any]:
        sid = self._session(sid)
        if not (query or "").strip():
            raise UserError("Type something to search for (a name, a route, a field).")
        sid, observation = self._step(sid, {"tool": "search_code", "query": query.strip()})
        return self._progress(sid, observation, search_results=observation.text)

    def send_request(self, sid: str | None, method: str, path: str, as_user: str, body: str,
                     headers: str = "") -> dict[str, Any]:
        sid = self._session(sid)
        path = (path or "").strip()
        if not path.startswith("/"):
            raise UserError("The path must start with / (for example /api/items/1?limit=5).")
        action: dict[str, Any] = {"tool": "http_request", "method": method or "GET", "path": path}
        extra = _headers(headers)
        if extra:
            action["headers"] = extra
        if as_user and as_user != ANONYMOUS:
            action["as_user"] = as_user
        if (body or "").strip():
            try:
                action["json_body"] = json.loads(body)
            except json.JSONDecodeError as exc:
                raise UserError(f"The JSON body is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                                f"{exc.msg}). Nothing was sent.") from None
        sid, observation = self._step(sid, action)
        return self._progress(sid, observation, response=safe.fence(response_text(observation)),
                              history=history_markdown(self.hub.record(sid)))

    def run_tests(self, sid: str | None) -> dict[str, Any]:
        sid, observation = self._step(sid, {"tool": "run_tests"})
        result = observation.result or {}
        named = self._progress(sid, observation, tests=rollout_view.probe_frame(result, reveal_hidden=False))
        if not observation.error:
            named[NOTICE] = observation.text.splitlines()[0] if observation.text else ""
        return named

    def view_diff(self, sid: str | None) -> dict[str, Any]:
        sid, observation = self._step(sid, {"tool": "view_diff"})
        return self._progress(sid, observation, diff=diff_view.diff_html((observation.result or {}).get("diff")))

    def submit(self, sid: str | None, editing: Any = None, text: str | None = None) -> dict[str, Any]:
        """Submit the episode (every probe runs). Unapplied editor text is not graded: the first press
        with some says so and submits nothing; a second press submits."""
        sid = self._session(sid)
        if not self.hub.state(sid).done:
            asked = self._ask_first("submit", editing, text, (
                "Your edit of {files} is not applied yet, so it would not be graded. Press Apply edit first, or "
                "press Submit again to submit without it."))
            if asked is not None:
                return asked
        sid, observation = self._step(sid, {"tool": "submit"})
        if observation.error:
            return self._progress(sid, observation)
        verdict = self.hub.verdict(sid) or {}
        debrief = self.hub.debrief(sid)
        return self._progress(
            sid, observation, verdict=safe.markdown_lines(observation.text),
            breakdown=rollout_view.breakdown_frame(verdict.get("reward_breakdown") or observation.reward_breakdown),
            probes=rollout_view.probe_frame(verdict.get("verification"), reveal_hidden=True), show_diff=True,
            debrief=teaching_view.debrief_markdown(debrief), reference_fix=teaching_view.reference_fix_html(debrief),
            checklist=teaching_view.checklist_markdown((debrief or {}).get("checklist") or []))

    def episode_log(self, sid: str | None) -> dict[str, Any]:
        """Every step so far (drawn when the log is opened or refreshed, not after each action: a
        table redrawn on every click cost more than the click itself)."""
        if not self.hub.has_episode(sid):
            return {"log": pd.DataFrame(columns=LOG_COLUMNS)}
        return {"log": log_frame(self.hub.state(str(sid)))}

    def settle_checklist(self, sid: str | None) -> dict[str, Any]:
        """The checklist once the coach has judged the last request (it is judged in the background,
        so the response is shown at once and the checklist a moment later)."""
        if not self.hub.has_episode(sid):
            return {}
        return {"checklist": teaching_view.checklist_markdown(self.hub.checklist(str(sid), wait_s=SETTLE_WAIT_S))}

    def take_hint(self, sid: str | None) -> dict[str, Any]:
        sid = self._session(sid)
        try:
            self.hub.take_hint(sid)
        except SessionError as exc:
            raise UserError(page_words(str(exc))) from None
        taken = self.hub.hints(sid)
        next_hint = HINTS[len(taken)] if len(taken) < len(HINTS) else None
        return {"hints": teaching_view.hints_markdown(taken, next_hint, self.hub.disclosure(sid)),
                NOTICE: f"Hint {len(taken)} taken: it costs {taken[-1]['cost']:.2f} of this episode's reward."}


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _headers(text: str | None) -> dict[str, str]:
    """The extra-headers box: one ``Name: value`` a line (blank lines skipped)."""
    headers: dict[str, str] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon or not _HEADER_NAME.fullmatch(name.strip()):
            raise UserError(f"Header line {number} is not 'Name: value' (for example X-Request-Id: 42). "
                            "Nothing was sent.")
        headers[name.strip()] = value.strip()
    return headers


def _editing_path(editing: Any) -> str:
    """The path the editor was filled from (the page state may hold anything a request sent)."""
    if isinstance(editing, dict):
        path = editing.get("path")
        return path if isinstance(path, str) else ""
    return ""


def status_text(state: A01State) -> str:
    parts = [f"Scenario {safe.code(state.scenario_id)}", f"step {state.step_count} of {state.max_steps}",
             f"phase **{safe.markdown(state.phase)}**"]
    if state.invalid_actions:
        parts.append(f"{state.invalid_actions} refused")
    line = " · ".join(parts)
    if state.done:
        line += "\n\nThe episode is over: see **Submit** for the verdict, or press **New episode** for another."
    return line


def log_frame(state: A01State) -> pd.DataFrame:
    return pd.DataFrame([{"step": h["step"], "tool": h["tool"], "refused": h.get("error") or "",
                          "ms": round(h.get("elapsed_ms") or 0.0, 1)} for h in state.history], columns=LOG_COLUMNS)


def task_markdown(intro: dict[str, Any]) -> str:
    """The scenario's task, access policy and seeded users. Their text comes from the scenario cache
    (authored by templates or a language model, or imported with an app), so it is shown as text,
    line by line, with its `code` as code spans (:func:`ui.safe.markdown_lines`); a user's fields are
    escaped table cells."""
    users = intro.get("users", [])
    table = ["| user | role | tenant |", "| --- | --- | --- |"] + [
        f"| {safe.code(u.get('username', ''))} | {safe.markdown(u.get('role', ''))} | "
        f"{safe.markdown(u.get('tenant') or '')} |" for u in users]
    return (f"### Task\n\n{safe.markdown_lines(intro.get('task', ''), code_spans=True)}\n\n"
            f"### Access policy\n\n{safe.markdown_lines(intro.get('policy', ''), code_spans=True)}\n\n"
            "### Seeded users\n\n" + "\n".join(table))


def response_text(observation: A01Observation) -> str:
    """The response as an HTTP client shows it: the status line, every header, a blank line, the body
    (JSON pretty-printed)."""
    result = observation.result
    if result is None:
        return observation.text
    if result.get("status") is None:
        return f"No response: {result.get('error') or 'unknown error'}"
    body = result.get("body", "")
    try:
        body = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except (json.JSONDecodeError, TypeError):
        pass
    lines = [f"HTTP {result.get('status')}{' (body truncated)' if result.get('body_truncated') else ''}"]
    lines += response_headers(result.get("headers") or {}, names=None)
    note = [f"({result['note']})"] if result.get("note") else []
    return "\n".join([*lines, *note, "", body])


HISTORY_ROWS = 50


def history_markdown(record: Any) -> str:
    """The episode's requests, newest first, as a Markdown table (every cell escaped). A table of text
    is drawn in a fraction of the time a data grid takes, and it is redrawn after every request."""
    frame = rollout_view.request_frame(record)
    if frame.empty:
        return "**Requests so far**: none yet."
    lines = ["**Requests so far** (newest first)", "",
             safe.table(frame.head(HISTORY_ROWS).itertuples(index=False), rollout_view.REQUEST_COLUMNS)]
    if len(frame) > HISTORY_ROWS:
        lines.append(f"\n… and {len(frame) - HISTORY_ROWS} earlier request(s) (the episode log lists every step)")
    return "\n".join(lines)


def _message(c: dict[str, Any], slot: str) -> None:
    """The message component beside a control (empty until an action there has something to say)."""
    c[f"{slot}_msg"] = safe.markdown_component("", elem_id=f"play-{slot}-msg", elem_classes=["a01-msg"])


def build(hub: SessionHub, *, bug_classes: list[str], domains: list[str]) -> dict[str, Any]:
    """Lay out the Play tab (inside an open ``gr.Tab``); returns its components by name."""
    ctrl = PlayController(hub)
    # the first visitor's New episode should not wait for the friendly scenario to be found (it reads
    # the tier-1 bundles of a split, about a second)
    threading.Thread(target=ctrl.first_scenario, name="play-first-scenario", daemon=True).start()
    c: dict[str, Any] = {}
    # no time_to_live: Gradio counts it from when the value was set (the episode's start); the hub counts
    # idleness from the last action and closes the session itself
    c["sid"] = gr.State(None, delete_callback=hub.close)
    splits, default_split = split_choices(hub.runtime.cache)
    with gr.Row():
        c["split"] = gr.Dropdown(splits, value=default_split, label="Split", elem_id="play-split")
        c["bug_class"] = gr.Dropdown([ANY, *bug_classes], value=ANY, label="Bug class")
        c["tier"] = gr.Dropdown([ANY, "1", "2", "3"], value=ANY, label="Tier")
        c["domain"] = gr.Dropdown([ANY, *domains], value=ANY, label="Domain")
    with gr.Row():
        c["scenario"] = gr.Textbox(label="Scenario id or content hash (optional)", placeholder="e.g. 0082e596",
                                   elem_id="play-scenario")
        c["seed"] = gr.Textbox(label="Seed (optional; empty draws one)", placeholder="e.g. 7", max_length=18,
                               elem_id="play-seed")
        c["budget"] = gr.Slider(*HUMAN_STEP_BUDGETS, value=60, step=1, label="Step budget")
        c["nickname"] = gr.Textbox(label="Your name (optional, recorded with the episode)", max_length=32)
    c["new"] = gr.Button("New episode", variant="primary", elem_id="play-new")
    _message(c, "new")
    c["status"] = safe.markdown_component(NO_EPISODE, elem_id="play-status")
    c["checklist"] = safe.markdown_component("", elem_id="play-checklist")
    with gr.Accordion("Stuck? Take a hint (each costs part of the reward)", open=False, elem_id="play-hint-box"):
        c["hint"] = gr.Button("Take the next hint", elem_id="play-hint", size="sm")
        _message(c, "hint")
        c["hints"] = safe.markdown_component(teaching_view.hints_markdown([], HINTS[0]), elem_id="play-hints")
    c["editing"] = gr.State({})
    with gr.Tabs():
        with gr.Tab("Task"):
            c["task"] = safe.markdown_component("", elem_id="play-task")
        with gr.Tab("Code"):
            with gr.Row():
                with gr.Column(scale=1, min_width=200):
                    c["files"] = gr.Radio([], label="Files (opening one is a read_file step)", elem_id="play-files")
                    c["query"] = gr.Textbox(label="Search the code", placeholder="e.g. owner_id", elem_id="play-query")
                    c["search"] = gr.Button("Search (search_code)", elem_id="play-search")
                    _message(c, "search")
                with gr.Column(scale=3):
                    c["editor"] = gr.Code("", language="python", interactive=True, lines=24, max_lines=40,
                                          label="File (open one on the left)", elem_id="play-editor")
                    c["apply"] = gr.Button("Apply edit (apply_patch)", variant="primary", elem_id="play-apply")
                    _message(c, "code")
                    c["set_aside"] = gr.Code("", language="python", interactive=False, visible=False, lines=4,
                                             max_lines=20, label="Set aside", elem_id="play-set-aside")
                    c["search_results"] = gr.Code("", language=None, label="Search results", lines=3,
                                                  elem_id="play-search-results")
            with gr.Accordion("Paste a unified diff instead", open=False, elem_id="play-patch-box"):
                c["patch"] = gr.Textbox(lines=10, label="Unified diff (--- a/path, +++ b/path, @@ hunks)",
                                        elem_id="play-patch")
                c["apply_patch"] = gr.Button("Apply diff (apply_patch)", elem_id="play-apply-diff")
                _message(c, "patch")
        with gr.Tab("HTTP"):
            with gr.Row():
                c["method"] = gr.Dropdown(list(METHODS), value="GET", label="Method", scale=1, elem_id="play-method")
                c["path"] = gr.Textbox("/", label="Path (with query string)", scale=3, elem_id="play-path")
                c["as_user"] = gr.Dropdown([ANONYMOUS], value=ANONYMOUS, label="Send as", scale=2,
                                           elem_id="play-as-user")
            with gr.Row():
                c["body"] = gr.Code("", language="json", interactive=True, lines=3, label="JSON body (optional)",
                                    elem_id="play-body")
                c["headers"] = gr.Textbox("", lines=3, max_lines=8, label="Extra headers (optional, one per line: "
                                          "Name: value)", placeholder="X-Request-Id: 42", elem_id="play-headers")
            c["send"] = gr.Button("Send request (http_request)", variant="primary", elem_id="play-send")
            _message(c, "http")
            gr.Markdown("**Response**: status, headers, body")
            c["response"] = safe.markdown_component("", max_height=480, elem_id="play-response")
            c["history"] = safe.markdown_component(history_markdown(None), elem_id="play-history",
                                                   max_height=300, elem_classes=["a01-table"])
        with gr.Tab("Tests"):
            with gr.Row():
                c["run_tests"] = gr.Button("Run visible tests (run_tests)", elem_id="play-tests")
                c["view_diff"] = gr.Button("View diff (view_diff)", elem_id="play-view-diff")
            _message(c, "tests")
            c["tests"] = gr.Dataframe(pd.DataFrame(columns=PROBE_COLUMNS), label="Visible probes", wrap=True,
                                      column_widths=PROBE_WIDTHS, elem_id="play-tests-table")
            gr.Markdown("Diff against the original app")
            c["diff"] = gr.HTML(diff_view.diff_html(""), elem_id="play-diff")
        with gr.Tab("Submit"):
            c["submit"] = gr.Button("Submit (ends the episode; every probe runs)", variant="stop",
                                    elem_id="play-submit")
            _message(c, "submit")
            c["debrief"] = safe.markdown_component("", elem_id="play-debrief")
            c["reference_fix"] = gr.HTML(teaching_view.reference_fix_html(None), elem_id="play-reference-fix")
            c["verdict"] = safe.markdown_component("", elem_id="play-verdict")
            c["breakdown"] = gr.Dataframe(rollout_view.breakdown_frame(None), label="Reward breakdown",
                                          elem_id="play-breakdown", wrap=True)
            c["probes"] = gr.Dataframe(pd.DataFrame(columns=PROBE_COLUMNS), column_widths=PROBE_WIDTHS,
                                       label="Every probe (hidden ones revealed after submit)", wrap=True)
    with gr.Accordion("Episode log (every step so far)", open=False) as log_box:
        c["log_refresh"] = gr.Button("Refresh", size="sm", elem_id="play-log-refresh")
        c["log"] = gr.Dataframe(pd.DataFrame(columns=LOG_COLUMNS), label="Steps so far", elem_id="play-log")

    def on(*args: Any, **options: Any) -> Any:
        return wire(*args, **{**EVENT_OPTIONS, **options})

    progress = ["status", "checklist"]
    for event in (log_box.expand, c["log_refresh"].click):
        on(event, ctrl.episode_log, c, ["sid"], ["log"])
    patched = [*progress, "diff", "files", "editor", "editing", "set_aside"]
    on(c["new"].click, ctrl.new_episode, c,
       ["sid", "split", "bug_class", "tier", "domain", "scenario", "seed", "budget", "nickname", "editing", "editor"],
       [*progress, "sid", "task", "files", "editor", "editing", "as_user", "response", "history", "tests", "diff",
        "verdict", "breakdown", "probes", "search_results", "hints", "debrief", "reference_fix", "log",
        *(f"{s}_msg" for s in MESSAGE_SLOTS if s != "new")],
       at="new_msg", visitor=True, **QUEUED)
    on(c["files"].input, ctrl.open_file, c, ["sid", "files", "editing", "editor"],
       [*progress, "editor", "editing", "set_aside"], at="code_msg")
    on(c["apply"].click, ctrl.apply_edit, c, ["sid", "editing", "editor"], patched, at="code_msg")
    on(c["apply_patch"].click, ctrl.apply_diff, c, ["sid", "patch", "editing", "editor"], patched, at="patch_msg")
    on(c["search"].click, ctrl.search, c, ["sid", "query"], [*progress, "search_results"], at="search_msg")
    on(c["query"].submit, ctrl.search, c, ["sid", "query"], [*progress, "search_results"], at="search_msg")
    for event in (c["send"].click, c["path"].submit):
        sent = on(event, ctrl.send_request, c, ["sid", "method", "path", "as_user", "body", "headers"],
                  [*progress, "response", "history"], at="http_msg")
        on(sent.then, ctrl.settle_checklist, c, ["sid"], ["checklist"])
    on(c["hint"].click, ctrl.take_hint, c, ["sid"], ["hints"], at="hint_msg")
    on(c["run_tests"].click, ctrl.run_tests, c, ["sid"], [*progress, "tests"], at="tests_msg")
    on(c["view_diff"].click, ctrl.view_diff, c, ["sid"], [*progress, "diff"], at="tests_msg")
    on(c["submit"].click, ctrl.submit, c, ["sid", "editing", "editor"],
       [*progress, "verdict", "breakdown", "probes", "diff", "debrief", "reference_fix", "editing"], at="submit_msg",
       **QUEUED)
    c["controller"] = ctrl
    return c
