"""A day of ordinary git (issue 40, "Quiet when nothing is wrong", items 1 and 2).

A real daemon (daemon_harness) watches a real repository (git_harness) whose state file
is committed, in the epic and session seed formats, spec-kit's and Kiro's tasks.md, Task
Master's tasks.json and beads' issues.jsonl,
through a day of commits, branches, switches back and forth, an older state file checked
out, a reset, a stash and its pop, a pull with rebase from a local bare remote, a merge,
a squash merge, a cherry-pick, a worktree and a swapped workspace folder. After each step
storyd is quiet: no warning drifts out, `storyd check` exits 0 and the `storyd reconcile`
preview offers nothing. The true ones are still found: a stale copy a second writer puts
back (`history/regressed`, repaired with a commit HEAD reaches), a sha a pull rebased
away (`commit-in-history/unreachable`, rewritten); and a lost task whose commit HEAD no
longer reaches is left alone with the reason, never written back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import DaemonProcess, EventStream, wait_for
from epic_state_harness import EPIC, STATE, STORY, task_id
from git_harness import GitWorkspace
from test_workspace_swap import exchange

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
TOTAL = 6  # tasks per unit
WHEN = "2026-01-01T12:00:00Z"


class Kit:
    """One producer's state file: where it lives, its unit, and the file for some tasks
    done (each at its commit, where the format records one)."""

    relpath = ""
    unit = ""

    def render(self, shas: list[str]) -> str:
        raise NotImplementedError


class Epic(Kit):
    relpath, unit = STATE, STORY

    def render(self, shas: list[str]) -> str:
        tasks: dict[str, object] = {}
        for n in range(1, TOTAL + 1):
            done = n <= len(shas)
            tasks[task_id(STORY, n)] = ({"status": "DONE", "commitSha": shas[n - 1],
                                         "completedAt": WHEN} if done else {"status": "PENDING"})
        return json.dumps({"epic": EPIC, "stories": {STORY: {"tasks": tasks}}}, indent=2) + "\n"


class SpecKit(Kit):
    relpath, unit = "specs/001-login/tasks.md", "001-login"

    def render(self, shas: list[str]) -> str:
        lines = [f"- [{'X' if n <= len(shas) else ' '}] T{n:03d} Step {n}"
                 for n in range(1, TOTAL + 1)]
        return "# Tasks: login\n\n## Phase 1\n\n" + "\n".join(lines) + "\n"


class TaskMaster(Kit):
    relpath, unit = ".taskmaster/tasks/tasks.json", "master"

    def render(self, shas: list[str]) -> str:
        tasks = [{"id": n, "title": f"Step {n}", "dependencies": [n - 1] if n > 1 else [],
                  "status": "done" if n <= len(shas) else "pending"}
                 for n in range(1, TOTAL + 1)]
        return json.dumps({"master": {"tasks": tasks}}, indent=2) + "\n"


class Kiro(Kit):
    relpath, unit = ".kiro/specs/login/tasks.md", "login"

    def render(self, shas: list[str]) -> str:
        lines = [f"- [{'x' if n <= len(shas) else ' '}] {n}. Step {n}"
                 for n in range(1, TOTAL + 1)]
        return "# Implementation Plan\n\n" + "\n".join(lines) + "\n"


class Beads(Kit):
    relpath, unit = ".beads/issues.jsonl", "issues"

    def render(self, shas: list[str]) -> str:
        return "".join(json.dumps({"id": f"bd-{n}", "title": f"Step {n}",
                                   "status": "closed" if n <= len(shas) else "open"}) + "\n"
                       for n in range(1, TOTAL + 1))


class Session(Kit):
    relpath, unit = "agent-output/p/00-session-state.json", "p"

    def render(self, shas: list[str]) -> str:
        steps = {str(n): {"status": "complete" if n <= len(shas) else "pending",
                          "sub_step": None, "artifacts": []} for n in range(1, TOTAL + 1)}
        return json.dumps({"schema_version": "3.0", "project": "p",
                           "current_step": min(len(shas) + 1, TOTAL), "steps": steps},
                          indent=2) + "\n"


KITS = {"epic": Epic(), "session": Session(), "spec-kit": SpecKit(),
        "task-master": TaskMaster(), "kiro": Kiro(), "beads": Beads()}


class Day:
    """A workspace, its daemon and its event stream; `step` runs git and waits for the
    daemon to take it in; `quiet` holds storyd to saying nothing."""

    def __init__(self, root: Path, kit: Kit, spawn: Spawn) -> None:
        self.kit = kit
        self.root = root
        self.repo = GitWorkspace(root / "ws").init(ignore_plans=False)
        self.ws = self.repo.path
        self.shas: list[str] = []  # the task commits, in order
        self.repo.commit("base", {"README": "a day of ordinary git\n"})
        self.record(commit=True)
        self.proc = spawn([self.ws])
        self.events = EventStream(self.proc)
        self.events.__enter__()
        self.mark = self.events.mark()

    # -- the producer ------------------------------------------------------------------

    def task(self) -> str:
        """The next task's code commit (its message names no task: unrecorded-commit
        stays out of it)."""
        n = len(self.shas) + 1
        sha = self.repo.commit(f"step {n}", {f"src/step{n}.txt": f"{n}\n"})
        self.shas.append(sha)
        return sha

    def record(self, *, commit: bool, done: int | None = None) -> None:
        """The state file with the first `done` tasks (default: every task commit) done."""
        shas = self.shas[: len(self.shas) if done is None else done]
        self.repo.write(self.kit.relpath, self.kit.render(shas))
        if commit:
            self.repo.commit(f"state: {len(shas)} done")

    def progress(self, done: int, *, commit: bool = True) -> None:
        """A task's commit, then the state file with it done (committed or not)."""
        self.task()
        self.mark = self.events.mark()
        self.record(commit=commit)
        self.settle(done)

    # -- the daemon --------------------------------------------------------------------

    def git(self, *args: str) -> str:
        return self.repo.git(*args)

    def step(self, *args: str, done: int | None = None) -> None:
        """`git ARGS`, then wait for the daemon: the unit's `changed` event when the
        state file now holds `done` tasks, then quiet for a while."""
        self.mark = self.events.mark()
        self.repo.git(*args)
        self.settle(done)

    def settle(self, done: int | None) -> None:
        if done is not None:
            self.events.wait(lambda e: e["event"] == "changed" and e.get("unit") == self.kit.unit
                             and e.get("done") == done, start=self.mark, timeout=15,
                             message=f"{self.kit.unit} changed to {done} done")  # fmt: skip
        self.events.settle(0.4, timeout=20)
        wait_for(lambda: self.proc.stats()["history"]["queued"] == 0, message="the writer")

    def drifted(self) -> list[dict[str, object]]:
        """The warnings and errors that drifted out since the step began."""
        return [e["finding"] for e in self.events.since(self.mark) if e["event"] == "drift"
                and e["finding"]["severity"] in ("warning", "error")]  # type: ignore[index]

    def quiet(self, what: str, ws: Path | None = None) -> None:
        """No warning drifted out, `check` exits 0, the reconcile preview offers nothing."""
        ws = ws or self.ws
        assert self.drifted() == [], f"{what}: {self.drifted()}"
        check = run_storyd_cli("check", "--workspace", str(ws), env=self.proc.env)
        assert check.returncode == 0, f"{what}: {check.stdout.decode()}{check.stderr.decode()}"
        direct = run_storyd_cli("check", "--direct", "--workspace", str(ws), env=self.proc.env)
        assert direct.returncode == 0, f"{what} (direct): {direct.stdout.decode()}"
        plan = self.reconcile(ws)
        assert plan["files"] == [], f"{what}: reconcile offers {plan['files']}"

    def reconcile(self, ws: Path | None = None) -> dict[str, object]:
        done = run_storyd_cli("reconcile", "--workspace", str(ws or self.ws), "--json",
                              env=self.proc.env)  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        plan = json.loads(done.stdout)
        assert isinstance(plan, dict)
        return plan

    def close(self) -> None:
        self.events.__exit__(None, None, None)


