"""Issue 29 and 39: a reconcile killed inside its one in-place write is finished exactly
once, by storyd's writers only.

reconcile writes a state file's new bytes into the locked file (same inode), 64 KiB at
a time; a kill between two pieces leaves it torn. Its redo record (the old bytes and
the new, core/redo.py, in storyd's private folder, bound to the file) lets the next
`reconcile --recover`, `--apply` or `--undo` finish the write. Readers (`storyd resume`,
a daemon) never write: they report the pending write. These tests tear real files with
real SIGKILLs, and check that a newer writer's update, made after the kill, is never
overwritten, and that no read changes a byte.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_harness import STORYD, run_storyd_cli
from daemon_harness import DaemonProcess, reconcile_env, wait_for
from epic_state_harness import write_epic
from git_harness import GitWorkspace
from locks_harness import exclusively_locked

from storyd.api.reconcile.atomic import HOOK_ENV
from storyd.core import redo

EPIC, STORY = "0049", "story-0049-0001"
T1, T2 = "TASK-0049-0001-001", "TASK-0049-0001-002"
Spawn = Callable[..., DaemonProcess]


def locked_rw(path: Path) -> int:
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def place(path: Path, before: bytes, after: bytes, bound: dict[str, object] | None = None,
          ) -> Path:
    """storyd's own record for `path` in its private folder (core/redo.py), as
    atomic.overwrite writes it; `bound` overrides a header field (a forged record)."""
    redo.prepare_dir()
    st = os.stat(path)
    data = redo.encode(str(path), st, before, after)
    if bound:
        head, _, body = data.partition(b"\n")
        fields = json.loads(head[len(b"storyd-redo 2 "):])
        fields.update(bound)
        data = b"storyd-redo 2 " + json.dumps(fields).encode() + b"\n" + body
    where = Path(redo.record_path(st))
    where.write_bytes(data)
    where.chmod(0o600)
    return where


def recover_now(path: Path) -> str | None:
    fd = locked_rw(path)
    try:
        return redo.recover(fd, str(path))
    finally:
        os.close(fd)


class TestRecover:
    """core/redo.py on real files: every torn prefix finished, anything else kept."""

    BEFORE = b'{"a": "' + b"0" * 300 + b'", "b": 1}'

    def _recover(self, path: Path, content: bytes, before: bytes, after: bytes) -> str | None:
        path.write_bytes(content)
        place(path, before, after)
        return recover_now(path)

    @pytest.mark.parametrize("after", [b'{"a": "' + b"1" * 300 + b'", "b": 1}',  # same size
                                       b'{"a": 1}',  # shorter: padded, then truncated
                                       b'{"a": "' + b"2" * 500 + b'"}'])  # longer
    def test_every_torn_file_is_finished(self, tmp_path: Path, after: bytes) -> None:
        before = self.BEFORE
        padded = after + b" " * (len(before) - len(after))
        path = tmp_path / "state.json"
        for k in range(0, len(padded) + 1, 7):
            torn = padded[:k] + before[k:]
            outcome = self._recover(path, torn, before, after)
            expected = before if torn == before else after
            assert path.read_bytes() == expected, k
            assert outcome == ("kept" if torn in (before, after) else "finished"), k
            assert not os.path.exists(redo.record_path(os.stat(path)))
            assert self._recover(path, path.read_bytes(), before, after) == "kept"  # once

    def test_a_newer_writers_bytes_are_kept(self, tmp_path: Path) -> None:
        path = tmp_path / "state.json"
        newer = b'{"a": "the writer after the kill"}'
        assert self._recover(path, newer, self.BEFORE, b'{"a": 1}') == "kept"
        assert path.read_bytes() == newer

    def test_a_torn_record_touches_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "state.json"
        path.write_bytes(self.BEFORE)
        where = place(path, self.BEFORE, b'{"a": 1}')
        where.write_bytes(where.read_bytes()[:-3])  # killed while the record was written
        assert recover_now(path) == "kept"
        assert path.read_bytes() == self.BEFORE
        assert redo.decode(b"not a record\n") is None
        assert not where.exists()

    def test_no_record_is_none(self, tmp_path: Path) -> None:
        path = tmp_path / "state.json"
        path.write_bytes(self.BEFORE)
        assert recover_now(path) is None


class TestBinding:
    """Issue 39: a record is obeyed only for the very file storyd wrote it for."""

    BEFORE = b'{"a": "' + b"0" * 40 + b'"}'
    EVIL = b'{"a": "' + b"6" * 40 + b'"}'

    @pytest.mark.parametrize(("field", "value", "why"), [
        ("path", "/etc/passwd", "written for /etc/passwd"),
        ("created", 1, "older than"),
        ("created", 4_000_000_000, "older than"),
        ("uid", 12345, "not this user"),
        ("ino", 1, "another file"),
    ])
    def test_a_record_bound_elsewhere_is_ignored_and_left(
        self, tmp_path: Path, field: str, value: object, why: str
    ) -> None:
        path = tmp_path / "state.json"
        torn = self.EVIL[:20] + self.BEFORE[20:]  # what a torn write of EVIL looks like
        path.write_bytes(torn)
        where = place(path, self.BEFORE, self.EVIL, {field: value})
        outcome = recover_now(path)
        assert outcome is not None and outcome.startswith("ignored: ") and why in outcome
        assert path.read_bytes() == torn  # never obeyed
        assert where.exists()  # left for the user to see (`reconcile --recover`)
        assert redo.pending(str(path), os.stat(path)) == "foreign"

    def test_a_record_beside_the_file_is_never_read(self, tmp_path: Path) -> None:
        """Where storyd before issue 39 kept records, and where a repository can ship one."""
        path = tmp_path / "state.json"
        torn = self.EVIL[:20] + self.BEFORE[20:]
        path.write_bytes(torn)
        beside = Path(redo.foreign_path(str(path)))
        beside.write_bytes(b"storyd-redo 1 %d %d\n" % (len(self.BEFORE), len(self.EVIL))
                           + self.BEFORE + self.EVIL)
        assert recover_now(path) is None
        assert path.read_bytes() == torn and beside.exists()
        assert redo.pending(str(path), os.stat(path)) == "foreign"

    def test_a_record_that_is_a_link_or_fifo_is_not_followed(self, tmp_path: Path) -> None:
        path = tmp_path / "state.json"
        path.write_bytes(self.BEFORE)
        redo.prepare_dir()
        where = Path(redo.record_path(os.stat(path)))
        where.symlink_to("/dev/zero")
        outcome = recover_now(path)
        assert outcome is not None and outcome.startswith("ignored")
        where.unlink()
        os.mkfifo(where)
        started = time.monotonic()
        outcome = recover_now(path)
        assert time.monotonic() - started < 2 and outcome is not None
        assert outcome.startswith("ignored") and path.read_bytes() == self.BEFORE


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return reconcile_env(tmp_path)


def big_unrecorded(root: Path, size: int) -> tuple[GitWorkspace, Path, bytes]:
    """One epic whose T2 is committed but PENDING (an `unrecorded` repair), padded to
    `size` bytes after the task, so that the repair shifts every byte behind it."""
    repo = GitWorkspace(root).init()
    repo.commit("base", {"README": "hello\n"})
    t1 = repo.commit(f"{T1} one", {"src/1.txt": "1\n"})
    repo.commit(f"{T2} two", {"src/2.txt": "2\n"})
    tasks = {T1: {"status": "DONE", "commitSha": t1, "completedAt": "2026-01-01T12:00:00Z"},
             T2: {"status": "PENDING"}}
    path = write_epic(repo.path, EPIC, {STORY: {"tasks": tasks}}, atomic=False)
    document = json.loads(path.read_bytes())
    document["notes"] = ["x" * 100] * (size // 110)
    path.write_text(json.dumps(document, indent=2))
    return repo, path, path.read_bytes()


def reconcile(env: dict[str, str], repo: GitWorkspace, *args: str,
              hook: str | None = None) -> subprocess.CompletedProcess[bytes]:
    return run_storyd_cli("reconcile", "--workspace", str(repo.path), *args,
                          env={**env, HOOK_ENV: hook} if hook else env, cwd=repo.path,
                          timeout=60)


def read_directly(env: dict[str, str], repo: GitWorkspace) -> subprocess.CompletedProcess[bytes]:
    return run_storyd_cli("resume", "--workspace", str(repo.path), "--epic-id", EPIC,
                          "--story-id", STORY, "--direct", env=env, cwd=repo.path)


def is_torn(data: bytes, before: bytes, after: bytes) -> bool:
    return data not in (before, after, after + b" " * (len(before) - len(after)))


@pytest.mark.slow
def test_a_kill_at_every_piece_is_reported_by_reads_and_finished_by_recover(
    env: dict[str, str], tmp_path: Path
) -> None:
    repo, path, before = big_unrecorded(tmp_path / "ws", 300_000)  # 5 pieces of 64 KiB
    assert reconcile(env, repo, "--apply").returncode == 0
    after = path.read_bytes()
    assert reconcile(env, repo, "--undo").returncode == 0 and path.read_bytes() == before
    torn = 0
    for n in range(1, 200):
        done = reconcile(env, repo, "--apply", hook=f"kill-at-{n}")
        if done.returncode != -9:
            assert done.returncode == 0, done.stderr
            break
        raw = path.read_bytes()
        torn += is_torn(raw, before, after)
        read = read_directly(env, repo)  # a read reports the killed write, never finishes it
        assert b"Traceback" not in read.stderr, read.stderr
        assert read.returncode in (0, 65), (n, read.stderr)
        if read.returncode == 65:
            assert b"reconcile --recover" in read.stderr, read.stderr
        assert path.read_bytes() == raw, f"step {n}: a read wrote"
        recovered = reconcile(env, repo, "--recover")
        assert recovered.returncode == 0, (n, recovered.stdout, recovered.stderr)
        assert path.read_bytes() in (before, after), f"step {n}: still torn after --recover"
        assert not os.path.exists(redo.record_path(path.stat()))
        if raw != before:
            assert path.read_bytes() == after, f"step {n}: a begun write was not finished"
        undone = reconcile(env, repo, "--undo")
        assert undone.returncode in (0, 1), (n, undone.stderr)  # 1: nothing recorded yet
        assert path.read_bytes() == before, f"step {n}: --undo did not restore"
    assert torn >= 4, f"only {torn} kills tore the file: the pieces are not steps"


@pytest.mark.slow
def test_a_newer_writer_after_the_kill_is_never_overwritten(
    env: dict[str, str], tmp_path: Path
) -> None:
    repo, path, before = big_unrecorded(tmp_path / "ws", 300_000)
    for n in range(1, 200):  # the first step that leaves a torn file
        done = reconcile(env, repo, "--apply", hook=f"kill-at-{n}")
        assert done.returncode == -9, done.stderr
        if path.read_bytes() != before:
            break
        assert reconcile(env, repo, "--undo").returncode in (0, 1)
    newer = json.dumps({"epic": EPIC, "stories": {STORY: {"tasks": {
        T1: {"status": "DONE"}, T2: {"status": "IN_PROGRESS"}}}}}).encode()
    writer = ("import os,sys; fd=os.open(sys.argv[1], os.O_RDWR); os.ftruncate(fd, 0); "
              "os.pwrite(fd, sys.argv[2].encode(), 0); os.fsync(fd)")
    subprocess.run(["flock", "-x", str(path), sys.executable, "-c", writer, str(path),
                    newer.decode()], check=True, timeout=30)
    assert read_directly(env, repo).returncode == 0
    assert reconcile(env, repo, "--recover").returncode == 0
    assert path.read_bytes() == newer  # the writer's update stands
    assert not os.path.exists(redo.record_path(path.stat()))


@pytest.mark.slow
def test_a_random_sigkill_mid_write_is_left_by_the_daemon_and_finished_by_recover(
    env: dict[str, str], tmp_path: Path, spawn_daemon: Spawn
) -> None:
    """Real SIGKILLs at random moments of the write (of a 4 MB file); a watching daemon
    reads each torn file and leaves it be; `--recover` finishes it, and the daemon
    answers from the whole one."""
    repo, path, before = big_unrecorded(tmp_path / "ws", 4_000_000)
    daemon = spawn_daemon([repo.path])
    query = {"op": "resume", "workspace": str(repo.path), "epic": EPIC, "story": STORY}
    assert daemon.request(query)["ok"] is True
    flag = tmp_path / "go"
    rng = random.Random(29)
    proc = _held_apply(env, repo, path, flag)
    flag.touch()
    assert proc.wait(60) == 0
    after = path.read_bytes()
    _undo(env, repo, path, before)
    torn = tries = 0
    while torn < 3 and tries < 40:
        tries += 1
        proc = _held_apply(env, repo, path, flag)
        stamp = path.stat().st_mtime_ns
        flag.touch()
        # the first piece written in place changes the file's mtime: kill soon after.
        # Polled without a pause and delayed by a spin, not a sleep: on a loaded
        # machine a 10 ms poll or a sleep's late wake-up saw the whole write done
        # (0 torn of 40 in one CI-like run at load 5)
        _spin_until(_began(path, stamp, proc), 30.0)
        _spin(rng.uniform(0.0, 0.002))
        proc.kill()
        proc.wait(30)
        raw = path.read_bytes()
        if proc.returncode == 0 or raw == before:
            _undo(env, repo, path, before)
            continue
        torn += is_torn(raw, before, after)
        daemon.request(query)  # answered or refused (a torn file may not parse): no write
        assert path.read_bytes() == raw, "the daemon wrote into the state file"
        assert reconcile(env, repo, "--recover").returncode == 0
        wait_for(lambda: daemon.request(query)["ok"] is True, 30.0, "the whole file's answer")
        assert path.read_bytes() == after  # whole again
        _undo(env, repo, path, before)
    assert torn >= 1, f"no kill of {tries} tore the file"


def _spin_until(predicate: Callable[[], bool], timeout: float) -> None:
    """Ask `predicate` without pausing until it holds; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            pytest.fail(f"the write did not begin within {timeout:g} s")


