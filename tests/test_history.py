"""Issue 33: every version of every unit kept, lost updates found (`regressed`), shown by
`storyd history` and the `history` op, across a restart, on a real daemon."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import EventStream, wait_for
from epic_state_harness import STATE, write_epic
from git_harness import GitWorkspace

pytestmark = pytest.mark.slow

EPIC, STORY = "0049", "story-0049-0001"
T1, T2, T3 = "TASK-0049-0001-001", "TASK-0049-0001-002", "TASK-0049-0001-003"


def _tasks(shas: list[str]) -> dict[str, dict[str, object]]:
    """T1..T3, the first len(shas) DONE at those commits, the rest PENDING."""
    out: dict[str, dict[str, object]] = {}
    for n, tid in enumerate((T1, T2, T3)):
        if n < len(shas):
            out[tid] = {
                "status": "DONE",
                "commitSha": shas[n],
                "completedAt": "2026-11-25T10:00:00Z",
            }
        else:
            out[tid] = {"status": "PENDING"}
    return out


def _stale_copy(ws: Path, data: bytes) -> None:
    """A second writer: the producers' own protocol, under `flock -x`, tmp then mv."""
    state = ws / STATE
    stale = ws / "stale.json"
    stale.write_bytes(data)
    subprocess.run(["flock", "-x", str(state), "sh", "-c",
                    f"cp '{stale}' '{state}.tmp' && mv '{state}.tmp' '{state}'"],
                   check=True, timeout=10)  # fmt: skip


def _history(env: dict[str, str], ws: Path, *extra: str) -> list[dict[str, object]]:
    done = run_storyd_cli("history", "--workspace", str(ws), "--epic-id", EPIC,
                          "--story-id", STORY, "--json", *extra, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _regressed(proc: object, ws: Path) -> list[dict[str, object]]:
    units = proc.units(ws, detail=True)  # type: ignore[attr-defined]
    return [f for u in units for f in u.get("findingList", []) if f["code"] == "regressed"]


def test_a_stale_copy_is_found_listed_and_kept_across_a_restart(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    repo.commit("initial", {"README": "x\n"})
    write_epic(ws, EPIC, tasks={STORY: _tasks([])})
    proc = spawn_daemon([ws])  # type: ignore[operator]
    env = proc.env
    shas: list[str] = []
    with EventStream(proc) as events:
        for n in (1, 2, 3):  # three writes, each after its task's commit
            shas += repo.tasks_commits(STORY, 1, first=n)
            mark = events.mark()
            write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
            events.wait(lambda e: e["event"] == "changed" and e.get("done") == n,  # noqa: B023
                        start=mark)  # fmt: skip
        mark = events.mark()
        stale = {"epic": EPIC, "stories": {STORY: {"tasks": _tasks(shas[:1])}}}
        _stale_copy(ws, json.dumps(stale).encode())
        _, drift = events.wait(lambda e: e["event"] == "drift"
                               and e["finding"]["code"] == "regressed", start=mark)  # fmt: skip
    lost = sorted(f["task"] for f in _regressed(proc, ws))
    assert lost == [T2, T3]
    assert drift["finding"]["severity"] == "warning"
    assert drift["finding"]["evidence"]["why"] == "undone"
    check = run_storyd_cli("check", "--workspace", str(ws), env=env)
    assert check.returncode == 1, check.stdout + check.stderr
    assert b"regressed" in check.stdout + check.stderr

    found = wait_for(lambda: (v := _history(env, ws)) and len(v) >= 5 and v,
                     message="five versions in history")  # fmt: skip
    assert [v["done"] for v in found] == [0, 1, 2, 3, 1]
    assert any(f"{T2} DONE → PENDING" in c for c in found[-1]["changes"])
    over_socket = proc.request({"op": "history", "workspace": str(ws), "stateFile": STATE,
                                "unit": STORY})  # fmt: skip
    assert [v["version"] for v in over_socket["versions"]] == [v["version"] for v in found]
    picture = run_storyd_cli("history", "--workspace", str(ws), "--epic-id", EPIC,
                             "--story-id", STORY, env=env).stdout.decode()  # fmt: skip
    assert "[" + "#" * 30 + "]   3/3" in picture, picture

    proc.stop()
    again = spawn_daemon([ws])  # type: ignore[operator]
    assert sorted(f["task"] for f in _regressed(again, ws)) == [T2, T3], "marks survive"
    assert len(_history(env, ws)) >= 5
    with EventStream(again) as events:
        mark = events.mark()
        write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})  # progress comes back
        events.wait(lambda e: e["event"] == "resolved"
                    and e["finding"]["code"] == "regressed", start=mark)  # fmt: skip
    wait_for(lambda: not _regressed(again, ws), message="the findings to resolve")
    assert run_storyd_cli("check", "--workspace", str(ws), env=env).returncode == 0
    again.stop()
    assert (
        os.stat(Path(env["XDG_STATE_HOME"]) / "storyd" / "history.sqlite3").st_mode & 0o777 == 0o600
    )


def test_reconcile_restores_what_a_stale_copy_lost_and_undo_puts_it_back(
    tmp_path: Path, spawn_daemon: object
) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    ws = repo.path
    shas = repo.tasks_commits(STORY, 2)
    write_epic(ws, EPIC, tasks={STORY: _tasks(shas[:1])})
    proc = spawn_daemon([ws])  # type: ignore[operator]
    env = proc.env
    with EventStream(proc) as events:
        mark = events.mark()
        write_epic(ws, EPIC, tasks={STORY: _tasks(shas)})
        events.wait(lambda e: e["event"] == "changed" and e.get("done") == 2, start=mark)
        mark = events.mark()
        stale = json.dumps({"epic": EPIC, "stories": {STORY: {"tasks": _tasks(shas[:1])}}})
        _stale_copy(ws, stale.encode())
        events.wait(lambda e: e["event"] == "drift" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
        stale_bytes = (ws / STATE).read_bytes()
        # history's marks reach the database before reconcile reads them
        wait_for(lambda: proc.stats()["history"]["queued"] == 0, message="the writer")  # type: ignore[index]
        preview = run_storyd_cli("reconcile", "--workspace", str(ws), "--only", "regressed",
                                 env=env)  # fmt: skip
        assert preview.returncode == 1, preview.stderr  # 1: a preview with repairs to apply
        assert f"history/regressed {STORY} {T2}" in preview.stdout.decode(), preview.stdout
        mark = events.mark()
        applied = run_storyd_cli("reconcile", "--workspace", str(ws), "--only", "regressed",
                                 "--apply", env=env)  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        events.wait(lambda e: e["event"] == "resolved" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
        task = json.loads((ws / STATE).read_bytes())["stories"][STORY]["tasks"][T2]
        assert task == {"status": "DONE", "commitSha": shas[1],
                        "completedAt": "2026-11-25T10:00:00Z"}  # fmt: skip
        assert run_storyd_cli("check", "--workspace", str(ws), env=env).returncode == 0
        mark = events.mark()
        undone = run_storyd_cli("reconcile", "--undo", "--workspace", str(ws), env=env)
        assert undone.returncode == 0, undone.stderr
        events.wait(lambda e: e["event"] == "drift" and e["finding"]["code"] == "regressed",
                    start=mark)  # fmt: skip
    assert (ws / STATE).read_bytes() == stale_bytes, "undo puts the stale copy back"
