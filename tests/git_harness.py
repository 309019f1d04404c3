"""Real git repositories for tests, with fixed identities and dates (same history, same shas).

    EPOCH                     2026-01-01T00:00:00Z, the first commit's date (each later
                              commit is one minute after the last)
    GitRepo                   a repository built by the real `git`
    GitWorkspace              a repository that is also a storyd workspace: `plans/` is
                              never committed, and `record()` writes the epic state
    age()                     backdate the object folders, as in a repository left alone
    ambiguous_commit_prefix() a commit and a 4-digit prefix another object shares
    rebase_stops()            a history whose `git rebase side` stops on a conflict
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from epic_state_harness import EPIC, STORY, task_id, write_epic

__all__ = [
    "EPOCH",
    "GitRepo",
    "GitWorkspace",
    "age",
    "ambiguous_commit_prefix",
    "rebase_stops",
]

EPOCH = 1767225600  # 2026-01-01T00:00:00Z


class GitRepo:
    """A repository built by the real `git`, every commit dated one minute after the last."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = EPOCH
        path.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        """A clean environment with fixed identities and dates."""
        stamp = f"@{self.clock} +0000"
        return {
            **os.environ,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "Ada",
            "GIT_AUTHOR_EMAIL": "ada@example.com",
            "GIT_COMMITTER_NAME": "Ada",
            "GIT_COMMITTER_EMAIL": "ada@example.com",
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_DATE": stamp,
        }

    def git(self, *args: str, input: bytes | None = None, cwd: Path | None = None) -> str:
        """Run git here (or in `cwd`) and return its stdout; failures fail the test."""
        done = subprocess.run(
            ["git", *args], cwd=cwd or self.path, env=self.env(), input=input,
            capture_output=True, check=False, timeout=60,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return done.stdout.decode().strip()

    def init(self, branch: str = "main") -> GitRepo:
        """`git init` with `branch` as the initial branch."""
        self.git("init", "-q", "-b", branch)
        return self

    def write(self, relpath: str, text: str) -> Path:
        """Write a work-tree file."""
        path = self.path / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def commit(self, message: str, files: dict[str, str] | None = None, *,
               amend: bool = False) -> str:
        """Write `files`, stage everything, commit; returns the new sha."""
        self.clock += 60
        for relpath, text in (files or {}).items():
            self.write(relpath, text)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message, *(["--amend"] if amend else []))
        return self.head()

    def head(self, rev: str = "HEAD") -> str:
        """The sha `rev` names."""
        return self.git("rev-parse", rev)

    def fast_import(self, commits: int, branch: str = "main") -> None:
        """Append `commits` commits (one new file each) through `git fast-import`."""
        lines = []
        parent = self.git("rev-parse", "-q", "--verify", branch) if self._has(branch) else None
        for i in range(commits):
            self.clock += 60
            msg = f"bulk {i}\n"
            body = f"content {i}\n"
            lines.append(f"commit refs/heads/{branch}\nmark :{i + 1}\n"
                         f"committer Ada <ada@example.com> {self.clock} +0000\n"
                         f"data {len(msg)}\n{msg}")
            if i:
                lines.append(f"from :{i}\n")
            elif parent:
                lines.append(f"from {parent}\n")
            lines.append(f"M 100644 inline bulk/{i}.txt\ndata {len(body)}\n{body}\n")
        self.git("fast-import", "--quiet", input="".join(lines).encode())
        if self._has("HEAD"):
            self.git("reset", "-q", "--hard")

    def _has(self, rev: str) -> bool:
        done = subprocess.run(["git", "rev-parse", "-q", "--verify", rev], cwd=self.path,
                              env=self.env(), capture_output=True, check=False)
        return done.returncode == 0

    def clone(self, dest: Path, *args: str) -> GitRepo:
        """`git clone <args> file://<here> <dest>`."""
        self.git("clone", "-q", *args, f"file://{self.path}", str(dest), cwd=dest.parent)
        other = GitRepo(dest)
        other.clock = self.clock
        return other