@pytest.fixture
def day_of(tmp_path: Path, spawn_daemon: Spawn) -> Callable[[Kit], Day]:
    made: list[Day] = []

    def make(kit: Kit) -> Day:
        made.append(Day(tmp_path, kit, spawn_daemon))
        return made[-1]

    yield make  # type: ignore[misc]
    for day in made:
        day.close()


def _regressed(day: Day) -> list[dict[str, object]]:
    units = day.proc.units(day.ws, detail=True)
    return [f for u in units for f in u.get("findingList", []) if f["code"] == "regressed"]


# -- the defect: a branch switch -----------------------------------------------------


@pytest.mark.parametrize("name", list(KITS))
def test_a_branch_switch_is_not_a_lost_update(name: str, day_of: Callable[[Kit], Day]) -> None:
    day = day_of(KITS[name])
    day.progress(1)
    day.step("switch", "-q", "-c", "feature")
    day.task()
    day.progress(3)
    day.quiet("tasks 2-3 done on feature")
    day.step("switch", "-q", "main", done=1)
    assert _regressed(day) == []
    day.quiet("back on main, where tasks 2-3 are pending")
    day.step("switch", "-q", "feature", done=3)
    day.quiet("on feature again")
    day.step("switch", "-q", "main", done=1)
    day.quiet("main again")