def _spin(seconds: float) -> None:
    """Let `seconds` pass on this CPU (a sleep may wake much later under load)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _held_apply(env: dict[str, str], repo: GitWorkspace, path: Path,
                flag: Path) -> subprocess.Popen[bytes]:
    """An apply that holds the lock, its plan compared, until `flag` exists."""
    flag.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [STORYD, "reconcile", "--workspace", str(repo.path), "--apply"],
        env={**env, HOOK_ENV: f"wait-before-write:{flag}"}, cwd=repo.path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: proc.poll() is not None or exclusively_locked(path), 30.0,
             "the apply to hold the lock")
    return proc


def _began(path: Path, stamp: int, proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    """Whether the apply wrote into the file (its mtime moved) or ended."""
    return lambda: path.stat().st_mtime_ns != stamp or proc.poll() is not None


def _undo(env: dict[str, str], repo: GitWorkspace, path: Path, before: bytes) -> None:
    done = reconcile(env, repo, "--undo")
    assert done.returncode in (0, 1), done.stderr
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_daemon_started_after_the_kill_leaves_it_to_recover(
    env: dict[str, str], tmp_path: Path, spawn_daemon: Spawn
) -> None:
    """No storyd ran between the kill and the daemon's start: its warm-up read of the
    torn file writes nothing; `--recover` finishes the write, and the daemon answers
    from the whole file."""
    repo, path, before = big_unrecorded(tmp_path / "ws", 300_000)
    assert reconcile(env, repo, "--apply").returncode == 0
    after = path.read_bytes()
    assert reconcile(env, repo, "--undo").returncode == 0
    for n in range(1, 200):  # the first step that leaves a torn file
        done = reconcile(env, repo, "--apply", hook=f"kill-at-{n}")
        assert done.returncode == -9, done.stderr
        if is_torn(path.read_bytes(), before, after):
            break
        assert reconcile(env, repo, "--undo").returncode in (0, 1)
        assert path.read_bytes() == before
    torn_bytes = path.read_bytes()
    assert is_torn(torn_bytes, before, after)
    daemon = spawn_daemon([repo.path])
    query = {"op": "resume", "workspace": str(repo.path), "epic": EPIC, "story": STORY}
    daemon.request(query, timeout=30)
    assert path.read_bytes() == torn_bytes  # readers never write
    assert reconcile(env, repo, "--recover").returncode == 0
    wait_for(lambda: daemon.request(query)["ok"] is True, 30.0, "the whole file's answer")
    assert not os.path.exists(redo.record_path(path.stat()))
    document = json.loads(path.read_bytes())
    assert document["stories"][STORY]["tasks"][T2]["status"] == "DONE"  # the apply's change
    assert path.read_bytes() == after
