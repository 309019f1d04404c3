"""`storyd reconcile` end to end: real git repositories, real `flock -x` writers, a child
killed between write and rename, undo, `--only`, the socket op and the daemon's auto-apply.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import (
    DaemonProcess,
    EventStream,
    reconcile_env,
    wait_for,
    write_config,
)
from epic_state_harness import EPIC, STATE, STORY, task_id
from git_harness import GitWorkspace
from locks_harness import exclusively_locked

from storyd.api.reconcile import make_plan
from storyd.api.reconcile.apply import apply
from storyd.api.reconcile.atomic import HOOK_ENV, TEMP_MARK
from storyd.api.reconcile.gather import Selection
from storyd.api.reconcile.plan import Plan
from storyd.config import Config, Limits

Spawn = Callable[..., DaemonProcess]
T1, T2, T3 = (task_id(STORY, n) for n in (1, 2, 3))
EPOCH_STAMP = "%Y-%m-%dT%H:%M:%SZ"


def stamp(epoch: int) -> str:
    return time.strftime(EPOCH_STAMP, time.gmtime(epoch))


def epic_text(tasks: dict[str, dict[str, object]], *, title: str = "Carve-out — ünïcode",
              story_status: str | None = None) -> str:
    """An epic state file laid out as a person or jq writes it: two-space indent, one task
    a line, non-ASCII as is, a final newline."""
    lines = [f'    "{tid}": {json.dumps(node, ensure_ascii=False)}' for tid, node in tasks.items()]
    return (
        "{\n"
        f'  "epic": "{EPIC}",\n'
        f'  "title": {json.dumps(title, ensure_ascii=False)},\n'
        '  "stories": {\n'
        f'    "{STORY}": {{\n'
        + (f'      "status": "{story_status}",\n' if story_status else "")
        + '      "tasks": {\n' + ",\n".join("  " + line for line in lines) + "\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def redo_records(env: dict[str, str]) -> list[str]:
    """The redo records storyd keeps in its private folder (core/redo.py)."""
    folder = Path(env["XDG_STATE_HOME"]) / "storyd" / "redo"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A private config, runtime and state home (no daemon answers), for CLI and in-process."""
    return reconcile_env(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> GitWorkspace:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    return repo


def state_path(repo: GitWorkspace) -> Path:
    return repo.path / STATE


def write_state(repo: GitWorkspace, text: str) -> Path:
    path = state_path(repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def reconcile(env: dict[str, str], repo: GitWorkspace, *args: str,
              extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return run_storyd_cli("reconcile", "--workspace", str(repo.path), *args,
                          env={**env, **(extra or {})}, cwd=repo.path)


def finding_evidence(env: dict[str, str], repo: GitWorkspace) -> list[object]:
    """The structured evidence of the findings behind the planned repairs."""
    plan = json.loads(reconcile(env, repo, "--json").stdout)
    return [r["finding"].get("evidence") for f in plan["files"] for r in f["repairs"]]


def commit_time(repo: GitWorkspace, sha: str) -> int:
    return int(repo.git("show", "-s", "--format=%ct", sha))


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    """(old line, new line) pairs that differ, for files whose line count is unchanged."""
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


@pytest.fixture
def unrecorded(repo: GitWorkspace) -> tuple[Path, str, str]:
    """T1 DONE at its commit; T2 committed but still PENDING; T3 not started."""
    t1, t2 = repo.tasks_commits(STORY, 2)
    text = epic_text({
        T1: {"status": "DONE", "commitSha": t1, "completedAt": "2026-01-01T12:00:00Z"},
        T2: {"status": "PENDING"},
        T3: {"status": "PENDING"},
    })
    return write_state(repo, text), text, t2


@pytest.mark.slow
class TestRepairs:
    """Each repair class on a real repository, through the CLI."""

    def test_unrecorded_commit_becomes_done_with_its_sha_and_time(
        self, env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str]
    ) -> None:
        path, before, t2 = unrecorded
        preview = reconcile(env, repo)
        assert preview.returncode == 1, preview.stderr
        out = preview.stdout.decode()
        assert f"+++ b/{STATE}" in out
        assert f'evidence: commit {t2} "{T2} step 2"' in out
        patch_id = repo.git("show", t2).encode()
        pid = subprocess.run(["git", "patch-id", "--stable"], input=patch_id, capture_output=True,
                             check=True).stdout.decode().split()[0]
        assert f"patch-id {pid}" in out
        assert path.read_text(encoding="utf-8") == before  # a preview writes nothing

        done = reconcile(env, repo, "--apply")
        assert done.returncode == 0, done.stderr
        after = path.read_text(encoding="utf-8")
        expected = {"status": "DONE", "commitSha": t2, "completedAt": stamp(commit_time(repo, t2))}
        assert json.loads(after)["stories"][STORY]["tasks"][T2] == expected
        # only T2's line changed, in the file's own layout; the rest is byte for byte
        assert changed_lines(before, after) == [
            (f'      "{T2}": {{"status": "PENDING"}},',
             f'      "{T2}": {{"status": "DONE", "commitSha": "{t2}", '
             f'"completedAt": "{expected["completedAt"]}"}},')]
        assert "ünïcode" in after and after.endswith("}\n")
        again = reconcile(env, repo)
        assert again.returncode == 0 and again.stdout == b"", again.stdout

    def test_rewritten_commit_gets_the_new_sha(self, env: dict[str, str],
                                               repo: GitWorkspace) -> None:
        t1, t2 = repo.tasks_commits(STORY, 2)
        text = epic_text({
            T1: {"status": "DONE", "commitSha": t1, "completedAt": "2026-01-01T12:00:00Z"},
            T2: {"status": "DONE", "commitSha": t2, "completedAt": "2026-01-01T12:05:00Z"},
        })
        path = write_state(repo, text)
        repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")
        new = repo.head()
        done = reconcile(env, repo, "--apply", "--json")
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)
        [repair] = plan["files"][0]["repairs"]
        assert repair["code"] == "unreachable"
        assert repair["changes"] == [{"path": ["stories", STORY, "tasks", T2, "commitSha"],
                                      "field": "commitSha", "old": t2, "new": new}]
        assert repair["evidence"][0]["rewrittenFrom"]["patchId"] == repair["evidence"][1]["patchId"]
        after = path.read_text(encoding="utf-8")
        assert after == text.replace(t2, new)

    def test_a_gone_commit_is_reported_and_left_alone(self, env: dict[str, str],
                                                      repo: GitWorkspace) -> None:
        t1 = repo.tasks_commits(STORY, 1)[0]
        text = epic_text({
            T1: {"status": "DONE", "commitSha": t1},
            T2: {"status": "DONE", "commitSha": "0123456789abcdef0123456789abcdef01234567"},
        })
        path = write_state(repo, text)
        preview = reconcile(env, repo)
        assert preview.returncode == 0, preview.stdout
        assert "left alone" in preview.stdout.decode() and T2 in preview.stdout.decode()
        applied = reconcile(env, repo, "--apply")
        assert applied.returncode == 0
        assert path.read_text(encoding="utf-8") == text

    def test_issue_plan_journal_completed(self, env: dict[str, str], repo: GitWorkspace) -> None:
        folder = repo.path / ".claude" / "plans" / "issue-42-geofencing"
        folder.mkdir(parents=True)
        state = {
            "issue": {"number": 42, "title": "Geofencing", "branch": "main"},
            "created_at": "2026-01-20T10:00:00Z",
            "updated_at": "2026-01-20T10:30:00Z",
            "tasks": [
                {"id": "1", "description": "Schema", "status": "completed",
                 "started_at": "2026-01-20T10:05:00Z", "completed_at": "2026-01-20T10:25:00Z"},
                {"id": "2", "description": "Repository", "status": "in_progress",
                 "started_at": "2026-01-20T10:30:00Z", "completed_at": None},
            ],
        }
        before = json.dumps(state, indent=2) + "\n"
        (folder / "execution-state.json").write_text(before)
        (folder / "journal.md").write_text(
            "# Implementation Journal\n\n---\n\n## Task 1: Schema\n\n**Status**: ✅ Completed\n"
            "**Time**: 2026-01-20T10:05:00Z → 2026-01-20T10:25:00Z\n\n---\n\n"
            "## Task 2: Repository\n\n**Status**: ✅ Completed\n"
            "**Time**: 2026-01-20T10:30:00Z → 2026-01-20T11:10:00Z\n"
        )
        preview = reconcile(env, repo, "--state-file", ".claude/plans/issue-42-geofencing/"
                            "execution-state.json")
        assert preview.returncode == 1, preview.stderr
        assert "journal.md:14: **Status**: ✅ Completed" in preview.stdout.decode()
        assert finding_evidence(env, repo) == [{
            "journal": ".claude/plans/issue-42-geofencing/journal.md",
            "journalStatus": "completed",
        }]
        assert reconcile(env, repo, "--apply").returncode == 0
        after = (folder / "execution-state.json").read_text()
        assert changed_lines(before, after) == [
            ('      "status": "in_progress",', '      "status": "completed",'),
            ('      "completed_at": null', '      "completed_at": "2026-01-20T11:10:00Z"'),
        ]

    def test_checkpoint_output_written_before_the_state(self, env: dict[str, str],
                                                        repo: GitWorkspace) -> None:
        state = repo.path / "memory" / "state"
        reports = repo.path / "memory" / "reports" / "tasks"
        state.mkdir(parents=True)
        reports.mkdir(parents=True)
        (state / "phase.json").write_text(json.dumps({
            "workflow_id": "wf-1", "started_at": "2026-03-02T10:00:00Z",
            "last_updated": "2026-03-02T11:00:00Z", "current_phase": "IMPLEMENTATION",
            "phase_status": "in_progress", "completed_phases": [], "interruption_safe": True,
        }, indent=2))
        execution = {
            "workflow_id": "wf-1", "phase": "IMPLEMENTATION", "interruption_safe": True,
            "tasks": [{"id": "task-001", "status": "running", "attempts": 1,
                       "started_at": "2026-03-02T11:15:00Z", "completed_at": None,
                       "output": "memory/reports/tasks/task-001.json"}],
        }
        before = json.dumps(execution, indent=4)  # no final newline: kept that way
        (state / "execution.json").write_text(before)
        (reports / "task-001.json").write_text(json.dumps(
            {"status": "complete", "completed_at": "2026-03-02T11:40:00Z"}))
        assert finding_evidence(env, repo) == [{"output": "memory/reports/tasks/task-001.json"}]
        assert reconcile(env, repo, "--apply", "--only", "output-before-state-update"
                         ).returncode == 0
        after = (state / "execution.json").read_text()
        assert changed_lines(before, after) == [
            ('            "status": "running",', '            "status": "complete",'),
            ('            "completed_at": null,',
             '            "completed_at": "2026-03-02T11:40:00Z",'),
        ]
        assert not after.endswith("\n")

    def test_session_torn_file_restored_from_bak(self, env: dict[str, str],
                                                 repo: GitWorkspace) -> None:
        folder = repo.path / "agent-output" / "portal"
        folder.mkdir(parents=True)
        good = json.dumps({"schema_version": "3.0", "project": "portal", "current_step": 2,
                           "updated": "2026-03-02T10:15:00Z",
                           "steps": {"1": {"status": "complete"},
                                     "2": {"status": "in_progress", "sub_step": "phase_2"}}},
                          indent=2).encode() + b"\n"
        torn = good[: len(good) // 2]
        (folder / "00-session-state.json").write_bytes(torn)
        (folder / "00-session-state.json.bak").write_bytes(good)
        preview = reconcile(env, repo)
        assert preview.returncode == 1
        assert "restore from .bak" in preview.stdout.decode()
        assert finding_evidence(env, repo) == [{
            "backup": "agent-output/portal/00-session-state.json.bak",
            "stateFile": "agent-output/portal/00-session-state.json",
        }]
        assert reconcile(env, repo, "--apply").returncode == 0
        assert (folder / "00-session-state.json").read_bytes() == good
        assert (folder / "00-session-state.json.bak").read_bytes() == good  # never the torn one
        undone = reconcile(env, repo, "--undo")
        assert undone.returncode == 0, undone.stderr
        assert (folder / "00-session-state.json").read_bytes() == torn


class TestSafety:
    """Locks, races, crashes and undo."""

    @pytest.mark.slow
    def test_a_writer_holding_the_lock_gives_exit_75(
        self, env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str]
    ) -> None:
        path, before, _ = unrecorded
        holder = subprocess.Popen(["flock", "-x", str(path), "sleep", "30"],
                                  start_new_session=True)  # the lock is shared with sleep
        try:
            wait_for(lambda: exclusively_locked(path), message="flock -x on the state file")
            done = reconcile(env, repo, "--apply", "--lock-timeout", "0.3")
            assert done.returncode == 75, done.stderr
            assert b"lock" in done.stderr
            assert path.read_text(encoding="utf-8") == before
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        assert reconcile(env, repo, "--apply", "--lock-timeout", "5").returncode == 0

    def test_a_writer_racing_the_plan_is_kept_and_the_plan_redone(
        self, env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str]
    ) -> None:
        path, before, t2 = unrecorded
        calls: list[Plan] = []
        workspace = str(repo.path)

        def plan_then_race() -> Plan:
            plan = make_plan(workspace, Selection(), Config(), None, 5.0)
            calls.append(plan)
            if len(calls) == 1:  # a real writer lands between the plan and the lock
                racer = (
                    "import sys, os; p = sys.argv[1]; t = open(p, encoding='utf-8').read()"
                    ".replace('\"title\": ', '\"note\": \"writer\",\\n  \"title\": ');"
                    "open(p + '.w', 'w', encoding='utf-8').write(t); os.replace(p + '.w', p)"
                )
                subprocess.run(["flock", "-x", str(path), sys.executable, "-c", racer, str(path)],
                               check=True, timeout=30)
            return plan

        written = apply(workspace, plan_then_race, 5.0)
        assert len(calls) == 2
        assert calls[0].files[0].before == before.encode()
        assert written is calls[1]
        document = json.loads(path.read_text(encoding="utf-8"))
        assert document["note"] == "writer"  # the writer's change survives
        assert document["stories"][STORY]["tasks"][T2]["commitSha"] == t2

    @pytest.mark.slow
    @pytest.mark.parametrize(("point", "survivor"), [("before-rename", "old"),
                                                     ("after-rename", "new")])
    def test_kill_9_leaves_the_old_file_or_the_new_one(
        self, env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str],
        point: str, survivor: str,
    ) -> None:
        path, before, t2 = unrecorded
        killed = reconcile(env, repo, "--apply", extra={HOOK_ENV: f"kill-{point}"})
        assert killed.returncode == -9, killed.stderr
        text = path.read_text(encoding="utf-8")
        temps = [p.name for p in path.parent.iterdir() if TEMP_MARK in p.name]
        redos = redo_records(env)
        assert temps == []
        if survivor == "old":
            assert text == before
            assert len(redos) == 1  # the fsynced redo record the write never used
            cut_short = reconcile(env, repo, "--undo")  # the record came first: nothing to put back
            assert cut_short.returncode == 0 and b"0 file(s) restored" in cut_short.stdout
            assert path.read_text(encoding="utf-8") == before
        else:
            assert json.loads(text)["stories"][STORY]["tasks"][T2]["status"] == "DONE"
            assert redos == []
        done = reconcile(env, repo, "--apply")
        assert done.returncode == 0, done.stderr
        assert [p.name for p in path.parent.iterdir() if TEMP_MARK in p.name] == []
        assert redo_records(env) == []
        assert json.loads(path.read_text())["stories"][STORY]["tasks"][T2]["commitSha"] == t2

    @pytest.mark.slow
    def test_undo_restores_byte_for_byte(
        self, env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str]
    ) -> None:
        path, before, _ = unrecorded
        assert reconcile(env, repo, "--apply").returncode == 0
        assert path.read_text(encoding="utf-8") != before
        undone = reconcile(env, repo, "--undo")
        assert undone.returncode == 0, undone.stderr
        assert f"restored {STATE}".encode() in undone.stdout
        assert path.read_bytes() == before.encode()
        again = reconcile(env, repo, "--undo")
        assert again.returncode == 1 and b"nothing to undo" in again.stderr

    @pytest.mark.slow
    def test_undo_refused_after_a_later_write(
        self, env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str]
    ) -> None:
        path, _, _ = unrecorded
        assert reconcile(env, repo, "--apply").returncode == 0
        later = path.read_text(encoding="utf-8").replace('"PENDING"', '"IN_PROGRESS"')
        path.write_text(later, encoding="utf-8")
        refused = reconcile(env, repo, "--undo")
        assert refused.returncode == 65
        assert b"changed since the apply" in refused.stderr
        assert STATE.encode() in refused.stderr
        assert path.read_text(encoding="utf-8") == later

    @pytest.mark.slow
    def test_only_limits_the_classes(self, env: dict[str, str], repo: GitWorkspace) -> None:
        t1, t2, _ = repo.tasks_commits(STORY, 3)
        text = epic_text({
            T1: {"status": "DONE", "commitSha": t1},
            T2: {"status": "DONE", "commitSha": t2},
            T3: {"status": "PENDING"},
        })
        path = write_state(repo, text)
        repo.git("rebase", "-q", "--exec", "true", "--force-rebase", t1)
        new_t2 = repo.head("HEAD~1")
        assert repo.git("log", "-1", "--format=%s", new_t2) == f"{T2} step 2"
        plan = json.loads(reconcile(env, repo, "--json").stdout)
        codes = sorted(r["code"] for f in plan["files"] for r in f["repairs"])
        assert codes == ["unreachable", "unrecorded"]
        assert reconcile(env, repo, "--apply", "--only", "unreachable").returncode == 0
        tasks = json.loads(path.read_text())["stories"][STORY]["tasks"]
        assert tasks[T2]["commitSha"] == new_t2
        assert tasks[T3] == {"status": "PENDING"}
        bad = reconcile(env, repo, "--only", "bogus")
        assert bad.returncode == 64 and b"bogus" in bad.stderr


