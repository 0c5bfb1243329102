"""Shared fixtures: a factory config, a runner, and compiled bundles for sample seeds."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from envcore.factory.compiler import compile_spec  # noqa: E402
from envcore.factory.config import FactoryConfig  # noqa: E402
from envcore.factory.template_author import author_spec  # noqa: E402
from envcore.runner.inprocess import InProcessRunner  # noqa: E402


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


@pytest.fixture(scope="session")
def shipped():
    """The shipped scenario cache."""
    from envcore.cache import ScenarioCache

    return ScenarioCache.open("artifacts/scenarios/v1")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny random-weight chat model and its tokenizer, built here (nothing is downloaded)."""
    from envcore.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)
