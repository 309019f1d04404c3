"""Issue 20, items 2, 5 and 10 through a real daemon and the real CLI.

A workspace's last look (`storyd unwatch`) is summed up in one `last_look` log line: no
hook run, no "back in sync" desktop notification per unit. The hook runs like
watchman's triggers: once per workspace per burst, in the workspace, with STORYD_*
in its environment, the events on stdin, filtered by workspace, code and severity.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, EventStream, wait_for, write_config
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace
from notify_harness import fake_notify_send

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
MISSING = "0" * 40


def _stories(count: int, *, first: int = 1) -> dict[str, object]:
    """`count` stories whose one DONE task names a commit that does not exist (an error)."""
    return {
        story_id(n): {"tasks": {
            task_id(story_id(n), 1): {"status": "DONE", "commitSha": MISSING,
                                      "completedAt": "2026-01-01T12:00:00Z"},
            task_id(story_id(n), 2): {"status": "PENDING"},
        }}
        for n in range(first, first + count)
    }


def _workspace(path: Path) -> GitWorkspace:
    """A repository with a base commit and a clean state file (one story, not started):
    plans/ exists before the daemon watches it."""
    repo = GitWorkspace(path).init()
    repo.commit("base", {"README": "hello\n"})
    write_epic(repo.path, EPIC, {story_id(99): {"tasks": {task_id(story_id(99), 1): {
        "status": "PENDING"}}}})
    return repo


def _recording_hook(script: Path, record: Path) -> list[str]:
    """A hook that appends one JSON line per run: its cwd, STORYD_* and stdin's lines."""
    script.write_text(
        "import json, os, sys\n"
        "lines = [json.loads(l) for l in sys.stdin.buffer.read().splitlines()]\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('STORYD_')\n"
        "       and k != 'STORYD_MACOS_STANDIN'}  # the test run's own (tests/macos_standin)\n"
        f"with open({str(record)!r}, 'a') as out:\n"
        "    out.write(json.dumps({'cwd': os.getcwd(), 'env': env, 'events': lines}) + '\\n')\n",
        encoding="utf-8")
    return [sys.executable, str(script)]


