"""Unified diffs: made and applied exactly, bad diffs refused with the file and hunk named."""

from __future__ import annotations

import contextlib
import signal

import pytest

from envcore.patching import PatchError, apply_patch, changed_lines, clip_diff, make_diff, parse_patch

OLD = {"app.py": "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n", "lib/util.py": "x = 1\n"}


@pytest.mark.parametrize(
    "new, description",
    [
        ({**OLD, "app.py": OLD["app.py"].replace("c\n", "C\n")}, "one changed line"),
        ({**OLD, "app.py": OLD["app.py"].replace("b\n", "").replace("i\n", "I\nI2\n")}, "two hunks"),
        ({**OLD, "new.py": "print('hi')\n"}, "added file"),
        ({"app.py": OLD["app.py"]}, "deleted file"),
        ({**OLD, "lib/util.py": "x = 2"}, "no newline at end of file"),
    ],
)
def test_make_then_apply_round_trips(new, description):
    assert apply_patch(OLD, make_diff(OLD, new)) == new, description


def test_hunk_with_wrong_line_numbers_still_applies_when_context_is_unique():
    diff = "--- a/app.py\n+++ b/app.py\n@@ -40,3 +40,3 @@\n e\n-f\n+F\n g\n"
    assert apply_patch(OLD, diff)["app.py"].splitlines()[5] == "F"


def test_context_mismatch_is_refused_naming_the_file():
    diff = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n zzz\n-b\n+B\n"
    with pytest.raises(PatchError, match="app.py"):
        apply_patch(OLD, diff)


def test_patch_to_a_missing_file_is_refused():
    with pytest.raises(PatchError, match="no such file"):
        apply_patch(OLD, "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n")


def test_garbage_is_not_a_patch():
    with pytest.raises(PatchError, match="no file changes"):
        parse_patch("please fix the bug\n")


def test_truncated_hunk_is_refused():
    with pytest.raises(PatchError, match="truncated"):
        parse_patch("--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n a\n-b\n")


def test_failed_patch_changes_nothing():
    files = dict(OLD)
    good_then_bad = make_diff(OLD, {**OLD, "lib/util.py": "x = 3\n"}) + "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-q\n+r\n"
    with pytest.raises(PatchError):
        apply_patch(files, good_then_bad)
    assert files == OLD


def test_changed_lines_counts_added_and_removed():
    diff = make_diff(OLD, {**OLD, "app.py": OLD["app.py"].replace("c\n", "C\nC2\n")})
    assert changed_lines(diff) == (1, 3)


def test_gnu_diff_new_file_form_creates_the_file():
    diff = "--- a/new.py\t1970-01-01 00:00:00.000000000 +0000\n+++ b/new.py\t2026-01-01 00:00:00.000000000 +0000\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
    assert apply_patch(OLD, diff)["new.py"] == "x = 1\ny = 2\n"


def test_gnu_diff_deleted_file_form_removes_the_file():
    diff = "--- a/lib/util.py\t2026-01-01\n+++ b/lib/util.py\t1970-01-01\n@@ -1 +0,0 @@\n-x = 1\n"
    assert "lib/util.py" not in apply_patch(OLD, diff)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_lines = st.lists(st.sampled_from(["a", "b", "c", "", "def f():", "    return 1", "x = 2", "# note"]), max_size=30)
_texts = _lines.map(lambda ls: "".join(line + "\n" for line in ls)) | _lines.map("\n".join)
_file_sets = st.dictionaries(st.sampled_from(["app.py", "pkg/a.py", "pkg/b.py", "data/seed.json"]), _texts, max_size=4)


@settings(max_examples=200, deadline=None)
@given(old=_file_sets, new=_file_sets)
def test_any_diff_we_make_applies_back_exactly(old, new):
    if old == new:
        assert make_diff(old, new) == ""  # nothing to say; applying "" is refused as "no file changes"
        return
    assert apply_patch(old, make_diff(old, new)) == new


# ----- every character Python source may hold --------------------------------------------------------
# str.splitlines() also splits on these; a unified diff splits only on "\n". A diff made with one rule and
# read or counted with the other no longer applies, or miscounts, or raises at submit.
_LINE_BREAKERS = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\r\n"]


