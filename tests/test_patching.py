"""Unified diffs: made and applied exactly, bad diffs refused with the file and hunk named."""

from __future__ import annotations

import pytest

from envcore.patching import PatchError, apply_patch, changed_lines, make_diff, parse_patch

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
