"""The factory config: defaults spelled out in configs/factory.yaml, validation, and job merging."""

from __future__ import annotations

from pathlib import Path

import pytest

from envcore.factory.config import FactoryConfig
from envcore.factory.template_author import draft_for

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_config_file_equals_the_built_in_defaults():
    assert FactoryConfig.load(ROOT / "configs" / "factory.yaml") == FactoryConfig()


def test_empty_config_file_means_the_defaults(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert FactoryConfig.load(empty) == FactoryConfig()


@pytest.mark.parametrize(
    "data, message",
    [
        ({"domains": ["atlantis"]}, "unknown domains"),
        ({"bug_classes": {"sql_injection": 1.0}}, "unknown bug classes"),
        ({"bug_classes": {"idor_read": 0}}, "positive weight"),
        ({"traps": {"public_route": 1.5}}, "less than or equal to 1"),
        ({"surprise": True}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_configs_are_refused_with_a_reason(data, message):
    with pytest.raises(ValueError, match=message):
        FactoryConfig.model_validate(data)


def test_merge_replaces_lists_and_deep_merges_mappings():
    merged = FactoryConfig().merged({"domains": ["notes"], "traps": {"second_site": 0.9}})
    assert merged.domains == ["notes"]
    assert merged.traps.second_site == 0.9 and merged.traps.public_route == FactoryConfig().traps.public_route


def test_config_steers_the_template_author():
    only = FactoryConfig(domains=["orders"], bug_classes={"open_redirect": 1.0},
                         code_styles={"layout": {"package": 1.0}, "auth": {"decorator": 1.0},
                                      "store": {"sqlite": 1.0}, "id_type": {"str": 1.0}})
    for seed in range(20):
        draft = draft_for(only, seed)
        assert draft.domain == "orders" and draft.bug_class == "open_redirect"
        assert (draft.style.layout, draft.style.auth, draft.style.store, draft.style.id_type) == (
            "package", "decorator", "sqlite", "str")


def test_trap_rates_of_zero_plant_no_optional_traps():
    cfg = FactoryConfig(traps={"public_route": 0, "admin_access": 0, "second_site": 0, "legacy_alias": 0})
    for seed in range(30):
        draft = draft_for(cfg, seed)
        assert set(draft.traps) <= {"second_site", "legacy_alias"}  # forced only by variants that need them


def test_held_out_styles_file_every_scenario_written_in_them_under_their_own_split():
    from envcore.cache import ScenarioCache
    from envcore.factory.config import FactoryConfig

    cache = ScenarioCache.open(None)
    config = FactoryConfig(held_out_styles={"store": ["sqlite"], "auth": ["decorator"]})
    bundles = [cache.load(i) for i in cache.ids()[:60]]
    for bundle in bundles:
        held_out = bundle.spec.style.store == "sqlite" or bundle.spec.style.auth == "decorator"
        split = config.split_for(bundle)
        assert (split == "test_styles") == held_out, (bundle.spec.style, split)
        if not held_out:
            assert split == config.split_of(bundle.domain)
    assert {config.split_for(b) for b in bundles} >= {"test_styles", "train"}
