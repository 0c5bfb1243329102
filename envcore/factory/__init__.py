"""The scenario factory: author -> spec -> bundle -> scenario check -> versioned cache.

The public entry points are re-exported here; each lives in a module of its own:

* :func:`author_spec` (``template_author``), :class:`LLMAuthor` (``llm_author``) and :func:`expand`
  (``draft``) turn a config and a seed into a :class:`~envcore.scenario.spec.ScenarioSpec`;
* :func:`compile_spec` (``compiler``) renders it into a :class:`~envcore.scenario.bundle.Bundle`;
* :func:`check_scenario` (``check``) proves a bundle valid;
* :func:`build` and :func:`verify_cache` (``build``) run those steps over many seeds or cache entries;
* :data:`BUG_CLASSES` (``bugs``) is the A01 bug-class registry and :data:`DOMAINS` (``domains``) the
  domain catalog; every bundle declares its identities (``identities.shadow_values``), which grading
  replaces with fresh ones (:mod:`envcore.verifier.shadow`).
"""

from envcore.factory.bugs import BUG_CLASSES, get_bug_class
from envcore.factory.build import BuildReport, build, verify_cache
from envcore.factory.check import CheckReport, check_scenario
from envcore.factory.compiler import compile_spec
from envcore.factory.config import FactoryConfig
from envcore.factory.domains import DOMAINS
from envcore.factory.draft import DraftError, expand
from envcore.factory.template_author import author_spec, draft_for

__all__ = [
    "BUG_CLASSES",
    "DOMAINS",
    "BuildReport",
    "CheckReport",
    "DraftError",
    "FactoryConfig",
    "author_spec",
    "build",
    "check_scenario",
    "compile_spec",
    "draft_for",
    "expand",
    "get_bug_class",
    "verify_cache",
]
