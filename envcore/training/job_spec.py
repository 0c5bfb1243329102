"""What the from-scratch training job does at each scale: one validated description, two presets.

The job (:mod:`envcore.training.scratch_job`) builds a model from nothing, teaches it by SFT on
verified demonstrations, practises it by GRPO against the environment and evaluates every stage on
held-out slices, all inside a wall-clock budget. Its size is this module's :class:`JobSpec`:

* :data:`PRESETS` ``gpu``: the real run, sized for one GPU with 16 CPU cores in a 540-second
  budget: a ~26M-parameter Llama-style model with an 8,192-token vocabulary, SFT on every
  demonstration that fits 8,192 tokens, GRPO in groups of 8 on train scenarios of the shipped
  cache, and the three-stage table on the test split (96 scenarios), the held-out styles (48) and
  the external split (all 10), every slice's episodes in one batch;
* ``cpu-learn``: GRPO's own effect, measurable on a CPU: four apps, an SFT stopped early so the model
  fixes them some of the time, then GRPO on them (with ``--grpo-seed`` for a band over seeds and
  ``--control`` for the same rounds without updates);
* ``smoke``: the same code path at toy scale (a model of a few thousand parameters, a handful of
  demonstrations, two GRPO steps, one or two scenarios a slice), what the default test run plays
  on a CPU in well under a minute. Its numbers mean nothing; that every stage runs and writes its
  results in the shipped format is what it shows.

How the budget is split: setup (imports, the sandbox's self-check, the tokenizer and the
demonstrations' encoding) takes what it takes and is measured; the base model is evaluated (an
untrained model decodes every token of every turn: the longest an evaluation takes); SFT gets its
share of what setup left, but never the time the two later evaluations need; the SFT model is
evaluated (that time is measured, and the same plus a margin is reserved for evaluating the final
model), and GRPO gets what remains but that reserve.
Each stage ends at its deadline rather than at a step count, so a slower machine trains less but
still finishes with every table written.

Every key is validated and an unknown key is an error naming it, as in the training config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelShape(_Part):
    """The Llama-style model built from nothing, and its byte-level BPE tokenizer."""

    vocab_size: int = Field(ge=300)
    hidden_size: int = Field(ge=8)
    layers: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    intermediate_size: int = Field(ge=8)
    context_tokens: int = Field(ge=256)
    seed: int = 0
    tokenizer_demos: int = Field(default=2000, ge=1)
    """How many demonstrations (evenly spread over the set) the tokenizer's merges are learned from."""


class SftPart(_Part):
    """Supervised fine-tuning on the demonstrations, every weight trained."""

    share: float = Field(gt=0, lt=1)
    """Fraction of the budget left after setup that SFT may use."""
    learning_rate: float = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    max_epochs: float = Field(gt=0)
    """SFT also stops after this many passes over the demonstrations, if that comes before its deadline."""
    tokens_per_batch: int = Field(ge=64)
    """Padded tokens in one optimizer step's batch (demonstrations of similar length are batched together)."""
    max_length: int = Field(ge=64)
    """Demonstrations longer than this many tokens are left out and counted, never cut."""
    max_demos: int | None = Field(default=None, ge=1)
    """Use only the first ``max_demos`` demonstrations (in the set's order); ``None``: all."""
    weight_decay: float = 0.1
    seed: int = 0


class GrpoPart(_Part):
    """GRPO against the environment, every weight trained, one update per round (on-policy)."""

    scenarios_per_step: int = Field(ge=1)
    group_size: int = Field(ge=2)
    learning_rate: float = Field(ge=0)
    """``0`` plays the same rounds without updating: the control a learning curve is compared with."""
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_steps: int | None = Field(default=None, ge=1)
    """GRPO also stops after this many steps, if that comes before its deadline; ``None``: the deadline alone."""
    pool_split: str = "train"
    """Scenarios GRPO practises on: this split of the cache the job runs on (never a held-out slice), or
    ``demos``: the scenarios of the demonstrations (the apps SFT showed it)."""
    pool_size: int = Field(default=256, ge=1)
    """How many of them (drawn with the seed) form the pool that scenarios with spread are kept from."""
    tokens_per_batch: int = Field(ge=64)
    """Tokens in one forward/backward micro-batch of the update."""
    seed: int = 0


class EvalSlice(_Part):
    split: str
    """A split of the cache (``test``, ``test_styles``, ``external``), or ``trained``: GRPO's pool."""
    n: int | None = Field(default=None, ge=1)
    """The first ``n`` scenarios by id, as ``python -m envcore eval`` picks them; ``None``: all."""


