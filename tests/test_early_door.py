"""The early door (issue 43): `storyd serve` answers from the moment its socket is bound.

In process: a real bound socket, the real EarlyAnswers over a real workspace, real
clients. What the door answers is the daemon's answer (the same envelope, findings and
next step as a running daemon's, the bytes `storyd resume` prints); what it does not
answer reaches the daemon whole, with the bytes it read; a client of another uid is
never answered by it. Then a real `storyd serve` held once its door is open (a
stand-in this file puts in the child for a slow start-up): the door answers while
the daemon is not built, the daemon answers what the door handed over once it is, with
the door's instance, and a SIGTERM meanwhile is a clean stop. And GiveWay: the start-up's
imports wait while the door works, unless the door is importing, and never past its
bound.
"""

from __future__ import annotations

import importlib
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from cli_harness import STORYD, run_storyd_cli
from daemon_harness import DaemonProcess, daemon_env, held_daemon, wait_for
from epic_state_harness import write_epic
from users_harness import python_for_others

from storyd import __version__
from storyd.config import Config
from storyd.config.values import Limits
from storyd.server import door as door_module
from storyd.server.bind import Bound, take_socket
from storyd.server.door import GIVE_WAY_MAX, LINE_WAIT, EarlyDoor, GiveWay
from storyd.server.early import Answered, EarlyAnswers
from storyd.server.lazydetect import Detectors

EPIC = "0049"
STORY = "story-0049-0002"
TASKS = {
    "story-0049-0001": {"T1": {"status": "done", "commitSha": "a" * 40}},
    STORY: {"T1": {"status": "done", "commitSha": "b" * 40}, "T2": {"status": "pending"}},
}
Adopted = list[tuple[socket.socket, bytes]]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    write_epic(path, EPIC, tasks=TASKS)
    return path


class Door:
    """A door open on a socket of its own, and what it handed over once closed."""

    def __init__(self, root: Path) -> None:
        folder = root / "door"
        folder.mkdir(mode=0o700)
        self.bound: Bound = take_socket(str(folder / "s.sock"))
        limits = Limits()
        self.early = EarlyAnswers(limits, "git", Detectors(Config(), "git"))
        self.early.prepare()
        self.door = EarlyDoor(self.bound.sock, self.early, limits.max_line_bytes).open()
        self.adopted: Adopted = []

    @property
    def path(self) -> str:
        return self.bound.path

    def close(self) -> Adopted:
        """Close the door; the connections it handed over, as the daemon would get them."""
        self.door.close(lambda sock, data: self.adopted.append((sock, data)))
        assert self.door.join(5), "the door's thread did not end"
        return self.adopted


@pytest.fixture
def door(tmp_path: Path) -> Iterator[Door]:
    opened = Door(tmp_path)
    try:
        yield opened
    finally:
        opened.close()
        for sock, _data in opened.adopted:
            sock.close()
        opened.early.detectors.close()
        opened.bound.close()