def test_a_bak_keeping_format_gets_the_previous_bytes_and_undo_puts_both_back(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Where the writer keeps `<file>.bak` (seed 001), the apply keeps it too; undo restores
    the file and the `.bak` as they were (the `.bak` removed when there was none)."""
    from storyd.api.reconcile.apply import undo_last
    from storyd.api.reconcile.plan import FilePlan

    workspace = tmp_path / "session-ws"
    folder = workspace / "agent-output" / "portal"
    folder.mkdir(parents=True)
    state = folder / "00-session-state.json"
    before = b'{\n  "current_step": 2\n}\n'
    state.write_bytes(before)
    relpath = "agent-output/portal/00-session-state.json"

    def plan_now() -> Plan:
        file = FilePlan(relpath, "session", state.read_bytes())
        file.after = b'{\n  "current_step": 3\n}\n'
        return Plan(str(workspace), [file], [])

    apply(str(workspace), plan_now, 1.0)
    assert state.read_bytes() == b'{\n  "current_step": 3\n}\n'
    assert (folder / "00-session-state.json.bak").read_bytes() == before
    assert sorted(undo_last(str(workspace), 1.0)) == [relpath, relpath + ".bak"]
    assert state.read_bytes() == before
    assert not (folder / "00-session-state.json.bak").exists()


@pytest.fixture
def daemon_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitWorkspace]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    yield repo


@pytest.mark.slow
class TestDaemon:
    """The read-only socket op, the CLI apply's event, and auto-apply of configured classes."""

    def test_the_reconcile_op_plans_without_writing(
        self, spawn_daemon: Spawn, daemon_repo: GitWorkspace, tmp_path: Path
    ) -> None:
        repo = daemon_repo
        _, t2 = repo.tasks_commits(STORY, 2)
        text = epic_text({T1: {"status": "DONE", "commitSha": repo.head("HEAD~1")},
                          T2: {"status": "PENDING"}})
        path = write_state(repo, text)
        proc = spawn_daemon([repo.path])
        workspace = str(repo.path.resolve())
        answer = proc.request({"op": "reconcile", "workspace": workspace,
                               "epicId": EPIC, "storyId": STORY})
        assert answer["ok"] is True, answer
        assert answer["changes"] is True
        files = answer["files"]
        assert isinstance(files, list) and len(files) == 1
        assert files[0]["stateFile"] == STATE
        assert files[0]["repairs"][0]["changes"][1]["new"] == t2
        assert path.read_text(encoding="utf-8") == text
        outside = proc.request({"op": "reconcile", "workspace": str(tmp_path)})
        assert outside["ok"] is False and "not watched" in str(outside["error"])
        bogus = proc.request({"op": "reconcile", "workspace": workspace, "only": ["guess"]})
        assert bogus["ok"] is False and "guess" in str(bogus["error"])
        typed = proc.request({"op": "reconcile", "workspace": workspace, "stateFile": 7})
        assert typed["ok"] is False and "stateFile" in str(typed["error"])
        escape = proc.request({"op": "reconcile", "workspace": workspace,
                               "stateFile": "../../etc/passwd"})
        assert escape["ok"] is False and "outside the workspace" in str(escape["error"])

    def test_a_cli_apply_emits_reconciled(
        self, spawn_daemon: Spawn, daemon_repo: GitWorkspace, tmp_path: Path
    ) -> None:
        repo = daemon_repo
        repo.tasks_commits(STORY, 2)
        t1 = repo.head("HEAD~1")
        path = write_state(repo, epic_text({T1: {"status": "DONE", "commitSha": t1},
                                            T2: {"status": "PENDING"}}))
        proc = spawn_daemon([repo.path])
        env = {**proc.env, "XDG_STATE_HOME": str(tmp_path / "state")}
        with EventStream(proc) as events:
            done = run_storyd_cli("reconcile", "--apply", env=env, cwd=repo.path)
            assert done.returncode == 0, done.stderr
            _, event = events.wait(lambda e: e["event"] == "reconciled", timeout=10,
                                   message="the reconciled event")
        assert event["stateFile"] == STATE and event["source"] == "cli"
        assert (event["unit"], event["format"]) == (STORY, "epic")
        repairs = event["repairs"]
        assert isinstance(repairs, list)
        assert [(r["code"], r["task"]) for r in repairs] == [("unrecorded", T2)]
        assert json.loads(path.read_text())["stories"][STORY]["tasks"][T2]["status"] == "DONE"

    def test_auto_applies_only_the_configured_classes(
        self, spawn_daemon: Spawn, daemon_repo: GitWorkspace, tmp_path: Path
    ) -> None:
        repo = daemon_repo
        t1, t2 = repo.tasks_commits(STORY, 2)
        text = epic_text({T1: {"status": "DONE", "commitSha": t1},
                          T2: {"status": "DONE", "commitSha": t2},
                          T3: {"status": "PENDING"}})
        path = write_state(repo, text)
        write_config(tmp_path, '[reconcile]\nauto = ["unrecorded"]\n')
        proc = spawn_daemon([repo.path], args=[])
        proc_env_state = tmp_path / "state"
        assert proc.env.get("XDG_STATE_HOME") == str(proc_env_state)
        with EventStream(proc) as events:
            repo.git("commit", "-q", "--amend", "-m", f"{T2} step 2, reworded")  # unreachable
            amended = repo.head()
            t3 = repo.tasks_commits(STORY, 1, first=3)[0]  # unrecorded: auto
            _, event = events.wait(lambda e: e["event"] == "reconciled", timeout=15,
                                   message="the auto-apply's reconciled event")
        assert event["source"] == "daemon"
        repairs = event["repairs"]
        assert isinstance(repairs, list)
        assert [r["code"] for r in repairs] == ["unrecorded"]
        tasks = json.loads(path.read_text())["stories"][STORY]["tasks"]
        assert tasks[T3]["commitSha"] == t3 and tasks[T3]["status"] == "DONE"
        assert tasks[T2]["commitSha"] == t2 != amended  # not configured: left alone
        undone = run_storyd_cli("reconcile", "--undo", env=proc.env, cwd=repo.path)
        assert undone.returncode == 0, undone.stderr
        assert path.read_text(encoding="utf-8") == text


def test_config_rejects_an_unknown_auto_class(tmp_path: Path) -> None:
    from storyd import config

    path = tmp_path / "config.toml"
    path.write_text('[reconcile]\nauto = ["unrecorded", "guess"]\n')
    with pytest.raises(config.ConfigError) as caught:
        config.load(str(path))
    assert "reconcile.auto" in caught.value.message and "guess" in caught.value.message
    path.write_text('[reconcile]\nauto = ["unrecorded"]\n')
    assert config.load(str(path)).reconcile_auto == ["unrecorded"]
    os.unlink(path)


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({"stories": {"story-1": {"tasks": {"T-1": {}}}}}, ("stories", "story-1", "tasks", "T-1")),
        ({"stories": [{"id": "story-1", "tasks": [{"id": "T-1"}]}]}, ("stories", 0, "tasks", 0)),
        ({"storyId": "story-1", "tasks": {"T-1": {}}}, ("tasks", "T-1")),
        ({"stories": {"story-1": {"status": "DONE"}}}, None),
        ({"stories": {"story-2": {"tasks": {"T-1": {}}}}}, None),
    ],
)
def test_the_epic_dialect_finds_tasks_in_every_shape(
    document: dict[str, object], path: tuple[str | int, ...] | None
) -> None:
    from storyd.core.formats import builtin
    from storyd.core.model import Unit

    unit = Unit("epic", "plans/epic-0001/execution-state.json", "story-1", ())
    dialect = builtin("epic").dialect  # a capability of the format
    assert dialect is not None
    assert dialect.task_path(document, unit, "T-1") == path


