"""The private split: scenarios generated at evaluation time from a secret, verified like the shipped
ones, deterministic for a secret, and an evaluation on them that leaves behind hashes and results only.

The attacks come first: an evaluation folder (and its episode log) that any file of would hand a
reader the secret, a scenario's code, data or probes, or an id to look up; a private folder left on
disk after the run.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envcore.cache import DEFAULT_ROOT
from envcore.factory.check import check_scenario
from envcore.factory.private import (
    MIN_SEED_CHARS,
    PRIVATE_SEED_ENV,
    RECIPE,
    SEED_FLOOR,
    PrivateSplitError,
    _candidates,
    _families,
    private_cache,
)

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-for-the-private-split-tests-5b1e"
OTHER = "another-secret-for-the-private-split-7c2d"
COUNT = 3


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    """``COUNT`` private scenarios of :data:`SECRET`, generated once for the module."""
    cache = private_cache(SECRET, count=COUNT, workdir=tmp_path_factory.mktemp("work"), say=quiet)
    bundles = [cache.load(i) for i in cache.ids()]
    yield cache, bundles
    shutil.rmtree(cache.root, ignore_errors=True)


def run_cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "envcore", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def texts_of(folder: Path) -> dict[str, str]:
    """Every file under ``folder``, decompressed, as text."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            raw = path.read_bytes()
            out[str(path.relative_to(folder))] = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    return out


def secrets_of(bundles) -> dict[str, set[str]]:
    """What a private run must never write, by kind: each scenario's id (as a name of its own, not the
    start of its content hash), title, files' lines, people, tokens, probe paths and generator seed."""
    found: dict[str, set[str]] = {"id": set(), "title": set(), "code or data": set(), "people": set(),
                                  "probe path": set(), "generator seed": set()}
    for bundle in bundles:
        found["id"].add(bundle.scenario_id)
        found["title"].add(bundle.title)
        found["generator seed"].add(str(bundle.spec.seed))
        for text in bundle.files.values():
            found["code or data"].update(line.strip() for line in text.splitlines() if len(line.strip()) >= 40)
        for user in bundle.users:
            found["people"].update(v for v in (user.username, user.token) if v and len(v) >= 6)
        for probe in bundle.probes:
            found["probe path"].update(s.path for s in probe.steps if len(s.path) >= 12)
    return found


# ----- no secret, no split ---------------------------------------------------------------------------
def test_no_seed_is_an_error_that_says_how_to_give_one(monkeypatch, tmp_path):
    monkeypatch.delenv(PRIVATE_SEED_ENV, raising=False)
    with pytest.raises(PrivateSplitError) as caught:
        private_cache(count=1, workdir=tmp_path, say=quiet)
    message = str(caught.value)
    assert PRIVATE_SEED_ENV in message and "--private-seed-file" in message
    monkeypatch.setenv(PRIVATE_SEED_ENV, "   ")
    with pytest.raises(PrivateSplitError, match="no private seed"):
        private_cache(count=1, workdir=tmp_path, say=quiet)
    with pytest.raises(PrivateSplitError, match=f"{MIN_SEED_CHARS} needed"):  # a short secret is found by trying
        private_cache("1234", count=1, workdir=tmp_path, say=quiet)
    assert not list(tmp_path.iterdir())  # nothing was left behind


def test_the_private_folder_is_never_under_artifacts():
    with pytest.raises(PrivateSplitError, match="must not be written under"):
        private_cache(SECRET, count=1, workdir=DEFAULT_ROOT.parent / "private", say=quiet)
    assert not (DEFAULT_ROOT.parent / "private").exists()


# ----- what is generated -----------------------------------------------------------------------------
def test_the_split_is_private_in_a_folder_of_its_own_and_its_ids_are_content_hashes(private):
    cache, bundles = private
    assert cache.splits() == ["private"] and len(cache) == COUNT
    assert oct(cache.root.stat().st_mode & 0o777) == "0o700" and cache.root.name.startswith("a01-private-")
    for bundle in bundles:
        assert bundle.content_hash().startswith(bundle.scenario_id)
        assert bundle.spec.seed >= SEED_FLOOR  # outside every range the shipped caches were built from
    manifest = (cache.root / "manifest.json").read_text()
    assert SECRET not in manifest and SECRET not in "".join(b.model_dump_json() for b in bundles)
    assert not (cache.root / "rejects.jsonl").exists()


