"""A folder or workspace whose name is not UTF-8 (any byte but `/` and NUL is a valid
name on Linux): storyd's answers, events and history are UTF-8, so such a state file is
not read, and nothing else stops. A fresh user's try found a traceback in every direct
command and a daemon whose refresher failed on each event, leaving a hook's question
unanswered for 300 s."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import EventStream, daemon_env

BAD = os.fsdecode(b"001-f\xffeat")  # a lone surrogate once decoded
TASKS = "- [x] T001 a\n- [ ] T002 b\n"


def _spec(ws: Path, feature: str, text: str = TASKS) -> Path:
    path = ws / "specs" / feature / "tasks.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _workspace(ws: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(ws)], check=True, timeout=30)
    _spec(ws, BAD)
    _spec(ws, "002-ok")
    return ws


def _with_history(tmp_path: Path, env: dict[str, str]) -> None:
    """A history database where the readers look (its tables, no rows): the path that
    once raised UnicodeEncodeError binding a surrogate into SQLite."""
    from storyd.api import history_db

    db = Path(env["XDG_STATE_HOME"]) / "storyd" / "history.sqlite3"
    db.parent.mkdir(parents=True, exist_ok=True)
    history_db.open_writer(str(db)).close()


@pytest.mark.parametrize("where", ["inside", "workspace"])
def test_the_direct_commands_read_what_they_can_name(tmp_path: Path, where: str) -> None:
    """`inside`: a spec folder not UTF-8 beside a good one; `workspace`: the workspace's
    own path is not UTF-8. Every command answers, no traceback, the good unit shown."""
    root = tmp_path / (os.fsdecode(b"ws\xfe") if where == "workspace" else "ws")
    ws = _workspace(root)
    env = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    _with_history(tmp_path, env)
    status = run_storyd_cli("status", "--direct", env=env, cwd=ws)
    assert status.returncode == 0, status.stderr
    assert b"002-ok" in status.stdout and b"Traceback" not in status.stderr
    check = run_storyd_cli("check", "--direct", env=env, cwd=ws)
    assert check.returncode == 0, check.stdout + check.stderr
    assert b"1 units, 0 problems" in check.stdout  # the good spec; the other is not read
    detail = run_storyd_cli("resume", "--direct", "--detail", "--state-file",
                            "specs/002-ok/tasks.md", env=env, cwd=ws)  # fmt: skip
    assert detail.returncode == 0, detail.stderr
    assert json.loads(detail.stdout)["envelope"]["resumePoint"] == "task-T002"


@pytest.mark.slow
def test_the_daemon_goes_on_past_a_change_it_cannot_name(
        tmp_path: Path, spawn_daemon: object) -> None:
    """Writes to the unnameable file and to a good one: the good one's change is an
    event, status answers at once, and the refresher never fails."""
    ws = _workspace(tmp_path / "ws")
    daemon = spawn_daemon([ws])  # type: ignore[operator]
    with EventStream(daemon) as events:
        mark = events.mark()
        _spec(ws, BAD, "- [x] T001 a\n- [x] T002 b\n")
        _spec(ws, "002-ok", "- [x] T001 a\n- [x] T002 b\n")
        _, changed = events.wait(lambda e: e["event"] == "changed", start=mark)
    assert changed["stateFile"] == "specs/002-ok/tasks.md", changed
    status = run_storyd_cli("status", "--workspace", str(ws), env=daemon.env, timeout=10)
    assert status.returncode == 0, status.stderr
    assert b"2/2" in status.stdout and BAD.encode("utf-8", "surrogateescape") not in status.stdout
    errors = [e for e in daemon.log_events() if e.get("level") == "error"]
    assert errors == [], errors


def test_an_epic_folder_it_cannot_name_is_not_an_epic(tmp_path: Path) -> None:
    """The epic format lists its folders itself: `plans/epic-0001-f\\xffoo` is not read
    by `resume --epic-id 0001` either (it answered from it, and `--detail` with a history
    database exited 70)."""
    from epic_state_harness import write_epic

    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True, timeout=30)
    write_epic(ws, "0001", tasks={"story-0001-0001": {"T1": {"status": "PENDING"}}})
    (ws / "plans" / "epic-0001").rename(ws / "plans" / os.fsdecode(b"epic-0001-f\xffoo"))
    env = daemon_env(tmp_path, tmp_path / "run" / "storyd.sock")
    _with_history(tmp_path, env)
    for extra in ((), ("--detail",)):
        done = run_storyd_cli("resume", "--direct", *extra, "--epic-id", "0001", "--story-id",
                              "story-0001-0001", "--workspace", str(ws), env=env)  # fmt: skip
        assert done.returncode == 1, (extra, done.stdout, done.stderr)  # the seed's "no epic"
        assert done.stderr == b"execution-state.json not found\n"
        assert b"Traceback" not in done.stderr and b"internal error" not in done.stderr
