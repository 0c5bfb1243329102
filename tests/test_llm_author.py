"""Tests of the LLM author: every pipeline stage's rejection, both backends, and the reject log.

The model is replaced by canned replies (a fake backend, a loopback HTTP server speaking the
OpenAI chat-completions shape) or by a tiny randomly initialised Llama built in a temp folder, so
the suite needs no network and no downloaded weights.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from envcore.cli import main as cli_main
from envcore.factory.config import FactoryConfig
from envcore.factory.llm_author import (
    STAGES,
    LLMAuthor,
    LLMBackend,
    LLMBackendError,
    OpenAICompatibleBackend,
    build_messages,
    config_problems,
    extract_json,
)
from envcore.factory.draft import SpecDraft
from envcore.factory.template_author import draft_for


class FakeBackend:
    """Returns canned replies in turn and records what it was asked."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float, seed: int | None
    ) -> str:
        self.calls.append({"messages": messages, "max_tokens": max_tokens, "temperature": temperature, "seed": seed})
        return self.replies[min(len(self.calls), len(self.replies)) - 1]


class BrokenBackend:
    def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float, seed: int | None
    ) -> str:
        raise ConnectionRefusedError("connection refused")


def valid_reply(config: FactoryConfig) -> str:
    draft = draft_for(config, 3).model_dump_json(indent=2)
    return f"Sure! Here is a scenario that fits the config.\n\n```json\n{draft}\n```\n\nWant another one?"


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --------------------------------------------------------------------------------------------------
# Pipeline stages with a fake backend
# --------------------------------------------------------------------------------------------------


def test_valid_draft_in_prose_and_fence_is_accepted_and_checked(config, runner, tmp_path):
    log = tmp_path / "rejects.jsonl"
    backend = FakeBackend(valid_reply(config))
    result = LLMAuthor(config, backend, runner=runner, reject_log=log).author(3)
    assert result.accepted, result.reason
    assert result.stage is None and result.reason is None
    assert result.draft == draft_for(config, 3)
    assert result.spec is not None and result.spec.author == "llm"
    assert result.bundle is not None and result.bundle.scenario_id
    assert result.report is not None and result.report.ok
    assert not log.exists()
    call = backend.calls[0]
    assert call["seed"] == 3 and [m["role"] for m in call["messages"]] == ["system", "user"]


def test_fake_backend_satisfies_protocol():
    assert isinstance(FakeBackend("x"), LLMBackend)


@pytest.mark.parametrize(
    ("reply", "stage", "reason_part"),
    [
        ('```json\n{"domain": "notes", "bug_class": "idor_read",, }\n```', "parse", "malformed JSON"),
        ("I cannot help with that.", "parse", "no JSON object"),
        (
            '{"domain": "notes", "bug_class": "idor_read", "variant": "missing_check", "colour": "red"}',
            "schema",
            "colour",
        ),
        ('{"domain": "notes", "bug_class": "idor_read", "variant": "missing_check", "traps": 5}', "schema", "traps"),
        ('{"domain": "notes", "bug_class": "tenant_leak", "variant": "tenant_header"}', "expand", "multi-tenant"),
        ('{"domain": "notes", "bug_class": "idor_read", "variant": "no_such_variant"}', "expand", "no_such_variant"),
        (
            '{"domain": "notes", "bug_class": "idor_read", "variant": "missing_check_with_alias"}',
            "expand",
            "second_site",
        ),
    ],
)
def test_rejections_are_staged_and_logged(config, runner, tmp_path, reply, stage, reason_part):
    log = tmp_path / "rejects.jsonl"
    result = LLMAuthor(config, FakeBackend(reply), runner=runner, reject_log=log).author(11)
    assert not result.accepted
    assert result.stage == stage
    assert reason_part in (result.reason or "")
    assert "\n" not in (result.reason or "")
    assert result.bundle is None
    (entry,) = log_lines(log)
    assert entry == {"seed": 11, "stage": stage, "reason": result.reason, "raw": reply}


