"""The Space's deployment files agree with each other and with what Hugging Face expects of a Docker
Space: README front matter (``sdk: docker``, ``app_port``), a Dockerfile that runs ``python app.py``
as a non-root user on that port with Gradio's analytics off, and a requirements file it installs
with the CPU build of torch. (No Docker engine runs here, so the image itself is not built in the
tests; these are the checks that can fail without one.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n"), "the README must open with the Space's front matter"
    return yaml.safe_load(text.split("---\n", 2)[1])


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_the_readme_declares_a_docker_space_on_the_port_the_app_serves():
    meta = front_matter()
    assert meta["sdk"] == "docker" and meta["app_port"] == 7860
    assert meta["title"] and len(meta.get("short_description", "")) <= 60


def test_the_app_serves_on_the_port_hugging_face_gives_it_and_7860_without_one(monkeypatch):
    import app

    monkeypatch.delenv("PORT", raising=False)
    assert app._port() == front_matter()["app_port"]
    monkeypatch.setenv("PORT", "8123")
    assert app._port() == 8123
    monkeypatch.setenv("PORT", "")
    assert app._port() == 7860


def test_the_image_runs_the_readme_command_as_a_non_root_user_under_an_init_with_a_healthcheck():
    text = dockerfile()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^EXPOSE\s+7860$", text, re.M)
    assert re.search(r'^CMD \["python", "app.py"\]$', text, re.M)
    assert re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--"\]$', text, re.M)  # reaps orphans as PID 1
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD .*/health", text, re.M)
    assert re.search(r"^COPY --from=app --chown=1000:1000 ", text, re.M)  # the app folder is the runtime user's
    assert "GRADIO_ANALYTICS_ENABLED=False" in text and "PORT=7860" in text
    assert re.search(r"^ARG BASE_IMAGE=python:3.11-slim$", text, re.M) and "FROM ${BASE_IMAGE}" in text
    assert "pip install -r requirements.txt && python app.py" in (ROOT / "README.md").read_text()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name.split("[")[0].lower())] = version
    return pins


def test_the_requirements_are_split_by_role_and_add_up_to_one_pinned_set():
    roles = {name: _pins(ROOT / "requirements" / f"{name}.txt") for name in ("space", "train", "test")}
    assert (ROOT / "requirements.txt").read_text().count("\n-r ") + (ROOT / "requirements.txt").read_text().startswith("-r") == 1
    assert "-r requirements/test.txt" in (ROOT / "requirements.txt").read_text()
    assert "-r train.txt" in (ROOT / "requirements" / "test.txt").read_text()
    assert "-r space.txt" in (ROOT / "requirements" / "train.txt").read_text()
    seen: dict[str, str] = {}
    for role, pins in roles.items():
        for name in pins:
            assert name not in seen, f"{name} is pinned in both {seen[name]} and {role}"
            seen[name] = role
    assert roles["train"]["torch"] == "2.13.0"  # the local CPU build; never unpinned
    heavy = {"torch", "transformers", "trl", "peft", "datasets", "accelerate", "trackio", "playwright", "pytest",
             "schemathesis", "hypothesis"}
    assert not heavy & set(roles["space"]), "the Space's runtime set must not carry training or test packages"
    assert {"gradio", "openenv", "fastapi", "uvicorn", "sqlalchemy"} <= set(roles["space"])
    assert "requirements/space.txt" in dockerfile() and "train.txt" in dockerfile()  # the latter only on request


SPACE_PROBE = """
import importlib.abc, sys
BLOCKED = {"torch", "transformers", "trl", "peft", "datasets", "accelerate", "trackio", "playwright", "pytest",
           "schemathesis", "hypothesis", "psutil"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not in the Space's image")
for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED:
        del sys.modules[name]
sys.meta_path.insert(0, Blocker())
import json
from fastapi.testclient import TestClient
import app
from ui import app as page
served = app.build_app()
page.warm().join()  # every shipped rollout set parsed, as the page shows them
client = TestClient(served)
assert client.get("/").status_code == 200
assert client.get("/health").json()["status"] == "healthy"
hub = served.state.session_hub
sid = hub.open("play")
hub.reset(sid, seed=1, split="test")
observation = hub.step(sid, {"tool": "submit"})
assert observation.done, observation
agents = hub.live_agents()
print(json.dumps({"reward": observation.reward, "local": [a.label for n, a in agents.items() if n.startswith("model:")]}))
"""


@pytest.mark.slow  # a Space in a process of its own; the files it is built from are checked by default above
def test_the_space_serves_and_grades_without_training_or_test_packages(tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "A01_DATA_DIR": str(tmp_path), "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", SPACE_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["reward"] is not None and all("needs torch" in label for label in result["local"])
