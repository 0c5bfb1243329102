"""The LLM author: a language model drafts scenarios from the same :class:`FactoryConfig` as the template author.

The template author covers the config's grid deterministically; an LLM can propose combinations and
whole new domains the grid does not hold. Whatever the model writes is untrusted text, so it goes
through the same pipeline as every other author, one stage at a time:

``backend`` (the model call) -> ``parse`` (find one JSON object in the reply) -> ``schema``
(:class:`SpecDraft` validation) -> ``config`` (only domains, bug classes, styles and traps the config
allows) -> ``expand`` (:func:`~envcore.factory.draft.expand`) -> ``compile``
(:func:`~envcore.factory.compiler.compile_spec`) -> ``check``
(:func:`~envcore.factory.check.check_scenario`).

The first stage that fails turns the attempt into a rejection with that stage's name and a one-line
reason; nothing the model writes can crash the author. Rejections are appended to an optional JSONL
log so prompts and models can be compared by where and why they fail.

Models are reached through the small :class:`LLMBackend` protocol. Two backends ship here:
:class:`OpenAICompatibleBackend` (any ``/chat/completions`` server: vLLM, Ollama, llama.cpp, hosted
APIs) and :class:`TransformersBackend` (a local ``transformers`` model folder, never a hub download).
``torch`` and ``transformers`` are imported only when a :class:`TransformersBackend` is created.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import httpx
from pydantic import ValidationError

from envcore.factory.bugs import BUG_CLASSES
from envcore.factory.check import CheckReport, check_scenario
from envcore.factory.codegen import FEATURES
from envcore.factory.compiler import compile_spec
from envcore.factory.config import FactoryConfig
from envcore.factory.domains import DOMAINS
from envcore.factory.draft import TRAP_TEXT, DraftError, SpecDraft, expand
from envcore.factory.template_author import draft_for
from envcore.runner.base import ProbeRunner
from envcore.scenario.bundle import Bundle
from envcore.scenario.spec import DomainSpec, ScenarioSpec, TrapKind
from envcore.textscan import closing_brace, fenced_blocks, without_tagged_blocks

Stage = Literal["backend", "parse", "schema", "config", "expand", "compile", "check"]
"""Where an attempt was rejected, in pipeline order."""

STAGES: tuple[Stage, ...] = get_args(Stage)

RAW_LOG_LIMIT = 2000
"""Characters of the model's reply kept in each reject-log line."""

REASON_LIMIT = 400
"""Characters kept of a rejection reason (always one line)."""

EXAMPLE_SEED = 0
"""Seed of the template author's draft shown to the model as the worked example."""


# --------------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------------


class LLMBackendError(RuntimeError):
    """The model could not be reached or answered with something that is not a completion."""


@runtime_checkable
class LLMBackend(Protocol):
    """Anything that turns a chat into one assistant reply."""

    def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float, seed: int | None
    ) -> str: ...


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


