"""One episode record turned into what the rollout viewer shows: a step at a time, the HTTP exchanges
so far, the outcome, the reward breakdown and the probes. Pure functions of the record.

Choices:

* Steps are numbered as the log numbers them, 1..N; position 0 is the start of the episode. The task
  text the agent saw when its episode started is not part of the episode log, so the start shows
  what the record does know: scenario, bug class, tier, agent and step budget. :func:`step_view`
  clamps any index into 0..N, so a slider or a stale index never raises.
* A ``reply`` action (a language model's raw text) is shown as that text, not as JSON: that is what
  the model wrote, format errors included. What it ran is read back from the observation's ``tool``,
  and a request inside a reply is read with the environment's own reply parser, so the transcript
  shows the exchange exactly as the environment understood it.
* Text that came from an app, an agent or a visitor goes into Markdown only through :mod:`ui.safe`:
  inside code spans and fences long enough not to be closed by backticks in it, or escaped to plain
  text, so a response body, a model's reply or a forged log cannot restyle the page, break it, or put
  an element on it. The fields of :class:`StepView` other than ``transcript_markdown`` are plain text;
  whoever puts them into Markdown escapes them.
* Hidden probes are part of the server-side log; :func:`probe_frame` shows them unless asked not to
  (a human who is still playing must not see them).
* A model's reply that holds no text (a tiny model writes only newlines) is not shown as a blank: the
  action says that the model produced no readable action, in the environment's own words from the
  observation (``format error: the reply is empty ...``).
* A set may hold several episodes of one scenario (a person playing it twice, training rollouts, a
  resumed evaluation): they are its *attempts*, numbered 1..N in file order (:func:`index_attempts`),
  every one reachable. The one shown by default is the one the dashboard counts (:func:`shown_records`).
* **Where two episodes part** (:func:`deciding_step`): of two episodes of one scenario, the better one
  (the higher resolution, FULL over PARTIAL over NO, then the higher reward) is decided by its last
  step that changed the app's code, since after it the app is the one that was graded; an episode
  that changed nothing is decided by its last step (its submit, or the step its budget ran out on).
  Two episodes that end alike have no such step (the start). Rewards are written by
  :func:`envcore.numbers.signed`: a reward that rounds to zero is ``+0.00``, never ``-0.00``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from envcore.env.episode_log import EpisodeRecord, StepEntry
from envcore.env.render import response_headers
from envcore.env.reply import parse_action_text
from envcore.numbers import signed
from ui import safe

BODY_CHARS = 300
"""Response bodies in the transcript are cut to this many characters (the full body is in the step)."""
BREAKDOWN_COLUMNS = ("component", "value", "measured", "detail")
PROBE_COLUMNS = ("probe", "kind", "visible", "passed", "expected", "got", "failures")
_PATCH_TOOLS = ("apply_patch", "edit_file")


@dataclass(frozen=True)
class StepView:
    index: int
    """0 for the start, 1..total for the steps."""
    total: int
    title: str
    """``Step 3 of 12 · http_request``; ``reply → http_request`` when a model's reply ran a request."""
    action_json: str
    """The action as pretty JSON, or a ``reply``'s raw text; empty at the start."""
    observation_text: str
    error: str | None
    transcript_markdown: str
    """Every HTTP exchange up to and including this step, as Markdown."""
    files_changed: list[str] = field(default_factory=list)
    """Files this step changed (``apply_patch`` / ``edit_file``)."""


def step_count(record: EpisodeRecord) -> int:
    return len(record.steps)


def _shorten(text: str, limit: int = BODY_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more characters)"


def _ran_tool(entry: StepEntry) -> str | None:
    """The tool the step ran: the observation says, which also covers a reply's parsed action."""
    return entry.observation.get("tool") or entry.action.get("tool")


def _request_of(entry: StepEntry) -> dict[str, Any] | None:
    action = entry.action
    if action.get("tool") == "http_request":
        return action
    if action.get("tool") == "reply" and entry.observation.get("tool") == "http_request":
        parsed = parse_action_text(action.get("text", ""))
        return parsed.action if parsed.action and parsed.action.get("tool") == "http_request" else None
    return None


def _request_line(request: dict[str, Any]) -> str:
    return f"{str(request.get('method', 'GET')).upper()} {request.get('path', '?')}"


def _sender(request: dict[str, Any]) -> str:
    return request.get("as_user") or "anonymous"


