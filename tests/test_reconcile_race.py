"""`storyd reconcile --apply` against real racing writers: no writer's update is ever
lost, exit 0 only when the planned change is in the file, and a plan is never made from
a torn or moved read (issue 29).

Each race is made deterministic with the test hook `wait-before-write:FLAG`: the apply
holds its `flock -x` with the plan compared, the writer is started and seen queued on
the lock (/proc/locks) or finished, then FLAG lets the apply go on.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_harness import STORYD
from daemon_harness import reconcile_env, wait_for
from epic_state_harness import EPIC, STATE, STORY, task_id
from git_harness import GitWorkspace
from locks_harness import exclusively_locked
from racing_writers import CONVENTIONS, holds_open, marks, start, waiting_on_lock

from storyd.api.reconcile import PLAN_TRIES, make_plan
from storyd.api.reconcile import gather as gathering
from storyd.api.reconcile.atomic import HOOK_ENV
from storyd.api.reconcile.gather import Selection
from storyd.config import Config
from storyd.core.errors import LockTimeout

T1, T2 = task_id(STORY, 1), task_id(STORY, 2)
WAIT = 20.0


def state_text(t1: str) -> str:
    tasks = {T1: {"status": "DONE", "commitSha": t1, "completedAt": "2026-01-01T12:00:00Z"},
             T2: {"status": "PENDING"}}
    return json.dumps({"epic": EPIC, "stories": {STORY: {"tasks": tasks}}}, indent=2) + "\n"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return reconcile_env(tmp_path, monkeypatch)


@pytest.fixture
def unrecorded(tmp_path: Path) -> tuple[GitWorkspace, Path, str]:
    """T1 DONE at its commit; T2 committed (naming it) but still PENDING in the file."""
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    t1, t2 = repo.tasks_commits(STORY, 2)
    path = repo.path / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(state_text(t1), encoding="utf-8")
    return repo, path, t2


def t2_sha(path: Path) -> str | None:
    task = json.loads(path.read_bytes())["stories"][STORY]["tasks"][T2]
    return task.get("commitSha") if task.get("status") == "DONE" else None


def apply_paused(env: dict[str, str], repo: GitWorkspace, flag: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [STORYD, "reconcile", "--workspace", str(repo.path), "--apply"],
        env={**env, HOOK_ENV: f"wait-before-write:{flag}"}, cwd=repo.path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_writer_racing_the_apply_never_loses_its_update(
    env: dict[str, str], unrecorded: tuple[GitWorkspace, Path, str], tmp_path: Path,
    convention: str,
) -> None:
    repo, path, t2 = unrecorded
    flag = tmp_path / "go"
    applying = apply_paused(env, repo, flag)
    try:
        wait_for(lambda: exclusively_locked(path), WAIT, "the apply to hold flock -x")
        writer = start(convention, path, "w1")
        if convention == "rename-unlocked":  # it renames its version over the file now
            assert writer.wait(WAIT) == 0
        else:  # queued on the lock: the in-place writer with the old descriptor
            wait_for(lambda: waiting_on_lock(writer.pid), WAIT, "the writer to queue on the lock")
        flag.touch()
        _, err = applying.communicate(timeout=60)
        _, writer_err = writer.communicate(timeout=WAIT)
        assert writer.returncode == 0, writer_err.decode()
    finally:
        flag.touch()
        applying.kill()
    assert applying.returncode == 0, err.decode()
    assert b"Traceback" not in err
    assert marks(path) == ["w1"], f"{convention}: the writer's update was lost"
    assert t2_sha(path) == t2, f"{convention}: exit 0 but the planned change is not in the file"


@pytest.mark.slow
def test_a_plan_waits_for_a_writer_holding_the_file_empty_under_its_lock(
    env: dict[str, str], unrecorded: tuple[GitWorkspace, Path, str], tmp_path: Path,
) -> None:
    """The torn read of the red team: a writer truncates under `flock -x`, and writes the
    document back a moment later. The plan is read under the shared lock, so it waits."""
    repo, path, t2 = unrecorded
    good = path.read_bytes()
    release = tmp_path / "release"
    holder = subprocess.Popen(
        ["flock", "-x", str(path), "sh", "-c",
         ': > "$1"; while [ ! -e "$2" ]; do sleep 0.01; done; cat "$3" > "$1"',
         "sh", str(path), str(release), str(tmp_path / "good")])
    (tmp_path / "good").write_bytes(good)
    try:
        wait_for(lambda: exclusively_locked(path) and path.stat().st_size == 0, WAIT,
                 "the writer to hold the file empty")
        applying = subprocess.Popen(
            [STORYD, "reconcile", "--workspace", str(repo.path), "--apply"],
            env=env, cwd=repo.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(lambda: holds_open(applying.pid, path) or applying.poll() is not None, WAIT,
                 "the apply to open the file and wait for the lock")
        release.touch()
        out, err = applying.communicate(timeout=60)
    finally:
        release.touch()
        holder.wait(WAIT)
    assert applying.returncode == 0, err.decode()
    assert b"applied: 1 file(s) written" in out, out.decode()
    assert t2_sha(path) == t2


def _writer_after_gather(monkeypatch: pytest.MonkeyPatch, path: Path, *,
                         every: bool) -> list[int]:  # fmt: skip
    """A writer lands on `path` right after the findings are gathered (the first time,
    or `every` time, a note naming which); the calls are counted in the list returned."""
    real = gathering.gather
    calls: list[int] = []

    def gather_then_write(*args: object, **kwargs: object) -> object:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(1)
        if every or len(calls) == 1:
            doc = json.loads(path.read_bytes())
            doc["note"] = f"writer {len(calls)}" if every else "writer"
            path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        return found

    monkeypatch.setattr(gathering, "gather", gather_then_write)
    return calls


def test_a_file_rewritten_between_the_findings_and_the_plan_is_planned_again(
    env: dict[str, str], unrecorded: tuple[GitWorkspace, Path, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Findings from one version and a plan from another is not a plan: make it again."""
    repo, path, _ = unrecorded
    calls = _writer_after_gather(monkeypatch, path, every=False)  # after the first only
    plan = make_plan(str(repo.path), Selection(), Config(), None, 5.0)
    assert len(calls) == 2
    assert b'"note": "writer"' in plan.files[0].before
    assert b'"note": "writer"' in plan.files[0].after


def test_a_file_that_keeps_changing_is_exit_75_and_nothing_is_written(
    env: dict[str, str], unrecorded: tuple[GitWorkspace, Path, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo, path, _ = unrecorded
    calls = _writer_after_gather(monkeypatch, path, every=True)
    with pytest.raises(LockTimeout) as raised:
        make_plan(str(repo.path), Selection(), Config(), None, 5.0)
    assert len(calls) == PLAN_TRIES
    assert raised.value.code == 75
    assert f"{STATE} changed while the plan was made {PLAN_TRIES} times" in raised.value.message
