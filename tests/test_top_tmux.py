"""Issue 34: `storyd top` in a real terminal, tmux's (send-keys, capture-pane), against
a real daemon subprocess: the first frame lists the units, a write shows without a key
press, a resize redraws, Enter opens the detail, `q` exits 0. Skips without tmux or
without the tui extra."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_harness import STORYD
from daemon_harness import DaemonProcess
from epic_state_harness import EPIC, story_id, task_id, write_epic
from git_harness import GitWorkspace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
pytest.importorskip("textual", reason="the tui extra is not installed: pip install '.[tui]'")
Spawn = Callable[..., DaemonProcess]
STORY = story_id(1)


def _tasks(done: int) -> dict[str, object]:
    return {STORY: {"tasks": {task_id(STORY, n): {"status": "DONE" if n <= done else "PENDING"}
                              for n in (1, 2, 3)}}}  # fmt: skip


class Tmux:
    """One private tmux server (its own socket under tmp_path) with one window."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.socket = str(root / "tmux.sock")
        self.env = {**env, "TERM": "xterm-256color"}
        self.env.pop("NO_COLOR", None)

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], env=self.env, check=True,
                              capture_output=True, text=True, timeout=10).stdout  # fmt: skip

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top")

    def until(self, check: Callable[[str], bool], what: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            seen = self.screen()
            if check(seen):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{seen}")
            time.sleep(0.1)  # capture-pane has no event to wait on: a bounded poll


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Tmux]]:
    made: list[Tmux] = []

    def make(env: dict[str, str]) -> Tmux:
        made.append(Tmux(tmp_path, env))
        return made[-1]

    yield make
    for one in made:
        subprocess.run(["tmux", "-S", one.socket, "kill-server"], capture_output=True,
                       check=False, timeout=10)  # fmt: skip


def test_top_in_a_real_terminal(spawn_daemon: Spawn, tmp_path: Path,
                                tmux: Callable[[dict[str, str]], Tmux]) -> None:
    repo = GitWorkspace(tmp_path / "ws").init()
    repo.commit("base", {"README": "hello\n"})
    write_epic(repo.path, EPIC, _tasks(0))
    proc = spawn_daemon([repo.path])
    term = tmux(proc.env)
    code = tmp_path / "exit-code"
    command = (f"{shlex.quote(STORYD)} top --workspace {shlex.quote(str(repo.path))}; "
               f"echo $? > {shlex.quote(str(code))}")  # fmt: skip
    term.run("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", command)
    first = term.until(lambda s: "story-0049-0001" in s and "live" in s, "the first frame")
    assert "0/3" in first and len(first.splitlines()) <= 24
    write_epic(repo.path, EPIC, _tasks(2))  # no key pressed
    term.until(lambda s: "2/3" in s, "the write to show", timeout=5)
    # an agent's session starts, then waits for a permission: its state and unit show
    # (the hooks' records are watched, no unit changes, no key pressed)
    from agents_harness import hook_payload, run_hook

    for event, name, fields in (
        ("session-start", "SessionStart", {"source": "startup"}),
        ("notification", "Notification", {"notification_type": "permission_prompt",
                                          "message": "Claude needs your permission to use Bash"}),
    ):  # fmt: skip
        done = run_hook(event, hook_payload(name, repo.path, **fields), proc.env, repo.path)
        assert done.returncode == 0, done.stderr
    term.until(lambda s: "claude  9ecf22fa  waiting " in s and "on story-0049-0001" in s,
               "the session waiting", timeout=5)  # fmt: skip
    term.run("resize-window", "-t", "top", "-x", "60", "-y", "16")
    small = term.until(lambda s: len(s.splitlines()) <= 16 and "2/3" in s, "the redraw")
    assert max(len(line) for line in small.splitlines()) <= 60
    term.run("send-keys", "-t", "top", "Enter")
    term.until(lambda s: "findings (" in s and "resume at" in s, "the detail")
    term.run("send-keys", "-t", "top", "Escape")
    term.until(lambda s: "findings (" not in s and "2/3" in s, "the list again")
    term.run("send-keys", "-t", "top", "q")
    deadline = time.monotonic() + 10
    while not code.exists() or not code.read_text().strip():
        assert time.monotonic() < deadline, "storyd top did not exit on q"
        time.sleep(0.05)
    assert code.read_text().strip() == "0"
