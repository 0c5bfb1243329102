"""Factory jobs: a request for more of some kind of scenario, as config changes plus provenance.

The feedback loop writes jobs ("more tenant leaks at tier 3, fewer open redirects"); ``factory build
--job FILE`` merges the job's ``config`` over the base config and records the job's provenance in the
new cache's lineage, so every cache version says where it came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field


class FactoryJob(BaseModel):
    """One job file (YAML or JSON)."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any] = Field(default_factory=dict)
    """Partial :class:`~envcore.factory.config.FactoryConfig`, deep-merged over the base config."""
    parent: str | None = None
    """The cache version this job refines."""
    analysis: str | None = None
    """The failure analysis the job was derived from."""
    reason: str = ""
    """Why the job asks for what it asks for, in words."""

    @classmethod
    def load(cls, path: str | Path) -> "FactoryJob":
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})
