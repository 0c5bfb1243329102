"""Finding JSON-like objects in a language model's text: where a ``{`` is closed.

Both readers of model output use it: the factory's LLM author (a scenario draft in a reply) and the
environment's reply parser (an action in a reply). Quotes are configurable because the author reads
strict JSON (double quotes only) while the reply parser also accepts Python-style single quotes.
"""

from __future__ import annotations


def closing_brace(text: str, start: int = 0, quotes: str = '"') -> int:
    """The index of the ``}`` closing the ``{`` at ``text[start]``, or -1 if it is never closed.
    Braces inside strings (delimited by any of ``quotes``, backslash escapes respected) do not count."""
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
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
