"""Finding structure in a language model's text, in linear time: fenced blocks, tagged blocks, where a
``{`` is closed.

Both readers of model output use it: the factory's LLM author (a scenario draft in a reply) and the
environment's reply parser (an action in a reply). A reply is written by whoever controls the model,
so nothing here may take more than linear time in its length: a lazy regular expression such as
```` ```(.*?)``` ```` searched again from every unclosed mark is quadratic, which is why the blocks are
found by one pass over their marks. Quotes are configurable because the author reads strict JSON
(double quotes only) while the reply parser also accepts Python-style single quotes.
"""

from __future__ import annotations

import re
from typing import Iterator

_FENCE_MARK = re.compile("```")
_FENCE_OPENING = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n")


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of each fenced block: ```` ```lang ```` and a newline, up to the next
    ```` ``` ````. One pass over the fence marks: a mark that opens no block is skipped, never searched
    from again."""
    marks = [m.start() for m in _FENCE_MARK.finditer(text)]
    i = 0
    while i + 1 < len(marks):
        opening = _FENCE_OPENING.match(text, marks[i] + 3, marks[i + 1])
        if opening is None:
            i += 1
            continue
        yield opening.group(1), text[opening.end():marks[i + 1]]
        i += 2


def tagged_blocks(text: str, names: tuple[str, ...]) -> Iterator[tuple[int, int, int, int]]:
    """(start, content start, content end, end) of each ``<name>...</name>`` block, any of ``names``,
    in any case; a block never closed runs to the end of the text. Each closing tag is looked for once,
    from its own opening tag on."""
    opener = re.compile("<(" + "|".join(map(re.escape, names)) + ")>", re.IGNORECASE)
    lowered = text.lower()
    position = 0
    while True:
        match = opener.search(text, position)
        if match is None:
            return
        close = lowered.find(f"</{match.group(1).lower()}>", match.end())
        if close == -1:
            yield match.start(), match.end(), len(text), len(text)
            return
        end = close + len(match.group(1)) + 3
        yield match.start(), match.end(), close, end
        position = end


def without_tagged_blocks(text: str, names: tuple[str, ...]) -> str:
    """``text`` without its :func:`tagged_blocks`."""
    kept, position = [], 0
    for start, _, _, end in tagged_blocks(text, names):
        kept.append(text[position:start])
        position = end
    kept.append(text[position:])
    return "".join(kept)


def closing_brace(text: str, start: int = 0, quotes: str = '"', limit: int | None = None) -> int:
    """The index of the ``}`` closing the ``{`` at ``text[start]``, or -1 if it is never closed (or not
    before index ``limit``, which bounds the work of one call). Braces inside strings (delimited by any
    of ``quotes``, backslash escapes respected) do not count."""
    depth, quote, escaped = 0, "", False
    stop = len(text) if limit is None else min(len(text), max(limit, start))
    for i in range(start, stop):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in quotes:
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1
