"""Which rollout sets the dashboard can show, and their records, read once per file version.

A *rollout set* is one episode log under the artifacts folder: an evaluation run
(``evals/v2/heuristic/episodes.jsonl.gz``), the human-play log of the Space
(``human/episodes.jsonl``), a trained model's evaluation, and so on. :func:`discover` finds them
and says what each one is; :func:`load_records` reads one.

Choices:

* A set is named by its folder relative to the artifacts root (``evals/v2/heuristic``), or, for a log
  not called ``episodes.jsonl[.gz]``, by the file's relative path without the extension
  (``training/run3/rollouts``). Names are stable and unique, so they key colours and tables.
* What a set *is* comes from a small declarative table (:data:`KIND_RULES`), the first matching rule
  winning. The oracle plays the reference fix: its runs validate the scenarios and the reward and are
  never a competitor, so its kind is ``validation`` and its label says so. A set counts as trained
  when its ``summary.json`` names a (non-null) adapter, at the top level or under ``run`` (every eval
  summary has ``run.adapter``, null for untrained agents), or, with no summary saying either, when a
  path part is ``training`` or ``adapters`` (a training run's own rollouts). A summary with a null
  adapter makes a set a baseline wherever it sits (the base model evaluated beside its adapter).
* Discovery goes by file name and skips ``scenarios/`` and ``models/`` (bundles, rejects, weights)
  and hidden folders wherever they are. A file whose first bytes are not an episode record (another
  tool's JSONL) is left out; an empty file is kept (the human log exists before its first episode).
  When a folder holds both ``episodes.jsonl`` and ``episodes.jsonl.gz``, the plain one wins: a resumed
  evaluation decompresses the shipped log and appends to it, so the plain copy is the newer one.
* :func:`default_pair` is what the Watch tab and the dashboard compare first, chosen to show a
  difference: the best trained agent against its own base model when it beats it (on the scenarios
  both played), else the heuristic against doing nothing (No-op), else a trained agent against its
  base even where it does not beat it, else the first two competitors; never the oracle. A trained
  set's base is the evaluation of the same model with no adapter (:func:`base_of`).
* :func:`load_records` caches parsed records per (path, mtime_ns, size): a static log is parsed once,
  the growing human log is re-read whenever it changes. The cache is bounded (LRU,
  :data:`CACHE_ENTRIES`) and thread-safe (Gradio serves callbacks from a thread pool). Lines the
  reader skipped (a torn last line, another record version) are not lost: :func:`load_problems`
  returns them for the same file version. Records are shared between callers: read, never mutate.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envcore.agents.evaluate import episode_metrics, latest_per_episode
from envcore.env.episode_log import EpisodeRecord, LogProblem, answer_key_hidden, find_episode_logs, read_episodes
from envcore.server.capped_log import log_generations

KINDS = ("trained", "baseline", "human", "validation", "other")
"""Kinds in display order: what was trained first, the oracle's validation runs after the competitors."""

SKIPPED_DIRS = frozenset({"scenarios", "models", "heldout"})
"""Not rollout sets of the Space: the caches, the models, and the runs on other scenario sets than the
test split (``heldout/``: the style-held-out and external splits), which a leaderboard of the test
split must not pool with it."""
CACHE_ENTRIES = 32