def age(repo: GitRepo, seconds: int = 3600) -> None:
    """Backdate the object folders' mtimes, as in a repository not written to just now."""
    objects = repo.path / ".git" / "objects"
    past = time.time() - seconds
    for folder in [objects, *objects.iterdir()]:
        os.utime(folder, (past, past))


def ambiguous_commit_prefix(repo: GitRepo) -> tuple[str, str]:
    """A commit and a 4-digit prefix of it that another object shares."""
    listing = repo.git("cat-file", "--batch-all-objects",
                       "--batch-check=%(objectname) %(objecttype)")
    objects = [line.split() for line in listing.splitlines()]
    counts: dict[str, int] = {}
    for sha, _ in objects:
        counts[sha[:4]] = counts.get(sha[:4], 0) + 1
    for sha, kind in objects:
        if kind == "commit" and counts[sha[:4]] > 1:
            return sha, sha[:4]
    pytest.fail("no ambiguous prefix in the repository")


class GitWorkspace(GitRepo):
    """A repository that is also a storyd workspace; its `plans/` is never committed."""

    def init(self, branch: str = "main", *, ignore_plans: bool = True) -> GitWorkspace:
        super().init(branch)
        if ignore_plans:
            self.ignore_plans()
        return self

    def ignore_plans(self) -> None:
        """Keep state files out of every `git add -A` (info/exclude serves all worktrees)."""
        common = Path(self.git("rev-parse", "--git-common-dir"))
        exclude = (common if common.is_absolute() else self.path / common) / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        if "plans/\n" not in text:
            exclude.write_text(text + "plans/\n", encoding="utf-8")

    def run(self, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run git here without asserting success (a rebase that stops on a conflict)."""
        return subprocess.run(["git", *args], cwd=self.path, env={**self.env(), **(env or {})},
                              capture_output=True, text=True, check=False, timeout=60)

    def tasks_commits(self, story: str, count: int, *, first: int = 1,
                      prefix: str = "") -> list[str]:
        """`count` commits, each adding one file and naming one task of `story`."""
        return [self.commit(f"{task_id(story, n)} {prefix}step {n}",
                            {f"src/{story}/{prefix}{n}.txt": f"{prefix}{n}\n"})
                for n in range(first, first + count)]

    def record(self, stories: dict[str, list[str]], *, pending: int = 1) -> Path:
        """Write the epic state: each story's tasks DONE at the given shas, then `pending`
        tasks not started. Task n is named `task_id(story, n)`."""
        body: dict[str, object] = {}
        for story, shas in stories.items():
            tasks: dict[str, object] = {
                task_id(story, n): {"status": "DONE", "commitSha": sha,
                                    "completedAt": "2026-01-01T12:00:00Z"}
                for n, sha in enumerate(shas, 1)}
            for n in range(len(shas) + 1, len(shas) + 1 + pending):
                tasks[task_id(story, n)] = {"status": "PENDING"}
            body[story] = {"tasks": tasks}
        return write_epic(self.path, EPIC, body)


def rebase_stops(path: Path) -> GitWorkspace:
    """main: base, T1 (edits shared.txt), T2, T3; `side` edits shared.txt from base too,
    so `git rebase side` stops on a conflict. The state records T1 and T2 DONE at their
    commits, T3 committed but still PENDING (tasks of STORY)."""
    t1_id, t2_id, t3_id = (task_id(STORY, n) for n in (1, 2, 3))
    repo = GitWorkspace(path).init()
    repo.commit("base", {"shared.txt": "base\n"})
    repo.git("branch", "side")
    t1 = repo.commit(f"{t1_id} one", {"shared.txt": "main\n"})
    t2 = repo.commit(f"{t2_id} two", {"b.txt": "b\n"})
    repo.commit(f"{t3_id} three", {"c.txt": "c\n"})
    repo.git("checkout", "-q", "side")
    repo.commit("side edit", {"shared.txt": "side\n"})
    repo.git("checkout", "-q", "main")
    repo.record({STORY: [t1, t2]})
    return repo
