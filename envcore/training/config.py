"""The training configuration: one YAML file describes a whole run, validated before anything loads.

``python -m envcore train --config configs/<name>.yaml`` reads it with :func:`load_config`. Every
section forbids unknown keys, so a typo is an error naming the key, not a silently ignored setting.
Relative paths are relative to the working directory (the repository root in the README's
commands). ``{name}`` in an output path is replaced by the run's name.

Sections:

* ``model``: the base model (folder or hub name), its dtype and an optional chat-template override;
  with ``scratch``, a small model built from nothing into that folder, its tokenizer trained on the
  demonstrations;
* ``lora``: the PEFT LoRA adapter that is trained (rank, alpha, dropout, target modules);
* ``sft`` (optional): the supervised stage on verified demonstrations that runs first; GRPO then
  starts from its weights (``output.sft_dir``);
* ``episodes``: how episodes are played during training: split, per-episode step budget, tokens per
  turn, the completion budget (model and environment tokens of one episode together), and the
  curriculum (stages of tiers, in order, each with a number of episode groups);
* ``environment``: where episodes are played: in process (the default), on ``replicas`` servers a
  ``provider`` starts for the run (``docker``/``swarm`` from an ``image``, ``uv``/``process`` from the
  checkout; :mod:`envcore.agents.providers`) or on running servers (``urls``); the scenario cache and
  a sampling-weights file (what the feedback loop writes);
* ``grpo``: the GRPO settings handed to TRL's ``GRPOConfig`` (plus ``extra`` for any other of its
  fields);
* ``tracking``: the Trackio project and folder (local; nothing is synced unless ``space_id`` is set);
* ``output``: where the adapter and the run's records go;
* ``evaluation``: the held-out evaluation run after training (the adapter and the base model on the
  same scenarios, and a comparison with a shipped baseline run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScratchSection(_Section):
    """A Llama-style model with random weights and a byte-level BPE tokenizer trained on the SFT
    demonstrations (the generated apps as the agent reads them, and its actions)."""

    vocab_size: int = Field(default=4096, ge=300, le=65536)
    hidden_size: int = Field(default=256, ge=16)
    layers: int = Field(default=4, ge=1)
    heads: int = Field(default=4, ge=1)
    kv_heads: int = Field(default=2, ge=1)
    intermediate_size: int | None = None
    """Default: 2 x hidden_size (SwiGLU)."""
    context_tokens: int = Field(default=8192, ge=256)
    seed: int = 0

    @model_validator(mode="after")
    def _heads(self) -> "ScratchSection":
        if self.hidden_size % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden_size must be a multiple of heads, and heads a multiple of kv_heads")
        return self


class ModelSection(_Section):
    name_or_path: str = Field(min_length=1)
    """A local folder or a hub name (hub names need network access when the run starts)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """``auto``: bfloat16 on a GPU, float32 on a CPU."""
    chat_template: str | None = None
    """A Jinja chat template that replaces the tokenizer's (it must be prefix-preserving; see
    :mod:`envcore.training.turns`)."""
    scratch: ScratchSection | None = None
    """Build the model from nothing into ``name_or_path`` (needs ``sft``: its demonstrations train the
    tokenizer, and a random model must be taught before GRPO)."""


class LoraSection(_Section):
    r: int = Field(default=16, ge=1, le=512)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"


class CurriculumStage(_Section):
    tiers: list[Literal[1, 2, 3]] = Field(min_length=1)
    groups: int = Field(ge=1)
    """Episode groups drawn for this stage; each group is one scenario played ``num_generations`` times."""


class EpisodesSection(_Section):
    split: Literal["train", "val", "test", "any"] = "train"
    max_steps: int = Field(default=12, ge=1, le=200)
    """The environment's step budget per episode."""
    max_new_tokens: int = Field(default=512, ge=1)
    """Tokens the model may write in one turn."""
    completion_budget: int = Field(default=4096, ge=8)
    """Tokens of one episode after its first prompt: every reply and every observation. When the next
    turn would not fit, the episode is submitted as it stands (like running out of steps)."""
    curriculum: list[CurriculumStage] = Field(min_length=1)
    seed: int = Field(default=0, ge=0)
    bug_classes: list[str] | None = None
    """Only these bug classes (default: all)."""
    scenarios: list[str] | Literal["demos"] | None = None
    """Only these scenarios (ids or unique prefixes, all in ``split``); ``demos``: those of the SFT
    stage's demonstrations (learn them, then practise them)."""
    learn_after_format_error: bool = True
    """Whether GRPO learns from an episode's replies after its first format error. A model that has
    never seen an error message often answers it with more unreadable replies until its steps run out;
    with ``false`` those replies stay in the episode (and its reward) but out of the loss, while the
    reply that broke the format is still learned from."""


