"""Training: TRL GRPO + LoRA with the environment in the loop, Trackio metrics, and the adapter's
held-out evaluation.

* :mod:`~envcore.training.config`: the YAML run description (``configs/train-*.yaml``);
* :mod:`~envcore.training.episodes`: the curriculum's episode keys (the GRPO dataset);
* :mod:`~envcore.training.turns`: one multi-turn episode as one token sequence with its env mask;
* :mod:`~envcore.training.generation`: batched generation per turn (transformers or a vLLM server);
* :mod:`~envcore.training.rollout`: the ``rollout_func`` that plays episodes against the environment;
* :mod:`~envcore.training.metrics`: step timing, and the Trackio database read back as a DataFrame;
* :mod:`~envcore.training.pipeline`: ``train(config)``, from the config to the comparison report.

Importing this package imports nothing heavy; the modules import torch, TRL and PEFT when used.
"""