def test_bug_class_outside_the_config_is_a_config_rejection(runner, tmp_path):
    config = FactoryConfig(bug_classes={"idor_read": 1.0, "list_leak": 1.0})
    log = tmp_path / "rejects.jsonl"
    reply = '{"domain": "notes", "bug_class": "open_redirect", "variant": "unvalidated_next"}'
    result = LLMAuthor(config, FakeBackend(reply), runner=runner, reject_log=log).author(4)
    assert result.stage == "config"
    assert "open_redirect" in (result.reason or "")
    assert log_lines(log)[0]["stage"] == "config"


def test_config_rules():
    config = FactoryConfig(
        domains=["notes", "clinic"],
        code_styles={"store": {"dict": 1.0, "sqlite": 0.0}},
        traps={"public_route": 0.0},
        decoy_rate=0.0,
    )
    ok = SpecDraft(domain="notes", bug_class="idor_read", variant="missing_check")
    assert config_problems(ok, config) == []
    bad = SpecDraft(
        domain="hr",
        bug_class="idor_read",
        variant="missing_check",
        style={"store": "sqlite"},
        traps=("public_route",),
        decoys=("search",),
    )
    problems = " | ".join(config_problems(bad, config))
    for part in ("'hr'", "store='sqlite'", "public_route", "decoy"):
        assert part in problems
    # A new inline domain is allowed; an inline copy of a held-out built-in under its own name is not.
    from envcore.factory.domains import DOMAINS

    new = DOMAINS["notes"].model_copy(update={"name": "recipes", "service": "Recipe box API"})
    assert config_problems(ok.model_copy(update={"domain": new}), config) == []
    assert config_problems(ok.model_copy(update={"domain": DOMAINS["hr"]}), config)
    assert config_problems(ok.model_copy(update={"domain": DOMAINS["notes"]}), config) == []


def test_inline_domain_is_authored(config, runner):
    domain = {
        "name": "recipes",
        "service": "Recipe box API",
        "tenant_label": "kitchen",
        "tenant_names": ["Blue Door Bistro", "Corner Cafe", "Harbour Grill"],
        "resource": {
            "singular": "recipe",
            "plural": "recipes",
            "owner_field": "chef_id",
            "tenant_field": "kitchen_id",
            "title_field": "dish",
            "fields": [
                {"name": "dish", "words": ["Soup", "Risotto", "Tart"]},
                {"name": "servings", "kind": "int"},
                {"name": "secret_ingredient", "sensitive": True, "words": ["saffron", "miso", "yuzu"]},
            ],
        },
    }
    reply = json.dumps({"domain": domain, "bug_class": "tenant_leak", "variant": "tenant_header"})
    result = LLMAuthor(config, FakeBackend(reply), runner=runner).author(5)
    assert result.accepted, result.reason
    assert result.bundle is not None and result.bundle.domain == "recipes"


def test_backend_exception_is_a_backend_rejection(config, tmp_path):
    log = tmp_path / "sub" / "rejects.jsonl"
    result = LLMAuthor(config, BrokenBackend(), reject_log=log).draft(2)
    assert result.stage == "backend" and "connection refused" in (result.reason or "")
    assert log_lines(log) == [{"seed": 2, "stage": "backend", "reason": result.reason, "raw": ""}]


def test_draft_stops_before_expand(config, tmp_path):
    reply = '{"domain": "notes", "bug_class": "tenant_leak", "variant": "tenant_header"}'
    result = LLMAuthor(config, FakeBackend(reply), reject_log=tmp_path / "r.jsonl").draft(1)
    assert result.accepted and result.draft is not None and result.draft.bug_class == "tenant_leak"
    assert not (tmp_path / "r.jsonl").exists()


