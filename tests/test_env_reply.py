"""The action parser on messy model replies: what it accepts, what it refuses, and that it never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envcore.env.reply import MAX_REPLY_CHARS, parse_action_text
from envcore.env.actions import parse_action

DIFF = "--- a/app/main.py\n+++ b/app/main.py\n@@ -1,2 +1,2 @@\n-x = {1: 2}\n+x = {1: 3}\n"

ACCEPTED = {
    "plain": ('{"tool": "read_file", "path": "app/main.py"}', {"tool": "read_file", "path": "app/main.py"}),
    "fenced": ('I will read the entrypoint.\n```json\n{"tool": "read_file", "path": "app/main.py", "start_line": 1}\n```\n'
               "Then I will look for the bug.", {"tool": "read_file", "path": "app/main.py", "start_line": 1}),
    "fence-no-lang": ('```\n{"tool": "list_files"}\n```', {"tool": "list_files"}),
    "trailing-prose": ('{"tool": "submit"} I am confident the fix is complete {really}.', {"tool": "submit"}),
    "leading-prose": ('Next step: {"tool": "search_code", "query": "def get_"}', {"tool": "search_code", "query": "def get_"}),
    "hermes-tool-call": ('<tool_call>\n{"name": "http_request", "arguments": {"method": "GET", "path": "/api/me", '
                         '"as_user": "alice"}}\n</tool_call>',
                         {"tool": "http_request", "method": "GET", "path": "/api/me", "as_user": "alice"}),
    "openai-function": ('{"type": "function", "function": {"name": "read_file", "arguments": "{\\"path\\": \\"app.py\\"}"}}',
                        {"tool": "read_file", "path": "app.py"}),
    "args-key": ('{"tool": "edit_file", "args": {"path": "a.py", "search": "x", "replace": "y"}}',
                 {"tool": "edit_file", "path": "a.py", "search": "x", "replace": "y"}),
    "think-first": ('<think>maybe {"tool": "submit"} now? no, read first</think>\n{"tool": "list_files"}',
                    {"tool": "list_files"}),
    "raw-newlines-in-diff": ('{"tool": "apply_patch", "diff": "' + DIFF + '"}', {"tool": "apply_patch", "diff": DIFF}),
    "single-quotes": ("{'tool': 'read_file', 'path': 'app.py'}", {"tool": "read_file", "path": "app.py"}),
    "trailing-comma": ('{"tool": "read_file", "path": "app.py",}', {"tool": "read_file", "path": "app.py"}),
    "braces-in-strings": ('{"tool": "search_code", "query": "\\\\{[a-z]+\\\\}"}', {"tool": "search_code", "query": "\\{[a-z]+\\}"}),
    "first-of-two": ('{"tool": "list_files"}\n{"tool": "submit"}', {"tool": "list_files"}),
    "skips-non-action-json": ('Config: {"retries": 3}. Action: {"tool": "view_diff"}', {"tool": "view_diff"}),
    "action-key": ('{"action": "submit"}', {"tool": "submit"}),
    "padded-name": ('{"tool": " submit "}', {"tool": "submit"}),
    "inside-an-array": ('[{"tool": "submit"}] hmm', {"tool": "submit"}),
}


@pytest.mark.parametrize("reply, expected", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_messy_replies_give_the_action(reply, expected):
    parsed = parse_action_text(reply)
    assert parsed.ok and parsed.error is None, parsed.error
    assert parsed.action == expected


def test_parsed_actions_validate_in_the_environment():
    for reply, _ in ACCEPTED.values():
        action = parse_action_text(reply).action
        if action["tool"] in ("read_file", "list_files", "submit", "view_diff", "search_code", "http_request"):
            parse_action(action)  # raises if the environment disagrees


REFUSED = {
    "empty": ("", "empty"),
    "blank": ("  \n\t", "empty"),
    "prose-only": ("I think the bug is in the ownership check.", "no JSON action"),
    "thinking-only": ("<think>the handler lacks a check", "only reasoning"),
    "not-an-action": ('{"path": "app.py"}', "no JSON action"),
    "tool-not-string": ('{"tool": 3}', "tool name"),
    "tool-empty": ('{"tool": ""}', "tool name"),
    "arguments-not-object": ('{"name": "read_file", "arguments": [1, 2]}', "not an object"),
    "arguments-bad-json-string": ('{"name": "read_file", "arguments": "{path: "}', "not a JSON object"),
    "unclosed": ('{"tool": "read_file", "path": "app.py"', "no JSON action"),
    "not-text": (None, "not text"),
    "bytes": (b'{"tool": "submit"}', "not text"),
}


@pytest.mark.parametrize("reply, fragment", REFUSED.values(), ids=REFUSED.keys())
def test_unreadable_replies_are_format_errors_that_say_what_a_reply_looks_like(reply, fragment):
    parsed = parse_action_text(reply)
    assert not parsed.ok and parsed.action is None
    assert fragment in parsed.error and '{"tool": "read_file"' in parsed.error


def test_an_overlong_reply_is_refused_unread():
    parsed = parse_action_text('{"tool": "submit"}' + " " * MAX_REPLY_CHARS)
    assert not parsed.ok and "characters long" in parsed.error


def test_a_reply_full_of_braces_is_searched_in_bounded_time():
    import time

    started = time.perf_counter()
    parsed = parse_action_text("{" * 50_000 + '{"tool": "submit"}')
    assert time.perf_counter() - started < 2.0
    assert not parsed.ok or parsed.action == {"tool": "submit"}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_the_parser_never_raises(text):
    parsed = parse_action_text(text)
    assert parsed.ok == (parsed.error is None)
    if parsed.ok:
        assert isinstance(parsed.action["tool"], str) and parsed.action["tool"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["list_files", "submit", "view_diff", "run_tests"]), st.text(max_size=200))
def test_an_action_between_any_prose_is_found(before, tool, after):
    reply = before.replace("{", "(") + f'\n{{"tool": "{tool}"}}\n' + after
    parsed = parse_action_text(reply)
    if "<think" not in before.lower() and "<reasoning" not in before.lower() and "<tool_call" not in before.lower() \
            and "```" not in before and "<function_call" not in before.lower() and "<action" not in before.lower():
        assert parsed.ok and parsed.action["tool"] == tool, (reply, parsed)


# -- the reply action: the environment reads the model's text itself ------------------------------

@pytest.fixture
def episode(cached_episode):
    return cached_episode


def test_a_reply_runs_the_action_in_it_as_one_step(episode):
    path = sorted(episode.files)[0]
    observation = episode.step({"tool": "reply", "text": f'Let me look.\n```json\n{{"tool": "read_file", "path": "{path}"}}\n```'})
    assert observation.error is None and observation.tool == "read_file" and observation.result["path"] == path
    assert episode.steps == 1 and episode.invalid_actions == 0


@pytest.mark.parametrize("text, fragment", [
    ("I am not sure what to do.", "format error: no JSON action"),
    ("", "format error: the reply is empty"),
    ('{"tool": "read_file"}', "path"),  # readable, but the environment refuses the arguments
    ('{"tool": "reset"}', "reset"),
    ('{"tool": "reply", "text": "{\\"tool\\": \\"submit\\"}"}', "a reply must contain a tool call, not 'reply'"),
    ('{"tool": "out_of_budget"}', "a reply must contain a tool call, not 'out_of_budget'"),
], ids=["prose", "empty", "bad-arguments", "reserved", "nested-reply", "harness-budget"])
def test_an_unreadable_or_invalid_reply_is_an_invalid_action_and_the_episode_goes_on(episode, text, fragment):
    observation = episode.step({"tool": "reply", "text": text})
    assert observation.error and fragment in observation.error, observation.error
    assert episode.invalid_actions == 1 and episode.steps == 1 and not episode.done
    assert episode.step({"tool": "list_files"}).error is None


def test_reply_is_on_the_wire_but_not_a_tool():
    from envcore.env.actions import TOOL_NAMES, A01Action
    from envcore.env.tools import TOOLS

    assert "reply" not in TOOL_NAMES and "reply" not in TOOLS
    assert A01Action.model_validate({"tool": "reply", "text": "x"}).root.tool == "reply"
    with pytest.raises(Exception):
        A01Action.model_validate({"tool": "reply", "text": "x" * (MAX_REPLY_CHARS + 1)})
