"""Bad input against the environment server: every malformed, oversized or hostile request gets a
clear error or a clean close, never a 5xx or a crashed server, and other sessions go on unaffected.

One real uvicorn server (module-scoped, in a background thread) is attacked over ``/ws`` with raw
frames and over HTTP; after each attack ``/health`` must answer, no handler may have logged an
error, and a session opened *before* the attack must still step and submit. The server allows only
:data:`MAX_SESSIONS` sessions, so a session leaked by an attack (a dropped socket, a socket closed
after an error) shows up as a later session refused for capacity.

Then schemathesis fuzzes the OpenAPI routes in-process, and hypothesis fuzzes the action models and
an in-process :class:`~envcore.env.environment.A01Environment`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from schemathesis.checks import not_a_server_error
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from envcore.cache import ScenarioCache
from envcore.env.actions import LIMITS, TOOL_MODELS, TOOL_NAMES, A01Action, A01Observation, _Tool, parse_action
from envcore.env.environment import A01Environment, ResetError, Runtime
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app
from envcore.scenario.probes import HTTP_METHODS

MAX_SESSIONS = 3
"""The attacked server's capacity: the bystander, the attacker and one more."""
SEED = 1
"""Every session plays the same scenario, so its sandbox template is built once."""
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))


# ----- the server -------------------------------------------------------------------------------
class _ErrorLog(logging.Handler):
    """Collects ERROR records from every logger (an exception escaping a handler is one)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[str]:
        found = [f"{r.name}: {r.getMessage()}" + (f" ({r.exc_info[1]!r})" if r.exc_info else "") for r in self.records]
        self.records.clear()
        return found


@dataclass
class LiveServer:
    base: str
    ws_url: str
    server: uvicorn.Server
    thread: threading.Thread
    errors: _ErrorLog
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base, timeout=30)


@pytest.fixture(scope="module")
def runtime(sandbox) -> Runtime:
    return Runtime(sampler=CurriculumSampler(ScenarioCache.open("artifacts/scenarios/v2")), sandbox=sandbox)


@pytest.fixture(scope="module")
def live(runtime):
    app = create_env_app(runtime, max_sessions=MAX_SESSIONS)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # a free port, bound before the server starts: no race for it
    port = sock.getsockname()[1]
    # log_config=None: uvicorn leaves logging alone, and its records reach the root logger.
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                                           lifespan="on", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn-bad-input", daemon=True)
    errors = _ErrorLog()
    logging.getLogger().addHandler(errors)
    live_server = LiveServer(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws", server, thread, errors)
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield live_server
    finally:
        live_server.http.close()
        server.should_exit = True
        thread.join(15)
        sock.close()
        logging.getLogger().removeHandler(errors)
    assert not thread.is_alive(), "the server thread did not stop"


# ----- raw /ws sessions -------------------------------------------------------------------------
def _ws(live: LiveServer) -> ClientConnection:
    # max_size=None: a validation error echoes the (oversized) input back. ping_interval=None: no
    # keepalive thread, whose pings (drawn from the global random module) would disturb hypothesis.
    return connect(live.ws_url, max_size=None, open_timeout=10, close_timeout=2, ping_interval=None, legacy=True)


class Session:
    """One raw ``/ws`` connection."""

    def __init__(self, ws: ClientConnection, first: dict[str, Any]) -> None:
        self.ws = ws
        self.first = first

    def send(self, frame: dict[str, Any] | str | bytes) -> None:
        self.ws.send(json.dumps(frame) if isinstance(frame, dict) else frame)

    def recv(self, timeout: float = 30) -> dict[str, Any]:
        return json.loads(self.ws.recv(timeout=timeout))

    def call(self, frame: dict[str, Any] | str | bytes) -> dict[str, Any]:
        self.send(frame)
        return self.recv()

    def step(self, **action: Any) -> dict[str, Any]:
        return self.call({"type": "step", "data": action})

    def observe(self, **action: Any) -> dict[str, Any]:
        """A step that must come back as an observation; returns the observation."""
        frame = self.step(**action)
        assert frame["type"] == "observation", frame
        return frame["data"]["observation"]

    def closes(self, timeout: float = 10) -> list[dict[str, Any]]:
        """Read until the server closes the socket (cleanly); the frames it sent before."""
        frames = []
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                frames.append(json.loads(self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01))))
        except ConnectionClosed as exc:
            assert exc.rcvd is not None and exc.rcvd.code in (1000, 1009), f"unclean close: {exc!r}"
            return frames
        raise AssertionError(f"the server kept the socket open; it sent {frames}")

    def close(self) -> None:
        try:
            self.ws.close()
        except (ConnectionClosed, OSError):
            pass

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_session(live: LiveServer, *, seed: int = SEED, wait_s: float = 10.0) -> Session:
    """A new session, reset; waits (up to ``wait_s``) while the server is at capacity."""
    deadline = time.monotonic() + wait_s
    while True:
        ws = _ws(live)
        try:  # at capacity, the server sends its error and closes at once: the reset may not go out
            ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
        except ConnectionClosed:
            pass
        try:
            frame = json.loads(ws.recv(timeout=30))
        except ConnectionClosed as exc:
            frame = {"type": "closed", "data": {"close": repr(exc)}}
        if frame["type"] == "observation":
            return Session(ws, frame["data"]["observation"])
        ws.close()
        if frame["data"].get("code") != "CAPACITY_REACHED" or time.monotonic() > deadline:
            raise AssertionError(f"cannot open a session: {frame}")
        time.sleep(0.1)


class RawSession:
    """A ``/ws`` client written by hand on a plain socket (no background threads), so that it can
    vanish the way a crashed client does: no close frame, the TCP connection reset."""

    def __init__(self, live: LiveServer) -> None:
        host, port = live.base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "the server closed during the handshake"
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head

    def send(self, frame: dict[str, Any]) -> None:
        payload = json.dumps(frame).encode()
        mask = os.urandom(4)
        size = len(payload)
        header = b"\x81" + (bytes([0x80 | size]) if size < 126 else
                            b"\xfe" + struct.pack("!H", size) if size < 65536 else b"\xff" + struct.pack("!Q", size))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            assert chunk, "the server closed the connection"
            data += chunk
        return data

    def recv(self) -> dict[str, Any]:
        first, second = self._exactly(2)
        assert first == 0x81, f"not a final text frame: {first:#x}"
        size = second & 0x7F
        if size == 126:
            size = struct.unpack("!H", self._exactly(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", self._exactly(8))[0]
        return json.loads(self._exactly(size))

    def drop(self) -> None:
        """Reset the TCP connection: no close frame."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def a_python_file(observation: dict[str, Any]) -> str:
    return next(p for p in observation["files"] if p.endswith(".py"))


