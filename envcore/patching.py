"""Unified diffs over in-memory file sets: make them, parse them, apply them strictly.

Files are ``{relative path: text}`` mappings. :func:`make_diff` writes git-style diffs (``a/`` and
``b/`` prefixes, ``/dev/null`` for added and removed files). :func:`apply_patch` applies a diff and
raises :class:`PatchError` saying which file and hunk failed; it never half-applies. A hunk whose
line numbers are off is still placed if its context and removed lines match exactly one place in the
file (agents often miscount lines), and a hunk that reaches the end of a file with no final newline
applies without the ``\\ No newline at end of file`` marker; fuzzy matching of context is never
attempted.

**One rule for lines**, wherever a diff is made, parsed, applied or counted: a line ends at ``"\n"``
and nowhere else (:func:`split_lines`), as in every unified diff. ``str.splitlines()`` also breaks
at ``"\r"``, form feed, vertical tab, ``\x1c``-``\x1e``, U+0085, U+2028 and U+2029, all of which
Python source may hold; a diff made with one rule and read with the other does not apply or is
miscounted. So ``"\r\n"`` ends a line whose text ends in ``"\r"``, and a lone ``"\r"`` or form feed
is an ordinary character inside a line. Text is never encoded here, so a lone surrogate is just a
character too (whether a file set can be written is :mod:`envcore.filetree`'s question).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Mapping

from envcore.linediff import unified_diff

DEV_NULL = "/dev/null"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"
EPOCH = "\t1970-01-01"  # how `diff -N` dates the side of a file that does not exist


class PatchError(ValueError):
    """The diff is malformed or does not apply; the message names the file and hunk."""


@dataclass
class Hunk:
    old_start: int
    new_start: int = 1
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)
    header: str = ""
    removed: int = 0
    """Lines the hunk marks ``-``."""
    added: int = 0
    """Lines the hunk marks ``+``."""


@dataclass
class FilePatch:
    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)
    old_header: str = ""
    new_header: str = ""

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


def split_lines(text: str, keepends: bool = True) -> list[str]:
    """``text``'s lines as a unified diff counts them: each ends at ``"\n"`` (kept with ``keepends``);
    a last line without one is a line too. ``""`` has no lines."""
    lines = text.split("\n")
    last = lines.pop()
    if keepends:
        lines = [line + "\n" for line in lines]
    if last:
        lines.append(last)
    return lines


def line_count(text: str) -> int:
    """``len(split_lines(text))``, without building the list."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)



def make_diff(old: Mapping[str, str], new: Mapping[str, str], context: int = 3) -> str:
    """A unified diff turning ``old`` into ``new`` (files in sorted path order)."""
    out: list[str] = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        from_name = f"a/{path}" if a is not None else DEV_NULL
        to_name = f"b/{path}" if b is not None else DEV_NULL
        out.append(f"diff --git a/{path} b/{path}\n")
        lines = list(unified_diff(split_lines(a or ""), split_lines(b or ""), from_name, to_name, n=context))
        if not lines:  # an empty file added or removed: headers only, no hunk
            lines = [f"--- {from_name}\n", f"+++ {to_name}\n"]
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE + "\n")
    return "".join(out)


def clip_diff(diff: str, limit: int) -> str:
    """``diff`` if it has at most ``limit`` characters, else a shorter diff and a last line saying how
    much was left out, ``limit`` characters in all. The shorter diff keeps the first whole files; if
    the first file alone is longer, it keeps that file's first lines, with the last hunk's header
    counting only the lines kept. So what is kept still parses, and applies: the note is commentary,
    which :func:`parse_patch` skips."""
    if len(diff) <= limit:
        return diff
    note = f"[the diff is {len(diff):,} characters; the rest, from here, is left out]\n"
    room = max(limit - len(note) - 32, 0)  # 32: a hunk header may grow when its counts are written out
    cut = diff.rfind("\ndiff --git ", 0, room)
    if cut > 0:
        return diff[:cut + 1] + note
    cut = diff.rfind("\n", 0, room)
    kept = _close_last_hunk(diff[:cut + 1]) if cut > 0 else ""
    return kept + note


def _close_last_hunk(kept: str) -> str:
    """``kept`` (the start of one file's diff, cut at a line end) with its last hunk's header
    rewritten to count the lines kept; without that hunk if it kept none, and ``""`` if no hunk is left."""
    lines = split_lines(kept)
    at = max((i for i, line in enumerate(lines) if _HUNK.match(line)), default=None)
    if at is None:
        return ""
    old = new = 0
    for line in lines[at + 1:]:
        tag = line[:1]
        if tag == "\\":
            continue
        old += tag != "+"
        new += tag != "-"
    if old == new == 0:  # the cut fell right after this header: the hunks before it are whole
        return "".join(lines[:at]) if any(_HUNK.match(line) for line in lines[:at]) else ""
    match = _HUNK.match(lines[at])
    assert match is not None
    lines[at] = f"@@ -{match.group(1)},{old} +{match.group(3)},{new} @@\n"
    return "".join(lines)


