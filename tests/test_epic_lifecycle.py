"""Real epic shapes end to end: slugged folders, the story-finished finding, `storyd epic`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, EventStream, wait_for
from epic_corpus import ENVELOPE_KEYS, lay_out, manifest
from git_harness import GitRepo

from storyd.core import lifecycle
from storyd.core.formats import builtin
from storyd.core.formats.base import Source

Run = Callable[..., subprocess.CompletedProcess[bytes]]
Spawn = Callable[..., DaemonProcess]
BY_FILE = {e["file"]: e for e in manifest()}
SLUGGED = BY_FILE["epic-0024-artifact-persistence/fe2cb4e217.json"]
PLAIN_0024 = BY_FILE["epic-0024/442d4abe44.json"]
THREE_DIGIT = BY_FILE["epic-0018-sdd-directory-restructure/23f8c7fbf4.json"]
FLOW2 = BY_FILE["epic-0057/658aed44a6.json"]
FINISHED = "story-0057-0001"  # COMPLETE in the file, no tasks


# -- the lifecycle table (resume-workflow.md) ------------------------------------------


@pytest.mark.parametrize(
    ("status", "retries", "pr", "merged", "expected"),
    [
        ("IN_PROGRESS", 0, None, False, "PENDING"),
        ("SUCCESS", 0, None, False, "SUCCESS"),
        ("COMPLETE", 0, None, False, "SUCCESS"),
        (" success ", 0, None, False, "SUCCESS"),
        ("PR_CREATED", 0, "OPEN", False, "PR_CREATED"),
        ("PR_CREATED", 0, "OPEN", True, "SUCCESS"),
        ("PR_PENDING_REVIEW", 0, None, False, "PR_PENDING_REVIEW"),
        ("PR_PENDING_REVIEW", 0, "MERGED", False, "SUCCESS"),
        ("PR_MERGED", 0, None, False, "SUCCESS"),
        ("FAILED", 1, None, False, "PENDING"),
        ("FAILED", 2, None, False, "FAILED"),
        ("PARTIAL", 0, None, False, "PENDING"),
        ("BLOCKED", 0, None, False, "BLOCKED"),
        ("DEFERRED", 0, None, False, "DEFERRED"),
        ("PENDING", 0, None, False, "PENDING"),
        (None, 0, None, False, "PENDING"),
    ],
)
def test_story_reclassification(
    status: object, retries: int, pr: str | None, merged: bool, expected: str
) -> None:
    assert lifecycle.reclassify_story(status, retries, pr, merged=merged)[0] == expected


def test_task_reclassification_and_blocked_rule() -> None:
    assert lifecycle.reclassify_task("IN_PROGRESS") == "PENDING"
    assert lifecycle.reclassify_task("PR_CREATED") == "PR_CREATED"
    assert lifecycle.reclassify_task("PR_CREATED", merged=True) == "DONE"
    assert lifecycle.reclassify_task("PR_MERGED") == "DONE"
    assert lifecycle.reclassify_task("SKIPPED") == "SKIPPED"
    statuses = {"a": "SUCCESS", "b": "PENDING"}
    assert lifecycle.blocked_reason([], statuses, {}) is None
    assert lifecycle.blocked_reason(None, statuses, {}) == (
        "blockedBy is undefined (unknown dependencies)"
    )
    assert lifecycle.blocked_reason(["a"], statuses, {"a": True}) is None
    assert lifecycle.blocked_reason(["a"], statuses, {"a": False}) == (
        "waiting for a (SUCCESS, not merged)"
    )
    assert lifecycle.blocked_reason(["a"], statuses, {"a": False}, no_merge=True) is None
    assert lifecycle.blocked_reason(["b", "z"], statuses, {}) == (
        "waiting for b (PENDING), z (not in the state file)"
    )


# -- folders and ids --------------------------------------------------------------------


def test_slugged_folder_answers_to_its_epic_id(tmp_path: Path, run_storyd: Run) -> None:
    lay_out(SLUGGED, tmp_path)
    done = run_storyd(
        "resume", "--epic-id", "24", "--story-id", "story-0024-0011", "--direct", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert list(json.loads(done.stdout)) == ENVELOPE_KEYS


def test_two_folders_claiming_one_epic_is_exit_64(tmp_path: Path, run_storyd: Run) -> None:
    lay_out(SLUGGED, tmp_path)
    lay_out(PLAIN_0024, tmp_path)
    for via in (("--direct",), ()):
        done = run_storyd(
            "resume", "--epic-id", "0024", "--story-id", "story-0024-0001", *via, cwd=tmp_path
        )
        assert done.returncode == 64
        message = done.stderr.decode()
        assert "plans/epic-0024/execution-state.json" in message
        assert "plans/epic-0024-artifact-persistence/execution-state.json" in message
    epic = run_storyd("epic", "--epic-id", "24", "--direct", cwd=tmp_path)
    assert epic.returncode == 64 and b"claimed by 2 folders" in epic.stderr


def test_three_digit_story_ids_and_stories_subfolder(tmp_path: Path, run_storyd: Run) -> None:
    relpath = lay_out(THREE_DIGIT, tmp_path)
    story = tmp_path / relpath.rsplit("/", 1)[0] / "stories" / "story-0018-001.md"
    story.parent.mkdir()
    story.write_text("# story\n", encoding="utf-8")
    done = run_storyd(
        "resume", "--epic-id", "18", "--story-id", "STORY-0018-001", "--detail", "--direct",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert list(body["envelope"]) == ENVELOPE_KEYS
    units = builtin("epic").load(Source(str(tmp_path)), relpath)
    first = next(u for u in units if u.key == "story-0018-001")
    assert first.story_file == relpath.rsplit("/", 1)[0] + "/stories/story-0018-001.md"
    assert builtin("epic").owner(str(first.story_file)) == relpath  # the watcher's mapping


# -- the story-finished finding ---------------------------------------------------------


def test_finished_story_keeps_the_seed_envelope_and_says_so(
    tmp_path: Path, run_storyd: Run
) -> None:
    lay_out(FLOW2, tmp_path)
    argv = ("resume", "--epic-id", "57", "--story-id", FINISHED, "--direct")
    plain = run_storyd(*argv, cwd=tmp_path)
    assert plain.returncode == 0
    assert plain.stdout == (
        b'{"resumePoint":"fresh-start","tasksCompleted":[],"tasksPending":[],'
        b'"lastCommitSha":null,"staleWarnings":[]}\n'
    )
    detail = json.loads(run_storyd(*argv, "--detail", cwd=tmp_path).stdout)
    [finished] = [f for f in detail["findings"] if f["code"] == "story-finished"]
    assert finished["severity"] == "info" and finished["detector"] == "format"
    assert "do not re-execute" in finished["message"] and "'COMPLETE'" in finished["message"]


@pytest.mark.slow
def test_finished_finding_in_status_check_and_events(
    spawn_daemon: Spawn, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    relpath = lay_out(FLOW2, ws)
    data = json.loads((ws / relpath).read_text(encoding="utf-8"))
    data["storyStatuses"][FINISHED]["status"] = "IN_PROGRESS"
    (ws / relpath).write_text(json.dumps(data), encoding="utf-8")
    proc = spawn_daemon([ws])
    with EventStream(proc) as events:
        data["storyStatuses"][FINISHED]["status"] = "COMPLETE"
        tmp = ws / "plans" / "tmp.json"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(ws / relpath)
        _, drift = events.wait(
            lambda e: e["event"] == "drift" and e["unit"] == FINISHED
            and e["finding"]["code"] == "story-finished",  # type: ignore[index]
            timeout=10,
        )
    assert drift["finding"]["severity"] == "info"  # type: ignore[index]
    status = run_storyd_cli("status", "--workspace", str(ws), env=proc.env)
    assert status.returncode == 0
    assert b"format/story-finished" in status.stdout
    check = run_storyd_cli("check", "--workspace", str(ws), env=proc.env)
    assert check.returncode == 0, check.stdout  # info: printed, not a problem
    lines = [line for line in check.stdout.decode().splitlines() if "story-finished" in line]
    assert len(lines) == 8  # all eight stories of epic 0057 are COMPLETE without tasks
    assert check.stdout.endswith(b"8 units, 0 problems\n")
    direct = run_storyd_cli("check", "--direct", "--workspace", str(ws), env=proc.env)
    assert direct.stdout == check.stdout


# -- storyd epic --------------------------------------------------------------------------


def _epic_repo(tmp_path: Path) -> GitRepo:
    """A repository with epic 0024 (slugged) whose story 0010's PR #154 was squash-merged."""
    repo = GitRepo(tmp_path / "repo").init()
    repo.commit("base", {"README": "x\n"})
    repo.commit("story-0024-0006 and 0007: work (#151)", {"a": "1\n"})
    repo.commit("Merge pull request #148 from me/topic", {"b": "1\n"})
    repo.commit("Persist artifacts (#154)", {"c": "1\n"})
    lay_out(SLUGGED, repo.path)
    return repo