@pytest.fixture
def bystander(live):
    """A session opened (and reset) before the attack, held open through it."""
    live.errors.take()
    with open_session(live) as session:
        session.observe(tool="list_files")
        yield session


def assert_unaffected(live: LiveServer, bystander: Session, *, tolerated: str | None = None) -> None:
    """The server is up, logged no error (but ``tolerated`` ones), and the session opened before the
    attack still steps and submits."""
    assert live.thread.is_alive(), "the server thread died"
    health = live.http.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "healthy" and health.json()["sandbox"]["grading"]
    observation = bystander.observe(tool="read_file", path=a_python_file(bystander.first), end_line=5)
    assert observation["error"] is None and observation["result"]["content"]
    frame = bystander.step(tool="submit")
    assert frame["type"] == "observation" and frame["data"]["done"] is True, frame
    assert frame["data"]["observation"]["error"] is None and isinstance(frame["data"]["reward"], (int, float))
    logged = [line for line in live.errors.take() if tolerated is None or tolerated not in line]
    assert logged == [], "a handler logged an error"


def assert_error_then_closed_or_usable(session: Session) -> str:
    """The server answered with one error frame, then either closed the socket cleanly or goes on
    serving the session; which of the two (``"closed"``/``"open"``)."""
    frame = session.recv()
    assert frame["type"] == "error" and frame["data"]["message"], frame
    try:
        after = session.call({"type": "state"})
    except ConnectionClosed as exc:
        assert exc.rcvd is not None and exc.rcvd.code == 1000, f"unclean close: {exc!r}"
        return "closed"
    assert after["type"] == "state", after
    return "open"


def assert_error_frame(frame: dict[str, Any], code: str) -> dict[str, Any]:
    assert frame["type"] == "error" and frame["data"]["code"] == code, frame
    assert frame["data"]["message"]
    return frame["data"]


# ----- WebSocket attacks ------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["{not json", "", "   ", "{\"type\": \"step\", \"data\": {", "\x00\x01\x02",
                                  "NaN]", "{'type': 'reset'}"])
def test_ws_malformed_json_text_is_an_invalid_json_error_and_the_session_goes_on(live, bystander, text):
    with open_session(live) as attacker:
        assert_error_frame(attacker.call(text), "INVALID_JSON")
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


@pytest.mark.parametrize("text", ["[1, 2]", "\"step\"", "null", "42", "true"])
def test_ws_json_that_is_not_an_object_gets_an_error_and_a_clean_close(live, bystander, text):
    # OpenEnv 0.10 reads ``type`` from the message outside its per-message error handling, so this
    # ends the session (a SESSION_ERROR frame, "'list' object has no attribute 'get'", then a close).
    with open_session(live) as attacker:
        attacker.send(text)
        assert_error_then_closed_or_usable(attacker)
    assert_unaffected(live, bystander)
    open_session(live).close()  # its slot was given back