def _exchange(entry: StepEntry) -> str | None:
    if _ran_tool(entry) != "http_request":
        return None
    request = _request_of(entry) or {}
    line = f"{_request_line(request)} as {_sender(request)}"
    parts = [f"**Step {entry.step}** · {safe.code(line)}"]
    if request.get("json_body") is not None:
        parts.append(safe.fence(json.dumps(request["json_body"], indent=2, ensure_ascii=False), "json"))
    result = entry.observation.get("result")
    error = entry.observation.get("error")
    if isinstance(result, dict) and result.get("status") is not None:
        parts.append(f"→ **{safe.markdown(result['status'])}**")
        headers = response_headers(result.get("headers") or {})
        if headers:
            parts.append(safe.fence("\n".join(headers)))
        body = str(result.get("body") or "")
        if body.strip():
            parts.append(safe.fence(_shorten(body)))
    elif isinstance(result, dict):
        parts.append(f"→ no response: {safe.code(result.get('error') or 'unknown error')}")
    else:
        parts.append(f"→ refused: {safe.code(error or 'no result')}")
    return "\n\n".join(parts)


REQUEST_COLUMNS = ("step", "request", "as", "status", "location", "content-type")


def request_frame(record: EpisodeRecord | None) -> pd.DataFrame:
    """The episode's HTTP requests so far, newest first: one row each (:data:`REQUEST_COLUMNS`); a
    refused request shows why in the status column."""
    rows = []
    for entry in (record.steps if record is not None else []):
        if _ran_tool(entry) != "http_request":
            continue
        request = _request_of(entry) or {}
        result = entry.observation.get("result")
        headers = (result.get("headers") or {}) if isinstance(result, dict) else {}
        if isinstance(result, dict) and result.get("status") is not None:
            status = str(result["status"])
        elif isinstance(result, dict):
            status = f"no response: {result.get('error') or 'unknown error'}"
        else:
            status = f"refused: {entry.observation.get('error') or 'no result'}"
        rows.append({"step": entry.step, "request": _request_line(request), "as": _sender(request), "status": status,
                     "location": headers.get("location", ""), "content-type": headers.get("content-type", "")})
    return pd.DataFrame(rows[::-1], columns=list(REQUEST_COLUMNS))


def _transcript(record: EpisodeRecord, upto: int) -> str:
    exchanges = [text for entry in record.steps[:upto] if (text := _exchange(entry))]
    return "\n\n---\n\n".join(exchanges) if exchanges else "_No HTTP requests yet._"


def _title(index: int, total: int, entry: StepEntry) -> str:
    sent = entry.action.get("tool") or "?"
    ran = entry.observation.get("tool")
    tool = f"{sent} → {ran}" if sent == "reply" and ran and ran != "reply" else str(sent)
    return f"Step {index} of {total} · {tool}"


EMPTY_REPLY = "(the model produced no readable action: its reply was {what}{said})"


def _action_text(action: dict[str, Any], observation: dict[str, Any] | None = None) -> str:
    if action.get("tool") == "reply":
        text = str(action.get("text", ""))
        if text.strip():
            return text
        what = f"{len(text)} blank characters" if text else "empty"
        # The environment's verdict, first sentence: "format error: the reply is empty"
        said = str((observation or {}).get("error") or "").strip().split(". ", 1)[0].rstrip(".")
        return EMPTY_REPLY.format(what=what, said=f"; {said}" if said else "")
    return json.dumps(action, indent=2, ensure_ascii=False)


def step_view(record: EpisodeRecord, index: int) -> StepView:
    """What the viewer shows at ``index`` (clamped into 0..N; 0 is the start, see the module docstring)."""
    total = step_count(record)
    index = min(max(int(index), 0), total)
    if index == 0:
        text = (f"Scenario {record.scenario_id} · {record.bug_class} · tier {record.tier}\n"
                f"Agent {record.agent_id} · budget {record.max_steps} steps · {total} taken\n\n"
                "The task text the agent read when its episode started is not kept in the episode log; step "
                "through the episode to see each action and what the environment answered.")
        return StepView(index=0, total=total, title="Start", action_json="", observation_text=text, error=None,
                        transcript_markdown=_transcript(record, 0), files_changed=[])
    entry = record.steps[index - 1]
    result = entry.observation.get("result")
    changed = (list(result.get("changed_files") or [])
               if _ran_tool(entry) in _PATCH_TOOLS and isinstance(result, dict) else [])
    return StepView(
        index=index, total=total, title=_title(index, total, entry),
        action_json=_action_text(entry.action, entry.observation),
        observation_text=str(entry.observation.get("text") or ""), error=entry.observation.get("error"),
        transcript_markdown=_transcript(record, index), files_changed=changed,
    )


