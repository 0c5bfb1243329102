"""Every number the server reads from the environment is checked, and a bad one stops it with one line.

A server started with ``A01_MAX_SESSIONS=many`` used to stop on a bare ``int()`` traceback, and one
started with ``A01_SESSION_TIMEOUT_S=-5`` or ``A01_UI_SESSION_TTL_S=nan`` ran with a limit nobody
meant. Each variable is set here to values it cannot take and read through the code that really reads
it; a scan of the sources keeps new settings from being parsed by hand."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from envcore.cache import ScenarioCache
from envcore.env.environment import Runtime
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app
from envcore.server.sessions import SessionHub
from envcore.settings import SettingError, positive_int, seconds
from ui import watch_tab

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "artifacts/scenarios/v2"


def _runtime() -> Runtime:
    return Runtime(sampler=CurriculumSampler(ScenarioCache.open(CACHE)))


READERS = {
    "runtime": lambda: Runtime.from_environ(),
    "server": lambda: create_env_app(_runtime()),
    "page": lambda: SessionHub.for_server(_runtime(), human_log=""),
    "live pace": watch_tab.pace_from_env,
}
WHOLE_NUMBERS = [("A01_MAX_STEPS", "runtime"), ("A01_MAX_SESSIONS", "server"), ("A01_SANDBOX_WORKERS", "server"),
                 ("A01_MAX_SESSIONS_PER_CLIENT", "server"), ("A01_MAX_BODY_BYTES", "server"),
                 ("A01_MAX_WS_MESSAGE_BYTES", "server"), ("A01_UI_MAX_SESSIONS", "page"),
                 ("A01_EPISODE_LOG_MAX_BYTES", "server"), ("A01_UI_MAX_SESSIONS_PER_CLIENT", "page"),
                 ("A01_HUMAN_LOG_MAX_BYTES", "page")]
TIMES = [("A01_SESSION_TIMEOUT_S", "server"), ("A01_UI_SESSION_TTL_S", "page"), ("A01_UI_LIVE_PACE_S", "live pace")]


@pytest.mark.parametrize("bad", ["many", "0", "-3", "2.5", "1e3", "0x10", "\u0663"])
def test_a_whole_number_refuses_what_it_cannot_take(bad):
    with pytest.raises(SettingError, match=f"^A01_X must be a positive integer, not {re.escape(repr(bad))}$"):
        positive_int("A01_X", 1, environ={"A01_X": bad})


@pytest.mark.parametrize("bad", ["soon", "-5", "nan", "inf", "1e400", "61"])
def test_a_time_refuses_what_it_cannot_take(bad):
    with pytest.raises(SettingError, match=f"^A01_X must be a number of seconds from 0 to 60, not {re.escape(repr(bad))}$"):
        seconds("A01_X", 1.0, maximum=60, environ={"A01_X": bad})


@pytest.mark.parametrize("variable, reader", WHOLE_NUMBERS)
def test_every_whole_number_setting_is_checked_where_it_is_read(monkeypatch, variable, reader):
    monkeypatch.setenv(variable, "-3")
    with pytest.raises(SettingError, match=f"^{variable} must be a positive .*, not '-3'$"):
        READERS[reader]()


@pytest.mark.parametrize("variable, reader", TIMES)
def test_every_time_setting_is_checked_where_it_is_read(monkeypatch, variable, reader):
    monkeypatch.setenv(variable, "nan")
    with pytest.raises(SettingError, match=f"^{variable} must be a number of seconds"):
        READERS[reader]()


@pytest.mark.parametrize("variable", ["A01_SESSION_TIMEOUT_S", "A01_UI_SESSION_TTL_S"])
def test_a_timeout_of_zero_is_refused_where_it_would_close_every_session_at_once(monkeypatch, variable):
    monkeypatch.setenv(variable, "0")
    with pytest.raises(SettingError, match=f"{variable} must be a number of seconds above 0"):
        READERS[dict(TIMES)[variable]]()


@pytest.mark.parametrize("variable, value, message", [
    ("A01_CACHE", "/nowhere", "A01_CACHE: /nowhere is not a scenario cache"),
    ("A01_WEIGHTS", "/nowhere/weights.json", "A01_WEIGHTS: cannot read sampling weights /nowhere/weights.json"),
    ("A01_TRUSTED_PROXIES", "the usual", "A01_TRUSTED_PROXIES holds 'the usual', which is not an IP address"),
])
def test_a_path_or_address_setting_that_cannot_be_used_names_itself(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingError, match=re.escape(message)):
        READERS["server"]() if variable == "A01_TRUSTED_PROXIES" else READERS["runtime"]()


def test_unset_or_blank_is_the_default_and_good_values_are_read(monkeypatch):
    monkeypatch.setenv("A01_X", " ")
    assert positive_int("A01_X", 7) == 7 and seconds("A01_X", 1.5) == 1.5
    monkeypatch.setenv("A01_X", " 12 ")
    assert positive_int("A01_X", 7) == 12 and seconds("A01_X", 1.5) == 12.0
    assert seconds("A01_X", 1.0, maximum=12) == 12.0
    with pytest.raises(SettingError, match="from 0 to 11"):
        seconds("A01_X", 1.0, maximum=11)
    assert positive_int("A01_Y", 3, environ={"A01_Y": "4"}) == 4


def test_a_bad_setting_stops_python_app_py_with_one_line_and_status_2():
    env = {"PATH": "/usr/bin:/bin", "GRADIO_ANALYTICS_ENABLED": "False", "A01_MAX_SESSIONS": "many"}
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["app.py: A01_MAX_SESSIONS must be a positive integer, not 'many'"]


@pytest.mark.parametrize("port", ["http", "0", "65536", "-1", "7860.0", "\u00b2"])
def test_a_bad_port_is_refused_before_anything_is_built(monkeypatch, capsys, port):
    import app as entry

    monkeypatch.setenv("PORT", port)
    monkeypatch.setattr(entry, "build_app", lambda: pytest.fail("built despite a bad PORT"))
    assert entry.main() == 2
    assert capsys.readouterr().err == f"app.py: PORT must be a port number from 1 to 65535, not {port!r}\n"


def test_importing_the_entry_point_builds_nothing_until_app_is_asked_for(monkeypatch):
    import app as entry

    built = []
    monkeypatch.setattr(entry, "build_app", lambda: built.append(1) or "the app")
    entry.__dict__.pop("app", None)
    try:
        assert built == []
        assert entry.app == "the app" and entry.app == "the app" and built == [1]  # built once, then kept
    finally:
        entry.__dict__.pop("app", None)


def test_no_setting_is_parsed_by_hand():
    # int(os.environ...), float(os.getenv(...)), os.environ[...].isdigit(): each is a setting that skips the checks
    by_hand = re.compile(r"(int|float)\(\s*os\.(environ|getenv)|os\.environ\.get\([^)]*\)\.(strip\(\)\.)?isdigit")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("envcore", "ui") for path in (ROOT / folder).rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if by_hand.search(line)]
    found += [f"app.py:{n}" for n, line in enumerate((ROOT / "app.py").read_text().splitlines(), 1) if by_hand.search(line)]
    assert found == []