@pytest.mark.slow
def test_epic_view_direct(tmp_path: Path, run_storyd: Run) -> None:
    repo = _epic_repo(tmp_path)
    done = run_storyd("epic", "--epic-id", "24", "--json", "--direct", cwd=repo.path)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["stateFile"] == "plans/epic-0024-artifact-persistence/execution-state.json"
    assert view["baseBranch"] == "main"
    rows = {r["id"]: r for r in view["stories"]}
    assert rows["story-0024-0010"]["merged"]["how"] == "a commit on main names #154"
    assert rows["story-0024-0010"]["merged"]["commit"] == repo.head()
    assert rows["story-0024-0007"]["merged"]["how"] == "a commit on main names #148"
    # 0011 waits for 0005 (MERGED in the file) and 0010 (merged per git): executable
    # 0013/0014 wait for 0006 (#151 named by a commit) and 0007 (#148 merge commit)
    assert view["executable"] == ["story-0024-0011", "story-0024-0013", "story-0024-0014"]
    assert view["blocked"] == [
        {"id": "story-0024-0016", "reason": "waiting for story-0024-0014 (PENDING)"}
    ]
    assert "story-0024-0001" in view["finished"]
    text = run_storyd("epic", "--epic-id", "0024", "--direct", cwd=repo.path)
    assert b"executable next: story-0024-0011, story-0024-0013, story-0024-0014" in text.stdout