@pytest.mark.parametrize("char", _LINE_BREAKERS, ids=[repr(c) for c in _LINE_BREAKERS])
def test_a_character_splitlines_breaks_on_does_not_break_a_diff(char):
    old = {"app.py": "x = 1\ny = 2\nz = 3\n"}
    new = {"app.py": f"x = 1\ny = 2{char}# more\nz = 3\n"}
    diff = make_diff(old, new)
    assert apply_patch(old, diff) == new
    # one line removed and one added: the character is inside a line ("\r\n" ends one, so two are added)
    assert changed_lines(diff) == (1, 3 if "\n" in char else 2)


@pytest.mark.parametrize("char", _LINE_BREAKERS, ids=[repr(c) for c in _LINE_BREAKERS])
def test_a_file_ending_in_a_character_splitlines_breaks_on_round_trips(char):
    old = {"app.py": "x = 1\n"}
    new = {"app.py": f"x = 1\ny = 2{char}"}
    assert apply_patch(old, make_diff(old, new)) == new


def test_a_lone_surrogate_in_a_file_round_trips():
    old = {"app.py": "x = 1\n"}
    new = {"app.py": "x = '\ud800'\n"}
    diff = make_diff(old, new)
    assert apply_patch(old, diff) == new and changed_lines(diff) == (1, 2)


def test_split_lines_ends_lines_at_newlines_only():
    from envcore.patching import split_lines

    assert split_lines("a\fb\r\nc\u2028d\n\ne") == ["a\fb\r\n", "c\u2028d\n", "\n", "e"]
    assert split_lines("a\n", keepends=False) == ["a"] and split_lines("") == []
    assert "".join(split_lines("a\rb\n\x85")) == "a\rb\n\x85"


def test_a_diff_line_holding_a_form_feed_is_read_as_one_line():
    diff = "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n a\n-b\n+b\f# page\n c\n"
    assert apply_patch(OLD, diff)["app.py"].startswith("a\nb\f# page\nc\n")
    assert changed_lines(diff) == (1, 2)


_any_char_lines = st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=8)
                           | st.sampled_from(_LINE_BREAKERS), max_size=12)
_any_texts = st.tuples(_any_char_lines, st.booleans()).map(lambda t: "\n".join(t[0]) + ("\n" if t[1] else ""))
_any_file_sets = st.dictionaries(st.sampled_from(["app.py", "pkg/a.py", "data/seed.json"]), _any_texts, max_size=3)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(old=_any_file_sets, new=_any_file_sets)
def test_any_text_python_may_hold_round_trips_and_is_counted(old, new):
    diff = make_diff(old, new)
    if old == new:
        assert diff == ""
        return
    assert apply_patch(old, diff) == new
    changed = [p for p in set(old) | set(new) if old.get(p) != new.get(p)]
    files, lines = changed_lines(diff)
    assert files == len(changed)
    # every changed file with text on either side changes a line (an empty file added or removed changes none)
    assert lines >= sum(1 for p in changed if old.get(p) or new.get(p))


