"""Identifiers the generated code uses, derived once from a spec.

Templates never spell a domain word themselves: they ask :class:`Names` for ``get_note`` or
``appointment_id``, so one template serves every domain. Nor do they spell how a row is read: the
compact stores hand out dicts (``record["owner_id"]``), the ORM stores mapped objects
(``note.owner_id``), and :meth:`Names.attr` writes whichever the style has, so a bug class's flaw is
written once for every store.
"""

from __future__ import annotations

from dataclasses import dataclass

from envcore.scenario.spec import ScenarioSpec

PY_TYPES = {"text": "str", "int": "int", "money": "float", "date": "str", "bool": "bool", "email": "str"}
SQL_TYPES = {"text": "TEXT", "int": "INTEGER", "money": "REAL", "date": "TEXT", "bool": "INTEGER", "email": "TEXT"}
ORM_STORES = ("sqlalchemy", "sqlmodel")
"""Stores whose rows are mapped objects in a database session (``db``), not dicts."""
ROUTER_LAYOUTS = ("routers", "routers_flat")
"""Layouts of a multi-module project whose configuration is a ``pydantic-settings`` object."""
DEPENDENCY_AUTH = ("depends", "oauth2_jwt", "api_key", "cookie")
"""Auth styles whose handlers receive the caller from a ``Depends`` parameter."""


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
    store: str = "dict"
    auth: str = "depends"
    layout: str = "single_file"

    @classmethod
    def of(cls, spec: ScenarioSpec) -> Names:
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
            store=spec.style.store,
            auth=spec.style.auth,
            layout=spec.style.layout,
        )

    # how the code reads rows and settings
    @property
    def orm(self) -> bool:
        """Rows are mapped objects of a database session ``db`` (else plain dicts)."""
        return self.store in ORM_STORES

    @property
    def settings(self) -> bool:
        """Configuration is a ``pydantic-settings`` object named ``settings`` (else module constants)."""
        return self.layout in ROUTER_LAYOUTS

    @property
    def rec(self) -> str:
        """The variable a handler or a permission helper holds the record in."""
        return self.s if self.orm else "record"

    def attr(self, obj: str, field: str) -> str:
        """``obj``'s ``field`` as the store's rows spell it: ``user["role"]`` or ``user.role``."""
        return f"{obj}.{field}" if self.orm else f'{obj}["{field}"]'

    def cfg(self, constant: str) -> str:
        """A configuration value: the constant ``UPLOAD_DIR``, or ``settings.upload_dir``."""
        return f"settings.{constant.lower()}" if self.settings else constant

    def call(self, function: str, *args: str) -> str:
        """A call of a store function; ORM store functions take the session first."""
        return f"{function}({', '.join((('db',) if self.orm else ()) + args)})"

    def rows(self, statement: str) -> str:
        """Every row an ORM ``select`` statement finds, as the store's session API spells it."""
        return f"db.exec({statement}).all()" if self.store == "sqlmodel" else f"db.scalars({statement}).all()"

    def first(self, statement: str) -> str:
        """The first row an ORM ``select`` statement finds, or None."""
        return f"db.exec({statement}).first()" if self.store == "sqlmodel" else f"db.scalar({statement})"

    def records_query(self, *conditions: str, var: str | None = None) -> str:
        """An ORM handler line loading the records that match ``conditions``, in id order."""
        where = f".where({', '.join(conditions)})" if conditions else ""
        return f"{var or self.p} = {self.rows(f'select({self.model}){where}.order_by({self.model}.id)')}"

    @property
    def present_records(self) -> str:
        """The line a listing handler returns its records with, each as the caller may see it."""
        if self.orm:
            return f"return [present(user, {self.s}) for {self.s} in {self.p}]"
        return "return [present(user, r) for r in records]"

    @property
    def user_class(self) -> str:
        """The annotation of the caller: the ``User`` model, or ``dict``."""
        return "User" if self.orm else "dict"

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
