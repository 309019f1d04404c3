"""A real `storyd serve` subprocess for tests: start it, talk NDJSON over AF_UNIX, stop it.

    DaemonProcess           one `storyd serve` child with its own socket, config and log file
    Line                    one client connection: send requests, read answer lines
    EventStream             a `subscribe` connection read by a thread that stamps each event
    wait_for()              poll a condition until it holds or a deadline passes
    daemon_env()            a private environment: config and runtime dirs, STORYD_SOCKET
    write_config()          the config.toml that environment reads
    resume_via_daemon()     `storyd resume`, asserting the daemon (not the fallback) answered
    resume_without_daemon() `storyd resume --direct`, for comparison
    assert_same_output()    two finished `storyd` runs printed and exited alike
    spawn_daemon            pytest fixture: a factory of DaemonProcess, all killed at teardown
    held_daemon()           a daemon whose build waits for a gate file: its early door answers

Registered as a plugin by tests/conftest.py, so the fixture reaches every test module.
No test sleeps and hopes: every wait is a poll with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import orjson
import pytest
from cli_harness import BIN, STORYD, run_storyd_cli

__all__ = [
    "DaemonProcess",
    "Event",
    "EventStream",
    "Line",
    "assert_same_output",
    "daemon_env",
    "resume_via_daemon",
    "resume_without_daemon",
    "wait_for",
    "write_config",
]

T = TypeVar("T")
START_DEADLINE = 10.0
_POLL = 0.005
Event = tuple[float, dict[str, object]]  # (time.monotonic() on arrival, the event)
Done = subprocess.CompletedProcess[bytes]


def wait_for(predicate: Callable[[], T], timeout: float = 5.0, message: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(_POLL)


class Line:
    """One client connection speaking NDJSON (answers are read line by line)."""

    def __init__(self, path: str | Path, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except BaseException:
            self.sock.close()
            raise
        self.buffer = b""

    def __enter__(self) -> Line:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def send(self, *requests: dict[str, object] | bytes) -> None:
        """Send requests in one write: dicts as JSON lines, bytes exactly as given."""
        data = b"".join(r if isinstance(r, bytes) else orjson.dumps(r) + b"\n" for r in requests)
        self.sock.sendall(data)

    def read_raw(self) -> bytes:
        """The next line as sent by the daemon, without its newline."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                msg = f"connection closed; unterminated data: {self.buffer[:200]!r}"
                raise ConnectionError(msg)
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def read(self) -> dict[str, object]:
        """The next line, parsed (it must be one JSON object)."""
        value = orjson.loads(self.read_raw())
        assert isinstance(value, dict), value
        return value

    def read_all(self) -> bytes:
        """Everything until the daemon closes the connection."""
        chunks = [self.buffer]
        self.buffer = b""
        while chunk := self.sock.recv(1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)

    def request(self, request: dict[str, object] | bytes) -> dict[str, object]:
        """Send one request and read one answer on this connection."""
        self.send(request)
        return self.read()