@pytest.mark.slow  # generating the split already checks each
def test_the_private_scenarios_pass_the_whole_scenario_check(private, runner):
    _, bundles = private
    for bundle in bundles:
        report = check_scenario(bundle, runner, fail_fast=False)
        assert report.ok, report.summary()


@pytest.mark.slow  # two more private splits generated
def test_the_same_seed_gives_the_same_scenarios_and_another_seed_others(private, tmp_path):
    cache, _ = private
    again = private_cache(SECRET, count=COUNT, workdir=tmp_path, say=quiet)
    other = private_cache(OTHER, count=COUNT, workdir=tmp_path, say=quiet)
    hashes = lambda c: sorted(r["sha256"] for r in c.rows)  # noqa: E731
    assert hashes(again) == hashes(cache)
    assert not set(hashes(other)) & set(hashes(cache))


def test_the_candidates_follow_the_test_splits_mix():
    """Only drafts the shipped recipe files under ``test``, its families in the recipe's proportions
    as the test split has them (the realistic family files its held-out styles elsewhere)."""
    families = _families()
    candidates = list(_candidates(SECRET.encode(), families, 4000))
    from envcore.factory.template_author import draft_for

    drafts = [(families[f][1], draft_for(families[f][1], seed)) for f, seed in candidates]
    assert {d.domain for _, d in drafts} == set(families[0][1].splits["test"])
    assert not [d for c, d in drafts if d.style.store in c.held_out_styles.get("store", [])
                or d.style.auth in c.held_out_styles.get("auth", [])]
    realistic = sum(1 for f, _ in candidates if RECIPE[f][0] == "realistic") / len(candidates)
    assert 0.15 < realistic < 0.25  # 400 seeds x 0.6 kept against 1,000: 19%; cache v5's test split: 64 of 322
    assert len(candidates) == len(set(candidates))


# ----- an evaluation on the private split --------------------------------------------------------------
@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """``eval --split private --n 3`` of the heuristic, the secret in the environment and the temporary
    directory a folder of the test's own (so that what is left there can be listed)."""
    base = tmp_path_factory.mktemp("eval")
    out, scratch = base / "out", base / "tmp"
    scratch.mkdir()
    env = {**os.environ, PRIVATE_SEED_ENV: SECRET, "TMPDIR": str(scratch)}
    proc = run_cli("eval", "--agent", "heuristic", "--split", "private", "--n", str(COUNT), "--out", str(out),
                   "--parallel", "2", env=env)
    return proc, out, scratch


def test_the_eval_folder_holds_no_secret_no_code_no_data_no_probe_and_no_id(evaluated, private):
    proc, out, _ = evaluated
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = texts_of(out)
    assert set(files) == {"episodes.jsonl", "summary.json", "report.md"}
    hashes = {b.content_hash() for b in private[1]}
    leaks = []
    for name, text in {**files, "the command's output": proc.stdout + proc.stderr}.items():
        assert SECRET not in text, f"{name} holds the secret"
        bare = text
        for digest in hashes:  # a content hash may be named; its first 16 digits on their own may not
            bare = bare.replace(digest, "<hash>")
        for kind, values in secrets_of(private[1]).items():
            leaks += [f"{name}: {kind} {value[:60]!r}" for value in values if value in bare]
    assert not leaks, leaks[:10]


