"""A query's read goes first (issue 43): the warm-up's pass over a file's units gives
way while a miss reads, a miss asks git about its own story file alone (never the
whole workspace's batch), the digests that let a write reuse unchanged units stay
exact, and the daemon's log (structlog) does not pull in rich at start-up.

The daemon's core runs in process (assembly.build_daemon) on real epic workspaces.
"""

from __future__ import annotations

import copy as copy_module
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from daemon_harness import wait_for
from epic_state_harness import EPIC, STATE, story_id, task_id, write_epic

from storyd.api import answers
from storyd.core import switches
from storyd.core.query import Query, from_request
from storyd.server import misses, priority
from storyd.server.assembly import build_daemon
from storyd.server.ops import Server
from storyd.server.priority import Priority
from storyd.server.reads import node_digest
from storyd.server.service import Daemon, Settings

STORIES = 40
ASKED = story_id(17)


def _write(workspace: Path) -> None:
    tasks = {story_id(n): {task_id(story_id(n), t): (
        {"status": "DONE", "commitSha": f"{t:040x}", "completedAt": "2025-01-01T00:00:00Z"}
        if t == 1 else {"status": "PENDING"}) for t in (1, 2, 3)}
        for n in range(1, STORIES + 1)}
    write_epic(workspace, EPIC, tasks=tasks)
    for n in range(1, STORIES + 1):
        (workspace / STATE).with_name(f"{story_id(n)}.md").write_text("# story\n")


@contextmanager
def _asking_elsewhere(prio: Priority) -> Iterator[None]:
    """A query asking on another thread for as long as the block lasts."""
    asking, leave = threading.Event(), threading.Event()

    def query() -> None:
        with prio.asking():
            asking.set()
            leave.wait(10)

    thread = threading.Thread(target=query)
    thread.start()
    try:
        assert asking.wait(5)
        yield
    finally:
        leave.set()
        thread.join(5)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    _write(ws)
    return Path(os.path.realpath(ws))


def _daemon(staleness: str) -> Iterator[Daemon]:
    built = build_daemon(Settings(staleness=staleness))
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    yield from _daemon("mtime")


def _direct(workspace: Path, staleness: str = "mtime") -> bytes:
    out = answers.run(Query(str(workspace), epic=EPIC, story=ASKED), staleness)
    assert out.code == 0, out.stderr
    return out.stdout