def _strip_prefix(name: str) -> str | None:
    name = name.split("\t", 1)[0].strip()
    if name == DEV_NULL:
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def parse_patch(diff: str) -> list[FilePatch]:
    """Parse a unified diff into file patches; raises :class:`PatchError` on malformed input."""
    lines = split_lines(diff)
    patches: list[FilePatch] = []
    current: FilePatch | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = FilePatch(
                _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:]), old_header=line, new_header=lines[i + 1]
            )
            patches.append(current)
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if current is None:
                raise PatchError(f"line {i + 1}: hunk header before any '---'/'+++' file header")
            old_count = int(match.group(2)) if match.group(2) is not None else 1
            new_count = int(match.group(4)) if match.group(4) is not None else 1
            hunk = Hunk(old_start=int(match.group(1)), new_start=int(match.group(3)), header=line.rstrip("\n"))
            i += 1
            seen_old = seen_new = 0
            last_tag = " "
            while i < len(lines) and (seen_old < old_count or seen_new < new_count):
                body = lines[i]
                if body.startswith(NO_NEWLINE):
                    _mark_no_newline(hunk, last_tag)
                    i += 1
                    continue
                tag, text = body[:1], body[1:]
                if body in ("\n", "\r\n"):  # an empty context line whose leading space was stripped
                    tag, text = " ", body
                if tag == " ":
                    hunk.old_lines.append(text)
                    hunk.new_lines.append(text)
                    seen_old += 1
                    seen_new += 1
                elif tag == "-":
                    hunk.old_lines.append(text)
                    hunk.removed += 1
                    seen_old += 1
                elif tag == "+":
                    hunk.new_lines.append(text)
                    hunk.added += 1
                    seen_new += 1
                else:
                    raise PatchError(f"line {i + 1}: unexpected {body[:40]!r} inside hunk {hunk.header}")
                last_tag = tag
                i += 1
            if seen_old != old_count or seen_new != new_count:
                raise PatchError(f"hunk {hunk.header} in {current.path} is truncated")
            if i < len(lines) and lines[i].startswith(NO_NEWLINE):
                _mark_no_newline(hunk, last_tag)
                i += 1
            current.hunks.append(hunk)
            continue
        i += 1  # git headers (diff --git, index, mode lines) and commentary are skipped
    if not patches:
        raise PatchError("no file changes found (expected '--- a/path' and '+++ b/path' headers)")
    for patch in patches:
        if not patch.hunks and not (patch.old_path is None or patch.new_path is None):
            raise PatchError(f"{patch.path}: file header without hunks")
    return patches


def _mark_no_newline(hunk: Hunk, last_tag: str) -> None:
    """Apply a '\\ No newline at end of file' marker to the line just read."""
    targets = {"-": [hunk.old_lines], "+": [hunk.new_lines], " ": [hunk.old_lines, hunk.new_lines]}[last_tag]
    for lines in targets:
        if lines:
            lines[-1] = lines[-1].rstrip("\n")


SEARCH_BUDGET = 4_000_000
"""Lines one :func:`apply_patch` may look at while placing hunks whose line numbers are off (every hunk
and file together): placing hundreds of misnumbered hunks in the largest file takes a fraction of it,
and it keeps a diff built to be slow to place (a long hunk that almost matches everywhere in a file of
identical lines) to milliseconds. Counted, not timed: the same diff always gets the same answer."""


class _SearchBudget:
    __slots__ = ("left",)

    def __init__(self, lines: int) -> None:
        self.left = lines

    def spend(self, lines: int, path: str, header: str) -> None:
        self.left -= lines
        if self.left < 0:
            raise PatchError(f"{path}: hunk {header} could not be placed: too many hunks whose line numbers are "
                             "off, in too large a file; give each hunk's line numbers as they are in the file")


