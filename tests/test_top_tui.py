"""Issue 34: the live view (`storyd top`) driven through Textual's own pilot, against a
real daemon subprocess: the first frame lists the units, a write to a state file shows
without a key press, Enter opens the detail, `/` filters, `?` lists the keys, `r`
previews and `a` applies a reconcile after a `y`, `q` exits 0, and a daemon that goes
away is said and reconnected to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace

pytest.importorskip("textual", reason="the tui extra is not installed: pip install '.[tui]'")

from textual.widgets import DataTable, Static

from storyd.tui.app import TopApp

pytestmark = pytest.mark.slow
Spawn = Callable[..., DaemonProcess]
STORY = story_id(1)


def _pending(done: int, total: int = 3) -> dict[str, object]:
    tasks = {task_id(STORY, n): {"status": "DONE" if n <= done else "PENDING"}
             for n in range(1, total + 1)}  # fmt: skip
    return {STORY: {"tasks": tasks}}


def _workspace(tmp_path: Path) -> GitWorkspace:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    write_epic(repo.path, EPIC, _pending(0))
    return repo


def _cells(app: TopApp) -> list[str]:
    table = app.query_one(DataTable)
    return [" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


async def _until(pilot: object, check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the screen")
        await pilot.pause(0.05)  # type: ignore[attr-defined]


def _screen_text(app: TopApp) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(Static))


def test_live_view_follows_a_real_daemon(spawn_daemon: Spawn, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _workspace(tmp_path)
    proc = spawn_daemon([repo.path])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the daemon's history
    app = TopApp([str(repo.path)], socket=str(proc.socket))

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: app.rows and app.link == "live")
            assert any("story-0049-0001" in row and "0/3" in row for row in _cells(app))
            first = app.reloads
            write_epic(repo.path, EPIC, _pending(2))  # no key pressed after this
            await _until(pilot, lambda: any("2/3" in row for row in _cells(app)), timeout=5)
            assert app.reloads > first
            await pilot.press("enter")
            await _until(pilot, lambda: type(app.screen).__name__ == "Detail", timeout=3)
            text = _screen_text(app)
            assert "epic story-0049-0001" in text and "progress" in text and "2/3" in text
            assert "history (" in text  # the daemon recorded the versions (issue 33)
            await pilot.press("escape")
            await pilot.press("question_mark")
            await _until(pilot, lambda: type(app.screen).__name__ == "Keys")
            assert "Enter" in _screen_text(app)
            await pilot.press("escape")
            await pilot.press("slash", *"nothing-matches", "enter")
            await _until(pilot, lambda: app.query_one(DataTable).row_count == 0)
            await pilot.press("slash", *["backspace"] * 15, "enter")
            await _until(pilot, lambda: app.query_one(DataTable).row_count == 1)
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


def test_the_daemon_going_away_is_said_and_followed_again(
    spawn_daemon: Spawn, tmp_path: Path
) -> None:
    repo = _workspace(tmp_path)
    proc = spawn_daemon([repo.path])
    app = TopApp([str(repo.path)], socket=str(proc.socket))

    async def drive() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: app.link == "live")
            proc.stop()
            await _until(pilot, lambda: app.link != "live")
            assert "daemon" in app.link
            assert "daemon" in str(app.query_one("#status", Static).render())
            proc.start()
            await _until(pilot, lambda: app.link == "live", timeout=15)
            write_epic(repo.path, EPIC, _pending(1))
            await _until(pilot, lambda: any("1/3" in row for row in _cells(app)), timeout=5)
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


def test_reconcile_preview_then_apply_after_a_yes(spawn_daemon: Spawn, tmp_path: Path) -> None:
    """`r` previews the unit's reconcile (the diff, the finding, its evidence); `a` asks,
    `y` writes it, and the row's finding goes away."""
    from agents_harness import demo_workspace

    ws = demo_workspace(tmp_path)
    proc = spawn_daemon([ws])
    state = ws / ".claude/plans/issue-42-geofencing/execution-state.json"
    before = state.read_bytes()
    app = TopApp([str(ws)], socket=str(proc.socket))

    def on_plan() -> int:
        return next(i for i, r in enumerate(app.shown) if r.key[2] == "issue-42-geofencing")

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await _until(pilot, lambda: len(app.rows) == 7 and app.link == "live")
            app.query_one(DataTable).move_cursor(row=on_plan())
            await pilot.press("r")
            await _until(pilot, lambda: "format/state-not-updated" in _screen_text(app))
            text = _screen_text(app)
            assert "evidence: .claude/plans/issue-42-geofencing/journal.md:" in text
            assert "apply these changes?" not in text
            await pilot.press("y")  # a preview: y does nothing
            assert state.read_bytes() == before
            await pilot.press("escape")
            await pilot.press("a")
            await _until(pilot, lambda: "apply these changes?" in _screen_text(app))
            await pilot.press("n")
            assert state.read_bytes() == before
            await pilot.press("a")
            await _until(pilot, lambda: "apply these changes?" in _screen_text(app))
            await pilot.press("y")
            await _until(pilot, lambda: "applied: " in _screen_text(app))
            assert state.read_bytes() != before
            await pilot.press("escape")
            await _until(pilot, lambda: "state-not-updated" not in app.shown[on_plan()].finding())
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())
