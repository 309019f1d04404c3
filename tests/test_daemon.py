"""The daemon as a process: updates, torn writes, the socket's life, reload, peers, load."""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
from cli_harness import run_storyd_cli
from daemon_harness import (
    DaemonProcess,
    Line,
    assert_same_output,
    resume_via_daemon,
    resume_without_daemon,
    wait_for,
    write_config,
)
from epic_state_harness import atomic_write, epic_relpath, write_epic
from locks_harness import exclusively_locked
from users_harness import python_for_others

pytestmark = pytest.mark.slow

Spawn = Callable[..., DaemonProcess]
S = "story-0049-0013"
S_DONE = "story-0049-0014"
REL = epic_relpath("0049")
ARGS = ("--story-id", S, "--epic-id", "0049")
V1 = {S: {"tasks": {"T1": {"status": "done", "commitSha": "aaa1"}, "T2": {"status": "pending"}}},
      S_DONE: {"tasks": {"T1": {"status": "done", "commitSha": "bbb1"}}}}
V2 = {S: {"tasks": {"T1": {"status": "done", "commitSha": "aaa1"},
                    "T2": {"status": "done", "commitSha": "aaa2"},
                    "T3": {"status": "pending"}}},
      S_DONE: {"tasks": {"T1": {"status": "done", "commitSha": "bbb1"}}}}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with epic 0049: one story in progress, one all done."""
    path = tmp_path / "ws"
    path.mkdir()
    write_epic(path, "0049", V1)
    return path


def resume_request(workspace: Path, story: str = S, **extra: object) -> dict[str, object]:
    return {"op": "resume", "workspace": str(workspace), "epic": "0049", "story": story, **extra}


def codes(answer: dict[str, object]) -> set[str]:
    """`detector/code` of every finding in an answer."""
    return {f"{f['detector']}/{f['code']}" for f in answer["findings"]}  # type: ignore[union-attr]


class TestUpdates:
    """What a writer does to the files shows up through the socket, fast and safely."""

    def test_atomic_rename_visible_at_once_then_cached(self, spawn_daemon: Spawn, ws: Path) -> None:
        proc = spawn_daemon([ws])
        first = proc.request(resume_request(ws))
        assert first["source"] == "cache"
        assert first["envelope"]["resumePoint"] == "phase-2-task-2"  # type: ignore[index]
        atomic_write(ws / REL, orjson.dumps({"stories": V2}))
        # read your writes: the very next query already has the new answer
        at_once = proc.request(resume_request(ws))
        assert at_once["envelope"]["resumePoint"] == "phase-2-task-3"  # type: ignore[index]
        started = time.monotonic()
        answer = wait_for(
            lambda: (a := proc.request(resume_request(ws)))["source"] == "cache" and a,
            timeout=5, message="the renamed file's answer in the cache")
        latency = time.monotonic() - started
        assert latency < 1.0, f"update took {latency:.3f} s to reach the cache"
        assert answer["envelope"] == at_once["envelope"]
        assert answer["generation"] > first["generation"]  # type: ignore[operator]
        assert_same_output(resume_via_daemon(proc, ws, *ARGS),
                           resume_without_daemon(proc.env, ws, *ARGS))

    def test_torn_write_keeps_last_good_answer_until_repaired(self, spawn_daemon: Spawn,
                                                             ws: Path) -> None:
        proc = spawn_daemon([ws])
        good = proc.request(resume_request(ws))
        assert good["ok"] is True and "engine/state-unreadable" not in codes(good)
        good_cli = resume_via_daemon(proc, ws, *ARGS)
        whole = orjson.dumps({"stories": V2})
        (ws / REL).write_bytes(whole[: len(whole) // 2])  # in place, not atomic: torn

        at_once = proc.request(resume_request(ws))  # read your writes: torn is seen at once
        assert at_once["envelope"] == good["envelope"]
        assert "engine/state-unreadable" in codes(at_once)
        torn = wait_for(lambda: (a := proc.request(resume_request(ws)))
                        and "engine/state-unreadable" in codes(a) and a["source"] == "cache" and a,
                        message="the state-unreadable finding in the cache")
        assert torn["ok"] is True
        assert torn["envelope"] == good["envelope"]
        message = next(f["message"] for f in torn["findings"]  # type: ignore[union-attr]
                       if f["code"] == "state-unreadable")
        assert "unreadable since" in message and REL in message
        assert proc.stats()["unreadable"] >= 1
        # still the last good one
        assert resume_via_daemon(proc, ws, *ARGS).stdout == good_cli.stdout
        # the file itself is broken
        assert resume_without_daemon(proc.env, ws, *ARGS).returncode == 65

        atomic_write(ws / REL, whole)
        fixed = wait_for(lambda: (a := proc.request(resume_request(ws)))
                         and "engine/state-unreadable" not in codes(a) and a,
                         message="the finding to clear")
        assert fixed["envelope"]["resumePoint"] == "phase-2-task-3"  # type: ignore[index]
        assert_same_output(resume_via_daemon(proc, ws, *ARGS),
                           resume_without_daemon(proc.env, ws, *ARGS))

        (ws / REL).unlink()
        wait_for(lambda: not proc.units(ws), message="the deleted file's units to go")
        gone = proc.request(resume_request(ws))
        assert gone["ok"] is False
        assert gone["error"]["code"] == 1  # type: ignore[index]
        answered = resume_via_daemon(proc, ws, *ARGS)
        expected = resume_without_daemon(proc.env, ws, *ARGS)
        assert expected.returncode == 1
        assert_same_output(answered, expected)
        assert gone["error"]["message"] == expected.stderr.decode().strip()  # type: ignore[index]


    def test_no_false_story_not_in_state_while_a_workspace_is_scanned(
            self, spawn_daemon: Spawn, tmp_path: Path) -> None:
        big = tmp_path / "big"
        stories = {f"story-0049-{n:04d}": {"tasks": {"T1": {"status": "done", "commitSha": "c"},
                                                     "T2": {"status": "pending"}}}
                   for n in range(1, 301)}
        write_epic(big, "0049", stories)
        last = "story-0049-0300"
        proc = spawn_daemon()
        answers = []
        with proc.connect() as watcher, proc.connect() as asker:
            watcher.send({"op": "watch", "workspace": str(big)})  # the scan starts now
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                answer = asker.request(resume_request(big, last))
                answers.append(answer)
                if answer.get("source") == "cache":
                    break
            assert watcher.read()["units"] == 300
        assert answers[-1].get("source") == "cache"
        wrong = [a for a in answers if not a["ok"]]
        assert not wrong, (
            f"{len(wrong)} of {len(answers)} answers said {wrong[0]['error']} for a story that "
            "is in the file, while the daemon was scanning it")


class TestSocketLife:
    """Binding, permissions, stale sockets, single instance, shutdown."""

    def test_socket_dir_is_0700_and_socket_0600(self, spawn_daemon: Spawn, tmp_path: Path,
                                                ws: Path) -> None:
        folder = tmp_path / "run"
        folder.mkdir(mode=0o755)
        os.chmod(folder, 0o755)  # a lax folder left by someone: the daemon tightens it
        proc = spawn_daemon([ws])
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        st = os.lstat(proc.socket)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600

    def test_sigterm_removes_socket_and_logs(self, spawn_daemon: Spawn, ws: Path) -> None:
        proc = spawn_daemon([ws])
        assert proc.socket.exists()
        assert proc.stop() == 0
        assert not os.path.lexists(proc.socket)
        events = [e["event"] for e in proc.log_events()]
        assert events.index("serving") < events.index("stopping") < events.index("stopped")

    def test_sigterm_finishes_replies_in_flight(self, spawn_daemon: Spawn, tmp_path: Path,
                                                ws: Path) -> None:
        other = tmp_path / "other"
        state = write_epic(other, "0049", V1)
        write_config(tmp_path, "auto_watch = false\n")
        proc = spawn_daemon([ws])
        writer = subprocess.Popen(["flock", "-x", str(state), "sleep", "0.5"])
        try:
            wait_for(lambda: exclusively_locked(state), message="flock(1) to take the lock")
            misses = proc.stats()["misses"]
            with proc.connect(timeout=10) as conn:
                conn.send(resume_request(other, id="slow"), resume_request(ws, id="after"))
                wait_for(lambda: proc.stats()["misses"] == misses + 1,  # type: ignore[operator]
                         message="the daemon to take the slow request")
                proc.signal(signal.SIGTERM)  # while the miss still waits for the writer
                slow, after = conn.read(), conn.read()
                assert conn.read_all() == b""
        finally:
            writer.wait(10)
        assert (slow["id"], slow["source"]) == ("slow", "direct")
        assert (after["id"], after["source"]) == ("after", "cache")
        assert slow["envelope"] == after["envelope"]
        assert proc.proc is not None and proc.proc.wait(10) == 0
        assert not os.path.lexists(proc.socket)

    def test_after_kill_9_cli_falls_back_and_successor_replaces_stale_socket(
            self, spawn_daemon: Spawn, ws: Path) -> None:
        first = spawn_daemon([ws])
        old_instance = first.request({"op": "ping"})["instance"]
        first.kill()
        assert os.path.lexists(first.socket), "kill -9 leaves the socket file behind"
        with pytest.raises(ConnectionRefusedError):
            first.request({"op": "ping"})

        for args in (ARGS, ("--story-id", "story-0049-0099", "--epic-id", "49")):
            fallback = run_storyd_cli("resume", *args, env=first.env, cwd=ws)
            assert_same_output(fallback, resume_without_daemon(first.env, ws, *args))
        assert fallback.returncode == 2

        second = spawn_daemon([ws])
        ping = second.request({"op": "ping"})
        assert ping["pid"] == second.pid != first.pid
        assert ping["instance"] != old_instance
        assert_same_output(resume_via_daemon(second, ws, *ARGS),
                           resume_without_daemon(second.env, ws, *ARGS))

    def test_second_daemon_on_live_socket_is_refused(self, spawn_daemon: Spawn, ws: Path) -> None:
        first = spawn_daemon([ws])
        inode = os.stat(first.socket).st_ino
        second = spawn_daemon([ws], start=False)
        code = second.spawn().wait(15)
        assert code != 0
        text = second.log_text()
        assert "storyd serve:" in text and str(first.socket) in text
        assert "another storyd" in text or "already answers" in text
        assert "Traceback" not in text
        assert os.stat(first.socket).st_ino == inode, "the refused daemon replaced the socket"
        assert first.request({"op": "ping"})["pid"] == first.pid

    def test_a_broken_plugin_is_skipped_and_named(self, spawn_daemon: Spawn, tmp_path: Path,
                                                   ws: Path) -> None:
        plugins = tmp_path / "plugins"  # a third-party detector that fails to import
        dist = plugins / "broken_detector-1.0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-detector\n"
                                       "Version: 1.0\n", encoding="utf-8")
        (dist / "entry_points.txt").write_text(
            "[storyd.detectors]\nbroken = broken_detector:DETECTOR\n", encoding="utf-8")
        (plugins / "broken_detector.py").write_text("raise ImportError('broken on purpose')\n",
                                                    encoding="utf-8")
        proc = spawn_daemon([ws], start=False)
        proc.env["PYTHONPATH"] = str(plugins)
        proc.start()  # the rest load: the daemon serves
        text = proc.log_text()
        assert "plugin_skipped" in text and "broken on purpose" in text, text
        assert "detector plugin broken (broken_detector:DETECTOR, from broken-detector" in text
        assert "Traceback" not in text
        assert proc.request({"op": "ping"})["pid"] == proc.pid

    def test_shutdown_never_removes_a_successors_socket(self, spawn_daemon: Spawn,
                                                        ws: Path) -> None:
        proc = spawn_daemon([ws])
        moved = proc.socket.with_name("moved-away.sock")
        os.rename(proc.socket, moved)
        successor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            successor.bind(str(proc.socket))
            successor.listen(1)
            inode = os.stat(proc.socket).st_ino
            proc.stop()
            assert os.path.lexists(proc.socket), "a predecessor's shutdown removed a new socket"
            assert os.stat(proc.socket).st_ino == inode
        finally:
            successor.close()


class TestReload:
    """SIGHUP re-reads config.toml; a bad file is refused and the old one kept."""

    def test_sighup_adds_workspace_keeps_cache_and_rejects_bad_config(
            self, spawn_daemon: Spawn, tmp_path: Path, ws: Path) -> None:
        ws2 = tmp_path / "ws2"
        write_epic(ws2, "0007", {"story-0007-0001": {"tasks": {"A": {"status": "pending"}}}})
        write_config(tmp_path, f"workspaces = [{str(ws)!r}]\n")
        proc = spawn_daemon()
        before = proc.request(resume_request(ws))
        assert before["source"] == "cache"
        assert proc.units(ws2) == []

        write_config(tmp_path, f"workspaces = [{str(ws)!r}, {str(ws2)!r}]\n")
        proc.signal(signal.SIGHUP)
        proc.wait_log("reloaded")
        units = wait_for(lambda: proc.units(ws2), message="the added workspace's units")
        assert [u["unit"] for u in units] == ["story-0007-0001"]
        after = proc.request(resume_request(ws))
        assert after["source"] == "cache"
        assert after["generation"] == before["generation"], "reload rebuilt the old cache"

        write_config(tmp_path, '[limits]\nmax_workspaces = "many"\n')
        proc.signal(signal.SIGHUP)
        rejected = proc.wait_log("reload_rejected")
        assert "max_workspaces" in str(rejected["error"])
        assert proc.request({"op": "ping"})["pid"] == proc.pid
        assert sorted(proc.stats()["workspaces"]) == sorted([str(ws), str(ws2)])  # type: ignore[type-var]
        assert proc.request(resume_request(ws))["generation"] == before["generation"]
        proc.stop()


class TestLimitsAndStats:
    """Counters, the workspace cap."""

    def test_stats_counters_move(self, spawn_daemon: Spawn, tmp_path: Path, ws: Path) -> None:
        other = tmp_path / "other"
        write_epic(other, "0049", V1)
        proc = spawn_daemon([ws])
        start = proc.stats()
        assert proc.request(resume_request(ws))["source"] == "cache"
        hit = proc.stats()
        assert hit["queries"] == start["queries"] + 1  # type: ignore[operator]
        assert hit["hits"] == start["hits"] + 1  # type: ignore[operator]
        assert hit["misses"] == start["misses"]
        assert hit["requests"] > start["requests"]  # type: ignore[operator]

        miss = proc.request(resume_request(other))
        assert miss["source"] == "direct"  # its generation is the watch's, once installed
        after = proc.stats()
        assert after["misses"] == hit["misses"] + 1  # type: ignore[operator]
        assert after["queries"] == hit["queries"] + 1  # type: ignore[operator]
        final = wait_for(lambda: (f := proc.stats())["units"] == 4 == f["stories"] and f,
                         message="the auto-watched workspace's units in the cache")
        assert str(other) in final["workspaces"]  # type: ignore[operator]
        assert final["watchedDirs"] >= 2  # type: ignore[operator]
        again = proc.request(resume_request(other))
        assert again["source"] == "cache" and again["envelope"] == miss["envelope"]
        assert proc.stats()["hits"] == final["hits"] + 1  # type: ignore[operator]
        assert final["version"] == proc.request({"op": "ping"})["version"]

    def test_workspace_cap_from_config(self, spawn_daemon: Spawn, tmp_path: Path, ws: Path) -> None:
        other = tmp_path / "other"
        write_epic(other, "0049", V1)
        write_config(tmp_path, "[limits]\nmax_workspaces = 1\n")
        proc = spawn_daemon([ws])
        refused = proc.request({"op": "watch", "workspace": str(other)})
        assert refused["ok"] is False
        assert refused["error"]["code"] == 64  # type: ignore[index]
        assert "max_workspaces" in refused["error"]["message"]  # type: ignore[index]
        answer = proc.request(resume_request(other))
        assert answer["ok"] is True and answer["source"] == "direct"
        proc.wait_log("workspace_cap")
        assert proc.stats()["workspaces"] == [str(ws)]
        assert proc.request(resume_request(other))["source"] == "direct"  # still not watched


class TestLog:
    """structlog writes one JSON object per line on stderr."""

    def test_watch_and_refresh_events(self, spawn_daemon: Spawn, ws: Path) -> None:
        proc = spawn_daemon([ws])
        watch = proc.wait_log("watch", workspace=str(ws))
        assert isinstance(watch["duration_ms"], int | float) and watch["duration_ms"] >= 0
        assert watch["units"] == 2 and watch["files"] == 1
        atomic_write(ws / REL, orjson.dumps({"stories": V2}))
        refresh = proc.wait_log("refresh", workspace=str(ws), path=REL)
        assert refresh["generation"] > 0 and refresh["duration_ms"] >= 0  # type: ignore[operator]
        proc.stop()
        events = proc.log_events()  # parses every line: each must be valid JSON
        assert events and all({"event", "level", "timestamp"} <= set(e) for e in events)
        assert [e["event"] for e in events].count("watch") == 1


# -- peers and load ------------------------------------------------------------------------

_PEER = r"""
import json, os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(path)
except OSError as exc:
    print(json.dumps({"uid": os.getuid(), "connect_errno": exc.errno}))
    sys.exit(0)
