"""PlainReader: the cheap read of files storyd never writes keeps Source.read's rules."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from locks_harness import FlockWriter

from storyd.core.containment import Refused
from storyd.core.errors import LockTimeout, StateFileMissing
from storyd.core.formats import adapter_for
from storyd.core.formats.base import Source
from storyd.core.formats.plainread import PlainReader

CONFIG = "backlog/config.yml"
TASK = "backlog/tasks/task-1 - One.md"


def _signature(path: Path) -> tuple[int, int, int, int, int]:
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "backlog" / "tasks").mkdir(parents=True)
    (root / CONFIG).write_text("project_name: p\nstatuses: [To Do, Done]\n")
    (root / TASK).write_text("---\nid: task-1\nstatus: To Do\n---\nbody\n")
    return root


class TestPlainFiles:
    """A regular file in a folder reached without links is read and recorded."""

    def test_bytes_and_signature(self, ws: Path) -> None:
        source = Source(str(ws))
        assert PlainReader(source).read(TASK) == (ws / TASK).read_bytes()
        assert source.seen == {TASK: _signature(ws / TASK)}
        assert source.redo == {}

    def test_head(self, ws: Path) -> None:
        assert PlainReader(Source(str(ws))).read(TASK, head=3) == b"---"

    def test_missing(self, ws: Path) -> None:
        source = Source(str(ws))
        with pytest.raises(StateFileMissing, match=r"gone\.md not found"):
            PlainReader(source).read("backlog/tasks/gone.md", "gone.md")
        assert source.seen == {"backlog/tasks/gone.md": None}


class TestLinks:
    """Links go to Source.read: followed inside the workspace, refused out of it."""

    def test_file_link_inside(self, ws: Path) -> None:
        (ws / "backlog" / "real.md").write_text("inside\n")
        os.symlink("../real.md", ws / "backlog" / "tasks" / "link.md")
        source = Source(str(ws))
        assert PlainReader(source).read("backlog/tasks/link.md") == b"inside\n"
        assert "backlog/real.md" in source.seen  # the target is a dependency too

    def test_file_link_out(self, ws: Path, tmp_path: Path) -> None:
        (tmp_path / "secret.md").write_text("secret\n")
        os.symlink(tmp_path / "secret.md", ws / "backlog" / "tasks" / "out.md")
        with pytest.raises(Refused, match="outside the workspace"):
            PlainReader(Source(str(ws))).read("backlog/tasks/out.md")

    def test_folder_link_out(self, ws: Path, tmp_path: Path) -> None:
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "t.md").write_text("elsewhere\n")
        os.symlink(tmp_path / "elsewhere", ws / "backlog" / "moved")
        with pytest.raises(Refused, match="outside the workspace"):
            PlainReader(Source(str(ws))).read("backlog/moved/t.md")

    def test_into_git(self, ws: Path) -> None:
        (ws / ".git").mkdir()
        (ws / ".git" / "config").write_text("[core]\n")
        with pytest.raises(Refused, match="git's own directory"):
            PlainReader(Source(str(ws))).read(".git/config")

    def test_linked_worktree_gitdir(self, ws: Path) -> None:
        """A `.git` file naming a gitdir inside the workspace: the whole rule decides."""
        (ws / "gitdir").mkdir()
        (ws / "gitdir" / "HEAD").write_text("ref: refs/heads/main\n")
        (ws / ".git").write_text("gitdir: gitdir\n")
        with pytest.raises(Refused, match="git's own directory"):
            PlainReader(Source(str(ws))).read("gitdir/HEAD")


class TestOddFiles:
    """What is not a plain regular file is never opened for reading the cheap way."""

    def test_fifo_does_not_block(self, ws: Path) -> None:
        os.mkfifo(ws / "backlog" / "tasks" / "fifo.md")
        got: list[BaseException] = []

        def read() -> None:
            try:
                PlainReader(Source(str(ws))).read("backlog/tasks/fifo.md", "fifo.md")
            except BaseException as exc:
                got.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "a FIFO blocked the read"
        assert isinstance(got[0], StateFileMissing)

    @pytest.mark.slow
    def test_exclusive_lock_waits(self, ws: Path, tmp_path: Path) -> None:
        """A writer's exclusive flock: Source.read waits for it, within the timeout."""
        writer = FlockWriter(ws / TASK, "-x", tmp_path / "fifo")
        try:
            with pytest.raises(LockTimeout):
                PlainReader(Source(str(ws), lock_timeout=0.2)).read(TASK)
        finally:
            writer.kill()


class TestFormats:
    """Backlog.md and BMAD read through it and keep every file a dependency."""

    def test_backlog_dependencies(self, ws: Path) -> None:
        source = Source(str(ws))
        [unit] = adapter_for(CONFIG).load(source, CONFIG)
        assert [t.id for t in unit.tasks] == ["task-1"]
        assert source.seen == {CONFIG: _signature(ws / CONFIG), TASK: _signature(ws / TASK)}

    def test_backlog_task_link_out_is_not_counted(self, ws: Path, tmp_path: Path) -> None:
        (tmp_path / "other.md").write_text("---\nid: task-9\nstatus: To Do\n---\n")
        os.symlink(tmp_path / "other.md", ws / "backlog" / "tasks" / "task-9 - Out.md")
        [unit] = adapter_for(CONFIG).load(Source(str(ws)), CONFIG)
        assert [t.id for t in unit.tasks] == ["task-1"]
        assert any(f.code == "front-matter-unreadable" and "outside" in f.message
                   for f in unit.findings)

    def test_bmad_story_dependency(self, tmp_path: Path) -> None:
        state = "docs/sprint-status.yaml"
        (tmp_path / "docs" / "stories").mkdir(parents=True)
        (tmp_path / state).write_text("development_status:\n  epic-1: in-progress\n"
                                      "  1-1-first: review\n")
        story = tmp_path / "docs" / "stories" / "1-1-first.md"
        story.write_text("# Story 1.1\n\nStatus: done\n")
        source = Source(str(tmp_path))
        [unit] = adapter_for(state).load(source, state)
        assert unit.tasks[0].extra["fileStatus"] == "done"
        assert source.seen["docs/stories/1-1-first.md"] == _signature(story)
