"""Native tool calling: reading calls out of generated text in each common format (malformed ones
included), an OpenAI-compatible endpoint answering with native ``tool_calls`` through the real
environment, a local model whose chat template renders the tools, and the accounting of every call
that cannot run (one invalid step each, as the JSON-in-text format counts a reply with no action)."""

from __future__ import annotations

import json

import pytest
from fastapi import Request
from fastapi.responses import JSONResponse

from envcore.agents.catalog import LLMOptions, agent_factory
from envcore.agents.llm import EndpointError, OpenAIChatAgent, TransformersAgent
from envcore.agents.play import play_episode
from envcore.agents.prompts import ONE_CALL_PER_TURN, Conversation, message_chars, system_prompt
from envcore.agents.rollouts import EpisodeSpec, run_rollouts
from envcore.agents.tiny_model import build_tiny_model
from envcore.agents.tool_calls import ToolCall, call_action, parse_tool_calls, template_tool_problem
from envcore.env.actions import A01Observation
from envcore.env.environment import A01Environment, Runtime
from envcore.env.episode_log import read_episodes
from envcore.env.reply import is_format_error
from envcore.env.sampler import CurriculumSampler
from envcore.env.tools import TOOLS
from tests.test_agents_llm import FakeEndpoint
from tests.test_env_server import serve_in_thread
from tests.test_eval import run_cli

SCENARIO = "f7b3b2e281889b1c"  # idor_write, tier 1, test split: one hunk in app.py


