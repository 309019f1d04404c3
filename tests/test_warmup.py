"""Serve first, warm behind: a daemon on thousands of stories answers at once, and the
batched git staleness answers exactly as the per-file git calls do."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, wait_for
from epic_state_harness import EPIC, story_id, task_id
from git_harness import GitRepo

from storyd.core import storytime, switches
from storyd.server.assembly import build_daemon
from storyd.server.service import Settings

STORIES = 3000
Spawn = Callable[..., DaemonProcess]


def big_workspace(root: Path, stories: int) -> GitRepo:
    """An epic of `stories` stories, story files and state committed in one commit."""
    repo = GitRepo(root).init()
    folder = root / "plans" / f"epic-{EPIC}"
    folder.mkdir(parents=True)
    nodes: dict[str, object] = {}
    for n in range(1, stories + 1):
        sid = story_id(n)
        (folder / f"{sid}.md").write_text(f"# {sid}\n", encoding="utf-8")
        nodes[sid] = {"tasks": {
            task_id(sid, 1): {"status": "DONE", "completedAt": "2025-06-01T12:00:00Z"},
            task_id(sid, 2): {"status": "PENDING" if n % 3 else "IN_PROGRESS"},
        }}
    (folder / "execution-state.json").write_bytes(orjson.dumps({"epic": EPIC, "stories": nodes}))
    repo.commit("plan the epic")
    return repo


@pytest.mark.slow
class TestServeFirst:
    def test_answers_during_warm_up_and_reports_progress(self, spawn_daemon: Spawn,
                                                         tmp_path: Path) -> None:
        ws = big_workspace(tmp_path / "ws", STORIES).path
        proc = spawn_daemon([ws], warm=False)  # returns as soon as `ping` answers
        stats = proc.stats()
        warm = stats["warm"]
        assert isinstance(warm, dict)
        assert warm["workspaces"] == 1
        assert 0 <= warm["unitsChecked"] <= warm["unitsRead"] <= STORIES  # type: ignore[operator]
        sid = story_id(STORIES // 2)
        answer = proc.request({"op": "resume", "workspace": str(ws), "epic": EPIC,
                               "story": sid}, timeout=30)
        assert answer["ok"] is True, answer
        done = run_storyd_cli("resume", "--direct", "--epic-id", EPIC, "--story-id", sid,
                              env=proc.env, cwd=ws)
        assert done.returncode == 0, done.stderr
        assert answer["envelope"] == orjson.loads(done.stdout)

        def warmed() -> dict[str, object] | None:
            found = proc.stats()["warm"]
            assert isinstance(found, dict)
            return found if found["warming"] is False else None

        final = wait_for(warmed, 120, "the warm-up to end")
        assert final["unitsRead"] == final["unitsChecked"] == STORIES
        assert final["workspacesRead"] == final["workspacesChecked"] == 1
        cached = proc.request({"op": "resume", "workspace": str(ws), "epic": EPIC, "story": sid})
        assert cached["source"] == "cache"
        assert cached["envelope"] == answer["envelope"]
        assert any(e.get("event") == "warm" and e.get("units") == STORIES
                   for e in proc.log_events())

    def test_status_reads_directly_while_warming(self, spawn_daemon: Spawn,
                                                 tmp_path: Path) -> None:
        ws = big_workspace(tmp_path / "ws", 50).path
        proc = spawn_daemon([ws])
        listed = proc.request({"op": "list"})
        assert "warm" not in listed  # warm: the list is complete, no progress field
        assert len(listed["units"]) == 50  # type: ignore[arg-type]
        assert proc.stats()["warm"] == {
            "warming": False, "workspaces": 1, "workspacesRead": 1, "workspacesChecked": 1,
            "unitsRead": 50, "unitsChecked": 50,
        }


PATHS = ["old.md", "new.md", "edited.md", "staged.md", "moved.md", "untracked.md",
         "ignored.md", "absent.md", "sub dir/späce.md"]


def story_repo(root: Path) -> GitRepo:
    """Every case git_commit_time distinguishes, in one repository."""
    repo = GitRepo(root).init()
    repo.write(".gitignore", "ignored.md\n")
    repo.commit("first", {"old.md": "a", "edited.md": "a", "staged.md": "a", "was.md": "a",
                          "sub dir/späce.md": "a", "new.md": "a"})
    repo.commit("second", {"new.md": "b"})
    repo.write("edited.md", "changed")
    repo.write("staged.md", "changed")
    repo.git("add", "staged.md")
    repo.git("mv", "was.md", "moved.md")
    repo.write("untracked.md", "u")
    repo.write("ignored.md", "i")
    return repo


class TestBatchedStoryTime:
    def test_batched_answers_equal_per_file_answers(self, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        repo = story_repo(tmp_path / "repo")
        ws = str(repo.path)
        # Every file's ctime predates the batch pass, as after a clone.
        past = os.stat(ws).st_mtime - 10
        monkeypatch.setattr(switches.CONFIG, "git_memo", {})
        per_file = {p: storytime.git_commit_time(ws, p) for p in PATHS}
        assert per_file["old.md"] == repo.clock - 60
        assert per_file["new.md"] == repo.clock
        for dirty in ("edited.md", "staged.md", "moved.md", "untracked.md", "ignored.md"):
            assert per_file[dirty] is None
        monkeypatch.setattr(switches.CONFIG, "git_memo", {})
        monkeypatch.setattr(switches.CONFIG, "git_primed", {})
        monkeypatch.setattr(switches.CONFIG, "git_batching", True)
        assert storytime.prime(ws)
        stamp, _started, times, dirty_set = switches.CONFIG.git_primed[ws]
        # the pass after every ctime
        switches.CONFIG.git_primed[ws] = (stamp, past + 1e9, times, dirty_set)
        calls: list[tuple[str, ...]] = []
        real_git = storytime._git
        monkeypatch.setattr(storytime, "_git", lambda *a, **k: calls.append(a) or real_git(*a, **k))
        batched = {p: storytime.git_commit_time(ws, p) for p in PATHS}
        assert batched == per_file
        asked = {a[-1] for a in calls if len(a) > 2 and a[1] in ("log", "status")}
        # Only what the batch cannot tell (ignored or absent paths) costs a git call.
        assert asked <= {"ignored.md", "absent.md"}

    def test_a_commit_refreshes_the_batch(self, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        repo = story_repo(tmp_path / "repo")
        ws = str(repo.path)
        monkeypatch.setattr(switches.CONFIG, "git_memo", {})
        monkeypatch.setattr(switches.CONFIG, "git_primed", {})
        monkeypatch.setattr(switches.CONFIG, "git_batching", True)
        assert storytime.prime(ws)
        first = switches.CONFIG.git_primed[ws]
        repo.commit("third", {"old.md": "c"})
        storytime.git_commit_time(ws, "old.md")
        assert switches.CONFIG.git_primed[ws] is not first
        assert switches.CONFIG.git_primed[ws][2]["old.md"] == repo.clock

    def test_no_repository_means_no_batch(self, tmp_path: Path) -> None:
        assert storytime.prime(str(tmp_path)) is False


class TestBranchMoves:
    """Issue 12, defect 2: the memo and the batch are keyed on the commit HEAD resolves to,
    so moving the branch (`git reset --soft`, which leaves the index and .git/HEAD as they
    were) is seen."""

    @staticmethod
    def reset_soft_repo(root: Path) -> tuple[GitRepo, int]:
        repo = GitRepo(root).init()
        repo.commit("first", {"story.md": "a"})
        repo.commit("second", {"story.md": "b"})
        return repo, repo.clock

    @pytest.mark.parametrize("batching", [False, True], ids=["memo", "batch"])
    def test_reset_soft_is_seen(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                batching: bool) -> None:
        repo, second = self.reset_soft_repo(tmp_path / "repo")
        ws = str(repo.path)
        monkeypatch.setattr(switches.CONFIG, "git_memo", {})
        monkeypatch.setattr(switches.CONFIG, "git_primed", {})
        monkeypatch.setattr(switches.CONFIG, "git_batching", batching)
        assert storytime.git_commit_time(ws, "story.md") == second
        repo.git("reset", "--soft", "HEAD~1")  # story.md is now staged: no commit time
        assert storytime.git_commit_time(ws, "story.md") is None

    def test_packed_branch_move_is_seen(self, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        repo, second = self.reset_soft_repo(tmp_path / "repo")
        ws = str(repo.path)
        monkeypatch.setattr(switches.CONFIG, "git_memo", {})
        repo.git("pack-refs", "--all")
        assert storytime.git_commit_time(ws, "story.md") == second
        repo.git("reset", "--soft", "HEAD~1")
        assert storytime.git_commit_time(ws, "story.md") is None


@pytest.mark.slow
def test_warm_up_events_are_not_kept_for_replay(spawn_daemon: Spawn, tmp_path: Path) -> None:
    """Each unit's first sight at start-up goes to live subscribers only: a `since` from
    before the warm-up's end gets the full list; later changes replay as usual."""
    repo = big_workspace(tmp_path / "ws", 50)
    ws = repo.path
    proc = spawn_daemon([ws])  # returns once warm
    clock = str(proc.request({"op": "ping"})["clock"])
    instance = clock.rpartition(":")[0]
    with proc.connect() as sub:
        early = sub.request({"op": "subscribe", "since": f"{instance}:0"})
    assert early["freshInstance"] is True
    assert len(early["units"]) == 50  # type: ignore[arg-type]

    state = ws / "plans" / f"epic-{EPIC}" / "execution-state.json"
    document = orjson.loads(state.read_bytes())
    sid = story_id(7)
    document["stories"][sid]["tasks"][task_id(sid, 2)] = {"status": "DONE"}
    state.write_bytes(orjson.dumps(document))
    wait_for(lambda: any(u["unit"] == sid and u["done"] == 2 for u in proc.units(ws)),
             10, "the change in the cache")
    with proc.connect() as sub:
        later = sub.request({"op": "subscribe", "since": clock})
        assert later["freshInstance"] is False and "units" not in later
        replayed = sub.read()
    assert (replayed["event"], replayed["unit"], replayed["done"]) == ("changed", sid, 2)


def test_a_stop_during_a_warm_up_step_is_no_error(tmp_path: Path,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    """A stop that closes the detectors under the warm-up's check (a real stop's race)
    ends the step with one info line, not an error with a traceback; while the daemon
    runs, a failing step is still logged as the error it is."""
    daemon = build_daemon(Settings(staleness="mtime", verify_interval=3600.0))
    daemon.start([])

    def closed() -> None:
        raise RuntimeError("the daemon is stopping: its detectors are closed")

    try:
        daemon._warm_step("warm_check_failed", str(tmp_path), closed)
        assert "warm_check_failed" in capfd.readouterr().out  # running: an error
    finally:
        daemon.stop()
    daemon._warm_step("warm_check_failed", str(tmp_path), closed)
    logged = capfd.readouterr().out  # in process, the log is written to stdout
    assert "warm_check_failed" not in logged and "Traceback" not in logged
    assert "warm_stopped" in logged
