"""Git-side helpers for the drift tests and bench: workspaces, event streams, fake sinks.

    GitWorkspace     a real repository whose epic state records its commits (plans/ ignored)
    EventStream      a `subscribe` connection read by a thread that stamps each event line
    PipeLines        a child's stdout read line by line, each read bounded by a deadline
    run_in_pty()     run a command with a pseudo-terminal as its stdout
    fake_notify_send(), append_stdin_hook(), path_without()
                     the desktop and hook sinks' stand-ins, and a PATH without a program

Builds on tests/daemon_harness.py (the daemon process) and tests/test_gitview.py's
`GitRepo` (fixed identities and dates, so the same history always has the same shas).
Nothing here sleeps and hopes: every wait is bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import os
import pty
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson
import pytest
from daemon_harness import DaemonProcess, epic_relpath, write_epic
from test_gitview import GitRepo

__all__ = [
    "EPIC",
    "STATE",
    "STORY",
    "Event",
    "EventStream",
    "GitWorkspace",
    "PipeLines",
    "append_stdin_hook",
    "fake_notify_send",
    "hook_calls",
    "path_without",
    "run_in_pty",
    "story_id",
    "task_id",
]

EPIC = "0049"
STATE = epic_relpath(EPIC)
STORY = "story-0049-0013"

Event = tuple[float, dict[str, object]]  # (time.monotonic() on arrival, the event)


def story_id(n: int) -> str:
    """The id of story n of epic 0049 (`story-0049-0013` for 13)."""
    return f"story-{EPIC}-{n:04d}"


def task_id(story: str, n: int) -> str:
    """The seed's id of task n of a story (`TASK-0049-0013-002`)."""
    return "TASK-" + story.removeprefix("story-") + f"-{n:03d}"


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


