"""Issue 34: `storyd top --once`, the plain frame: every unit, what needs a person first,
cut to the terminal's width; no escape sequences off a terminal; no Textual needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import STORYD
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace

from storyd.api.topview import age, frame, rank, rows, waiting_first

DEMO = Path(__file__).resolve().parent.parent / "daemon" / "demo"


def _unit(name: str, done: int, total: int, point: str, *findings: str, error: str | None = None,
          workspace: str = "/w") -> dict[str, object]:
    return {
        "workspace": workspace, "stateFile": f"{name}.json", "unit": name, "format": "epic",
        "done": done, "total": total, "resumePoint": point, "error": error,
        "findingList": [{"severity": s, "detector": "d", "code": f"c-{s}", "message": "m"}
                        for s in findings],
    }  # fmt: skip


def test_what_needs_a_person_comes_first() -> None:
    units = [
        _unit("finished", 2, 2, "all-done"),
        _unit("going", 1, 3, "task-2"),
        _unit("warned", 1, 3, "task-2", "info", "warning"),
        _unit("broken", 0, 0, None, error="does not parse"),
        _unit("bad", 1, 2, "task-2", "warning", "error"),
    ]
    assert [r.key[2] for r in rows(units, stat=False)] == [
        "bad", "broken", "warned", "going", "finished"]
    assert [rank(u) for u in units] == ["done", "working", "warning", "error", "error"]
    assert rows([units[4]], stat=False)[0].finding() == "error: c-error (+1)"


def test_the_frame_fits_the_width_and_height() -> None:
    units = [_unit(f"story-{i:04d}-with-a-long-name-indeed", i % 5, 4, f"task-{i}", "warning")
             for i in range(300)]  # fmt: skip
    text = frame(units, width=80, height=24, now=0.0)
    lines = text.splitlines()
    assert len(lines) == 24
    assert max(len(line) for line in lines) <= 80
    assert lines[1] == "300 units in 1 workspace: 0 error, 300 warning, 0 working, 0 done"
    assert lines[-1] == "… 281 more (storyd status lists them all)"
    assert "\033" not in text
    wide = frame(units, width=200, now=0.0)
    assert len(wide.splitlines()) == 304 and "warning: c-warning" in wide


def test_several_workspaces_name_theirs_and_unreadable_files_come_first() -> None:
    units = [_unit("a", 1, 2, "t", workspace="/x/one"), _unit("a", 1, 2, "t", workspace="/x/two")]
    broken = [{"workspace": "/x/one", "stateFile": "bad.json", "error": "not JSON", "units": 0}]
    lines = frame(units, unreadable=broken, now=0.0, color=True).splitlines()
    assert lines[1].endswith(", 1 unreadable")
    assert lines[4] == "\033[31mUNREADABLE /x/one/bad.json: not JSON\033[0m"
    assert "one:a" in lines[5] and "two:a" in lines[6]


def test_ages() -> None:
    assert [age(s) for s in (None, 5, 125, 7300, 90000)] == ["-", "5s", "2m", "2h", "1d"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", **(env or {})}
    return subprocess.run([STORYD, "top", *args], check=False, capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip


@pytest.mark.slow
def test_once_on_the_demo_workspace() -> None:
    done = _run("--once", "--direct", "--workspace", str(DEMO))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("storyd top (direct)")
    assert lines[1] == "7 units in 1 workspace: 0 error, 5 warning, 2 working, 0 done"
    assert lines[3].split() == ["FORMAT", "UNIT", "PROGRESS", "AGE", "RESUME", "/", "FINDING"]
    assert len(lines) == 11 and max(map(len, lines)) <= 100
    assert "\033" not in done.stdout  # not a terminal
    assert lines[4].split()[:2] == ["session", "fleet-portal"]  # warnings first, by name
    assert lines[-1].split()[:2] == ["epic", "story-0049-0014"]  # then work in progress


@pytest.mark.slow
def test_a_pipe_gets_the_frame_without_once() -> None:
    done = _run("--direct", "--workspace", str(DEMO), "--height", "6")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 6
    assert done.stdout.splitlines()[-1] == "… 6 more (storyd status lists them all)"


def test_bad_flags_are_told() -> None:
    done = _run("--once", "--height", "two")
    assert done.returncode == 64
    assert done.stderr.startswith("storyd top: --height: a number of lines, 5 or more, not 'two'")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_once_needs_no_textual(tmp_path: Path) -> None:
    """Textual made unimportable: the frame still prints, and nothing tried to load it."""
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "x\n"})
    write_epic(repo.path, EPIC, {story_id(1): {"tasks": {task_id(story_id(1), 1): {
        "status": "PENDING"}}}})  # fmt: skip
    code = (
        "import sys; sys.modules['textual'] = None\n"
        "from storyd.cli import main\n"
        f"code = main(['top', '--once', '--direct', '--workspace', {str(repo.path)!r}])\n"
        "mine = ('textual', 'storyd.tui')\n"
        "loaded = [m for m, v in sys.modules.items() if v and m.startswith(mine)]\n"
        "assert not loaded, loaded\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "NO_COLOR": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "story-0049-0001" in done.stdout and "[----------] 0/1" in done.stdout


@pytest.mark.slow
def test_the_agents_sessions_are_shown(tmp_path: Path) -> None:
    """A Claude Code session-start hook records its session (issue 30) with its agent
    and state; `storyd top --once` lists it above the units of its workspace."""
    from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook

    agents = AgentsEnv(tmp_path)
    ws = demo_workspace(tmp_path)
    done = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                    agents.env, ws)  # fmt: skip
    assert done.returncode == 0, done.stderr
    top = subprocess.run([STORYD, "top", "--once", "--direct", "--workspace", str(ws)],
                         env={**agents.env, "COLUMNS": "100"}, capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert top.returncode == 0, top.stderr
    line = next(x for x in top.stdout.splitlines() if x.startswith("SESSIONS "))
    # seven units in flight: which one the session is on is not known until it writes
    assert re.fullmatch(r"SESSIONS claude  9ecf22fa  working \d+s \(hook \d+s ago\)", line), line


def _waiting(unit: str | None, state: str = "waiting") -> dict[str, object]:
    return {"session": "abcdefghij", "workspace": "/w", "agent": "claude", "started": 0.0,
            "seen": 90.0, "state": state, "since": 80.0, "note": "Claude needs your permission",
            "on": ["going.json", unit]}  # fmt: skip


def test_a_unit_a_session_waits_on_comes_first_and_goes_back_when_answered() -> None:
    units = [_unit("bad", 1, 2, "task-2", "error"), _unit("going", 1, 3, "task-2"),
             _unit("finished", 2, 2, "all-done")]  # fmt: skip
    found = rows(units, stat=False)
    waited = waiting_first(found, [_waiting("going")])
    assert [(r.key[2], r.rank) for r in waited] == [
        ("going", "waiting"), ("bad", "error"), ("finished", "done")]
    # the session names only its state file: the one unit of that file is the one
    assert waiting_first(found, [_waiting(None)])[0].key[2] == "going"
    # answered (working again), or a session of another workspace: its own rank
    for sessions in ([_waiting("going", "working")], [{**_waiting("going"), "workspace": "/x"}]):
        assert [(r.key[2], r.rank) for r in waiting_first(found, sessions)] == [
            ("bad", "error"), ("going", "working"), ("finished", "done")]
    text = frame(units, sessions=[_waiting("going")], now=100.0, width=120)
    lines = text.splitlines()
    assert lines[1] == "3 units in 1 workspace: 1 waiting, 1 error, 0 warning, 0 working, 1 done"
    body = [x for x in lines if x.startswith("epic")]
    assert body[0].split()[1] == "going" and body[1].split()[1] == "bad"
    assert lines[3].startswith("SESSIONS claude") and lines[3].endswith(
        "waiting 20s on going: Claude needs your permission")


def test_sessions_of_other_workspaces_are_left_out() -> None:
    other = {"session": "s", "workspace": "/else", "agent": "cursor", "started": 0.0, "seen": 0.0}
    mine = {"session": "abcdefghij", "workspace": "/w", "agent": None, "started": None,
            "seen": 50.0}  # fmt: skip
    lines = frame([_unit("a", 1, 2, "t")], sessions=[mine, other], now=100.0).splitlines()
    assert [x for x in lines if x.startswith("SESSIONS")] == [
        "SESSIONS agent?  abcdefgh  last hook 50s ago"]


@pytest.mark.slow
def test_the_live_view_without_its_extra_says_what_to_install(tmp_path: Path) -> None:
    """On a terminal without Textual: exit 69, the pip line, and --once as the way out."""
    import pty

    master, slave = pty.openpty()
    code = ("import sys; sys.modules['textual'] = None\n"
            "from storyd.cli import main\n"
            f"sys.exit(main(['top', '--direct', '--workspace', {str(DEMO)!r}]))\n")  # fmt: skip
    try:
        done = subprocess.run([sys.executable, "-c", code], stdout=slave, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    assert done.returncode == 69, done.stderr
    assert done.stderr.startswith("storyd top: the live view needs the tui extra: pip install")
    assert "storyd top --once prints one frame without it" in done.stderr


@pytest.mark.slow
def test_no_daemon_and_no_workspace_is_told(tmp_path: Path) -> None:
    done = _run("--once", env={"STORYD_SOCKET": str(tmp_path / "none.sock")})
    assert done.returncode == 0
    assert "no units found" in done.stdout
    assert done.stderr == ("storyd top: no daemon answers and no --workspace was given: "
                           "start one (storyd serve) or name a workspace\n")  # fmt: skip