def test_the_episode_log_keeps_hashes_and_results_only(evaluated, private):
    _, out, _ = evaluated
    hashes = {b.content_hash() for b in private[1]}
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == COUNT and {r["scenario_hash"] for r in lines} == hashes
    for r in lines:
        assert r["scenario_id"] == r["scenario_hash"] and r["split"] == "private" and r["cache_version"] == "private"
        assert r["diff"] == "" and r["verification"] is None and r["hints"] == []
        assert r["reward"] is not None and r["reward_breakdown"]["resolution"] in ("full", "partial", "no")
        assert all(c["detail"] == "" for c in r["reward_breakdown"]["components"])
        assert r["steps"] and all(set(s) == {"step", "action", "observation", "elapsed_ms"} for s in r["steps"])
        assert all(set(s["action"]) == {"tool"} and s["observation"] == {} for s in r["steps"])


def test_the_summary_marks_the_private_split_and_the_set_by_one_hash(evaluated, private):
    _, out, _ = evaluated
    summary = json.loads((out / "summary.json").read_text())
    import hashlib

    digest = hashlib.sha256("\n".join(sorted(b.content_hash() for b in private[1])).encode()).hexdigest()
    assert summary["split"] == "private" and summary["run"]["split"] == "private"
    assert summary["private"]["count"] == COUNT and summary["private"]["scenario_hashes_sha256"] == digest
    assert summary["private"]["generated_and_verified_seconds"] > 0
    assert summary["episodes"] == COUNT and summary["run"]["played"] == COUNT
    assert set(summary["by"]["domain"]) <= {"hr", "tickets"}


def test_the_private_folder_is_gone_when_the_eval_ends(evaluated):
    _, _, scratch = evaluated
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("a01-private-")]


def test_a_seed_file_gives_the_same_set_and_resumes_the_run(evaluated, tmp_path):
    _, out, _ = evaluated
    seed_file = tmp_path / "seed"
    seed_file.write_text(SECRET + "\n")
    seed_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != PRIVATE_SEED_ENV}
    proc = run_cli("eval", "--agent", "heuristic", "--split", "private", "--n", str(COUNT), "--out", str(out),
                   "--private-seed-file", str(seed_file), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"0 played, {COUNT} resumed" in proc.stdout
    assert SECRET not in proc.stdout + proc.stderr


def test_the_command_line_refuses_a_missing_seed_and_misplaced_options(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != PRIVATE_SEED_ENV}
    missing = run_cli("eval", "--agent", "noop", "--split", "private", "--n", "1", "--out", str(tmp_path / "a"), env=env)
    assert missing.returncode != 0 and "no private seed" in missing.stderr and "Traceback" not in missing.stderr
    stray = run_cli("eval", "--agent", "noop", "--n", "1", "--out", str(tmp_path / "b"),
                    "--private-seed-file", str(tmp_path / "seed"))
    assert stray.returncode != 0 and "goes with --split private" in stray.stderr
    remote = run_cli("eval", "--agent", "noop", "--split", "private", "--url", "http://127.0.0.1:9",
                     "--out", str(tmp_path / "c"), env={**env, PRIVATE_SEED_ENV: SECRET})
    assert remote.returncode != 0 and "--url, --provider and --cache do not apply" in remote.stderr
    unread = run_cli("eval", "--agent", "noop", "--split", "private", "--out", str(tmp_path / "d"),
                     "--private-seed-file", str(tmp_path / "nowhere"), env=env)
    assert unread.returncode != 0 and "cannot read the private seed file" in unread.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "d").exists()


def test_an_eval_folder_of_another_set_is_not_mixed_into_this_one(evaluated, tmp_path):
    _, out, _ = evaluated
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "episodes.jsonl").write_text((out / "episodes.jsonl").read_text())
    env = {**os.environ, PRIVATE_SEED_ENV: OTHER, "TMPDIR": str(tmp_path)}
    proc = run_cli("eval", "--agent", "heuristic", "--split", "private", "--n", "1", "--out", str(mixed), env=env)
    assert proc.returncode != 0 and "not in this private set" in proc.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("a01-private-")]