class OpenAICompatibleBackend:
    """POSTs to ``{base_url}/chat/completions`` of an OpenAI-compatible server.

    ``base_url`` includes the API prefix (``http://localhost:8000/v1`` for vLLM,
    ``http://localhost:11434/v1`` for Ollama, ``https://api.openai.com/v1``). The API key comes from
    ``api_key``, else ``A01_LLM_API_KEY``, else ``OPENAI_API_KEY``; local servers usually need none.
    With ``json_mode`` the request asks for ``response_format: json_object`` (only for servers that
    support it). Every failure, HTTP status, timeout or odd response body, raises :class:`LLMBackendError`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        *,
        json_mode: bool = False,
    ) -> None:
        if not base_url:
            raise LLMBackendError("no base URL given for the OpenAI-compatible backend")
        if not model:
            raise LLMBackendError("no model name given for the OpenAI-compatible backend")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.json_mode = json_mode
        key = api_key or _env("A01_LLM_API_KEY", "OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)

    @classmethod
    def from_env(cls, *, timeout: float = 120.0, json_mode: bool = False) -> "OpenAICompatibleBackend":
        """A backend configured by ``A01_LLM_BASE_URL`` and ``A01_LLM_MODEL`` (key as in ``__init__``)."""
        base_url, model = _env("A01_LLM_BASE_URL") or "", _env("A01_LLM_MODEL") or ""
        missing = [name for name, value in (("A01_LLM_BASE_URL", base_url), ("A01_LLM_MODEL", model)) if not value]
        if missing:
            raise LLMBackendError(f"set {' and '.join(missing)} to use the OpenAI-compatible backend")
        return cls(base_url, model, timeout=timeout, json_mode=json_mode)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "OpenAICompatibleBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float, seed: int | None
    ) -> str:
        url = f"{self.base_url}/chat/completions"
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if seed is not None:
            body["seed"] = seed
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        try:
            response = self._client.post(url, json=body)
        except httpx.TimeoutException:
            raise LLMBackendError(f"no answer from {url} within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise LLMBackendError(f"request to {url} failed: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            snippet = " ".join(response.text.split())[:300]
            raise LLMBackendError(f"{url} answered HTTP {response.status_code}: {snippet}")
        try:
            data = response.json()
        except ValueError:
            raise LLMBackendError(f"{url} answered with a body that is not JSON") from None
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise LLMBackendError(f"{url} answered without choices[0].message.content") from None
        if not isinstance(content, str):
            raise LLMBackendError(f"{url} answered with no text content (got {type(content).__name__})")
        return content


class TransformersBackend:
    """A local ``transformers`` causal LM and tokenizer loaded from ``model_path`` (never from a hub).

    The chat is rendered with the tokenizer's chat template; generation samples when ``temperature``
    is above zero (seeded without disturbing the global torch RNG) and is greedy otherwise. Only the
    newly generated tokens are decoded.
    """

    def __init__(self, model_path: str | Path, device: str = "cpu", *, dtype: str = "auto") -> None:
        path = Path(model_path)
        if not path.is_dir():
            raise LLMBackendError(f"model folder {path} does not exist (local folders only; nothing is downloaded)")
        try:
            import torch  # noqa: F401  (fail early with a clear message)
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise LLMBackendError(f"the local backend needs torch and transformers: {exc}") from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise LLMBackendError(f"cannot load a causal LM from {path}: {exc}") from None
        if not getattr(self.tokenizer, "chat_template", None):
            raise LLMBackendError(f"the tokenizer in {path} has no chat template")
        self.model.to(device)
        self.model.eval()
        self.device = device
        self.model_path = path

    def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float, seed: int | None
    ) -> str:
        import torch

        try:
            ids = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        except Exception as exc:  # a broken template is the model folder's fault, not the caller's
            raise LLMBackendError(f"chat template failed: {type(exc).__name__}: {exc}") from None
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        options: dict[str, Any] = {"max_new_tokens": max_tokens, "pad_token_id": pad}
        if temperature > 0:
            options.update(do_sample=True, temperature=temperature)
        else:
            options.update(do_sample=False)
        devices = [] if self.device == "cpu" else None
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                if seed is not None:
                    torch.manual_seed(seed)
                output = self.model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **options
                )
        except Exception as exc:
            raise LLMBackendError(f"generation failed: {type(exc).__name__}: {exc}") from None
        return self.tokenizer.decode(output[0, input_ids.shape[1]:], skip_special_tokens=True)


# --------------------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------------------

SYSTEM_PROMPT = """\
You design training scenarios for a security repair benchmark. Each scenario is a small FastAPI app \
with exactly one planted Broken Access Control bug (OWASP A01) that an agent must fix without breaking \
legitimate use. You do not write code: you write a *draft*, a JSON object that names the domain, the \
bug class and variant, the code style, the traps and the decoy routes. A generator builds the app, the \
users, the records and the tests from your draft and rejects drafts that break the rules.

Answer with exactly one JSON object that follows the schema you are given. No comments, no second \
object, no text that is not part of the JSON."""


def _positive(weights: dict[str, float]) -> list[str]:
    return [name for name, weight in sorted(weights.items()) if weight > 0]


def _suggested_bug_class(config: FactoryConfig, seed: int) -> str:
    """A bug class drawn by the config's weights, so many drafts follow the configured mix."""
    rng = random.Random(f"llm:{seed}")
    names = _positive(config.bug_classes)
    return rng.choices(names, weights=[config.bug_classes[n] for n in names])[0]


def _domain_lines(config: FactoryConfig) -> list[str]:
    lines = []
    for name in sorted(config.domains):
        domain = DOMAINS[name]
        r = domain.resource
        tenancy = f"multi-tenant by {r.tenant_field} ({domain.tenant_label})" if r.tenant_field else "single-tenant"
        fields = ", ".join(f"{f.name}{' (sensitive)' if f.sensitive else ''}" for f in r.fields)
        lines.append(
            f"- {name}: {domain.service}; resource {r.plural} owned by {r.owner_field}; {tenancy}; fields: {fields}"
        )
    return lines