class DaemonProcess:
    """`storyd serve` as a child process, with a socket, config home and log of its own."""

    def __init__(self, root: Path, *, socket_path: Path | None = None,
                 workspaces: Iterable[Path | str] = (), args: Iterable[str] = (),
                 env: dict[str, str] | None = None, name: str = "daemon") -> None:
        self.root = root
        self.socket = Path(socket_path or root / "run" / "storyd.sock")
        self.workspaces = [str(w) for w in workspaces]
        self.args = list(args)
        self.env = dict(env) if env is not None else daemon_env(root, self.socket)
        self.log_path = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0

    # -- life ------------------------------------------------------------------------------

    def argv(self) -> list[str]:
        """The command line that starts this daemon."""
        argv = [STORYD, "serve", "--socket", str(self.socket)]
        for workspace in self.workspaces:
            argv += ["--workspace", workspace]
        return argv + self.args

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it to answer."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log)
        self.pid = self.proc.pid
        return self.proc

    def start(self, timeout: float = START_DEADLINE, *, warm: bool = True) -> DaemonProcess:
        """Start the process and wait until it answers `ping` with its own pid.

        With `warm` (the default) also wait until its start-up warm-up has ended, so
        answers come from the cache.
        """
        proc = self.spawn()

        def answers() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"storyd serve exited {proc.returncode} before answering:\n"
                            f"{self.log_text()}")
            try:
                return self.request({"op": "ping"}, timeout=1.0).get("pid") == proc.pid
            except (OSError, ValueError):
                return False

        wait_for(answers, timeout, f"storyd serve (pid {proc.pid}) to answer ping on {self.socket}")
        if warm:
            wait_for(lambda: self.stats()["warm"]["warming"] is False,  # type: ignore[index]
                     timeout, f"storyd serve (pid {proc.pid}) to finish warming")
        return self

    def running(self) -> bool:
        """Whether the child is still alive."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """Send a signal to the daemon."""
        assert self.proc is not None
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait, and assert a clean exit (0)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        assert code == 0, f"storyd serve exited {code} on SIGTERM:\n{self.log_text()}"
        return code

    def kill(self) -> None:
        """SIGKILL (kill -9): no cleanup at all, the socket file stays behind."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        """Teardown: kill the child if a test left it running."""
        if self.running():
            self.kill()

    # -- talking ---------------------------------------------------------------------------

    def connect(self, timeout: float = 5.0) -> Line:
        """A new connection to the daemon's socket."""
        return Line(self.socket, timeout)

    def request(self, request: dict[str, object] | bytes,
                timeout: float = 5.0) -> dict[str, object]:
        """One request on a fresh connection; its answer."""
        with self.connect(timeout) as line:
            return line.request(request)

    def stats(self) -> dict[str, object]:
        """The `stats` answer."""
        answer = self.request({"op": "stats"})
        assert answer["ok"] is True, answer
        return answer

    def units(self, workspace: Path | str | None = None,
              **fields: object) -> list[dict[str, object]]:
        """The `list` answer's units (of one workspace, when given)."""
        request: dict[str, object] = {"op": "list", **fields}
        if workspace is not None:
            request["workspace"] = str(workspace)
        answer = self.request(request)
        assert answer["ok"] is True, answer
        return answer["units"]  # type: ignore[return-value]

    # -- the log ---------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything the daemon wrote to stderr so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_events(self) -> list[dict[str, object]]:
        """The structlog lines, parsed (each must be one JSON object)."""
        events = []
        for raw in self.log_text().splitlines():
            value = orjson.loads(raw)
            assert isinstance(value, dict), raw
            events.append(value)
        return events

    def wait_log(self, event: str, timeout: float = 5.0, **match: object) -> dict[str, object]:
        """The first log line with this event (and these fields), waiting for it to appear."""

        def find() -> dict[str, object] | None:
            for line in self.log_events():
                if line.get("event") == event and all(line.get(k) == v for k, v in match.items()):
                    return line
            return None

        return wait_for(find, timeout, f"log event {event!r} {match or ''}")


class EventStream:
    """A subscriber: one socket, one reader thread, every line stamped as it arrives.

    Use as a context manager; `close()` shuts the socket down and joins the thread.
    """

    def __init__(self, proc: DaemonProcess, **fields: object) -> None:
        self.line = proc.connect(timeout=5.0)
        self.first = self.line.request({"op": "subscribe", **fields})
        assert self.first.get("ok") is True and self.first.get("subscribed") is True, self.first
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="drift-subscriber", daemon=True)
        self._thread.start()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and close the connection."""
        with self._cond:
            self._stopping = True
        with contextlib.suppress(OSError):
            self.line.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        self.line.close()

    def _run(self) -> None:
        self.line.sock.settimeout(0.2)
        while True:
            with self._cond:
                if self._stopping:
                    return
            try:
                raw = self.line.read_raw()
            except TimeoutError:
                continue
            except (OSError, ConnectionError) as exc:
                with self._cond:
                    if not self._stopping:
                        self.error = exc
                    self._cond.notify_all()
                return
            stamp = time.monotonic()
            event = orjson.loads(raw)
            with self._cond:
                self.events.append((stamp, event))
                self._cond.notify_all()

    def mark(self) -> int:
        """The number of events so far: pass it as `start` to look only at later ones."""
        with self._cond:
            return len(self.events)

    def since(self, start: int = 0) -> list[dict[str, object]]:
        """The events received after `mark()` returned `start`."""
        with self._cond:
            return [event for _, event in self.events[start:]]

    def wait(self, predicate: Callable[[dict[str, object]], bool], *, start: int = 0,
             timeout: float = 5.0, message: str = "an event") -> Event:
        """The first event from `start` on that matches, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for stamp, event in self.events[start:]:
                    if predicate(event):
                        return stamp, event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.error is not None:
                    got = [(e.get("event"), e.get("unit")) for _, e in self.events[start:]]
                    pytest.fail(f"timed out after {timeout:g} s waiting for {message}; "
                                f"got {got}; reader error: {self.error!r}")
                self._cond.wait(remaining)

    def wait_count(self, predicate: Callable[[dict[str, object]], bool], count: int, *,
                   start: int = 0, timeout: float = 5.0,
                   message: str = "events") -> list[Event]:
        """The first `count` matching events from `start` on, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [(s, e) for s, e in self.events[start:] if predicate(e)]
                if len(found) >= count:
                    return found[:count]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.error is not None:
                    pytest.fail(f"timed out after {timeout:g} s waiting for {count} {message}; "
                                f"got {len(found)}; reader error: {self.error!r}")
                self._cond.wait(remaining)

    def settle(self, quiet: float, *, timeout: float = 10.0) -> list[dict[str, object]]:
        """Every event, once none has arrived for `quiet` seconds (bounded by `timeout`).

        Proving that something does *not* happen needs a window; this is that window. It
        waits on the reader's Condition, and every new event starts the window again.
        """
        called = time.monotonic()
        deadline = called + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                last = max(called, self.events[-1][0] if self.events else called)
                idle = now - last
                if idle >= quiet:
                    return [event for _, event in self.events]
                if now >= deadline:
                    pytest.fail(f"events did not settle for {quiet:g} s within {timeout:g} s")
                self._cond.wait(min(quiet - idle, deadline - now))


def daemon_env(root: Path, socket_path: Path) -> dict[str, str]:
    """A private environment: config and runtime under `root`, STORYD_SOCKET set."""
    env = dict(os.environ)
    (root / "config").mkdir(parents=True, exist_ok=True)
    runtime = root / "runtime"
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    env.update(
        XDG_CONFIG_HOME=str(root / "config"),
        XDG_STATE_HOME=str(root / "state"),  # the history database (issue 33)
        XDG_RUNTIME_DIR=str(runtime),
        STORYD_SOCKET=str(socket_path),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.pop("STORYD_LOG_LEVEL", None)
    return env


def reconcile_env(root: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> dict[str, str]:
    """`daemon_env` under `root` (socket `root/run/storyd.sock`, state `root/state`)
    for a reconcile test: no kill-at-N hook inherited from the caller's environment.
    With `monkeypatch`, this process's config, runtime, socket and state homes too (for
    the tests that call the API in-process)."""
    from storyd.api.reconcile.atomic import HOOK_ENV

    environ = daemon_env(root, root / "run" / "storyd.sock")
    environ.pop(HOOK_ENV, None)
    if monkeypatch is not None:
        for key in ("XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "STORYD_SOCKET", "XDG_STATE_HOME"):
            monkeypatch.setenv(key, environ[key])
    return environ


_HELD_SERVE = r"""
import os, sys, time
from storyd.cli.commands import serve
gate, opened = sys.argv[1], serve._open_door
def held(*args):
    door = opened(*args)
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.005)  # the test writes the file: no event to wait on here
    return door
