"""The from-scratch training job (``python -m envcore job``): its smoke run through the real command,
what it writes and how it is imported, the checks on its demonstrations, what travels with it, and
the parts of its loops (SFT batches and schedule, GRPO advantages, update direction, scenario pool).

The smoke run is the GPU job's own code path at toy scale on a CPU (``--preset smoke``): its numbers
mean nothing, that every stage runs and writes the shipped format is what is tested.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import random
import re
import statistics
import tarfile
from pathlib import Path

import pytest

from envcore.sandbox.app_runtime import distribution_name as normal
from envcore.training.grpo_loop import ScenarioPool, group_advantages, micro_batches, policy_gradient_step
from envcore.training.job_files import GPU_IMAGE, JOB_WHEELS, RESULTS, export_results, import_results
from envcore.training.sft_loop import learning_rate, length_batches

REPO = Path(__file__).resolve().parents[1]


# ----- the smoke run, through the command ----------------------------------------------------------
def test_smoke_job_runs_every_stage_and_writes_the_shipped_format(smoke_job):
    out, artifacts, _ = smoke_job
    log = (out / "job.log").read_text()
    for line in ("sandbox: ", "SFT: ", "GRPO: ", "results after sft:", "results after sft evaluation:",
                 "results after sft+grpo:", "done in"):
        assert line in log, f"{line!r} missing from the job's output:\n{log[-2000:]}"
    back = sorted(p.name for p in out.iterdir() if p.is_file())
    assert RESULTS in back and any(name.endswith(".safetensors") for name in back)
    assert len(back) <= 8 and all(p.stat().st_size <= 16 * 2**20 for p in out.iterdir() if p.is_file())
    assert not [p for p in out.iterdir() if p.is_dir()]  # the working folder is elsewhere: only these come back
    from envcore.training.curves import grpo_rows

    assert [r["step"] for r in grpo_rows(out)] == [1, 2]  # the curve reads a job's folder as it came back

    run = artifacts / "training" / "smoke"
    table = json.loads((run / "stages.json").read_text())
    assert table["stages"] == ["base", "sft", "sft+grpo"]
    assert set(table["slices"]) == {"test", "test_styles", "external"}
    for block in table["slices"].values():
        assert set(block["stages"]) == {"base", "sft", "sft+grpo"}
        assert set(block["comparisons"]) == {"sft vs base", "sft+grpo vs sft", "sft+grpo vs base"}
        for entry in block["stages"].values():
            assert entry["folder"].startswith("artifacts/training/smoke/eval/")
            assert (artifacts.parent / entry["folder"] / "summary.json").is_file()
    assert "| test | base |" in (run / "stages.md").read_text()

    training = json.loads((run / "training.json").read_text())
    assert training["kind"] == "scratch-job" and training["model"] == "artifacts/models/smoke"
    assert training["job"]["sandbox"]["self_check"]["expert"] == "full"
    assert training["job"]["sandbox"]["self_check"]["untouched"] != "full"
    assert "layers" in training["job"]["sandbox"] and training["job"]["sandbox"]["mode"]
    clock = training["job"]["clock"]
    assert clock["elapsed_s"] <= clock["budget_s"] and {"setup", "sft", "eval_base", "eval_sft", "grpo",
                                                         "eval_final"} <= set(clock["stages"])
    assert training["stages"]["sft"]["steps"] >= 1 and training["stages"]["grpo"]["steps"] == 2
    timing = training["stages"]["grpo"]["timing"]
    assert timing["seconds_per_step_median"] == pytest.approx(
        statistics.median(r["metrics"]["step_seconds"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                          if r["run"] == "smoke"), abs=1e-3)
    assert training["reward_configuration_hash"]


def test_imported_job_loads_as_a_model_and_its_metrics_as_trackio_runs(smoke_job):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envcore.training.metrics import read_metrics

    _, artifacts, _ = smoke_job
    model_dir = artifacts / "models" / "smoke"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.chat_template and model.config.vocab_size == len(tokenizer)
    assert json.loads((model_dir / "sft.json").read_text())["base"] == "artifacts/models/smoke-base"
    from safetensors import safe_open

    with safe_open(str(next(model_dir.glob("*.safetensors"))), "pt") as weights:
        assert {str(weights.get_tensor(k).dtype) for k in weights.keys()} == {"torch.float16"}  # 16-bit to ship
    frame = read_metrics(artifacts / "trackio")
    runs = set(frame["run"])
    assert {"smoke", "smoke-sft"} <= runs
    assert {"env/reward", "loss", "frac_reward_zero_std"} <= set(frame[frame["run"] == "smoke"]["metric"])
    assert "loss" in set(frame[frame["run"] == "smoke-sft"]["metric"])


def test_the_space_reads_an_imported_job(smoke_job):
    from ui import artifact_sets, stages_view

    _, artifacts, _ = smoke_job
    tables = stages_view.read_stage_tables(artifacts)
    assert [t["run"] for t in tables] == ["smoke"] and tables[0]["parameters"]
    sets = artifact_sets.discover(artifacts)
    names = {s.name: s for s in sets}
    assert names["training/smoke/eval/test/sft_grpo"].kind == "trained"
    base = artifact_sets.base_of(names["training/smoke/eval/test/sft_grpo"], sets, artifacts)
    assert base is not None and base.name == "training/smoke/eval/test/base"


def test_importing_twice_needs_overwrite(smoke_job, tmp_path):
    out, _, _ = smoke_job
    first = import_results(out, tmp_path)
    assert first["run"] == "smoke"
    with pytest.raises(FileExistsError):
        import_results(out, tmp_path)
    assert import_results(out, tmp_path, overwrite=True)["run"] == "smoke"


def test_a_results_archive_cannot_write_outside_artifacts(tmp_path):
    source = tmp_path / "back"
    source.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("training/evil/training.json", b"{}"), ("../escaped.txt", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (source / RESULTS).write_bytes(buffer.getvalue())
    (tmp_path / "artifacts").mkdir()
    with pytest.raises(tarfile.OutsideDestinationError):
        import_results(source, tmp_path / "artifacts")
    assert not (tmp_path / "escaped.txt").exists()


def test_export_splits_a_large_archive_and_keeps_to_eight_files(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    run = work / "training" / "big"
    run.mkdir(parents=True)
    (run / "noise.bin").write_bytes(random.Random(0).randbytes(20 * 2**20))  # incompressible
    (work / "models" / "big").mkdir(parents=True)
    (work / "models" / "big" / "model.safetensors").write_bytes(b"w" * 1000)
    written = export_results(work, "big", out)
    assert [p.name for p in written] == [f"{RESULTS}.00", f"{RESULTS}.01", "model.safetensors"]
    assert all(p.stat().st_size <= 15 * 2**20 for p in written)
    (run / "noise.bin").write_bytes(b"small now")
    assert [p.name for p in export_results(work, "big", out)] == [RESULTS, "model.safetensors"]
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors", RESULTS]  # the old parts are gone


# ----- the demonstrations it learns from ------------------------------------------------------------
def _demos_file(tmp_path: Path, change: dict) -> Path:
    from envcore.training.demos import read_demos

    demos = list(read_demos(REPO / "artifacts" / "demos" / "tiny-learn"))
    demos[1] = demos[1].model_copy(update=change)
    path = tmp_path / "demos.jsonl"
    path.write_text("".join(d.model_dump_json() + "\n" for d in demos))
    return path


@pytest.mark.parametrize("change, said", [
    ({"split": "test"}, "from the 'test' split"),
    ({"resolution": "partial"}, "not a full fix"),
    ({"scenario_id": "__test__"}, "holds out for evaluation"),
    ({"scenario_hash": "__test__"}, "holds out for evaluation"),
], ids=["split-test", "partial-fix", "held-out-id", "held-out-hash"])
def test_a_demonstration_the_job_may_not_learn_from_stops_it(tmp_path, change, said):
    from envcore.cache import ScenarioCache
    from envcore.training.scratch_job import JobError, load_demonstrations

    cache = ScenarioCache.open(None)
    test_row = next(r for r in cache.rows if r["split"] == "test")
    change = {k: (test_row["scenario_id"] if k == "scenario_id" else test_row["sha256"]) if v == "__test__" else v
              for k, v in change.items()}
    with pytest.raises(JobError, match=re.escape(said)):
        load_demonstrations(_demos_file(tmp_path, change), cache)


def test_packed_demonstrations_read_back_as_written(tmp_path):
    from envcore.training.demos import read_demos
    from envcore.training.job_files import pack_demos, read_packed_demos

    source = REPO / "artifacts" / "demos" / "tiny-learn"
    figures = pack_demos(source, tmp_path)
    assert figures["packed_bytes"] < figures["raw_bytes"]
    assert read_packed_demos(tmp_path / "demos.jsonl.xz") == list(read_demos(source))
    assert read_packed_demos(tmp_path) == list(read_demos(source))


# ----- what travels ----------------------------------------------------------------------------------
def test_every_module_the_job_imports_travels_or_is_on_the_gpu_image(smoke_job):
    from envcore.sandbox.app_runtime import APP_DISTRIBUTIONS, requirement_closure

    _, _, modules = smoke_job
    owners = importlib.metadata.packages_distributions()
    project = normal("a01-repair-gym")  # this checkout, installed editable: it travels as its files
    imported = {normal(d) for m in modules for d in owners.get(m.split(".")[0], [])} - {project}
    apps = requirement_closure(APP_DISTRIBUTIONS)  # what the zygote loads for the apps under repair
    carried = {normal(name) for name in JOB_WHEELS} | {normal(name) for name in GPU_IMAGE}
    missing = sorted((imported | apps) - carried)
    assert not missing, f"the job imports {missing}, which neither travel (JOB_WHEELS) nor are on the GPU image"
    assert not {normal(n) for n in JOB_WHEELS} & {normal(n) for n in GPU_IMAGE}


def test_every_carried_wheel_is_installed_here_at_a_pinned_version():
    pins = {}
    for path in (REPO / "requirements").glob("*.txt"):  # requirements.txt takes these, one file per role
        for line in path.read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                pins[normal(name.split("[")[0])] = version
    for name in JOB_WHEELS:
        assert pins.get(normal(name)) == importlib.metadata.version(name), f"{name} is not pinned in requirements/"


# ----- the loops' parts -------------------------------------------------------------------------------
@pytest.mark.parametrize("rewards, size, expected", [
    ([1.0, 0.0, 1.0, 0.0], 2, [1.0, -1.0, 1.0, -1.0]),
    ([0.5, 0.5, 0.2, 0.8], 2, [0.0, 0.0, -1.0, 1.0]),
    ([0.0, 0.0, 0.0], 3, [0.0, 0.0, 0.0]),
], ids=["two-groups", "flat-group-zero", "all-flat"])
def test_group_advantages(rewards, size, expected):
    assert group_advantages(rewards, size) == pytest.approx(expected, abs=1e-3)


def test_the_pool_retires_scenarios_without_spread_and_returns_to_those_with_it():
    pool = ScenarioPool([f"s{i}" for i in range(8)], random.Random(0))
    first = pool.draw(4)
    assert len(set(first)) == 4
    for s in first:
        rewards = [1.0, 0.0] if s == first[0] else [0.0, 0.0]
        for _ in range(2):
            pool.record(s, rewards, ["full" if r else "no" for r in rewards])
    assert pool.active() == [first[0]]
    second = pool.draw(4)
    assert first[0] in second and not set(second) & set(first[1:])
    report = pool.report()
    assert report["with_spread"] == [first[0]] and set(report["always_failed"]) == set(first[1:])


def test_length_batches_stay_within_the_token_budget_and_cover_every_row():
    lengths = [random.Random(i).randint(10, 500) for i in range(300)]
    batches = length_batches(lengths, 1000, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(300))
    assert all(len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 1000 for b in batches)
    assert all(max(lengths[i] for i in b) * len(b) <= 1000 for b in micro_batches(lengths, 1000) if len(b) > 1)


def test_learning_rate_warms_up_then_anneals_to_a_tenth():
    assert learning_rate(1.0, 0, 10, 0.0) == pytest.approx(0.1)
    assert learning_rate(1.0, 9, 10, 0.0) == pytest.approx(1.0)
    assert learning_rate(1.0, 50, 10, 0.5) == pytest.approx(0.55)
    assert learning_rate(1.0, 50, 10, 1.0) == pytest.approx(0.1)
    assert learning_rate(1.0, 50, 10, 7.0) == pytest.approx(0.1)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["rewarded", "penalised"])
def test_the_policy_gradient_makes_a_rewarded_reply_likelier(tiny_model, sign):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    prompt, reply = [5, 6, 7, 8], [20, 21, 22, 23]
    tokens, mask = prompt + reply, [0] * len(prompt) + [1] * len(reply)

    def logp() -> float:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1].float()
        picked = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]
        return float((picked * torch.tensor(mask[1:], dtype=torch.float32)).sum())

    before = logp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    result = policy_gradient_step(model, optimizer, [(tokens, mask), (prompt + [30, 31, 32, 33], mask)],
                                  [sign, -sign], pad_id=0, tokens_per_batch=64)
    after = logp()
    assert result["episodes_with_advantage"] == 2 and result["learned_tokens"] == 8
    assert (after - before) * sign > 0


def test_generation_in_16_bits_follows_the_trained_weights_and_leaves_them_in_32(tiny_model):
    """Decoding with float32 weights under autocast re-casts every weight at every step (8.5x slower on
    the GPU job's model, docs/training.md), so generation runs on a 16-bit copy. The attacks on that
    copy: going stale (GRPO updates the model, rollouts keep sampling the old policy) and turning the
    trained model itself to 16 bits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envcore.training.generation import ModelGeneration

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    generation = ModelGeneration(model, tokenizer, temperature=None, autocast_dtype=torch.bfloat16)
    prompts = [[5, 6, 7, 8], [9, 10]]
    first = [g.ids for g in generation.generate(prompts, [6, 6])]
    # an update (here: noise), then the same generator again: it must sample the updated policy, as a
    # generator built afresh on the updated model does
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter))
    second = [g.ids for g in generation.generate(prompts, [6, 6])]
    fresh = [g.ids for g in ModelGeneration(model, tokenizer, temperature=None,
                                            autocast_dtype=torch.bfloat16).generate(prompts, [6, 6])]
    assert fresh != first and second == fresh
    assert {p.dtype for p in generation.inference_model().parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(p.requires_grad for p in model.parameters())


def test_a_stage_played_alone_is_never_its_own_base(smoke_job):
    """The SFT stage's evaluation on one slice is the same model as on another: neither is the other's
    base, so the Space never pairs two slices of one model (a comparison on no common scenario)."""
    from ui import artifact_sets

    _, artifacts, _ = smoke_job
    sets = artifact_sets.discover(artifacts)
    for pair in artifact_sets.trained_against_base(sets):
        assert pair.base.kind == "baseline" and pair.base.name.rsplit("/", 1)[0] == pair.trained.name.rsplit("/", 1)[0]
    assert artifact_sets.default_pair(sets)[0].endswith("/base")


# ----- the learning curve and the budget's estimate ---------------------------------------------------
def _metrics(folder: Path, rewards: list[float]) -> Path:
    folder.mkdir(parents=True)
    rows = [{"run": "x-sft", "step": 1, "metrics": {"loss": 1.0}}]
    rows += [{"run": "x", "step": i + 1, "metrics": {"env/reward": r, "env/full_fix": max(0.0, r)}}
             for i, r in enumerate(rewards)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize("treated, control, verdict", [
    ([[0.1, 0.2, 0.3, 0.5, 0.6, 0.7], [0.0, 0.2, 0.2, 0.4, 0.6, 0.6], [0.1, 0.1, 0.3, 0.4, 0.5, 0.7]],
     [[0.1, 0.2, 0.1, 0.2, 0.1, 0.2]] * 3, "rose"),
    ([[0.1, 0.3, 0.1, 0.3, 0.1, 0.3], [0.3, 0.1, 0.3, 0.1, 0.3, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2, 0.2]],
     [[0.1, 0.2, 0.1, 0.2, 0.1, 0.2]] * 3, "no clear change"),
    ([[0.5, 0.6, 0.7, 0.8, 0.9, 1.0]] * 3, [[0.5, 0.6, 0.7, 0.8, 0.9, 1.0]] * 3, "no clear change"),
], ids=["rises-above-control", "noise", "control-rises-as-much"])
def test_the_curve_says_rose_only_when_the_treated_runs_rise_beyond_their_controls(tmp_path, treated, control, verdict):
    from envcore.training.curves import learning_curves, render_curves

    t = [_metrics(tmp_path / f"t{i}", r) for i, r in enumerate(treated)]
    c = [_metrics(tmp_path / f"c{i}", r) for i, r in enumerate(control)]
    result = learning_curves(t, c)
    assert result["metrics"]["env/reward"]["verdict"] == verdict
    assert len(result["metrics"]["env/reward"]["treated"]["per_step"]) == 6
    assert f"verdict: **{verdict}**" in render_curves(result)


def test_one_treated_run_gets_no_verdict_however_far_it_falls(tmp_path):
    from envcore.training.curves import learning_curves

    treated = _metrics(tmp_path / "t", [0.6, 0.4, 0.3, 0.2, 0.2, 0.1])
    control = _metrics(tmp_path / "c", [0.6, 0.6, 0.5, 0.6, 0.7, 0.6])
    block = learning_curves([treated], [control])["metrics"]["env/reward"]
    assert block["verdict"].startswith("one treated run")
    assert block["steps_below_control"] == 5 and block["steps_above_control"] == 0
    assert block["mean_difference_after_first"] == pytest.approx(-0.36)


def test_a_run_stopped_before_grpo_is_named_not_averaged_as_nothing(tmp_path):
    from envcore.training.curves import learning_curves

    treated = _metrics(tmp_path / "t", [0.6, 0.4, 0.3])
    stopped = _metrics(tmp_path / "c", [])
    with pytest.raises(ValueError, match=r"c: no GRPO step in its metrics"):
        learning_curves([treated], [stopped])


def test_one_run_per_arm_gets_a_band_from_each_steps_own_episodes(tmp_path):
    """A step's mean is a sample of its episodes: with their spread and number (training.json), the
    treated-minus-control difference gets an interval per step, and only the steps whose interval
    excludes zero are counted as below (or above) the control."""
    from envcore.training.curves import learning_curves, render_curves

    def run(folder: Path, rewards: list[float], spread: float) -> Path:
        _metrics(folder, rewards)
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        for row in rows[1:]:
            row["metrics"]["reward_std"] = spread
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "training.json").write_text(json.dumps({"config": {"spec": {"grpo": {"scenarios_per_step": 4,
                                                                                       "group_size": 8}}}}))
        return folder

    control = run(tmp_path / "c", [0.5] * 6, 0.5)
    far = learning_curves([run(tmp_path / "far", [0.5, 0.1, 0.1, 0.45, 0.1, 0.1], 0.5)], [control])
    band = far["metrics"]["env/reward"]["episode_band"]
    # 0.4 below with 32 episodes a side and spreads of 0.5: interval half-width 0.245, wholly below zero;
    # 0.05 below is inside it
    assert band["episodes_per_step"] == [32, 32] and band["steps_wholly_below"] == 4 and band["steps_wholly_above"] == 0
    assert band["per_step"][1]["high"] == pytest.approx(-0.4 + 1.96 * (0.25 / 16) ** 0.5)
    assert "wholly below zero in 4 steps" in render_curves(far)
    noisy = learning_curves([run(tmp_path / "noisy", [0.5, 0.1, 0.1, 0.45, 0.1, 0.1], 2.0)], [control])
    assert noisy["metrics"]["env/reward"]["episode_band"]["steps_wholly_below"] == 0  # the same means, wider spread


def test_the_estimate_follows_the_jobs_own_budget_rules():
    from envcore.training.job_estimate import estimate, render_estimate
    from envcore.training.job_spec import GPU

    measured = {"demonstrations": 10_000, "read_s": 2.0, "tokenizer_s": 8.0, "encode_per_s": 50.0,
                "mean_tokens": 3000.0, "kept_share": 1.0, "env_s_per_episode": 1.0}
    result = estimate(GPU, measured, budget_s=540, cores=16, tflops=100, ms_per_token=10, install_s=20)
    assert result["setup_s"] == pytest.approx(20 + 2 + 8 + 10_000 / (50 * 15) + 10, abs=0.1)
    one = result["one_evaluation_s"]
    assert result["sft_s"] == pytest.approx(min((540 - result["setup_s"]) * GPU.sft.share,
                                                540 - result["setup_s"] - one - 2 * (one * 1.2 + 10)), abs=0.2)
    total = result["setup_s"] + result["sft_s"] + result["evaluate_base_and_sft_s"] + result["grpo_s"]
    assert total + result["final_evaluation_s"] <= 540 + 1e-6
    assert result["evaluation_episodes_per_stage"] == 96 + 48 + 10
    slower = estimate(GPU, measured, budget_s=540, cores=16, tflops=100, ms_per_token=40, install_s=20)
    assert slower["grpo_steps"] < result["grpo_steps"]  # slower decoding leaves GRPO fewer steps
    # decoding as slow as float32 weights under autocast made it (95 ms a step): SFT gives up its time, and
    # the estimate says that three evaluations alone do not fit
    fp32 = estimate(GPU, measured, budget_s=540, cores=16, tflops=61, ms_per_token=95, install_s=20)
    assert fp32["sft_s"] < (540 - fp32["setup_s"]) * GPU.sft.share and fp32["grpo_steps"] == 0
    assert result["fits"] and not fp32["fits"]
    assert "does not fit" in render_estimate(fp32) and "does not fit" not in render_estimate(result)


def test_demonstrations_made_in_parts_combine_into_one_set(tmp_path):
    from envcore.training.demos import Collection, SourceCount, combine, read_demos, write

    source = REPO / "artifacts" / "demos" / "tiny-learn"
    demos = list(read_demos(source))
    manifest = json.loads((source / "manifest.json").read_text())
    cache = type("Cache", (), {"root": Path(manifest["cache"]["root"]), "manifest": {"version": manifest["cache"]["version"]}})()
    halves = [demos[:3], demos[2:]]  # one demonstration in both parts
    for i, half in enumerate(halves):
        write(Collection(half, {"expert": SourceCount(offered=len(half), kept=len(half))}), tmp_path / f"part{i}",
              cache=cache, extra={"seconds": 10.0})
    combined = combine([tmp_path / "part0", tmp_path / "part1"], tmp_path / "all")
    assert list(read_demos(tmp_path / "all")) == demos
    assert combined["demonstrations"] == 4 and combined["seconds"] == 20.0
    assert combined["sources"]["expert"]["dropped"]["duplicate"] == 1 and combined["sources"]["expert"]["kept"] == 4
    other = json.loads((tmp_path / "part1" / "manifest.json").read_text()) | {"cache": {"root": "v2", "version": "v2"}}
    (tmp_path / "part1" / "manifest.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="different caches"):
        combine([tmp_path / "part0", tmp_path / "part1"], tmp_path / "again")


def test_demonstrations_encoded_in_several_processes_match_one(tiny_model):
    from transformers import AutoTokenizer

    from envcore.training.demos import read_demos
    from envcore.training.scratch_job import encode_demonstrations

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    demos = list(read_demos(REPO / "artifacts" / "demos" / "tiny-learn")) * 16  # 64: enough to spread
    one = encode_demonstrations(demos, tokenizer, max_length=8192, workers=1)
    two = encode_demonstrations(demos, tokenizer, max_length=8192, workers=2)
    assert sorted(map(str, two.rows)) == sorted(map(str, one.rows)) and two.tokens == one.tokens
    assert two.scenarios == one.scenarios and two.learned_tokens == one.learned_tokens


def test_run_script_is_valid_bash_and_runs_the_job_on_the_carried_files(tmp_path):
    import subprocess

    from envcore.training.job_files import write_run_script

    folder = tmp_path / "build" / "gpu-job"
    folder.mkdir(parents=True)
    script = write_run_script(folder, repo=tmp_path, budget=500)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert 'BUDGET="${BUDGET:-500}"' in text and "--no-index --no-deps" in text and '"$HERE/wheels.tar.xz"' in text
    assert 'cd "$HERE/../.."' in text  # the repository's root, from the folder
    assert 'job run --demos "$HERE/demos.jsonl.xz"' in text and 'tee "$OUT/job.log"' in text
    with pytest.raises(ValueError, match="outside the repository"):
        write_run_script(tmp_path, repo=folder)
    unset = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert unset.returncode != 0 and "set OUT" in unset.stderr  # no OUT: says so, runs nothing


def _tiny_wheel(folder: Path) -> Path:
    """A minimal, valid pure-Python wheel, built by hand (nothing is downloaded)."""
    import base64
    import hashlib
    import zipfile

    files = {"a01probe/__init__.py": b"VALUE = 42\n" + b"# padding\n" * 200,
             "a01probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: a01probe\nVersion: 1.0\n",
             "a01probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "a01probe-1.0.dist-info/RECORD,,\n"
    path = folder / "a01probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("a01probe-1.0.dist-info/RECORD", record)
    return path


def test_packed_wheels_unpack_as_run_sh_does_and_install(tmp_path):
    import subprocess
    import sys
    import zipfile

    from envcore.training.job_files import pack_wheels

    (tmp_path / "in").mkdir()
    wheel = _tiny_wheel(tmp_path / "in")
    pack = pack_wheels([wheel], tmp_path / "wheels.tar.xz")
    unpacked = tmp_path / "unpacked"
    # the line run.sh runs on the GPU machine
    subprocess.run([sys.executable, "-c", "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], "
                    "filter='data')", str(pack), str(unpacked)], check=True)
    restored = unpacked / wheel.name
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(restored) as b:
        assert {i.filename: a.read(i) for i in a.infolist()} == {i.filename: b.read(i) for i in b.infolist()}
        assert {i.compress_type for i in b.infolist()} == {zipfile.ZIP_STORED}
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                    str(tmp_path / "site"), str(restored)], check=True)
    assert (tmp_path / "site" / "a01probe" / "__init__.py").read_bytes().startswith(b"VALUE = 42")


def test_the_decoding_bench_times_both_ways_through_the_jobs_generation():
    from envcore.training.decode_bench import bench_decoding
    from envcore.training.job_spec import PRESETS

    said: list[str] = []
    result = bench_decoding(PRESETS["smoke"], batch=3, prompt_tokens=16, new_tokens=5, repeats=1, say=said.append)
    assert set(result["ways"]) == {"float32 weights under autocast", "16-bit copy"}
    assert all(way["ms_per_step"] >= 0 and way["prefill_ms"] > 0 for way in result["ways"].values())
    assert result["device"] == "CPU" and "decodes" in said[-1]
