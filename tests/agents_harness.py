"""Shared by the agents' tests: a prepared demo workspace, its private environment, and
`storyd hook` run as Claude Code runs it (the hook's JSON on stdin, no shell).

    demo_workspace()   the shipped demo/ copied and given its git history (storyd demo's)
    AgentsEnv          a config home allowing the workspace's folder, a socket path
    hook_payload()     the JSON Claude Code sends for an event
    run_hook()         `storyd hook EVENT` with bytes on stdin
    LoggingGit         a `git` first on PATH that logs each start (in spawn order) and
                       runs the real one
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import orjson
from cli_harness import STORYD
from daemon_harness import daemon_env, write_config

from storyd.cli.commands.demo import prepare
from storyd.core.paths import which

__all__ = ["REPO", "AgentsEnv", "LoggingGit", "demo_workspace", "hook_payload", "no_python",
           "run_hook"]

REPO = Path(__file__).resolve().parents[1]


def demo_workspace(folder: Path) -> Path:
    """storyd demo's workspace in `folder`/ws: 7 units, 3 state files behind git."""
    ws = folder / "ws"
    prepare(str(REPO / "daemon" / "demo"), str(ws))
    return ws


class AgentsEnv:
    """A private environment under `root`: config home, runtime dir, STORYD_SOCKET."""

    def __init__(self, root: Path, hooks: str | None = None) -> None:
        self.root = root
        self.socket = root / "run" / "storyd.sock"
        self.env = daemon_env(root, self.socket)
        self.env["XDG_STATE_HOME"] = str(root / "state")  # the hooks' session records
        self.config(hooks if hooks is not None else f"roots = [{str(root)!r}]\n")

    def config(self, hooks_table: str, extra: str = "") -> Path:
        """Write config.toml with this [hooks] table body."""
        return write_config(self.root, f"{extra}[hooks]\n{hooks_table}")


def no_python(env: dict[str, str], root: Path) -> dict[str, str]:
    """`env` where any Python storyd that starts fails: SHADOW on stderr and exit 97 (a
    hook answered by the daemon through storyd-hook must start none)."""
    shadow = root / "no-python" / "storyd"
    (shadow / "cli").mkdir(parents=True, exist_ok=True)
    (shadow / "__init__.py").write_text("import sys\nsys.stderr.write('SHADOW\\n')\nsys.exit(97)\n")
    (shadow / "cli" / "__init__.py").write_text("")
    return dict(env, PYTHONPATH=str(shadow.parent))


def hook_payload(event: str, cwd: Path | str, **fields: object) -> dict[str, object]:
    """The hook input Claude Code sends: the common fields plus the event's own."""
    payload: dict[str, object] = {
        "session_id": "9ecf22fa-edf8-4332-ae85-b6d5456eda64",
        "transcript_path": "/home/user/.claude/projects/p/9ecf22fa.jsonl",
        "cwd": str(cwd),
        "hook_event_name": event,
    }
    payload.update(fields)
    return payload


def run_hook(event: str, stdin: bytes | dict[str, object] | None, env: dict[str, str],
             cwd: Path | str = "/", *args: str) -> subprocess.CompletedProcess[bytes]:
    """`storyd hook EVENT ARGS` with `stdin` (a dict is sent as JSON; None: /dev/null)."""
    data = orjson.dumps(stdin) if isinstance(stdin, dict) else stdin
    return subprocess.run(
        [STORYD, "hook", event, *args], input=data,
        stdin=subprocess.DEVNULL if data is None else None, cwd=cwd, env=env,
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip


def home_env(root: Path) -> dict[str, str]:
    """AgentsEnv's environment with HOME in `root` (the user scope lands there)."""
    home = root / "home"
    home.mkdir()
    return dict(AgentsEnv(root).env, HOME=str(home))


def run_storyd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`storyd ARGS` as text; whatever its exit code, never a traceback."""
    done = subprocess.run([STORYD, *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done


class LoggingGit:
    """A `git` first on PATH (`env`, an AgentsEnv's environment) that logs each start,
    with its process id, and execs the real git. `starts()` lists the logged command
    lines in the order they were spawned: a process id is given at the spawn, while two
    shims started together may write their lines the other way round."""

    def __init__(self, root: Path) -> None:
        real = which("git")
        assert real is not None
        shims = root / "shims"
        shims.mkdir()
        self.log = root / "git-starts.log"
        shim = shims / "git"
        shim.write_text(f'#!/bin/sh\necho "$$ $*" >> {self.log}\nexec {real} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        self.env = dict(AgentsEnv(root).env, PATH=f"{shims}{os.pathsep}{os.environ['PATH']}")

    def starts(self) -> list[str]:
        """The command lines logged since the last call, in spawn order (the log is
        emptied); process ids that wrapped around pid_max keep their order."""
        if not self.log.exists():
            return []
        lines = self.log.read_text().split("\n")[:-1]  # git's formats hold \x1e, not \n
        self.log.unlink()
        logged = [(int(pid), rest) for pid, _, rest in (line.partition(" ") for line in lines)]
        if logged and max(p for p, _ in logged) - min(p for p, _ in logged) > 1 << 14:
            logged = [(p + (1 << 22) if p < 1 << 14 else p, rest) for p, rest in logged]
        return [rest for _, rest in sorted(logged, key=lambda item: item[0])]
