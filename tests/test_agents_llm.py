"""Language-model agents: prompts from the tool registry, the chat kept within its budget, a local
tiny model (with and without a LoRA adapter) driving real episodes, and an OpenAI-compatible endpoint
(a fake one served here) repairing a scenario through the real environment server, retries and
refusals included."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envcore.agents.catalog import AGENTS, LLMOptions, agent_factory
from envcore.agents.llm import EndpointError, OpenAIChatAgent, TransformersAgent
from envcore.agents.play import play_episode
from envcore.agents.prompts import Conversation, system_prompt, tool_docs
from envcore.agents.rollouts import EpisodeSpec, run_rollouts
from envcore.agents.tiny_model import build_tiny_model
from envcore.cache import ScenarioCache
from envcore.env.actions import A01Observation
from envcore.env.environment import A01Environment, Runtime
from envcore.env.episode_log import read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app
from envcore.env.tools import TOOLS
from tests.test_env_server import serve_in_thread
from tests.test_eval import run_cli

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "f7b3b2e281889b1c"  # idor_write, tier 1, test split


@pytest.fixture(scope="module")
def env(shipped, sandbox):
    environment = A01Environment(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox))
    yield environment
    environment.close()


# -- prompts -----------------------------------------------------------------------------------------

def test_the_system_prompt_documents_every_tool_from_the_registry():
    docs = tool_docs()
    for name, model in TOOLS.items():
        assert f"- {name}(" in docs
        for field, info in model.model_fields.items():
            if field not in ("tool", "metadata"):
                assert (f"{field}: " if info.is_required() else f"{field}?: ") in docs, (name, field)
    assert "http_request(method?: str, path: str, as_user?: str" in docs
    assert '{"tool": "read_file", "path": "app/main.py"}' in system_prompt()


def obs(text, steps_left=10):
    return A01Observation(text=text, steps_left=steps_left)


def test_a_long_conversation_is_fitted_keeping_the_system_the_task_and_the_latest_output():
    chat = Conversation(max_chars=20_000, old_output_chars=500)
    chat.start(obs("TASK " + "policy " * 300))
    for turn in range(30):
        chat.add_reply(f'{{"tool": "read_file", "path": "f{turn}.py"}}')
        chat.add_observation(obs(f"OUTPUT {turn} " + "x" * 3_000))
    fitted = chat.fitted()
    assert sum(len(m["content"]) for m in fitted) <= 20_000
    assert fitted[0]["role"] == "system" and fitted[1]["content"].startswith("TASK")
    assert fitted[-1]["content"].startswith("OUTPUT 29") and len(fitted[-1]["content"]) > 3_000  # latest in full
    assert "characters of an older output cut" in fitted[-3]["content"]
    assert [m["role"] for m in fitted[2:]] == ["assistant", "user"] * ((len(fitted) - 2) // 2)
    assert len(chat.messages) == 62  # the history itself is kept whole
    budget = len(system_prompt()) + 1_500
    tight = chat.fitted(budget)
    assert sum(len(m["content"]) for m in tight) <= budget and tight[0]["content"] == system_prompt()
    assert "cut to fit" in tight[-1]["content"] and "cut to fit" in tight[1]["content"]
    assert tight[1]["content"].startswith("TASK") and tight[-1]["content"].startswith("OUTPUT 29")


# -- the tiny local model ----------------------------------------------------------------------------

def test_the_tiny_model_is_built_locally_and_reproducibly(tiny_model, tmp_path):
    again = build_tiny_model(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert hashlib.sha256((tiny_model / name).read_bytes()).digest() == hashlib.sha256((again / name).read_bytes()).digest()
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()


def test_a_local_model_plays_an_episode_every_reply_read_by_the_environment(env, tiny_model):
    agent = TransformersAgent(str(tiny_model), max_new_tokens=16)
    final = play_episode(env, agent, seed=3, scenario=SCENARIO, max_steps=4)
    assert final.done and final.reward is not None and -1 <= final.reward <= 1
    actions = [r.action for r in env.episode.records]
    assert len(actions) == 4 and all(a["tool"] == "reply" for a in actions)
    assert [a["text"] for a in actions] == [m["content"] for m in agent.conversation.messages if m["role"] == "assistant"]
    assert agent.usage["calls"] == 4 and agent.usage["completion_tokens"] <= 4 * 16
    # noise is a format error each step, an invalid action like any other
    assert env.episode.invalid_actions == 4 and final.reward_breakdown["resolution"] == "no"


def test_a_local_model_keeps_its_prompt_within_the_context(env, tiny_model):
    agent = TransformersAgent(str(tiny_model), max_new_tokens=8, context_tokens=2_500)
    agent.begin(env.reset(seed=0, scenario=SCENARIO), seed=0)
    agent.act(env.step({"tool": "list_files"}))
    for _ in range(3):  # whole files: far more than 2,500 tokens
        agent.act(env.step({"tool": "read_file", "path": "app.py"}))
    agent.conversation.add_observation(env.step({"tool": "read_file", "path": "app.py"}))  # what act() does next
    assert agent.conversation.size() > 3 * 2_500
    ids = agent.prompt_ids(agent.conversation.fitted())
    assert len(ids) <= 2_500 - 8
    text = agent.loaded.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nYou are a security engineer") and "Access policy" in text
    assert text.endswith("[25 steps left]<|im_end|>\n<|im_start|>assistant\n") and "cut to fit the context" in text


def test_sampling_is_seeded_per_episode(env, tiny_model):
    def replies(seed):
        agent = TransformersAgent(str(tiny_model), max_new_tokens=12, temperature=1.0)
        play_episode(env, agent, seed=seed, scenario=SCENARIO, max_steps=2)
        return [m["content"] for m in agent.conversation.messages if m["role"] == "assistant"]

    assert replies(5) == replies(5)
    assert replies(5) != replies(6)


def test_a_lora_adapter_changes_the_model_and_names_the_agent(tiny_model, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model)

    plain = TransformersAgent(str(tiny_model), max_new_tokens=4)
    adapted = TransformersAgent(adapter=str(tmp_path / "adapter"), max_new_tokens=4)  # base from the adapter
    assert adapted.name == "llm:" + tiny_model.name + "+adapter"
    ids = torch.tensor([plain.prompt_ids([{"role": "user", "content": "hello"}])])
    with torch.no_grad():
        a = plain.loaded.model(input_ids=ids).logits
        b = adapted.loaded.model(input_ids=ids).logits
    assert not torch.allclose(a, b)
    with pytest.raises(ValueError, match="not a LoRA adapter"):
        TransformersAgent(adapter=str(tmp_path))


@pytest.mark.slow  # an eval run; the tiny model plays in process and an endpoint through the server by default
def test_eval_with_the_tiny_model_through_the_real_server(tiny_model, sandbox, tmp_path):
    # the newest shipped cache: the one `eval` picks its scenarios from
    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(None)), sandbox=sandbox, max_steps=3)
    with serve_in_thread(create_env_app(runtime, max_sessions=2)) as url:
        proc = run_cli("eval", "--agent", "transformers", "--model", str(tiny_model), "--max-new-tokens", "8",
                       "--n", "2", "--parallel", "2", "--url", url, "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    agent_id = f"llm:{tiny_model.name}"
    assert summary["agents"] == [agent_id] and summary["episodes"] == 2 and summary["run"]["kind"] == "transformers"
    assert summary["overall"]["invalid_rate"]["mean"] == 1.0 and summary["overall"]["full_fix"]["mean"] == 0.0
    records = list(read_episodes(tmp_path / "run" / "episodes.jsonl"))
    assert all(r.agent_id == agent_id and len(r.steps) == 3 and r.steps[0].action["tool"] == "reply" for r in records)
    report = (tmp_path / "run" / "report.md").read_text()
    assert report.startswith(f"# {agent_id} on test") and "| invalid |" in report


# -- OpenAI-compatible endpoints ---------------------------------------------------------------------

class FakeEndpoint:
    """An OpenAI-compatible chat endpoint that answers from a script (one reply per assistant turn),
    after ``failures`` rate-limit answers."""

    def __init__(self, script, failures=0, status=429):
        self.script, self.failures, self.status = script, failures, status
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.complete)

    async def complete(self, request: Request):
        body = await request.json()
        with self.lock:
            self.requests.append({"body": body, "auth": request.headers.get("authorization")})
            if self.failures:
                self.failures -= 1
                return JSONResponse({"error": {"message": "slow down"}}, status_code=self.status,
                                    headers={"retry-after": "0"})
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        reply = self.script(turn, body["messages"])
        message = reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10}}


def oracle_script(fix):
    """Replies the way chat models write them: thinking, fences, prose, native tool calls."""
    def script(turn, messages):
        if turn == 0:
            return '<think>Start with the code.</think>\n```json\n{"tool": "list_files"}\n```'
        if turn == 1:
            return {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "http_request", "arguments": json.dumps({"method": "GET", "path": "/api/status"})}}]}
        if turn == 2:
            return "The handler lacks an ownership check. Here is the patch:\n" + json.dumps({"tool": "apply_patch", "diff": fix})
        return "Done. {'tool': 'submit'}"
    return script


def test_an_endpoint_agent_repairs_a_scenario_through_the_real_server(shipped, sandbox, tmp_path, monkeypatch):
    fake = FakeEndpoint(oracle_script(shipped.load(SCENARIO).reference_fix), failures=2)
    runtime = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    monkeypatch.setenv("A01_LLM_API_KEY", "sk-test")
    monkeypatch.setenv("A01_LLM_MODEL", "fake-coder")
    with serve_in_thread(fake.app) as llm_url, serve_in_thread(create_env_app(runtime, max_sessions=2)) as env_url:
        factory, agent_id = agent_factory("openai", llm=LLMOptions(base_url=f"{llm_url}/v1"))
        result = run_rollouts(factory, [EpisodeSpec.of(0, scenario=SCENARIO)], log=tmp_path / "log.jsonl",
                              urls=[env_url], agent_id=agent_id)
    assert result.played == 1 and not result.failed and agent_id == "api:fake-coder"
    (record,) = read_episodes(tmp_path / "log.jsonl")
    assert record.reward_breakdown["resolution"] == "full" and record.reward > 0.9
    assert [s.action["tool"] for s in record.steps] == ["reply"] * 4
    assert len(fake.requests) == 4 + 2  # two rate-limited tries were retried
    first = fake.requests[0]["body"]
    assert fake.requests[0]["auth"] == "Bearer sk-test" and first["model"] == "fake-coder"
    assert first["messages"][0]["role"] == "system" and "apply_patch(diff: str)" in first["messages"][0]["content"]
    assert "Access policy" in first["messages"][1]["content"]


@pytest.mark.parametrize("status, tries, message", [
    (401, 1, "refused the request: HTTP 401"),  # not retried: the key is wrong
    (503, 3, "kept failing after 3 tries: HTTP 503"),  # retried, then reported
])
def test_an_endpoint_error_stops_the_agent_with_the_endpoints_message(status, tries, message):
    fake = FakeEndpoint(lambda turn, messages: "{}", failures=10, status=status)
    with serve_in_thread(fake.app) as url:
        agent = OpenAIChatAgent("m", base_url=f"{url}/v1", retries=2)
        agent.begin(obs("task"))
        with pytest.raises(EndpointError, match=message):
            agent.act(obs("task"))
    assert len(fake.requests) == tries


def test_agent_catalog_refuses_bad_combinations(tiny_model, monkeypatch):
    monkeypatch.delenv("A01_LLM_MODEL", raising=False)
    assert set(AGENTS) >= {"noop", "deny_all", "random", "heuristic", "oracle", "transformers", "openai"}
    with pytest.raises(ValueError, match="scripted baseline"):
        agent_factory("heuristic", llm=LLMOptions(adapter="x"))
    with pytest.raises(ValueError, match="needs --model"):
        agent_factory("transformers")
    with pytest.raises(ValueError, match="does not exist"):
        agent_factory("transformers", llm=LLMOptions(model=str(tiny_model), adapter="/nonexistent"))
    with pytest.raises(ValueError, match="A01_LLM_MODEL"):
        agent_factory("openai")
    with pytest.raises(ValueError, match="unknown agent"):
        agent_factory("gpt")
    factory, ident = agent_factory("transformers", llm=LLMOptions(model=str(tiny_model), max_new_tokens=4), agent_id="mine")
    assert ident == "mine" and factory().name == "mine" and factory().max_new_tokens == 4
