"""One request type, one path rule: what every op refuses, in one line, never a traceback.

Issue 24 items 1 and 11 (NUL bytes, a symlink out of the workspace by --epic-id, a watch
of `/`), through a real daemon and the real CLI; each failed on 467383b.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from cli_harness import run_storyd_cli
from epic_state_harness import epic_relpath, write_epic

pytestmark = pytest.mark.slow

STORY = "story-0049-0001"
TASKS = {"TASK-1": {"status": "PENDING"}}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    write_epic(path, "0049", {STORY: {"tasks": TASKS}})
    return path


def _refused(answer: dict[str, object], *words: str) -> None:
    assert answer["ok"] is False, answer
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == 64, error
    message = str(error["message"])
    assert "\n" not in message and all(w in message for w in words), message


def test_nul_bytes_are_usage_errors_on_every_op(spawn_daemon, ws: Path) -> None:
    proc = spawn_daemon([ws])
    nul_ws = f"{ws}\0/x"
    requests = [
        {"op": "resume", "workspace": nul_ws, "epic": "0049", "story": STORY},
        {"op": "resume", "workspace": str(ws), "stateFile": "plans/\0/x.json"},
        {"op": "resume", "workspace": str(ws), "stateFile": epic_relpath("0049"), "unit": "a\0"},
        {"op": "list", "workspace": nul_ws},
        {"op": "watch", "workspace": nul_ws},
        {"op": "unwatch", "workspace": nul_ws},
        {"op": "epic", "workspace": nul_ws, "epic": "0049"},
        {"op": "reconcile", "workspace": nul_ws},
    ]
    for request in requests:
        _refused(proc.request(request), "NUL")
    with proc.connect() as line:
        line.send({"op": "resume-cli", "argv": ["--state-file", "\0"], "cwd": str(ws)})
        raw = line.read_all()
    assert raw.endswith(b"\n=64\n") or b"\n=64 " in raw, raw
    assert b"NUL" in raw
    assert "Traceback" not in proc.log_text()
    assert proc.request({"op": "ping"})["ok"] is True


def test_an_epic_file_linked_out_of_the_workspace_is_refused_both_ways(
    spawn_daemon, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    write_epic(outside, "0049", {STORY: {"tasks": TASKS}})
    ws = tmp_path / "ws"
    folder = ws / "plans" / "epic-0049"
    folder.mkdir(parents=True)
    (folder / "execution-state.json").symlink_to(outside / epic_relpath("0049"))
    (ws / ".git").mkdir()  # a workspace
    args = ("resume", "--epic-id", "0049", "--story-id", STORY, "--workspace", str(ws))
    proc = spawn_daemon([ws])
    for extra in (("--direct",), ()):
        done = run_storyd_cli(*args, *extra, env=proc.env)
        assert done.returncode == 64, done
        assert b"outside the workspace" in done.stderr and done.stdout == b""
    answer = proc.request({"op": "resume", "workspace": str(ws), "epic": "0049", "story": STORY})
    _refused(answer, "outside the workspace")


def test_watch_refuses_what_is_not_a_workspace(spawn_daemon, tmp_path: Path) -> None:
    proc = spawn_daemon([])
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "notes.txt").write_text("x", encoding="utf-8")
    _refused(proc.request({"op": "watch", "workspace": "/"}), "root")
    _refused(proc.request({"op": "watch", "workspace": str(loose)}), "not a workspace")
    assert proc.stats()["workspaces"] == []
    (loose / "plans").mkdir()
    answer = proc.request({"op": "watch", "workspace": str(loose)})
    assert answer["ok"] is True and answer["watching"] is True, orjson.dumps(answer)


def test_a_unit_over_the_task_limit_is_refused_with_a_finding(
    spawn_daemon, tmp_path: Path
) -> None:
    from storyd.core.pipeline import MAX_UNIT_TASKS

    ws = tmp_path / "ws"
    big = {f"T{n}": {"status": "PENDING"} for n in range(MAX_UNIT_TASKS + 1)}
    other = "story-0049-0002"
    write_epic(ws, "0049", {STORY: {"tasks": big}, other: {"tasks": TASKS}})
    proc = spawn_daemon([ws])
    for extra in (("--direct",), ()):
        args = ("resume", "--epic-id", "0049", "--workspace", str(ws), *extra)
        done = run_storyd_cli(*args, "--story-id", STORY, env=proc.env)
        assert done.returncode == 65 and done.stdout == b"", done
        assert b"100,001 tasks" in done.stderr and done.stderr.count(b"\n") == 1
        fine = run_storyd_cli(*args, "--story-id", other, env=proc.env)
        assert fine.returncode == 0, fine
    units = {u["unit"]: u for u in proc.units(ws)}
    assert units[STORY]["total"] == 0 and "100,001 tasks" in str(units[STORY]["error"])