@pytest.mark.slow
def test_epic_view_via_daemon_is_the_same(spawn_daemon: Spawn, tmp_path: Path) -> None:
    repo = _epic_repo(tmp_path)
    proc = spawn_daemon([repo.path])
    argv = ("epic", "--epic-id", "24", "--json", "--workspace", str(repo.path))
    before = proc.stats()["requests"]
    via = run_storyd_cli(*argv, env=proc.env)
    assert proc.stats()["requests"] > before  # type: ignore[operator]
    direct = run_storyd_cli(*argv, "--direct", env=proc.env)
    assert via.returncode == direct.returncode == 0, via.stderr
    assert via.stdout == direct.stdout
    missing = run_storyd_cli("epic", "--epic-id", "77", "--workspace", str(repo.path),
                             env=proc.env)
    assert missing.returncode == 1
    assert b"epic-0077" in missing.stderr


def test_epic_view_of_every_readable_real_version(tmp_path: Path) -> None:
    from storyd.api.epicview import epic_view

    count = sequential = 0
    for entry in manifest():
        if entry["expect"] != "ok":
            continue
        ws = tmp_path / entry["file"].replace("/", "_")
        lay_out(entry, ws)
        view = epic_view(str(ws), entry["path"].split("/")[1][5:9])
        stories = view["stories"]
        assert isinstance(stories, list) and stories
        executable, blocked, finished = view["executable"], view["blocked"], view["finished"]
        queued = view["queued"]
        assert isinstance(executable, list) and isinstance(blocked, list)
        assert isinstance(finished, list) and isinstance(queued, list)
        assert len(executable) + len(queued) + len(blocked) + len(finished) == len(stories)
        if view["mode"] == "sequential":
            sequential += 1
            assert len(executable) <= 1 and sorted(view["order"]) == sorted(  # type: ignore[arg-type]
                r["id"] for r in stories  # type: ignore[index]
            )
        else:
            assert queued == [] and view["order"] is None
        count += 1
    assert count == 130
    assert sequential == 54  # "mode": "sequential" (13), {"parallel": false, ...} (41)