def connect(path: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    client.connect(path)
    return client


def read_line(client: socket.socket) -> bytes:
    """What arrives up to a newline, or until the connection closes."""
    got = b""
    while not got.endswith(b"\n"):
        chunk = client.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def ask(path: str, line: bytes) -> bytes:
    """One line sent on a fresh connection; its answer line."""
    with connect(path) as client:
        client.sendall(line)
        return read_line(client)


def silent(client: socket.socket, timeout: float) -> bool:
    """Whether nothing at all arrives on `client` for `timeout` seconds."""
    readable, _, _ = select.select([client], [], [], timeout)
    return not readable


def resume_line(workspace: Path, story: str = STORY) -> bytes:
    return orjson.dumps({"op": "resume", "workspace": str(workspace), "epic": EPIC,
                         "story": story, "id": 7}) + b"\n"


class TestWhatTheDoorAnswers:
    def test_a_resume_is_the_running_daemons_answer(
            self, door: Door, ws: Path, spawn_daemon: Callable[..., DaemonProcess]) -> None:
        early = orjson.loads(ask(door.path, resume_line(ws)))
        assert (early["ok"], early["source"], early["generation"], early["id"]) == (
            True, "direct", None, 7)
        assert early["clock"] == f"{door.early.instance}:0"
        daemon = spawn_daemon([ws])
        served = daemon.request(orjson.loads(resume_line(ws)))
        for key in ("envelope", "findings", "next"):
            assert early[key] == served[key], key
        assert early["findings"], "the detectors ran: the shas are in no repository"

    def test_a_resume_cli_is_what_storyd_resume_prints_and_ends_the_connection(
            self, door: Door, ws: Path, tmp_path: Path) -> None:
        argv = ["--story-id", STORY, "--epic-id", EPIC]
        line = orjson.dumps({"op": "resume-cli", "argv": argv, "cwd": str(ws)}) + b"\n"
        with connect(door.path) as client:
            client.sendall(line)
            got = b""
            while chunk := client.recv(65536):  # the door closes it after the frame
                got += chunk
        direct = run_storyd_cli("resume", "--direct", *argv,
                                env=daemon_env(tmp_path, tmp_path / "none.sock"), cwd=ws)
        assert direct.returncode == 0, direct.stderr
        assert got == direct.stdout + f"=0 {__version__}\n".encode()

    def test_a_ping_carries_the_instance_the_daemon_takes_over(self, door: Door) -> None:
        got = orjson.loads(ask(door.path, b'{"op":"ping"}\n'))
        assert (got["ok"], got["pid"], got["instance"]) == (True, os.getpid(),
                                                            door.early.instance)
        assert got["clock"] == f"{door.early.instance}:0"
        wait_for(lambda: door.door.answered == 1, message="the reply counted")

    def test_what_it_answered_is_handed_to_the_daemon_with_the_bytes_it_read(
            self, door: Door, ws: Path) -> None:
        began = time.time_ns()
        ask(door.path, resume_line(ws))
        ask(door.path, resume_line(ws, "story-0049-0001"))
        took: list[Answered] = []
        door.early.hand_over(took.append)
        (got,) = took  # one state file, asked twice
        state = ws / "plans" / f"epic-{EPIC}" / "execution-state.json"
        st = os.stat(state)
        assert (got.workspace, got.relpath, got.count) == (
            str(ws.resolve()), f"plans/epic-{EPIC}/execution-state.json", 2)
        assert got.data == state.read_bytes()
        assert got.sig == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        assert got.read_ns >= began
        ask(door.path, resume_line(ws))  # after the hand-over: straight to the daemon
        wait_for(lambda: len(took) == 2, message="the later answer handed too")


class TestWhatGoesToTheDaemon:
    @pytest.mark.parametrize("line", [
        b'{"op":"stats"}\n',  # an op the door does not know
        b'{"op":"resume"\n',  # not JSON
        b'{"op":"ping"}\n{"op":"ping"}\n',  # two lines at once: the daemon keeps the order
        b'{"op":"resume-cli","argv":["--story-id","' + STORY.encode() + b'","--epic-id","'
        + EPIC.encode() + b'","--detail"],"cwd":"/"}\n',  # --detail reads more than a miss
        b'{"op":"ping","id":[1]}\n',  # a bad id: the daemon names it
    ], ids=["other-op", "malformed", "two-lines", "detail", "bad-id"])
    def test_a_request_it_does_not_answer_is_handed_over_with_its_bytes(
            self, door: Door, line: bytes) -> None:
        with connect(door.path) as client:
            client.sendall(line)
            wait_for(lambda: door.door.handed == 1, message="the connection handed over")
            assert silent(client, 0.05)
            (adopted, data), = door.close()
            assert data == line
            adopted.sendall(b"the daemon's answer\n")
            assert client.recv(100) == b"the daemon's answer\n"

    @pytest.mark.parametrize("story", ["story-0049-0099", "story-0049-0001x"])
    def test_an_error_is_the_daemons_to_answer(self, door: Door, ws: Path, story: str) -> None:
        line = resume_line(ws, story)
        with connect(door.path) as client:
            client.sendall(line)
            wait_for(lambda: door.door.handed == 1, message="the connection handed over")
            assert door.close()[0][1] == line

    def test_a_workspace_that_is_not_a_folder_is_handed_over(
            self, door: Door, tmp_path: Path) -> None:
        line = resume_line(tmp_path / "gone")
        with connect(door.path) as client:
            client.sendall(line)
            wait_for(lambda: door.door.handed == 1, message="the connection handed over")
            assert door.close()[0][1] == line

    def test_a_line_not_whole_in_time_is_handed_over_as_read_and_others_go_on(
            self, door: Door) -> None:
        with connect(door.path) as slow:
            slow.sendall(b'{"op":"pi')
            wait_for(lambda: door.door.handed == 1, timeout=LINE_WAIT + 5,
                     message="the slow line handed over")
            assert orjson.loads(ask(door.path, b'{"op":"ping"}\n'))["ok"] is True
            handed = {data for _sock, data in door.close()}
            assert handed <= {b'{"op":"pi', b""}  # the answered ping's connection: b""
            assert b'{"op":"pi' in handed

    def test_a_connection_answered_stays_open_for_the_daemon(self, door: Door) -> None:
        with connect(door.path) as client:
            client.sendall(b'{"op":"ping"}\n')
            assert orjson.loads(client.recv(65536))["ok"] is True
            wait_for(lambda: door.door.handed == 1, message="the connection handed over")
            (adopted, data), = door.close()
            assert data == b""
            client.sendall(b'{"op":"stats"}\n')  # the next request is the daemon's to read
            assert adopted.recv(100) == b'{"op":"stats"}\n'

    def test_after_close_the_door_answers_nothing_and_gives_back_what_it_changed(
            self, tmp_path: Path) -> None:
        switch = sys.getswitchinterval()
        handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        opened = Door(tmp_path)
        try:
            assert sys.getswitchinterval() < switch
            assert sys.meta_path[0] is opened.door._give_way
            assert signal.getsignal(signal.SIGTERM) != handlers[signal.SIGTERM]
            opened.close()
            assert sys.getswitchinterval() == switch
            assert all(not isinstance(f, GiveWay) for f in sys.meta_path)
            assert {s: signal.getsignal(s) for s in handlers} == handlers
            with connect(opened.path) as client:  # it waits in the backlog for a daemon
                client.sendall(b'{"op":"ping"}\n')
                assert silent(client, 0.2)
            assert opened.door.answered == 0
        finally:
            opened.early.detectors.close()
            opened.bound.close()

    def test_a_signal_while_open_is_kept_for_the_daemon(self, door: Door) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the door's handler, not the default's death
        wait_for(door.door.stop_asked.is_set, message="SIGTERM kept")
        assert door.door.stop_asked.is_set() and door.door.answered == 0

    def test_a_line_longer_than_the_daemons_bound_is_handed_over(self, door: Door) -> None:
        door.door.max_line = 64  # limits.max_line_bytes: the daemon refuses such a line
        line = b'{"op":"ping","id":"' + b"x" * 200 + b'"}\n'
        with connect(door.path) as client:
            client.sendall(line)
            wait_for(lambda: door.door.handed == 1, message="the long line handed over")
            assert silent(client, 0.05) and door.door.answered == 0
            (_sock, data), = door.close()
            assert len(data) > 64 and line.startswith(data)

    def test_a_line_read_as_the_door_closes_goes_to_the_daemon(
            self, door: Door, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(door_module, "LINE_WAIT", 30.0)  # the close comes mid-read
        adopted: Adopted = []
        with connect(door.path) as client:
            client.sendall(b'{"op":"pi')
            wait_for(lambda: not door.door._give_way.idle.is_set(), message="door reading")
            door.door.close(lambda sock, data: adopted.append((sock, data)))
            client.sendall(b'ng"}\n')  # whole now, and the daemon serves: its to answer
            wait_for(lambda: len(adopted) == 1, message="the connection handed over")
            assert adopted[0][1] == b'{"op":"ping"}\n'
            assert silent(client, 0.05) and door.door.answered == 0
            assert door.door.join(5)
            adopted[0][0].close()

    def test_past_max_waiting_the_backlog_holds_connections_for_the_daemon(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(door_module, "MAX_WAITING", 2)
        opened = Door(tmp_path)
        clients = [connect(opened.path) for _ in range(3)]
        try:
            for client in clients:
                client.sendall(b'{"op":"stats"}\n')
            assert opened.door.join(10), "the door went on accepting past its bound"
            assert opened.door.handed == 2
            opened.bound.sock.settimeout(5)
            third, _ = opened.bound.sock.accept()  # still in the listen backlog, unread
            with third:
                assert third.recv(100) == b'{"op":"stats"}\n'
            assert len(opened.close()) == 2
        finally:
            for sock in [*clients, *(sock for sock, _ in opened.adopted)]:
                sock.close()
            opened.early.detectors.close()
            opened.bound.close()

    def test_a_listener_past_descriptor_1023_is_served(self, door: Door) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        high = 1500
        if hard != resource.RLIM_INFINITY and hard <= high:
            pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is under {high + 1}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, high + 1), hard))
        try:
            listener = socket.socket(fileno=os.dup2(door.bound.sock.fileno(), high))
            opened = EarlyDoor(listener, door.early, Limits().max_line_bytes)
            door.close()  # the fixture's door: the high descriptor's answers the ping
            opened.open()
            try:
                got = orjson.loads(ask(door.path, b'{"op":"ping"}\n'))
                assert got["ok"] is True
                wait_for(lambda: opened.answered == 1, message="answered on the high one")
            finally:
                opened.close(lambda sock, _data: sock.close())
                assert opened.join(5)
                listener.close()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