# ----- the leaderboard -------------------------------------------------------------------------------
def test_the_leaderboard_and_the_headline_mark_a_row_of_the_private_split():
    from tests.test_ui_data import make_record
    from ui import dashboard_tab, data

    sets = {"evals/private/heuristic": [make_record(f"s{i}", agent="heuristic", reward=0.6) for i in range(5)],
            "evals/v5/noop": [make_record(f"s{i}", agent="noop", reward=0.0, resolution="no") for i in range(5)]}
    info = {"evals/private/heuristic": data.SetInfo("Heuristic baseline (scripted) · evals/private", kind="baseline",
                                                    split="private", cache="private"),
            "evals/v5/noop": data.SetInfo("No-op · evals/v5", kind="baseline", split="test", cache="v5")}
    board = data.leaderboard_table(data.episode_frame(sets), info, samples=20)
    shown = data.leaderboard_display(board).set_index("agent or player")
    assert shown.loc["Heuristic baseline (scripted)", "about"].startswith(data.PRIVATE_BADGE)
    assert data.PRIVATE_BADGE not in shown.loc["No-op", "about"]
    frame = data.episode_frame(sets)
    text = dashboard_tab.headline_markdown(board, data.pooled_stats(frame.iloc[0:0]), {"evals/private/heuristic"})
    assert f"**Heuristic baseline (scripted)** ({data.PRIVATE_BADGE} · evals/private)" in text.replace("\\", "")


def test_a_private_run_is_discovered_as_such_and_shown_at_first(evaluated, tmp_path):
    from ui import artifact_sets, dashboard_tab

    _, out, _ = evaluated
    artifacts = tmp_path / "artifacts"
    shutil.copytree(out, artifacts / "evals" / "private" / "heuristic")
    sets = artifact_sets.discover(artifacts)
    assert [(s.name, s.split, s.cache) for s in sets] == [("evals/private/heuristic", "private", "private")]
    assert dashboard_tab.default_shown(sets) == ["evals/private/heuristic"]
    assert dashboard_tab.set_info(sets[0]).split == "private"


def test_the_private_run_is_measured_on_scenarios_the_shipped_cache_does_not_hold(evaluated, shipped):
    _, out, _ = evaluated
    shipped_hashes = {row["sha256"] for row in shipped.rows}
    logged = {json.loads(line)["scenario_hash"] for line in (out / "episodes.jsonl").read_text().splitlines()}
    assert logged and not logged & shipped_hashes
    assert not re.search(r"\b[0-9a-f]{16}\b", (out / "report.md").read_text())  # no id in the report


def test_an_interrupted_run_keeps_what_finished_scrubbed_and_deletes_the_private_folder(monkeypatch, tmp_path):
    from envcore.agents import private_eval

    made = []

    def interrupted(*args, **kwargs):
        made.append(kwargs["log"].parent)
        real(*args, **kwargs)  # the episode finishes; then Ctrl-C
        raise KeyboardInterrupt

    real = private_eval.run_rollouts
    monkeypatch.setattr(private_eval, "run_rollouts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        private_eval.evaluate_private(tmp_path / "out", "noop", seed=SECRET, n=1, say=quiet)
    assert made and not made[0].exists()
    [line] = (tmp_path / "out" / "episodes.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["scenario_id"] == record["scenario_hash"] and record["verification"] is None


def test_too_few_scenarios_passing_their_checks_is_an_error_not_a_smaller_split(monkeypatch, tmp_path):
    from envcore.factory import private as private_module
    from envcore.factory.build import BuildReport

    def refuse_all(config, seeds, **options):
        return BuildReport(rejects=[{"seed": s, "stage": "check", "reason": "a canary earned more"} for s in seeds])

    monkeypatch.setattr(private_module, "build", refuse_all)
    with pytest.raises(PrivateSplitError, match=r"only 0 of 2 private scenarios .* after 12 builds .*a canary"):
        private_cache(SECRET, count=2, workdir=tmp_path, say=quiet)
    assert not list(tmp_path.iterdir())


def test_bench_private_prints_seconds_and_scenarios_per_second(tmp_path):
    proc = run_cli("bench", "private", "--n", "1", env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"private split of 1 \(\d compact, \d realistic\): generated and verified in [\d.]+ s = "
                     r"[\d.]+ scenarios/s", proc.stdout)
    assert not list(tmp_path.iterdir())