def _resolution(record: EpisodeRecord) -> str | None:
    return (record.reward_breakdown or {}).get("resolution") or (record.verification or {}).get("resolution")


def _count(verification: dict[str, Any], kind: str) -> str:
    """``passed/total`` of one probe kind, as Markdown (a forged log's counts may be any text)."""
    counts = verification.get(kind) or {}
    return f"{safe.markdown(counts.get('passed', '?'))}/{safe.markdown(counts.get('total', '?'))}"


def outcome_markdown(record: EpisodeRecord) -> str:
    """The episode's outcome, resolution, reward and probe counts, and who played what, as Markdown."""
    resolution = _resolution(record)
    reward = (signed(record.reward) if record.reward is not None
              else "none (infrastructure error: not counted)" if record.outcome == "infrastructure_error" else "none")
    lines = [(f"**Outcome:** {safe.markdown(record.outcome.replace('_', ' '))} · **resolution:** "
              f"{safe.markdown(str(resolution).upper() if resolution else 'not graded')} · **reward:** {reward}")]
    verification = record.verification or {}
    if any(verification.get(kind) for kind in ("security", "regression", "trap")):
        guards = (verification.get("guard") or {}).get("total")
        lines.append(f"Exploits refused {_count(verification, 'security')} · legitimate use kept "
                     f"{_count(verification, 'regression')} · traps respected {_count(verification, 'trap')}"
                     + (f" · guards held {_count(verification, 'guard')}" if guards else ""))
    if verification.get("load_error"):
        lines.append(f"The app did not load: {safe.code(_shorten(str(verification['load_error'])))}")
    if verification.get("infrastructure_error"):
        lines.append(f"Infrastructure error: {safe.code(_shorten(str(verification['infrastructure_error'])))}")
    lines.append(f"Agent {safe.code(record.agent_id)} on scenario {safe.code(record.scenario_id)} "
                 f"({safe.markdown(record.bug_class)}, tier {record.tier}) · {step_count(record)} of "
                 f"{record.max_steps} steps")
    return "\n\n".join(lines)


def breakdown_frame(reward_breakdown: dict[str, Any] | None) -> pd.DataFrame:
    """The reward's components (:data:`BREAKDOWN_COLUMNS`); empty when there is no breakdown."""
    rows = [{"component": c.get("name", ""), "value": float(c.get("value", float("nan"))),
             "measured": float(c.get("measured", float("nan"))), "detail": c.get("detail", "")}
            for c in (reward_breakdown or {}).get("components", [])]
    return pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS)).astype({"value": "float64", "measured": "float64"})


def breakdown_markdown(reward_breakdown: dict[str, Any] | None) -> str:
    """The reward's components as a Markdown table (escaped cells), for views redrawn often."""
    frame = breakdown_frame(reward_breakdown)
    if frame.empty:
        return ""
    rows = [(r.component, signed(r.value), f"{r.measured:g}", r.detail) for r in frame.itertuples(index=False)]
    return "**Reward breakdown**\n\n" + safe.table(rows, BREAKDOWN_COLUMNS)


def _kind_cell(probe: dict[str, Any]) -> str:
    """A probe's kind; a trap probe's also names its trap and says what the trap keeps working."""
    kind, trap = str(probe.get("kind", "")), probe.get("trap")
    if not trap:
        return kind
    described = probe.get("trap_description")
    return f"{kind}: {trap}" + (f" ({described})" if described else "")


def probe_frame(verification: dict[str, Any] | None, *, reveal_hidden: bool = True) -> pd.DataFrame:
    """One row per probe of the verification (:data:`PROBE_COLUMNS`), in the verifier's order; hidden
    probes left out unless ``reveal_hidden``. A probe's requests are joined with ``"; then "``."""
    rows = []
    for probe in (verification or {}).get("probes", []):
        if not probe.get("visible", False) and not reveal_hidden:
            continue
        rows.append({
            "probe": probe.get("probe_id", ""), "kind": _kind_cell(probe),
            "visible": bool(probe.get("visible", False)), "passed": bool(probe.get("passed", False)),
            "expected": "; then ".join(map(str, probe.get("expected") or [])),
            "got": "; then ".join(map(str, probe.get("got") or [])),
            "failures": "; ".join(map(str, probe.get("failures") or [])),
        })
    return pd.DataFrame(rows, columns=list(PROBE_COLUMNS)).astype({"visible": "bool", "passed": "bool"})


