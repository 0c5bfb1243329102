"""Bounded episodes: every abuse of size is a clear invalid action or a cut observation, never a crash.

An agent controls what it writes (any path, any bytes, as much as its actions carry) and how often
it reads. Its files are held to :mod:`envcore.filetree`'s limits when a patch is made (a patch that
breaks one is refused, and nothing changes); every observation, episode-log record and human-log
record is held to ``LIMITS`` (:mod:`envcore.env.actions`). One test per abuse, named after it, then
one that measures the process's memory around an abusive session.
"""

from __future__ import annotations

import ctypes
import gc
import json
import time
import weakref
from pathlib import Path

import pytest

from envcore import filetree
from envcore.env.actions import LIMITS, ApplyPatch
from envcore.env.episode import Episode
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.patching import make_diff, parse_patch
from envcore.runner.loader import safe_relpath

ADDED = "+++ b/"


# ----- filetree: which paths and file sets can be written -----------------------------------------------
@pytest.mark.parametrize("path, fragment, description", [
    ("", "empty", "no name at all"),
    ("/etc/passwd", "absolute", "an absolute path"),
    ("../outside.py", "escapes the app folder", "climbing out"),
    ("app/../../outside.py", "escapes the app folder", "climbing out from inside"),
    ("./app/x.py", "write it as 'app/x.py'", "a '.' component"),
    ("app//x.py", "empty name", "two slashes"),
    ("app/", "empty name", "a trailing slash"),
    ("app\\x.py", "backslash", "a Windows separator"),
    ("app/x\x00.py", "control", "NUL"),
    ("app/x\n.py", "control", "a newline"),
    ("app/x\t.py", "control", "a tab"),
    ("app/x\x85.py", "control", "U+0085"),
    ("app/x\u2028.py", "control", "U+2028"),
    ("app/\ud800.py", "not valid Unicode", "a lone surrogate"),
    ("app/" + "a" * 256 + ".py", "at most 255 bytes", "a name over NAME_MAX"),
    ("app/" + "é" * 128 + ".py", "at most 255 bytes", "a name of 128 characters but 259 bytes"),
    ("/".join(["d"] * filetree.MAX_DEPTH) + "/x.py", "names deep", "too deep"),
    ("/".join(["d" * 200] * 3) + "/x.py", "bytes long", "a path over its byte limit"),
    ("app/__pycache__/x.py", "reserved", "Python's bytecode cache"),
])
def test_a_path_that_can_never_be_written_is_named_with_the_reason(path, fragment, description):
    problem = filetree.path_problem(path)
    assert problem is not None and fragment in problem, description
    assert len(problem) < 400  # a sentence, never the whole path echoed back


@pytest.mark.parametrize("path", ["app/main.py", "app/routers/admin.py", "données/é.py", "a" * 255,
                                  "/".join(["d"] * (filetree.MAX_DEPTH - 1)) + "/x.py", "app/.hidden", "app/x y.py"])
def test_an_ordinary_path_can_be_written(path):
    assert filetree.path_problem(path) is None
    assert safe_relpath(path) == path  # and the runner reads it the same way