@dataclass(frozen=True)
class RolloutSet:
    name: str
    """The folder relative to the artifacts root (``evals/v2/heuristic``), or the log's relative path
    without its extension when it is not named ``episodes.jsonl[.gz]``."""
    path: Path
    """The log file."""
    kind: str
    """One of :data:`KINDS`."""
    label: str
    """What the set is, in words (:func:`describe`): ``Heuristic baseline (scripted) · evals/v2``,
    ``tiny-grpo after training · held-out eval · pipeline check, not a skilled agent``."""
    caveat: str = ""
    """Why the set's numbers say little about skill, or ``""``: :data:`PIPELINE_CHECK` for a model so
    small that its runs only show that the pipeline works end to end."""
    split: str = ""
    """The scenarios it played (:func:`played_on`): a split of the cache (``test``, ``test_styles``
    ...), :data:`LEARNED_SLICE` for a stage on the scenarios its run trained on, ``""`` when unknown."""
    cache: str = ""
    """The scenario cache it played (``v5``), from its ``summary.json``; ``""`` when unknown."""
    model: str = ""
    """The model its ``summary.json`` says was played (``run.model``); ``""`` for a scripted agent, a
    human log or a set with no summary."""

    @property
    def evaluated(self) -> bool:
        """Whether the set is an evaluation run (its folder has a ``summary.json``), not training rollouts."""
        return (self.path.parent / "summary.json").is_file()


LEARNED_SLICE = "trained"
"""The slice of a three-stage table (``training/<run>/eval/trained/<stage>``) that holds the scenarios
its run trained on."""


def played_on(name: str, folder: Path) -> tuple[str, str]:
    """``(split, cache)`` a set played: the slice a stage table's folder names
    (``training/<run>/eval/<slice>/<stage>``), else what its ``summary.json`` says (``run.split``,
    ``run.cache``); ``""`` for what is not known. Two sets of the same agent are told apart by these (:func:`ui.data.distinct_names`)."""
    run = _summary_run(folder)
    split, cache = run.get("split"), run.get("cache")
    parts = name.split("/")
    if "training" in parts and len(parts) >= 3 and parts[-3] == "eval" and parts[-1] in STAGE_WORDS:
        split = parts[-2]  # a stage table's slice says more than the summary's (the learned ones: "any")
    return (split if isinstance(split, str) else ""), (cache if isinstance(cache, str) else "")


def plays_learned_scenarios(rollout_set: "RolloutSet") -> bool:
    """Whether the set is a stage evaluated on the scenarios its run trained on
    (``training/<run>/eval/trained/<stage>``): what it learned, not a held-out result."""
    parts = rollout_set.name.split("/")
    return "training" in parts and len(parts) >= 3 and parts[-3] == "eval" and parts[-2] == LEARNED_SLICE \
        and parts[-1] in STAGE_WORDS


def _summary_adapter(folder: Path) -> bool | None:
    """Whether the folder's ``summary.json`` says an adapter was played (``adapter``, at the top level
    or under ``run``): ``True``/``False``, or ``None`` when there is no summary saying either."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict):
        return None
    run = summary.get("run")
    if summary.get("adapter") or (isinstance(run, dict) and run.get("adapter")):
        return True
    if "adapter" in summary or (isinstance(run, dict) and "adapter" in run):
        return False
    return None


def _trained(parts: tuple[str, ...], folder: Path) -> bool:
    said = _summary_adapter(folder)
    if len(parts) >= 3 and "training" in parts and parts[-3] == "eval" and parts[-1] in ("sft", "sft_grpo"):
        return True  # a trained stage of a three-stage table: the SFT model has weights of its own, no adapter
    return said is True or (said is None and ("training" in parts or "adapters" in parts))


# (kind, test on the set's name parts and its log's folder); the first match wins, so the oracle is
# validation even when it sits under evals/, a trained model's eval under evals/ is trained, and the
# base model's evaluation beside a training run (its summary says no adapter) is a baseline.
KIND_RULES: tuple[tuple[str, Callable[[tuple[str, ...], Path], bool]], ...] = (
    ("validation", lambda parts, folder: bool(parts) and parts[-1] == "oracle"),
    ("human", lambda parts, folder: "human" in parts),
    ("trained", _trained),
    ("baseline", lambda parts, folder: bool(parts) and parts[0] == "evals" or _summary_adapter(folder) is False),
)


def _kind(name: str, folder: Path) -> str:
    parts = tuple(name.split("/"))
    return next((kind for kind, test in KIND_RULES if test(parts, folder)), "other")


AGENT_WORDS = {
    "heuristic": "Heuristic baseline (scripted)",
    "noop": "No-op (submits the app unchanged)",
    "random": "Random actions",
    "deny_all": "Deny-all (the lazy fix)",
    "oracle": "Oracle: the reference fix (validation only)",
}
"""The scripted agents, in words."""
PIPELINE_CHECK = "pipeline check, not a skilled agent"
SMALL_STAGE = "tiny model taught a few apps, not a skilled agent"
"""The caveat of a tiny model's stage of an SFT run: it can learn the apps it was shown, no more."""
STAGE_WORDS = {"base": "base model (untrained)", "sft": "after SFT", "sft_grpo": "after SFT+GRPO"}
"""How the stages of a three-stage table (``training/<run>/eval/<slice>/<stage>``) are named."""
PIPELINE_CHECK_PARAMETERS = 10_000_000
"""A model with fewer parameters than this cannot play the game: its runs check the pipeline only."""


