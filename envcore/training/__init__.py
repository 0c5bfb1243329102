"""Training: TRL GRPO + LoRA with the environment in the loop, Trackio metrics, and the adapter's
held-out evaluation.

* :mod:`~envcore.training.config`: the YAML run description (``configs/train-*.yaml``);
* :mod:`~envcore.training.episodes`: the curriculum's episode keys (the GRPO dataset);
* :mod:`~envcore.training.turns`: one multi-turn episode as one token sequence with its env mask;
* :mod:`~envcore.training.generation`: batched generation per turn (transformers or a vLLM server);
* :mod:`~envcore.training.rollout`: the ``rollout_func`` that plays episodes against the environment;
* :mod:`~envcore.training.metrics`: step timing, and the Trackio database read back as a DataFrame;
* :mod:`~envcore.training.pipeline`: ``train(config)``, from the config to the comparison report;
* the from-scratch job (``python -m envcore job``), which needs neither TRL nor Trackio:
  :mod:`~envcore.training.job_spec` (its scales), :mod:`~envcore.training.scratch_job` (the stages in a
  time budget), :mod:`~envcore.training.sft_loop` and :mod:`~envcore.training.grpo_loop` (the loops in
  plain PyTorch), :mod:`~envcore.training.batch_eval` (greedy evaluation in one batch),
  :mod:`~envcore.training.job_files` (what travels and comes back), :mod:`~envcore.training.job_estimate`
  (the budget's split) and :mod:`~envcore.training.curves` (learning curves against controls).

Importing this package imports nothing heavy; the modules import torch, TRL and PEFT when used.
"""
