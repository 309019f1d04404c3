"""storyd.api, the functions under every door, called in this process: each one against
a real daemon subprocess and without one (the same answer, `source` aside), and its
failures as typed errors carrying the exit code. Then the layer's rules: no module
outside the command line imports it, and nothing captures stdout or stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents_harness import demo_workspace
from daemon_harness import daemon_env

from storyd.api import check, epic, reconciling, render, resume, units, watch
from storyd.api.client import DaemonUnavailable
from storyd.core.errors import (
    StateFileMissing,
    StorydError,
    StoryNotInState,
    UsageError,
)
from storyd.core.query import Query

STORY = ("0049", "story-0049-0013")  # behind git in the demo: resumes at phase-2-task-4


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo workspace; this process's config, runtime and state under tmp_path, and
    a socket nobody listens on (a test with a daemon passes its socket)."""
    env = daemon_env(tmp_path, tmp_path / "nobody.sock")
    for name in ("XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "STORYD_SOCKET"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return demo_workspace(tmp_path)


def _socket(spawn_daemon: Any, ws: Path, mode: str) -> str | None:
    return str(spawn_daemon([ws]).socket) if mode == "daemon" else None


def _key(found: units.Units) -> list[tuple[object, object, object]]:
    return [(u["stateFile"], u["unit"], u["resumePoint"]) for u in found.units]


@pytest.mark.slow
def test_units_and_check_agree_with_and_without_a_daemon(spawn_daemon: Any, ws: Path) -> None:
    alone = units.units([str(ws)])
    assert alone.source == "direct" and alone.clock is None and alone.notes == []
    daemon = spawn_daemon([ws])
    served = units.units([str(ws)], socket=str(daemon.socket))
    assert served.source == "daemon" and served.clock
    assert _key(served) == _key(alone) and len(alone.units) == 7
    in_flight = units.units([str(ws)], socket=str(daemon.socket), in_flight=True)
    assert 0 < len(in_flight.units) < 7
    assert all(u["resumePoint"] != "all-done" for u in in_flight.units)
    checked = check.check([str(ws)], socket=str(daemon.socket))
    assert checked.code == 1 and checked.problems > 0
    assert checked.found.source == "daemon"
    assert {f["unit"] for f in checked.findings()} >= {STORY[1]}
    text = render.check_text(checked)
    assert text.endswith(f"7 units, {checked.problems} problems\n")


def test_units_direct_of_a_folder_without_state_files(tmp_path: Path, ws: Path) -> None:
    (tmp_path / "empty").mkdir()
    found = units.units([str(tmp_path / "empty")], direct=True)
    assert (found.units, found.unreadable, found.source) == ([], [], "direct")
    assert check.check([str(tmp_path / "empty")], direct=True).code == 0


def test_a_missing_config_file_is_a_setup_error(tmp_path: Path, ws: Path) -> None:
    with pytest.raises(StorydError) as caught:
        units.units([str(ws)], direct=True, config=str(tmp_path / "nope.toml"))
    assert caught.value.code == 78 and "no such file" in caught.value.message


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["daemon", "direct"])
def test_resume_detail_and_its_typed_errors(spawn_daemon: Any, ws: Path, mode: str) -> None:
    sock = _socket(spawn_daemon, ws, mode)
    found = resume.detail(Query(str(ws), epic=STORY[0], story=STORY[1], socket=sock))
    assert found.envelope["resumePoint"] == "phase-2-task-4"
    assert (found.source == "direct") == (mode == "direct")  # the daemon says "cache"
    assert {"unrecorded", "unreachable"} <= {f["code"] for f in found.findings}
    with pytest.raises(StoryNotInState) as missing:
        resume.detail(Query(str(ws), epic="0049", story="story-0049-0099", socket=sock))
    assert missing.value.code == 2 and "Story not in execution-state.json" in str(
        missing.value.message)
    with pytest.raises(StateFileMissing) as absent:
        resume.detail(Query(str(ws), epic="0098", story="story-0098-0001", socket=sock))
    assert absent.value.code == 1


def test_resume_argv_keeps_every_value_a_value(ws: Path) -> None:
    """A Query's words for the daemon's resume-cli op: `--name=value`, so a state file
    named `--help` is looked for, not taken for a flag."""
    query = Query(str(ws), state_file="--help", unit="-x", detail=True)
    assert resume.argv_of(query)[1:3] == ["--state-file=--help", "--unit=-x"]
    out = resume.ask(query)
    assert out.code != 0 and out.stdout == b""
    assert "usage" not in "\n".join(out.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["daemon", "direct"])