serve._open_door = held
from storyd.cli import main
sys.exit(main(["serve", *sys.argv[2:]]))
"""


@contextlib.contextmanager
def held_daemon(root: Path, workspaces: Iterable[Path]) -> Iterator[tuple[DaemonProcess, Path]]:
    """A daemon on `workspaces` whose build waits for the gate file (`root/build-now`,
    touched on the way out): its early door (server/door.py) answers meanwhile."""
    gate = root / "build-now"
    daemon = DaemonProcess(root, workspaces=workspaces)
    argv = daemon.argv()
    daemon.argv = lambda: [sys.executable, "-c", _HELD_SERVE, str(gate), *argv[2:]]  # type: ignore[method-assign]
    daemon.spawn()
    wait_for(daemon.socket.exists, 20, "the socket bound")
    try:
        yield daemon, gate
    finally:
        gate.touch()
        daemon.close()


def write_config(root: Path, text: str) -> Path:
    """$XDG_CONFIG_HOME/storyd/config.toml under `root` (the one `daemon_env` points at)."""
    path = root / "config" / "storyd" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def resume_without_daemon(env: dict[str, str], workspace: Path, *args: str) -> Done:
    """`storyd resume --direct ARGS` in the workspace."""
    return run_storyd_cli("resume", "--direct", *args, env=env, cwd=workspace)


def resume_via_daemon(proc: DaemonProcess, workspace: Path, *args: str) -> Done:
    """`storyd resume ARGS` in the workspace, asserting the daemon (not the fallback) answered."""
    before = proc.stats()["queries"]
    done = run_storyd_cli("resume", "--timeout", "5000", *args, env=proc.env, cwd=workspace)
    assert proc.stats()["queries"] == before + 1, "the daemon did not answer this query"
    return done


def assert_same_output(a: Done, b: Done) -> None:
    """Both runs exited with the same code and printed the same bytes on both streams."""
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """A factory: `spawn_daemon(workspaces=[...], args=[...], start=True)` -> DaemonProcess.

    Every daemon shares tmp_path's config home; each gets its own log file. Any still
    running at teardown is killed.
    """
    made: list[DaemonProcess] = []

    def spawn(workspaces: Iterable[Path | str] = (), *, args: Iterable[str] = (),
              socket_path: Path | None = None, start: bool = True,
              warm: bool = True) -> DaemonProcess:
        sock = socket_path or tmp_path / "run" / "storyd.sock"
        proc = DaemonProcess(tmp_path, socket_path=sock, workspaces=workspaces, args=args,
                             env=daemon_env(tmp_path, sock), name=f"daemon{len(made)}")
        made.append(proc)
        if start:
            proc.start(warm=warm)
        return proc

    yield spawn
    for proc in made:
        with contextlib.suppress(Exception):
            proc.close()