@pytest.mark.slow
def test_daemon_serves_slugged_folders_from_its_cache(spawn_daemon: Spawn, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    lay_out(SLUGGED, ws)
    proc = spawn_daemon([ws])
    argv = ("resume", "--epic-id", "24", "--story-id", "story-0024-0016", "--timeout", "5000")
    hits = proc.stats()["hits"]
    via = run_storyd_cli(*argv, env=proc.env, cwd=ws)
    assert proc.stats()["hits"] == hits + 1  # type: ignore[operator]
    direct = run_storyd_cli(*argv, "--direct", env=proc.env, cwd=ws)
    assert (via.returncode, via.stdout, via.stderr) == (direct.returncode, direct.stdout,
                                                        direct.stderr)
    answer = proc.request({"op": "resume", "workspace": str(ws), "epic": "24",
                           "story": "story-0024-0001"})
    assert answer["ok"] is True
    codes = {f["code"] for f in answer["findings"]}  # type: ignore[union-attr]
    assert "story-finished" in codes


def test_epic_view_of_the_seed_shape_reads_the_tasks(tmp_path: Path, run_storyd: Run) -> None:
    """Stories with tasks but no status of their own (seed 000's shape): all tasks DONE is
    finished, some DONE is work to resume, none is not started; dependents follow."""
    folder = tmp_path / "plans" / "epic-0049"
    folder.mkdir(parents=True)
    stories = {
        "story-0049-0012": {"tasks": {"TASK-0049-0012-001": {"status": "DONE"},
                                      "TASK-0049-0012-002": {"status": "Concluída"}}},
        "story-0049-0013": {"tasks": {"TASK-0049-0013-001": {"status": "DONE"},
                                      "TASK-0049-0013-002": {"status": "IN_PROGRESS"}}},
        "story-0049-0014": {"tasks": {"TASK-0049-0014-001": {"status": "PENDING"}}},
    }
    (folder / "execution-state.json").write_text(json.dumps({"stories": stories}), "utf-8")
    done = run_storyd("epic", "--epic-id", "49", "--json", "--direct", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    rows = {r["id"]: r for r in view["stories"]}
    assert rows["story-0049-0012"]["status"] == "SUCCESS"
    assert rows["story-0049-0012"]["reason"] == "no story status; all 2 tasks DONE"
    assert rows["story-0049-0013"]["status"] == "PENDING"
    assert "1 of 2 tasks DONE" in rows["story-0049-0013"]["reason"]
    assert rows["story-0049-0014"]["reason"] == "not started"
    assert view["finished"] == ["story-0049-0012"]
    assert "story-0049-0012" not in view["executable"]


@pytest.mark.slow
def test_daemon_resolves_epics_from_its_cache(spawn_daemon: Spawn, tmp_path: Path) -> None:
    """The query path finds the epic's folder among the files the cache knows (no disk),
    and two claimants there are the same exit 64 as the direct read."""
    ws = tmp_path / "ws"
    lay_out(SLUGGED, ws)
    proc = spawn_daemon([ws])
    argv = ("resume", "--epic-id", "24", "--story-id", "story-0024-0016", "--timeout", "5000")
    hits = proc.stats()["hits"]
    assert run_storyd_cli(*argv, env=proc.env, cwd=ws).returncode == 0
    assert proc.stats()["hits"] == hits + 1  # type: ignore[operator]
    lay_out(PLAIN_0024, ws)  # a second folder claims epic 0024; the watcher sees it

    def refused() -> subprocess.CompletedProcess[bytes] | None:
        done = run_storyd_cli(*argv, env=proc.env, cwd=ws)
        return done if done.returncode == 64 else None

    via = wait_for(refused, 10, "the daemon to see the second claimant")
    assert via is not None
    direct = run_storyd_cli(*argv, "--direct", env=proc.env, cwd=ws)
    assert via.returncode == direct.returncode == 64
    assert via.stderr == direct.stderr
    assert b"claimed by 2 folders" in via.stderr
