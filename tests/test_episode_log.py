"""The episode log: records round-trip, concurrent writers never interleave, damage is skipped and reported."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading

import pytest
from pydantic import ValidationError

from envcore.env import episode_log
from envcore.env.episode_log import RECORD_VERSION, EpisodeLogger, EpisodeRecord, LogProblem, StepEntry, read_episodes


def make_record(n: int, *, writer: str = "w0", diff_size: int = 0) -> EpisodeRecord:
    """A plausible record; ``diff_size`` pads the diff so lines are long (interleaving shows up)."""
    steps = [
        StepEntry(step=0, action={"tool": "read_file", "path": "app/routes.py"},
                  observation={"ok": True, "content": "def get_note(note_id): ...", "steps_left": 9}, elapsed_ms=3.5),
        StepEntry(step=1, action={"tool": "edit", "path": "app/routes.py", "patch": "+    require_owner(note)"},
                  observation={"ok": True, "message": "applied", "steps_left": 8}, elapsed_ms=12.25),
        StepEntry(step=2, action={"tool": "submit"}, observation={"ok": True, "done": True, "steps_left": 7},
                  elapsed_ms=850.0),
    ]
    return EpisodeRecord(
        episode_id=f"{writer}-ep-{n:05d}",
        agent_id="oracle" if n % 2 else f"human:session-{writer}",
        source="evaluation" if n % 3 else "server",
        scenario_id="0082e5962f12344f",
        scenario_hash="0082e5962f12344f71f04a823149509fa5b427dce9f82abaecb091c3013db35a",
        cache_version="v1",
        bug_class="idor_read",
        tier=1 + n % 3,
        split="train",
        seed=1000 + n,
        started_at=1_700_000_000.0 + n,
        ended_at=1_700_000_004.5 + n,
        outcome=("submitted", "budget_exhausted", "abandoned", "infrastructure_error")[n % 4],
        max_steps=10,
        steps=steps,
        diff="--- a/app/routes.py\n+++ b/app/routes.py\n@@ -1 +1,2 @@\n+    require_owner(note)\n"
             + (f"# {writer} {n} " + "x" * diff_size + "\n" if diff_size else ""),
        verification={"passed": n % 2 == 0, "probes": [{"name": "idor_read_other_user", "kind": "security",
                                                       "passed": True}]},
        reward=1.0 if n % 2 == 0 else -0.25,
        reward_breakdown={"security": 1.0, "regression": 0.0, "traps": 0.0},
        timings_ms={"reset": 40.0, "verify": 800.0, "total": 900.0, "steps": 865.75},
    )


def lines_of(path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize("fsync", [False, True])
def test_records_round_trip_field_for_field(tmp_path, fsync):
    path = tmp_path / "logs" / "episodes.jsonl"  # the parent folder is created
    records = [make_record(n) for n in range(6)]
    with EpisodeLogger(path, fsync=fsync) as logger:
        for record in records:
            logger.write(record)
        assert logger.written == len(records)
    problems: list[LogProblem] = []
    back = list(read_episodes(path, problems))
    assert back == records
    assert problems == []
    assert all(r.record_version == RECORD_VERSION for r in back)
    assert back[1].steps[1].action["patch"] == "+    require_owner(note)"
    # one line per record, nothing else
    assert path.read_bytes().count(b"\n") == len(records) and path.read_bytes().endswith(b"\n")


def test_a_second_logger_appends_instead_of_truncating(tmp_path):
    path = tmp_path / "episodes.jsonl"
    with EpisodeLogger(path) as first:
        first.write(make_record(0))
    with EpisodeLogger(path) as second:
        second.write(make_record(1))
    assert [r.episode_id for r in read_episodes(path)] == ["w0-ep-00000", "w0-ep-00001"]


# --- concurrency ------------------------------------------------------------------------------

THREADS, PER_THREAD = 8, 40
PROCESSES, PER_PROCESS = 4, 30
BIG = 150_000  # long lines: a writer that split a record over several writes would interleave


def check_whole_lines(path, expected_ids: set[str]) -> None:
    raw = lines_of(path)
    assert raw[-1] == b"", "the file must end with a newline"
    ids = []
    for line in raw[:-1]:
        if not line:  # a blank line is harmless (a logger opening while another writes may leave one)
            continue
        data = json.loads(line)  # an interleaved line does not parse
        ids.append(EpisodeRecord.model_validate(data).episode_id)
    assert len(ids) == len(expected_ids)
    assert set(ids) == expected_ids
    problems: list[LogProblem] = []
    assert len(list(read_episodes(path, problems))) == len(expected_ids)
    assert problems == []


def test_concurrent_threads_never_interleave_inside_a_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    logger = EpisodeLogger(path)
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work(writer: int) -> None:
        try:
            barrier.wait()
            for n in range(PER_THREAD):
                logger.write(make_record(n, writer=f"t{writer}", diff_size=(BIG if n % 4 == 0 else 50 * n)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    logger.close()
    assert not errors
    assert logger.written == THREADS * PER_THREAD
    check_whole_lines(path, {f"t{w}-ep-{n:05d}" for w in range(THREADS) for n in range(PER_THREAD)})


def _process_writer(path: str, writer: int, start, per: int) -> None:
    start.wait()
    with EpisodeLogger(path) as logger:
        for n in range(per):
            logger.write(make_record(n, writer=f"p{writer}", diff_size=(BIG if n % 3 == 0 else 100 * n)))


def test_concurrent_processes_never_interleave_inside_a_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_process_writer, args=(str(path), w, start, PER_PROCESS)) for w in range(PROCESSES)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    check_whole_lines(path, {f"p{w}-ep-{n:05d}" for w in range(PROCESSES) for n in range(PER_PROCESS)})


def test_a_logger_inherited_across_fork_still_writes_whole_lines(tmp_path):
    """The server may open the log before forking workers: the shared O_APPEND descriptor still appends."""
    path = tmp_path / "episodes.jsonl"
    logger = EpisodeLogger(path)
    logger.write(make_record(0, writer="parent"))
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()

    def child(writer: int) -> None:
        start.wait()
        for n in range(PER_PROCESS):
            logger.write(make_record(n, writer=f"c{writer}", diff_size=(BIG if n % 3 == 0 else 10 * n)))

    procs = [ctx.Process(target=child, args=(w,)) for w in range(3)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=60)
    logger.write(make_record(1, writer="parent"))
    logger.close()
    assert [p.exitcode for p in procs] == [0] * 3
    expected = {f"c{w}-ep-{n:05d}" for w in range(3) for n in range(PER_PROCESS)} | {"parent-ep-00000",
                                                                                      "parent-ep-00001"}
    check_whole_lines(path, expected)


# --- damage -----------------------------------------------------------------------------------


def test_crash_mid_write_loses_only_the_episode_in_flight(tmp_path):
    path = tmp_path / "episodes.jsonl"
    records = [make_record(n) for n in range(3)]
    with EpisodeLogger(path) as logger:
        for record in records:
            logger.write(record)
    in_flight = make_record(3).model_dump_json().encode()
    with open(path, "ab") as handle:  # the process died half way through its write
        handle.write(in_flight[: len(in_flight) // 2])
    problems: list[LogProblem] = []
    assert list(read_episodes(path, problems)) == records
    assert len(problems) == 1
    assert problems[0].line == 4 and "torn" in problems[0].reason


def test_restart_after_a_crash_does_not_glue_the_next_record_to_the_torn_line(tmp_path):
    """A server restarted after a crash appends to the same file: its first episode must survive."""
    path = tmp_path / "episodes.jsonl"
    with EpisodeLogger(path) as logger:
        logger.write(make_record(0))
    in_flight = make_record(1).model_dump_json().encode()
    with open(path, "ab") as handle:
        handle.write(in_flight[:100])
    with EpisodeLogger(path) as restarted:
        restarted.write(make_record(2))
        restarted.write(make_record(3))
    problems: list[LogProblem] = []
    assert [r.episode_id for r in read_episodes(path, problems)] == ["w0-ep-00000", "w0-ep-00002", "w0-ep-00003"]
    assert [p.line for p in problems] == [2]  # only the torn record is lost, and it is reported


def test_a_logger_opened_while_another_is_mid_record_costs_no_record(tmp_path):
    """A new logger that finds the last line unfinished ends it; if another writer was in fact still
    writing that line, O_APPEND puts the newline after it: a blank line, which the reader skips
    without losing or reporting anything."""
    path = tmp_path / "episodes.jsonl"
    with open(path, "wb") as handle:  # what such a race leaves: a whole record, then a blank line
        handle.write(make_record(0).model_dump_json().encode() + b"\n" + b"\n")
    with EpisodeLogger(path) as logger:
        logger.write(make_record(1))
    problems: list[LogProblem] = []
    assert [r.episode_id for r in read_episodes(path, problems)] == ["w0-ep-00000", "w0-ep-00001"]
    assert problems == []
    assert path.read_bytes().count(b"\n") == 3  # a file that ends its last line gets no extra newline


def test_short_write_on_a_full_disk_leaves_no_half_record(tmp_path, monkeypatch):
    path = tmp_path / "episodes.jsonl"
    logger = EpisodeLogger(path)
    logger.write(make_record(0))
    real_write = os.write

    def half_write(fd, data):  # the disk fills up part way through the record
        if fd == logger._fd:
            return real_write(fd, bytes(data)[: len(data) // 2])
        return real_write(fd, data)

    monkeypatch.setattr(episode_log.os, "write", half_write)
    with pytest.raises(OSError, match="short write"):
        logger.write(make_record(1))
    monkeypatch.undo()
    logger.write(make_record(2))
    logger.close()
    assert logger.written == 2
    problems: list[LogProblem] = []
    assert [r.episode_id for r in read_episodes(path, problems)] == ["w0-ep-00000", "w0-ep-00002"]
    assert problems == []


def test_lines_of_another_version_or_not_json_are_skipped_and_reported(tmp_path):
    path = tmp_path / "episodes.jsonl"
    first, last = make_record(0), make_record(1)
    future = json.loads(make_record(5).model_dump_json())
    future["record_version"] = RECORD_VERSION + 1
    unknown_field = json.loads(make_record(6).model_dump_json())
    unknown_field["mood"] = "cheerful"
    bad_outcome = json.loads(make_record(7).model_dump_json())
    bad_outcome["outcome"] = "exploded"
    with open(path, "wb") as handle:
        handle.write(first.model_dump_json().encode() + b"\n")      # 1 ok
        handle.write(json.dumps(future).encode() + b"\n")           # 2 another version
        handle.write(b'{"episode_id": "x", not json\n')             # 3 not JSON
        handle.write(b"[1, 2, 3]\n")                                # 4 JSON but not a record
        handle.write(json.dumps(unknown_field).encode() + b"\n")    # 5 unknown field
        handle.write(json.dumps(bad_outcome).encode() + b"\n")      # 6 invalid value
        handle.write(b"\xff\xfe garbage bytes\n")                   # 7 not UTF-8
        handle.write(last.model_dump_json().encode() + b"\n")       # 8 ok
    problems: list[LogProblem] = []
    assert list(read_episodes(path, problems)) == [first, last]
    assert [p.line for p in problems] == [2, 3, 4, 5, 6, 7]
    assert f"record_version {RECORD_VERSION + 1}" in problems[0].reason
    assert all(p.reason and "\n" not in p.reason for p in problems)
    # without a problems list the reader still skips quietly
    assert list(read_episodes(path)) == [first, last]


def test_writing_after_close_raises(tmp_path):
    path = tmp_path / "episodes.jsonl"
    logger = EpisodeLogger(path)
    logger.write(make_record(0))
    logger.close()
    logger.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="closed"):
        logger.write(make_record(1))
    with EpisodeLogger(path) as other:
        pass
    with pytest.raises(ValueError, match="closed"):
        other.write(make_record(2))
    assert [r.episode_id for r in read_episodes(path)] == ["w0-ep-00000"]


def test_records_refuse_unknown_fields(tmp_path):
    good = make_record(0).model_dump()
    with pytest.raises(ValidationError, match="extra"):
        EpisodeRecord(**good, mood="cheerful")
    with pytest.raises(ValidationError, match="extra"):
        EpisodeRecord.model_validate({**good, "steps": [{**good["steps"][0], "thought": "hmm"}]})
    with pytest.raises(ValidationError):
        EpisodeRecord.model_validate({**good, "outcome": "exploded"})
    missing = dict(good)
    del missing["scenario_hash"]
    with pytest.raises(ValidationError):
        EpisodeRecord.model_validate(missing)


# --- bounded records ------------------------------------------------------------------------------


def _oversized(steps: int, text_chars: int) -> EpisodeRecord:
    record = make_record(0)
    big = {"tool": "apply_patch", "diff": "+" + "d" * text_chars}
    seen = {"text": "t" * text_chars, "files": [f"pkg/m{i}.py" for i in range(300)], "error": None,
            "result": {"content": "c" * text_chars, "matches": [{"path": "p", "line": i} for i in range(300)]}}
    record.steps = [StepEntry(step=i + 1, action=big, observation=seen, elapsed_ms=1.0) for i in range(steps)]
    record.diff = "".join(f"diff --git a/f{i}.py b/f{i}.py\n--- /dev/null\n+++ b/f{i}.py\n@@ -0,0 +1 @@\n+"
                          + "x" * 100_000 + "\n" for i in range(40))
    return record


def test_a_record_over_its_cap_is_shrunk_not_dropped_and_reads_back(tmp_path):
    from envcore.patching import parse_patch

    path = tmp_path / "episodes.jsonl"
    record = _oversized(steps=200, text_chars=200_000)
    with EpisodeLogger(path, max_record_bytes=2 * 1024 * 1024) as logger:
        logger.write(record)
        logger.write(make_record(1))  # the next record is untouched
    raw = lines_of(path)
    assert len(raw) == 3 and len(raw[0]) <= 2 * 1024 * 1024 and raw[2] == b""
    problems: list[LogProblem] = []
    back = list(read_episodes(path, problems))
    assert problems == [] and len(back) == 2 and back[1] == make_record(1)
    shrunk = back[0]
    assert len(shrunk.steps) == 200 and [s.step for s in shrunk.steps] == list(range(1, 201))
    assert shrunk.reward == record.reward and shrunk.verification == record.verification
    first = shrunk.steps[0]
    assert first.action["tool"] == "apply_patch" and "characters; cut]" in first.action["diff"]
    assert first.observation["files"][-1].endswith("cut]") and isinstance(first.observation["result"]["matches"], list)
    assert "the rest, from here, is left out" in shrunk.diff and parse_patch(shrunk.diff)  # still a diff


def test_a_record_holding_lone_surrogates_is_written_with_replacement_characters(tmp_path):
    path = tmp_path / "episodes.jsonl"
    record = make_record(2)
    record.steps[0] = StepEntry(step=0, action={"tool": "edit_file", "path": "app/\ud800.py", "\udfff": "x"},
                                observation={"text": "no file 'app/\ud800.py'"}, elapsed_ms=1.0)
    record.diff = "+x = '\ud800'\n"
    with EpisodeLogger(path) as logger:
        logger.write(record)
    (back,) = read_episodes(path)
    assert back.steps[0].action == {"tool": "edit_file", "path": "app/\ufffd.py", "\ufffd": "x"}
    assert back.diff == "+x = '\ufffd'\n" and back.steps[1:] == record.steps[1:]


def test_a_line_nested_too_deep_for_the_json_parser_is_skipped_and_reported(tmp_path):
    path = tmp_path / "episodes.jsonl"
    with open(path, "wb") as handle:
        handle.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")
        handle.write(make_record(3).model_dump_json().encode() + b"\n")
    problems: list[LogProblem] = []
    assert [r.episode_id for r in read_episodes(path, problems)] == [make_record(3).episode_id]
    assert len(problems) == 1 and problems[0].line == 1 and problems[0].reason