def _bug_lines(config: FactoryConfig) -> list[str]:
    lines = []
    for name in _positive(config.bug_classes):
        bug = BUG_CLASSES[name]
        head = f"- {name} ({', '.join(bug.cwe)}; weight {config.bug_classes[name]:g}): {bug.title}"
        if bug.requires_tenant:
            head += " [every variant needs a multi-tenant domain]"
        lines.append(head)
        for variant in bug.variants:
            notes = []
            if variant.multi_site:
                notes.append(f"two sites: {' + '.join(variant.sites)}, so traps must include second_site")
            else:
                notes.append("one site, so traps must not include second_site")
            if variant.requires_tenant and not bug.requires_tenant:
                notes.append("needs a multi-tenant domain")
            if variant.features:
                notes.append(f"adds routes {', '.join(variant.features)}")
            lines.append(f"    - {variant.name}: {variant.description} ({'; '.join(notes)})")
    return lines


def _style_lines(config: FactoryConfig) -> list[str]:
    weights = config.code_styles
    return [
        f"- {axis}: {', '.join(_positive(getattr(weights, axis)))}" for axis in ("layout", "auth", "store", "id_type")
    ]


def _trap_lines(config: FactoryConfig) -> list[str]:
    lines = []
    for kind, text in TRAP_TEXT.items():
        rate = getattr(config.traps, kind)
        if kind == "second_site":
            rule = "required exactly when the variant has two sites"
        elif rate <= 0:
            rule = "not allowed by this config"
            if kind == "legacy_alias":
                rule += " (unless the variant adds the legacy_alias route)"
        else:
            rule = f"optional, planted in about {rate:.0%} of scenarios"
        lines.append(f"- {kind}: {text} ({rule})")
    return lines


def build_messages(config: FactoryConfig, seed: int) -> list[dict[str, str]]:
    """The system and user messages asking for one :class:`SpecDraft` allowed by ``config``."""
    example = draft_for(config, EXAMPLE_SEED).model_dump_json(indent=2)
    schema = json.dumps(SpecDraft.model_json_schema(), indent=1)
    decoys = (
        f"Optional decoy routes (each is correct code that widens the search; use about {config.decoy_rate:.0%} "
        f"of them): {', '.join(FEATURES)}"
        if config.decoy_rate > 0
        else "Decoy routes are not allowed by this config: leave decoys empty."
    )
    parts = [
        f"Draft scenario number {seed}.",
        "",
        "## Domains",
        "Use one of these by name, or invent a new business domain as a full inline object (schema "
        "DomainSpec below) with a new lower-case name, at least one sensitive text field, a non-sensitive "
        "text title_field, and at least two tenant_names when it has a tenant_field.",
        *_domain_lines(config),
        "",
        "## Bug classes and their variants",
        *_bug_lines(config),
        f"Suggested bug class for this draft (drawn by the weights above): {_suggested_bug_class(config, seed)}. "
        "Pick another listed one only if it does not fit your domain.",
        "",
        "## Code style axes (allowed values)",
        *_style_lines(config),
        "",
        "## Traps",
        *_trap_lines(config),
        "",
        "## Decoys",
        decoys,
        "",
        "## JSON schema of the draft",
        schema,
        "",
        "## Example of a valid draft",
        example,
        "",
        "Write a different draft for this scenario. Answer with exactly one JSON object.",
    ]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(parts)}]


# --------------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------------


class DraftParseError(ValueError):
    """The reply holds no parseable JSON object."""


MAX_CANDIDATES = 50
"""Opening braces tried before giving up on a reply (bounds the work on long junk)."""
SCAN_BUDGET_FACTOR = 4
"""Characters the brace search may scan, all candidates together, as a multiple of the reply's length."""


def _balanced_objects(text: str) -> list[str]:
    """``{...}`` spans in order of their opening brace, each closed by its own brace.

    A span that does not close is kept once (the error message then names the truncation); the
    search goes on from the next brace, so an object nested in surrounding junk is still found.
    """
    spans: list[str] = []
    kept_unclosed = False
    start, tries = text.find("{"), 0
    budget = SCAN_BUDGET_FACTOR * len(text)
    while start != -1 and tries < MAX_CANDIDATES and budget > 0:
        tries += 1
        end = closing_brace(text, start, limit=start + budget)
        budget -= (end if end != -1 else min(len(text), start + budget)) - start + 1
        if end == -1:
            if not kept_unclosed:
                spans.append(text[start:])
                kept_unclosed = True
        else:
            spans.append(text[start : end + 1])
        start = text.find("{", start + 1)
    return spans


