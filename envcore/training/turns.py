"""One multi-turn episode as one token sequence, the shape GRPO trains on.

An episode is a chat: the system prompt and the task (the reset observation), then a model reply
and an environment observation per step. GRPO needs it as ``prompt_ids`` (the chat up to the first
reply) and ``completion_ids`` (everything after), with an ``env_mask`` that is 1 on tokens the model
wrote and 0 on tokens the environment wrote, so the loss and the KL term only cover the model's own
tokens. The sequence must be exactly what the model saw when it generated each reply, which takes
two rules:

* the model's replies are kept **as generated** (token ids, not re-tokenised text: a BPE tokenizer
  may split the decoded text differently, which would train on tokens the model never produced);
* the tokens between two replies are rendered by the tokenizer's **chat template**, as the
  difference between the chat rendered with and without the new observation. That only works if
  the template is prefix-preserving (rendering more turns never changes the text of earlier ones).
  ChatML-style templates (Qwen2.5, the tiny test model) are; templates that rewrite history (for
  example by dropping earlier ``<think>`` blocks) are refused with :class:`TemplateError`, and the
  config's ``model.chat_template`` can supply a prefix-preserving one.
"""

from __future__ import annotations

from typing import Any

from envcore.agents.prompts import Message


def eos_ids(tokenizer: Any) -> set[int]:
    """The token ids that end a model's turn (a tokenizer may name one or several)."""
    eos = tokenizer.eos_token_id
    return {eos} if isinstance(eos, int) else set(eos or ())


class TemplateError(ValueError):
    """The chat template cannot render an episode as one growing sequence."""


class TurnEncoder:
    """Token ids of an episode's first prompt and of each observation that follows a reply."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        if chat_template is None and getattr(tokenizer, "chat_template", None) is None:
            raise TemplateError("the tokenizer has no chat template; set model.chat_template in the config")
        self.eos_ids = eos_ids(tokenizer)
        self.eos_text = tokenizer.eos_token or ""

    def render(self, messages: list[Message], *, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The first prompt: the chat so far, ending where the model starts its reply."""
        return self.encode(self.render(messages, generation_prompt=True))

    def observation_ids(self, messages: list[Message], reply: str, generated: list[int], observation: str) -> list[int]:
        """The tokens that follow the generated reply ``generated`` (decoded as ``reply``) when the
        environment answers with ``observation``: the end of the model's turn (unless the model wrote
        it), the observation's turn and the start of the next reply."""
        before = self.render(messages, generation_prompt=True)
        after = self.render([*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": observation}],
                            generation_prompt=True)
        if not after.startswith(before):
            raise TemplateError("the chat template is not prefix-preserving: rendering a later turn changed the text "
                                "of earlier ones; set a prefix-preserving model.chat_template in the config")
        rest = after[len(before):]
        for content in (reply, reply.strip(), reply.rstrip(), reply.lstrip()):
            if rest.startswith(content):
                tail = rest[len(content):]
                break
        else:
            raise TemplateError("the chat template does not render an assistant reply verbatim, so the generated "
                                "tokens cannot be kept; set model.chat_template in the config")
        if generated and generated[-1] in self.eos_ids and self.eos_text and tail.startswith(self.eos_text):
            tail = tail[len(self.eos_text):]  # the model wrote its own end-of-turn token
        return self.encode(tail)
