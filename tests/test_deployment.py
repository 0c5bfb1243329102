"""The Space's deployment files agree with each other and with what Hugging Face expects of a Docker
Space: README front matter (``sdk: docker``, ``app_port``), a Dockerfile that runs ``python app.py``
as a non-root user on that port with Gradio's analytics off, and a requirements file it installs
with the CPU build of torch. (No Docker engine runs here, so the image itself is not built in the
tests; these are the checks that can fail without one.)"""

from __future__ import annotations

import re
from pathlib import Path

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


def test_the_image_runs_the_readme_command_as_a_non_root_user():
    text = dockerfile()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^EXPOSE\s+7860$", text, re.M)
    assert re.search(r'^CMD \["python", "app.py"\]$', text, re.M)
    assert "GRADIO_ANALYTICS_ENABLED=False" in text and "PORT=7860" in text
    assert "pip install -r requirements.txt" in text and "pip install -r requirements.txt && python app.py" in \
        (ROOT / "README.md").read_text()


def test_the_image_installs_the_pinned_cpu_torch():
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned and f"torch=={pinned.group(1)}" in dockerfile()
    assert "whl/cpu" in dockerfile()