@pytest.fixture(scope="module")
def env(shipped, sandbox):
    environment = A01Environment(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox))
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    """The tiny model with Qwen3's tool-calling chat template."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-tools"), seed=0, tool_calling=True)


def call(name, arguments=None, ident=None, raw=None):
    """One native call as an OpenAI-compatible endpoint sends it (arguments as a JSON string)."""
    text = raw if raw is not None else json.dumps(arguments or {})
    return {"id": ident or f"call_{name}", "type": "function", "function": {"name": name, "arguments": text}}


def calling(*calls, content=None):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


# -- reading calls out of generated text --------------------------------------------------------------

READ = {"name": "read_file", "arguments": {"path": "app.py"}}
SUBMIT = {"name": "submit", "arguments": {}}

FORMATS = [
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py"}}\n</tool_call>', [READ], "hermes"),
    ('<think>look first</think>\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>', [SUBMIT], "hermes"),
    ('I will read it.\n<tool_call>{"name": "read_file", "arguments": {"path": "app.py"}}</tool_call>\n'
     '<tool_call>{"name": "submit", "arguments": {}}</tool_call>', [READ, SUBMIT], "hermes"),
    ('<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"app.py\\"}"}</tool_call>', [READ], "hermes"),
    ('<tool_call>{"name": "submit", "arguments": {}}', [SUBMIT], "hermes"),  # cut off after its JSON
    ('{"name": "read_file", "parameters": {"path": "app.py"}}', [READ], "llama"),
    ('<|python_tag|>{"name": "submit", "parameters": {}}<|eot_id|>', [SUBMIT], "llama"),
    ('[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "app.py"}}, {"name": "submit", "arguments": {}}]',
     [READ, SUBMIT], "mistral"),
    ('[TOOL_CALLS]read_file[ARGS]{"path": "app.py"}[TOOL_CALLS]submit[ARGS]{}</s>', [READ, SUBMIT], "mistral"),
]


@pytest.mark.parametrize("text, calls, how", FORMATS, ids=[f"{how}-{i}" for i, (_, _, how) in enumerate(FORMATS)])
def test_native_calls_are_read_in_each_common_format(text, calls, how):
    parsed = parse_tool_calls(text)
    assert parsed.error is None and parsed.how == how
    assert [{"name": c.name, "arguments": c.arguments} for c in parsed.calls] == calls
    assert parsed.text == text


MALFORMED = [
    ('<tool_call>\n{"name": "submit", "arguments": {bad}\n</tool_call>', "hermes", "not valid JSON"),
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}', "hermes", "not valid JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', "hermes", "no tool name"),
    ('<tool_call>{"name": "read_file", "arguments": [1]}</tool_call>', "hermes", "not a JSON object"),
    ('{"name": "read_file", "parameters": {"path": ', "llama", "not valid JSON"),
    ('[TOOL_CALLS] [{"name": "submit", "arguments": ', "mistral", "not valid JSON"),
    ('[TOOL_CALLS]read_file[ARGS]{"path": ', "mistral", "not valid JSON"),
]


@pytest.mark.parametrize("text, how, problem", MALFORMED)
def test_a_malformed_native_call_makes_the_reply_unreadable_not_a_dropped_call(text, how, problem):
    parsed = parse_tool_calls(text)
    assert parsed.calls == () and parsed.how == how and problem in parsed.error
    assert call_action_of(parsed) == {"tool": "reply", "text": text}  # the environment reads it, as JSON-in-text


def call_action_of(parsed):
    from envcore.agents.tool_calls import reply_action

    return reply_action(parsed)


@pytest.mark.parametrize("text", [
    "I am not sure what to do yet.",
    '{"tool": "read_file", "path": "app.py"}',  # JSON-in-text: not a native call; the environment reads it
    "<think>" + '<tool_call>{"name": "submit", "arguments": {}}</tool_call>' + "</think>",  # only thought about
    "",
])
def test_a_reply_without_native_calls_is_left_to_the_environment(text):
    parsed = parse_tool_calls(text)
    assert parsed.calls == () and parsed.error is None
    assert call_action_of(parsed) == {"tool": "reply", "text": text}


def test_the_tokenizers_response_template_reads_calls_when_it_has_one(tool_model):
    from transformers import AutoTokenizer

    from envcore.agents.tool_calls import ensure_response_template

    tokenizer = AutoTokenizer.from_pretrained(tool_model)
    assert ensure_response_template(tokenizer)  # TRL knows Qwen3's template
    parsed = parse_tool_calls('<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call><|im_end|>', tokenizer,
                              prefix="<|im_start|>assistant\n")
    assert parsed.how == "response_template" and [c.name for c in parsed.calls] == ["submit"]
    # a call the template's parser cannot read falls back to the format readers, which say why
    broken = parse_tool_calls('<tool_call>\n{"name": "submit", "arguments": {bad}\n</tool_call>', tokenizer)
    assert broken.calls == () and "not valid JSON" in broken.error


@pytest.mark.parametrize("tool_call, action", [
    (ToolCall("read_file", {"path": "app.py"}, '{"path": "app.py"}'), {"tool": "read_file", "path": "app.py"}),
    (ToolCall("submit", {}, "{}"), {"tool": "submit"}),
    (ToolCall("read_file", {"path": 3}, '{"path": 3}'), {"tool": "read_file", "path": 3}),  # the env validates it
    (ToolCall("delete_everything", {}, "{}"), {"tool": "reply", "text": '{"name": "delete_everything", "arguments": {}}'}),
    (ToolCall("read_file", None, "{bad"), {"tool": "reply", "text": '{"name": "read_file", "arguments": "{bad"}'}),
    (ToolCall("out_of_budget", {}, "{}"), {"tool": "reply", "text": '{"name": "out_of_budget", "arguments": {}}'}),
    (ToolCall("read_file", {"tool": "out_of_budget"}, '{"tool": "out_of_budget"}'),
     {"tool": "reply", "text": '{"name": "read_file", "arguments": {"tool": "out_of_budget"}}'}),
])
def test_a_call_becomes_the_tool_action_only_when_it_names_a_registered_tool(tool_call, action):
    assert call_action(tool_call) == action


# -- the native system prompt -------------------------------------------------------------------------

def test_the_native_prompt_leaves_the_tool_docs_to_the_schemas():
    native = system_prompt(native_tools=True)
    assert '{"tool": "read_file"' in system_prompt() and '{"tool"' not in native and "JSON object" not in native
    assert "apply_patch(diff" not in native and "one tool call per turn" in native and "submit" in native


def test_a_native_conversation_answers_every_call_and_drops_whole_turns():
    chat = Conversation(max_chars=6_000, old_output_chars=300, native=True)
    chat.start(A01Observation(text="TASK " + "p" * 500, steps_left=9))
    for turn in range(12):
        chat.add_tool_calls("", [call("read_file", {"path": f"f{turn}.py"}, f"a{turn}"), call("submit", {}, f"b{turn}")])
        chat.add_observation(A01Observation(text=f"OUTPUT {turn} " + "x" * 1_000, steps_left=8))
    assert [m["role"] for m in chat.messages[2:5]] == ["assistant", "tool", "tool"]
    assert chat.messages[3]["tool_call_id"] == "a0" and chat.messages[3]["content"].startswith("OUTPUT 0")
    assert chat.messages[4] == {"role": "tool", "tool_call_id": "b0", "content": ONE_CALL_PER_TURN}
    fitted = chat.fitted()
    assert sum(message_chars(m) for m in fitted) <= 6_000 < sum(message_chars(m) for m in chat.messages)
    assert fitted[0]["content"] == system_prompt(native_tools=True) and fitted[1]["content"].startswith("TASK")
    # a dropped turn takes its tool messages with it: every tool message answers a call just before it
    for index, message in enumerate(fitted):
        if message["role"] == "tool":
            ids = [c["id"] for m in fitted[:index] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
            assert message["tool_call_id"] in ids[-2:]
    assert fitted[-2]["content"].startswith("OUTPUT 11") and len(fitted[-2]["content"]) > 1_000  # the latest, whole


# -- an OpenAI-compatible endpoint calling tools natively ---------------------------------------------

def edit_of(diff: str) -> dict:
    """The one-hunk reference fix as an edit_file call: the hunk's old lines replaced by its new ones."""
    lines = diff.split("@@", 2)[2].split("\n", 1)[1].splitlines()
    old = [line[1:] for line in lines if line[:1] in (" ", "-")]
    new = [line[1:] for line in lines if line[:1] in (" ", "+")]
    return {"path": "app.py", "search": "\n".join(old).strip("\n"), "replace": "\n".join(new).strip("\n")}