# -- the whole day ---------------------------------------------------------------------


def _remote(day: Day) -> GitWorkspace:
    """A local bare "remote" with main pushed, and a teammate's clone of it."""
    bare = day.root / "remote.git"
    day.repo.git("init", "-q", "--bare", "-b", "main", str(bare), cwd=day.root)
    day.git("remote", "add", "origin", str(bare))
    day.git("push", "-q", "-u", "origin", "main")
    mate = GitWorkspace(day.root / "mate")
    day.repo.git("clone", "-q", str(bare), str(mate.path), cwd=day.root)
    mate.clock = day.repo.clock + 3600
    return mate


def _branches(day: Day) -> None:
    """Branch, work, switch back and forth; an older state file checked out; a reset."""
    day.step("switch", "-q", "-c", "feature")
    day.progress(3)
    day.step("switch", "-q", "main", done=2)
    day.quiet("switched to main")
    day.step("switch", "-q", "feature", done=3)
    day.quiet("switched to feature")
    day.step("checkout", "main", "--", day.kit.relpath, done=2)
    day.quiet("main's state file checked out on feature")
    day.step("checkout", "HEAD", "--", day.kit.relpath, done=3)
    day.quiet("feature's own state file back")
    day.step("reset", "-q", "--hard", "HEAD~2", done=2)  # the task and its state
    day.quiet("reset two commits back")
    day.step("reset", "-q", "--hard", "ORIG_HEAD", done=3)
    day.quiet("reset forward again")


def _stash(day: Day) -> None:
    """The state of a task stashed, and popped."""
    day.progress(4, commit=False)
    day.step("stash", "-q", done=3)
    day.quiet("the state stashed")
    day.step("stash", "pop", "-q", done=4)
    day.quiet("the stash popped")
    day.repo.commit("state: 4 done")


def _merges(day: Day) -> None:
    """A merge, a squash merge, a cherry-pick."""
    day.step("switch", "-q", "main", done=2)
    day.step("merge", "-q", "--no-ff", "-m", "merge feature", "feature", done=4)
    day.quiet("feature merged")
    day.step("switch", "-q", "-c", "topic")
    day.progress(5)
    day.step("switch", "-q", "main", done=4)
    day.step("merge", "-q", "--squash", "topic", done=5)
    day.step("commit", "-q", "-m", f"{STORY} topic (squashed)")
    day.quiet("topic squash-merged")
    squash = day.git("rev-parse", "HEAD")
    day.step("switch", "-q", "-c", "side", "HEAD~1", done=4)
    day.step("cherry-pick", squash, done=5)
    day.quiet("the squash cherry-picked onto side")
    day.step("switch", "-q", "main")


def _pull_and_worktree(day: Day, mate: GitWorkspace) -> None:
    """A pull with rebase over a teammate's push; a worktree of an older state."""
    day.git("push", "-q", "origin", "main")
    mate.git("pull", "-q", "origin", "main")
    mate.commit("a teammate's fix", {"FIX": "fix\n"})
    mate.git("push", "-q", "origin", "main")
    day.repo.commit("local notes", {"NOTES": "notes\n"})
    day.step("pull", "-q", "--rebase", "origin", "main")
    day.quiet("pulled with rebase")
    other = day.root / "wt2"
    day.step("worktree", "add", "-q", "-b", "wt", str(other), "HEAD~4")
    day.quiet("a worktree added")
    day.quiet("the worktree itself", ws=other)
    assert day.proc.request({"op": "list", "workspace": str(other)})["ok"] is True
    day.quiet("the worktree, watched", ws=other)


@pytest.mark.parametrize("name", list(KITS))
def test_a_day_of_ordinary_git_is_quiet(name: str, day_of: Callable[[Kit], Day]) -> None:
    day = day_of(KITS[name])
    day.progress(1)
    day.progress(2)
    day.quiet("two tasks committed on main")
    mate = _remote(day)
    _branches(day)
    _stash(day)
    _merges(day)
    _pull_and_worktree(day, mate)
    assert day.drifted() == [], "a warning drifted out over the whole day"


# -- the true ones are still found ------------------------------------------------------