def extract_json(text: str) -> dict[str, Any]:
    """The first JSON object in an LLM reply.

    Reasoning blocks (``<think>...</think>``) are dropped; fenced code blocks are tried first (those
    tagged ``json`` before others), then every balanced ``{...}`` span in order. Raises
    :class:`DraftParseError` naming the first JSON error met when no candidate parses.
    """
    cleaned = without_tagged_blocks(text, ("think",))
    fences = list(fenced_blocks(cleaned))
    candidates = [body for tag, body in fences if tag.lower() == "json"]
    candidates += [body for tag, body in fences if tag.lower() != "json"]
    candidates += _balanced_objects(cleaned)
    first_error: str | None = None
    for candidate in candidates:
        candidate = candidate.strip()
        if not candidate:
            continue
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or f"malformed JSON: {exc}"
            continue
        if isinstance(value, dict):
            return value
        first_error = first_error or f"expected a JSON object, got {type(value).__name__}"
    if first_error:
        raise DraftParseError(first_error)
    raise DraftParseError("no JSON object in the reply")


# --------------------------------------------------------------------------------------------------
# Config check
# --------------------------------------------------------------------------------------------------


def config_problems(draft: SpecDraft, config: FactoryConfig) -> list[str]:
    """Why ``draft`` is outside what ``config`` allows (empty when it is allowed).

    Built-in domains must be listed in the config; an inline domain must not reuse a built-in name
    unless it is that very domain and the config lists it (so held-out domains stay held out). The
    bug class needs a positive weight, every style value a positive weight, every optional trap a
    positive rate (``legacy_alias`` is also allowed when the variant itself adds that route), and
    decoys a positive decoy rate. Variant and tenancy rules are left to :func:`expand`.
    """
    problems = []
    if isinstance(draft.domain, DomainSpec):
        name = draft.domain.name
        if name in DOMAINS and not (draft.domain == DOMAINS[name] and name in config.domains):
            problems.append(f"inline domain reuses the built-in name {name!r}; give a new domain a new name")
    elif draft.domain not in config.domains:
        problems.append(f"domain {draft.domain!r} is not in the config; allowed: {sorted(config.domains)}")
    if config.bug_classes.get(draft.bug_class, 0) <= 0:
        problems.append(f"bug class {draft.bug_class!r} is not in the config; allowed: {_positive(config.bug_classes)}")
    for axis in ("layout", "auth", "store", "id_type"):
        value = getattr(draft.style, axis)
        if getattr(config.code_styles, axis).get(value, 0) <= 0:
            problems.append(f"code style {axis}={value!r} is not allowed by the config")
    bug = BUG_CLASSES.get(draft.bug_class)
    variant_features: tuple[str, ...] = ()
    if bug is not None:
        variant_features = next((v.features for v in bug.variants if v.name == draft.variant), ())
    kind: TrapKind
    for kind in dict.fromkeys(draft.traps):
        if kind == "second_site" or getattr(config.traps, kind) > 0:
            continue
        if kind == "legacy_alias" and "legacy_alias" in variant_features:
            continue
        problems.append(f"trap {kind!r} is not allowed by the config (rate 0)")
    if draft.decoys and config.decoy_rate <= 0:
        problems.append("decoy routes are not allowed by the config (decoy_rate 0)")
    return problems


# --------------------------------------------------------------------------------------------------
# Author
# --------------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= REASON_LIMIT else line[: REASON_LIMIT - 1] + "…"


