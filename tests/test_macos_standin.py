"""The commands that read without a daemon, run under the macOS stand-in
(tests/macos_standin/sitecustomize.py: no pidfd_open, no waitid, no SO_PEERCRED, no
inotify): before issue 41 every timed git wait raised AttributeError and `status`,
`check` and `top --once` ended in a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import REPO, Run
from epic_state_harness import write_epic
from git_harness import GitWorkspace

pytestmark = pytest.mark.slow

STANDIN = str(REPO / "tests" / "macos_standin")
STORY = "story-0049-0013"


@pytest.fixture
def standin_env(isolated_env: dict[str, str]) -> dict[str, str]:
    return dict(isolated_env, STORYD_MACOS_STANDIN="1", PYTHONPATH=STANDIN)


def test_the_standin_takes_away_what_macos_lacks(run_storyd: Run,
                                                 standin_env: dict[str, str]) -> None:  # fmt: skip
    import subprocess
    import sys

    probe = ("import os, select, socket, ctypes; from watchdog.observers import Observer; "
             "print(hasattr(os, 'pidfd_open'), hasattr(os, 'waitid'), "
             "hasattr(socket, 'SO_PEERCRED'), hasattr(select, 'epoll'), "
             "hasattr(ctypes.CDLL(None), 'inotify_init1'), Observer.__name__)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], env=standin_env, capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    assert done.stdout.split() == ["False"] * 5 + ["PollingObserver"]


@pytest.mark.parametrize("command", [["status"], ["check"], ["top", "--once"]])
def test_direct_commands_ask_git(run_storyd: Run, standin_env: dict[str, str], tmp_path: Path,
                                 command: list[str]) -> None:  # fmt: skip
    ws = GitWorkspace(tmp_path / "ws").init()
    ws.commit("base", {"README": "hello\n"})
    write_epic(ws.path, "0049", tasks={STORY: {"T1": {"status": "done", "commitSha": "deadbeef"},
                                               "T2": {"status": "pending"}}})  # fmt: skip
    done = run_storyd(*command, "--workspace", str(ws.path), env=standin_env, cwd=ws.path)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "Traceback" not in err and "git-error" not in out + err, err
    assert "missing" in out, out  # the git detector ran: deadbeef is not in the history