class TestWarmUpGivesWay:
    """While a miss reads, the warm-up's pass over the file's units waits for it."""

    @pytest.mark.slow
    def test_the_pass_waits_while_a_miss_reads(
        self, workspace: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        reading, release = threading.Event(), threading.Event()
        read_for = misses.read_for

        def slow_read_for(*args, **kwargs):  # type: ignore[no-untyped-def]
            reading.set()  # the miss is reading: hold it here until the test has looked
            assert release.wait(20)
            return read_for(*args, **kwargs)

        monkeypatch.setattr(misses, "read_for", slow_read_for)
        ask = Query(str(workspace), epic=EPIC, story=ASKED, detail=True)
        asked = daemon.executor.submit(daemon.read_answer, str(workspace), ask,
                                       time.monotonic_ns())
        assert reading.wait(10)
        daemon.start([str(workspace)])
        prio = daemon.engine.reads.priority
        # the warm-up reached the file's units and waits: it gave way, installed nothing
        wait_for(lambda: prio.gave_way > 0, 10.0, "the warm-up giving way")
        ws = daemon.engine.workspaces[str(workspace)]
        assert STATE not in ws.files
        release.set()
        assert asked.result(timeout=10).line == _direct(workspace)
        wait_for(lambda: daemon.warm.done, 20.0, "the warm-up")
        assert STATE in ws.files  # and once the miss had its answer, the pass went on

    def test_a_pass_publishes_its_events_giving_way_between_them(self, workspace: Path) -> None:
        """A warm-up's detectors change every unit's findings: its 10,000 events took
        half a second after the install, in which a miss waited behind them."""
        from storyd.server.engine import Engine

        engine = Engine(answers.Options(staleness="mtime"))
        ws = engine.add_workspace(str(workspace))
        engine.scan(ws)
        prio = engine.reads.priority
        seen: list[object] = []
        asking, leave = threading.Event(), threading.Event()

        def query() -> None:
            with prio.asking():
                asking.set()
                leave.wait(10)

        def sink(event: object, _line: bytes) -> None:
            seen.append(event)
            if len(seen) == 1:  # a query begins to read while the pass publishes
                threading.Thread(target=query).start()
                assert asking.wait(5)

        engine.log.sinks.append(sink)
        stories = {story_id(n): {task_id(story_id(n), 1): {"status": "PENDING"}}
                   for n in range(1, STORIES + 1)}
        write_epic(workspace, EPIC, tasks=stories)  # every unit changes
        before = prio.gave_way
        refresh = threading.Thread(target=engine.touch, args=(ws, STATE))
        refresh.start()
        try:
            wait_for(lambda: prio.gave_way > before, 10.0, "the pass giving way")
            assert len(seen) == 1  # the next event waits for the query
        finally:
            leave.set()
            refresh.join(10)
        assert len(seen) == STORIES

    def test_a_pass_pauses_for_a_thread_waiting_on_the_interpreter_lock(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every PAUSE_EVERY units a pass lets the interpreter lock go for PAUSE: its
        units' fast system calls alone never hand it to a thread waiting for it (the
        event loop held 100-400 ms during a warm-up, priority.py); a query's own read
        never pauses."""
        prio = Priority()
        slept: list[float] = []
        monkeypatch.setattr(priority.time, "sleep", slept.append)
        for _ in range(priority.PAUSE_EVERY * 3):
            prio.give_way()
        assert slept == [priority.PAUSE] * 3
        with prio.asking():
            for _ in range(priority.PAUSE_EVERY * 2):
                prio.give_way()
        assert slept == [priority.PAUSE] * 3

    def test_a_query_never_waits_on_itself(self) -> None:
        prio = Priority()
        with prio.asking():
            began = time.monotonic()
            prio.give_way()  # a miss's own read (read_now reuses units) must not wait
            assert time.monotonic() - began < priority.MAX_WAIT / 2
        assert prio.gave_way == 0

    def test_a_query_waiting_for_the_files_lock_does_not_hold_the_pass(self) -> None:
        """The pass holds the file's lock (a whole read, giving way between units) and
        a torn file's miss needs it: the pass must not give way to the miss that waits
        on it (before `waiting`, every such miss cost the pass MAX_WAIT)."""
        from storyd.core.pipeline import Options
        from storyd.server.reads import Reads

        reads = Reads(Options(1.0, "mtime", 1 << 20), None, lambda _ws: True)
        prio = reads.priority
        asked, got = threading.Event(), threading.Event()

        def miss() -> None:
            with prio.asking():
                asked.set()
                with reads._locked("/ws", "state.json"):  # blocks: the pass holds it
                    got.set()
                assert prio.asking_now == 1  # asking again once it holds the lock

        lock = reads.file_lock("/ws", "state.json")
        with lock:  # the pass's whole read
            thread = threading.Thread(target=miss)
            thread.start()
            assert asked.wait(5)
            wait_for(lambda: prio.asking_now == 0, 5.0, "the miss waiting as not asking")
            began = time.monotonic()
            prio.give_way()  # between two units of the pass
            assert time.monotonic() - began < priority.MAX_WAIT / 2
            assert prio.gave_way == 0
        thread.join(5)
        assert got.is_set() and prio.asking_now == 0

    def test_a_sync_a_query_waits_on_is_not_held_by_a_miss(
        self, workspace: Path, daemon: Daemon
    ) -> None:
        """The refresher's sync (a cached answer whose file changed waits on it) reads as
        a query, and the pass before it on the refresher's thread (the watch's read of
        the same write) stops giving way: a miss in flight holds neither (before: the
        sync came MAX_WAIT late, 1 s)."""
        daemon.start([str(workspace)])
        wait_for(lambda: daemon.warm.done, 30.0, "the warm-up")
        with _asking_elsewhere(daemon.engine.reads.priority):  # a miss reading meanwhile
            _write(workspace)  # the same bytes again: a new signature, read again by sync
            ws = daemon.engine.workspaces[str(workspace)]
            before = ws.files[STATE]
            began = time.monotonic()
            daemon.refresher.sync(str(workspace), [STATE]).result(timeout=10)
            assert time.monotonic() - began < priority.MAX_WAIT / 2
            assert ws.files[STATE] is not before  # read again, not held behind the miss

    def test_a_pass_waiting_goes_on_once_a_query_awaits_its_end(self) -> None:
        prio = Priority()
        passed = threading.Event()

        def pass_() -> None:
            prio.give_way()  # waits: a miss asks
            passed.set()

        with prio.asking():  # the miss, on this thread
            thread = threading.Thread(target=pass_)
            thread.start()
            wait_for(lambda: prio.gave_way == 1, 5.0, "the pass giving way")
            began = time.monotonic()
            prio.awaited(+1)  # a sync is queued behind the pass
            assert passed.wait(priority.MAX_WAIT / 2)
            assert time.monotonic() - began < priority.MAX_WAIT / 2
            prio.give_way()  # and the pass's next units do not wait either
            prio.awaited(-1)
        thread.join(5)

    def test_the_wait_is_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(priority, "MAX_WAIT", 0.02)
        prio = Priority()
        with _asking_elsewhere(prio):  # a query that never ends (it waits on the pass)
            began = time.monotonic()
            prio.give_way()
            waited = time.monotonic() - began
            assert 0.015 <= waited < 5 and prio.gave_way == 1
            began = time.monotonic()
            for _ in range(100):  # the rest of the pass: the same query is not waited for
                prio.give_way()  # again (before: 100 units x the bound, a torn file's
            assert time.monotonic() - began < 0.015  # miss stuck behind them for minutes)
            assert prio.gave_way == 1
        prio.give_way()  # nobody asks: no wait
        assert prio.gave_way == 1


def _git(workspace: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
                   cwd=workspace, check=True, capture_output=True)


class TestMissAsksGitAlone:
    """A miss in git mode asks git about its story file, not the workspace's batch."""

    @pytest.mark.slow
    def test_miss_does_not_prime_the_batch(self, workspace: Path) -> None:
        _git(workspace, "init", "-q")
        _git(workspace, "add", "-A")
        _git(workspace, "commit", "-q", "-m", "stories")
        for built in _daemon("git"):
            built.start([])  # nothing watched: the query is a miss
            assert switches.CONFIG.git_batching
            ask = Query(str(workspace), epic=EPIC, story=ASKED)
            got = built.read_answer(str(workspace), ask, time.monotonic_ns())
            # before: the miss ran the whole workspace's `git status` + `git log` walk
            assert str(workspace) not in switches.CONFIG.git_primed
            assert got.line == _direct(workspace, "git")


