"""The desktop notifier is chosen at run time: osascript on macOS (the text passed as
arguments to an `on run argv` handler, never spliced into the script), notify-send
elsewhere, whichever one is on PATH when only one is.

A stand-in `osascript` records its argv and, like the real one, runs the `-e` lines as
one script with the words after them as `argv`: it fails unless the script is the
handler that displays item 2 with title item 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from notify_harness import fake_notify_send

from storyd.core.desktop import desktop_argv, desktop_tool
from storyd.server.engine import Look
from storyd.server.notify import Notifications

HANDLER = ("on run argv\n"
           "display notification (item 2 of argv) with title (item 1 of argv)\n"
           "end run")  # fmt: skip


def fake_osascript(folder: Path, record: Path) -> Path:
    """An `osascript` that records (script, argv) as a JSON line, or exits 1 with
    a syntax error when the `-e` lines are not the handler."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "osascript"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "args, lines = sys.argv[1:], []\n"
        "while args[:1] == ['-e']:\n"
        "    lines.append(args[1]); args = args[2:]\n"
        f"if '\\n'.join(lines) != {HANDLER!r}:\n"
        "    sys.exit('osascript: syntax error')\n"
        f"with open({str(record)!r}, 'a', encoding='utf-8') as out:\n"
        "    out.write(json.dumps(args) + '\\n')\n",
        encoding="utf-8")
    script.chmod(0o755)
    return script


def _records(record: Path) -> list[list[str]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


class TestChoice:
    """osascript first on macOS, notify-send first elsewhere, the one there is otherwise."""

    @pytest.mark.parametrize(("platform", "first"), [("darwin", "osascript"),
                                                     ("linux", "notify-send")])
    def test_both_on_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          platform: str, first: str) -> None:
        fake_osascript(tmp_path / "bin", tmp_path / "o")
        fake_notify_send(tmp_path / "bin", tmp_path / "n")
        monkeypatch.setenv("PATH", str(tmp_path / "bin"))
        assert desktop_tool(platform) == str(tmp_path / "bin" / first)

    @pytest.mark.parametrize("platform", ["darwin", "linux"])
    def test_only_one_on_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              platform: str) -> None:
        fake_osascript(tmp_path / "bin", tmp_path / "o")
        monkeypatch.setenv("PATH", str(tmp_path / "bin"))
        assert desktop_tool(platform) == str(tmp_path / "bin" / "osascript")
        monkeypatch.setenv("PATH", str(tmp_path / "none"))
        assert desktop_tool(platform) is None

    def test_notify_send_argv_is_unchanged(self) -> None:
        assert desktop_argv("/usr/bin/notify-send", "t", "b") == [
            "/usr/bin/notify-send", "--app-name=storyd", "t", "b"]


class TestOsascript:
    """Quotes, backslashes, newlines and AppleScript words reach the notification as text."""

    def test_text_is_passed_as_arguments(self, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
        record = tmp_path / "osascript.out"
        fake_osascript(tmp_path / "bin", record)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
        monkeypatch.setattr(sys, "platform", "darwin")
        workspace = '/Users/me/a "quoted" \\ dir" & do shell script "rm -rf ~'
        sinks = Notifications(desktop=True, window=0.01)
        sinks.first_look(Look(workspace, 10, 2, {"error": 1, "warning": 3}, True))
        sinks.close()
        assert _records(record) == [[
            f"storyd: 2 units out of step in {workspace}",
            "1 error and 3 warnings in 2 of 10 units, found when storyd began watching. "
            "`storyd status` lists them.",
        ]]
        assert sinks.counters["hook_failures"] == 0
