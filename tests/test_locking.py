"""The locked read against real `flock(1)` writers: it waits, it is bounded, it follows renames."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_harness import STORYD
from epic_state_harness import write_epic
from locks_harness import FlockWriter

from storyd.core.errors import LockTimeout, StateFileMissing
from storyd.core.locking import LockedRead, read_locked

pytestmark = pytest.mark.skipif(
    shutil.which("flock") is None, reason="needs flock(1) from util-linux"
)

S = "story-0049-0013"
ARGS = ("--story-id", S, "--epic-id", "0049")
OLD_OUT = (
    b'{"resumePoint":"fresh-start","tasksCompleted":[],"tasksPending":["T1"],'
    b'"lastCommitSha":null,"staleWarnings":[]}\n'
)
NEW_OUT = (
    b'{"resumePoint":"all-done","tasksCompleted":[{"id":"T1","commitSha":"new1"}],'
    b'"tasksPending":[],"lastCommitSha":"new1","staleWarnings":[]}\n'
)
WAIT = 10.0  # generous bound for things that must happen; never reached when all is well
BLOCKED_FOR = 0.3  # how long a reader must keep waiting to count as blocked


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Poll a process-state predicate until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        pause.wait(0.002)
    return True


def inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def holds_open(pid: int, wanted: tuple[int, int]) -> bool:
    """Whether process `pid` has a descriptor open on the file `wanted` (dev, ino)."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == wanted:
            return True
    return False


Writers = Callable[[Path, str], FlockWriter]
Run = Callable[..., subprocess.CompletedProcess[bytes]]


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[Writers]:
    """Start flock(1) writers; any still holding a lock are stopped at teardown."""
    started: list[FlockWriter] = []

    def start(path: Path, mode: str) -> FlockWriter:
        writer = FlockWriter(path, mode, tmp_path / f"release-{len(started)}")
        started.append(writer)
        return writer

    yield start
    for writer in started:
        writer.kill()


class ThreadReader:
    """`storyd.core.locking.read_locked` running in a thread of this process."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.pid = os.getpid()
        self.result: LockedRead | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(path, timeout), name="reader")
        self._thread.start()

    def _run(self, path: Path, timeout: float) -> None:
        try:
            self.result = read_locked(str(path), timeout)
        except BaseException as exc:
            self.error = exc
        finally:
            self._done.set()

    def finished(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def close(self) -> None:
        self._thread.join(WAIT)
        assert not self._thread.is_alive()


class ProcessReader:
    """`storyd resume --direct --lock-timeout S` as a separate process."""

    def __init__(self, workspace: Path, timeout: float, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [STORYD, "resume", *ARGS, "--direct", "--lock-timeout", str(timeout)],
            cwd=workspace,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.pid = self.proc.pid
        self.stdout = b""
        self.stderr = b""

    def finished(self, timeout: float) -> bool:
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=WAIT)


Reader = ThreadReader | ProcessReader
StartReader = Callable[[str, float], Reader]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A workspace whose state file says fresh-start (the "old" content)."""
    return write_epic(tmp_path / "ws", "0049", tasks={S: {"T1": {"status": "PENDING"}}})


def new_content() -> bytes:
    return (
        b'{"stories": {"story-0049-0013": {"tasks": {"T1": '
        b'{"status": "DONE", "commitSha": "new1"}}}}}'
    )


@pytest.fixture
def start_reader(state: Path, isolated_env: dict[str, str]) -> Iterator[StartReader]:
    """Start a reader of `state` of either kind; it is finished off at teardown."""
    readers: list[Reader] = []

    def start(kind: str, timeout: float) -> Reader:
        reader: Reader
        if kind == "thread":
            reader = ThreadReader(state, timeout)
        else:
            reader = ProcessReader(state.parent.parent.parent, timeout, isolated_env)
        readers.append(reader)
        return reader

    yield start
    for reader in readers:
        reader.close()


def assert_old_answer(reader: Reader, state_bytes: bytes) -> None:
    if isinstance(reader, ThreadReader):
        assert reader.error is None, reader.error
        assert reader.result is not None and reader.result.data == state_bytes
    else:
        assert (reader.proc.returncode, reader.stdout, reader.stderr) == (0, OLD_OUT, b"")


class TestExclusiveWriterBlocksReader:
    """A reader waits while a writer holds `flock -x`, and returns once it lets go."""

    @pytest.mark.slow
    @pytest.mark.parametrize("kind", ["thread", "process"])
    def test_waits_then_reads(
        self,
        kind: str,
        state: Path,
        writers: Writers,
        start_reader: StartReader,
    ) -> None:
        content = state.read_bytes()
        writer = writers(state, "-x")
        reader = start_reader(kind, WAIT)
        assert wait_until(lambda: holds_open(reader.pid, inode(state))), (
            "reader never opened the file"
        )
        assert not reader.finished(BLOCKED_FOR), "the reader did not wait for the writer"
        writer.release()
        assert reader.finished(WAIT), "the reader did not return after the writer released"
        assert_old_answer(reader, content)

    def test_lock_released_after_read(self, state: Path) -> None:
        read_locked(str(state), 1.0)
        probe = subprocess.run(["flock", "-x", "-n", str(state), "true"], timeout=WAIT, check=False)
        assert probe.returncode == 0

    def test_reader_holds_no_descriptor_afterwards(self, state: Path) -> None:
        read_locked(str(state), 1.0)
        assert not holds_open(os.getpid(), inode(state))


