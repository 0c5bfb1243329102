"""Shared fixtures: a factory config, a runner, compiled bundles for sample seeds, a tiny model and one
real training run of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from envcore.factory.compiler import compile_spec  # noqa: E402
from envcore.factory.config import FactoryConfig  # noqa: E402
from envcore.factory.template_author import author_spec  # noqa: E402
from envcore.runner.inprocess import InProcessRunner  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def config() -> FactoryConfig:
    return FactoryConfig()


@pytest.fixture(scope="session")
def runner():
    r = InProcessRunner()
    yield r
    r.close()


@pytest.fixture(scope="session")
def bundle_for(config):
    cache = {}

    def get(seed: int):
        if seed not in cache:
            cache[seed] = compile_spec(author_spec(config, seed))
        return cache[seed]

    return get


@pytest.fixture(scope="session")
def sandbox():
    """One sandbox for the session, with limits tight enough that hostile apps fail fast."""
    from envcore.sandbox import Sandbox, SandboxLimits

    limits = SandboxLimits(request_timeout_s=1.0, load_timeout_s=3.0, verify_timeout_s=8.0, cpu_s=5, memory_mb=192)
    box = Sandbox(limits=limits, spares=1).start()
    yield box
    box.close()


@pytest.fixture
def cached_episode(sandbox):
    """An episode of the default cache's first scenario (12 steps), its live app stopped after."""
    from envcore.cache import ScenarioCache
    from envcore.env.episode import Episode

    # the first scenario of the newest shipped cache in the compact single-module layout these tests read
    episode = Episode(next(b for b in ScenarioCache.open(None) if "app/main.py" in b.files), sandbox, max_steps=12)
    yield episode
    episode.close_live()


@pytest.fixture(scope="session")
def shipped():
    """The shipped scenario cache."""
    from envcore.cache import ScenarioCache

    return ScenarioCache.open(None)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny random-weight chat model and its tokenizer, built here (nothing is downloaded)."""
    from envcore.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


TRAINING_RUN = "test-grpo"


@pytest.fixture(scope="session")
def training_run(tmp_path_factory, tiny_model):
    """One real training run of the tiny model, through the command a user types: ``python -m envcore
    train`` in its own process (Trackio reads ``TRACKIO_DIR`` once per process), 2 GRPO steps through
    the in-process environment, then the held-out evaluation. Its outputs sit in an artifacts folder
    of their own (``trackio/``, ``adapters/``, ``training/``), which the browser test serves."""
    import subprocess
    import sys

    import yaml

    root = tmp_path_factory.mktemp("training-artifacts")
    config = {
        "name": TRAINING_RUN,
        "description": "Test run: a tiny random model trained for two steps.",
        "model": {"name_or_path": str(tiny_model), "dtype": "float32"},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "episodes": {"split": "train", "max_steps": 3, "max_new_tokens": 24, "completion_budget": 200,
                     "curriculum": [{"tiers": [1], "groups": 2}, {"tiers": [2], "groups": 2}], "seed": 1},
        "grpo": {"num_generations": 2, "per_device_train_batch_size": 4, "max_steps": 2, "learning_rate": 1e-3,
                 "logging_steps": 1, "gradient_checkpointing": True},  # as the real config: off while generating
        "tracking": {"project": "a01-test", "dir": str(root / "trackio")},
        "output": {"adapter_dir": str(root / "adapters" / "{name}"), "run_dir": str(root / "training" / "{name}")},
        "evaluation": {"split": "test", "n": 2, "max_steps": 3, "max_new_tokens": 16, "parallel": 2,
                       "baselines": ["artifacts/evals/v5/heuristic"]},
    }
    path = root / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-m", "envcore", "train", "--config", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"root": root, "config": path, "stdout": done.stdout, "name": TRAINING_RUN,
            "adapter": root / "adapters" / TRAINING_RUN, "run_dir": root / "training" / TRAINING_RUN}


def _only_for_evaluation_tools() -> set[str]:
    """Top-level modules installed here only for Inspect AI (requirements/inspect.txt), which the GPU
    machine does not have: some libraries the job uses import them when present (fsspec tries
    zstandard, for one), so the smoke job runs with them absent, as the job does there."""
    import importlib.metadata

    from envcore.sandbox.app_runtime import APP_DISTRIBUTIONS, distribution_name, requirement_closure
    from envcore.training.job_files import GPU_IMAGE, JOB_WHEELS

    train = [line.split("==")[0].strip() for line in (REPO / "requirements" / "train.txt").read_text().splitlines()
             if "==" in line and not line.startswith("#")]
    needed = requirement_closure([*JOB_WHEELS, *GPU_IMAGE, *APP_DISTRIBUTIONS, *train])
    extra = requirement_closure(["inspect_ai"]) - needed
    owners = importlib.metadata.packages_distributions()
    return {module for module, names in owners.items() if {distribution_name(n) for n in names} <= extra}


@pytest.fixture(scope="session")
def smoke_job(tmp_path_factory):
    """The from-scratch job's smoke run, through the command a user types (``python -m envcore job run
    --preset smoke``) in its own process, then imported (``job import``) into an artifacts folder of
    its own (``training/smoke``, ``models/smoke``, ``trackio/``), which the browser test serves.
    Returns (the job's output folder, the artifacts folder, the modules the job's process imported)."""
    import json
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("job-out")
    artifacts = tmp_path_factory.mktemp("job-space") / "artifacts"  # named as the Space's own: runs name models by it
    modules = out / "modules.json"
    code = ("import atexit, importlib.machinery, json, runpy, sys\n"
            f"HIDDEN = {sorted(_only_for_evaluation_tools())!r}\n"
            "class Absent:\n"  # the path finder, blind to HIDDEN: find_spec is None, as when not installed
            "    def __init__(self, inner): self.inner = inner\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        return None if name.split('.')[0] in HIDDEN else self.inner.find_spec(name, path, target)\n"
            "    def __getattr__(self, attr): return getattr(self.inner, attr)\n"
            "sys.meta_path[:] = [Absent(f) if f is importlib.machinery.PathFinder else f for f in sys.meta_path]\n"
            f"atexit.register(lambda: json.dump(sorted(sys.modules), open({str(modules)!r}, 'w')))\n"
            "sys.argv = ['envcore', *sys.argv[1:]]\n"
            "runpy.run_module('envcore', run_name='__main__')\n")
    env = os.environ | {"GRADIO_ANALYTICS_ENABLED": "False", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run([sys.executable, "-c", code, "job", "run", "--preset", "smoke", "--demos",
                          "artifacts/demos/tiny-learn", "--out", str(out), "--budget", "120"],
                         cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (out / "job.log").write_text(run.stdout)
    imported = subprocess.run([sys.executable, "-m", "envcore", "job", "import", str(out), "--artifacts", str(artifacts)],
                              cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert imported.returncode == 0, imported.stdout[-3000:] + imported.stderr[-3000:]
    return out, artifacts, json.loads(modules.read_text())