def _find(haystack: list[str], needle: list[str], hint: int, budget: _SearchBudget, path: str, header: str) -> int | None:
    """Where ``needle`` starts in ``haystack``: at ``hint`` if it is there, else at the one place it
    occurs (``None`` if it occurs nowhere or more than once). Candidates come from the needle's longest
    line (usually its rarest), found at C speed; each is checked whole. The work is charged to
    ``budget``."""
    if not needle:
        return min(max(hint, 0), len(haystack))
    if haystack[hint : hint + len(needle)] == needle:
        return hint
    anchor = max(range(len(needle)), key=lambda k: len(needle[k]))
    line, last = needle[anchor], len(haystack) - len(needle) + anchor
    spots: list[int] = []
    position = anchor
    while position <= last and len(spots) < 2:
        try:
            found = haystack.index(line, position, last + 1)
        except ValueError:
            budget.spend(max(last + 1 - position, 0) // 8, path, header)
            break
        budget.spend((found - position) // 8 + len(needle), path, header)
        start = found - anchor
        if haystack[start : start + len(needle)] == needle:
            spots.append(start)
        position = found + 1
    return spots[0] if len(spots) == 1 else None


def _ends_without_newline_marker(source: list[str], hunk: Hunk) -> bool:
    """Whether ``hunk`` matches the end of a file that has no final newline, written as if it had one:
    the ``\\ No newline at end of file`` marker left out, as people and models usually do. Such a
    hunk applies there (and only there), and the file keeps having no final newline."""
    old = hunk.old_lines
    if not old or not source or source[-1].endswith("\n") or len(old) > len(source):
        return False
    return old[-1] == source[-1] + "\n" and source[len(source) - len(old):-1] == old[:-1]


def _place(source: list[str], hunk: Hunk, hint: int, budget: _SearchBudget, path: str) -> int | None:
    """Where ``hunk`` applies in ``source`` (see :func:`_find`), counting the end of a file with no final
    newline as a place where a hunk written without the marker matches. Exact line numbers win; any
    other place must be the only one. A hunk placed at such an end is rewritten to keep the file without
    a final newline."""
    if not _ends_without_newline_marker(source, hunk):
        return _find(source, hunk.old_lines, hint, budget, path, hunk.header)
    at_end = len(source) - len(hunk.old_lines)
    if hint != at_end:
        if source[hint : hint + len(hunk.old_lines)] == hunk.old_lines:
            return hint
        if _find(source, hunk.old_lines, hint, budget, path, hunk.header) is not None:
            return None  # it matches there and at the end: two places
    hunk.old_lines[-1] = source[-1]
    if hunk.new_lines:
        hunk.new_lines[-1] = hunk.new_lines[-1].removesuffix("\n")
    return at_end


def apply_patch(files: Mapping[str, str], diff: str) -> dict[str, str]:
    """Return a new file mapping with ``diff`` applied, or raise :class:`PatchError`."""
    result = dict(files)
    budget = _SearchBudget(SEARCH_BUDGET)
    for patch in parse_patch(diff):
        # `diff -N` names both sides even for an added or removed file, dating the missing side at the epoch
        if EPOCH in patch.old_header and all(h.old_start == 0 and not h.old_lines for h in patch.hunks):
            patch.old_path = None
        elif EPOCH in patch.new_header and all(h.new_start == 0 and not h.new_lines for h in patch.hunks):
            patch.new_path = None
        if patch.old_path is None:
            if patch.new_path in result:
                raise PatchError(f"{patch.new_path}: diff creates a file that already exists")
            source: list[str] = []
        else:
            if patch.old_path not in result:
                raise PatchError(f"{patch.old_path}: no such file")
            source = split_lines(result[patch.old_path])
        offset = 0
        for hunk in patch.hunks:
            hint = max(hunk.old_start - 1, 0) + offset
            at = _place(source, hunk, hint, budget, patch.path)
            if at is None:
                raise PatchError(
                    f"{patch.path}: hunk {hunk.header} does not apply (its context and removed lines are not "
                    "found exactly once)"
                )
            source[at : at + len(hunk.old_lines)] = hunk.new_lines
            offset = at - max(hunk.old_start - 1, 0) + len(hunk.new_lines) - len(hunk.old_lines)
        text = "".join(source)
        if patch.new_path is None:
            del result[patch.old_path]
        else:
            if patch.old_path is not None and patch.old_path != patch.new_path:
                del result[patch.old_path]
            result[patch.new_path] = text
    return result


ALIGN_MAX_LINES = 100
"""Hunks up to this many lines (old and new together) are re-aligned by :func:`changed_lines`."""


def changed_lines(diff: str) -> tuple[int, int]:
    """(files touched, lines added + removed) of a diff.

    A hunk of up to :data:`ALIGN_MAX_LINES` lines is re-aligned, so a line removed and added back
    unchanged does not count; a longer one is counted as written (its ``+`` and ``-`` lines).
    Re-aligning costs time cubic in the hunk's size in the worst case: a hunk of a few hundred
    thousand blank lines took minutes, at submit, and 1,000 lines against 1,000 took six seconds."""
    patches = parse_patch(diff)
    return len(patches), sum(h.added + h.removed - 2 * _realigned(h) for p in patches for h in p.hunks)


def _realigned(hunk: Hunk) -> int:
    """Lines a small hunk marks removed and added that are in fact unchanged (0 for a long hunk)."""
    if len(hunk.old_lines) + len(hunk.new_lines) > ALIGN_MAX_LINES:
        return 0
    matcher = difflib.SequenceMatcher(a=hunk.old_lines, b=hunk.new_lines, autojunk=False)
    common = sum(block.size for block in matcher.get_matching_blocks())
    return common - (len(hunk.old_lines) - hunk.removed)  # beyond the context lines, which are in both