_SEND_PING = r"""
import socket, sys
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.settimeout(10)
client.connect(sys.argv[1])
client.sendall(b'{"op":"ping"}\n')
try:
    print(client.recv(100).decode() or "closed", flush=True)
except ConnectionResetError:  # closed with the ping unread
    print("closed", flush=True)
"""


@pytest.mark.slow
def test_a_client_of_another_uid_is_never_answered_by_the_door(
        shared_dir: Path, other_user: tuple[int, int]) -> None:
    opened = Door(shared_dir)
    try:
        os.chmod(shared_dir / "door", 0o711)
        os.chmod(opened.path, 0o666)  # the socket open to all: SO_PEERCRED decides
        uid, gid = other_user
        client = subprocess.Popen([python_for_others(), "-I", "-c", _SEND_PING, opened.path],
                                  user=uid, group=gid, extra_groups=[], cwd="/",
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for(lambda: opened.door.handed == 1, message="the other uid's connection handed")
        assert opened.door.answered == 0
        (adopted, data), = opened.close()
        assert data == b""  # not even read: the daemon refuses it in its own words
        adopted.close()
        out, err = client.communicate(timeout=15)
        assert out.decode().strip() == "closed", err.decode()
    finally:
        opened.early.detectors.close()
        opened.bound.close()


class TestGiveWay:
    def test_another_thread_never_waits(self) -> None:
        give_way = GiveWay()
        give_way.busy()
        waited: list[float] = []

        def other() -> None:
            began = time.monotonic()
            give_way.find_spec("anything")
            waited.append(time.monotonic() - began)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
        assert waited and waited[0] < GIVE_WAY_MAX / 2

    def test_the_opening_thread_waits_for_the_door_to_be_idle(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(door_module, "GIVE_WAY_MAX", 30.0)  # idle ends it, not the bound
        give_way = GiveWay()
        give_way.busy()
        threading.Timer(0.03, give_way.idle.set).start()
        began = time.monotonic()
        give_way.find_spec("anything")
        assert 0.02 <= time.monotonic() - began < 10
        assert give_way.idle.is_set()

    def test_the_wait_is_bounded(self) -> None:
        give_way = GiveWay()
        give_way.busy()
        began = time.monotonic()
        give_way.find_spec("anything")  # the door never gets idle
        assert GIVE_WAY_MAX * 0.9 <= time.monotonic() - began < GIVE_WAY_MAX + 5

    def test_no_wait_while_the_door_is_importing(self, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        (tmp_path / "held_module_for_the_door.py").write_text(
            "import threading\nRELEASE = threading.Event()\n"
            "import builtins\nbuiltins._door_gate.set()\nRELEASE.wait(10)\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        inside = threading.Event()
        monkeypatch.setattr("builtins._door_gate", inside, raising=False)
        give_way = GiveWay()
        thread = threading.Thread(target=importlib.import_module,
                                  args=("held_module_for_the_door",))
        thread.start()
        try:
            assert inside.wait(5), "the door's thread did not start its import"
            give_way.door = thread.ident
            give_way.busy()
            began = time.monotonic()
            give_way.find_spec("anything")
            assert time.monotonic() - began < GIVE_WAY_MAX / 2
        finally:
            sys.modules["held_module_for_the_door"].RELEASE.set()
            thread.join(5)
            sys.modules.pop("held_module_for_the_door", None)


# `storyd serve` held right after its early door opens, until a file exists: the daemon
# is not built while the test asks, so what answers is the door. (Not a finder holding
# an import: finders run under the interpreter's global import lock, and the door's
# answer may import too.)
@pytest.fixture
def held(tmp_path: Path, ws: Path) -> Iterator[tuple[DaemonProcess, Path]]:
    """A daemon on `ws` whose build waits for the gate file; the door answers meanwhile."""
    with held_daemon(tmp_path, [ws]) as (daemon, gate):
        yield daemon, gate


@pytest.mark.slow
class TestHeldDaemon:
    def test_the_door_answers_and_the_daemon_takes_over(
            self, held: tuple[DaemonProcess, Path], ws: Path) -> None:
        daemon, gate = held
        early = orjson.loads(ask(str(daemon.socket), resume_line(ws)))
        assert (early["ok"], early["source"]) == (True, "direct")
        instance = str(early["clock"]).split(":")[0]
        with connect(str(daemon.socket)) as waiting:
            waiting.sendall(b'{"op":"stats","id":"after"}\n')  # the daemon's, not the door's
            assert silent(waiting, 0.2), "answered while the daemon was not built"
            gate.touch()
            stats = orjson.loads(read_line(waiting))
        assert stats["id"] == "after"
        assert stats["queries"] >= 1 and stats["misses"] >= 1  # the door's resume counted
        assert str(stats["clock"]).split(":")[0] == instance
        assert daemon.request({"op": "ping"})["instance"] == instance
        wait_for(lambda: '"early_door"' in daemon.log_text(), message="the door's log line")
        served = daemon.request(orjson.loads(resume_line(ws)))
        assert served["envelope"] == early["envelope"]

    def test_a_file_torn_after_the_doors_answer_answers_as_the_door_did(
            self, held: tuple[DaemonProcess, Path], ws: Path) -> None:
        daemon, gate = held
        good = orjson.loads(ask(str(daemon.socket), resume_line(ws)))
        assert good["ok"] is True
        state = ws / "plans" / f"epic-{EPIC}" / "execution-state.json"
        whole = state.read_bytes()
        state.write_bytes(whole[: len(whole) // 2])  # torn in place, before the daemon is
        gate.touch()
        torn = daemon.request(orjson.loads(resume_line(ws)))
        assert torn["ok"] is True, torn  # the door's good read, not exit 65
        assert torn["envelope"] == good["envelope"]
        assert "engine/state-unreadable" in {f"{f['detector']}/{f['code']}"
                                              for f in torn["findings"]}  # type: ignore[union-attr]

    def test_a_sigterm_while_the_daemon_is_built_is_a_clean_stop(
            self, held: tuple[DaemonProcess, Path], ws: Path) -> None:
        daemon, gate = held
        assert orjson.loads(ask(str(daemon.socket), resume_line(ws)))["ok"] is True
        daemon.signal(signal.SIGTERM)
        assert daemon.proc is not None
        with pytest.raises(subprocess.TimeoutExpired):
            daemon.proc.wait(0.2)  # kept, not the default's death
        gate.touch()
        assert daemon.proc.wait(20) == 0, daemon.log_text()
        assert not daemon.socket.exists()
        assert '"stopped"' in daemon.log_text()

    def test_a_second_signal_stops_a_start_up_that_does_not_end(
            self, held: tuple[DaemonProcess, Path]) -> None:
        daemon, _gate = held  # the gate never opens: a start-up hung in a plugin, say
        assert daemon.request({"op": "ping"})["ok"] is True  # the door is open
        daemon.signal(signal.SIGTERM)
        assert daemon.proc is not None
        with pytest.raises(subprocess.TimeoutExpired):
            daemon.proc.wait(0.2)  # the first is kept for the daemon
        daemon.signal(signal.SIGTERM)
        assert daemon.proc.wait(20) == 128 + signal.SIGTERM, daemon.log_text()
        assert not daemon.socket.exists()  # closed and unlinked on the way out


@pytest.mark.slow
def test_a_socket_activated_daemon_answers_its_waiting_client_from_the_door(
        tmp_path: Path, ws: Path) -> None:
    """systemd's socket activation: the client asked before `storyd serve` ran. The door,
    beside the daemon's real imports (no stand-in holds them), answers it; the daemon then
    serves under the same instance and stops cleanly."""
    path = tmp_path / "run" / "storyd.sock"
    env = daemon_env(tmp_path, path)
    path.parent.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    client = connect(str(path))
    client.sendall(resume_line(ws))  # waits in the backlog for whoever accepts first
    script = 'export LISTEN_PID=$$; exec "$0" "$@" 3<&0 0</dev/null'
    env.update(LISTEN_FDS="1", LISTEN_FDNAMES="storyd.socket")
    log = tmp_path / "serve.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(["sh", "-c", script, STORYD, "serve", "--workspace", str(ws)],
                                stdin=listener.fileno(), stdout=subprocess.DEVNULL,
                                stderr=err, env=env)
    try:
        with client:
            early = orjson.loads(read_line(client))
        assert (early["ok"], early["source"], early["id"]) == (True, "direct", 7), early
        instance, generation = str(early["clock"]).split(":")
        assert generation == "0", "answered by the daemon, not the door"
        wait_for(lambda: '"early_door"' in log.read_text(), 30, "the daemon's early_door line")
        line = next(orjson.loads(x) for x in log.read_text().splitlines() if '"early_door"' in x)
        assert line["answered"] == 1, line
        served = orjson.loads(ask(str(path), resume_line(ws)))
        assert served["envelope"] == early["envelope"]
        assert str(served["clock"]).split(":")[0] == instance
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        listener.close()