def test_epic_view_and_its_typed_errors(spawn_daemon: Any, ws: Path, mode: str) -> None:
    sock = _socket(spawn_daemon, ws, mode)
    got = epic.epic(str(ws), "49", socket=sock)
    assert got.source == mode
    assert got.view == epic.epic(str(ws), "0049", direct=True).view
    with pytest.raises(StateFileMissing) as absent:
        epic.epic(str(ws), "98", socket=sock)
    assert absent.value.code == 1


@pytest.mark.parametrize("bad", ["--help", "-x", ""])
def test_an_epic_id_that_is_not_one_is_a_usage_error(ws: Path, bad: str) -> None:
    with pytest.raises(UsageError) as caught:
        epic.epic(str(ws), bad)
    assert caught.value.code == 64 and "invalid --epic-id" in caught.value.message


@pytest.mark.slow
def test_reconcile_preview_apply_undo(ws: Path) -> None:
    chosen = reconciling.selection(str(ws), epic_id=STORY[0], story_id=STORY[1])
    preview = reconciling.reconcile(str(ws), chosen)
    assert preview.code == 1 and preview.plan.changed and not preview.applied
    assert preview.as_dict()["applied"] is False
    applied = reconciling.reconcile(str(ws), chosen, apply=True)
    assert applied.code == 0 and applied.applied and applied.as_dict()["applied"] is True
    again = resume.detail(Query(str(ws), epic=STORY[0], story=STORY[1], direct=True))
    assert again.envelope["resumePoint"] == "phase-2-task-5"
    restored = reconciling.undo(str(ws))
    assert len(restored) == len(applied.plan.files) >= 1
    back = resume.detail(Query(str(ws), epic=STORY[0], story=STORY[1], direct=True))
    assert back.envelope["resumePoint"] == "phase-2-task-4"
    with pytest.raises(StorydError) as nothing:
        reconciling.undo(str(ws))
    assert nothing.value.code == 1


@pytest.mark.parametrize(("parts", "words"), [
    ({"story_id": "story-0049-0013"}, "--story-id needs --epic-id"),
    ({"state_file": "x.json", "epic_id": "49"}, "--state-file replaces"),
    ({"unit": "u"}, "--unit goes with --state-file"),
    ({"epic_id": "--help"}, "invalid --epic-id '--help'"),
    ({"epic_id": "49", "story_id": "-x"}, "invalid --story-id '-x'"),
])
def test_a_bad_selection_is_a_usage_error(ws: Path, parts: dict[str, str], words: str) -> None:
    with pytest.raises(UsageError) as caught:
        reconciling.selection(str(ws), **parts)
    assert words in caught.value.message and caught.value.code == 64


def test_repair_codes_and_folders_are_checked(tmp_path: Path) -> None:
    assert reconciling.only_codes(None) is None
    with pytest.raises(UsageError, match="unknown repair code"):
        reconciling.only_codes("no-such-code")
    with pytest.raises(UsageError, match="not a folder"):
        reconciling.folder(str(tmp_path / "absent"))


def test_watch_without_a_daemon_is_unavailable_with_code_69(ws: Path) -> None:
    with pytest.raises(DaemonUnavailable) as caught:
        list(watch.watch([str(ws)], timeout=1.0))
    assert caught.value.code == 69


@pytest.mark.slow
def test_watch_and_unwatch_through_a_daemon(spawn_daemon: Any, ws: Path, tmp_path: Path) -> None:
    daemon = spawn_daemon([])
    sock = str(daemon.socket)
    [watched] = watch.watch([str(ws)], sock)
    assert watched.error is None and watched.units == 7
    [gone, again] = watch.unwatch([str(ws), str(ws)], sock)
    assert gone.was and not again.was
    [refused] = watch.watch([str(tmp_path / "absent")], sock)
    assert refused.error and refused.folder == str(tmp_path / "absent")


def test_render_shares_the_bar_and_colours() -> None:
    assert render.bar(5, 10) == "[" + "#" * 10 + "-" * 10 + "]"
    assert render.bar(0, 0) == "[" + "-" * 20 + "]"
    assert render.paint("x", "error", True) == "\033[31mx\033[0m"
    assert render.paint("x", "error", False) == "x"