class EventStream:
    """A subscriber: one socket, one reader thread, every line stamped as it arrives.

    Use as a context manager; `close()` shuts the socket down and joins the thread.
    """

    def __init__(self, proc: DaemonProcess, **fields: object) -> None:
        self.line = proc.connect(timeout=5.0)
        self.first = self.line.request({"op": "subscribe", **fields})
        assert self.first.get("ok") is True and self.first.get("subscribed") is True, self.first
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="drift-subscriber", daemon=True)
        self._thread.start()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and close the connection."""
        with self._cond:
            self._stopping = True
        with contextlib.suppress(OSError):
            self.line.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        self.line.close()

    def _run(self) -> None:
        self.line.sock.settimeout(0.2)
        while True:
            with self._cond:
                if self._stopping:
                    return
            try:
                raw = self.line.read_raw()
            except TimeoutError:
                continue
            except (OSError, ConnectionError) as exc:
                with self._cond:
                    if not self._stopping:
                        self.error = exc
                    self._cond.notify_all()
                return
            stamp = time.monotonic()
            event = orjson.loads(raw)
            with self._cond:
                self.events.append((stamp, event))
                self._cond.notify_all()

    def mark(self) -> int:
        """The number of events so far: pass it as `start` to look only at later ones."""
        with self._cond:
            return len(self.events)

    def since(self, start: int = 0) -> list[dict[str, object]]:
        """The events received after `mark()` returned `start`."""
        with self._cond:
            return [event for _, event in self.events[start:]]

    def wait(self, predicate: Callable[[dict[str, object]], bool], *, start: int = 0,
             timeout: float = 5.0, message: str = "an event") -> Event:
        """The first event from `start` on that matches, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for stamp, event in self.events[start:]:
                    if predicate(event):
                        return stamp, event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.error is not None:
                    got = [(e.get("event"), e.get("unit")) for _, e in self.events[start:]]
                    pytest.fail(f"timed out after {timeout:g} s waiting for {message}; "
                                f"got {got}; reader error: {self.error!r}")
                self._cond.wait(remaining)

    def wait_count(self, predicate: Callable[[dict[str, object]], bool], count: int, *,
                   start: int = 0, timeout: float = 5.0,
                   message: str = "events") -> list[Event]:
        """The first `count` matching events from `start` on, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [(s, e) for s, e in self.events[start:] if predicate(e)]
                if len(found) >= count:
                    return found[:count]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.error is not None:
                    pytest.fail(f"timed out after {timeout:g} s waiting for {count} {message}; "
                                f"got {len(found)}; reader error: {self.error!r}")
                self._cond.wait(remaining)

    def settle(self, quiet: float, *, timeout: float = 10.0) -> list[dict[str, object]]:
        """Every event, once none has arrived for `quiet` seconds (bounded by `timeout`).

        Proving that something does *not* happen needs a window; this is that window. It
        waits on the reader's Condition, and every new event starts the window again.
        """
        called = time.monotonic()
        deadline = called + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                last = max(called, self.events[-1][0] if self.events else called)
                idle = now - last
                if idle >= quiet:
                    return [event for _, event in self.events]
                if now >= deadline:
                    pytest.fail(f"events did not settle for {quiet:g} s within {timeout:g} s")
                self._cond.wait(min(quiet - idle, deadline - now))


class PipeLines:
    """A child's stdout, read line by line with a deadline on each line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.buffer = b""

    def readline(self, timeout: float = 5.0) -> bytes:
        """The next line (without its newline); fail the test at the deadline or on EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no line within {timeout:g} s; partial: {self.buffer[:200]!r}")
            if not self.selector.select(remaining):
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                pytest.fail(f"EOF (exit {self.proc.poll()}); partial: {self.buffer[:200]!r}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def close(self) -> None:
        """Unregister the pipe."""
        self.selector.close()


def run_in_pty(argv: list[str], *, env: dict[str, str], cwd: Path | str = ".",
               timeout: float = 30.0) -> tuple[int, bytes]:
    """Run `argv` with a pseudo-terminal as stdout (so `isatty()` holds); (exit code, output)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave,
                                stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    finally:
        os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    selector = selectors.DefaultSelector()
    selector.register(master, selectors.EVENT_READ)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                proc.kill()
                proc.wait()
                pytest.fail(f"{argv} did not finish within {timeout:g} s in a pty")
            if not selector.select(remaining):
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        selector.close()
        os.close(master)
    return proc.wait(timeout), b"".join(chunks)


def fake_notify_send(folder: Path, record: Path) -> Path:
    """An executable `notify-send` in `folder` that appends its argv (as JSON) to `record`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "notify-send"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(record)!r}, 'a', encoding='utf-8') as out:\n"
        "    out.write(json.dumps(sys.argv[1:]) + '\\n')\n",
        encoding="utf-8")
    script.chmod(0o755)
    return script


def append_stdin_hook(script: Path, record: Path) -> list[str]:
    """A hook argv: this Python running a script that appends its stdin, then a separator
    line `--`, to `record`. One hook call is one block."""
    script.write_text(
        "import sys\n"
        "data = sys.stdin.buffer.read()\n"
        f"with open({str(record)!r}, 'ab') as out:\n"
        "    out.write(data + b'--\\n')\n",
        encoding="utf-8")
    return [sys.executable, str(script)]


def hook_calls(record: Path) -> list[list[dict[str, object]]]:
    """What `append_stdin_hook` recorded: one list of parsed event lines per call."""
    if not record.exists():
        return []
    calls: list[list[dict[str, object]]] = [[]]
    for raw in record.read_bytes().splitlines():
        if raw == b"--":
            calls.append([])
        else:
            calls[-1].append(orjson.loads(raw))
    return calls[:-1]


def path_without(program: str, extra: Iterable[Path | str] = ()) -> str:
    """$PATH (after `extra`) with every folder that holds `program` left out."""
    folders = [str(p) for p in extra]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and not os.path.exists(os.path.join(folder, program)):
            folders.append(folder)
    found = shutil.which(program, path=os.pathsep.join(folders))
    assert found is None or any(found.startswith(str(e)) for e in extra), found
    return os.pathsep.join(folders)