class TestDigest:
    """A node's digest changes with any change a parser can tell apart."""

    @pytest.mark.parametrize(("one", "other"), [
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1}, {"a": True}),
        ({"a": None}, {"a": float("inf")}),  # orjson writes both as null
        ({"a": None}, {"a": float("nan")}),
        ({"a": 2**64}, {"a": float(2**64)}),  # past 64 bits: orjson refuses
        ({"a": "\ud800"}, {"a": "\ufffd"}),  # a lone surrogate: orjson refuses
        ({"a": "x", "b": "y"}, {"b": "y", "a": "x"}),  # the order is the file's
        ({"tasks": {"T1": {"status": "DONE"}}}, {"tasks": {"T1": {"status": "DONE "}}}),
        ({"a": [1, 2]}, {"a": [2, 1]}),
    ])
    def test_different_nodes_differ(self, one: object, other: object) -> None:
        assert node_digest(one) != node_digest(other)

    def test_equal_nodes_agree(self) -> None:
        big = {"tasks": {f"T{n}": {"status": "DONE"} for n in range(2000)}}  # sliced
        for node in ({"a": 1, "b": [None, "null"]}, {"a": 2**70}, big):
            copy = copy_module.deepcopy(node)  # a fresh object, equal
            assert copy is not node and node_digest(copy) == node_digest(node)


def test_daemon_log_does_not_import_rich() -> None:
    code = ("import sys; import storyd.server.assembly, storyd.server.service; "
            "from storyd.core import log; log.configure(); log.get('t').info('x', n=1); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('rich', 'better_exceptions')), 'structlog' in sys.modules, "
            "sys.modules.get('rich', 0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    # before: structlog.dev imported rich, ~110 ms; the marker is gone after the import
    assert out.stdout.strip() == b"[] True 0", out.stdout
    assert b'"event":"x"' in out.stderr and b'"n":1' in out.stderr, out.stderr


def test_an_unread_workspace_is_a_miss_without_touching_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a workspace has not been read (the warm-up under way), a query is a miss
    at once: its epic's file is found on disk by the miss, on the pool, where the
    background gives way, not on the event loop, where every system call waited for the
    interpreter lock behind the warm-up's build (a listdir held an answer 155 ms)."""
    state = write_epic(tmp_path, EPIC,
                       tasks={story_id(1): {task_id(story_id(1), 1): {"status": "DONE"}}})
    past = time.time() - 60  # not racy: served by stat where nothing watches (macOS)
    os.utime(state, (past, past))
    daemon = build_daemon(Settings(staleness="mtime", verify_interval=3600.0))
    daemon.start([])  # no workspace watched: the query's is read by nothing but the test
    try:
        server = Server(daemon)
        query = from_request({"op": "resume", "workspace": str(tmp_path), "epic": EPIC,
                              "story": story_id(1)}, str(tmp_path))
        listed: list[str] = []
        real = os.listdir

        def listdir(path: str) -> list[str]:
            listed.append(path)
            return real(path)

        monkeypatch.setattr(os, "listdir", listdir)
        assert server._hit(str(tmp_path), query) is None
        assert listed == []
        monkeypatch.setattr(os, "listdir", real)
        ws = daemon.engine.add_workspace(str(tmp_path))
        # read as a watch reads it (checked against git): now the cache answers
        daemon.refresher.against_git(ws, partial(daemon.engine.scan, ws))
        monkeypatch.setattr(os, "listdir", listdir)
        hit = server._hit(str(tmp_path), query)
        assert hit is not None and not isinstance(hit, Exception) and listed == []
    finally:
        daemon.stop()