def shown_records(records: Iterable[EpisodeRecord]) -> dict[str, EpisodeRecord]:
    """By scenario id, the record the viewer shows: the last one that was not abandoned (the one the
    dashboard counts), else the last abandoned one."""
    chosen: dict[str, EpisodeRecord] = {}
    for record in records:
        kept = chosen.get(record.scenario_id)
        if record.outcome != "abandoned" or kept is None or kept.outcome == "abandoned":
            chosen[record.scenario_id] = record
    return chosen


def _badge(record: EpisodeRecord) -> str:
    if record.outcome == "abandoned":
        return "ABANDONED"
    if record.reward is None:
        return "ERROR"
    return f"{(_resolution(record) or 'no').upper()} {signed(record.reward, 2)}"


def scenario_choices(records: Iterable[EpisodeRecord]) -> list[tuple[str, str]]:
    """(label, scenario_id) per scenario, sorted by id, labelled like
    ``0082e596 · tier 3 · broken_authz_logic · FULL +0.99``. A scenario played more than once (a log
    of several agents or sessions) appears once, with the record :func:`shown_records` picks."""
    shown = shown_records(records)
    return [(f"{sid[:8]} · tier {r.tier} · {r.bug_class} · {_badge(r)}", sid)
            for sid, r in sorted(shown.items())]




# ----- attempts: every episode of a scenario ----------------------------------------------------------
@dataclass(frozen=True)
class AttemptIndex:
    """A set's episodes by scenario, every attempt kept (what the Watch tab keys per file version)."""

    attempts: dict[str, tuple[EpisodeRecord, ...]]
    """By scenario id, its episodes in file order: attempt ``n`` is ``attempts[sid][n - 1]``."""
    shown: dict[str, int]
    """By scenario id, the attempt shown by default (1-based): the one :func:`shown_records` picks."""
    episodes: dict[str, tuple[str, int]]
    """By episode id, ``(scenario id, attempt)``; the first wins where a forged log repeats an id."""

    def record(self, scenario: str, attempt: int | None = None) -> EpisodeRecord | None:
        """Attempt ``attempt`` of ``scenario`` (default: the shown one); ``None`` if there is none."""
        played = self.attempts.get(scenario)
        if not played:
            return None
        number = self.shown[scenario] if attempt is None else attempt
        return played[number - 1] if 1 <= number <= len(played) else None

    def shown_records(self) -> dict[str, EpisodeRecord]:
        return {sid: played[self.shown[sid] - 1] for sid, played in self.attempts.items()}


def index_attempts(records: Iterable[EpisodeRecord]) -> AttemptIndex:
    """Every record of a set, by scenario and attempt (see :class:`AttemptIndex`)."""
    attempts: dict[str, list[EpisodeRecord]] = {}
    episodes: dict[str, tuple[str, int]] = {}
    for record in records:
        played = attempts.setdefault(record.scenario_id, [])
        played.append(record)
        episodes.setdefault(record.episode_id, (record.scenario_id, len(played)))
    shown = {}
    for sid, played in attempts.items():
        counted = [n for n, r in enumerate(played, 1) if r.outcome != "abandoned"]
        shown[sid] = counted[-1] if counted else len(played)
    return AttemptIndex({sid: tuple(played) for sid, played in attempts.items()}, shown, episodes)


ATTEMPT_AGENT_CHARS = 40


def attempt_label(record: EpisodeRecord, number: int, total: int) -> str:
    """``2 of 3 · human:ada · 2026-11-24 04:23 UTC · FULL +0.99 · submitted`` (plain text, for a dropdown)."""
    agent = record.agent_id
    if len(agent) > ATTEMPT_AGENT_CHARS:
        agent = agent[:ATTEMPT_AGENT_CHARS] + "…"
    try:
        when = datetime.fromtimestamp(record.started_at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):  # a forged time
        when = "unknown time"
    return f"{number} of {total} · {agent} · {when} · {_badge(record)} · {record.outcome.replace('_', ' ')}"


