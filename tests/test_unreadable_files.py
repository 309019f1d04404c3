"""A state file that never parsed is not invisible (issue 20 item 1), end to end.

`check` fails naming the file, the cause and the position; `status` and `list` show it
as unreadable; through the daemon (its `list` answer's `unreadable`) and `--direct`
alike. Each of these failed on 467383b ("0 units, 0 problems", exit 0).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from cli_harness import run_storyd_cli
from daemon_harness import wait_for
from epic_state_harness import epic_relpath, write_epic

pytestmark = pytest.mark.slow

GOOD = {"story-0049-0001": {"tasks": {"TASK-1": {"status": "PENDING"}}}}


def _broken(tmp_path: Path) -> Path:
    """A workspace with one good epic and one whose file ends in a trailing comma."""
    ws = tmp_path / "ws"
    write_epic(ws, "0049", GOOD)
    bad = ws / epic_relpath("0050")
    bad.parent.mkdir(parents=True)
    bad.write_text('{"epic": "0050", "stories": {},}\n', encoding="utf-8")
    return ws


def test_check_and_status_name_a_file_that_never_parsed(spawn_daemon, tmp_path: Path) -> None:
    ws = _broken(tmp_path)
    proc = spawn_daemon([ws])
    wait_for(lambda: proc.stats()["unreadable"], message="the daemon to meet the broken file")
    for extra in (("--direct",), ()):
        check = run_storyd_cli("check", "--workspace", str(ws), *extra, env=proc.env)
        out = check.stdout.decode()
        assert check.returncode == 1, (extra, check)
        assert f"UNREADABLE {ws}/{epic_relpath('0050')}" in out, out
        assert "line 1" in out and "1 unreadable state file" in out, out
        status = run_storyd_cli("status", "--workspace", str(ws), *extra, env=proc.env)
        assert f"UNREADABLE {ws}/{epic_relpath('0050')}" in status.stdout.decode(), status
        assert "story-0049-0001" in status.stdout.decode()
    listed = proc.request({"op": "list", "workspace": str(ws)})
    [entry] = listed["unreadable"]  # type: ignore[misc]
    assert entry["stateFile"] == epic_relpath("0050") and entry["units"] == 0
    assert "trailing comma" in entry["error"] or "line 1" in entry["error"], entry
    assert orjson.dumps(listed)  # a plain JSON answer


def test_a_file_torn_after_a_good_read_shows_its_last_good_units(
    spawn_daemon, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    write_epic(ws, "0049", GOOD)
    proc = spawn_daemon([ws])
    (ws / epic_relpath("0049")).write_text('{"epic": "0049", "stories": {', encoding="utf-8")
    wait_for(lambda: proc.stats()["unreadable"], message="the tear to be seen")
    listed = proc.request({"op": "list", "workspace": str(ws)})
    [entry] = listed["unreadable"]  # type: ignore[misc]
    assert entry["units"] == 1 and entry["since"]
    status = run_storyd_cli("status", "--workspace", str(ws), env=proc.env)
    assert "serving 1 last good unit" in status.stdout.decode(), status
    check = run_storyd_cli("check", "--workspace", str(ws), env=proc.env)
    assert check.returncode == 1