def test_a_file_removed_after_the_plan_is_not_recreated(
    env: dict[str, str], repo: GitWorkspace, unrecorded: tuple[Path, str, str]
) -> None:
    path, _, _ = unrecorded
    workspace = str(repo.path)
    plans: list[Plan] = []

    def plan_then_remove() -> Plan:
        plans.append(make_plan(workspace, Selection(), Config(), None, 5.0))
        if len(plans) == 1:
            path.unlink()
        return plans[-1]

    written = apply(workspace, plan_then_remove, 1.0)
    assert len(plans) == 2 and plans[0].changed and not written.changed
    assert not path.exists()


@pytest.mark.slow
class TestSquashLanded:
    """issue 9's squash-merged finding: the story gets the producer's status for a merged PR."""

    @staticmethod
    def topic(repo: GitWorkspace) -> list[str]:
        repo.git("checkout", "-q", "-b", "topic")
        shas = repo.tasks_commits(STORY, 2)
        repo.git("checkout", "-q", "main")
        repo.commit("unrelated upstream work", {"u": "u\n"})
        return shas

    @staticmethod
    def squash(repo: GitWorkspace, subject: str) -> str:
        repo.git("merge", "-q", "--squash", "topic")
        return repo.commit(subject)

    def test_a_story_whose_pr_squash_landed_becomes_success(
        self, env: dict[str, str], repo: GitWorkspace
    ) -> None:
        t1, t2 = self.topic(repo)
        text = epic_text({T1: {"status": "DONE", "commitSha": t1},
                          T2: {"status": "DONE", "commitSha": t2},
                          T3: {"status": "PR_CREATED"}}, story_status="PR_CREATED")
        path = write_state(repo, text)
        landed = self.squash(repo, f"feat({STORY}): the whole story")
        plan = json.loads(reconcile(env, repo, "--json", "--only", "squash-merged").stdout)
        [file] = plan["files"]
        first = file["repairs"][0]
        assert first["code"] == "squash-merged"
        assert first["evidence"][0]["commit"] == landed
        assert first["evidence"][0]["rule"] == "its PR merged"
        assert reconcile(env, repo, "--apply", "--only", "squash-merged").returncode == 0
        after = path.read_text(encoding="utf-8")
        assert changed_lines(text, after) == [
            ('      "status": "PR_CREATED",', '      "status": "SUCCESS",'),
            (f'      "{T3}": {{"status": "PR_CREATED"}}', f'      "{T3}": {{"status": "DONE"}}'),
        ]
        again = reconcile(env, repo, "--only", "squash-merged")
        assert again.returncode == 0, again.stdout  # SUCCESS: the merge changes nothing now

    def test_a_story_with_unfinished_work_is_left_alone(
        self, env: dict[str, str], repo: GitWorkspace
    ) -> None:
        t1, t2 = self.topic(repo)
        text = epic_text({T1: {"status": "DONE", "commitSha": t1},
                          T2: {"status": "DONE", "commitSha": t2},
                          T3: {"status": "IN_PROGRESS"}}, story_status="PR_CREATED")
        path = write_state(repo, text)
        self.squash(repo, f"feat({STORY}): the whole story")
        preview = reconcile(env, repo, "--only", "squash-merged")
        assert preview.returncode == 0
        assert f"{T3} is IN_PROGRESS: the story is not finished" in preview.stdout.decode()
        assert reconcile(env, repo, "--apply").returncode == 0
        assert path.read_text(encoding="utf-8") == text

    def test_a_finished_story_is_not_rewritten(self, env: dict[str, str],
                                               repo: GitWorkspace) -> None:
        t1, t2 = self.topic(repo)
        text = epic_text({T1: {"status": "DONE", "commitSha": t1},
                          T2: {"status": "DONE", "commitSha": t2}}, story_status="PR_MERGED")
        path = write_state(repo, text)
        self.squash(repo, f"feat({STORY}): the whole story")
        assert reconcile(env, repo, "--apply").returncode == 0
        assert path.read_text(encoding="utf-8") == text


