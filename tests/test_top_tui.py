"""Issue 34: the live view (`storyd top`) driven through Textual's own pilot, against a
real daemon subprocess: the first frame lists the units, a write to a state file shows
without a key press, Enter opens the detail, `/` filters, `?` lists the keys, `r`
previews and `a` applies a reconcile after a `y`, `q` exits 0, and a daemon that goes
away is said and reconnected to."""

from __future__ import annotations

import asyncio
import re
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


def _epic(repo: Path, epic: str, done: int) -> None:
    story = f"story-{epic}-0001"
    tasks = {f"TASK-{epic}-0001-{n:03d}": {"status": "DONE" if n <= done else "PENDING"}
             for n in (1, 2, 3)}  # fmt: skip
    write_epic(repo, epic, {story: {"tasks": tasks}})


def test_a_write_touches_only_its_row_and_sessions_show_their_state(
    spawn_daemon: Spawn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four epics, one unit each: a write to one changes that row's changed cells; the
    other rows keep their very cell objects (not rebuilt), and the order by rank holds.
    A session waiting for a permission on a unit is shown with its state and unit."""
    import os

    from storyd.api import sessions

    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    epics = ("0050", "0051", "0052", "0053")
    for epic in epics:
        _epic(repo.path, epic, 0)
        os.utime(repo.path / f"plans/epic-{epic}/execution-state.json", (0, time.time() - 7200))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    record = {"session": "3f2a91c0-aaaa", "workspace": str(repo.path), "agent": "claude",
              "files": {}}  # fmt: skip
    sessions.mark(record, "notification", note="Claude needs your permission to use Bash",
                  on=["plans/epic-0051/execution-state.json", None])  # fmt: skip
    assert sessions.save(record)
    proc = spawn_daemon([repo.path])
    app = TopApp([str(repo.path)], socket=str(proc.socket))

    async def drive() -> None:
        async with app.run_test(size=(100, 24)) as pilot:
            await _until(pilot, lambda: len(app.rows) == 4 and app.link == "live")
            panel = str(app.query_one("#sessions", Static).render())
            assert re.search(r"claude  3f2a91c0  waiting \d+s on story-0051-0001: Claude needs "
                             "your permission to use Bash", panel), panel  # fmt: skip
            table = app.query_one(DataTable)
            keys = list(app.sync.order)
            before = {key: table.get_row(key) for key in keys}
            reloads, touched = app.reloads, app.sync.touched_total
            _epic(repo.path, "0052", 3)  # story-0052-0001 done: it sinks to the bottom
            await _until(pilot, lambda: app.reloads > reloads and app.sync.order[-1].endswith(
                "story-0052-0001"), timeout=5)  # fmt: skip
            # one row touched by the reloads since the write (a later one, e.g. after the
            # detectors' pass, may touch none: the last apply alone is not the measure)
            assert app.sync.touched_total - touched == 1
            changed = next(k for k in keys if k.endswith("story-0052-0001"))
            for key in keys:
                after = table.get_row(key)
                same = [a is b for a, b in zip(before[key], after, strict=True)]
                if key != changed:
                    assert all(same), key  # the very same cell objects
                else:
                    assert same == [False] * 7  # the style changed (done is green): all cells
            # the unit a session waits on comes first: its user must answer
            assert [r.key[2] for r in app.shown] == [
                "story-0051-0001", "story-0050-0001", "story-0053-0001", "story-0052-0001"]
            assert app.shown[0].rank == "waiting"
            assert [str(table.get_row_at(i)[1]) for i in range(4)] == [
                r.key[2] for r in app.shown]  # the table's order is the view's
            # same rank, one task more: only the cells whose text changed are new
            first = next(k for k in keys if k.endswith("story-0050-0001"))
            before = {key: table.get_row(key) for key in keys}
            reloads = app.reloads
            _epic(repo.path, "0050", 1)
            await _until(pilot, lambda: app.reloads > reloads and "1/3" in str(
                table.get_row(first)[2]), timeout=5)  # fmt: skip
            after = table.get_row(first)
            same = [a is b for a, b in zip(before[first], after, strict=True)]
            assert same == [str(a) == str(b) for a, b in zip(before[first], after, strict=True)]
            assert same[:2] == [True, True] and same[2] is False  # format, unit kept
            for key in keys:
                if key != first:
                    assert all(a is b for a, b in zip(before[key], table.get_row(key),
                                                      strict=True)), key  # fmt: skip
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


def test_a_thousand_rows_changing_at_once_stay_quick_and_columns_widen() -> None:
    """Every row's AGE growing a character (`-` -> `9s`) once made Textual measure the
    whole column per cell (1,000 x 1,000 measures: 26 s); a cell wider than its column
    widens it."""
    from storyd.api.topview import rows

    units = [{"workspace": "/w", "stateFile": "plans/e.json", "unit": f"story-{i:04d}",
              "format": "epic", "done": 1, "total": 3, "resumePoint": "t2", "findingList": []}
             for i in range(1000)]  # fmt: skip
    app = TopApp(["/w"], follow=False)
    app.reload = lambda: None  # type: ignore[method-assign]  # rows come from the test

    async def drive() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            made = rows(units, stat=False)  # AGE `-`: the column is as wide as its title
            app.show(made, "test")
            await pilot.pause()
            for row in made:
                row.changed = time.time() - 9  # `9s`: wider than `-`, narrower than `AGE`
            started = time.monotonic()
            app.show(made, "test")
            await pilot.pause()
            assert time.monotonic() - started < 3.0
            assert app.sync.touched == 1000
            table = app.query_one(DataTable)
            resume = app.sync.columns[4]
            narrow = table.columns[resume].content_width
            made[0].unit["resumePoint"] = "a-much-longer-resume-point-than-before"
            app.show(made, "test")
            await pilot.pause()
            assert table.columns[resume].content_width > narrow
            await pilot.press("q")

    asyncio.run(drive())
