"""A consistency checker for a real `storyd serve`: random operations, every answer checked.

Two checkers, both used by tests/test_consistency.py (bounded, in CI) and by
bench/soak_consistency.py (100,000 operations and more):

`History` (sequential, model-based): one epic state file and its story files in a git
repository, changed by one random operation at a time (atomic renames, in-place writes
under `flock -x` by util-linux flock(1), same-size rewrites, torn writes, deletes and
re-creates, story file edits, git commit / amend / reset, unwatch and watch, SIGTERM and
kill -9 restarts) and asked by several clients (two persistent socket connections, the
`resume-cli` op as `storyd resume` speaks it, and `list`). Each answer is checked against
the model: the direct read of the files as they stood when the query was sent; while
the file is torn, the answer of a good version not older than the last one served (the
last good answer is never lost); never an answer of a version no read could have given.

`race()` (concurrent, Jepsen-style): a writer thread writes versions 1, 2, ... (the
version is the DONE task's commit sha), alternating atomic renames and same-size
in-place rewrites under flock(2), while reader threads on persistent connections ask
without pause. An answer must be of a version at least the one whose write had finished
when the query was sent (read your writes) and at most the newest one begun when it came
back (nothing from the future).
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from daemon_harness import DaemonProcess, Line
from epic_state_harness import atomic_write, epic_relpath

from storyd.core import pipeline
from storyd.core.formats import builtin
from storyd.core.formats.base import Source
from storyd.core.query import Query

__all__ = ["EPIC", "History", "Report", "race"]

EPIC = "0077"
REL = epic_relpath(EPIC)
STATE_SIZE = 2048  # every version is padded to this size: rewrites are same-size
_STATUSES = ("DONE", "PENDING", "IN_PROGRESS")
_OLD = 1_600_000_000  # 2020-09-13, before every completedAt the model writes


@dataclass
class Report:
    """What a run did and found."""

    operations: int = 0
    answers: int = 0
    violations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """One line for a log or a table."""
        return (f"operations {self.operations}, answers checked {self.answers}, "
                f"violations {len(self.violations)}")


class _Reading(Source):
    """A Source that reads the state file from given bytes and everything else (story
    files) from the workspace: an old version's answer as it would be read now."""

    __slots__ = ("content",)

    def __init__(self, workspace: str, content: bytes) -> None:
        super().__init__(workspace)
        self.content = content

    def read(self, relpath: str, name: str = "") -> bytes:
        if relpath == REL:
            return self.content
        return super().read(relpath, name)


def stories_of(content: bytes) -> list[str]:
    """The story ids a version holds."""
    return list(orjson.loads(content)["stories"])


def envelope_of(workspace: Path, content: bytes, story: str) -> bytes | None:
    """The envelope line a read of `content` gives for `story` now, or None if absent."""
    units = builtin("epic").load(_Reading(str(workspace), content), REL)
    for unit in units:
        if unit.key == story:
            return pipeline.answer(str(workspace), unit, pipeline.Options()).line
    return None


def direct(workspace: Path, story: str) -> tuple[int, bytes]:
    """What `storyd resume --direct` gives now (exit code, stdout), in process."""
    from storyd.api import answers

    out = answers.run(Query(str(workspace), epic=EPIC, story=story), "git")
    return out.code, out.stdout


def _git(workspace: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_DATE": "@1700000000 +0000",
                        "GIT_COMMITTER_DATE": "@1700000000 +0000"})