def test_raw_text_in_log_is_truncated(config, tmp_path):
    log = tmp_path / "rejects.jsonl"
    LLMAuthor(config, FakeBackend("x" * 5000), reject_log=log).draft(0)
    assert len(log_lines(log)[0]["raw"]) == 2000


def test_extract_json_variants():
    assert extract_json('prefix {"a": {"b": "}"}} suffix {"c": 1}') == {"a": {"b": "}"}}
    assert extract_json('```\n{"a": 1}\n```') == {"a": 1}
    assert extract_json('<think>maybe {"a": 0}</think>\n{"a": 2}') == {"a": 2}
    assert extract_json('junk { not json {"a": 3} tail') == {"a": 3}
    with pytest.raises(ValueError, match="malformed"):
        extract_json('{"a": 1')
    with pytest.raises(ValueError):
        extract_json("[1, 2, 3]")
    with pytest.raises(ValueError):
        extract_json("{" * 10_000)


def test_prompt_covers_the_config():
    config = FactoryConfig(domains=["notes", "clinic"], bug_classes={"idor_read": 2.0, "tenant_leak": 1.0})
    system, user = build_messages(config, 9)
    text = user["content"]
    assert system["role"] == "system" and "exactly one JSON object" in system["content"]
    expected = (
        "notes", "clinic", "idor_read", "missing_check_with_alias", "tenant_leak", "needs a multi-tenant domain",
        "second_site", "sqlite", "decorator", "public_route", '"SpecDraft"', "## Example of a valid draft",
    )
    for part in expected:
        assert part in text, part
    listed = text.split("## JSON schema", 1)[0]
    assert "open_redirect" not in listed and "invoices" not in listed
    example = text.split("## Example of a valid draft\n", 1)[1].split("\n\n", 1)[0]
    SpecDraft.model_validate_json(example)
    assert set(STAGES) == {"backend", "parse", "schema", "config", "expand", "compile", "check"}


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible backend against a loopback server
# --------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        server: ChatServer = self.server  # type: ignore[assignment]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if server.delay:
            time.sleep(server.delay)
        status, payload = server.status, server.payload
        data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.payload: Any = {}
        self.delay = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reply_with(self, content: str) -> None:
        self.status = 200
        self.payload = {"id": "c1", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ]}


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_openai_backend_good_completion(config, runner, chat_server, tmp_path):
    chat_server.reply_with(valid_reply(config))
    with OpenAICompatibleBackend(chat_server.base_url + "/", "tiny-model", api_key="sk-test") as backend:
        result = LLMAuthor(config, backend, runner=runner, reject_log=tmp_path / "r.jsonl", max_tokens=256).author(3)
    assert result.accepted, result.reason
    assert result.report is not None and result.report.ok
    (request,) = chat_server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer sk-test"
    body = request["body"]
    assert body["model"] == "tiny-model" and body["max_tokens"] == 256 and body["seed"] == 3
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_openai_backend_http_500_is_a_backend_rejection(config, chat_server, tmp_path):
    chat_server.status, chat_server.payload = 500, {"error": {"message": "model crashed"}}
    log = tmp_path / "r.jsonl"
    with OpenAICompatibleBackend(chat_server.base_url, "tiny-model") as backend:
        result = LLMAuthor(config, backend, reject_log=log).author(3)
    assert result.stage == "backend"
    assert "HTTP 500" in (result.reason or "") and "model crashed" in (result.reason or "")
    assert log_lines(log)[0]["stage"] == "backend"


