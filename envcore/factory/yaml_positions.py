"""YAML read with the position of every value, so a problem in a scenario folder names its line and
column (``scenario.yaml:14:7: users.2.role: Field required``), whatever the problem: bad YAML
syntax, a value of the wrong type, a field missing from a mapping, an unknown field.

:func:`load` returns the data (``yaml.safe_load``'s) and a :class:`Positions` that maps a Pydantic
error location (``("users", 2, "role")``) to the nearest place in the text: the value itself, or,
for a missing field, the mapping that lacks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml


class YamlSyntaxError(ValueError):
    """The text is not valid YAML; the message says where (line and column, counted from 1)."""


@dataclass(frozen=True)
class Positions:
    """Where each value of one YAML document is (1-based line and column)."""

    root: yaml.Node | None

    def of(self, location: Sequence[Any]) -> tuple[int, int] | None:
        """The position of the value at ``location`` (mapping keys and list indexes), or of the
        deepest value on the way there that exists; ``None`` for an empty document."""
        node = self.root
        if node is None:
            return None
        for part in location:
            child = _child(node, part)
            if child is None:
                break
            node = child
        return node.start_mark.line + 1, node.start_mark.column + 1

    def prefix(self, location: Sequence[Any]) -> str:
        """``line:column: `` of ``location``, or nothing when it is unknown."""
        where = self.of(location)
        return f"{where[0]}:{where[1]}: " if where else ""


def _child(node: yaml.Node, part: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None


def load(text: str) -> tuple[Any, Positions]:
    """Parse ``text``: (the data, where each value is). :class:`YamlSyntaxError` with the line and
    column of a syntax error."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = " ".join(part for part in (exc.context, exc.problem) if part)
        raise YamlSyntaxError(f"{where}{what or 'not valid YAML'}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(str(exc).splitlines()[0]) from None
    return data, Positions(root)