class History:
    """One workspace, one daemon, a random sequence of operations and checked queries."""

    def __init__(self, proc: DaemonProcess, workspace: Path, seed: int) -> None:
        self.proc = proc
        self.ws = workspace
        self.rng = random.Random(seed)
        self.report = Report()
        self.ids = [f"story-{EPIC}-{n:04d}" for n in range(1, 6)]
        self.versions: list[bytes] = []  # good contents since the daemon last forgot
        self.served: int | None = None  # index in versions of the newest one served
        self.state = "missing"
        self.version_counter = 0
        self.lines: list[Line] = []
        self.trail: list[str] = []  # the last operations, for a violation's message

    # -- setup ---------------------------------------------------------------

    def prepare(self) -> None:
        """A git repository with a first version committed, then the daemon."""
        self.ws.mkdir(parents=True, exist_ok=True)
        _git(self.ws, "init", "-q", "-b", "main")
        _git(self.ws, "config", "user.email", "t@example.org")
        _git(self.ws, "config", "user.name", "t")
        self._write(self._content(), how="atomic")
        for story in self.ids[:2]:
            self._story_file(story, old=True)
        _git(self.ws, "add", "-A")
        _git(self.ws, "commit", "-q", "-m", "first")
        self.observe()

    def connect(self) -> None:
        """Two persistent client connections."""
        self.close()
        self.lines = [self.proc.connect(), self.proc.connect()]

    def close(self) -> None:
        """Close the client connections."""
        for line in self.lines:
            line.close()
        self.lines = []

    # -- the files -----------------------------------------------------------

    def _content(self) -> bytes:
        self.version_counter += 1
        stories: dict[str, object] = {}
        for story in self.rng.sample(self.ids, self.rng.randint(1, len(self.ids))):
            tasks: dict[str, object] = {}
            for n in range(1, self.rng.randint(2, 4) + 1):
                status = self.rng.choice(_STATUSES)
                task: dict[str, object] = {"status": status}
                if status == "DONE":
                    task["commitSha"] = f"{self.version_counter:08x}{n:032x}"
                    task["completedAt"] = f"2024-0{self.rng.randint(1, 9)}-01T00:00:00Z"
                tasks[f"TASK-{n}"] = task
            stories[story] = {"status": "IN_PROGRESS", "tasks": tasks}
        body = orjson.dumps({"epic": EPIC, "stories": stories})
        assert len(body) < STATE_SIZE, "the padding keeps every version one size"
        return body + b" " * (STATE_SIZE - len(body))

    def _write(self, content: bytes, how: str) -> None:
        path = self.ws / REL
        if how == "atomic" or not path.exists():
            atomic_write(path, content)
        elif how == "flock":  # util-linux flock(1) holding LOCK_EX around an in-place copy
            tmp = self.ws / ".next-version"
            tmp.write_bytes(content)
            subprocess.run(["flock", "-x", str(path), "cp", str(tmp), str(path)], check=True)
            tmp.unlink()
        else:  # same size, in place, under flock(2): racy for an mtime-only check
            with open(path, "r+b") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(content)
                f.flush()
                fcntl.flock(f, fcntl.LOCK_UN)

    def _story_file(self, story: str, *, old: bool) -> None:
        path = self.ws / "plans" / f"epic-{EPIC}" / f"{story}.md"
        path.write_text(f"# {story}\n{self.rng.random()}\n", encoding="utf-8")
        if old:
            os.utime(path, (_OLD, _OLD))

    def observe(self) -> None:
        """Classify the file as it is now, and extend the model's good versions."""
        try:
            content = (self.ws / REL).read_bytes()
        except FileNotFoundError:
            # missing now; re-created, it may be answered from what was there before, as
            # the daemon cannot tell a delete it did not see from a rename over the file
            self.state = "missing"
            self.served = None
            return
        try:
            orjson.loads(content)
        except orjson.JSONDecodeError:
            self.state = "torn"
            return
        self.state = "good"
        if not self.versions or self.versions[-1] != content:
            self.versions.append(content)

    def forgot(self) -> None:
        """The daemon lost its memory (restart, unwatch): no good version was served."""
        self.served = None
        self.versions = self.versions[-1:] if self.state == "good" else []

    # -- operations ----------------------------------------------------------

    def step(self) -> None:
        """One random operation, or a query checked against the model."""
        op = self.rng.choices(
            ["query", "atomic", "flock", "same-size", "torn", "delete", "story",
             "commit", "amend", "reset", "unwatch", "restart", "kill"],
            weights=[40, 8, 6, 8, 5, 2, 5, 3, 2, 2, 2, 1, 1],
        )[0]
        self.report.counts[op] = self.report.counts.get(op, 0) + 1
        self.report.operations += 1
        getattr(self, "op_" + op.replace("-", "_"))()
        self.trail.append(f"{op}->{self.state}/{len(self.versions)}/{self.served}")
        del self.trail[:-8]

    def op_atomic(self) -> None:
        self._write(self._content(), "atomic")
        self.observe()

    def op_flock(self) -> None:
        self._write(self._content(), "flock")
        self.observe()

    def op_same_size(self) -> None:
        self._write(self._content(), "same-size")
        self.observe()

    def op_torn(self) -> None:
        content = self._content()
        path = self.ws / REL
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:  # a writer that dies half-way, without the lock
            f.write(content[: self.rng.randint(1, len(content) // 2)])
        self.observe()

    def op_delete(self) -> None:
        (self.ws / REL).unlink(missing_ok=True)
        self.observe()

    def op_story(self) -> None:
        self._story_file(self.rng.choice(self.ids), old=self.rng.random() < 0.5)

    def op_commit(self) -> None:
        _git(self.ws, "add", "-A")
        _git(self.ws, "commit", "-q", "--allow-empty", "-m", "work")

    def op_amend(self) -> None:
        _git(self.ws, "add", "-A")
        _git(self.ws, "commit", "-q", "--amend", "--allow-empty", "--no-edit")

    def op_reset(self) -> None:
        mode = self.rng.choice(["--soft", "--mixed", "--hard"])
        before = self.versions[-1] if self.state == "good" and self.versions else None
        _git(self.ws, "reset", "-q", mode, "HEAD")
        path = self.ws / REL
        if mode == "--hard" and (not path.exists() or path.read_bytes() != before):
            # git checks a file out by unlinking it and writing a new one: a delete the
            # daemon may or may not have seen, so it may have forgotten what it served
            self.served = None
        self.observe()

    def op_unwatch(self) -> None:
        line = self.lines[0]
        line.request({"op": "unwatch", "workspace": str(self.ws)})
        self.forgot()
        if self.rng.random() < 0.5:
            line.request({"op": "watch", "workspace": str(self.ws)})

    def op_restart(self) -> None:
        self.close()
        self.proc.stop()
        self.forgot()
        self.proc.start(warm=self.rng.random() < 0.5)  # a query may meet the warm-up
        self.connect()

    def op_kill(self) -> None:
        self.close()
        self.proc.signal(signal.SIGKILL)
        assert self.proc.proc is not None
        self.proc.proc.wait(timeout=10)
        self.forgot()
        self.proc.start(warm=False)
        self.connect()

    # -- queries -------------------------------------------------------------

    def op_query(self) -> None:
        story = self.rng.choice([*self.ids, f"story-{EPIC}-0099"])
        how = self.rng.choice(["line", "line", "cli", "list"])
        if how == "list":
            self._check_list()
            return
        if how == "cli":
            from storyd.api.client import ask_cli

            argv = ["--epic-id", EPIC, "--story-id", story, "--workspace", str(self.ws)]
            out = ask_cli(str(self.proc.socket), argv, str(self.ws), 5.0)
            if out is None:
                self._violation(f"resume-cli gave no answer for {story}")
                return
            self._check(story, out.code, out.stdout)
            return
        line = self.rng.choice(self.lines)
        answer = line.request({"op": "resume", "workspace": str(self.ws), "epic": EPIC,
                               "story": story})
        if answer.get("ok"):
            env = orjson.dumps(answer["envelope"]) + b"\n"
            self._check(story, 0, env)
        else:
            self._check(story, int(answer["error"]["code"]), b"")  # type: ignore[index]

    def _check(self, story: str, code: int, stdout: bytes) -> None:
        self.report.answers += 1
        if self.state != "torn":
            want_code, want = direct(self.ws, story)
            if (code, stdout) != (want_code, want):
                self._violation(f"{story} ({self.state}): got {code} {stdout[-200:]!r}, "
                                f"a direct read gives {want_code} {want[-200:]!r}")
            elif code == 0 and self.versions:
                self.served = len(self.versions) - 1
            return
        # torn: the answer of a good version not older than the last one served
        start = self.served if self.served is not None else 0
        allowed = {}
        for k in range(start, len(self.versions)):
            line = envelope_of(self.ws, self.versions[k], story)
            allowed[k] = (0, line) if line is not None else (2, b"")
        match = [k for k, want in allowed.items() if want == (code, stdout)]
        if match:  # versions that answer alike cannot be told apart: the oldest is sure
            self.served = min(match)
        elif not (code == 65 and self.served is None):  # never served: may be unreadable
            self._violation(f"{story} (torn): got {code} {stdout[:120]!r}; allowed versions "
                            f"{start}..{len(self.versions) - 1} (served: {self.served})")

    def _check_list(self) -> None:
        answer = self.lines[0].request({"op": "list", "workspace": str(self.ws)})
        if not answer.get("ok"):
            self._violation(f"list failed: {answer}")
            return
        self.report.answers += 1
        if self.state != "good" or (answer.get("warm") or {}).get("warming"):
            return  # torn: the last good units; a warm-up's list may be partial
        got = {u["unit"]: u["resumePoint"] for u in answer["units"]  # type: ignore[union-attr]
               if u["stateFile"] == REL}
        content = self.versions[-1]
        want = {}
        for story in stories_of(content):
            line = envelope_of(self.ws, content, story)
            want[story] = orjson.loads(line)["resumePoint"] if line else None
        if got and got != want:
            self._violation(f"list: got {got}, a direct read gives {want}")

    def _violation(self, what: str) -> None:
        after = " ".join(self.trail)
        self.report.violations.append(f"op {self.report.operations}: {what} [after: {after}]")


def race(proc: DaemonProcess, workspace: Path, seconds: float, readers: int = 3) -> Report:
    """The concurrent checker (module docstring); the workspace holds epic EPIC."""
    path = workspace / REL
    finished = [0]  # the newest version whose write has finished
    begun = [0]  # the newest version whose write has begun
    stop = threading.Event()
    report = Report()
    lock = threading.Lock()

    def content(version: int) -> bytes:
        tasks = {"TASK-1": {"status": "DONE", "commitSha": f"{version:040x}",
                            "completedAt": "2024-01-01T00:00:00Z"},
                 "TASK-2": {"status": "PENDING"}}
        body = orjson.dumps({"epic": EPIC, "stories": {f"story-{EPIC}-0001": {"tasks": tasks}}})
        return body + b" " * (STATE_SIZE - len(body))

    def writer() -> None:
        version = 0
        while not stop.is_set():
            version += 1
            data = content(version)
            begun[0] = version
            if version % 2:
                atomic_write(path, data)
            else:
                with open(path, "r+b") as f:
                    fcntl.flock(f, fcntl.LOCK_EX)
                    f.write(data)
                    fcntl.flock(f, fcntl.LOCK_UN)
            finished[0] = version
            report.operations += 1
            time.sleep(0.001)  # let the readers in between writes

    def reader() -> None:
        with proc.connect() as line:
            while not stop.is_set():
                floor = finished[0]
                answer = line.request({"op": "resume", "workspace": str(workspace),
                                       "epic": EPIC, "story": f"story-{EPIC}-0001"})
                ceiling = begun[0]
                sha = answer.get("envelope", {}).get("lastCommitSha")  # type: ignore[union-attr]
                got = int(str(sha), 16) if sha else -1
                with lock:
                    report.answers += 1
                    if not floor <= got <= ceiling:
                        what = f"version {got}" if got >= 0 else str(answer.get("error"))
                        report.violations.append(
                            f"{what} answered; the query was sent after version "
                            f"{floor} was written and answered before {ceiling + 1} began"
                        )

    atomic_write(path, content(0))
    threads = [threading.Thread(target=writer, name="race-writer")]
    threads += [threading.Thread(target=reader, name=f"race-reader-{n}") for n in range(readers)]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    return report
