"""Issue 40, item 4: `storyd top` on every finding code storyd's own detectors, formats
and engine raise (tests/finding_samples.py), with each evidence shape they carry: the
`--once` frame, the detail (Enter) through Textual's pilot, `storyd check`'s text; a real
daemon's missing-commit finding (what top died on); and a live view that dies exits
non-zero."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from finding_samples import SHA, grouped, units

from storyd.api.topview import frame
from storyd.api.unitdetail import detail_lines
from storyd.core.evidence import evidence_lines


def _sample_units(tmp_path: Path) -> list[dict[str, Any]]:
    return units(str(tmp_path))


class TestEveryCode:
    """Every (code, evidence) sample through the text doors."""

    def test_once_frame_lists_every_code(self, tmp_path: Path) -> None:
        made = _sample_units(tmp_path)
        text = frame(made, width=200, color=False)
        for unit in made:
            code = unit["findingList"][0]["code"]
            assert any(str(unit["unit"]) in line and code in line for line in text.splitlines())

    def test_detail_shows_every_finding_and_its_evidence(self, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        for unit in _sample_units(tmp_path):
            finding = unit["findingList"][0]
            lines = detail_lines(unit, history_path=str(tmp_path / "none.db"))
            assert any(finding["code"] in line for line in lines)
            for text in evidence_lines(finding):
                assert f"      evidence: {text}" in lines

    def test_check_text_shows_evidence(self, tmp_path: Path) -> None:
        from storyd.api.check import Checked
        from storyd.api.render import check_text
        from storyd.api.units import Units

        made = _sample_units(tmp_path)
        text = check_text(Checked(Units(made, "direct", 0.0, [], [])))
        assert f"  evidence: commit {SHA}\n" in text  # the missing commit
        assert "  evidence: 125 tasks: bd-0, bd-1" in text


# the live view ----------------------------------------------------------------------------

textual = pytest.importorskip("textual", reason="the tui extra is not installed")


class _Feed:
    """A source of fixed units (the `--fleet` seam): no daemon, no NATS."""

    def __init__(self, found: list[dict[str, Any]], broken: bool = False) -> None:
        self.found = found
        self.broken = broken

    def bind(self, on_event: Any, on_state: Any) -> None:
        self.on_state = on_state

    def start(self) -> None:
        self.on_state("live")

    def stop(self) -> None:
        pass

    def read(self) -> tuple[list[dict[str, Any]], str]:
        if self.broken:
            raise RuntimeError("a bug while reading")
        return self.found, "samples"


async def _until(pilot: Any, check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the screen")
        await pilot.pause(0.02)


def _screen_text(app: Any) -> str:
    from textual.widgets import Static

    return "\n".join(str(w.render()) for w in app.screen.query(Static))


@pytest.mark.slow
def test_the_live_detail_of_every_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import DataTable

    from storyd.tui.app import TopApp

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made = grouped(str(tmp_path))
    app = TopApp(feed=_Feed(made))

    async def drive() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await _until(pilot, lambda: len(app.rows) == len(made))
            table = app.query_one(DataTable)
            for index, row in enumerate(app.shown):
                table.move_cursor(row=index)
                await pilot.press("enter")
                await _until(pilot, lambda: type(app.screen).__name__ == "Detail")
                text = _screen_text(app)
                assert "cannot be drawn" not in text
                for finding in row.unit["findingList"]:
                    assert f"{finding['detector']}/{finding['code']}" in text, row.key
                    for line in evidence_lines(finding):
                        assert f"evidence: {line}"[:60] in text, (row.key, line)
                await pilot.press("escape")
                await _until(pilot, lambda: type(app.screen).__name__ != "Detail")
            await pilot.press("q")
        assert app.return_value == 0

    asyncio.run(drive())


@pytest.mark.slow
def test_a_live_view_that_dies_exits_non_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual ends the app on an exception and returns None: that was exit 0."""
    from textual.app import App

    from storyd.tui import app as tui

    monkeypatch.setattr(tui.TopApp, "run", lambda self, **kw: App.run(self, headless=True))
    assert tui.run(feed=_Feed([], broken=True)) == 70


@pytest.mark.slow
def test_a_real_missing_commit_in_top(spawn_daemon: Any, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A DONE task whose recorded commit does not exist: `storyd top --once` and the
    live detail show it with its evidence (the detail died with KeyError 'subject')."""
    from epic_state_harness import EPIC, story_id, task_id, write_epic
    from git_harness import GitWorkspace
    from textual.widgets import DataTable

    from storyd.tui.app import TopApp

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    story = story_id(1)
    gone = "0123456789abcdef0123456789abcdef01234567"
    write_epic(repo.path, EPIC, tasks={story: {
        task_id(story, 1): {"status": "DONE", "commitSha": gone},
        task_id(story, 2): {"status": "PENDING"},
    }})  # fmt: skip
    proc = spawn_daemon([repo.path])
    app = TopApp([str(repo.path)], socket=str(proc.socket))

    async def drive() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await _until(pilot, lambda: any(
                r.worst and r.worst.get("code") == "missing" for r in app.rows))
            app.query_one(DataTable).move_cursor(row=0)
            await pilot.press("enter")
            await _until(pilot, lambda: type(app.screen).__name__ == "Detail")
            text = _screen_text(app)
            assert "commit-in-history/missing" in text
            assert f"evidence: commit {gone}" in text
            await pilot.press("escape", "q")
        assert app.return_value == 0

    asyncio.run(drive())