def _runs(record: Path) -> list[dict[str, object]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def _runs_once_there_are(record: Path, count: int) -> list[dict[str, object]]:
    wait_for(lambda: len(_runs(record)) >= count, 10, f"{count} hook runs")
    return _runs(record)


def _toml(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _daemon(spawn_daemon: Spawn, tmp_path: Path, watched: list[Path], notify: str,
            ) -> tuple[DaemonProcess, Path, Path]:
    record, desktop = tmp_path / "hook.out", tmp_path / "notify-send.out"
    hook = _recording_hook(tmp_path / "hook.py", record)
    fake_notify_send(tmp_path / "fakebin", desktop)
    write_config(tmp_path, f"[notify]\nhook = {_toml(hook)}\n{notify}")
    proc = spawn_daemon(watched, start=False)
    proc.env["PATH"] = f"{tmp_path / 'fakebin'}{os.pathsep}{proc.env['PATH']}"
    proc.start()
    return proc, record, desktop


def _titles(desktop: Path) -> list[str]:
    if not desktop.exists():
        return []
    return [json.loads(line)[1] for line in desktop.read_text().splitlines()]


class TestLastLook:
    def test_unwatch_is_summed_up_once(self, spawn_daemon: Spawn, tmp_path: Path) -> None:
        """Unwatching 12 units with errors: one last_look line, no hook run, no "back in
        sync" (0.2 ran the hook and sent a notification per unit)."""
        a, b = _workspace(tmp_path / "a"), _workspace(tmp_path / "b")
        write_epic(a.path, EPIC, _stories(12))
        proc, record, desktop = _daemon(spawn_daemon, tmp_path, [a.path, b.path],
                                        "desktop = true\n")
        where = str(a.path.resolve())
        proc.wait_log("first_look", workspace=where, at_start=True)
        wait_for(lambda: len(_titles(desktop)) == 1, 5, "the start-up's one summary")

        done = run_storyd_cli("unwatch", str(a.path), env=proc.env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode() == f"not watching {where}\n"
        last = proc.wait_log("last_look", workspace=where)
        assert (last["units"], last["units_out_of_step"], last["errors"]) == (12, 12, 12), last
        assert where not in proc.stats()["workspaces"]  # type: ignore[operator]

        # a drift in b afterwards: the notifier handles items in order, so once b's hook
        # has run, anything the unwatch queued would have been delivered before it
        write_epic(b.path, EPIC, _stories(1))
        (run,) = _runs_once_there_are(record, 1)
        assert run["cwd"] == str(b.path.resolve())
        titles = _titles(desktop)
        assert not [t for t in titles if "back in sync" in t], titles
        assert len(titles) == 2, titles  # the start's summary of a, then b's drift
        logged = proc.log_events()
        assert [e for e in logged if e["event"] == "last_look"] == [last]
        assert not [e for e in logged if e["event"] == "resolved" and e["level"] != "debug"]

    def test_watch_and_unwatch_commands(self, spawn_daemon: Spawn, tmp_path: Path) -> None:
        a = _workspace(tmp_path / "a")
        write_epic(a.path, EPIC, _stories(3))
        proc = spawn_daemon([])
        where = str(a.path.resolve())
        done = run_storyd_cli("watch", str(a.path), env=proc.env)
        assert (done.returncode, done.stdout.decode()) == (0, f"watching {where}: 3 units\n")
        assert where in proc.stats()["workspaces"]  # type: ignore[operator]
        done = run_storyd_cli("unwatch", "--workspace", str(a.path), env=proc.env)
        assert (done.returncode, done.stdout.decode()) == (0, f"not watching {where}\n")
        done = run_storyd_cli("unwatch", str(a.path), env=proc.env)
        assert done.stdout.decode() == f"not watching {where} (was not watched)\n"
        done = run_storyd_cli("watch", str(tmp_path / "nowhere"), env=proc.env)
        assert done.returncode == 64
        assert done.stderr.decode().startswith(f"storyd watch: {tmp_path / 'nowhere'}: ")
        proc.stop()
        done = run_storyd_cli("watch", str(a.path), env=proc.env)
        assert done.returncode == 69 and b"no daemon answers" in done.stderr


class TestHook:
    def test_one_run_per_burst_in_the_workspace_filtered(self, spawn_daemon: Spawn,
                                                         tmp_path: Path) -> None:
        a, b = _workspace(tmp_path / "a"), _workspace(tmp_path / "b")
        a_path, b_path = str(a.path.resolve()), str(b.path.resolve())
        proc, record, _ = _daemon(
            spawn_daemon, tmp_path, [a.path, b.path],
            f"desktop = false\nhook_workspaces = [{json.dumps(str(a.path))}]\n"
            'hook_codes = ["missing"]\nhook_severities = ["error"]\n')
        with EventStream(proc) as events:
            write_epic(b.path, EPIC, _stories(3))  # b is not in hook_workspaces
            stories = _stories(3)
            # story 9: a DONE task at a commit that exists, not in the branch: another code
            sha = a.git("commit-tree", "-m", "elsewhere", a.git("write-tree"))
            stories[story_id(9)] = {"tasks": {task_id(story_id(9), 1): {
                "status": "DONE", "commitSha": sha, "completedAt": "2026-01-01T12:00:00Z"}}}
            write_epic(a.path, EPIC, stories)
            drift = [e for _, e in events.wait_count(
                lambda e: e["event"] == "drift" and e["workspace"] == a_path, 4)]
        codes = {e["finding"]["code"] for e in drift}  # type: ignore[index]
        assert "missing" in codes and len(codes) == 2, codes  # story 9's is not "missing"
        (run,) = _runs_once_there_are(record, 1)
        assert run["cwd"] == a_path
        got = run["events"]
        assert isinstance(got, list)
        newest = max(got, key=lambda e: int(e["generation"]))
        assert run["env"] == {
            "STORYD_WORKSPACE": a_path,
            "STORYD_CLOCK": newest["clock"],
            "STORYD_SOCKET": str(proc.socket),
            "STORYD_EVENT": "drift",
        }
        assert sorted(e["unit"] for e in got) == [story_id(n) for n in (1, 2, 3)]
        assert {e["finding"]["code"] for e in got} == {"missing"}
        # b's burst came first and was filtered out: a later run of a's is the second
        write_epic(a.path, EPIC, _stories(4))  # story 4 is new: one more drift
        runs = _runs_once_there_are(record, 2)
        assert [r["cwd"] for r in runs] == [a_path, a_path]
        assert b_path not in {str(r["env"]["STORYD_WORKSPACE"]) for r in runs}  # type: ignore[index]