def _second_writer(day: Day, done: int) -> None:
    """A second session puts back its stale copy, with `done` tasks done (its own
    writer's compact JSON: bytes no commit holds), under the writers' flock."""
    stale = day.ws / "stale.json"
    stale.write_text(json.dumps(json.loads(day.kit.render(day.shas[:done]))))
    state = day.ws / day.kit.relpath
    subprocess.run(["flock", "-x", str(state), "sh", "-c",
                    f"cp '{stale}' '{state}.tmp' && mv '{state}.tmp' '{state}'"],
                   check=True, timeout=10)  # fmt: skip
    stale.unlink()


def _offered(plan: dict[str, object]) -> list[tuple[object, object]]:
    return [(r["code"], r["task"]) for f in plan["files"] for r in f["repairs"]]  # type: ignore[attr-defined,index]


def test_the_true_ones_are_still_found(day_of: Callable[[Kit], Day]) -> None:
    day = day_of(KITS["epic"])
    day.progress(1)
    day.progress(2)
    mate = _remote(day)
    day.progress(3, commit=False)
    day.mark = day.events.mark()
    _second_writer(day, 2)  # a stale copy written back: task 3 lost
    day.settle(2)
    assert [(f["code"], f["task"]) for f in day.drifted()] == [("regressed", task_id(STORY, 3))]
    assert _offered(day.reconcile()) == [("regressed", task_id(STORY, 3))]
    day.mark = day.events.mark()
    day.record(commit=False)  # the producer writes its progress again
    day.settle(3)

    day.task()  # a local commit, recorded, then rebased away by a pull
    day.mark = day.events.mark()
    day.record(commit=False)
    day.settle(4)
    old = day.shas[-1]
    mate.git("pull", "-q", "origin", "main")
    mate.commit("a teammate's fix", {"FIX": "fix\n"})
    mate.git("push", "-q", "origin", "main")
    day.step("pull", "-q", "--rebase", "--autostash", "origin", "main")  # tasks 3-4's commits
    rebased = [("unreachable", task_id(STORY, 3)), ("unreachable", task_id(STORY, 4))]
    # no state file changes, so no `changed` to wait for; a watcher that tells late
    # (FSEvents, polling: the macOS stand-in) outlasts the settle's quiet 0.4 s
    wait_for(lambda: [(f["code"], f["task"]) for f in day.drifted()] == rebased, 15,
             "the rebased tasks' drift")  # fmt: skip
    plan = day.reconcile()
    assert _offered(plan) == rebased
    new = plan["files"][0]["repairs"][1]["changes"][0]["new"]  # type: ignore[index]
    assert new == day.git("rev-parse", "HEAD") != old  # the rewritten commit, on HEAD

    day.mark = day.events.mark()  # a stale copy drops the task whose sha was rebased away
    _second_writer(day, 3)
    day.settle(3)
    lost = [f for f in day.drifted() if f["code"] == "regressed"]
    assert [f["evidence"]["sha"] for f in lost] == [old]  # type: ignore[index]
    plan = day.reconcile()
    assert _offered(plan) == rebased[:1], "a commit HEAD does not reach is never written back"
    left = [x for x in plan["leftAlone"] if x["code"] == "regressed"]  # type: ignore[attr-defined]
    assert len(left) == 1 and "not in the history of the work tree's HEAD" in left[0]["reason"]


def _mv(a: Path, b: Path) -> None:
    """Three renames, as `mv` does it: `a` aside, `b` into its place, the first to `b`."""
    aside = a.with_name(a.name + ".aside")
    a.rename(aside)
    b.rename(a)
    aside.rename(b)


@pytest.mark.parametrize("swap", [exchange, _mv], ids=["exchange", "mv"])
def test_a_swapped_workspace_folder_starts_a_new_lineage(
    day_of: Callable[[Kit], Day], swap: Callable[[Path, Path], None],
) -> None:
    day = day_of(KITS["epic"])
    day.progress(1)
    day.progress(2)
    day.progress(3, commit=False)  # uncommitted: only the folder's identity explains it
    other = day.root / "other"
    shutil.copytree(day.ws, other, symlinks=True)
    (other / day.kit.relpath).write_text(day.kit.render(day.shas[:1]))
    for n, done in enumerate((1, 3, 1, 3)):
        day.mark = day.events.mark()
        if n % 2 == 0:
            swap(day.ws, other)
        else:
            swap(other, day.ws)
        day.settle(done)
        assert _regressed(day) == [], f"swap {n + 1}"
        day.quiet(f"swap {n + 1}")
