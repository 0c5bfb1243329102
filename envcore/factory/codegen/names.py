"""Identifiers the generated code uses, derived once from a spec.

Templates never spell a domain word themselves: they ask :class:`Names` for ``get_note`` or
``appointment_id``, so one template serves every domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from envcore.scenario.spec import ScenarioSpec

PY_TYPES = {"text": "str", "int": "int", "money": "float", "date": "str", "bool": "bool", "email": "str"}
SQL_TYPES = {"text": "TEXT", "int": "INTEGER", "money": "REAL", "date": "TEXT", "bool": "INTEGER", "email": "TEXT"}


def a(word: str) -> str:
    """``word`` with its indefinite article: ``an invoice``, ``a note``."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def camel(word: str) -> str:
    return "".join(part.title() for part in word.split("_"))


@dataclass(frozen=True)
class Names:
    s: str  # singular
    p: str  # plural
    id: str  # path parameter, e.g. note_id
    id_type: str  # "int" | "str"
    owner: str
    tenant: str | None
    title: str
    fields: tuple[str, ...]
    sensitive: tuple[str, ...]
    model: str  # CamelCase singular
    service: str
    package: bool

    @classmethod
    def of(cls, spec: ScenarioSpec) -> "Names":
        r = spec.domain.resource
        return cls(
            s=r.singular,
            p=r.plural,
            id=f"{r.singular}_id",
            id_type=spec.style.id_type,
            owner=r.owner_field,
            tenant=r.tenant_field,
            title=r.title_field,
            fields=tuple(f.name for f in r.fields),
            sensitive=r.sensitive_fields,
            model=camel(r.singular),
            service=spec.domain.service,
            package=spec.style.layout == "package",
        )

    # store functions
    @property
    def get(self) -> str:
        return f"load_{self.s}"

    @property
    def list(self) -> str:
        return f"query_{self.p}"

    @property
    def search(self) -> str:
        return f"find_{self.p}"

    @property
    def create(self) -> str:
        return f"insert_{self.s}"

    @property
    def update(self) -> str:
        return f"save_{self.s}"

    @property
    def delete(self) -> str:
        return f"remove_{self.s}"

    @property
    def shared(self) -> str:
        return f"find_shared_{self.s}"

    @property
    def table(self) -> str:
        return self.p.upper()