class EpisodePart(_Part):
    """How every episode is played, in GRPO and in evaluation alike."""

    max_steps: int = Field(ge=1)
    max_new_tokens: int = Field(ge=1)
    completion_budget: int = Field(ge=64)
    batch: int = Field(ge=1)
    """Episodes played at once in evaluation (one batched generation per turn for all of them)."""


class JobSpec(_Part):
    """One scale of the job; see the module docstring."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The run's name: ``artifacts/training/<name>``, the model folder, the agents' ids."""
    description: str
    model: ModelShape
    sft: SftPart
    grpo: GrpoPart
    episodes: EpisodePart
    slices: list[EvalSlice]
    eval_share_floor: float = Field(default=0.08, ge=0, lt=1)
    """At least this fraction of the post-setup budget is kept for evaluating the final model, even
    before the first evaluation has been timed."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """``auto``: bfloat16 autocast on a GPU, float32 on a CPU."""


GPU = JobSpec(
    name="scratch-26m",
    description=("A ~26M-parameter model trained from nothing in one GPU job: its own tokenizer, SFT on verified "
                 "full-fix demonstrations of train scenarios, then GRPO against the environment on train scenarios "
                 "where it sometimes fails and sometimes succeeds; evaluated on apps it never saw."),
    model=ModelShape(vocab_size=8192, hidden_size=512, layers=8, heads=8, kv_heads=4, intermediate_size=1280,
                     context_tokens=8192),
    sft=SftPart(share=0.30, learning_rate=1.5e-3, warmup_steps=60, max_epochs=4, tokens_per_batch=131_072,
                max_length=8192),
    grpo=GrpoPart(scenarios_per_step=16, group_size=8, learning_rate=2e-5, tokens_per_batch=131_072),
    # the expert's episodes take 5 to 7 steps and its longest reply about 500 characters (under 200 tokens):
    # a turn lasts as long as the batch's longest reply, so these bound every lockstep pass
    episodes=EpisodePart(max_steps=8, max_new_tokens=256, completion_budget=6144, batch=160),
    slices=[EvalSlice(split="test", n=96), EvalSlice(split="test_styles", n=48), EvalSlice(split="external")],
)

SMOKE = JobSpec(
    name="smoke",
    description="The job's smoke run: the whole code path at toy scale on a CPU. Its figures measure nothing.",
    model=ModelShape(vocab_size=400, hidden_size=16, layers=1, heads=2, kv_heads=1, intermediate_size=32,
                     context_tokens=8192, tokenizer_demos=4),
    sft=SftPart(share=0.3, learning_rate=5e-3, warmup_steps=1, max_epochs=1, tokens_per_batch=8192,
                max_length=8192, max_demos=4),
    grpo=GrpoPart(scenarios_per_step=2, group_size=2, learning_rate=1e-4, max_steps=2, pool_size=4,
                  tokens_per_batch=8192),
    episodes=EpisodePart(max_steps=2, max_new_tokens=8, completion_budget=4096, batch=8),
    slices=[EvalSlice(split="test", n=2), EvalSlice(split="test_styles", n=1), EvalSlice(split="external", n=1)],
    eval_share_floor=0.0,
    dtype="float32",
)

CPU_LEARN = JobSpec(
    name="cpu-learn",
    description=("GRPO's own effect on a CPU: a 0.7M-parameter model taught four apps by an SFT that stops early "
                 "(so it fixes them some of the time, for reasons of its own), then GRPO on those four apps; run "
                 "with several seeds and with a learning rate of 0 as the control (python -m envcore job curve)."),
    model=ModelShape(vocab_size=2048, hidden_size=128, layers=3, heads=4, kv_heads=2, intermediate_size=256,
                     context_tokens=4096, tokenizer_demos=4),
    sft=SftPart(share=0.3, learning_rate=5e-3, warmup_steps=5, max_epochs=68, tokens_per_batch=4096,
                max_length=4096),
    grpo=GrpoPart(scenarios_per_step=4, group_size=8, learning_rate=3e-4, max_steps=16, pool_split="demos",
                  tokens_per_batch=16384),
    episodes=EpisodePart(max_steps=8, max_new_tokens=192, completion_budget=3072, batch=32),
    slices=[EvalSlice(split="trained")],
    eval_share_floor=0.0,
    dtype="float32",
)

PRESETS: dict[str, JobSpec] = {"gpu": GPU, "smoke": SMOKE, "cpu-learn": CPU_LEARN}