def repairing_script(fix):
    def script(turn, messages):
        steps = [call("read_file", {"path": "app.py", "start_line": 270, "end_line": 300}),
                 call("http_request", {"method": "GET", "path": "/api/reviews", "as_user": "nadia.murphy30"}),
                 call("edit_file", edit_of(fix)),
                 call("submit", {})]
        return calling(steps[turn] | {"id": f"call_{turn}"}, content="Next step." if turn == 1 else None)
    return script


def test_an_endpoint_repairs_a_scenario_with_native_tool_calls(shipped, sandbox, tmp_path):
    fake = FakeEndpoint(repairing_script(shipped.load(SCENARIO).reference_fix))
    runtime = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    with serve_in_thread(fake.app) as url:
        factory, agent_id = agent_factory("openai", llm=LLMOptions(model="fake-coder", base_url=f"{url}/v1",
                                                                   tool_format="native"))
        result = run_rollouts(factory, [EpisodeSpec.of(0, scenario=SCENARIO)], log=tmp_path / "log.jsonl",
                              runtime=runtime, agent_id=agent_id)
    assert result.played == 1 and not result.failed
    (record,) = read_episodes(tmp_path / "log.jsonl")
    assert record.reward_breakdown["resolution"] == "full" and record.reward > 0.9
    # the step record shows each call as the action
    assert [s.action["tool"] for s in record.steps] == ["read_file", "http_request", "edit_file", "submit"]
    assert record.steps[0].action == {"tool": "read_file", "path": "app.py", "start_line": 270, "end_line": 300}
    assert not any(s.observation.get("error") for s in record.steps)
    bodies = [r["body"] for r in fake.requests]
    assert len(bodies) == 4
    assert all(b["tools"] == [json.loads(json.dumps(t)) for t in _schemas()] and b["tool_choice"] == "auto"
               for b in bodies)
    system = bodies[0]["messages"][0]["content"]
    assert system == system_prompt(native_tools=True) and "apply_patch(diff" not in system
    last = bodies[-1]["messages"]
    assert [m["role"] for m in last[2:]] == ["assistant", "tool"] * 3
    for turn, (asked, answered) in enumerate(zip(last[2::2], last[3::2])):
        assert asked["tool_calls"][0]["id"] == answered["tool_call_id"] == f"call_{turn}"
    assert last[3]["content"].startswith("app.py (lines 270-300") and last[4]["content"] == "Next step."
    assert last[-1]["content"].endswith("steps left]")


def _schemas():
    from envcore.env.tools import tool_schemas

    return tool_schemas()


def first_step(env, agent):
    """Play the first step of an episode; return its observation."""
    agent.begin(env.reset(seed=0, scenario=SCENARIO, max_steps=5), seed=0)
    return env.step(agent.act(None))


NO_ACTION = "I have looked at everything and I am not sure what to do."