@pytest.mark.slow
def test_auto_reconcile_waits_the_lock_timeout_a_reload_set(
    repo: GitWorkspace, unrecorded: tuple[Path, str, str]
) -> None:
    """The auto-reconciler reads the daemon's lock_timeout as a reload left it (the engine's
    options), not the one in the configuration it was started with: a writer holding the
    lock makes it give up after the new 0.2 s, not the old 30 s."""
    from storyd.api.answers import Options
    from storyd.core.errors import LockTimeout
    from storyd.server.engine import Engine
    from storyd.server.reconciler import AutoReconciler

    path, _text, _t2 = unrecorded
    cfg = Config(reconcile_auto=["unrecorded"], limits=Limits(lock_timeout=30.0))
    engine = Engine(Options(30.0, "mtime"))
    auto = AutoReconciler(engine, cfg)
    writer = subprocess.Popen(["flock", "-x", str(path), "sleep", "30"])
    try:
        wait_for(lambda: exclusively_locked(path), message="flock(1) to take the lock")
        engine.options.lock_timeout = 0.2  # what Runtime._apply does on SIGHUP
        began = time.monotonic()
        with pytest.raises(LockTimeout):
            auto.reconcile(str(repo.path), STATE)
        assert time.monotonic() - began < 10
    finally:
        writer.kill()
        writer.wait()
        auto.close()
