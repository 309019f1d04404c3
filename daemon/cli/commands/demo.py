"""`storyd demo`: serve a copy of the shipped demo workspace and query it.

The demo copies the workspace shipped inside the package (daemon/demo/, installed
with it, so `storyd demo` works from any folder after `pip install` or `pipx install`;
`--workspace DIR` serves another) to a temporary folder, makes it a git repository whose history
matches the epic state file (one task's commit is then amended away, and a commit
names a task the state file still calls in progress), starts `storyd serve` on a
private socket, and runs `storyd resume` (through the socket), `storyd-resume` (the
shell fast path), `--detail`, `storyd status`, `storyd check`, the epic-level view
`storyd epic` and the reconcile preview `storyd reconcile` (which changes nothing)
against it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import orjson

from storyd.cli.common import parse_prefixed
from storyd.core.errors import UsageError
from storyd.core.flags import SWITCH, VALUE

__all__ = ["FLAGS", "main", "prepare", "shipped_workspace"]

USAGE = "usage: storyd demo [--workspace DIR] [--keep]"
FLAGS = {"workspace": VALUE, "keep": SWITCH}
_OLD = "2026-03-01T08:00:00Z"


def _git(cwd: str, *args: str, date: str | None = None) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="storyd demo",
        GIT_AUTHOR_EMAIL="demo@storyd.invalid",
        GIT_COMMITTER_NAME="storyd demo",
        GIT_COMMITTER_EMAIL="demo@storyd.invalid",
    )
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        msg = f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}"
        raise UsageError(msg)
    return done.stdout.decode().strip()


def _commit_task(ws: str, task: str, note: str) -> str:
    path = os.path.join(ws, "work", f"{task}.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{note}\n")
    _git(ws, "add", "work")
    _git(ws, "commit", "-q", "-m", f"{task}: {note}")
    return _git(ws, "rev-parse", "HEAD")


def _freshen(path: str) -> None:
    """Move a checkpoint's `last_updated` to ten minutes ago, so the demo is not "ancient"."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as handle:
        state = orjson.loads(handle.read())
    state["last_updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    with open(path, "wb") as handle:
        handle.write(orjson.dumps(state, option=orjson.OPT_INDENT_2))


def prepare(source: str, ws: str) -> None:
    """Copy the demo and give it a git history that the detectors can check."""
    shutil.copytree(source, ws, dirs_exist_ok=True)
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", "plan: epic 0049 and its stories", date=_OLD)
    state_path = os.path.join(ws, "plans", "epic-0049", "execution-state.json")
    with open(state_path, "rb") as handle:
        state = orjson.loads(handle.read())
    for story in state["stories"].values():
        for task_id, task in story["tasks"].items():
            if task.get("commitSha") == "demo":
                task["commitSha"] = _commit_task(ws, task_id, "done")
    _git(ws, "commit", "-q", "--amend", "-m", "TASK-0049-0013-003: done (amended)")
    _commit_task(ws, "TASK-0049-0013-004", "work landed, state file not updated yet")
    tmp = state_path + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(orjson.dumps(state, option=orjson.OPT_INDENT_2))
    os.replace(tmp, state_path)
    _freshen(os.path.join(ws, "memory", "state", "phase.json"))
    _freshen(os.path.join(ws, "memory", "state", "execution.json"))
    with open(
        os.path.join(ws, "plans", "epic-0049", "story-0049-0012.md"), "a", encoding="utf-8"
    ) as handle:
        handle.write("\nEdited after its tasks were done.\n")


def _storyd() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "storyd")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "storyd"]


def _show(title: str, argv: list[str], cwd: str, env: dict[str, str]) -> None:
    sys.stdout.write(f"\n$ {title}\n")
    sys.stdout.flush()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    sys.stdout.write(done.stdout.decode(errors="replace"))
    if done.stderr:
        sys.stdout.write(done.stderr.decode(errors="replace"))
    sys.stdout.write(f"(exit {done.returncode})\n")


