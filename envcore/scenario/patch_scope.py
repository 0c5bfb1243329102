"""What a patch may change, and what of it is graded: one definition for every place a patch meets an app.

A patch is an agent's ``apply_patch`` or ``edit_file``, or a scenario's reference fix (``fix.diff``).
It may change **any file of the app**: its Python code and its data files alike (JSON, a SQLite
database kept as SQL text, ``.env``, templates, a policy file the fixed code reads), and it may add
files of either kind or delete them. The one limit is that the result is still an app folder
(:mod:`envcore.filetree`: names a filesystem takes, no path both a file and a folder, 256 files,
1 MiB a file, 8 MiB in all). Three places ask, and all three ask here:

* the agent's tools (:mod:`envcore.env.episode`) refuse a patch outside the scope as an invalid
  action, and change nothing;
* the import (:mod:`envcore.factory.byo`) refuses a reference fix outside it, and the scenario check
  runs the fix exactly as it is;
* grading (:mod:`envcore.verifier.shadow`) runs exactly what the patch made, code and data, through
  :func:`graded_files`.

**Grading on a shadow.** Grading replaces the identities an agent has seen with fresh ones (the
shadow, :mod:`envcore.verifier.shadow`), and the shadow rewrites some of the app's files: every data
file (its text and, where an identity is in its name, its path) and the code files where the app
makes its users. A patch's own words must not follow the shadow, or a patch that names a user it
has read (a deny-list of the visible users' ids, a line that special-cases a token) would name the
shadow's user too. So in a file the shadow rewrites, the lines the patch left as they were come from
the shadow and the lines the patch wrote keep what they say; a file the patch left alone is the
shadow's, at the shadow's path; a file the patch added is graded as written, and a file it deleted
stays deleted. A patch that rewrites the line that makes a user therefore keeps that user as the
agent saw it, while the probes act as the shadow's: whatever a data edit pins, it pins to people
grading never sends. This is the one rule for code and data files; nothing a data edit can do is
out of reach of code (which can read and rewrite its data files at start-up anyway), so counting
data edits opens no channel that code did not have.

Lines are split as every diff splits them (:func:`envcore.patching.split_lines`).

This module is pure: it reads nothing and writes nothing.
"""

from __future__ import annotations

import difflib
from typing import Mapping

from envcore.filetree import tree_problem
from envcore.patching import PatchError, apply_patch, split_lines


def is_code(path: str) -> bool:
    """Whether ``path`` is Python source (what the app imports); every other file is data. A patch
    may change both; the distinction only says which files a shadow rewrites in full (data) and
    which it leaves as they are unless the app makes its users there (code)."""
    return path.endswith(".py")


def scope_problem(files: Mapping[str, str]) -> str | None:
    """Why ``files`` (an app after a patch) are outside what a patch may make, or ``None``: the
    limits of an app folder (:func:`envcore.filetree.tree_problem`), whatever the files hold."""
    return tree_problem(files)


class OutOfScope(PatchError):
    """The patch applies, but what it makes is not an app folder (:func:`scope_problem`)."""


def apply_in_scope(files: Mapping[str, str], diff: str) -> dict[str, str]:
    """``files`` with ``diff`` applied; :class:`~envcore.patching.PatchError` when it does not apply,
    :class:`OutOfScope` when the result is outside the scope. Nothing is ever half-applied."""
    patched = apply_patch(files, diff)
    problem = scope_problem(patched)
    if problem is not None:
        raise OutOfScope(problem)
    return patched


def changed_paths(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The paths a patch added, changed or deleted, sorted."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def graded_files(original: Mapping[str, str], patched: Mapping[str, str],
                 shadowed: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """The app as grading runs it: ``patched`` (``original`` after a patch) on shadow data.

    ``shadowed`` maps each file of ``original`` that the shadow rewrites to its path and its text in
    the shadow (empty: the app's own data, and then the result is ``patched`` itself). A file the
    patch did not touch is the shadow's; a file it changed is merged line by line
    (:func:`unchanged_lines_shadowed`) at the shadow's path; a file the shadow does not rewrite, or
    that the patch added, is as the patch wrote it; a file the patch deleted is absent."""
    out: dict[str, str] = {}
    for path, text in patched.items():
        if path in shadowed and path in original:
            new_path, shadow_text = shadowed[path]
            before = original[path]
            out[new_path] = shadow_text if text == before else unchanged_lines_shadowed(before, text, shadow_text)
        else:
            out.setdefault(path, text)
    return out


def unchanged_lines_shadowed(before: str, patched: str, shadowed: str) -> str:
    """``patched`` with each line it kept from ``before`` taken from ``shadowed`` (``before`` as the
    shadow rewrote it, line for line); the lines the patch wrote as it wrote them. When the shadow
    does not keep ``before``'s lines one for one, ``patched`` as it is."""
    old, new, shadow = split_lines(before), split_lines(patched), split_lines(shadowed)
    if len(shadow) != len(old):
        return patched
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        out += shadow[i1:i2] if tag == "equal" else new[j1:j2]
    return "".join(out)
