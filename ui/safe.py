"""Text that came from outside the page, made safe to show on it.

The Space is public, and most of what it shows was written by someone else: human play logs are written
by anonymous visitors and shown to everybody in Watch and on the dashboard; agents' logs hold whatever a
model wrote; a patched app answers with whatever its patch says; nicknames, scenario text, probe
titles, errors and refusals echo all of these. Gradio interprets markup in several places:

* ``gr.Markdown`` renders Markdown and the HTML inside it (sanitized: no scripts or event handlers, but
  images, links, autolinked URLs and e-mail addresses, tables and headings survive, and an image is
  fetched from its host as soon as it is shown), and typesets ``$$...$$`` with KaTeX;
* toasts (``gr.Warning``, ``gr.Info``, ``gr.Error``) render their message as HTML;
* Plotly renders a subset of HTML in every label, title, legend entry and hover text, links included.

Everything from outside goes through one of the functions here before it reaches those places, so it
is shown literally, character for character, and makes no element. Components that do not interpret
markup (``gr.Code``, ``gr.Textbox``, ``gr.Dataframe`` cells, dropdown and radio choices, labels) get
the text as it is: escaping it there would show the escapes.

Choices:

* Markdown: every ASCII punctuation character is backslash-escaped (CommonMark allows it for all of
  them), which leaves no tag, link, image, emphasis, table pipe, heading, autolink (``http\\://``,
  ``www\\.`` and ``a\\@b`` are not links) or entity (``\\&``) for the renderer to find. :func:`markdown`
  keeps text on one line (a title, a table cell); :func:`markdown_lines` keeps its lines as hard line
  breaks, and can keep ```code``` in backticks as code spans (scenario text uses them for routes and
  fields): the one piece of markup allowed, since a code span shows its content as text. Code keeps
  its own form: :func:`code` and :func:`fence` make code spans and fenced blocks
  that no backtick inside can close, and whose content CommonMark shows as text.
* LaTeX is typeset on the page after Markdown is rendered, from the text itself, so no escape can stop
  it: Markdown that shows outside text is made with :func:`markdown_component`, which turns it off.
* HTML (toasts): :func:`html`, the standard entity escape, quotes included.
* Plotly: :func:`plot`, the entity escape of ``&``, ``<`` and ``>`` (Plotly shows entities as the
  characters they stand for). Hover templates never embed outside text: they read it from the trace
  (``%{fullData.name}``, ``%{y}``), where ``%{...}`` in the text is not a placeholder.
"""

from __future__ import annotations

import html as _html
import re
import string
from typing import Any

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
_LEADING = re.compile(r"^[ \t]+")
_CODE_SPAN = re.compile(r"`([^`]+)`")


def markdown(text: Any) -> str:
    """``text`` as Markdown that renders as exactly its characters, on one line (runs of whitespace,
    newlines included, become one space: a title or a table cell stays whole)."""
    return _PUNCTUATION.sub(r"\\\1", " ".join(str(text).split()))


def markdown_lines(text: Any, *, code_spans: bool = False) -> str:
    """``text`` as Markdown that renders as exactly its characters, line by line: each line escaped as by
    :func:`markdown` (its indentation kept as non-breaking spaces), lines joined by hard line breaks and
    blank lines kept as paragraph breaks. With ``code_spans``, text between single backticks becomes a
    code span (:func:`code`) instead of showing its backticks."""
    paragraphs: list[list[str]] = [[]]
    for line in str(text).splitlines():
        if not line.strip():
            if paragraphs[-1]:
                paragraphs.append([])
            continue
        indent = _LEADING.match(line)
        width = len(indent.group().expandtabs(4)) if indent else 0
        body = line.strip()
        paragraphs[-1].append("\u00a0" * width + (_with_code_spans(body) if code_spans else markdown(body)))
    return "\n\n".join("  \n".join(lines) for lines in paragraphs if lines)


def _with_code_spans(line: str) -> str:
    parts = _CODE_SPAN.split(line)  # text, code, text, code, ..., text
    return "".join(code(part) if index % 2 else _PUNCTUATION.sub(r"\\\1", re.sub(r"\s+", " ", part))
                   for index, part in enumerate(parts))


def code(text: Any) -> str:
    """``text`` as an inline code span (whitespace runs become one space) that no backtick inside it can
    close; CommonMark shows a code span's content as text."""
    text = " ".join(str(text).split())
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: Any, language: str = "") -> str:
    """``text`` as a fenced code block longer than any backtick run inside it (so it cannot be closed
    early); ``language`` is the page's own choice, never outside text."""
    text = str(text)
    ticks = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


def table(rows: Any, columns: Any) -> str:
    """A Markdown table of ``rows`` (sequences of cells) under ``columns``, every cell escaped as by
    :func:`markdown` (a pipe in a cell stays a character). A table of text is drawn in a fraction of
    the time a data grid takes; the page uses it where a table is redrawn on every click, in a
    component marked ``a01-table`` (the attack tests allow exactly one table there, none nested)."""
    columns = list(columns)
    lines = ["| " + " | ".join(markdown(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(markdown(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def html(text: Any) -> str:
    """``text`` for a place that renders HTML (a toast): every special character an entity."""
    return _html.escape(str(text), quote=True)


def plot(text: Any) -> str:
    """``text`` for a Plotly label, title, legend entry or category: ``&``, ``<`` and ``>`` as entities."""
    return _html.escape(str(text), quote=False)


def markdown_component(value: str = "", **options: Any) -> Any:
    """A ``gr.Markdown`` for text that holds outside text (escaped with the functions above): LaTeX off,
    Gradio's HTML sanitizer on."""
    import gradio as gr

    return gr.Markdown(value, latex_delimiters=[], sanitize_html=True, **options)
