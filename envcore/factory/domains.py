"""The built-in domain catalog: the businesses generated apps pretend to serve.

Each domain is plain data (a :class:`DomainSpec`): the resource, its fields (with at least one
sensitive text field), the owner and tenant field names used in the code, and vocabulary for values.
Field and owner names differ per domain on purpose, so a fix learned on ``notes.author_id`` has to be
re-derived on ``appointments.patient_id``. The LLM author can propose domains outside this table;
they go through the same validation.
"""

from __future__ import annotations

from envcore.scenario.spec import DomainSpec, FieldSpec, ResourceSpec


def _f(name: str, kind: str = "text", sensitive: bool = False, words: tuple[str, ...] = ()) -> FieldSpec:
    return FieldSpec(name=name, kind=kind, sensitive=sensitive, words=words)


DOMAINS: dict[str, DomainSpec] = {
    d.name: d
    for d in [
        DomainSpec(
            name="clinic",
            service="Clinic appointments API",
            tenant_label="clinic",
            tenant_names=("Northside Clinic", "Harbor Health", "Elm Street Practice", "Riverbend Care"),
            resource=ResourceSpec(
                singular="appointment",
                plural="appointments",
                owner_field="patient_id",
                tenant_field="clinic_id",
                title_field="reason",
                fields=(
                    _f("reason", words=("Annual checkup", "Follow-up", "Vaccination", "Blood test", "Physio")),
                    _f("scheduled_for", "date"),
                    _f("doctor", words=("Dr. Okafor", "Dr. Lindqvist", "Dr. Haddad", "Dr. Moreau")),
                    _f("diagnosis", sensitive=True, words=("Hypertension", "Asthma", "Type 2 diabetes", "Migraine")),
                ),
            ),
        ),
        DomainSpec(
            name="invoices",
            service="Invoicing API",
            tenant_label="organisation",
            tenant_names=("Acme Ltd", "Globex GmbH", "Initech", "Umbrella Foods"),
            resource=ResourceSpec(
                singular="invoice",
                plural="invoices",
                owner_field="customer_id",
                tenant_field="org_id",
                title_field="number",
                fields=(
                    _f("number", words=("INV", "BILL", "INV-EU", "INV-US")),
                    _f("amount", "money"),
                    _f("due_date", "date"),
                    _f("bank_account", sensitive=True, words=("IBAN DE44", "IBAN GB29", "IBAN FR76", "IBAN NL91")),
                ),
            ),
        ),
        DomainSpec(
            name="notes",
            service="Personal notes API",
            resource=ResourceSpec(
                singular="note",
                plural="notes",
                owner_field="author_id",
                title_field="title",
                fields=(
                    _f("title", words=("Groceries", "Trip plan", "Book ideas", "Meeting notes", "Gift list")),
                    _f("body", words=("remember to call", "draft outline", "check prices", "pack chargers")),
                    _f("pinned", "bool"),
                    _f("private_reminder", sensitive=True, words=("PIN hint", "door code", "therapy session", "loan")),
                ),
            ),
        ),
        DomainSpec(
            name="projects",
            service="Project tracker API",
            tenant_label="workspace",
            tenant_names=("Blue Team", "Orion Labs", "Kestrel Studio", "Pinecone Co"),
            resource=ResourceSpec(
                singular="project",
                plural="projects",
                owner_field="owner_id",
                tenant_field="workspace_id",
                title_field="name",
                fields=(
                    _f("name", words=("Website relaunch", "Data migration", "Mobile app", "Q3 audit")),
                    _f("status", words=("planning", "active", "blocked", "done")),
                    _f("budget", "money"),
                    _f("client_contract", sensitive=True, words=("NDA clause", "rate card", "penalty terms")),
                ),
            ),
        ),
        DomainSpec(
            name="tickets",
            service="Support ticket API",
            tenant_label="organisation",
            tenant_names=("Contoso", "Fabrikam", "Northwind", "Tailspin"),
            resource=ResourceSpec(
                singular="ticket",
                plural="tickets",
                owner_field="reporter_id",
                tenant_field="org_id",
                title_field="subject",
                fields=(
                    _f("subject", words=("Login fails", "Refund request", "Broken export", "Slow dashboard")),
                    _f("priority", "int"),
                    _f("description", words=("since yesterday", "after update", "on mobile only")),
                    _f("customer_phone", sensitive=True, words=("+44 20", "+1 415", "+49 30", "+33 1")),
                ),
            ),
        ),
        DomainSpec(
            name="documents",
            service="Document storage API",
            tenant_label="team",
            tenant_names=("Legal", "Finance", "Design", "Research"),
            resource=ResourceSpec(
                singular="document",
                plural="documents",
                owner_field="owner_id",
                tenant_field="team_id",
                title_field="filename",
                fields=(
                    _f("filename", words=("contract", "roadmap", "payroll", "design-review", "minutes")),
                    _f("size_kb", "int"),
                    _f("folder", words=("inbox", "archive", "shared", "drafts")),
                    _f("access_key", sensitive=True, words=("dk", "key", "akey")),
                ),
            ),
        ),
        DomainSpec(
            name="hr",
            service="HR reviews API",
            tenant_label="company",
            tenant_names=("Vandelay Industries", "Stark Freight", "Wonka Works", "Soylent Corp"),
            resource=ResourceSpec(
                singular="review",
                plural="reviews",
                owner_field="employee_id",
                tenant_field="company_id",
                title_field="period",
                fields=(
                    _f("period", words=("2025-H1", "2025-H2", "2026-H1", "Probation")),
                    _f("rating", "int"),
                    _f("summary", words=("meets expectations", "strong delivery", "needs support")),
                    _f("salary_band", sensitive=True, words=("Band L4", "Band L5", "Band M1", "Band S2")),
                ),
            ),
        ),
        DomainSpec(
            name="orders",
            service="Shop orders API",
            resource=ResourceSpec(
                singular="order",
                plural="orders",
                owner_field="customer_id",
                title_field="item",
                fields=(
                    _f("item", words=("Desk lamp", "Headphones", "Coffee grinder", "Backpack", "Monitor arm")),
                    _f("quantity", "int"),
                    _f("total", "money"),
                    _f("shipping_address", sensitive=True, words=("12 Baker St", "9 Rue Lafayette", "77 Elm Ave")),
                ),
            ),
        ),
    ]
}


def get_domain(name: str) -> DomainSpec:
    try:
        return DOMAINS[name]
    except KeyError:
        raise KeyError(f"unknown domain {name!r}; known: {sorted(DOMAINS)}") from None