def _schema_reason(exc: ValidationError) -> str:
    errors = exc.errors()
    parts = []
    for err in errors[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "draft"
        parts.append(f"{where}: {err['msg']}")
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more


@dataclass(frozen=True)
class DraftResult:
    """One attempt at a draft: accepted when ``stage`` is None, else rejected at ``stage``."""

    seed: int
    raw: str
    """The model's reply as received ("" when the backend failed)."""
    draft: SpecDraft | None = None
    stage: Stage | None = None
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.stage is None


@dataclass(frozen=True)
class AuthorResult(DraftResult):
    """One attempt at a whole scenario; accepted results carry the checked :class:`Bundle`."""

    spec: ScenarioSpec | None = None
    bundle: Bundle | None = None
    report: CheckReport | None = None


class LLMAuthor:
    """Drafts scenarios with an LLM and keeps only those that pass every stage.

    ``runner`` runs the scenario check (the check's default in-process runner when None);
    ``skip_checks`` names checks of :func:`check_scenario` to leave out. Every rejection is appended to
    ``reject_log`` as one JSON line ``{"seed", "stage", "reason", "raw"}`` when a path is given.
    """

    def __init__(
        self,
        config: FactoryConfig,
        backend: LLMBackend,
        *,
        runner: ProbeRunner | None = None,
        reject_log: Path | None = None,
        max_tokens: int = 1024,
        temperature: float = 0.7,
        skip_checks: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.backend = backend
        self.runner = runner
        self.reject_log = Path(reject_log) if reject_log is not None else None
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.skip_checks = skip_checks

    def messages(self, seed: int) -> list[dict[str, str]]:
        """The prompt sent for ``seed``."""
        return build_messages(self.config, seed)

    def draft(self, seed: int) -> DraftResult:
        """Ask the model for a draft and validate it against the schema and the config."""
        result = self._draft(seed)
        self._log(result)
        return result

    def author(self, seed: int) -> AuthorResult:
        """Draft, expand, compile and check one scenario."""
        result = self._author(seed)
        self._log(result)
        return result

    def _draft(self, seed: int) -> DraftResult:
        try:
            raw = self.backend.complete(
                self.messages(seed), max_tokens=self.max_tokens, temperature=self.temperature, seed=seed
            )
        except Exception as exc:  # any backend failure is infrastructure, never the draft's fault
            return DraftResult(seed, "", stage="backend", reason=_one_line(f"{type(exc).__name__}: {exc}"))
        if not isinstance(raw, str):
            reason = f"backend returned {type(raw).__name__}, not text"
            return DraftResult(seed, repr(raw), stage="backend", reason=reason)
        try:
            data = extract_json(raw)
        except DraftParseError as exc:
            return DraftResult(seed, raw, stage="parse", reason=_one_line(str(exc)))
        try:
            draft = SpecDraft.model_validate(data)
        except ValidationError as exc:
            return DraftResult(seed, raw, stage="schema", reason=_one_line(_schema_reason(exc)))
        problems = config_problems(draft, self.config)
        if problems:
            return DraftResult(seed, raw, draft, stage="config", reason=_one_line("; ".join(problems)))
        return DraftResult(seed, raw, draft)

    def _author(self, seed: int) -> AuthorResult:
        drafted = self._draft(seed)
        base = {"seed": seed, "raw": drafted.raw, "draft": drafted.draft}
        if not drafted.accepted or drafted.draft is None:
            return AuthorResult(**base, stage=drafted.stage, reason=drafted.reason)
        try:
            spec = expand(drafted.draft, seed, author="llm")
        except DraftError as exc:
            return AuthorResult(**base, stage="expand", reason=_one_line(str(exc)))
        except Exception as exc:  # an odd inline domain can break the draw in ways DraftError misses
            return AuthorResult(**base, stage="expand", reason=_one_line(f"{type(exc).__name__}: {exc}"))
        try:
            bundle = compile_spec(spec)
        except Exception as exc:
            return AuthorResult(**base, spec=spec, stage="compile", reason=_one_line(f"{type(exc).__name__}: {exc}"))
        try:
            report = check_scenario(bundle, self.runner, fail_fast=True, skip=self.skip_checks)
        except Exception as exc:
            return AuthorResult(
                **base, spec=spec, bundle=bundle, stage="check", reason=_one_line(f"{type(exc).__name__}: {exc}")
            )
        if not report.ok:
            more = f" (+{len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
            return AuthorResult(
                **base, spec=spec, bundle=bundle, report=report, stage="check",
                reason=_one_line(report.problems[0] + more),
            )
        return AuthorResult(**base, spec=spec, bundle=bundle, report=report)

    def _log(self, result: DraftResult) -> None:
        if result.accepted or self.reject_log is None:
            return
        entry = {"seed": result.seed, "stage": result.stage, "reason": result.reason, "raw": result.raw[:RAW_LOG_LIMIT]}
        self.reject_log.parent.mkdir(parents=True, exist_ok=True)
        with self.reject_log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------