def _summary_run(folder: Path) -> dict:
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    run = summary.get("run") if isinstance(summary, dict) else None
    return run if isinstance(run, dict) else {}


def model_parameters(config: dict) -> int | None:
    """About how many parameters a decoder-only transformer of this ``config.json`` has (embeddings,
    attention and MLP weights), or ``None`` when the config does not say enough."""
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        vocab = int(config.get("vocab_size", 0))
        mlp = int(config.get("intermediate_size") or 4 * hidden)
        heads = int(config.get("num_attention_heads") or 1)
        head_dim = int(config.get("head_dim") or hidden // heads)
        kv = head_dim * int(config.get("num_key_value_heads") or heads)  # grouped-query attention: fewer K/V heads
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    attention = 2 * hidden * head_dim * heads + 2 * hidden * kv  # Q and O, then K and V
    return embeddings + layers * (attention + 3 * hidden * mlp)


def _model_folder(root: Path, model: str) -> Path | None:
    for candidate in (Path(model), root / model, root.parent / model):
        if (candidate / "config.json").is_file():
            return candidate
    return None


def is_pipeline_check(root: Path, folder: Path, name: str) -> bool:
    """Whether the set was played by a model too small to be skilled (:data:`PIPELINE_CHECK_PARAMETERS`):
    the model its ``summary.json`` (or its training run's ``training.json``) names, read from its
    ``config.json``."""
    models = [_summary_run(folder).get("model")]
    for parent in [folder, *folder.parents]:
        if parent == root.parent:
            break
        try:
            models.append(json.loads((parent / "training.json").read_text()).get("model"))
        except (OSError, ValueError, AttributeError):
            continue
    for model in filter(None, models):
        found = _model_folder(root, str(model))
        if found is None:
            continue
        try:
            parameters = model_parameters(json.loads((found / "config.json").read_text()))
        except (OSError, ValueError):
            continue
        if parameters is not None and parameters < PIPELINE_CHECK_PARAMETERS:
            return True
    return False


def describe(name: str, kind: str, folder: Path, root: Path) -> tuple[str, str]:
    """``(label, caveat)``: the set in words, where it comes from, and the caveat (if any) at the end."""
    parts = name.split("/")
    leaf, parent = parts[-1], "/".join(parts[:-1])
    run = _summary_run(folder)
    if kind == "human":
        words, where = "Human players", "this Space" if parent in ("", "human") else parent
    elif leaf in AGENT_WORDS:
        words, where = AGENT_WORDS[leaf], parent
    elif "training" in parts:
        training = parts[parts.index("training") + 1] if len(parts) > parts.index("training") + 1 else leaf
        if len(parts) >= 3 and parts[-3] == "eval" and leaf in STAGE_WORDS:  # eval/<slice>/<stage>: a stage table
            words = f"{training} {STAGE_WORDS[leaf]}"
            where = "the scenarios it learned" if parts[-2] == LEARNED_SLICE else f"held-out eval ({parts[-2]})"
            caveat = SMALL_STAGE if is_pipeline_check(root, folder, name) else ""
            return " · ".join(p for p in (words, where, caveat) if p), caveat
        if leaf in ("trained", "base") and "eval" in parts:
            words = f"{training} after training" if leaf == "trained" else f"{training}'s base model"
            where = "held-out eval"
        else:
            words, where = f"{training} training rollouts", ""
    elif run.get("model") and not run.get("adapter"):
        words, where = f"{leaf} (model, untrained)", parent
    else:
        words, where = leaf, parent
    caveat = PIPELINE_CHECK if is_pipeline_check(root, folder, name) else ""
    return " · ".join(p for p in (words, where, caveat) if p), caveat


HUMAN = "human"
LIVE_HUMAN = "human (this Space)"
"""The Space's own human log's set name when a shipped log is already called ``human``."""
HUMAN_LABEL = "Human players · this Space"


def discover(root: Path, *, human_log: Path | None = None) -> list[RolloutSet]:
    """Every episode log under ``root``, sorted by kind (:data:`KINDS`) then name; ``[]`` if ``root``
    does not exist. See the module docstring for what is skipped and how a set is named and kinded.
    ``human_log``: the log this Space writes its players' episodes to (``A01_HUMAN_LOG``), a set
    wherever it is; it replaces the default ``human/episodes.jsonl`` this Space is not writing."""
    root = Path(root)
    sets = []
    if root.is_dir():
        for name, path in find_episode_logs(root, skip_dirs=SKIPPED_DIRS, empty_ok=True).items():
            kind = _kind(name, path.parent)
            label, caveat = describe(name, kind, path.parent, root)
            split, cache = played_on(name, path.parent)
            model = _summary_run(path.parent).get("model")
            sets.append(RolloutSet(name=name, path=path, kind=kind, label=label, caveat=caveat, split=split,
                                   cache=cache, model=model if isinstance(model, str) else ""))
    if human_log is not None and not any(_same_file(s.path, Path(human_log)) for s in sets):
        default = root / HUMAN / "episodes.jsonl"
        sets = [s for s in sets if not (s.name == HUMAN and _same_file(s.path, default))]
        name = HUMAN if all(s.name != HUMAN for s in sets) else LIVE_HUMAN
        sets.append(RolloutSet(name=name, path=Path(human_log), kind="human", label=HUMAN_LABEL))
    return sorted(sets, key=lambda s: (KINDS.index(s.kind), s.name))


def logged_to(runtime: object) -> Path | None:
    """The file a runtime logs its episodes to (the Space's human log), or ``None``."""
    path = getattr(getattr(runtime, "logger", None), "path", None)
    return Path(path) if path else None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# ----- reading, cached per file version -------------------------------------------------------------
_Key = tuple[str, int, int]
_cache: OrderedDict[_Key, tuple[tuple[EpisodeRecord, ...], tuple[LogProblem, ...]]] = OrderedDict()
_lock = threading.Lock()


def _load(path: Path) -> tuple[tuple[EpisodeRecord, ...], tuple[LogProblem, ...]]:
    try:
        stat = path.stat()
    except OSError as exc:
        return (), (LogProblem(line=0, reason=f"cannot read the log: {exc}"),)
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    # Parsed outside the lock: a slow first read of one log must not block every other set. Two
    # threads may both parse the same new version; the result is the same, one copy is kept.
    problems: list[LogProblem] = []
    try:
        records = tuple(read_episodes(path, problems))
    except OSError as exc:  # removed or unreadable between stat and open
        return (), (LogProblem(line=0, reason=f"cannot read the log: {exc}"),)
    entry = (records, tuple(problems))
    with _lock:
        for stale in [k for k in _cache if k[0] == key[0] and k != key]:
            del _cache[stale]  # an older version of a growing log is never asked for again
        _cache[key] = entry
        _cache.move_to_end(key)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return entry


def load_records(rollout_set: RolloutSet) -> list[EpisodeRecord]:
    """The set's records in file order (every record: deduplication is the data layer's job). A file
    that cannot be read gives ``[]`` and a problem from :func:`load_problems`.

    The oracle's runs (kind ``validation``) on a held-out scenario come as outcomes only
    (:func:`~envcore.env.episode_log.outcome_only`): their patch is the scenario's reference fix, which
    the page never shows for a split whose hidden suite is told in words."""
    if rollout_set.kind == "human":  # the play log keeps older files beside it: read them all, oldest first
        return [r for path in (*log_generations(rollout_set.path), rollout_set.path) for r in _load(path)[0]]
    records = _load(rollout_set.path)[0]
    if rollout_set.kind != "validation":
        return list(records)
    return [answer_key_hidden(r) for r in records]


def file_version(rollout_set: RolloutSet) -> tuple[int, int] | None:
    """``(mtime_ns, size)`` of the set's log, what its cached records are keyed by (``None``: missing).
    Callers key their own derived tables (DataFrames, per-scenario indexes) by it too."""
    try:
        stat = rollout_set.path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def load_problems(rollout_set: RolloutSet) -> list[LogProblem]:
    """The lines the reader skipped in the file's current version (torn, not JSON, other version)."""
    return list(_load(rollout_set.path)[1])


def clear_cache() -> None:
    with _lock:
        _cache.clear()


# ----- what to compare first -------------------------------------------------------------------------
def scenario_rewards(rollout_set: RolloutSet) -> dict[str, float]:
    """By scenario, the reward the set scored, counted as every comparison counts it
    (:func:`envcore.agents.evaluate.compare`): abandoned episodes and infrastructure errors left out,
    the last record per (agent, scenario, seed) kept, the first of those per scenario."""
    rewards: dict[str, float] = {}
    for record in latest_per_episode(load_records(rollout_set)):
        metrics = episode_metrics(record)
        if metrics is not None:
            rewards.setdefault(record.scenario_id, metrics["reward"])
    return rewards


def _shared_parts(a: str, b: str) -> int:
    """How many leading path parts two set names share."""
    shared = 0
    for x, y in zip(a.split("/"), b.split("/")):
        if x != y:
            break
        shared += 1
    return shared


def lineage_base(root: Path, model: str) -> str | None:
    """The model an SFT stage started from, when ``model`` is one (its folder's ``sft.json`` names
    it); ``None`` for any other model."""
    folder = _model_folder(root, model)
    if folder is None:
        return None
    try:
        base = json.loads((folder / "sft.json").read_text()).get("base")
    except (OSError, ValueError, AttributeError):
        return None
    return base if isinstance(base, str) and base else None


def base_of(trained: RolloutSet, sets: list[RolloutSet], root: Path | None = None) -> RolloutSet | None:
    """The evaluation of ``trained``'s base model among ``sets``: an evaluated set whose
    ``summary.json`` names the same ``run.model`` with a null ``run.adapter`` (the base model played
    on its own), when ``trained`` played an adapter; a set that played a model alone is not compared
    with that same model's evaluation elsewhere (another slice, say), only with the models that model
    was trained from. When that model is an SFT stage (``root`` given, its folder's ``sft.json``), the
    model SFT started from comes first: SFT+GRPO and SFT are both compared with the untrained base.
    The closest one wins: the sibling folder (``training/<run>/eval/base`` beside
    ``training/<run>/eval/trained``) first, then the one sharing the longest part of the path.
    ``None`` when the trained set's summary names no model or no such evaluation exists."""
    run = _summary_run(trained.path.parent)
    model = run.get("model")
    if not model:
        return None
    chain = [model]
    if root is None and trained.path.name.startswith("episodes.jsonl"):
        root = trained.path.parent.parents[len(trained.name.split("/")) - 1]  # the folder the set's name is relative to
    if root is not None:
        while (earlier := lineage_base(root, chain[-1])) and earlier not in chain:
            chain.append(earlier)
    # a model played alone is not its own base (its evaluation on another slice is the same model):
    # only an adapter's model is a base of what was played
    wanted = chain if run.get("adapter") else chain[1:]
    for name in reversed(wanted):
        candidates = []
        for other in sets:
            run = _summary_run(other.path.parent)
            if (other.name != trained.name and other.kind != "validation" and other.evaluated
                    and run.get("model") == name and not run.get("adapter")):
                candidates.append(other)
        if candidates:
            return max(candidates, key=lambda s: (s.path.parent.parent == trained.path.parent.parent,
                                                  _shared_parts(s.name, trained.name), s.name))
    return None


@dataclass(frozen=True)
class TrainedAgainstBase:
    trained: RolloutSet
    base: RolloutSet
    mean_reward: float
    """The trained set's mean reward over every scenario it played."""
    gain: float
    """Its mean reward minus the base's, on the scenarios both played (``nan``: none in common)."""


def trained_against_base(sets: list[RolloutSet]) -> list[TrainedAgainstBase]:
    """Every evaluated trained set that has a base (:func:`base_of`), best mean reward first."""
    found = []
    for trained in (s for s in sets if s.kind == "trained" and s.evaluated):
        base = base_of(trained, sets)
        if base is None:
            continue
        mine, theirs = scenario_rewards(trained), scenario_rewards(base)
        common = sorted(mine.keys() & theirs.keys())
        gain = (statistics.fmean(mine[s] - theirs[s] for s in common) if common else float("nan"))
        mean = statistics.fmean(mine.values()) if mine else float("-inf")
        found.append(TrainedAgainstBase(trained, base, mean, gain))
    return sorted(found, key=lambda t: (-t.mean_reward, t.trained.name))


def _scripted_pair(competitors: list[RolloutSet]) -> tuple[str, str] | None:
    """``(noop, heuristic)`` from the same folder, evaluated ones first, then the latest folder by name."""
    by_folder: dict[str, dict[str, RolloutSet]] = {}
    for s in competitors:
        parent, _, leaf = s.name.rpartition("/")
        by_folder.setdefault(parent, {})[leaf] = s
    pairs = [(f["noop"], f["heuristic"]) for f in by_folder.values() if "noop" in f and "heuristic" in f]
    if not pairs:
        return None
    noop, heuristic = max(pairs, key=lambda p: (p[0].evaluated and p[1].evaluated, p[1].name))
    return noop.name, heuristic.name


def default_pair(sets: list[RolloutSet]) -> tuple[str | None, str | None]:
    """``(base, other)``: the two sets to compare first, the second the one expected to do better.

    1. The trained evaluation with the best mean reward among those that beat their base model on
       the scenarios both played (:func:`trained_against_base`): ``(base, trained)``. An adapter's
       evaluation comes before a model's own (a run's SFT+GRPO before its SFT stage), and an SFT
       run's stages are compared with the untrained model it started from (:func:`base_of`).
    2. Else doing nothing against the heuristic: ``(noop, heuristic)``, when both exist.
    3. Else the best trained evaluation against its base, though it does not beat it (still the one
       comparison that says what training did).
    4. Else the first two competitors; never the oracle (kind ``validation``).
    """
    competitors = [s for s in sets if s.kind != "validation"]
    against = trained_against_base(competitors)
    # a run's last stage (its adapter: SFT+GRPO) before an earlier stage of the same run (SFT alone)
    winners = [t for t in against if t.gain > 0]  # nan > 0 is False: nothing in common
    winner = next((t for t in winners if _summary_run(t.trained.path.parent).get("adapter")), None) or next(iter(winners), None)
    if winner is not None:
        return winner.base.name, winner.trained.name
    scripted = _scripted_pair(competitors)
    if scripted is not None:
        return scripted
    if against:
        return against[0].base.name, against[0].trained.name
    names = [s.name for s in competitors]
    return (names[0] if names else None), (names[1] if len(names) > 1 else None)
