"""Attacks on the server's CPU: one action must never cost seconds of work.

Each test sends the worst input of one shape, at the largest size an action may carry, and measures
the CPU time of the thread that does the work (``time.thread_time``: neither other processes' CPU
nor that of other threads of this one counts, such as a sandbox's or a server's left running by an
earlier test in the same test process, which ``time.process_time`` would add). A busy or
slower machine still makes each CPU second longer (shared caches, a lower clock, a sibling
hyperthread), so every measurement is scaled by a fixed yardstick timed beside it: a budget is in
seconds of this project's reference machine, and a slower machine gets proportionally more, never
less. The unbounded versions took seconds to minutes (or crashed), far beyond any such scaling. The
work is bounded by counting, never by a clock, so the same input always gets the same answer.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from envcore.env.actions import LIMITS
from envcore.env.reply import parse_action_text
from envcore.patching import PatchError, apply_patch, make_diff, parse_patch

REPLY = LIMITS["reply_chars"]
CPU_S = 0.6
"""More than any of these inputs needs once bounded; each took seconds (or crashed) before."""


YARDSTICK_S = 0.09
"""CPU seconds :func:`_yardstick` takes on the reference machine (2 cores, idle)."""


def _yardstick() -> float:
    """CPU seconds of a fixed workload like the ones measured here: strings built, joined, split, counted."""
    started = time.thread_time()
    lines = [f"y{i}\n" for i in range(60_000)]
    counts = Counter("".join(lines).splitlines())
    sorted(counts, key=lambda line: line[::-1])
    return time.thread_time() - started


def slowdown() -> float:
    """How much slower than the reference machine this one runs right now (at least 1)."""
    return max(1.0, _yardstick() / YARDSTICK_S)


def cpu(call, *args):
    """``call(*args)`` and its CPU seconds, in reference-machine seconds (see the module docstring):
    the yardstick is timed just before and just after, and the slower of the two scales the result."""
    before = slowdown()
    started = time.thread_time()
    result = call(*args)
    seconds = time.thread_time() - started
    return result, seconds / max(before, slowdown())


ADVERSARIAL_REPLIES = {
    "open_braces": "{" * REPLY,
    "balanced_nesting": "{" * (REPLY // 2) + "}" * (REPLY // 2),
    "nested_quoted_keys": ('{"a": ' * REPLY)[:REPLY],
    "single_quotes_and_braces": ("{'" * REPLY)[:REPLY],
    "unclosed_fences": ("```json\n{" * REPLY)[:REPLY],
    "many_fences_of_braces": (("```json\n" + "{" * 900 + "\n```\n") * 300)[:REPLY],
    "unclosed_tool_calls": ("<tool_call>{" * REPLY)[:REPLY],
    "tool_calls_of_braces": (("<tool_call>" + "{" * 900 + "</tool_call>") * 300)[:REPLY],
    "unclosed_think_tags": ("<think>" * REPLY)[:REPLY],
    "python_literal_of_commas": ("{" + "1," * REPLY)[:REPLY],
    "deep_lists_in_an_object": ('{"tool": ' + "[" * REPLY)[:REPLY],
    "whitespace_in_tool_call": "<tool_call>" + " " * (REPLY - 30) + "{",
    "quoted_brace_pairs": ('{"{' * REPLY)[:REPLY],
    "quoted_keys_broken_early": ('{"a"{' * REPLY)[:REPLY],
}


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL_REPLIES))
def test_a_reply_built_to_be_slow_to_parse_is_read_in_bounded_time(shape):
    text = ADVERSARIAL_REPLIES[shape]
    assert len(text) <= REPLY
    parsed, seconds = cpu(parse_action_text, text)
    assert not parsed.ok and parsed.error
    assert seconds < CPU_S, f"{shape}: {seconds:.2f} s of CPU"


def test_a_real_action_after_a_slow_prefix_is_still_found_or_refused_clearly():
    """The budget never turns a readable reply into a crash; past it, the error says why."""
    action = '{"tool": "read_file", "path": "app/main.py"}'
    parsed, seconds = cpu(parse_action_text, "{" * 1000 + " " + action)
    assert seconds < CPU_S
    assert parsed.ok and parsed.action == {"tool": "read_file", "path": "app/main.py"}
    buried = ('{"a": ' * 20000)[: REPLY - 100] + "\n" + action
    parsed, seconds = cpu(parse_action_text, buried)
    assert seconds < CPU_S
    assert parsed.ok or "too" in parsed.error


def test_the_same_slow_reply_always_gets_the_same_answer():
    text = ADVERSARIAL_REPLIES["balanced_nesting"][:150_000] + '{"tool": "view_diff"}'
    answers = {repr(parse_action_text(text)) for _ in range(3)}
    assert len(answers) == 1


@pytest.mark.parametrize("noise", ["balanced_nesting", "open_braces", "many_fences_of_braces"])
def test_an_action_after_braces_that_cannot_begin_an_object_is_found_quickly(noise):
    """Braces no action can begin at (``{{``, ``{}``) are not tried at all, so they never use up the
    budget that a real action after them needs."""
    text = ADVERSARIAL_REPLIES[noise][:150_000] + '\n{"tool": "view_diff"}'
    parsed, seconds = cpu(parse_action_text, text)
    assert parsed.ok and parsed.action == {"tool": "view_diff"}
    assert seconds < CPU_S


def _misnumbered_hunk(context: list[str], changed: str) -> str:
    body = "".join(f" {line}\n" for line in context) + f"-{changed}\n+fixed\n"
    count = len(context) + 1
    return f"--- a/a.py\n+++ b/a.py\n@@ -5,{count} +5,{count} @@\n{body}"


def test_a_misnumbered_hunk_against_a_file_of_identical_lines_is_refused_quickly():
    files = {"a.py": "a\n" * 60_000}
    diff = _misnumbered_hunk(["a"] * 20_000, "b")
    assert len(diff.encode()) <= LIMITS["diff_bytes"]
    try:
        _, seconds = cpu(apply_patch, files, diff)
    except PatchError:
        seconds = 0.0  # measured below
    def refused() -> None:
        with pytest.raises(PatchError):
            apply_patch(files, diff)

    seconds = max(seconds, cpu(refused)[1])
    assert seconds < CPU_S


def test_thousands_of_misnumbered_small_hunks_are_refused_quickly():
    lines = [f"line {i}" for i in range(60_000)]
    files = {"a.py": "".join(line + "\n" for line in lines)}
    hunks = []
    for i in range(3000):  # each names a line that exists, at a line number that is wrong
        target = 100 + 19 * i
        hunks.append(f"@@ -{target + 7},3 +{target + 7},3 @@\n {lines[target - 1]}\n-{lines[target]}\n+x\n"
                     f" {lines[target + 1]}\n")
    diff = "--- a/a.py\n+++ b/a.py\n" + "".join(hunks)
    assert len(diff.encode()) <= LIMITS["diff_bytes"]
    def apply() -> None:
        try:
            apply_patch(files, diff)
        except PatchError as exc:
            assert "line numbers" in str(exc)

    _, seconds = cpu(apply)
    assert seconds < CPU_S


def test_a_misnumbered_hunk_in_a_large_file_still_applies_where_it_matches_once():
    lines = [f"value_{i} = {i}" for i in range(50_000)]
    files = {"a.py": "".join(line + "\n" for line in lines)}
    diff = f"--- a/a.py\n+++ b/a.py\n@@ -10,3 +10,3 @@\n {lines[40000]}\n-{lines[40001]}\n+changed = 1\n {lines[40002]}\n"
    patched, seconds = cpu(apply_patch, files, diff)
    assert patched["a.py"].splitlines()[40001] == "changed = 1"
    assert seconds < CPU_S


def test_a_file_rewritten_in_shuffled_order_diffs_quickly_and_the_diff_applies():
    rng = random.Random(0)
    lines = [f"x{i}\n" for i in range(140_000)]
    old = "".join(lines)
    rng.shuffle(lines)
    new = "".join(lines)
    diff, seconds = cpu(make_diff, {"a.py": old}, {"a.py": new})
    assert seconds < 2 * CPU_S, f"{seconds:.2f} s"
    assert apply_patch({"a.py": old}, diff) == {"a.py": new}
    assert parse_patch(diff)


@pytest.mark.parametrize("shape", ["interleaved", "blocks_moved", "every_other_line"])
def test_other_large_rewrites_diff_quickly_and_the_diff_applies(shape):
    rng = random.Random(1)
    old_lines = [f"row = {i}\n" for i in range(80_000)]
    if shape == "interleaved":
        new_lines = [line for pair in zip(old_lines, (f"new {i}\n" for i in range(80_000))) for line in pair][:100_000]
    elif shape == "blocks_moved":
        blocks = [old_lines[i:i + 50] for i in range(0, len(old_lines), 50)]
        rng.shuffle(blocks)
        new_lines = [line for block in blocks for line in block]
    else:
        new_lines = [line if i % 2 else "changed\n" for i, line in enumerate(old_lines)]
    old, new = "".join(old_lines), "".join(new_lines)
    diff, seconds = cpu(make_diff, {"a.py": old}, {"a.py": new})
    assert seconds < 2 * CPU_S, f"{shape}: {seconds:.2f} s"
    assert apply_patch({"a.py": old}, diff) == {"a.py": new}


def test_small_files_diff_exactly_as_difflib_does():
    """Every file of a generated app is small: its diff is difflib's, line for line."""
    import difflib

    from envcore.linediff import unified_diff

    rng = random.Random(2)
    for _ in range(200):
        a = [f"{rng.randrange(12)}\n" for _ in range(rng.randrange(0, 60))]
        b = list(a)
        for _ in range(rng.randrange(0, 6)):
            at = rng.randrange(0, len(b) + 1)
            if rng.random() < 0.5 and b:
                del b[min(at, len(b) - 1)]
            else:
                b.insert(at, f"{rng.randrange(20)}\n")
        assert list(unified_diff(a, b, "a/x", "b/x")) == list(difflib.unified_diff(a, b, "a/x", "b/x", n=3))


def test_large_files_diff_in_bounded_time_and_round_trip():
    """Past difflib's safe size the diff is anchored on unique lines; whatever it finds, it applies."""
    rng = random.Random(3)
    for _ in range(12):
        size = rng.randrange(1500, 6000)
        a = [f"{rng.randrange(size // 3)}\n" for _ in range(size)]
        b = list(a)
        for _ in range(rng.randrange(1, 400)):
            at = rng.randrange(0, len(b))
            b[at] = f"new {rng.randrange(10**6)}\n"
        b[rng.randrange(len(b)):rng.randrange(len(b))] = []
        old, new = "".join(a), "".join(b)
        diff, seconds = cpu(make_diff, {"a.py": old}, {"a.py": new})
        assert seconds < CPU_S
        assert apply_patch({"a.py": old}, diff) == {"a.py": new}


# -- through an episode: each of these is one clear invalid (or valid) step, never seconds of CPU -----

@pytest.fixture
def episode(cached_episode):
    return cached_episode


@pytest.mark.parametrize("shape", ["balanced_nesting", "nested_quoted_keys", "unclosed_fences", "python_literal_of_commas"])
def test_a_slow_reply_is_one_invalid_step_in_bounded_time(episode, shape):
    observation, seconds = cpu(episode.step, {"tool": "reply", "text": ADVERSARIAL_REPLIES[shape]})
    assert observation.error.startswith("format error") and episode.invalid_actions == 1
    assert seconds < CPU_S
    assert episode.step({"tool": "list_files"}).error is None


def test_a_large_file_and_slow_patches_cost_milliseconds_per_step(episode):
    """Write the largest file an episode allows, then send the diffs that are slowest to place and to show."""
    path = sorted(p for p in episode.files if p.endswith(".py"))[0]
    chunk = "".join(f"x{i} = {i}\n" for i in range(1500))
    episode.step({"tool": "edit_file", "path": path, "search": episode.files[path][:40],
                  "replace": episode.files[path][:40] + chunk})
    lines = episode.files[path].splitlines()
    interleaved = "".join(f"{line}\n# note {i}\n" for i, line in enumerate(lines))
    steps = [
        {"tool": "apply_patch", "diff": _misnumbered_hunk(["a"] * 20_000, "b").replace("a.py", path)},
        {"tool": "edit_file", "path": path, "search": episode.files[path], "replace": interleaved},
        {"tool": "view_diff"},
    ]
    observations = []
    for action in steps:
        observation, seconds = cpu(episode.step, action)
        observations.append(observation)
        assert seconds < 2 * CPU_S, (action["tool"], seconds)
    assert "does not apply" in observations[0].error
    assert observations[1].error is None and "# note 7" in observations[2].result["diff"]