def test_openai_backend_errors(chat_server, monkeypatch):
    messages = [{"role": "user", "content": "hi"}]
    chat_server.payload = {"choices": []}
    with OpenAICompatibleBackend(chat_server.base_url, "m") as backend:
        with pytest.raises(LLMBackendError, match="choices"):
            backend.complete(messages, max_tokens=8, temperature=0, seed=None)
        chat_server.payload = b"<html>not json</html>"
        with pytest.raises(LLMBackendError, match="not JSON"):
            backend.complete(messages, max_tokens=8, temperature=0, seed=None)
    chat_server.reply_with("late")
    chat_server.delay = 0.5
    with OpenAICompatibleBackend(chat_server.base_url, "m", timeout=0.1) as backend:
        with pytest.raises(LLMBackendError, match="within"):
            backend.complete(messages, max_tokens=8, temperature=0, seed=None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    with OpenAICompatibleBackend(f"http://127.0.0.1:{closed_port}/v1", "m", timeout=2) as backend:
        with pytest.raises(LLMBackendError, match="failed"):
            backend.complete(messages, max_tokens=8, temperature=0, seed=None)
    # Key and endpoint from the environment.
    monkeypatch.delenv("A01_LLM_BASE_URL", raising=False)
    with pytest.raises(LLMBackendError, match="A01_LLM_BASE_URL"):
        OpenAICompatibleBackend.from_env()
    monkeypatch.setenv("A01_LLM_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("A01_LLM_MODEL", "env-model")
    monkeypatch.delenv("A01_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    chat_server.delay = 0
    with OpenAICompatibleBackend.from_env() as backend:
        assert backend.complete(messages, max_tokens=8, temperature=0, seed=None) == "late"
    assert chat_server.requests[-1]["auth"] == "Bearer sk-fallback"
    assert chat_server.requests[-1]["body"]["model"] == "env-model"
    assert "seed" not in chat_server.requests[-1]["body"]


def test_factory_build_with_the_llm_author_against_loopback_server(config, chat_server, monkeypatch, tmp_path, capsys):
    chat_server.reply_with("no json here")
    monkeypatch.setenv("A01_LLM_BASE_URL", chat_server.base_url)
    monkeypatch.setenv("A01_LLM_MODEL", "m")
    out_dir = tmp_path / "v1"
    assert cli_main(["factory", "build", "--author", "llm", "--n", "2", "--out", str(out_dir)]) == 0
    assert "0 verified of 2 seeds (100.0% rejected)" in capsys.readouterr().out
    rejects = log_lines(out_dir / "rejects.jsonl")
    assert [(e["seed"], e["stage"]) for e in rejects] == [(0, "parse"), (1, "parse")]


# --------------------------------------------------------------------------------------------------
# A tiny local transformers model
# --------------------------------------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("tiny-llama")
    specials = ["<unk>", "<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [
        'domain bug_class variant style traps decoys { } [ ] : , "',
        "notes clinic invoices idor_read list_leak tenant_leak missing_check",
        "Answer with exactly one JSON object that follows the schema",
    ]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=specials))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        additional_special_tokens=specials[4:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    model_config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    transformers.LlamaForCausalLM(model_config).save_pretrained(folder)
    return folder


def test_tiny_local_model_garbage_is_rejected(config, tiny_model, tmp_path):
    from envcore.factory.llm_author import TransformersBackend

    backend = TransformersBackend(tiny_model)
    log = tmp_path / "rejects.jsonl"
    author = LLMAuthor(config, backend, reject_log=log, max_tokens=32, temperature=1.0)
    result = author.author(7)
    assert not result.accepted
    assert result.stage in ("parse", "schema"), result.reason
    assert result.raw  # the model did generate text; it just is not a draft
    (entry,) = log_lines(log)
    assert entry["stage"] == result.stage and entry["seed"] == 7 and entry["raw"] == result.raw[:2000]
    # Seeded sampling is reproducible and leaves the global torch RNG alone.
    import torch

    state = torch.random.get_rng_state()
    again = backend.complete(author.messages(7), max_tokens=32, temperature=1.0, seed=7)
    assert again == result.raw
    assert torch.equal(state, torch.random.get_rng_state())


def test_transformers_backend_refuses_missing_folder(tmp_path):
    from envcore.factory.llm_author import TransformersBackend

    with pytest.raises(LLMBackendError, match="does not exist"):
        TransformersBackend(tmp_path / "nowhere")
