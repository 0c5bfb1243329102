"""Unified diffs as coloured HTML: added lines green, removed lines red, hunk headers blue, file
headers bold, everything else as it is.

A diff on this page may hold anything (a player's patch, an agent's, an app's strings), so every line
is entity-escaped (:func:`ui.safe.html`) before it is wrapped in the one ``<span>`` that colours it:
the only markup in the result is the page's own, and a ``<script>`` or ``<img>`` in a diff is shown
as text. ``gr.Code`` has no diff language; a ``gr.HTML`` with :data:`CSS` shows this instead.
"""

from __future__ import annotations

from ui import safe

CSS = """
.a01-diff {font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px;
  line-height: 1.45; white-space: pre; overflow-x: auto; max-height: 480px; overflow-y: auto;
  border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 8px 0; margin: 0;
  background: var(--background-fill-secondary)}
.a01-diff span {display: block; padding: 0 10px; min-height: 1.45em}
.a01-diff .add {background: #e6ffec; color: #116329}
.a01-diff .del {background: #ffebe9; color: #82071e}
.a01-diff .hunk {color: #0550ae; background: #ddf4ff}
.a01-diff .file {font-weight: 600}
.a01-diff-empty {color: var(--body-text-color-subdued); font-style: italic; padding: 4px 0}
"""


def _kind(line: str) -> str:
    if line.startswith(("+++ ", "--- ", "diff ", "index ")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def diff_html(diff: str | None, *, empty: str = "No changes yet.") -> str:
    """``diff`` as escaped, coloured HTML; ``empty`` (escaped too) when there is no diff."""
    if not (diff or "").strip():
        return f'<div class="a01-diff-empty">{safe.html(empty)}</div>'
    lines = str(diff).splitlines()
    body = "".join(f'<span class="{_kind(line)}">{safe.html(line)}</span>' for line in lines)
    return f'<pre class="a01-diff">{body}</pre>'
