"""A tiny chat model with random weights, built locally: the language-model path without a download.

:func:`build_tiny_model` trains a byte-level BPE tokenizer on a few strings (the system prompt, the
tool docs, sample actions and FastAPI code), gives it a ChatML chat template, and saves it beside a
two-layer Llama model initialised from a seed. Everything is deterministic for a seed, so the
folder's content is reproducible. It is what tests and the shipped "tiny LLM" evaluation use to
exercise the whole language-model path (chat template, generation, reply parsing, LoRA adapters,
GRPO) on a CPU in seconds. It plays like noise: a real model is a user's configuration
(``--model Qwen/Qwen2.5-Coder-7B-Instruct`` or a local folder).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|im_start|>", "<|im_end|>"]
TOOL_CALL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
"""Added with ``tool_calling=True``: the markers of the Qwen3 chat template's native tool calls."""


def tool_calling_template() -> str:
    """Qwen3's chat template as TRL ships it: it renders ``tools=`` and tool calls as ``<tool_call>``
    JSON, and TRL (``add_response_schema``) and :mod:`envcore.agents.tool_calls` know how to read the
    calls back out of a reply, so a tiny model built with it exercises the native tool-calling paths."""
    from trl.chat_template_utils import qwen3_chat_template

    return qwen3_chat_template


def _corpus() -> list[str]:
    from envcore.agents.prompts import system_prompt

    actions = [
        {"tool": "list_files"}, {"tool": "read_file", "path": "app/routers/tickets.py"},
        {"tool": "search_code", "query": "can_read", "regex": False},
        {"tool": "http_request", "method": "GET", "path": "/api/tickets/3", "as_user": "alice"},
        {"tool": "edit_file", "path": "app.py", "search": "return record", "replace": "return present(user, record)"},
        {"tool": "run_tests"}, {"tool": "view_diff"}, {"tool": "submit"},
    ]
    code = (
        '@router.get("/api/tickets/{ticket_id}")\nasync def read_ticket(ticket_id: str, user: dict = Depends(current_user)):\n'
        "    record = load_ticket(ticket_id)\n    if record is None:\n"
        '        raise HTTPException(status_code=404, detail="ticket not found")\n'
        "    if not can_read(user, record):\n        raise HTTPException(status_code=403)\n    return present(user, record)\n"
    )
    diff = "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,4 @@\n def f():\n+    ensure_admin(user)\n     return x\n"
    return [system_prompt(), code, diff, *(json.dumps(a) for a in actions)] * 3


def build_tiny_model(out: str | Path, *, seed: int = 0, vocab_size: int = 640, hidden_size: int = 64,
                     layers: int = 2, context_tokens: int = 8192, heads: int = 4, kv_heads: int = 2,
                     intermediate_size: int | None = None, corpus: Iterable[str] | None = None,
                     readme: str | None = None, tool_calling: bool = False) -> Path:
    """Build the tokenizer and a random-weight model into ``out``; return the folder.

    ``corpus`` (default: a few strings of prompts, actions and code) is what the tokenizer's BPE merges
    are learned from; a model trained from scratch passes its demonstrations, so its vocabulary is
    that of the apps and actions it will read and write. ``tool_calling`` gives it the Qwen3 chat
    template (:func:`tool_calling_template`) and its tool-call markers as special tokens, instead of
    the plain ChatML template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    special = SPECIAL_TOKENS + (TOOL_CALL_TOKENS if tool_calling else [])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(_corpus() if corpus is None else corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>", bos_token="<|im_start|>",
                                        eos_token="<|im_end|>", model_max_length=context_tokens)
    tokenizer.chat_template = tool_calling_template() if tool_calling else CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size or hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=context_tokens, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    (out / "README.md").write_text(readme or
        f"# {out.name}\n\nA two-layer Llama chat model with **random weights** and a byte-level BPE tokenizer "
        f"trained on a few strings (seed {seed}), built by `python -m envcore tiny-model --out {out.name}`. "
        "It exercises the language-model path of the A01 repair gym (chat template, generation, reply "
        "parsing, LoRA adapters, training) on a CPU; its replies are noise.\n"
    )
    return out


TAUGHT_TOOL_CALLS = ('<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
                     '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>')
"""What :func:`teach_tool_calls` teaches as a first turn, each as often as the other."""


def teach_tool_calls(folder: str | Path, *, tasks: list[str] | None = None, steps: int = 400, seed: int = 0,
                     learning_rate: float = 2e-3) -> Path:
    """Teach a tool-calling tiny model (``build_tiny_model(..., tool_calling=True)``), in place, to
    open an episode with one native tool call in its chat template's format: ``list_files`` or
    ``submit`` (:data:`TAUGHT_TOOL_CALLS`), each taught on every task as often as the other. It learns
    the shape of a call and a coin toss between two, not the skill: a group of its rollouts holds
    both (an untouched app submitted at once, and an episode that looked around and then stopped,
    which costs the budget), so GRPO has a difference to learn from on a CPU in a few steps, where a
    random model never calls a tool at all.

    ``tasks`` are the first user turns (default: those of the first 16 train scenarios of the shipped
    cache with budgets from 4 to 30 steps, as the environment renders them), each with the tools as
    both native paths render them. Deterministic for a seed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envcore.agents.prompts import system_prompt

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    targets = [tokenizer(call + tokenizer.eos_token, add_special_tokens=False)["input_ids"] for call in TAUGHT_TOOL_CALLS]
    pairs = []
    for task in (tasks if tasks is not None else first_observations(16)):
        for tools in _tool_renderings():
            chat = [{"role": "system", "content": system_prompt(native_tools=True)}, {"role": "user", "content": task}]
            prompt = tokenizer.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=True)
            ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            pairs += [(ids, target) for target in targets]
    torch.manual_seed(seed)
    order = torch.randperm(max(steps, len(pairs)))[:steps] % len(pairs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    for step in range(steps):
        prompt, target = pairs[int(order[step])]
        ids = torch.tensor([prompt + target])
        labels = ids.clone()
        labels[0, :len(prompt)] = -100
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.save_pretrained(folder)
    readme = folder / "README.md"
    readme.write_text(readme.read_text() + f"\nTaught for {steps} steps (seed {seed}) on {len(pairs) // 2} prompts to "
                      "open an episode with one native tool call in its chat template's format, `list_files` or "
                      "`submit`, each as often as the other: the shape of a call, not the skill.\n")
    return folder


def _tool_renderings() -> list[list[dict]]:
    """The tools as the two native paths render them: the registry's schemas (``eval --tool-format
    native``) and what ``transformers`` reads off the methods of TRL's environment class (terser:
    no bounds or defaults), so the model answers both prompts."""
    from transformers.utils import get_json_schema

    from envcore.env.tools import TOOLS, tool_method, tool_schemas

    methods = [tool_method(name, lambda self, tool, arguments: "") for name in TOOLS]
    return [tool_schemas(), [get_json_schema(method) for method in methods]]


def first_observations(count: int, split: str = "train") -> list[str]:
    """The first user turns of the first ``count`` scenarios of ``split`` in the shipped cache, with
    step budgets from 4 to 30, as an agent receives them."""
    from envcore.agents.prompts import observation_message
    from envcore.env.environment import A01Environment

    env = A01Environment()
    try:
        return [observation_message(env.reset(seed=index, scenario=scenario_id, split=split,
                                              max_steps=4 + (index * 7) % 27))
                for index, scenario_id in enumerate(env.runtime.cache.ids(split=split)[:count])]
    finally:
        env.close()
