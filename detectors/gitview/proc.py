"""git processes with a deadline: a git that does not answer is killed, never waited on.

A `packed-refs`, `HEAD` or loose ref that is a FIFO makes git block in open(2) for ever;
so can a stalled network filesystem. Every git process the views start goes through
here (or, for the persistent cat-file, is read with the same deadline) and is killed
when the deadline passes; the caller gets GitError "git did not answer within N s".

    GIT_TIMEOUT          the deadline, in seconds ($STORYD_GIT_TIMEOUT, default 10)
    run(argv, cwd)       (status, stdout, stderr) of one git process
    piped(a, b, cwd)     stdout of `a | b` (git show | git patch-id), both killed on time
    piped_all(pairs, cwd)  the same for several pipes at once, run side by side
    start(argv, cwd), finish(proc)  one git begun now, read later (it runs meanwhile)
    check_git_files()    refuse a repository whose HEAD, packed-refs, config or commondir
                         is not a regular file, before any git is started on it
"""

from __future__ import annotations

import os
import stat
import time

from storyd.core.errors import GitError
from storyd.detectors.gitview.spawn import DEVNULL, PIPE, Process

__all__ = [
    "GIT_TIMEOUT", "GitStuck", "check_git_files", "finish", "git_env", "no_answer", "piped",
    "piped_all", "run", "start",
]  # fmt: skip


class GitStuck(GitError):
    """git did not answer in time, or would not (a FIFO where it reads a file)."""


def _timeout() -> float:
    raw = os.environ.get("STORYD_GIT_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return 10.0
    return value if value > 0 else 20.0


GIT_TIMEOUT = _timeout()


def no_answer(timeout: float) -> GitStuck:
    """The error of a git that outlived its deadline."""
    return GitStuck(f"git did not answer within {timeout:g} s (killed)")


def git_env() -> dict[str, str]:
    """The environment git runs in (C locale: stable, parseable messages)."""
    return {**os.environ, "LANGUAGE": "C", "LC_ALL": "C"}


def run(argv: list[str], cwd: str, *, timeout: float | None = None) -> tuple[int, str, str]:
    """Run one git process to its end within `timeout` (default GIT_TIMEOUT)."""
    return finish(start(argv, cwd), timeout=timeout)


def start(argv: list[str], cwd: str) -> Process:
    """One git process started now and read later by `finish` (so it runs meanwhile)."""
    return _start(argv, cwd, git_env(), DEVNULL, PIPE)


def finish(proc: Process, *, timeout: float | None = None) -> tuple[int, str, str]:
    """(status, stdout, stderr) of a process `start` began, killed when `timeout` passes."""
    limit = GIT_TIMEOUT if timeout is None else timeout
    try:
        out, err = proc.communicate(timeout=limit)
    except TimeoutError:
        _end(proc)
        raise no_answer(limit) from None
    except BaseException:  # interrupted (an inline detector's alarm): no child left behind
        _end(proc)
        raise
    return proc.wait(), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _start(argv: list[str], cwd: str, env: dict[str, str], stdin: int, stderr: int) -> Process:
    """One git process, its stdout piped; GitError when it cannot start."""
    try:
        return Process(argv, cwd, env, stdin=stdin, stdout=PIPE, stderr=stderr)
    except OSError as exc:
        raise GitError(f"git {argv[1:2]} could not start: {exc.strerror}") from None


def _end(proc: Process) -> None:
    """Kill, reap and close a process that is no longer wanted."""
    proc.kill()
    proc.wait()
    proc.close()


def piped(first: list[str], second: list[str], cwd: str, *, timeout: float | None = None) -> str:
    """stdout of `first | second`, both killed when `timeout` passes."""
    return piped_all([(first, second)], cwd, timeout=timeout)[0]


def piped_all(
    pairs: list[tuple[list[str], list[str]]], cwd: str, *, timeout: float | None = None
) -> list[str]:
    """stdout of each `first | second`, all pipes started at once (they run side by side:
    one wait instead of one per pipe), all killed when `timeout` passes."""
    limit = GIT_TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + limit
    env = git_env()
    started: list[Process] = []
    try:
        for first, second in pairs:
            producer = _start(first, cwd, env, DEVNULL, DEVNULL)
            started.append(producer)
            assert producer.stdout is not None
            started.append(_start(second, cwd, env, producer.stdout, DEVNULL))
            producer.close()  # the consumer holds its own copy of the pipe
        outs = []
        for producer, consumer in zip(started[::2], started[1::2], strict=True):
            try:
                out, _ = consumer.communicate(timeout=max(0.0, deadline - time.monotonic()))
                producer.wait(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise no_answer(limit) from None
            outs.append(out.decode("utf-8", "replace"))
        return outs
    finally:
        for proc in started:
            if proc.poll() is None:
                _end(proc)
            proc.close()


_GIT_FILES = (
    ("common", "packed-refs"),
    ("common", "config"),
    ("git", "HEAD"),
    ("git", "commondir"),
)


def check_git_files(git_dir: str, common_dir: str, names: tuple[str, ...] = ()) -> None:
    """GitError when a file git opens on every run (or one of `names`) is there but is
    not a regular file."""
    for where, name in _GIT_FILES:
        if names and name not in names:
            continue
        path = os.path.join(common_dir if where == "common" else git_dir, name)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # absent (or unreadable): git says so itself, in time
        if not stat.S_ISREG(mode):
            msg = f"{path} is not a regular file; git would wait on it for ever, not checked"
            raise GitStuck(msg)