@pytest.mark.parametrize("payload", [random.Random(0).randbytes(64), random.Random(1).randbytes(4096),
                                     b"\xff\xfe\x00garbage", b"{\"type\":\"reset\"}"],
                         ids=["random-64", "random-4096", "invalid-utf8", "json-as-binary"])
def test_ws_binary_garbage_frame_gets_an_error_and_a_clean_close(live, bystander, payload):
    # OpenEnv 0.10 reads text frames only: a binary frame ends the session (a SESSION_ERROR frame
    # whose message is just "'text'", then a close).
    with open_session(live) as attacker:
        attacker.send(payload)
        assert_error_then_closed_or_usable(attacker)
    assert_unaffected(live, bystander)
    open_session(live).close()


TRAVERSALS = ["../../etc/passwd", "/etc/passwd", "app/../../../etc/passwd", "./../../etc/passwd",
              "..\\..\\etc\\passwd", "app/\x00main.py", "%2e%2e/%2e%2e/etc/passwd", "~/.ssh/id_rsa",
              "/proc/self/environ", "app/../../" * 20 + "etc/passwd"]


def test_ws_read_file_path_traversal_is_an_observation_error_and_the_episode_goes_on(live, bystander):
    with open_session(live) as attacker:
        steps_left = attacker.first["steps_left"]
        for path in TRAVERSALS:
            frame = attacker.step(tool="read_file", path=path)
            observation = frame["data"]["observation"]
            assert frame["type"] == "observation" and observation["error"] and observation["result"] is None, frame
            assert not frame["data"]["done"] and "root:" not in json.dumps(frame)
            steps_left -= 1
            assert observation["steps_left"] == steps_left
        # the same paths through the other tools that take one
        observation = attacker.observe(tool="edit_file", path="../../etc/passwd", search="root", replace="x")
        assert observation["error"]
        diff = "--- /dev/null\n+++ b/../../tmp/a01_pwned.py\n@@ -0,0 +1 @@\n+x = 1\n"
        observation = attacker.observe(tool="apply_patch", diff=diff)
        assert observation["error"] and not any(".." in p for p in observation["files"])
        assert observation["phase"] == "exploring" and not os.path.exists("/tmp/a01_pwned.py")
        good = attacker.observe(tool="read_file", path=a_python_file(attacker.first))
        assert good["error"] is None and good["result"]["content"]
    assert_unaffected(live, bystander)


@pytest.mark.parametrize("data", [{"tool": "nope"}, {"tool": "reset"}, {"tool": "verify"}, {"tool": None}, {},
                                  {"tool": ["submit"]}, "submit", None, [1, 2]],
                         ids=["nope", "reset", "verify", "null-tool", "empty", "list-tool", "string", "null", "list"])
def test_ws_unknown_tool_is_a_validation_error_and_the_session_goes_on(live, bystander, data):
    with open_session(live) as attacker:
        error = assert_error_frame(attacker.call({"type": "step", "data": data}), "VALIDATION_ERROR")
        assert error["errors"]
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


@pytest.mark.parametrize("frame", [
    {"type": "step", "data": {"tool": "read_file", "path": "app.py", "evil": 1}},
    {"type": "step", "data": {"tool": "submit", "reward": 1.0}},
    {"type": "step", "data": {"tool": "list_files"}, "extra": True},
    {"type": "state", "data": {}, "as_admin": True},
], ids=["action-field", "submit-reward", "message-field", "state-field"])
def test_ws_unknown_fields_are_a_validation_error_and_the_session_goes_on(live, bystander, frame):
    with open_session(live) as attacker:
        error = assert_error_frame(attacker.call(frame), "VALIDATION_ERROR")
        assert any(e["type"] == "extra_forbidden" for e in error["errors"]), error
        state = attacker.call({"type": "state"})
        assert state["type"] == "state" and state["data"]["step_count"] == 0  # nothing ran
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


VALIDATOR_REFUSALS = {
    "method": {"tool": "http_request", "path": "/", "method": "BREW"},
    "relative-path": {"tool": "http_request", "path": "api/items"},
    "control-chars": {"tool": "http_request", "path": "/api\r\nX-Injected: 1"},
    "header-name": {"tool": "http_request", "path": "/", "headers": {"x:y": "z"}},
    "header-value": {"tool": "http_request", "path": "/", "headers": {"x-a": "line\nbreak"}},
}


@pytest.mark.parametrize("action", list(VALIDATOR_REFUSALS.values()), ids=list(VALIDATOR_REFUSALS))
def test_ws_action_refused_by_a_field_validator_is_a_validation_error_not_a_dropped_session(live, bystander, action):
    # Regression: a validator's ValueError put an exception object in the error details, which
    # OpenEnv could not serialise, so the session was dropped (and POST /step answered 500).
    with open_session(live) as attacker:
        error = assert_error_frame(attacker.call({"type": "step", "data": action}), "VALIDATION_ERROR")
        assert error["errors"][0]["msg"] and json.dumps(error)
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