data = b""
ending = "eof"
try:
    while chunk := s.recv(65536):  # the daemon speaks first: one error line, then it hangs up
        data += chunk
except ConnectionResetError:
    ending = "reset"
print(json.dumps({"uid": os.getuid(), "reply": data.decode(), "ending": ending}))
"""


class TestPeers:
    """Only the daemon's own uid may talk to it."""

    def test_other_uid_is_refused(self, spawn_daemon: Spawn, shared_dir: Path, ws: Path) -> None:
        if os.getuid() != 0:
            pytest.skip("switching to another uid needs root; these tests run as "
                        f"uid {os.getuid()}")
        proc = spawn_daemon([ws], socket_path=shared_dir / "run" / "s.sock")
        python = python_for_others()

        def as_nobody() -> dict[str, object]:
            done = subprocess.run([python, "-I", "-c", _PEER, str(proc.socket)], user=65534,
                                  group=65534, extra_groups=[], capture_output=True,
                                  timeout=20, check=False, cwd="/")
            assert done.returncode == 0, done.stderr.decode()
            return orjson.loads(done.stdout)  # type: ignore[no-any-return]

        blocked = as_nobody()  # 0700 folder, 0600 socket: the kernel refuses first
        assert blocked["uid"] == 65534
        assert blocked["connect_errno"] == errno.EACCES

        os.chmod(proc.socket.parent, 0o711)
        os.chmod(proc.socket, 0o666)  # open the door so SO_PEERCRED decides
        refused = as_nobody()
        lines = str(refused["reply"]).splitlines()
        assert len(lines) == 1, refused
        answer = orjson.loads(lines[0])
        assert answer["ok"] is False
        assert answer["error"]["code"] == 77 and answer["error"]["name"] == "EX_NOPERM"
        assert "65534" in answer["error"]["message"]
        assert proc.stats()["refusedPeers"] == 1
        assert proc.request({"op": "ping"})["pid"] == proc.pid