@pytest.mark.parametrize("files, fragment, description", [
    ({"data/seed.json": "{}", "data/seed.json/x.py": ""}, "is a file, so it cannot also be a folder", "file and folder"),
    ({"app": "", "app/routers/admin.py": ""}, "'app' is a file", "a file in the way of a deep path"),
    ({"app/main.py": "x = '\ud800'\n"}, "not valid Unicode", "a lone surrogate in the content"),
    ({f"f{i}.py": "" for i in range(filetree.MAX_FILES + 1)}, "files; at most", "too many files"),
    ({"big.py": "é" * (filetree.MAX_FILE_BYTES // 2 + 1)}, "a file is at most", "a file over its byte limit"),
    ({f"f{i}.py": "x" * filetree.MAX_FILE_BYTES for i in range(filetree.MAX_TOTAL_BYTES // filetree.MAX_FILE_BYTES + 1)},
     "in all; at most", "a workspace over its byte limit"),
    ({"app/main.py": "", "../x.py": ""}, "escapes", "any path problem"),
])
def test_a_file_set_that_can_never_be_written_is_named_with_the_reason(files, fragment, description):
    problem = filetree.tree_problem(files)
    assert problem is not None and fragment in problem, description


def test_a_file_set_as_large_as_the_limits_allow_can_be_written():
    per_file = filetree.MAX_TOTAL_BYTES // 8
    files = {f"pkg/m{i}.py": "x" * per_file for i in range(8)}
    files.update({f"pkg/e{i}.py": "" for i in range(filetree.MAX_FILES - 8)})
    assert filetree.tree_problem(files) is None


# ----- episodes -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cache():
    from envcore.cache import ScenarioCache

    return ScenarioCache.open(None)  # the newest shipped cache


@pytest.fixture(scope="module")
def bundle(cache):
    return cache.load(cache.ids()[0])


@pytest.fixture(scope="module")
def entry(bundle) -> tuple[str, str]:
    """The file of the module the entrypoint names and the app's name in it (``app.main:app``)."""
    module, _, name = bundle.entrypoint.partition(":")
    stem = module.replace(".", "/")
    return (f"{stem}.py" if f"{stem}.py" in bundle.files else f"{stem}/__init__.py"), name


@pytest.fixture
def episode(bundle, sandbox):
    ep = Episode(bundle, sandbox, max_steps=200)
    yield ep
    ep.close_live()


def _new_file(path: str, text: str) -> str:
    return make_diff({}, {path: text})


def _refused_and_unchanged(episode: Episode, action: dict, fragment: str) -> str:
    before, invalid = dict(episode.files), episode.invalid_actions
    observation = episode.step(action)
    assert observation.error and fragment in observation.error, observation.error
    assert "nothing changed" in observation.error and not observation.done
    assert episode.files == before and episode.invalid_actions == invalid + 1
    return observation.error


def _lines(width: int, count: int) -> str:
    return "".join(f"{i:06d}" + "x" * (width - 7) + "\n" for i in range(count))


def test_a_patch_that_grows_the_workspace_past_its_cap_is_refused(episode):
    chunk = _lines(1000, 250)  # 250 KB: one diff's worth
    added = 0
    while True:
        observation = episode.step({"tool": "apply_patch", "diff": _new_file(f"pad/p{added}.py", chunk)})
        if observation.error:
            break
        added += 1
    total = sum(len(t.encode()) for t in episode.files.values())
    assert "in all; at most" in observation.error and "nothing changed" in observation.error
    assert total <= filetree.MAX_TOTAL_BYTES < total + len(chunk) and f"pad/p{added}.py" not in episode.files
    assert episode.step({"tool": "submit"}).reward is not None  # the capped workspace is graded as any other


def test_a_patch_past_the_file_count_cap_is_refused(episode):
    extra = filetree.MAX_FILES - len(episode.files) + 1
    diff = "".join(_new_file(f"many/f{i}.py", "x = 1\n") for i in range(extra))
    _refused_and_unchanged(episode, {"tool": "apply_patch", "diff": diff}, f"at most {filetree.MAX_FILES}")
    fits = "".join(_new_file(f"many/f{i}.py", "x = 1\n") for i in range(extra - 1))
    assert episode.step({"tool": "apply_patch", "diff": fits}).error is None


def test_a_file_grown_past_its_size_cap_is_refused(episode):
    path = "app/big.py"
    assert episode.step({"tool": "apply_patch", "diff": _new_file(path, "")}).error is None
    while True:
        grown = {**episode.files, path: episode.files[path] + _lines(1000, 250)}
        observation = episode.step({"tool": "apply_patch", "diff": make_diff(episode.files, grown)})
        if observation.error:
            break
    assert "a file is at most" in observation.error and "'app/big.py'" in observation.error
    assert len(episode.files[path]) <= filetree.MAX_FILE_BYTES


def test_a_code_file_that_would_be_a_folder_of_a_data_file_is_refused(episode):
    _refused_and_unchanged(episode, {"tool": "apply_patch", "diff": _new_file("data/seed.json/evil.py", "x = 1\n")},
                           "'data/seed.json' is a file")


def test_deleting_a_data_file_makes_room_for_a_folder_in_its_place(episode):
    # A patch may change any file, data files too (envcore.scenario.patch_scope): nothing is put back.
    delete = make_diff(episode.files, {p: t for p, t in episode.files.items() if p != "data/seed.json"})
    assert episode.step({"tool": "apply_patch", "diff": delete}).error is None
    assert episode.step({"tool": "apply_patch", "diff": _new_file("data/seed.json/evil.py", "")}).error is None
    assert "data/seed.json/evil.py" in episode.files and "data/seed.json" not in episode.files


def test_a_file_named_like_an_existing_folder_is_refused(episode):
    folder = next(path.rsplit("/", 1)[0] for path in sorted(episode.files) if "/" in path)  # one the app has
    _refused_and_unchanged(episode, {"tool": "apply_patch", "diff": _new_file(folder, "x = 1\n")},
                           f"'{folder}' is a file")


@pytest.mark.parametrize("path, fragment", [
    ("app/" + "n" * 300 + ".py", "at most 255 bytes"),
    ("/".join(["deep"] * 20) + ".py", "names deep"),
    ("app/x\x1b[31m.py", "control"),
    ("app/__pycache__/main.cpython-311.pyc", "reserved"),
    ("app//main2.py", "empty name"),
    ("./app/main2.py", "write it as 'app/main2.py'"),
])
def test_a_path_the_filesystem_refuses_is_an_invalid_patch(episode, path, fragment):
    diff = f"--- /dev/null\n{ADDED}{path}\n@@ -0,0 +1 @@\n+x = 1\n"
    assert parse_patch(diff)[0].new_path == path
    _refused_and_unchanged(episode, {"tool": "apply_patch", "diff": diff}, fragment)


def test_a_lone_surrogate_that_bypasses_validation_is_refused_at_the_patch(episode):
    # Over the wire a lone surrogate is refused (or replaced) by validation; an in-process caller can
    # still hand over a tool built without validation. The file set itself is checked.
    diff = _new_file("app/odd.py", "x = 1\n").replace("x = 1", "x = '\ud800'")
    _refused_and_unchanged(episode, ApplyPatch.model_construct(diff=diff), "not valid Unicode")


def test_an_edit_that_makes_a_file_too_large_is_refused(episode, entry, monkeypatch):
    path, _ = entry
    text = episode.files[path]
    monkeypatch.setattr(filetree, "MAX_FILE_BYTES", max(4000, len(text.encode()) + 100))
    _refused_and_unchanged(episode, {"tool": "edit_file", "path": path, "search": text[:30],
                                     "replace": text[:30] + "#" * 5000}, "a file is at most")


def test_reading_a_huge_line_cuts_the_line_with_a_marker(episode):
    line = "y = '" + "z" * 60_000 + "'"
    assert episode.step({"tool": "apply_patch", "diff": _new_file("app/long.py", line + "\nx = 1\n")}).error is None
    observation = episode.step({"tool": "read_file", "path": "app/long.py"})
    assert observation.error is None and observation.result["total_lines"] == 2
    shown = observation.result["content"].split("\n")
    assert len(shown[0]) <= LIMITS["line_chars"] and "characters; cut]" in shown[0] and shown[1] == "x = 1"
    assert len(observation.text) <= LIMITS["observation_chars"]


def test_reading_many_long_lines_stops_at_the_observation_cap_and_says_where_to_go_on(episode):
    assert episode.step({"tool": "apply_patch", "diff": _new_file("app/wide.py", _lines(1999, 120))}).error is None
    observation = episode.step({"tool": "read_file", "path": "app/wide.py"})
    result = observation.result
    assert len(observation.text) <= LIMITS["observation_chars"] and len(result["content"]) <= LIMITS["observation_chars"]
    assert result["start_line"] == 1 and 1 < result["end_line"] < 120 and result["total_lines"] == 120
    following = episode.step({"tool": "read_file", "path": "app/wide.py", "start_line": result["end_line"] + 1})
    assert following.result["content"].startswith(f"{result['end_line']:06d}")


def test_reading_the_same_large_file_many_times_keeps_every_observation_bounded(episode):
    assert episode.step({"tool": "apply_patch", "diff": _new_file("app/wide.py", _lines(1999, 120))}).error is None
    for _ in range(20):
        observation = episode.step({"tool": "read_file", "path": "app/wide.py"})
        assert len(json.dumps(observation.model_dump(mode="json"))) < 3 * LIMITS["observation_chars"]


def test_a_search_that_matches_every_long_line_is_cut_at_the_observation_cap(episode):
    assert episode.step({"tool": "apply_patch", "diff": _new_file("app/wide.py", _lines(1000, 200))}).error is None
    observation = episode.step({"tool": "search_code", "query": "x", "max_results": LIMITS["search_results"]})
    assert observation.result["truncated"] and len(observation.text) <= LIMITS["observation_chars"]
    assert len(json.dumps(observation.result)) <= LIMITS["observation_chars"]


def test_view_diff_of_a_huge_diff_is_cut_between_files(episode):
    for i in range(3):
        assert episode.step({"tool": "apply_patch", "diff": _new_file(f"app/pad{i}.py", _lines(1000, 40))}).error is None
    observation = episode.step({"tool": "view_diff"})
    diff = observation.result["diff"]
    assert len(diff) <= LIMITS["observation_chars"] and "the rest, from here, is left out" in diff
    assert len(parse_patch(diff)) in (1, 2)  # what is shown still parses: whole files and a note
    assert len(episode.state().diff) <= LIMITS["observation_chars"]
    assert len(episode.diff()) > 120_000  # the diff graded at submit is whole


def test_an_error_that_echoes_a_huge_path_is_cut(episode):
    diff = f"--- a/{'p' * 100_000}.py\n+++ b/{'p' * 100_000}.py\n@@ -1 +1 @@\n-a\n+b\n"
    observation = episode.step({"tool": "apply_patch", "diff": diff})
    assert observation.error and len(observation.error) <= LIMITS["error_chars"] and "characters; cut]" in observation.error
    assert len(observation.text) <= LIMITS["error_chars"] + 10


def test_an_app_that_fails_with_a_huge_message_is_reported_in_a_bounded_run_tests(episode, entry):
    path, _ = entry
    text = episode.files[path]
    loud = text + '\nraise RuntimeError("e" * 1_000_000)\n'
    assert episode.step({"tool": "edit_file", "path": path, "search": text, "replace": loud}).error is None
    observation = episode.step({"tool": "run_tests"})
    assert observation.error is None and observation.result["loaded"] is False
    assert len(observation.result["load_error"]) <= LIMITS["error_chars"]
    assert len(observation.text) <= LIMITS["observation_chars"]
    final = episode.step({"tool": "submit"})
    assert final.done and final.reward is not None and len(final.result["load_error"] or "") <= LIMITS["error_chars"]


BIG_RESPONSE = '''

from fastapi import Response as _Response


@{app}.get("/api/_huge")
async def _huge():
    headers = {f"x-h{i}": "v" * 3000 for i in range(60)}
    return _Response("b" * 900_000, headers=headers)
'''


def test_a_huge_response_body_and_its_headers_are_cut(episode, entry):
    path, app = entry
    text = episode.files[path]
    route = BIG_RESPONSE.replace("{app}", app)
    assert episode.step({"tool": "edit_file", "path": path, "search": text, "replace": text + route}).error is None
    observation = episode.step({"tool": "http_request", "path": "/api/_huge"})
    result = observation.result
    assert observation.error is None and result["status"] == 200, observation.text[:500]
    assert result["body_truncated"] and len(result["body"]) <= 4000
    assert len(result["headers"]) <= LIMITS["headers"]
    assert all(len(v) <= LIMITS["response_header_chars"] for v in result["headers"].values())
    assert len(observation.text) <= LIMITS["observation_chars"]


def test_a_large_request_body_is_kept_bounded_in_the_log(episode, bundle):
    body = {"blob": "b" * (LIMITS["json_body_bytes"] - 100)}
    user = bundle.users[0].username
    observation = episode.step({"tool": "http_request", "method": "POST", "path": "/api/x", "as_user": user,
                                "json_body": body})
    assert observation.error is None
    logged = episode.records[-1].action["json_body"]["blob"]
    assert len(logged) <= LIMITS["log_field_chars"] and "characters; cut]" in logged


# ----- the episode log and the human log ------------------------------------------------------------------
def _abusive_episode(step, steps: int, user: str = "~nobody") -> None:
    """Max-size patches, huge reads and large request bodies, in turn, through ``step(action)``
    (requests as ``user``; the default is refused before it reaches the app)."""
    chunk = _lines(1000, 250)
    for i in range(steps):
        kind = i % 3
        if kind == 0:
            observation = step({"tool": "apply_patch", "diff": _new_file(f"pad/p{i}.py", chunk)})
        elif kind == 1:
            observation = step({"tool": "read_file", "path": f"pad/p{i - 1}.py"})
        else:
            observation = step({"tool": "http_request", "method": "POST", "path": "/api/nothing", "as_user": user,
                                "json_body": {"blob": "b" * (LIMITS["json_body_bytes"] - 100)}})
        assert observation.done or len(observation.text) <= LIMITS["observation_chars"]


def _longest_text(value) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max([_longest_text(k) for k in value] + [_longest_text(v) for v in value.values()], default=0)
    if isinstance(value, list):
        return max((_longest_text(v) for v in value), default=0)
    return 0


def test_an_abusive_episode_is_logged_whole_under_the_record_cap(cache, bundle, sandbox, tmp_path):
    from envcore.env.environment import A01Environment, Runtime
    from envcore.env.sampler import CurriculumSampler

    log = tmp_path / "episodes.jsonl"
    logger = EpisodeLogger(log, max_record_bytes=1024 * 1024)
    runtime = Runtime(sampler=CurriculumSampler(cache), sandbox=sandbox,
                      logger=logger)
    env = A01Environment(runtime)
    try:
        env.reset(scenario=bundle.scenario_id, max_steps=60)
        _abusive_episode(env.step, 59)
        final = env.step({"tool": "submit"})
        assert final.done and final.reward is not None
    finally:
        env.close()
        logger.close()
    raw = log.read_bytes()
    assert raw.count(b"\n") == 1 and len(raw) <= 1024 * 1024
    problems: list = []
    (record,) = list(read_episodes(log, problems))
    assert problems == [] and len(record.steps) == 60 and record.reward == final.reward
    assert "cut]" in raw.decode() and record.steps[-1].observation["done"] is True
    assert "[the diff is" in record.diff and parse_patch(record.diff)  # cut between files: still a diff


def test_a_human_play_record_is_bounded_like_any_other(cache, bundle, sandbox, tmp_path):
    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler
    from envcore.server.sessions import SessionHub

    server = Runtime(sampler=CurriculumSampler(cache), sandbox=sandbox)
    log = tmp_path / "human.jsonl"
    hub = SessionHub.for_server(server, human_log=log, sweep_every_s=0)
    try:
        sid = hub.open()
        hub.reset(sid, scenario=bundle.scenario_id)
        _abusive_episode(lambda action: hub.step(sid, action), 40)
        hub.close(sid)
    finally:
        hub.shutdown()
        hub.runtime.logger.close()
    (record,) = list(read_episodes(log))
    assert record.source == "human" and record.outcome == "abandoned" and len(record.steps) == 40
    assert len(log.read_bytes()) <= LIMITS["log_record_bytes"]
    for entry in record.steps:
        assert _longest_text(entry.action) <= LIMITS["log_field_chars"]
        assert _longest_text(entry.observation) <= LIMITS["log_field_chars"]
        assert len(entry.observation["files"]) <= LIMITS["log_list_items"]


# ----- memory -------------------------------------------------------------------------------------------
def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _settle() -> float:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap pages back, as a long-lived server would
    except (OSError, AttributeError):
        pass
    return _rss_mb()


RSS_MARGIN_MB = 5.0
"""What a closed abusive session may leave behind (measured: about 2 MB, FastMCP's cache of the
session's tool functions among it); the session itself held over 20 MB."""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_a_closed_abusive_session_gives_its_memory_back(cache, bundle, sandbox):
    from envcore.env.environment import A01Environment, Runtime
    from envcore.env.sampler import CurriculumSampler

    runtime = Runtime(sampler=CurriculumSampler(cache), sandbox=sandbox)

    def session(steps: int) -> float:
        env = A01Environment(runtime)
        env.reset(scenario=bundle.scenario_id, max_steps=steps + 2)
        _abusive_episode(env.step, steps)
        env.step({"tool": "view_diff"})
        held = _rss_mb()
        assert env.step({"tool": "submit"}).done
        env.close()
        return held

    session(12)  # warm-up: one-time caches (bundle, shadow, templates, compiled code) are not counted
    before = _settle()
    held = session(90)  # 30 patches of 250 KB (7.5 MB of files), 30 huge reads, 30 large request bodies
    after = _settle()
    print(f"RSS before {before:.1f} MB, during {held:.1f} MB, after close {after:.1f} MB")
    assert held - before > 2.5 * RSS_MARGIN_MB, "the abusive session did not hold memory: the test measures nothing"
    assert after - before <= RSS_MARGIN_MB, f"RSS before {before:.1f} MB, after close {after:.1f} MB"


def test_a_closed_sessions_live_app_and_its_files_are_let_go(bundle):
    from envcore.sandbox import Sandbox, SandboxLimits

    box = Sandbox(limits=SandboxLimits(idle_s=0.4), spares=0).start()
    try:
        episode = Episode(bundle, box)
        observation = episode.step({"tool": "http_request", "path": "/", "as_user": bundle.users[0].username})
        assert observation.error is None
        live = weakref.ref(episode.live())
        time.sleep(0.5)  # the sandbox's reaper looks at every live app a few times
        episode.close_live()
        del episode, observation
        gc.collect()
        assert live() is None
    finally:
        box.close()
