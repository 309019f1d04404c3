"""A state file reached through a link inside the workspace (issue 29's link rule allows
it): a write to the file the link leads to, in a folder the link's own folder's change
queue does not see, is in the very next answer of the daemon, the resume cache's and the
epic op's kept view alike (both depend on what `Source.read` recorded)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
from daemon_harness import DaemonProcess
from epic_state_harness import epic_relpath, write_epic
from git_harness import GitRepo

from storyd.api.epicview import epic_view

EPIC = "0061"
STORY = f"story-{EPIC}-0001"
Spawn = Callable[..., DaemonProcess]


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose epic state file is a link to real/state.json; the target."""
    repo = GitRepo(tmp_path / "ws").init()
    repo.commit("base", {"README": "x\n"})
    ws = repo.path
    write_epic(ws, EPIC, {STORY: {"status": "IN_PROGRESS", "title": "aaaa", "tasks": {
        "T1": {"status": "DONE"}, "T2": {"status": "PENDING"}}}})
    (ws / "real").mkdir()
    state = ws / epic_relpath(EPIC)
    shutil.move(state, ws / "real" / "state.json")
    os.symlink("../../real/state.json", state)
    return ws, ws / "real" / "state.json"


def _rewrite_in_place(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data and len(old) == len(new)
    with open(path, "r+b") as f:  # same inode, same size: only the target's folder sees it
        f.write(data.replace(old, new))


def test_the_resume_cache_sees_a_write_to_the_links_target(spawn_daemon: Spawn,
                                                         tmp_path: Path) -> None:
    ws, target = _linked(tmp_path)
    daemon = spawn_daemon([ws])
    ask = {"op": "resume", "workspace": str(ws), "epic": EPIC, "story": STORY}
    for _ in range(2):  # the second from the cache
        assert daemon.request(ask)["envelope"]["resumePoint"] == "phase-2-task-2"
    _rewrite_in_place(target, b'"PENDING"', b'"DONE"\x20\x20\x20')
    assert daemon.request(ask)["envelope"]["resumePoint"] != "phase-2-task-2"


def test_a_kept_epic_view_sees_a_write_to_the_links_target(spawn_daemon: Spawn,
                                                          tmp_path: Path) -> None:
    ws, target = _linked(tmp_path)
    daemon = spawn_daemon([ws])

    def view() -> object:
        with daemon.connect() as line:
            line.send({"op": "epic", "workspace": str(ws), "epic": EPIC})
            raw = line.read_raw()
        return orjson.loads(raw)["view"]

    assert view() == view() == epic_view(str(ws), EPIC)  # the second from the kept view
    _rewrite_in_place(target, b"aaaa", b"bbbb")
    assert view() == epic_view(str(ws), EPIC)
