"""``python -m envcore try``: a scenario's author plays patches of their own and sees what each earns."""

from __future__ import annotations

import json

from envcore.cli import main


def _scenario(shipped):
    return next(b for b in shipped if b.reference_fix.strip() and "app/main.py" in b.files)


def test_the_baseline_and_the_reference_fix_earn_what_grading_gives_them(shipped, tmp_path, capsys):
    bundle = _scenario(shipped)
    fix = tmp_path / "fix.diff"
    fix.write_text(bundle.reference_fix)
    broken = tmp_path / "broken.diff"
    broken.write_text("--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert main(["try", str(shipped.root), bundle.scenario_id[:10], str(fix), str(broken), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    untouched, fixed, wrong = out["episodes"]
    assert out["scenario"] == bundle.scenario_id
    assert untouched["patch"] == "untouched" and untouched["resolution"] == "no" and untouched["reward"] < 0.5
    assert fixed["resolution"] == "full" and fixed["reward"] > 0.9
    assert fixed["steps"][1]["tool"] == "run_tests" and "Visible probes" in fixed["steps"][1]["text"]
    assert wrong["steps"][0]["error"] and "nowhere.py" in wrong["steps"][0]["error"] and wrong["resolution"] == "no"


def test_the_text_report_names_each_patch_its_resolution_and_every_reward_component(shipped, tmp_path, capsys):
    bundle = _scenario(shipped)
    fix = tmp_path / "fix.diff"
    fix.write_text(bundle.reference_fix)
    assert main(["try", str(shipped.root), bundle.scenario_id, str(fix), "--no-baseline"]) == 0
    out = capsys.readouterr().out
    assert f"scenario {bundle.scenario_id}: {bundle.title}" in out
    assert f"== {fix}: FULL, reward +0." in out and "security_blocked" in out and "untouched" not in out


def test_a_wrong_scenario_or_patch_path_is_a_clear_error(shipped, tmp_path, capsys):
    assert main(["try", str(shipped.root), "zzzz-no-such"]) == 2
    assert "'zzzz-no-such' matches 0 scenarios" in capsys.readouterr().err
    assert main(["try", str(shipped.root), _scenario(shipped).scenario_id, str(tmp_path / "missing.diff")]) == 2
    assert "missing.diff: cannot read the patch" in capsys.readouterr().err
    assert main(["try", str(tmp_path / "no-cache"), "abc"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