def test_ws_unknown_message_type_is_an_error_and_the_session_goes_on(live, bystander):
    with open_session(live) as attacker:
        assert_error_frame(attacker.call({"type": "sudo", "data": {}}), "UNKNOWN_TYPE")
        assert_error_frame(attacker.call({"data": {"tool": "submit"}}), "UNKNOWN_TYPE")
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


OVERSIZED = {
    "diff": {"tool": "apply_patch", "diff": "+" * (LIMITS["diff_bytes"] + 1)},
    "edit-search": {"tool": "edit_file", "path": "app.py", "search": "x" * (LIMITS["edit_bytes"] + 1), "replace": ""},
    "edit-replace": {"tool": "edit_file", "path": "app.py", "search": "x", "replace": "y" * (LIMITS["edit_bytes"] + 1)},
    "read-path": {"tool": "read_file", "path": "a" * (LIMITS["path_chars"] + 1)},
    "search-query": {"tool": "search_code", "query": "q" * (LIMITS["search_chars"] + 1)},
    "search-results": {"tool": "search_code", "query": "q", "max_results": LIMITS["search_results"] + 1},
    "request-path": {"tool": "http_request", "path": "/" + "p" * LIMITS["request_path_chars"]},
    "request-headers": {"tool": "http_request", "path": "/",
                        "headers": {f"x-h{i}": "v" for i in range(LIMITS["headers"] + 1)}},
    "request-header-size": {"tool": "http_request", "path": "/", "headers": {"x-big": "v" * LIMITS["header_chars"]}},
}


@pytest.mark.parametrize("action", list(OVERSIZED.values()), ids=list(OVERSIZED))
def test_ws_oversized_arguments_over_the_documented_limits_are_validation_errors(live, bystander, action):
    with open_session(live) as attacker:
        error = assert_error_frame(attacker.call({"type": "step", "data": action}), "VALIDATION_ERROR")
        assert error["errors"]
        assert attacker.call({"type": "state"})["data"]["step_count"] == 0
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


def test_ws_oversized_json_body_is_an_observation_error(live, bystander):
    # json_body is free-form JSON, so its size is checked once encoded: the episode refuses it.
    with open_session(live) as attacker:
        body = {"blob": "b" * (LIMITS["json_body_bytes"] + 1)}
        observation = attacker.observe(tool="http_request", method="POST", path="/", json_body=body)
        assert observation["error"] and "json_body" in observation["error"]
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


WRITE_PROOF = ["data/seed.json/evil.py", "app/" + "n" * 300 + ".py", "/".join(["d"] * 20) + ".py",
               "app/__pycache__/x.py", "app//x.py", "app/x\u2028.py"]


