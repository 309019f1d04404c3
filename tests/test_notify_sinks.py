"""notify.Notifications in process: a first look is summed up, a change as it happens is delivered.

A capturing `notify-send` on PATH stands in for the desktop (no notification daemon
runs here) and a real hook process records its stdin; `close()` delivers everything
queued before it returns, so each test reads complete records without waiting.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from notify_harness import append_stdin_hook, fake_notify_send, hook_calls

from storyd.server.engine import Look
from storyd.server.notify import Notifications

WS = "/home/me/ws"


def _event(
    kind: str, unit: str, message: str, workspace: str = WS, **finding: str
) -> tuple[dict[str, object], bytes]:
    event: dict[str, object] = {
        "event": kind,
        "clock": "ab:1",
        "generation": 1,
        "workspace": workspace,
        "stateFile": "plans/state.json",
        "unit": unit,
        "format": "epic",
        "finding": {"code": "unreachable", "severity": "warning", "message": message, **finding},
    }
    return event, orjson.dumps(event) + b"\n"


@pytest.fixture
def desktop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The record file of a capturing `notify-send` put first on PATH."""
    record = tmp_path / "notify-send.out"
    fake_notify_send(tmp_path / "bin", record)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    return record


def _notifications(record: Path) -> list[list[str]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


class TestFirstLookSummary:
    def test_warnings_and_errors_give_one_notification(self, desktop: Path) -> None:
        sinks = Notifications(desktop=True, window=0.01)
        sinks.first_look(Look(WS, 40, 3, {"error": 2, "warning": 5, "info": 1}, True))
        sinks.close()
        assert _notifications(desktop) == [
            [
                "--app-name=storyd",
                f"storyd: 3 units out of step in {WS}",
                "2 errors and 5 warnings in 3 of 40 units, found when storyd began watching. "
                "`storyd status` lists them.",
            ]
        ]

    def test_info_alone_nothing_found_or_a_later_watch_stays_in_the_log(
        self, desktop: Path
    ) -> None:
        sinks = Notifications(desktop=True, window=0.01)
        sinks.first_look(Look(WS, 40, 0, {"info": 2}, at_start=True))
        sinks.first_look(Look(WS, 40, 0, {}, at_start=True))
        sinks.first_look(Look(WS, 40, 3, {"error": 2}, at_start=False))  # asked for
        sinks.close()
        assert _notifications(desktop) == []


class TestFirstLookEvents:
    def test_only_events_after_the_first_look_reach_desktop_and_hook(
        self, desktop: Path, tmp_path: Path
    ) -> None:
        record = tmp_path / "hook.out"
        sinks = Notifications(
            desktop=True, hook=append_stdin_hook(tmp_path / "hook.py", record), window=0.01
        )
        looking = True
        ws = str(tmp_path)  # the hook runs in the workspace: a real folder
        sinks.in_first_look = lambda workspace: looking and workspace == ws
        for n in range(1, 4):
            sinks(*_event("drift", f"story-{n}", f"found {n}", ws))
        looking = False
        later = _event("drift", "story-9", "as it happened", ws)
        sinks(*later)
        sinks.close()
        assert hook_calls(record) == [[later[0]]]
        (notification,) = _notifications(desktop)
        assert notification[1:] == ["storyd: story-9 drifted from git", "drift: as it happened"]


class TestBursts:
    def test_a_burst_over_three_units_is_one_notification(self, desktop: Path) -> None:
        sinks = Notifications(desktop=True, window=0.5)
        for n in range(1, 6):
            sinks(*_event("drift", f"story-{n}", f"found {n}"))
        sinks(*_event("resolved", "story-1", "fixed"))
        sinks.close()
        assert [n[1:] for n in _notifications(desktop)] == [
            [f"storyd: 5 units changed in {WS}", "5 drift, 1 resolved. `storyd status` lists them."]
        ]

    def test_last_look_events_reach_neither_desktop_nor_hook(self, desktop: Path,
                                                            tmp_path: Path) -> None:
        record = tmp_path / "hook.out"
        sinks = Notifications(desktop=True, hook=append_stdin_hook(tmp_path / "hook.py", record),
                      window=0.01)
        sinks.in_last_look = lambda workspace: workspace == WS
        for n in range(1, 4):
            sinks(*_event("resolved", f"story-{n}", "gone with the workspace"))
        sinks.last_look(Look(WS, 3, 3, {"warning": 3}))
        sinks.close()
        assert _notifications(desktop) == [] and hook_calls(record) == []
