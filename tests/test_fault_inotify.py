"""Items 4 and 10 of issue 24: the watches cost nothing when idle, and run out gracefully.

Item 4: with 8,000 or more folders under a format root, or a format root that is a
symlink out of the workspace, the idle daemon of 467383b spun at a whole core for ever:
its watches took open/close-nowrite events, so every rebuild after an inotify overflow
(os.walk opens each folder) made the next overflow; and watchdog's plain-text
"Inotify queue overflowed" lines broke the JSON log.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, wait_for
from epic_state_harness import STORY, write_epic

Spawn = Callable[..., DaemonProcess]
FOLDERS = 9000
WINDOW = 3.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_share(daemon: DaemonProcess, window: float = WINDOW) -> float:
    """The share of one core the daemon used over `window` seconds of doing nothing."""
    before, started = cpu_seconds(daemon.pid), time.monotonic()
    deadline = started + window
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))  # measuring a window: the wait is the measurement
    return (cpu_seconds(daemon.pid) - before) / (time.monotonic() - started)


def many_folders(root: Path, count: int = FOLDERS) -> None:
    for n in range(count):
        (root / f"d{n // 100:03d}" / f"e{n % 100:02d}").mkdir(parents=True, exist_ok=True)


@pytest.mark.slow
def test_many_folders_under_a_format_root_cost_no_cpu_when_idle(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ws = tmp_path / "ws"
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "pending"}}}})
    many_folders(ws / "plans" / "deep")
    daemon = spawn_daemon([ws])
    share = idle_share(daemon)
    assert share < 0.2, f"idle daemon used {share:.0%} of a core"
    assert "Inotify queue overflowed" not in daemon.log_text()
    daemon.log_events()  # every line is JSON
    daemon.stop()


@pytest.mark.slow
def test_a_format_root_linked_out_of_the_workspace_is_not_watched(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    outside = tmp_path / "outside"
    many_folders(outside)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "plans").symlink_to(outside, target_is_directory=True)
    daemon = spawn_daemon([ws])
    share = idle_share(daemon)
    assert share < 0.2, f"idle daemon used {share:.0%} of a core"
    stats = daemon.stats()
    assert int(stats["watchedDirs"]) < 50, stats  # type: ignore[call-overload]
    line = daemon.wait_log("root_outside_workspace")
    assert line["root"] == "plans", line
    daemon.log_events()
    daemon.stop()


def test_an_overflow_is_one_json_line_and_one_rescan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """watchdog's own overflow warning (the very logger call it makes) becomes one
    `inotify_overflow` line and one rescan of each workspace, never plain text."""
    import logging
    import threading

    from storyd.server.assembly import build_daemon
    from storyd.server.service import Settings

    workspace = tmp_path / "ws"
    write_epic(workspace, "0049", tasks={STORY: {"T1": {"status": "pending"}}})
    daemon = build_daemon(Settings(staleness="mtime", verify_interval=3600.0))
    scans: list[str] = []
    done = threading.Event()
    before = daemon.refresher.before_scan

    def spy(path: str) -> None:
        scans.append(path)
        done.set()
        before(path)

    daemon.refresher.before_scan = spy
    daemon.start([str(workspace)])
    try:
        wait_for(lambda: daemon.warm.done, 10.0, "the warm-up")
        capsys.readouterr()
        source = logging.getLogger("watchdog.observers.inotify_c")
        for _ in range(5):
            source.warning("Inotify queue overflowed; filesystem events were lost")
        assert done.wait(5.0), "no rescan after the overflow"
        out, err = capsys.readouterr()
    finally:
        daemon.stop()
    assert "Inotify queue overflowed" not in out + err
    assert (out + err).count('"inotify_overflow"') + (out + err).count("inotify_overflow ") == 1
    assert 1 <= len(scans) <= 5


# -- item 10: inotify limits --------------------------------------------------------------

INOTIFY = Path("/proc/sys/fs/inotify")


def kernel_watch_count(pid: int) -> int:
    """The inotify watches a process holds (the kernel's count)."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    total += sum(1 for line in info if line.startswith("inotify wd:"))
    return total


@contextlib.contextmanager
def lowered(name: str, value: int) -> Iterator[Callable[[], None]]:
    """fs.inotify.<name> set to `value` until the yielded `restore()` (or the end).

    Every process of this user shares the limit: callers keep the window short, and
    the original value is put back whatever happens. Skips where it cannot be written.
    """
    path = INOTIFY / name
    try:
        original = path.read_text(encoding="ascii")
        path.write_text(f"{value}\n", encoding="ascii")
    except OSError as exc:
        pytest.skip(f"cannot lower {path} here (needs root on the host's namespace): {exc}")
    restored = False

    def restore() -> None:
        nonlocal restored
        if not restored:
            path.write_text(original, encoding="ascii")
            restored = True

    try:
        yield restore
    finally:
        restore()


def in_use() -> tuple[int, int]:
    from storyd.cli.commands.doctor import _inotify_in_use

    return _inotify_in_use()


@pytest.mark.slow
def test_watches_exhausted_are_counted_said_once_and_polled(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ws = tmp_path / "ws"
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "pending"}}}})
    many_folders(ws / "plans" / "deep", 300)
    _, watches = in_use()
    with lowered("max_user_watches", watches + 40) as restore:
        daemon = spawn_daemon([ws], args=["--verify-interval", "0.2"])
        restore()  # the daemon met the limit while warming: no one else needs to
    assert daemon.running()
    line = daemon.wait_log("inotify_limit", timeout=10)
    stats = daemon.stats()
    watched = int(stats["watchedDirs"])  # type: ignore[call-overload]
    assert watched == kernel_watch_count(daemon.pid), (watched, line)
    assert watched < 300, stats
    assert line["unwatched"] == line["wanted"] - line["watched"] > 0, line
    write_epic(ws, "0050", {"story-0050-0001": {"tasks": {"T1": {"status": "pending"}}}})
    wait_for(lambda: any(u.get("epic") == "0050" or "0050" in str(u.get("unit"))
                         for u in daemon.units(ws)), 10.0, "the new epic, watched or polled")
    assert sum(1 for e in daemon.log_events() if e.get("event") == "inotify_limit") == 1
    daemon.stop()


@pytest.mark.slow
def test_instances_exhausted_fall_back_to_polling_instead_of_dying(
    tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ws = tmp_path / "ws"
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "pending"}}}})
    from storyd.server.changes import Changes

    held = Changes()  # an instance of this user's for the limit to sit at, whatever ran before
    try:
        assert held.available and in_use()[0] >= 1
        # 1: at what this user holds (forked processes share instances, so /proc's count
        # is not the kernel's): no new instance for anyone until restore()
        with lowered("max_user_instances", 1) as restore:
            daemon = spawn_daemon([ws], args=["--verify-interval", "0.2"])
            restore()
    finally:
        held.close()
    assert daemon.running()
    failed = daemon.wait_log("watch_failed", timeout=10)
    assert "limit" in str(failed["error"]), failed
    assert int(daemon.stats()["watchedDirs"]) == 0  # type: ignore[call-overload]
    request = {"op": "resume", "workspace": str(ws), "epic": "0049", "story": STORY}
    first = daemon.request(request)
    write_epic(ws, "0049", {STORY: {"tasks": {"T1": {"status": "done", "commitSha": "abc1"},
                                              "T2": {"status": "pending"}}}})
    wait_for(lambda: daemon.request(request)["envelope"] != first["envelope"], 10.0,
             "the change, seen by polling")
    assert "Traceback" not in daemon.log_text()
    daemon.stop()
