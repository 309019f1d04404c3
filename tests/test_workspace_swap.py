"""A moved world is a changed world (issue 29): when the folder at a watched workspace's
path becomes another folder (renameat2 RENAME_EXCHANGE, `mv` away and replace, a
symlinked path retargeted), the very next answer is the new folder's, and the daemon's
detectors run on the new folder.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import STORYD
from daemon_harness import DaemonProcess, wait_for
from epic_state_harness import STORY
from git_harness import GitWorkspace

Spawn = Callable[..., DaemonProcess]
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """renameat2(a, b, RENAME_EXCHANGE): both names swap folders in one step."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    renameat2 = libc.renameat2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        errno = ctypes.get_errno()
        pytest.skip(f"renameat2(RENAME_EXCHANGE): {os.strerror(errno)}")


def workspace(path: Path, done: int, *, unrecorded: bool = False) -> GitWorkspace:
    """A repository whose story has `done` of 4 tasks DONE at their commits; with
    `unrecorded`, the next task's commit too, still PENDING in the file."""
    repo = GitWorkspace(path).init()
    repo.commit("base", {"README": f"{path.name}\n"})
    shas = repo.tasks_commits(STORY, done + unrecorded)
    repo.record({STORY: shas[:done]}, pending=4 - done)
    return repo


def resume(daemon: DaemonProcess, ws: Path) -> tuple[str, set[str]]:
    answer = daemon.request({"op": "resume", "workspace": str(ws), "epic": "0049",
                             "story": STORY})
    assert answer["ok"] is True, answer
    codes = {f"{f['detector']}/{f['code']}" for f in answer["findings"]}  # type: ignore[union-attr]
    return answer["envelope"]["resumePoint"], codes  # type: ignore[index]


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    """/ws: 1 task done; /other: 3 done and a 4th committed but not recorded."""
    workspace(tmp_path / "ws", 1)
    workspace(tmp_path / "other", 3, unrecorded=True)
    return tmp_path / "ws", tmp_path / "other"


def the_new_folder_is_checked(daemon: DaemonProcess, ws: Path) -> None:
    def unrecorded() -> bool:
        return "unrecorded-commit/unrecorded" in resume(daemon, ws)[1]
    wait_for(unrecorded, 20.0, "the detectors to run on the new folder")


@pytest.mark.slow
def test_an_exchanged_folder_is_answered_from_at_once(
    two: tuple[Path, Path], spawn_daemon: Spawn
) -> None:
    ws, other = two
    daemon = spawn_daemon([ws])
    first = resume(daemon, ws)[0]
    exchange(ws, other)
    assert resume(daemon, ws)[0] != first  # the very next answer: the other folder's
    direct = subprocess.run(
        [STORYD, "resume", "--direct", "--epic-id", "0049", "--story-id", STORY,
         "--workspace", str(ws)], capture_output=True, env=daemon.env, check=False)
    assert resume(daemon, ws)[0] in direct.stdout.decode()
    the_new_folder_is_checked(daemon, ws)
    exchange(ws, other)  # and back
    assert resume(daemon, ws)[0] == first
    daemon.stop()


@pytest.mark.slow
def test_a_folder_moved_away_and_replaced(two: tuple[Path, Path], spawn_daemon: Spawn) -> None:
    ws, other = two
    daemon = spawn_daemon([ws])
    first = resume(daemon, ws)[0]
    ws.rename(ws.with_name("ws-old"))
    other.rename(ws)
    assert resume(daemon, ws)[0] != first
    the_new_folder_is_checked(daemon, ws)
    daemon.stop()


@pytest.mark.slow
def test_a_retargeted_symlink(two: tuple[Path, Path], spawn_daemon: Spawn,
                              tmp_path: Path) -> None:
    ws, other = two
    link = tmp_path / "link"
    link.symlink_to(ws)
    daemon = spawn_daemon([ws, other])
    first = resume(daemon, link)[0]
    second = resume(daemon, other)[0]
    assert first != second
    for target, expected in ((other, second), (ws, first), (other, second)):
        new = tmp_path / "link.new"
        new.symlink_to(target)
        new.rename(link)  # an atomic retarget
        assert resume(daemon, link)[0] == expected
    daemon.stop()


@pytest.mark.slow
def test_the_tick_sees_a_swap_no_query_asked_about(
    two: tuple[Path, Path], spawn_daemon: Spawn
) -> None:
    ws, other = two
    daemon = spawn_daemon([ws])
    first = resume(daemon, ws)[0]
    exchange(ws, other)

    def moved() -> list[dict[str, object]]:
        return [e for e in daemon.log_events() if e.get("event") == "workspace_moved"]
    wait_for(lambda: bool(moved()), 30.0, "the verification tick to see the swap")
    assert {e.get("workspace") for e in moved()} == {os.path.realpath(ws)}
    the_new_folder_is_checked(daemon, ws)  # the detectors ran on the folder now there
    assert resume(daemon, ws)[0] != first
    daemon.stop()


@pytest.mark.slow
def test_a_folder_swapped_while_only_its_partner_was_asked(
    two: tuple[Path, Path], spawn_daemon: Spawn
) -> None:
    """Both paths watched; only `ws` is asked after the exchange: `other` is right too."""
    ws, other = two
    daemon = spawn_daemon([ws, other])
    first, second = resume(daemon, ws)[0], resume(daemon, other)[0]
    exchange(ws, other)
    assert resume(daemon, ws)[0] == second
    assert resume(daemon, other)[0] == first
    daemon.stop()
