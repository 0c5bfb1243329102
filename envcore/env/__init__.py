"""The OpenEnv environment: actions, episodes, rewards, the server and its client.

Importing this package keeps OpenEnv's own web playground from loading with it.
``openenv.core.env_server`` imports its ``web_interface`` module eagerly, and that module imports
Gradio: about 4 s of CPU in every process that touches the environment (each CLI command, each
environment server, each rollout worker), for a playground this project never serves (the Space
mounts its own UI, ``ui/``). OpenEnv treats the module as optional: its import sits in ``except
ModuleNotFoundError`` and the names become ``None``. Marking the module absent in ``sys.modules``
takes that documented path. A process that asks for OpenEnv's playground
(``ENABLE_WEB_INTERFACE=true``), or that loaded it before this package, keeps it.
"""

from __future__ import annotations

import os
import sys

OPENENV_WEB_INTERFACE = "openenv.core.env_server.web_interface"

if os.environ.get("ENABLE_WEB_INTERFACE", "false").strip().lower() not in ("true", "1", "yes"):
    sys.modules.setdefault(OPENENV_WEB_INTERFACE, None)  # type: ignore[arg-type]
