"""Unified diffs as coloured HTML: added lines green, removed lines red, hunk headers blue, file
headers bold, everything else as it is.

A diff on this page may hold anything (a player's patch, an agent's, an app's strings), so every line
is entity-escaped (:func:`ui.safe.html`) before it is wrapped in the one ``<span>`` that colours it:
the only markup in the result is the page's own, and a ``<script>`` or ``<img>`` in a diff is shown
as text. ``gr.Code`` has no diff language; a ``gr.HTML`` with :data:`CSS` shows this instead.

:data:`CSS` is the stylesheet the page adds for the views of code and text this package draws: the
diffs, and with them the tables of text (``a01-table``, the task's users) and the Watch tab's banner
(``a01-story``). A table's header is never broken inside a word (a phone's narrow column used to
show "comp onent"); its cells break at spaces, and inside a word only when the word alone is wider
than the screen, and a table wider than the screen scrolls inside its own box, never the page. On a
phone a reward breakdown (``a01-breakdown``) leaves out its *measured* column, which its *detail*
column says in words, so the rest fits the screen.
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
.a01-table table, #play-task table {display: block; width: fit-content; max-width: 100%; overflow-x: auto;
  border: 0 !important; padding: 0 !important}
.a01-table th, #play-task th {word-break: keep-all !important; overflow-wrap: normal !important;
  hyphens: none; white-space: nowrap}
.a01-table td, #play-task td {word-break: normal !important; overflow-wrap: break-word !important}
@media (max-width: 600px) {
  .a01-table th, .a01-table td, #play-task th, #play-task td {padding: 4px 6px !important; font-size: 13px}
  .a01-breakdown th:nth-child(3), .a01-breakdown td:nth-child(3) {display: none}
}
.block.a01-story {border-left: 4px solid var(--color-accent); padding: 6px 12px !important;
  background: var(--background-fill-secondary); border-radius: 4px}
.a01-story p {margin: 0 !important}
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