INVALID = [
    (NO_ACTION, "format error"),  # plain text: no call
    (calling(call("delete_everything", {"path": "app.py"})), "invalid action"),  # unknown tool
    (calling(call("read_file", raw='{"path": "app.py"')), "format error"),  # arguments not JSON
    (calling(call("read_file", {"start_line": 0})), "invalid action"),  # arguments refused by validation
    (calling(call("out_of_budget", {})), "a reply must contain a tool call"),  # the harness's action, refused
    (calling(call("reply", {"text": '{"tool": "submit"}'})), "a reply must contain a tool call"),
    (calling(call("read_file", {"tool": "out_of_budget"})), "a reply must contain a tool call"),  # smuggled in
]


@pytest.mark.parametrize("reply, error", INVALID, ids=["text", "unknown-tool", "bad-json", "invalid-arguments",
                                                       "out_of_budget", "reply", "tool-in-arguments"])
def test_a_call_that_cannot_run_is_one_invalid_step(env, reply, error):
    """Each costs one step and one invalid action, with the environment's own message; a call naming the
    harness's own actions (``out_of_budget`` would end the episode as if a budget ran out, ``reply``
    would have another reply read) is refused like any reply that names them."""
    fake = FakeEndpoint(lambda turn, messages: reply if turn == 0 else calling(call("submit", {})))
    with serve_in_thread(fake.app) as url:
        agent = OpenAIChatAgent("m", base_url=f"{url}/v1", tool_format="native")
        observation = first_step(env, agent)
        assert observation.error.startswith(error) and not observation.done
        assert env.episode.invalid_actions == 1 and env.episode.steps == 1
        observation = env.step(agent.act(observation))
    assert observation.done and env.episode.invalid_actions == 1 and env.episode.steps == 2
    answered = fake.requests[1]["body"]["messages"][-1]
    assert f"Error: {env.episode.records[0].observation['error']}" in answered["content"]  # the env's own words
    if isinstance(reply, dict):
        assert answered == {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": answered["content"]}
    else:
        assert answered["role"] == "user"


def test_a_reply_with_no_call_counts_as_the_json_format_counts_it(env):
    counts = {}
    for tool_format in ("json", "native"):
        fake = FakeEndpoint(lambda turn, messages: NO_ACTION)
        with serve_in_thread(fake.app) as url:
            agent = OpenAIChatAgent("m", base_url=f"{url}/v1", tool_format=tool_format)
            observation = first_step(env, agent)
        counts[tool_format] = (env.episode.invalid_actions, observation.error, is_format_error(observation.error))
    assert counts["json"] == counts["native"] and counts["native"][0] == 1 and counts["native"][2]


def test_several_calls_in_one_reply_run_the_first_and_answer_the_others(env):
    def script(turn, messages):
        if turn == 0:
            return calling(call("list_files", {}, "c1"), call("submit", {}, "c2"), call("view_diff", {}, "c3"))
        return calling(call("submit", {}, "c4"))

    fake = FakeEndpoint(script)
    with serve_in_thread(fake.app) as url:
        agent = OpenAIChatAgent("m", base_url=f"{url}/v1", tool_format="native")
        observation = first_step(env, agent)
        assert observation.tool == "list_files" and not observation.done  # the submit was not run
        observation = env.step(agent.act(observation))
    assert observation.done and env.episode.steps == 2 and env.episode.invalid_actions == 0
    sent = fake.requests[1]["body"]["messages"]
    assert [m["role"] for m in sent[2:]] == ["assistant", "tool", "tool", "tool"]
    assert [m["tool_call_id"] for m in sent[3:]] == ["c1", "c2", "c3"]
    assert sent[3]["content"].startswith("app.py") and sent[4]["content"] == sent[5]["content"] == ONE_CALL_PER_TURN


class ToollessEndpoint(FakeEndpoint):
    """An endpoint served without tool calling: a request carrying ``tools`` is refused, as vLLM refuses it
    when started without ``--enable-auto-tool-choice``."""

    def __init__(self, script):
        super().__init__(script)
        self.offered: list[bool] = []

    async def complete(self, request: Request):
        body = await request.json()
        self.offered.append("tools" in body)
        if "tools" in body:
            return JSONResponse({"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                                      '--tool-call-parser to be set'}}, status_code=400)
        return await super().complete(request)


def test_an_endpoint_that_refuses_tools_falls_back_to_json_under_auto():
    fake = ToollessEndpoint(lambda turn, messages: '{"tool": "submit"}')
    with serve_in_thread(fake.app) as url:
        strict = OpenAIChatAgent("plain-model", base_url=f"{url}/v1", tool_format="native")
        strict.begin(A01Observation(text="task", steps_left=3))
        with pytest.raises(EndpointError, match="--tool-format json"):
            strict.act(None)
        agent = OpenAIChatAgent("plain-model", base_url=f"{url}/v1", tool_format="auto")
        agent.begin(A01Observation(text="task", steps_left=3))
        assert agent.act(None) == {"tool": "reply", "text": '{"tool": "submit"}'}
        assert agent.tool_format == "json" and agent.conversation.messages[0]["content"] == system_prompt()
        again = OpenAIChatAgent("plain-model", base_url=f"{url}/v1", tool_format="auto")  # remembered
        assert again.tool_format == "json"
    assert fake.offered == [True, True, False]


# -- local models -------------------------------------------------------------------------------------

def test_a_template_that_cannot_render_tools_is_refused_up_front(tiny_model):
    with pytest.raises(ValueError, match=r"cannot render native tool calls.*--tool-format json"):
        TransformersAgent(str(tiny_model), tool_format="native")
    assert TransformersAgent(str(tiny_model), tool_format="auto").tool_format == "json"


def test_template_tool_problem_tells_the_templates_apart(tiny_model, tool_model):
    from transformers import AutoTokenizer

    assert "does not render the tools" in template_tool_problem(AutoTokenizer.from_pretrained(tiny_model))
    assert template_tool_problem(AutoTokenizer.from_pretrained(tool_model)) is None


def test_a_local_model_plays_with_native_tools(env, tool_model):
    agent = TransformersAgent(str(tool_model), max_new_tokens=16, tool_format="native")
    assert agent.tool_format == "native"
    prompts = []
    generate = agent.generate

    def recording(ids):
        prompts.append(agent.loaded.tokenizer.decode(ids))
        return generate(ids)

    agent.generate = recording
    final = play_episode(env, agent, seed=3, scenario=SCENARIO, max_steps=3)
    assert final.done and len(env.episode.records) == 3 and agent.usage["calls"] == 3
    assert "<tools>" in prompts[0] and TOOLS["read_file"].__doc__.split("(")[0].strip() in prompts[0]
    assert '"name": "apply_patch"' in prompts[0] and system_prompt(native_tools=True) in prompts[0]
    # noise: every step is invalid, counted as the JSON-in-text format counts it
    assert env.episode.invalid_actions == 3


def test_a_scripted_native_generation_ends_the_episode(env, tool_model, monkeypatch):
    agent = TransformersAgent(str(tool_model), max_new_tokens=16, tool_format="native")
    replies = iter(['<think>read first</think>\n<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py", '
                    '"end_line": 5}}\n</tool_call>',
                    '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'])
    monkeypatch.setattr(agent, "generate", lambda ids: next(replies))
    final = play_episode(env, agent, seed=0, scenario=SCENARIO, max_steps=5)
    assert final.done and env.episode.invalid_actions == 0
    assert [r.action for r in env.episode.records] == [{"tool": "read_file", "path": "app.py", "end_line": 5},
                                                       {"tool": "submit"}]
    history = agent.conversation.messages
    assert history[2]["tool_calls"][0]["function"]["name"] == "read_file" and history[3]["role"] == "tool"
    assert history[3]["tool_call_id"] == history[2]["tool_calls"][0]["id"]
    rendered = agent.loaded.tokenizer.apply_chat_template(agent.template_messages(history), tools=agent.tools,
                                                          tokenize=False)
    assert '<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py", "end_line": 5}}' in rendered
    assert "<tool_response>\napp.py (lines 1-5" in rendered


@pytest.mark.slow  # three eval runs; native calls are played by default above
def test_eval_tool_format_on_the_command_line(tiny_model, tool_model, tmp_path):
    proc = run_cli("eval", "--agent", "transformers", "--model", str(tiny_model), "--tool-format", "native",
                   "--n", "1", "--out", str(tmp_path / "refused"))
    assert proc.returncode != 0 and "--tool-format json" in proc.stderr
    proc = run_cli("eval", "--agent", "heuristic", "--tool-format", "native", "--n", "1", "--out", str(tmp_path / "h"))
    assert proc.returncode != 0 and "language-model agents" in proc.stderr
    proc = run_cli("eval", "--agent", "transformers", "--model", str(tool_model), "--tool-format", "native",
                   "--max-new-tokens", "8", "--max-steps", "2", "--n", "1", "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["run"]["tool_format"] == "native" and summary["overall"]["invalid_rate"]["mean"] == 1.0