def _wait_ready(env: dict[str, str], deadline: float, daemon: subprocess.Popen[bytes]) -> None:
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            msg = f"storyd serve exited early with {daemon.returncode}"
            raise UsageError(msg)
        done = subprocess.run([*_storyd(), "ping"], env=env, capture_output=True, check=False)
        if done.returncode == 0:
            return
        time.sleep(0.05)  # polling a child process's readiness; no event to wait on
    msg = "storyd serve did not answer within 15 s"
    raise UsageError(msg)


def shipped_workspace() -> str:
    """The demo workspace installed with the package (daemon/demo/)."""
    import storyd

    return os.path.join(os.path.dirname(os.path.abspath(storyd.__file__)), "demo")


def main(argv: list[str]) -> int:
    """Prepare, serve, query, stop."""
    flags = parse_prefixed(argv, FLAGS, USAGE)
    given = flags.get("workspace")
    source = os.path.abspath(str(given)) if given else shipped_workspace()
    if not os.path.isdir(os.path.join(source, "plans")):
        msg = (
            f"{source}: no demo workspace here (no plans/ folder); pass --workspace DIR"
            if given
            else f"{source}: the shipped demo workspace is missing: reinstall storyd"
        )
        raise UsageError(msg)
    root = tempfile.mkdtemp(prefix="storyd-demo-")
    ws = os.path.join(root, "workspace")
    prepare(source, ws)
    sock = os.path.join(root, "run", "storyd.sock")
    env = dict(
        os.environ,
        STORYD_SOCKET=sock,
        XDG_CONFIG_HOME=os.path.join(root, "config"),
        # its history, sessions and undo records go with the copy, not into the user's
        XDG_STATE_HOME=os.path.join(root, "state"),
        STORYD_HISTORY=os.path.join(root, "state", "storyd", "history.sqlite3"),
        PATH=os.path.dirname(_storyd()[0]) + os.pathsep + os.environ.get("PATH", ""),
    )
    sys.stdout.write(f"demo workspace: {ws}\nsocket: {sock}\n")
    log_path = os.path.join(root, "storyd.log")
    with open(log_path, "wb") as log_file:
        daemon = subprocess.Popen(
            [*_storyd(), "serve", "--workspace", ws],
            env=env,
            stderr=log_file,
            stdout=subprocess.DEVNULL,
        )
        try:
            _wait_ready(env, time.monotonic() + 15, daemon)
            flags_resume = ["--story-id", "story-0049-0013", "--epic-id", "49"]
            _show(
                "storyd resume --story-id story-0049-0013 --epic-id 49",
                [*_storyd(), "resume", *flags_resume],
                ws,
                env,
            )
            fast = shutil.which("storyd-resume", path=env["PATH"])
            if fast:
                _show(
                    "storyd-resume --story-id story-0049-0013 --epic-id 49",
                    [fast, *flags_resume],
                    ws,
                    env,
                )
            _show(
                "storyd resume ... --detail",
                [*_storyd(), "resume", *flags_resume, "--detail"],
                ws,
                env,
            )
            _show("storyd status", [*_storyd(), "status", "--workspace", ws], ws, env)
            _show("storyd check", [*_storyd(), "check", "--workspace", ws], ws, env)
            _show("storyd epic --epic-id 49", [*_storyd(), "epic", "--epic-id", "49"], ws, env)
            _show(
                "storyd reconcile --workspace .   (a preview: nothing is written)",
                [*_storyd(), "reconcile", "--workspace", ws],
                ws,
                env,
            )
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=15)
    if flags.get("keep"):
        where = f"its log: {log_path}; the workspace: {ws}"
    else:
        shutil.rmtree(root, ignore_errors=True)
        where = "its log and the workspace's copy are removed (`storyd demo --keep` keeps them)"
    sys.stdout.write(f"\ndaemon stopped (exit {daemon.returncode}); {where}\n")
    return 0 if daemon.returncode == 0 else 1