class EnvironmentSection(_Section):
    provider: Literal["local", "docker", "swarm", "uv", "process", "url"] | None = None
    """Where the servers come from (:mod:`envcore.agents.providers`): ``local`` plays in process;
    ``docker``, ``swarm``, ``uv`` and ``process`` start ``replicas`` servers for the run and stop them
    at its end; ``url`` plays on ``urls``. Default: ``url`` with ``urls``, else ``local``."""
    replicas: int | None = None
    """Servers the provider starts (docker, swarm, uv, process; default 1)."""
    image: str | None = None
    """The server image of providers docker and swarm (e.g. ``a01-repair-gym:local``)."""
    urls: list[str] = Field(default_factory=list)
    """Servers to play against (provider url; each new session on the least-loaded by ``/capacity``)."""
    cache: str | None = None
    """The scenario cache (default: the newest shipped one)."""
    weights: str | None = None
    """A sampling-weights file for the curriculum sampler (``feedback plan`` writes one)."""

    @field_validator("urls")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"a server URL starts with http:// or https://, not {url!r}")
        return [u.rstrip("/") for u in value]

    @model_validator(mode="after")
    def _provider(self) -> "EnvironmentSection":
        from envcore.agents.providers import spec_problem

        problem = spec_problem(self.kind, replicas=self.replicas, image=self.image, urls=self.urls)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def kind(self) -> str:
        """The provider, its default resolved."""
        return self.provider or ("url" if self.urls else "local")

    _started: tuple[str, ...] = PrivateAttr(default=())

    @property
    def server_urls(self) -> list[str]:
        """The servers episodes are played on: those the run's provider started, else ``urls``."""
        return list(self._started or self.urls)

    def serving(self, urls: list[str] | None) -> "EnvironmentSection":
        """A copy whose :attr:`server_urls` are ``urls`` (the replicas started for a run); the
        configuration itself, as saved with the run, is unchanged."""
        copy = self.model_copy()
        copy._started = tuple(urls or ())
        return copy


class GrpoSection(_Section):
    num_generations: int = Field(default=8, ge=2)
    per_device_train_batch_size: int = Field(default=8, ge=1)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    max_steps: int = Field(default=200, ge=0)
    """GRPO steps (0: no GRPO stage; with ``sft``, an SFT-only run)."""
    learning_rate: float = Field(default=1e-5, gt=0)
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    beta: float = Field(default=0.0, ge=0)
    """KL coefficient (0: no reference model, as in DAPO/Dr. GRPO)."""
    loss_type: str = "dapo"
    logging_steps: int = Field(default=1, ge=1)
    save_steps: int = Field(default=0, ge=0)
    """Checkpoint every so many steps (0: only the final adapter)."""
    seed: int = 0
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: Literal["server", "colocate"] = "server"
    path: Literal["rollout_func", "environment_factory"] = "rollout_func"
    """How the environment sits in TRL's loop. ``rollout_func``: the project plays whole episodes
    itself (JSON actions read out of the reply text; any chat model). ``environment_factory``: TRL's
    own tool loop over :class:`~envcore.training.tool_env.A01ToolEnv` (native tool calls; the chat
    template must support tools). docs/training.md says when to choose which."""
    max_tool_calls: int | None = Field(default=None, ge=1)
    """``environment_factory``: TRL's ``max_tool_calling_iterations`` (rounds of tool calls per
    rollout); default ``episodes.max_steps``."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Any other ``GRPOConfig`` field, passed through as is."""

    @model_validator(mode="after")
    def _batch(self) -> "GrpoSection":
        batch = self.generation_batch
        if batch % self.num_generations:
            raise ValueError(f"the generation batch ({batch} episodes: per_device_train_batch_size x "
                             "gradient_accumulation_steps, or extra.generation_batch_size / steps_per_generation) "
                             f"must be a multiple of num_generations ({self.num_generations})")
        return self

    @property
    def generation_batch(self) -> int:
        """Episodes played per generation round, one environment session each: TRL's
        ``generation_batch_size`` (``per_device_train_batch_size x steps_per_generation``, which defaults
        to ``gradient_accumulation_steps``) on one process."""
        if self.extra.get("generation_batch_size"):
            return int(self.extra["generation_batch_size"])
        steps = int(self.extra.get("steps_per_generation") or self.gradient_accumulation_steps)
        return self.per_device_train_batch_size * steps


