"""Factory configuration: which domains, bug classes, code styles and traps to generate, and how often.

Loaded from YAML (``configs/factory.yaml`` is the default); every field has a documented default so
an empty file is a valid config. The same config drives the template author and the LLM author, and
a feedback-loop *job* is a partial config merged over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from envcore.factory.bugs import BUG_CLASSES
from envcore.factory.domains import DOMAINS
from envcore.scenario.spec import CodeStyle


class CodeStyleWeights(BaseModel):
    """Relative weights of each value along each code-style axis.

    The default config draws the compact styles only; the styles written like production FastAPI
    projects (router modules, ORM stores, ``fastapi.security`` auth) are listed with weight 0, so the
    default builds what it always built. ``configs/realistic.yaml`` draws those instead."""

    model_config = ConfigDict(extra="forbid")

    layout: dict[str, float] = {"single_file": 1.0, "package": 1.0, "routers": 0.0, "routers_flat": 0.0}
    auth: dict[str, float] = {
        "depends": 1.0, "inline": 1.0, "decorator": 1.0, "oauth2_jwt": 0.0, "api_key": 0.0, "cookie": 0.0,
    }
    store: dict[str, float] = {"dict": 1.0, "sqlite": 1.0, "sqlalchemy": 0.0, "sqlmodel": 0.0}
    id_type: dict[str, float] = {"int": 1.0, "str": 1.0}

    @model_validator(mode="after")
    def _known_values(self) -> CodeStyleWeights:
        for axis in ("layout", "auth", "store", "id_type"):
            known = get_args(CodeStyle.model_fields[axis].annotation)
            weights = getattr(self, axis)
            unknown = sorted(set(weights) - set(known))
            if unknown:
                raise ValueError(f"unknown {axis} values {unknown}; known: {list(known)}")
            if not any(w > 0 for w in weights.values()):
                raise ValueError(f"at least one {axis} value needs a positive weight")
        return self


class TrapRates(BaseModel):
    """Probability that each trap is planted, when the scenario allows it."""

    model_config = ConfigDict(extra="forbid")

    public_route: float = Field(0.5, ge=0, le=1)
    admin_access: float = Field(0.7, ge=0, le=1)
    second_site: float = Field(0.35, ge=0, le=1)
    legacy_alias: float = Field(0.35, ge=0, le=1)


class FactoryConfig(BaseModel):
    """Everything the authors sample from."""

    model_config = ConfigDict(extra="forbid")

    domains: list[str] = Field(default_factory=lambda: sorted(DOMAINS))
    bug_classes: dict[str, float] = Field(default_factory=lambda: {name: 1.0 for name in BUG_CLASSES})
    """Bug class -> relative weight."""
    code_styles: CodeStyleWeights = Field(default_factory=CodeStyleWeights)
    traps: TrapRates = Field(default_factory=TrapRates)
    decoy_rate: float = Field(0.3, ge=0, le=1)
    """Probability of adding each optional route the bug does not need (decoys widen the search)."""
    splits: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "train": ["clinic", "invoices", "notes", "orders", "projects"],
            "val": ["documents"],
            "test": ["hr", "tickets"],
        }
    )
    """Held out by domain: a domain belongs to exactly one split."""
    held_out_styles: dict[str, list[str]] = Field(default_factory=dict)
    """Code-style values kept out of every other split (``{store: [sqlmodel], auth: [cookie]}``): a
    scenario drawn with any of them is filed under :attr:`held_out_split`, whatever its domain, so no
    training scenario is written in them and evaluation there measures skill on unseen idioms."""
    held_out_split: str = "test_styles"

    @model_validator(mode="after")
    def _known_names(self) -> FactoryConfig:
        unknown = [d for d in self.domains if d not in DOMAINS]
        if unknown:
            raise ValueError(f"unknown domains {unknown}; known: {sorted(DOMAINS)}")
        unknown = [b for b in self.bug_classes if b not in BUG_CLASSES]
        if unknown:
            raise ValueError(f"unknown bug classes {unknown}; known: {sorted(BUG_CLASSES)}")
        if not any(w > 0 for w in self.bug_classes.values()):
            raise ValueError("at least one bug class needs a positive weight")
        seen: dict[str, str] = {}
        for split, domains in self.splits.items():
            for d in domains:
                if d in seen:
                    raise ValueError(f"domain {d!r} is in both {seen[d]!r} and {split!r}: splits must be disjoint")
                seen[d] = split
        return self

    def split_for(self, bundle: Any) -> str:
        """The split a built bundle belongs to: :attr:`held_out_split` when its code style uses a
        held-out value, else its domain's."""
        style = getattr(getattr(bundle, "spec", None), "style", None)
        if style is not None and any(getattr(style, axis, None) in values
                                     for axis, values in self.held_out_styles.items()):
            return self.held_out_split
        return self.split_of(bundle.domain)

    def split_of(self, domain: str) -> str:
        for split, domains in self.splits.items():
            if domain in domains:
                return split
        return "train"

    @classmethod
    def load(cls, path: str | Path | None) -> FactoryConfig:
        if path is None:
            return cls()
        data = yaml.safe_load(Path(path).read_text()) or {}
        return cls.model_validate(data)

    def merged(self, delta: dict[str, Any]) -> FactoryConfig:
        """A copy with ``delta`` (a job's config changes) deep-merged over it."""

        def merge(base: Any, over: Any) -> Any:
            if isinstance(base, dict) and isinstance(over, dict):
                out = dict(base)
                for k, v in over.items():
                    out[k] = merge(base.get(k), v) if k in base else v
                return out
            return over

        return FactoryConfig.model_validate(merge(self.model_dump(), delta))
