"""One episode: the state machine behind every face of the environment.

An :class:`Episode` holds a scenario bundle, the agent's working copy of the app's files, a live app
for the request tool, the step budget and the full history. :meth:`Episode.step` takes one tool
action and returns an :class:`~envcore.env.actions.A01Observation`:

* phases go ``exploring`` → ``patched`` (the first patch that applies) → ``submitted`` (the end);
* every step counts against ``max_steps``; reaching it submits what is there, with a cost;
* an invalid action (bad arguments, a path outside the app, a diff that does not apply, an unknown
  user) comes back as an observation with ``error`` set, and the episode goes on;
* a ``reply`` action carries a model's raw text: the action in it is read and run as the step, and a
  reply with no readable action (a format error) is an invalid action like any other;
* an ``out_of_budget`` action (a harness whose own token budget ran out) ends the episode as running
  out of steps does: the app is submitted with the budget cost;
* intermediate observations carry no reward signal (``reward`` is always 0); hidden probes run only at
  submit, and even then the observation reports them only as counts, so a scenario's hidden suite
  never leaks to an agent that plays it again;
* an infrastructure failure (the sandbox, not the agent) at submit ends the episode with reward
  ``None`` and says so; nothing else does: whatever the agent's files hold (any character Python
  source may contain), submit ends the episode with a reward;
* a patch (``apply_patch``, ``edit_file``) may change any file of the app, data files included, and
  add or delete files (:mod:`envcore.scenario.patch_scope`, the definition the import and grading
  use too); one whose files could never be written as an app folder (see :mod:`envcore.filetree`: a
  name the filesystem refuses, a path that is a file and a folder at once, a workspace too large to
  send to a worker) is refused as an invalid action with the reason, and nothing changes. Tests and
  grading run the app exactly as the patches left it (grading on shadow data: see
  :mod:`envcore.verifier.verify`);
* every observation is bounded (``LIMITS`` in :mod:`envcore.env.actions`): a long line, a long
  search, a large response, test output or diff is cut with a marker that says so, and an error
  that echoes the agent's input is cut too; the step's log entry is bounded the same way.

The episode does not know about OpenEnv or the server: :mod:`envcore.env.environment` wraps it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal
from urllib.parse import parse_qsl

import regex
from pydantic import ValidationError

from envcore.env import render
from envcore.env.actions import (
    LIMITS,
    A01Observation,
    A01State,
    ApplyPatch,
    EditFile,
    HttpRequestTool,
    ListFiles,
    OutOfBudget,
    ReadFile,
    Reply,
    RunTests,
    SearchCode,
    Submit,
    ViewDiff,
    _Tool,
    bounded,
    clip,
    parse_action,
)
from envcore.env.episode_log import StepEntry, step_entry
from envcore.env.hints import HINTS, hint_text
from envcore.env.reply import FORMAT_ERROR, parse_action_text
from envcore.env.reward import RewardBreakdown, RewardInputs, compute_reward
from envcore.patching import PatchError, apply_patch, changed_lines, clip_diff, line_count, make_diff, split_lines
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.runner.http import HttpRequest
from envcore.runner.loader import AppLoadError, safe_relpath
from envcore.sandbox.live import LiveApp
from envcore.sandbox.pool import Sandbox
from envcore.sandbox.templates import owned_by
from envcore.scenario.bundle import Bundle, BundleUser
from envcore.scenario.credentials import Credentials
from envcore.scenario.patch_scope import changed_paths, scope_problem
from envcore.scenario.splits import Disclosure
from envcore.verifier.report import VerificationReport
from envcore.verifier.verify import GradingData, graded_source, grading_data, verify

DEFAULT_MAX_STEPS = 30
SEARCH_TIMEOUT_S = 0.25
"""Wall-clock bound on one regular-expression search (a pathological pattern cannot stall a session)."""
BODY_CHARS = 4000
"""Response body characters shown to the agent."""
MATCH_CHARS = 300
"""Characters of a matching line that ``search_code`` shows."""


class ActionError(Exception):
    """An action the episode refuses; its message is what the agent reads."""


@dataclass
class Episode:
    bundle: Bundle
    sandbox: Sandbox
    max_steps: int = DEFAULT_MAX_STEPS
    episode_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    agent_id: str = "unknown"
    seed: int | None = None
    verifier: Callable[..., VerificationReport] = verify

    def __post_init__(self) -> None:
        self.original: dict[str, str] = dict(self.bundle.files)
        self.files: dict[str, str] = dict(self.bundle.files)
        self.phase = "exploring"
        self.steps = 0
        self.invalid_actions = 0
        self.done = False
        self.budget_exhausted = False
        self.records: list[StepEntry] = []
        self.logged = False
        """Whether the episode's log record has been written (it is written once)."""
        self.report: VerificationReport | None = None
        self.breakdown: RewardBreakdown | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.verify_ms = 0.0
        self._actors = actors_of(self.bundle.users)
        self.hints: list[dict[str, Any]] = []
        """Hints taken (a person playing by hand; :mod:`envcore.env.hints`): each costs reward at submit."""
        # The trusted app the agent's patches are made from, with the data the agent sees: a test run
        # forks its workers from a template of it, the first one built in the background now.
        self.base = graded_source(self.bundle, self.bundle.files, self.bundle)
        with owned_by(self.episode_id):  # kept for this episode's test runs, lent to no other episode
            self.sandbox.prepare(self.base)
        self._grading: GradingData | None = None
        self._live: LiveApp | None = None
        self._diff: str | None = None
        """The current diff, made once per patch (``None``: not made since the last one)."""

    @property
    def actors(self) -> dict[str, Credentials]:
        """Each seeded user's credentials (what signs a request sent as that user)."""
        return dict(self._actors)

    # ----- hints ----------------------------------------------------------------------------------
    def take_hint(self, disclosure: Disclosure) -> dict[str, Any]:
        """The next hint (:data:`~envcore.env.hints.HINTS`), recorded with the step it was taken at; not
        a step. Raises :class:`ActionError` once the episode is over or every hint was taken."""
        if self.done:
            raise ActionError("the episode is over: hints are for an episode in play")
        if len(self.hints) >= len(HINTS):
            raise ActionError(f"all {len(HINTS)} hints have been taken")
        hint = HINTS[len(self.hints)]
        entry = {"level": len(self.hints) + 1, "key": hint.key, "title": hint.title, "cost": hint.cost_for(disclosure),
                 "at_step": self.steps}
        self.hints.append(entry)
        return {**entry, "text": hint_text(self.bundle, hint.key, disclosure)}

    # ----- the observation after reset ---------------------------------------------------------
    def first_observation(self) -> A01Observation:
        return self._observe(None, {"task": self.bundle.task, "policy": self.bundle.policy_text,
                                    "users": [_user_entry(u) for u in self.bundle.users]},
                             text=render.intro(self.bundle, self.max_steps))

    # ----- stepping -----------------------------------------------------------------------------
    def step(self, action: _Tool | dict[str, Any]) -> A01Observation:
        """Apply one action; see the module docstring."""
        started = time.perf_counter()
        raw = action.model_dump(mode="json", exclude_defaults=False) if isinstance(action, _Tool) else action
        if self.done:
            return self._observe(None, None, error="the episode is over: reset to start another")
        self.steps += 1
        tool_name = raw.get("tool") if isinstance(raw, dict) else None
        try:
            parsed = action if isinstance(action, _Tool) else parse_action(action)
            if isinstance(parsed, Reply):
                read = parse_action_text(parsed.text)
                if read.action is None:
                    raise ActionError(f"{FORMAT_ERROR}: {read.error}")
                tool_name = read.action["tool"]
                parsed = parse_action(read.action)
                if isinstance(parsed, (Reply, OutOfBudget)):
                    raise ActionError(f"a reply must contain a tool call, not {tool_name!r}")
            if isinstance(parsed, OutOfBudget):
                self.budget_exhausted = True
                observation = self._submit(note=f"The harness's {parsed.budget} budget ran out: the app as it is now "
                                                "was submitted.")
            else:
                observation = self._dispatch(parsed)
        except ValidationError as exc:
            self.invalid_actions += 1
            observation = self._observe(tool_name if isinstance(tool_name, str) else None, None,
                                        error=render.validation_error(exc))
        except ActionError as exc:
            self.invalid_actions += 1
            observation = self._observe(tool_name, None, error=str(exc))
        if not self.done and self.steps >= self.max_steps:
            self.budget_exhausted = True
            observation = self._submit(note=f"The step budget ({self.max_steps}) is used up: the app as it is now was submitted.")
        self.records.append(step_entry(self.steps, raw if isinstance(raw, dict) else {"raw": str(raw)},
                                       observation.model_dump(mode="json"),
                                       round((time.perf_counter() - started) * 1000, 3)))
        return observation

    def _dispatch(self, action: _Tool) -> A01Observation:
        handler = {
            ListFiles: self._list_files,
            ReadFile: self._read_file,
            SearchCode: self._search_code,
            HttpRequestTool: self._http_request,
            ApplyPatch: self._apply_patch,
            EditFile: self._edit_file,
            RunTests: self._run_tests,
            ViewDiff: self._view_diff,
            Submit: lambda _action: self._submit(),
        }[type(action)]
        return handler(action)

    # ----- inspect ------------------------------------------------------------------------------
    def _path(self, path: str) -> str:
        try:
            norm = safe_relpath(path.removeprefix("./"))
        except AppLoadError as exc:
            raise ActionError(f"{exc}; paths are relative to the app folder, e.g. {self._example_path()}") from None
        if norm not in self.files:
            raise ActionError(f"no file {norm!r}; list_files shows the app's files")
        return norm

    def _example_path(self) -> str:
        return next((p for p in sorted(self.files) if p.endswith(".py")), "app/main.py")

    def _list_files(self, action: ListFiles) -> A01Observation:
        # lines as read_file and diffs count them
        listing = [{"path": p, "lines": line_count(self.files[p])} for p in sorted(self.files)]
        return self._observe("list_files", {"files": listing}, text=render.file_list(listing))

    def _read_file(self, action: ReadFile) -> A01Observation:
        path = self._path(action.path)
        text = self.files[path]
        lines = split_lines(text, keepends=False)  # numbered as hunk headers number them
        start = action.start_line or 1
        end = action.end_line or max(len(lines), start)  # an empty file reads as no lines, not as an error
        if end < start:
            raise ActionError(f"end_line ({end}) is before start_line ({start})")
        if lines and start > len(lines):
            raise ActionError(f"{path} has {len(lines)} lines; start_line {start} is past the end")
        end = min(end, len(lines), start + LIMITS["read_lines"] - 1)
        chosen: list[str] = []
        room = LIMITS["observation_chars"] - 200  # the header and the note
        for line in lines[start - 1:end]:
            shown = clip(line, LIMITS["line_chars"])
            room -= len(shown) + 7  # the number in front of it
            if room < 0 and chosen:
                break
            chosen.append(shown)
        end = start + len(chosen) - 1 if chosen else end
        result = {"path": path, "start_line": start, "end_line": end, "total_lines": len(lines),
                  "content": "\n".join(chosen), "final_newline": text.endswith("\n")}
        return self._observe("read_file", result, text=render.file_view(path, start, chosen, len(lines)))

    def _search_code(self, action: SearchCode) -> A01Observation:
        try:
            pattern = regex.compile(action.query if action.regex else regex.escape(action.query))
        except regex.error as exc:
            raise ActionError(f"invalid regular expression: {exc}") from None
        deadline = time.monotonic() + SEARCH_TIMEOUT_S
        matches = []
        truncated = False
        room = LIMITS["observation_chars"] - 200
        for path in sorted(self.files):
            if action.path_prefix and not path.startswith(action.path_prefix):
                continue
            for number, line in enumerate(split_lines(self.files[path], keepends=False), 1):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ActionError(f"the search took longer than {SEARCH_TIMEOUT_S:g} s; use a simpler pattern")
                try:
                    found = pattern.search(line, timeout=left)
                except TimeoutError:
                    raise ActionError(f"the search took longer than {SEARCH_TIMEOUT_S:g} s; use a simpler pattern") from None
                if found:
                    text = clip(line, MATCH_CHARS)
                    room -= len(path) + len(text) + 50  # with its line number and JSON keys
                    if len(matches) >= action.max_results or room < 0:
                        truncated = True
                        break
                    matches.append({"path": path, "line": number, "text": text})
            if truncated:
                break
        return self._observe("search_code", {"matches": matches, "truncated": truncated},
                             text=render.search_results(action.query, matches, truncated))

    # ----- request ------------------------------------------------------------------------------
    def live(self) -> LiveApp:
        if self._live is None:
            self._live = LiveApp(self.sandbox, AppSource(dict(self.files), self.bundle.entrypoint), self._actors)
        return self._live

    def _http_request(self, action: HttpRequestTool) -> A01Observation:
        if action.as_user is not None and action.as_user not in self._actors:
            raise ActionError(f"no seeded user {action.as_user!r}; users: {', '.join(sorted(self._actors))} "
                              "(or leave as_user out for an anonymous request)")
        path, _, query = action.path.partition("?")
        try:
            request = HttpRequest.build(action.method, path, query=dict(parse_qsl(query, keep_blank_values=True)),
                                        headers=action.headers, json_body=action.json_body, form=action.form)
        except (TypeError, ValueError) as exc:
            raise ActionError(f"cannot send this request: {exc}") from None
        if len(request.body) > LIMITS["json_body_bytes"]:
            raise ActionError(f"the request body ({'form' if action.form is not None else 'json_body'}) is larger than "
                              f"{LIMITS['json_body_bytes']} bytes")
        try:
            # signed as the user by the live app: a user who signs in with a login request does so
            # there, once per run of the app
            response = self.live().request(request, actor=action.as_user)
        except RunnerInfrastructureError as exc:
            return self._observe("http_request", None, error=f"the app runner is unavailable (not your fault; try again): {exc}")
        body = response.body.decode("utf-8", "replace")
        shown = {k: v for k, v in response.headers.items() if k in render.SHOWN_HEADERS}  # first: never cut
        headers = dict(list({**shown, **response.headers}.items())[:LIMITS["headers"]])
        result = {
            "status": response.status,
            "headers": {clip(str(k), LIMITS["response_header_chars"]): clip(str(v), LIMITS["response_header_chars"])
                        for k, v in headers.items()},
            "body": body[:BODY_CHARS],
            "body_truncated": len(body) > BODY_CHARS or response.truncated,
            "error": clip(response.error, LIMITS["error_chars"]) if response.error else response.error,
            "note": clip(response.note, LIMITS["error_chars"]) if response.note else response.note,
        }
        return self._observe("http_request", result, text=render.http_response(action, result))

    # ----- patch --------------------------------------------------------------------------------
    def _set_files(self, files: dict[str, str]) -> None:
        """Make ``files`` the app's files, or raise :class:`ActionError` (and change nothing) if they
        could never be written as one app folder."""
        problem = scope_problem(files)
        if problem is not None:
            raise ActionError(f"the patch is refused, nothing changed: {problem}")
        self.files = files
        self._diff = None
        self.phase = "patched"
        if self._live is not None:
            self._live.update(AppSource(dict(files), self.bundle.entrypoint))
        if self._grading is None:  # the first patch (only a patch or submit draws it): build its template meanwhile
            self.sandbox.prepare(self.grading.base())

    @property
    def grading(self) -> GradingData:
        """The data submit grades on: a shadow drawn for this episode's one grading, never shown.
        Drawn at the first patch (so its template is built while the agent works) or at submit,
        never at reset: drawing costs about 10 ms, which a reset should not pay."""
        if self._grading is None:
            self._grading = grading_data(self.bundle)
        return self._grading

    def _apply_patch(self, action: ApplyPatch) -> A01Observation:
        try:
            files = apply_patch(self.files, action.diff)
        except PatchError as exc:
            raise ActionError(f"the diff does not apply: {exc}") from None
        before = self.files
        self._set_files(files)
        changed = changed_paths(before, files)
        return self._observe("apply_patch", {"changed_files": changed}, text=render.patched(changed))

    def _edit_file(self, action: EditFile) -> A01Observation:
        path = self._path(action.path)
        count = self.files[path].count(action.search)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ActionError(f"the search text {where} in {path}; it must occur exactly once (include more context)")
        files = dict(self.files)
        files[path] = files[path].replace(action.search, action.replace, 1)
        self._set_files(files)
        return self._observe("edit_file", {"changed_files": [path]}, text=render.patched([path]))

    def diff(self) -> str:
        """The whole diff of the app's files against the original (made once per patch)."""
        if self._diff is None:
            self._diff = make_diff(self.original, self.files)
        return self._diff

    def _view_diff(self, action: ViewDiff) -> A01Observation:
        diff = clip_diff(self.diff(), LIMITS["observation_chars"] - 200)
        return self._observe("view_diff", {"diff": diff}, text=diff or "No changes yet.")

    # ----- tests and submit ---------------------------------------------------------------------
    def _verify(self, probe_set: Literal["all", "visible"]) -> VerificationReport:
        """The verifier's report on the app as it is; an infrastructure failure it raises (rather
        than reports) is reported the same way: not the agent's fault, no reward."""
        try:
            if probe_set == "all":
                return self.verifier(self.bundle, self.files, sandbox=self.sandbox, shadow=self.grading)
            with owned_by(self.episode_id):  # the template of the visible base serves every test run
                return self.verifier(self.bundle, self.files, sandbox=self.sandbox, probe_set=probe_set)
        except RunnerInfrastructureError as exc:
            return VerificationReport(scenario_id=self.bundle.scenario_id, outcome="infrastructure_error",
                                      resolution=None, reward=None, probe_set=probe_set,
                                      infrastructure_error=str(exc) or type(exc).__name__)

    def _run_tests(self, action: RunTests) -> A01Observation:
        report = self._verify("visible")
        if report.outcome == "infrastructure_error":
            return self._observe("run_tests", None, error=f"the test runner is unavailable (not your fault; try again): "
                                                           f"{report.infrastructure_error}")
        # what the app answered is the agent's code talking: each text of it is cut to a line
        probes = [bounded(p.model_dump(mode="json"), LIMITS["line_chars"]) for p in report.probes if p.visible]
        result = {"loaded": report.outcome == "graded", "load_error": _error_text(report.load_error),
                  "passed": sum(p["passed"] for p in probes), "total": len(probes), "probes": probes}
        return self._observe("run_tests", result, text=render.test_results(result))

    def _submit(self, note: str | None = None) -> A01Observation:
        started = time.perf_counter()
        report = self._verify("all")
        self.verify_ms = (time.perf_counter() - started) * 1000
        diff = self.diff()
        reference = changed_lines(self.bundle.reference_fix)[1] if self.bundle.reference_fix else 0
        self.report = report
        self.breakdown = compute_reward(RewardInputs(
            report=report, steps_used=self.steps, max_steps=self.max_steps, invalid_actions=self.invalid_actions,
            diff_lines=changed_lines(diff)[1] if diff else 0, reference_lines=reference,
            budget_exhausted=self.budget_exhausted,
            hints_taken=len(self.hints), hints_cost=sum(h["cost"] for h in self.hints),
        ))
        self.phase = "submitted"
        self.done = True
        self.ended_at = time.time()
        self.close_live()
        result = {
            "outcome": report.outcome,
            "resolution": report.resolution.value if report.resolution else None,
            "security": report.security.model_dump(), "regression": report.regression.model_dump(),
            "trap": report.trap.model_dump(), "load_error": _error_text(report.load_error),
            **({"guard": report.guard.model_dump()} if report.guard.total else {}),
            "infrastructure_error": _error_text(report.infrastructure_error),
        }
        error = None
        if report.outcome == "infrastructure_error":
            error = f"the verifier could not run (not your fault; this episode has no reward): {report.infrastructure_error}"
        return self._observe("submit", result, error=error, text=render.final(result, self.breakdown, note),
                             reward=self.breakdown.reward, breakdown=self.breakdown.model_dump(mode="json"))

    # ----- observations and state ---------------------------------------------------------------
    def _observe(self, tool: str | None, result: dict[str, Any] | None, *, error: str | None = None,
                 text: str | None = None, reward: float | None = None,
                 breakdown: dict[str, Any] | None = None) -> A01Observation:
        # Every text is bounded and encodable, whatever the agent's input or its app's output held.
        error = bounded(error, LIMITS["error_chars"]) if error is not None else None
        if text is None or error is not None and result is None:
            text = f"Error: {error}" if error else (text or "")
        text = bounded(text, LIMITS["observation_chars"])
        result = bounded(result, LIMITS["observation_chars"]) if result is not None else None
        return A01Observation(
            text=text, phase=self.phase, tool=tool, result=result, error=error, files=sorted(self.files),
            steps_left=max(self.max_steps - self.steps, 0), scenario_id=self.bundle.scenario_id,
            # Intermediate steps carry no signal: a constant 0 (OpenEnv validators want a number).
            done=self.done, reward=reward if self.done else 0.0, reward_breakdown=breakdown,
        )

    @property
    def outcome(self) -> Literal["submitted", "budget_exhausted"] | None:
        """How the episode ended (``None`` while it runs): what its log record says."""
        if not self.done:
            return None
        return "budget_exhausted" if self.budget_exhausted else "submitted"

    def state(self) -> A01State:
        return A01State(
            episode_id=self.episode_id, step_count=self.steps, scenario_id=self.bundle.scenario_id, phase=self.phase,
            max_steps=self.max_steps, invalid_actions=self.invalid_actions,
            diff=clip_diff(self.diff(), LIMITS["observation_chars"]), done=self.done,
            history=[{"step": r.step, "tool": r.action.get("tool"), "error": r.observation.get("error"),
                      "elapsed_ms": r.elapsed_ms} for r in self.records],
        )

    def close_live(self) -> None:
        """Let go of the episode's processes: its live app, and the template kept for its test runs."""
        if self._live is not None:
            self._live.close()  # the sandbox holds live apps weakly: nothing to unregister
            self._live = None
        self.sandbox.templates.drop(self.episode_id)


def _user_entry(user: BundleUser) -> dict[str, Any]:
    """A seeded user as the first observation lists it; ``signed_with`` (how a request as the user is
    signed, never its secret) only for a user whose credentials are not a bearer token."""
    entry: dict[str, Any] = {"username": user.username, "role": user.role, "tenant": user.tenant}
    if user.credentials is not None:
        entry["signed_with"] = user.credential().describe()
    return entry


def _error_text(text: str | None) -> str | None:
    """An error the app or the sandbox wrote, cut to what an observation shows of one."""
    return clip(text, LIMITS["error_chars"]) if text else text