class SftSection(_Section):
    demos: str = Field(min_length=1)
    """A demonstrations folder written by ``python -m envcore demos`` (``demos.jsonl``)."""
    lora: bool = True
    """LoRA (the ``lora`` section), merged into the weights afterwards; ``false``: full fine-tuning
    (what a model trained from scratch needs)."""
    epochs: float = Field(default=3.0, gt=0)
    max_steps: int = Field(default=0, ge=0)
    """Optimizer steps (0: ``epochs`` decides)."""
    per_device_train_batch_size: int = Field(default=4, ge=1)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    learning_rate: float = Field(default=2e-4, gt=0)
    lr_scheduler_type: str = "cosine"
    warmup_steps: int = Field(default=0, ge=0)
    max_length: int = Field(default=8192, ge=16)
    """Tokens of one demonstration; longer ones are left out (and counted), never cut."""
    seed: int = 0
    extra: dict[str, Any] = Field(default_factory=dict)
    """Any other ``SFTConfig`` field, passed through as is."""


class TrackingSection(_Section):
    project: str = "a01-repair-gym"
    dir: str = "artifacts/trackio"
    """``TRACKIO_DIR``: one SQLite file per project."""
    space_id: str | None = None
    """A Hugging Face Space to sync the metrics to; ``None`` keeps them local."""


class OutputSection(_Section):
    adapter_dir: str = "artifacts/adapters/{name}"
    sft_dir: str = "artifacts/models/{name}-sft"
    """The model after the SFT stage (a plain model folder; the GRPO adapter's base)."""
    run_dir: str = "artifacts/training/{name}"
    """The run's training episode log, timing summary, resolved config and evaluation."""
    overwrite: bool = False
    """Replace an existing run of the same name: its adapter folder, its run folder and its Trackio run."""


class EvaluationSlice(_Section):
    split: str = Field(min_length=1)
    """A split of the cache (``test``, ``test_styles``, ``external`` ...), or ``trained``: the train
    scenarios the run's demonstrations and GRPO episodes came from."""
    n: int | None = Field(default=None, ge=1)
    """The first ``n`` scenarios by id (all when ``None``)."""


class EvaluationSection(_Section):
    enabled: bool = True
    split: str = "test"
    n: int = Field(default=64, ge=1)
    stages: list[EvaluationSlice] = Field(default_factory=list)
    """Slices on which every stage (base, SFT, SFT+GRPO) is evaluated for the three-stage table
    (runs with an ``sft`` section); empty: ``split`` and ``n`` above."""
    max_steps: int = Field(default=30, ge=1, le=200)
    max_new_tokens: int = Field(default=512, ge=1)
    parallel: int = Field(default=4, ge=1)
    base_model: bool = True
    """Also evaluate the base model without the adapter on the same scenarios (the paired comparison)."""
    baselines: list[str] = Field(default_factory=lambda: ["artifacts/evals/v5/heuristic"])
    """Shipped evaluation folders to compare the adapter with (paired on common scenarios)."""


class TrainConfig(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    model: ModelSection
    lora: LoraSection = LoraSection()
    episodes: EpisodesSection
    environment: EnvironmentSection = EnvironmentSection()
    grpo: GrpoSection = GrpoSection()
    sft: SftSection | None = None
    tracking: TrackingSection = TrackingSection()
    output: OutputSection = OutputSection()
    evaluation: EvaluationSection = EvaluationSection()

    @model_validator(mode="after")
    def _budget(self) -> "TrainConfig":
        if self.episodes.max_new_tokens > self.episodes.completion_budget:
            raise ValueError(f"episodes.max_new_tokens ({self.episodes.max_new_tokens}) exceeds "
                             f"episodes.completion_budget ({self.episodes.completion_budget})")
        return self

    @model_validator(mode="after")
    def _stages(self) -> "TrainConfig":
        if self.model.scratch is not None and self.sft is None:
            raise ValueError("model.scratch needs an sft section: a model built from nothing is taught from "
                             "demonstrations (which also train its tokenizer) before GRPO")
        if self.sft is None and self.grpo.max_steps == 0:
            raise ValueError("nothing to train: grpo.max_steps is 0 and there is no sft section")
        return self

    def path(self, template: str) -> Path:
        return Path(template.replace("{name}", self.name))

    @property
    def adapter_dir(self) -> Path:
        return self.path(self.output.adapter_dir)

    @property
    def sft_dir(self) -> Path:
        return self.path(self.output.sft_dir)

    @property
    def run_dir(self) -> Path:
        return self.path(self.output.run_dir)

    def episode_groups(self) -> int:
        return sum(stage.groups for stage in self.episodes.curriculum)


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the field."""


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read and validate ``path``; ``overrides`` maps dotted keys (``grpo.max_steps``) to values."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections (name, model, episodes, ...)")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {key} is not a section")
        node[leaf] = value
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path}: {problems}") from None
