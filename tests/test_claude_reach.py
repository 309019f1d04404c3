"""Claude Code's task lists reach every door (issue 44): the daemon's socket `list` op,
the fleet's published summaries, `storyd top`'s session lines, all through the one
function storyd.api.claude_ties.with_lists; and an abandoned list (its newest task file
older than STALE_AFTER) is no longer handed over to a new session."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cli_harness import STORYD
from daemon_harness import DaemonProcess, wait_for
from nats_harness import NEEDS_NATS, fleet_config
from test_claude_ties import TIME_TRACKER, Home, _lay_list

from storyd.api.client import Client


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def _open(tasks: list[dict[str, object]]) -> int:
    return sum(t["status"] != "completed" for t in tasks)


def _complete_one(folder: Path) -> None:
    path = next(p for p in sorted(folder.iterdir(), key=lambda p: int(p.stem))
                if orjson.loads(p.read_bytes())["status"] != "completed")
    path.write_bytes(orjson.dumps(dict(orjson.loads(path.read_bytes()), status="completed")))


def _in(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads as the hook's environment does (storyd's state, Claude's folder)."""
    for name in ("XDG_STATE_HOME", "CLAUDE_CONFIG_DIR", "HOME"):
        monkeypatch.setenv(name, env[name])


def test_with_lists_adds_each_tied_list_once_in_the_list_order(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storyd.api.claude_ties import with_lists

    home.start("s1", "startup")
    tasks = _lay_list(home.claude / "tasks" / "s1", TIME_TRACKER)
    _in(home.env, monkeypatch)
    ws = str(home.ws)
    other = {"workspace": ws, "stateFile": "zz", "unit": "z"}
    first = {"workspace": ws, "stateFile": "", "unit": "a"}
    found = with_lists([other, first], [ws, ws])
    assert [u["unit"] for u in found] == ["a", "s1", "z"]  # one list, sorted in
    [unit] = [u for u in found if u.get("list") == "s1"]
    assert unit["total"] == len(tasks) and unit["total"] - unit["done"] == _open(tasks)
    assert "findingList" in unit
    assert "findingList" not in with_lists([], [ws], detail=False)[0]
    assert with_lists([], [ws], in_flight=True)  # open tasks: in flight
    assert with_lists([], [str(home.root)]) == []  # no ties there


@pytest.mark.slow
def test_the_socket_list_op_and_storyd_list_carry_the_list_once(
    home: Home, spawn_daemon: Callable[..., DaemonProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's `list` op answers the tied list (read at each answer, by the folder
    the hook recorded: this daemon has no CLAUDE_CONFIG_DIR), says `claudeLists`, and
    `storyd list` and `status` through it show the list once."""
    home.start("s1", "startup")
    folder = home.claude / "tasks" / "s1"
    tasks = _lay_list(folder, TIME_TRACKER)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    spawn_daemon([home.ws], socket_path=home.socket)
    with Client(str(home.socket), timeout=10) as client:
        for fields in ({"workspace": str(home.ws)}, {}):
            answer = client.request("list", detail=True, **fields)
            assert answer["ok"] and answer["claudeLists"] is True, answer
            [unit] = [u for u in answer["units"] if u["format"] == "claude-tasks"]
            assert unit["list"] == "s1" and unit["session"] == "s1"
            assert unit["total"] - unit["done"] == _open(tasks)
        _complete_one(folder)  # nothing watches ~/.claude: the next answer reads it again
        answer = client.request("list", workspace=str(home.ws))
        [unit] = [u for u in answer["units"] if u["format"] == "claude-tasks"]
        assert unit["total"] - unit["done"] == _open(tasks) - 1
        assert "findingList" not in unit  # not asked for detail
        bare = client.request("list", workspace=str(home.ws), claudeLists=False)  # the hooks'
        assert bare["claudeLists"] is False
        assert not [u for u in bare["units"] if u["format"] == "claude-tasks"]
    done = subprocess.run([STORYD, "list", "--workspace", str(home.ws)], env=home.env,
                          capture_output=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    lines = [orjson.loads(x) for x in done.stdout.splitlines()]
    assert [u["list"] for u in lines if u["format"] == "claude-tasks"] == ["s1"]
    assert [u["list"] for u in home.status()] == ["s1"]


@pytest.mark.slow
class TestAbandoned:
    """A list left longer than STALE_AFTER is not handed over; a fresh one is."""

    def _age(self, folder: Path, days: float) -> None:
        when = time.time() - days * 86400
        for path in [*folder.iterdir(), folder]:
            os.utime(path, (when, when), follow_symlinks=False)

    def test_an_old_list_is_not_told_a_recent_one_is(self, home: Home) -> None:
        from storyd.api.claude_ties import STALE_AFTER

        assert STALE_AFTER == 14 * 86400
        home.start("s1", "startup")
        folder = home.claude / "tasks" / "s1"
        _lay_list(folder, TIME_TRACKER)
        self._age(folder, 15)
        assert [x for x in (home.start("s2", "compact") or "").split("\n")
                if x.startswith("claude-tasks:")] == []
        assert [u["list"] for u in home.status("--direct")] == ["s1"]  # still shown
        self._age(folder, 13)  # within the limit: told again
        assert "the list of an earlier session, s1 " in (home.start("s3", "clear") or "")
        self._age(folder, 30)
        _complete_one(folder)  # one task file written now: the list is alive
        assert "s1 " in (home.start("s4", "compact") or "")


def test_top_says_which_list_a_session_is_on() -> None:
    from storyd.api.topview import rows, session_line

    found = rows([
        {"workspace": "/w", "stateFile": "/c/tasks/abcdef123456", "unit": "abcdef123456",
         "format": "claude-tasks", "list": "abcdef123456", "session": "abcdef123456",
         "done": 3, "total": 7, "resumePoint": "task 4", "findings": 0, "worst": None},
        {"workspace": "/w", "stateFile": "x.json", "unit": "u", "format": "f", "done": 0,
         "total": 1, "resumePoint": "t", "findings": 0, "worst": None},
    ], stat=False)  # fmt: skip
    now = time.time()
    entry = {"agent": "claude", "session": "abcdef123456", "workspace": "/w", "seen": now,
             "state": "working", "since": now}
    assert "list abcdef12 (4 open)" in session_line(entry, now, found=found)
    other = dict(entry, session="zzz")
    assert "list" not in session_line(other, now, found=found)


@pytest.mark.slow
@NEEDS_NATS
def test_the_fleet_publishes_the_list_and_follows_it(
    home: Home, spawn_daemon: Callable[..., DaemonProcess], nats_server: Callable[..., object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real nats-server: the tied list of a workspace with no state file of its own
    (Claude Code's lists are outside it) is in the bucket, a task completed shows within
    the publisher's list period, a list gone is deleted."""
    server = nats_server()
    url = server.url  # type: ignore[attr-defined]
    home.start("s1", "startup")
    folder = home.claude / "tasks" / "s1"
    tasks = _lay_list(folder, TIME_TRACKER)
    cfg = home.root / "fleet.toml"
    cfg.write_text("[notify]\ndesktop = false\n\n" + fleet_config(url, "alpha"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    spawn_daemon([home.ws], args=["--config", str(cfg)], socket_path=home.socket)
    env = dict(os.environ, COLUMNS="160")

    def line(want: str | None) -> str | None:
        done = subprocess.run([STORYD, "top", "--fleet", "--once", "--url", url], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        mine = [x for x in done.stdout.splitlines() if x.startswith("claude-ta") and " s1 " in x]
        if want is None:
            return None if mine else "gone"
        return mine[0] if mine and want in mine[0] else None

    total = len(tasks)
    wait_for(lambda: line(f"{total - _open(tasks)}/{total}"), 20, "the list in the bucket")
    _complete_one(folder)
    wait_for(lambda: line(f"{total - _open(tasks) + 1}/{total}"), 20, "the list's change")
    for path in folder.iterdir():
        path.unlink()
    wait_for(lambda: line(None), 20, "the list's key deleted")