def attempt_choices(played: tuple[EpisodeRecord, ...] | list[EpisodeRecord], limit: int) -> list[tuple[str, str]]:
    """(label, ``"n"``) for the attempts of one scenario, newest first, at most ``limit`` of them (the
    newest); older ones stay reachable by number (a link's ``attempt=``)."""
    total = len(played)
    return [(attempt_label(played[n - 1], n, total), str(n)) for n in range(total, max(total - limit, 0), -1)]


def _reward(record: EpisodeRecord | None) -> float:
    return record.reward if record is not None and record.reward is not None else math.nan


def difference(left: EpisodeRecord | None, right: EpisodeRecord | None) -> float:
    """The second record's reward minus the first's (``nan`` when either has none)."""
    return _reward(right) - _reward(left)


def pair_order(left: dict[str, EpisodeRecord], right: dict[str, EpisodeRecord]) -> list[str]:
    """The scenarios both sets played, where they differ most in reward first (the second set doing
    better first on a tie, then shorter episodes, then by id): the first one tells the story."""
    def key(sid: str) -> tuple[float, float, int, str]:
        d = difference(left[sid], right[sid])
        d = 0.0 if math.isnan(d) else d
        return (-abs(d), -d, step_count(left[sid]) + step_count(right[sid]), sid)

    return sorted(left.keys() & right.keys(), key=key)


def pair_choices(left: dict[str, EpisodeRecord], right: dict[str, EpisodeRecord]) -> list[tuple[str, str]]:
    """(label, scenario_id) for the scenarios both sets played, in :func:`pair_order`, labelled like
    ``0082e596 · tier 3 · broken_authz_logic · NO -0.10 vs FULL +0.99``."""
    def label(sid: str) -> str:
        first, second = left[sid], right[sid]
        return f"{sid[:8]} · tier {first.tier} · {first.bug_class} · {_badge(first)} vs {_badge(second)}"

    return [(label(sid), sid) for sid in pair_order(left, right)]


# ----- where two episodes part ----------------------------------------------------------------------------
RESOLUTION_RANK = {"full": 2, "partial": 1}
"""How far an episode got: FULL over PARTIAL over anything else (NO, not graded)."""


def resolution_rank(record: EpisodeRecord | None) -> int:
    """2 for a full fix, 1 for a partial one, 0 for anything else (``None`` too)."""
    return RESOLUTION_RANK.get(str(_resolution(record) or "").lower(), 0) if record is not None else 0


def _standing(record: EpisodeRecord | None) -> tuple[int, float]:
    """What makes one episode better than another: its resolution, then its reward (to the hundredth,
    as the page shows it)."""
    reward = record.reward if record is not None and record.reward is not None else -math.inf
    return resolution_rank(record), round(reward, 2)


def better_of(left: EpisodeRecord | None, right: EpisodeRecord | None) -> str | None:
    """``"left"`` or ``"right"``, the side whose episode ended better (resolution, then reward), or
    ``None`` when they ended alike."""
    a, b = _standing(left), _standing(right)
    return None if a == b else ("left" if a > b else "right")


def last_code_change(record: EpisodeRecord) -> int | None:
    """The last step that changed the app's code (a patch the environment applied and that changed
    files), or ``None`` when the episode changed nothing."""
    for entry in reversed(record.steps):
        result = entry.observation.get("result")
        if (_ran_tool(entry) in _PATCH_TOOLS and not entry.observation.get("error") and isinstance(result, dict)
                and result.get("changed_files")):
            return entry.step
    return None


def decided_at(record: EpisodeRecord) -> int:
    """The step that decided ``record``'s outcome: its last code change, else its last step (see the
    module docstring); 0 for a record shown without its steps."""
    return last_code_change(record) or step_count(record)


def deciding_step(left: EpisodeRecord | None, right: EpisodeRecord | None) -> int:
    """The step where two episodes of one scenario part: the step that decided the better one's
    outcome (:func:`decided_at`); 0 (the start) when they ended alike or one is missing."""
    better = better_of(left, right) if left is not None and right is not None else None
    if better is None:
        return 0
    return decided_at(left if better == "left" else right)  # type: ignore[arg-type]


def badge(record: EpisodeRecord) -> str:
    """``FULL +0.99``, ``NO +0.00``, ``ABANDONED`` or ``ERROR``: how an episode ended, in a few characters."""
    return _badge(record)