class TestLoad:
    """Many clients at once, and a client that never reads."""

    def test_fifty_concurrent_clients(self, spawn_daemon: Spawn, ws: Path) -> None:
        proc = spawn_daemon([ws])
        expected = {}
        for story in (S, S_DONE, "story-0049-0099"):
            done = resume_without_daemon(proc.env, ws, "--story-id", story, "--epic-id", "0049")
            expected[story] = (done.returncode, done.stdout)

        def client(n: int) -> list[tuple[str, int, bytes]]:
            seen = []
            with proc.connect(timeout=10) as line:
                for i in range(6):
                    story = (S, S_DONE, "story-0049-0099")[(n + i) % 3]
                    answer = line.request(resume_request(ws, story, id=f"{n}-{i}"))
                    assert answer["id"] == f"{n}-{i}"
                    if answer["ok"]:
                        seen.append((story, 0, orjson.dumps(answer["envelope"]) + b"\n"))
                    else:
                        seen.append((story, answer["error"]["code"], b""))  # type: ignore[index]
            return seen

        with ThreadPoolExecutor(50) as pool:
            results = [a for batch in pool.map(client, range(50)) for a in batch]
        assert len(results) == 300
        for story, code, stdout in results:
            assert (code, stdout) == expected[story], story
        assert expected["story-0049-0099"][0] == 2
        assert proc.stats()["queries"] >= 300  # type: ignore[operator]

    def test_client_that_never_reads_does_not_block_others(self, spawn_daemon: Spawn,
                                                           ws: Path) -> None:
        proc = spawn_daemon([ws])
        hog = Line(proc.socket)
        try:
            hog.sock.setblocking(False)
            burst = orjson.dumps(resume_request(ws)) + b"\n"
            burst *= 512
            sent = 0
            deadline = time.monotonic() + 20
            blocked = False
            while time.monotonic() < deadline and sent < 256 << 20:
                try:
                    sent += hog.sock.send(burst)
                except BlockingIOError:
                    blocked = True  # the daemon stopped reading from the hog
                    break
            assert blocked, f"the daemon kept reading {sent} bytes from a client that never reads"
            for _ in range(20):
                started = time.monotonic()
                assert proc.request({"op": "ping"}, timeout=2)["pid"] == proc.pid
                assert time.monotonic() - started < 1.0
            assert proc.request(resume_request(ws), timeout=2)["source"] == "cache"
        finally:
            hog.close()
        wait_for(lambda: proc.stats()["connections"] == 1, message="the hog's connection to close")