def test_ws_a_patch_to_a_path_no_app_folder_can_hold_is_an_observation_error_and_submit_still_scores(live, bystander):
    # A file that is a folder of a data file, a name over 255 bytes ...: the sandbox could not write
    # the app, and grading it was reported as the sandbox's failure (no reward) instead of the patch's.
    with open_session(live) as attacker:
        for path in WRITE_PROOF:
            observation = attacker.observe(tool="apply_patch", diff=f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n")
            assert observation["error"] and "nothing changed" in observation["error"], (path, observation["error"])
            assert path not in observation["files"] and observation["phase"] == "exploring"
        frame = attacker.step(tool="submit")
        assert frame["data"]["done"] is True and isinstance(frame["data"]["reward"], (int, float)), frame
    assert_unaffected(live, bystander)


def test_ws_a_read_of_a_huge_line_and_a_huge_diff_come_back_cut(live, bystander):
    with open_session(live) as attacker:
        line = "x = '" + "y" * 200_000 + "'\n"
        observation = attacker.observe(tool="apply_patch", diff=f"--- /dev/null\n+++ b/app/huge.py\n@@ -0,0 +1 @@\n+{line}")
        assert observation["error"] is None
        read = attacker.observe(tool="read_file", path="app/huge.py")
        assert len(read["result"]["content"]) <= LIMITS["line_chars"] and "characters; cut]" in read["text"]
        diff = attacker.observe(tool="view_diff")
        assert len(diff["text"]) <= LIMITS["observation_chars"] and "left out" in diff["text"]
        assert len(attacker.call({"type": "state"})["data"]["diff"]) <= LIMITS["observation_chars"]
    assert_unaffected(live, bystander)


def test_ws_lone_surrogate_escapes_are_refused_or_replaced_and_the_session_goes_on(live, bystander):
    # JSON may escape a lone surrogate ("\\ud800"); it cannot be encoded back into a reply, so an
    # error that echoed it used to drop the session.
    with open_session(live) as attacker:
        frame = attacker.call('{"type": "step", "data": {"tool": "read_file", "path": "app\\ud800.py"}}')
        assert frame["type"] == "observation" and frame["data"]["observation"]["error"], frame
        assert_error_frame(attacker.call('{"type": "step", "data": {"tool": "nope\\udfff"}}'), "VALIDATION_ERROR")
        assert_error_frame(attacker.call('{"type": "step", "data": {"\\ud800": 1}}'), "VALIDATION_ERROR")
        frame = attacker.call('{"type": "reset", "data": {"episode_id": "\\ud800"}}')
        error = assert_error_frame(frame, "EXECUTION_ERROR")
        assert "episode_id" in error["message"]
        assert attacker.observe(tool="list_files")["error"] is None
        assert attacker.call({"type": "state"})["data"]["episode_id"]
    assert_unaffected(live, bystander)


def test_ws_nan_and_infinity_literals_are_errors_and_the_session_goes_on(live, bystander):
    with open_session(live) as attacker:
        frame = attacker.call('{"type": "step", "data": {"tool": "read_file", "path": NaN}}')
        assert_error_frame(frame, "VALIDATION_ERROR")
        assert_error_frame(attacker.call('{"type": "step", "data": {"tool": "search_code", "query": "a", '
                                         '"max_results": Infinity}}'), "VALIDATION_ERROR")
        assert_error_frame(attacker.call('{"type": "reset", "data": {"seed": NaN}}'), "EXECUTION_ERROR")
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


def test_ws_deeply_nested_json_is_an_error_or_a_clean_close(live, bystander):
    with open_session(live) as attacker:  # deep but parseable: refused (no such user) as usual
        nested = "[" * 800 + "]" * 800
        frame = attacker.call('{"type": "step", "data": {"tool": "http_request", "path": "/", "as_user": "~nobody", '
                              f'"json_body": {nested}}}}}')
        assert frame["type"] == "observation" and frame["data"]["observation"]["error"], frame
    with open_session(live) as attacker:  # past the JSON parser's recursion limit: OpenEnv 0.10 ends the session
        attacker.send('{"type": "step", "data": {"tool": "view_diff", "x": ' + "[" * 100_000 + "]" * 100_000 + "}}")
        assert_error_then_closed_or_usable(attacker)
    assert_unaffected(live, bystander)
    open_session(live).close()


def test_ws_huge_frame_of_several_megabytes_is_a_validation_error_not_a_crash(live, bystander):
    with open_session(live) as attacker:
        frame = {"type": "step", "data": {"tool": "apply_patch", "diff": "+x\n" * (4 * 1024 * 1024 // 3)}}
        assert_error_frame(attacker.call(frame), "VALIDATION_ERROR")
        assert attacker.observe(tool="list_files")["error"] is None
    assert_unaffected(live, bystander)


def test_ws_frame_over_the_server_size_limit_closes_cleanly(live, bystander):
    # uvicorn refuses frames over its ws_max_size (16 MiB) with close code 1009 before OpenEnv sees them.
    with open_session(live) as attacker:
        attacker.send(json.dumps({"type": "step", "data": {"tool": "apply_patch", "diff": "x" * (17 * 1024 * 1024)}}))
        assert attacker.closes() == []
    assert_unaffected(live, bystander)
    open_session(live).close()


@pytest.mark.parametrize("data", [{"split": "nope"}, {"tier": 7}, {"tier": [1]}, {"tier": "x"}, {"max_steps": 0},
                                  {"max_steps": "many"}, {"seed": -1}, {"seed": "abc"}, {"scenario": "ffffffffff"},
                                  {"scenario": 5}, {"episode_id": {"a": 1}}, {"bug_class": "no_such_bug"},
                                  {"as_admin": True}],
                         ids=lambda d: ",".join(f"{k}={v!r}" for k, v in d.items()))
def test_ws_reset_with_bad_options_is_an_error_and_the_session_goes_on(live, bystander, data):
    with open_session(live) as attacker:
        error = assert_error_frame(attacker.call({"type": "reset", "data": data}), "EXECUTION_ERROR")
        assert next(iter(data)) in error["message"] or "scenario" in error["message"], error
        # the episode it had is still there, and a good reset still works
        assert attacker.observe(tool="list_files")["error"] is None
        again = attacker.call({"type": "reset", "data": {"seed": SEED}})
        assert again["type"] == "observation" and again["data"]["observation"]["steps_left"] > 0
    assert_unaffected(live, bystander)


def test_ws_step_before_reset_is_an_observation_error(live, bystander):
    with _ws(live) as ws:
        session = Session(ws, {})
        observation = session.observe(tool="list_files")
        assert observation["error"] and "reset" in observation["error"]
        assert session.call({"type": "state"})["type"] == "state"
    assert_unaffected(live, bystander)


def _fill_to_capacity(live: LiveServer, count: int) -> None:
    """Open ``count`` sessions at once (waiting for dropped ones to be reaped), step them, close them."""
    sessions = [open_session(live) for _ in range(count)]
    try:
        for session in sessions:
            assert session.observe(tool="list_files")["error"] is None
    finally:
        for session in sessions:
            session.close()


def test_ws_dropped_socket_mid_episode_frees_its_session(live, bystander):
    for _ in range(2):
        attacker = RawSession(live)
        attacker.send({"type": "reset", "data": {"seed": SEED}})
        first = attacker.recv()["data"]["observation"]
        attacker.send({"type": "step", "data": {"tool": "read_file", "path": a_python_file(first)}})
        assert attacker.recv()["data"]["observation"]["error"] is None
        attacker.drop()
        # the bystander holds one slot; the other two are free only if the dropped session was destroyed
        _fill_to_capacity(live, MAX_SESSIONS - 1)
    assert_unaffected(live, bystander)


def test_ws_dropped_socket_while_a_step_is_running_frees_its_session(live, bystander):
    for tool in ("run_tests", "submit"):
        attacker = RawSession(live)
        attacker.send({"type": "reset", "data": {"seed": SEED}})
        assert attacker.recv()["type"] == "observation"
        attacker.send({"type": "step", "data": {"tool": tool}})
        attacker.drop()
        _fill_to_capacity(live, MAX_SESSIONS - 1)
    # OpenEnv's handler lets the failed send of the step's reply escape (uvicorn logs "Exception in
    # ASGI application ... WebSocketDisconnected"); the session is destroyed all the same.
    assert_unaffected(live, bystander, tolerated="Disconnect")


def test_ws_close_message_mid_episode_ends_the_session_cleanly(live, bystander):
    attacker = open_session(live)
    attacker.observe(tool="list_files")
    attacker.send({"type": "close"})
    assert attacker.closes() == []
    _fill_to_capacity(live, MAX_SESSIONS - 1)
    assert_unaffected(live, bystander)


# ----- HTTP attacks -----------------------------------------------------------------------------
@pytest.mark.parametrize("body", [b"{not json", b"", b"\xff\xfe\x00\x01", random.Random(2).randbytes(2048), b"[1,2]",
                                  b"null", b"{\"action\": {\"tool\": \"submit\"}"],
                         ids=["malformed", "empty", "invalid-utf8", "random-bytes", "list", "null", "truncated"])
def test_http_step_malformed_or_binary_body_is_4xx(live, body):
    response = live.http.post("/step", content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert live.http.get("/health").status_code == 200


@pytest.mark.parametrize("body", [
    {"action": {"tool": "nope"}},
    {"action": {"tool": "submit", "x": 1}},
    {"action": {"tool": "read_file", "path": "app.py", "evil": True}},
    {"action": {"tool": "apply_patch", "diff": "+" * (LIMITS["diff_bytes"] + 1)}},
    {"action": {"tool": "apply_patch", "diff": "+x\n" * (3 * 1024 * 1024 // 3)}},
    {"action": "submit"},
    {"action": None},
    {},
    {"action": {"tool": "submit"}, "timeout_s": "soon"},
], ids=["unknown-tool", "unknown-field", "unknown-field-2", "oversized-diff", "huge-body", "string-action",
        "null-action", "no-action", "bad-timeout"])
def test_http_step_unknown_tool_unknown_fields_and_oversized_payloads_are_422(live, body):
    response = live.http.post("/step", json=body)
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert live.http.get("/health").status_code == 200


@pytest.mark.parametrize("action", list(VALIDATOR_REFUSALS.values()), ids=list(VALIDATOR_REFUSALS))
def test_http_step_action_refused_by_a_field_validator_is_422_not_500(live, action):
    response = live.http.post("/step", json={"action": action})
    assert response.status_code == 422, (response.status_code, response.text[:300])


@pytest.mark.parametrize("route,body", [
    ("/step", b'{"action": {"tool": "read_file", "path": "\\ud800"}}'),
    ("/step", b'{"action": {"tool": "nope\\ud800"}}'),
    ("/step", b'{"action": {"\\ud800": 1}}'),
    ("/step", b'{"action": {"tool": "read_file", "path": NaN}}'),
    ("/step", b'{"action": {"tool": "list_files"}, "timeout_s": NaN}'),
    ("/step", b'{"action": {"tool": "list_files"}, "timeout_s": -Infinity}'),
    ("/step", b'{"action": {"tool": "http_request", "path": "/", "json_body": ' + b"[" * 5000 + b"]" * 5000 + b"}}"),
    ("/step", b'{"action": {"tool": "list_files"}, "timeout_s": ' + b"[" * 800 + b"]" * 800 + b"}"),
    ("/reset", b'{"seed": ' + b"[" * 800 + b"]" * 800 + b"}"),
    ("/reset", b'{"seed": NaN}'),
    ("/reset", b'{"seed": Infinity}'),
    ("/reset", b'{"tier": NaN}'),
    ("/reset", b'{"episode_id": "\\ud800"}'),
    ("/reset", b'{"split": "\\udfff"}'),
    ("/reset", b'{"\\ud800": 1}'),
], ids=["surrogate-path", "surrogate-tool", "surrogate-key", "nan-path", "nan-timeout", "inf-timeout", "deep-nesting",
        "deep-timeout", "deep-seed", "nan-seed", "inf-seed", "nan-tier", "surrogate-episode-id", "surrogate-split",
        "surrogate-option"])
def test_http_nan_infinity_lone_surrogates_and_deep_nesting_are_refused_not_500(live, route, body):
    # Python's JSON parser accepts these; an error echoing them (or, for deep nesting, encoding them
    # recursively) used to fail to render: a 500.
    # (A lone surrogate in an action's string becomes U+FFFD: that action is valid, and over HTTP,
    # which holds no episode, it is answered with an observation error.)
    response = live.http.post(route, content=body, headers={"content-type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code == 200:
        assert route == "/step" and response.json()["observation"]["error"]
    else:
        assert 400 <= response.status_code < 500 and response.json()["detail"]


def test_http_step_with_unknown_top_level_field_is_not_a_server_error(live):
    # OpenEnv's StepRequest passes extra top-level keys to step(), which ignores them.
    response = live.http.post("/step", json={"action": {"tool": "list_files"}, "as_admin": True})
    assert response.status_code == 200 and response.json()["observation"]["error"]  # no episode over HTTP


@pytest.mark.parametrize("body", [{"split": "nope"}, {"tier": 9}, {"tier": [1]}, {"max_steps": "lots"},
                                  {"scenario": "ffffffffff"}, {"scenario": 5}, {"bug_class": 5}, {"as_admin": True},
                                  {"seed": -1}, {"seed": "x"}, {"episode_id": "e" * 300}],
                         ids=lambda d: ",".join(f"{k}={str(v)[:12]!r}" for k, v in d.items()))
def test_http_reset_with_bad_options_is_422_not_500(live, body):
    response = live.http.post("/reset", json=body)
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert response.json()["detail"]


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[]", b"\"seed\""],
                         ids=["malformed", "binary", "list", "string"])
def test_http_reset_malformed_body_is_4xx(live, body):
    response = live.http.post("/reset", content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])


def test_http_reset_and_step_still_work_after_the_attacks(live):
    response = live.http.post("/reset", json={"seed": SEED})
    assert response.status_code == 200 and response.json()["observation"]["steps_left"] > 0
    assert live.http.get("/health").status_code == 200 and live.thread.is_alive()


# ----- schemathesis over the OpenAPI routes -----------------------------------------------------
FUZZED_ROUTES = ["/reset", "/step", "/state", "/schema", "/metadata", "/health", "/scenarios",
                 "/scenarios/{scenario_id}"]


@pytest.fixture(scope="module")
def api_schema(runtime):
    # A second app over the same runtime (and sandbox): schemathesis runs its lifespan in its own loop.
    app = create_env_app(runtime, max_sessions=2)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    try:
        from schemathesis.python.asgi import shutdown_lifespans

        shutdown_lifespans()
    except Exception:  # pragma: no cover - best effort: it also runs at exit
        pass


openapi = schemathesis.pytest.from_fixture("api_schema").include(path=FUZZED_ROUTES)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@openapi.parametrize()
def test_openapi_fuzzing_never_gets_a_server_error(case):
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error])
    assert response.status_code < 500


# ----- hypothesis over the action models --------------------------------------------------------
FIELD_NAMES = sorted({name for model in TOOL_MODELS for name in model.model_fields} | {"type", "data", "action"})
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=12)
tool_values = st.sampled_from(TOOL_NAMES) | st.text(max_size=12) | json_scalars
action_like = st.builds(lambda rest, tool, has_tool: {**rest, "tool": tool} if has_tool else rest,
                        st.dictionaries(keys, json_values, max_size=6), tool_values, st.booleans())


@FUZZ
@given(data=action_like | json_values)
def test_parse_action_on_arbitrary_json_returns_a_tool_or_raises_validation_error(data):
    try:
        tool = parse_action(data)
    except ValidationError:
        return
    assert isinstance(tool, _Tool) and tool.tool in TOOL_NAMES


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200) | action_like.map(json.dumps))
def test_parse_action_on_arbitrary_text_or_binary_garbage_returns_a_tool_or_raises_validation_error(raw):
    try:
        tool = parse_action(raw)
    except ValidationError:
        return
    assert isinstance(tool, _Tool)


def _printable(max_size: int, min_size: int = 0) -> st.SearchStrategy[str]:
    return st.text(st.characters(min_codepoint=32, blacklist_characters="\x7f", blacklist_categories=("Cs",)),
                   min_size=min_size, max_size=max_size)


finite_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
methods = st.sampled_from(HTTP_METHODS) | st.sampled_from(HTTP_METHODS).map(str.lower)
header_names = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True)
lines = st.none() | st.integers(min_value=1, max_value=10**6)
valid_tools = st.one_of(
    st.just({"tool": "list_files"}),
    st.fixed_dictionaries({"tool": st.just("read_file"), "path": st.text(min_size=1, max_size=80)},
                          optional={"start_line": lines, "end_line": lines}),
    st.fixed_dictionaries({"tool": st.just("search_code"), "query": st.text(min_size=1, max_size=40)},
                          optional={"regex": st.booleans(), "path_prefix": st.none() | st.text(max_size=20),
                                    "max_results": st.integers(1, LIMITS["search_results"])}),
    st.fixed_dictionaries({"tool": st.just("http_request"), "path": _printable(60).map(lambda p: "/" + p)},
                          optional={"method": methods,
                                    "as_user": st.none() | st.text(max_size=20),
                                    "headers": st.dictionaries(header_names, _printable(40), max_size=4),
                                    "json_body": finite_json}),
    st.fixed_dictionaries({"tool": st.just("apply_patch"), "diff": st.text(min_size=1, max_size=200)}),
    st.fixed_dictionaries({"tool": st.just("edit_file"), "path": st.text(min_size=1, max_size=40),
                           "search": st.text(min_size=1, max_size=40), "replace": st.text(max_size=40)}),
    st.just({"tool": "run_tests"}),
    st.just({"tool": "view_diff"}),
    st.just({"tool": "submit"}),
).flatmap(lambda d: st.fixed_dictionaries(  # any tool may carry OpenEnv's ``metadata``
    {k: st.just(v) for k, v in d.items()}, optional={"metadata": st.dictionaries(st.text(max_size=8), finite_json,
                                                                                  max_size=2)}))


@FUZZ
@given(payload=valid_tools)
def test_valid_tool_payloads_round_trip_through_model_dump(payload):
    tool = parse_action(payload)
    assert isinstance(tool, _Tool) and tool.tool == payload["tool"]
    assert parse_action(tool.model_dump()) == tool
    assert parse_action(tool.model_dump_json()) == tool
    assert A01Action.model_validate(tool.model_dump(mode="json")).root == tool


# ----- hypothesis through an in-process environment ---------------------------------------------
@pytest.fixture(scope="module")
def env(runtime):
    environment = A01Environment(runtime)
    yield environment
    environment.close()


def _not_a_user(payload: dict[str, Any]) -> dict[str, Any]:
    # An anonymous request would start a live app per example; a user that does not exist is refused first.
    if payload["tool"] == "http_request":
        return {**payload, "as_user": "~nobody"}
    return payload


random_actions = st.one_of(valid_tools.map(_not_a_user), action_like, json_values)


@FUZZ
@given(actions=st.lists(random_actions, min_size=1, max_size=4))
def test_random_actions_through_env_step_never_raise_and_invalid_ones_have_an_error(env, actions):
    env.reset(seed=SEED, max_steps=50)
    for action in actions:
        observation = env.step(action)
        assert isinstance(observation, A01Observation)
        try:
            parse_action(action)
        except ValidationError:
            assert observation.error, (action, observation)
        assert env.state.step_count <= 50  # the state stays readable
        json.dumps(observation.model_dump(mode="json"))


def test_reset_naming_no_scenario_leaves_the_current_episode_playing(sandbox, tmp_path):
    # Regression: a reset that found no scenario had already closed (and logged as abandoned) the
    # episode in progress, which then played on unlogged.
    from envcore.env.episode_log import EpisodeLogger, read_episodes

    log = tmp_path / "episodes.jsonl"
    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open("artifacts/scenarios/v2")), sandbox=sandbox,
                      logger=EpisodeLogger(log))
    environment = A01Environment(runtime)
    try:
        environment.reset(seed=SEED)
        with pytest.raises(ResetError, match="matches 0 scenarios"):
            environment.reset(scenario="ffffffffffff")
        assert runtime.logger.written == 0 and not environment.episode.logged
        assert environment.step({"tool": "list_files"}).error is None
    finally:
        environment.close()
        runtime.logger.close()
    records = list(read_episodes(log))
    assert [r.outcome for r in records] == ["abandoned"] and len(records[0].steps) == 1


reset_values = (st.none() | st.booleans() | st.integers(-5, 300) | st.text(max_size=12)
                | st.lists(st.integers(), max_size=2) | st.sampled_from(["train", "val", "test", "any", "1", "30"]))
option_names = (st.sampled_from(["split", "tier", "bug_class", "scenario", "agent_id", "episode_id", "max_steps"])
                | st.text(min_size=1, max_size=8).filter(lambda k: k != "seed"))
reset_options = st.dictionaries(option_names, reset_values, max_size=4)


@FUZZ
@given(options=reset_options)
def test_reset_with_garbage_options_starts_an_episode_or_raises_reset_error(env, options):
    try:
        observation = env.reset(seed=SEED, **options)
    except ResetError as exc:
        assert str(exc)
        return
    assert isinstance(observation, A01Observation) and observation.steps_left > 0
    assert env.state.episode_id and env.state.step_count == 0
