"""What git's answers about a workspace depend on (`storytime.stamp_files`) includes the
workspace's own `.git` and the repository's `shallow`: a `.git` link or `gitdir:` file
retargeted to another repository, or a shallow clone deepened, is in the next cached
answer (here the epic op's kept view, whose merged-PR evidence reads git), as a direct
read gives it. Before, both kept the old repository's answer indefinitely."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from daemon_harness import DaemonProcess
from epic_state_harness import write_epic
from git_harness import GitRepo

from storyd.api.epicview import epic_view

EPIC = "0061"
STORY = f"story-{EPIC}-0001"
Spawn = Callable[..., DaemonProcess]


def _epic(ws: Path) -> None:
    write_epic(ws, EPIC, {STORY: {"status": "PR_CREATED", "title": "t", "prNumber": 7,
                                  "tasks": {f"TASK-{EPIC}-0001-001": {"status": "DONE"}}}})


def _same(daemon: DaemonProcess, ws: Path) -> object:
    """The daemon's view, asserted equal to a direct read's."""
    with daemon.connect() as line:
        line.send({"op": "epic", "workspace": str(ws), "epic": EPIC})
        view = orjson.loads(line.read_raw())["view"]
    assert view == epic_view(str(ws), EPIC)
    return view


def _merged(view: object) -> object:
    return view["stories"][0]["merged"]  # type: ignore[index]


def _repos(tmp_path: Path) -> tuple[GitRepo, GitRepo]:
    """Two repositories: only the second has a commit naming PR #7."""
    a = GitRepo(tmp_path / "ga").init()
    a.commit("base", {"README": "x\n"})
    b = GitRepo(tmp_path / "gb").init()
    b.commit("base", {"README": "x\n"})
    b.commit("the work (#7)", {"a": "1\n"})
    return a, b


@pytest.mark.parametrize("how", ["link", "gitdir file"])
def test_a_retargeted_dot_git_is_another_repository(spawn_daemon: Spawn, tmp_path: Path,
                                                    how: str) -> None:
    a, b = _repos(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    _epic(ws)
    if how == "link":
        os.symlink(a.path / ".git", ws / ".git")
    else:
        (ws / ".git").write_text(f"gitdir: {a.path / '.git'}\n")
    daemon = spawn_daemon([ws])
    assert _merged(_same(daemon, ws)) is None
    assert _merged(_same(daemon, ws)) is None  # kept
    if how == "link":
        os.symlink(b.path / ".git", ws / ".git-new")
        os.replace(ws / ".git-new", ws / ".git")
    else:
        (ws / ".git").write_text(f"gitdir: {b.path / '.git'}\n")
    assert _merged(_same(daemon, ws)) is not None


def test_a_deepened_shallow_clone_sees_the_older_commits(spawn_daemon: Spawn,
                                                         tmp_path: Path) -> None:
    origin = GitRepo(tmp_path / "origin").init()
    origin.commit("the work (#7)", {"a": "1\n"})
    for n in range(3):
        origin.commit(f"later {n}", {f"b{n}": "1\n"})
    ws = tmp_path / "ws"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{origin.path}", str(ws)],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    _epic(ws)
    daemon = spawn_daemon([ws])
    assert _merged(_same(daemon, ws)) is None
    assert _merged(_same(daemon, ws)) is None  # kept
    subprocess.run(["git", "-C", str(ws), "fetch", "-q", "--deepen=10"], check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    assert _merged(_same(daemon, ws)) is not None