class TestSharedWriterDoesNotBlock:
    """A holder of `flock -s` does not keep a reader waiting."""

    @pytest.mark.parametrize("kind", ["thread", "process"])
    def test_reads_while_shared_lock_held(
        self,
        kind: str,
        state: Path,
        writers: Writers,
        start_reader: StartReader,
    ) -> None:
        content = state.read_bytes()
        holder = writers(state, "-s")
        reader = start_reader(kind, WAIT)
        assert reader.finished(WAIT)
        assert holder.proc.poll() is None, "the shared holder let go before the reader finished"
        assert_old_answer(reader, content)
        holder.release()


class TestBound:
    """A writer that never lets go gives exit 75 after about --lock-timeout seconds."""

    @pytest.mark.slow
    @pytest.mark.parametrize("bound", [0.3, 0.6])
    def test_in_process(self, bound: float, state: Path, writers: Writers) -> None:
        writers(state, "-x")
        start = time.monotonic()
        with pytest.raises(LockTimeout) as raised:
            read_locked(str(state), bound)
        elapsed = time.monotonic() - start
        assert bound <= elapsed < bound + 1.0
        assert raised.value.code == 75
        assert str(state) in raised.value.message
        assert f"{bound:g} s" in raised.value.message

    @pytest.mark.slow
    @pytest.mark.parametrize("bound", [0.3, 0.6])
    def test_process(
        self,
        bound: float,
        state: Path,
        writers: Writers,
        run_storyd: Run,
    ) -> None:
        writers(state, "-x")
        start = time.monotonic()
        done = run_storyd(
            "resume",
            *ARGS,
            "--direct",
            "--lock-timeout",
            str(bound),
            cwd=state.parent.parent.parent,
            timeout=WAIT + bound,
        )
        elapsed = time.monotonic() - start
        assert done.returncode == 75
        assert done.stdout == b""
        lines = done.stderr.decode().splitlines()
        assert len(lines) == 1
        assert "exclusive lock" in lines[0] and "--lock-timeout" in lines[0]
        assert f"{bound:g} s" in lines[0]
        assert bound <= elapsed < bound + 3.0

    def test_zero_bound_fails_at_once(self, state: Path, writers: Writers) -> None:
        writers(state, "-x")
        start = time.monotonic()
        with pytest.raises(LockTimeout):
            read_locked(str(state), 0)
        assert time.monotonic() - start < 0.5

    @pytest.mark.slow
    def test_fallback_path_is_bounded_too(
        self,
        state: Path,
        writers: Writers,
        run_storyd: Run,
    ) -> None:
        writers(state, "-x")
        done = run_storyd(
            "resume", *ARGS, "--lock-timeout=0.3", cwd=state.parent.parent.parent, timeout=WAIT
        )
        assert (done.returncode, done.stdout) == (75, b"")
        assert b"Traceback" not in done.stderr


class TestRenameReplace:
    """A file renamed over the path while the reader waits: the new file is what it returns."""

    @pytest.mark.slow
    @pytest.mark.parametrize("kind", ["thread", "process"])
    def test_returns_new_content(
        self,
        kind: str,
        state: Path,
        writers: Writers,
        start_reader: StartReader,
    ) -> None:
        old = inode(state)
        writer = writers(state, "-x")
        reader = start_reader(kind, WAIT)
        assert wait_until(lambda: holds_open(reader.pid, old)), "reader never opened the old file"
        replacement = state.with_name("execution-state.json.tmp")
        replacement.write_bytes(new_content())
        os.replace(replacement, state)
        assert inode(state) != old
        assert not reader.finished(BLOCKED_FOR), "the reader did not wait for the writer"
        writer.release()
        assert reader.finished(WAIT)
        if isinstance(reader, ThreadReader):
            assert reader.error is None, reader.error
            assert reader.result is not None
            assert reader.result.data == new_content()
            assert reader.result.inode == inode(state)
        else:
            assert (reader.proc.returncode, reader.stdout, reader.stderr) == (0, NEW_OUT, b"")

    @pytest.mark.slow
    def test_new_file_locked_too(self, state: Path, writers: Writers) -> None:
        old = inode(state)
        first = writers(state, "-x")
        reader = ThreadReader(state, WAIT)
        try:
            assert wait_until(lambda: holds_open(reader.pid, old))
            replacement = state.with_name("execution-state.json.tmp")
            replacement.write_bytes(new_content())
            second = writers(replacement, "-x")  # the new inode is locked before the rename
            os.replace(replacement, state)
            first.release()
            assert wait_until(lambda: holds_open(reader.pid, inode(state))), "no reopen of new file"
            assert not reader.finished(BLOCKED_FOR), "the reader ignored the new file's lock"
            second.release()
            assert reader.finished(WAIT)
            assert reader.error is None, reader.error
            assert reader.result is not None and reader.result.data == new_content()
        finally:
            reader.close()

    def test_removed_while_waiting(self, state: Path, writers: Writers) -> None:
        old = inode(state)
        writer = writers(state, "-x")
        reader = ThreadReader(state, WAIT)
        try:
            assert wait_until(lambda: holds_open(reader.pid, old))
            state.unlink()
            writer.release()
            assert reader.finished(WAIT)
            assert isinstance(reader.error, StateFileMissing)
            assert reader.error.message == "execution-state.json not found"
        finally:
            reader.close()