class _Overtime(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise :class:`_Overtime` in the block after ``seconds`` (a stall fails the test instead of hanging it)."""
    def expire(*_):
        raise _Overtime(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_hunk_of_sixty_thousand_blank_lines_is_counted_without_stalling_submit():
    # Re-aligning every hunk is cubic in its size: this hunk took minutes to count.
    old = {"app.py": "".join("\n" if i % 4 == 0 else f"line_{i} = {i}\n" for i in range(400))}
    new = {"app.py": "\n" * 60_000}
    diff = make_diff(old, new)
    with _deadline(15):
        files, lines = changed_lines(diff)
    assert files == 1 and 60_000 - 100 <= lines <= 60_000 + 400


# ----- a diff cut to fit an observation or a log record --------------------------------------------------
def test_a_diff_within_the_limit_is_not_cut():
    diff = make_diff(OLD, {**OLD, "new.py": "x = 1\n"})
    assert clip_diff(diff, len(diff)) == diff


def test_a_diff_cut_between_files_keeps_whole_files_and_says_so():
    new = {**OLD, "a.py": "a\n" * 200, "b.py": "b\n" * 500}
    diff = make_diff(OLD, new)
    cut = clip_diff(diff, 1500)
    assert len(cut) <= 1500 and cut.endswith("the rest, from here, is left out]\n")
    assert [p.path for p in parse_patch(cut)] == ["a.py"] and apply_patch(OLD, cut)["a.py"] == new["a.py"]


@pytest.mark.parametrize("limit", [200, 333, 1000, 3001])
def test_a_diff_cut_inside_its_first_file_still_parses_and_applies_a_prefix(limit):
    old = {"app.py": "".join(f"line {i}\n" for i in range(300))}
    new = {"app.py": "".join(f"line {i}\n" if i % 7 else f"changed {i}\n" for i in range(300)) + "tail\n" * 50}
    diff = make_diff(old, new, context=400)  # one hunk over the whole file
    cut = clip_diff(diff, limit)
    assert len(cut) <= limit and cut.endswith("left out]\n")
    # applied, it makes the change as far as it was kept, and leaves the rest of the file as it was
    patched, changed, before = (t.split("\n") for t in (apply_patch(old, cut)["app.py"], new["app.py"], old["app.py"]))
    kept = next(i for i, (a, b) in enumerate(zip(patched, changed)) if a != b)
    assert kept > 0 and patched[kept:] == before[len(before) - len(patched) + kept:]


def test_a_diff_cut_inside_its_first_header_is_only_the_note():
    diff = make_diff({}, {"x" * 300 + ".py": "x = 1\n"})
    cut = clip_diff(diff, 150)
    assert cut.startswith("[the diff is") and len(cut) <= 150


def test_a_hunk_at_the_end_of_a_file_without_final_newline_applies_without_the_marker():
    """People and models leave out ``\\ No newline at end of file``; such a hunk still applies at the end
    of the file, and the file keeps having no final newline."""
    files = {"a.py": "x = 1\ny = 2"}
    change = "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,3 @@\n x = 1\n-y = 2\n+y = 3\n+z = 4\n"
    assert apply_patch(files, change) == {"a.py": "x = 1\ny = 3\nz = 4"}
    append = "--- a/a.py\n+++ b/a.py\n@@ -2 +2,2 @@\n y = 2\n+z = 3\n"
    assert apply_patch(files, append) == {"a.py": "x = 1\ny = 2\nz = 3"}
    remove_last = "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1 @@\n x = 1\n-y = 2\n"
    assert apply_patch(files, remove_last) == {"a.py": "x = 1"}


def test_a_hunk_without_the_marker_applies_only_at_the_end_of_the_file():
    files = {"a.py": "y = 2\nx = 1\ny = 2"}
    elsewhere = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-y = 2\n+y = 3\n"  # line 1 is "y = 2\n": exact
    assert apply_patch(files, elsewhere) == {"a.py": "y = 3\nx = 1\ny = 2"}
    wrong_context = "--- a/a.py\n+++ b/a.py\n@@ -2,2 +2,2 @@\n x = 9\n-y = 2\n+y = 3\n"
    with pytest.raises(PatchError, match="does not apply"):
        apply_patch(files, wrong_context)
    with_newline = {"a.py": "x = 1\ny = 2\n"}
    marked = "--- a/a.py\n+++ b/a.py\n@@ -2 +2 @@\n-y = 2\n\\ No newline at end of file\n+y = 3\n"
    with pytest.raises(PatchError, match="does not apply"):
        apply_patch(with_newline, marked)


def test_a_hunk_without_the_marker_that_also_matches_elsewhere_follows_its_line_numbers_or_is_refused():
    files = {"a.py": "y = 2\nx = 1\ny = 2"}
    at_the_end = "--- a/a.py\n+++ b/a.py\n@@ -3 +3 @@\n-y = 2\n+y = 3\n"
    assert apply_patch(files, at_the_end) == {"a.py": "y = 2\nx = 1\ny = 3"}
    misnumbered = "--- a/a.py\n+++ b/a.py\n@@ -9 +9 @@\n-y = 2\n+y = 3\n"
    with pytest.raises(PatchError, match="does not apply"):
        apply_patch(files, misnumbered)
