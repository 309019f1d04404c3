"""The early door: the socket answers from the moment `storyd serve` binds it (issue 43).

The daemon's own imports and assembly (asyncio, structlog, watchdog, the engine) take
70-90 ms; a client that connected meanwhile used to wait in the listen backlog for all
of it, though its question needs none of it. The door is one thread on the bound socket
while that happens. It accepts a connection, checks its peer, reads one request line
(`LINE_WAIT` at most) and asks `answer` (server/early.py) for the reply. What it cannot
answer, or should not, goes to the daemon whole, with the bytes it read. That covers
another uid's connection (the daemon refuses it in its own words), a line not whole in
time, two lines at once, any op but the few early.py knows, and any error.

A SIGTERM or SIGINT meanwhile is kept (`stop_asked`), and the daemon stops cleanly as
soon as it serves, rather than the process dying half built. A second one is a start-up
that does not end (a plugin's import that hangs, say): it stops the start-up where it
is (SystemExit, status 128 + the signal), the socket closed and unlinked on the way out.

The door holds at most `MAX_WAITING` connections for the daemon; past that it stops
accepting, and the listen backlog keeps the rest for the daemon. A client of this user
holds it at most `LINE_WAIT` to send its line and `SEND_WAIT` to take an answer that
does not fit the socket's buffer (then its connection is dropped).

`close(adopt)` is the daemon taking over once its own server accepts: every connection
handed over so far, and any the door hands over later (one it was reading), goes to
`adopt`, and the door accepts no more. Both accept on the same socket meanwhile, so the
door makes it non-blocking first: a connection the other took is not waited for.

The start-up gives way to the door, as the daemon's background work gives way to
queries (server/priority.py). While the door answers, the thread that opened it
waits before each module it imports (`GiveWay`, first on sys.meta_path), for
`GIVE_WAY_MAX` at most per spell of work: the door may wait for a module or a lock that
thread holds, so the wait is bounded rather than waited out. Both threads share one
interpreter lock: without the wait, the imports took half of it and more. While the
door is open the switch interval is `SWITCH_INTERVAL` (0.5 ms, not 5), so the door's
thread, back from each system call of a read, waits less for the lock.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time

from storyd.core.peercred import peer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Answer = Callable[[bytes], "tuple[bytes, bool] | None"]
    Adopt = Callable[[socket.socket, bytes], None]

__all__ = ["GIVE_WAY_MAX", "LINE_WAIT", "MAX_WAITING", "SEND_WAIT", "SWITCH_INTERVAL",
           "EarlyDoor", "GiveWay"]

GIVE_WAY_MAX = 0.1  # seconds the start-up's imports wait for one spell of the door's work
_LOOK_EVERY = 0.002  # seconds between looks at whether the door's thread is importing
LINE_WAIT = 0.05  # seconds the door waits for a whole request line, then hands it over
SEND_WAIT = 0.05  # seconds an answer may take to leave; then the connection is dropped
MAX_WAITING = 256  # connections held for the daemon; past it, the backlog holds them
SWITCH_INTERVAL = 0.0005  # the interpreter's switch interval while the door is open


class GiveWay:
    """A finder first on sys.meta_path that finds nothing: before each module the
    opening thread imports, it waits while the door works and is not importing (it may
    wait for a module that thread is importing), GIVE_WAY_MAX at most per spell of work
    (it may wait for a lock that thread holds)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.idle = threading.Event()
        self.idle.set()
        self.busy_since = 0.0
        self.door: int | None = None  # the door's thread, once it runs

    def busy(self) -> None:
        """The door starts work: imports wait for it."""
        self.busy_since = time.monotonic()
        self.idle.clear()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        """Wait for the door's work, then let the other finders find `name`."""
        if threading.get_ident() != self.thread:
            return
        while not self.idle.is_set() and not self._door_importing():
            left = self.busy_since + GIVE_WAY_MAX - time.monotonic()
            if left <= 0:
                return
            self.idle.wait(min(left, _LOOK_EVERY))

    def _door_importing(self) -> bool:
        """Whether the door's thread is inside an import: it may wait for a module this
        thread is importing, or for the interpreter's global import lock, which a finder
        holds while it runs (this one, waiting, included)."""
        frame = sys._current_frames().get(self.door) if self.door is not None else None
        while frame is not None:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                return True
            frame = frame.f_back
        return False


class EarlyDoor:
    """Answers on `listener` while the daemon starts; hands the rest over at `close`.

    `answer(line)`: the reply to one request line and whether the connection ends with
    it (resume-cli's one shot), or None for the daemon to answer. `max_line`: the
    longest line the door reads before handing the connection over.
    """

    def __init__(self, listener: socket.socket, answer: Answer, max_line: int) -> None:
        self.listener = listener
        self.answer = answer
        self.max_line = max_line
        self.answered = 0  # replies the door wrote
        self.handed = 0  # connections handed to the daemon
        self.stop_asked = threading.Event()  # SIGTERM or SIGINT while the door was open
        self._signals: dict[int, object] = {}  # the handlers the door's replaced
        self._lock = threading.Lock()
        self._waiting: list[tuple[socket.socket, bytes]] = []
        self._adopt: Adopt | None = None
        self._wake_read, self._wake_write = os.pipe()
        self._ended = False  # the thread is gone and the pipe closed
        self._switch = sys.getswitchinterval()
        self._give_way = GiveWay()
        self._thread = threading.Thread(target=self._run, name="storyd-early-door", daemon=True)

    def open(self) -> EarlyDoor:
        """Start answering. Opened on the main thread, it also takes SIGTERM and SIGINT
        until the daemon's own handlers do: `stop_asked` says one came meanwhile."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._signals[signum] = signal.signal(signum, self._stop_asked)
        self.listener.setblocking(False)
        sys.setswitchinterval(SWITCH_INTERVAL)
        sys.meta_path.insert(0, self._give_way)
        self._thread.start()
        return self

    def close(self, adopt: Adopt) -> None:
        """The daemon serves: the connections handed over go to `adopt` (any thread)."""
        with self._lock:
            if self._adopt is not None:
                return
            self._adopt = adopt
            waiting, self._waiting = self._waiting, []
            if not self._ended:
                os.write(self._wake_write, b"x")
        sys.setswitchinterval(self._switch)
        # a new list, not a removal in place: an import on another thread walks the old
        # one outside the import lock, and would skip the finder after the removed one
        sys.meta_path = [f for f in sys.meta_path if f is not self._give_way]
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._signals.items():
                if signal.getsignal(signum) == self._stop_asked:  # not the daemon's since
                    signal.signal(signum, previous)  # type: ignore[arg-type]
        for sock, data in waiting:
            adopt(sock, data)

    def _stop_asked(self, signum: int, frame: object) -> None:
        """The first signal is kept for the daemon; a second stops a start-up that
        does not end, where it is (the caller's cleanup closes the socket)."""
        if self.stop_asked.is_set():
            raise SystemExit(128 + signum)
        self.stop_asked.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the door's thread to end (after `close`); whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the door's thread ---------------------------------------------------

    def _run(self) -> None:
        give_way = self._give_way
        give_way.door = threading.get_ident()
        poller = select.poll()  # not select(): a descriptor past 1023 is fine
        try:
            try:
                poller.register(self.listener.fileno(), select.POLLIN)
                poller.register(self._wake_read, select.POLLIN)
            except (OSError, ValueError):  # the socket closed before the thread ran
                return
            while self._adopt is None and len(self._waiting) < MAX_WAITING:
                try:
                    ready = poller.poll()
                except (OSError, ValueError):  # the socket closed under it: nothing to do
                    break
                if any(fd == self._wake_read or flags & select.POLLNVAL for fd, flags in ready):
                    break
                try:
                    conn, _ = self.listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue  # the daemon's own server took it
                except OSError:
                    break  # out of descriptors, say: the daemon accepts when it can
                if self._adopt is not None:  # closed meanwhile: the daemon's to answer
                    self._hand(conn, b"")
                    break
                give_way.busy()
                try:
                    self._serve(conn)
                finally:
                    give_way.idle.set()
        finally:
            with self._lock:
                self._ended = True
                os.close(self._wake_read)
                os.close(self._wake_write)

    def _serve(self, conn: socket.socket) -> None:
        """One connection: answered, dropped when broken, or handed to the daemon."""
        if peer(conn) != os.getuid():  # the daemon refuses it, and logs why
            self._hand(conn, b"")
            return
        data, broken = self._read_line(conn)
        if broken:
            conn.close()
            return
        got = None
        if self._adopt is not None:  # closed while it read: the daemon answers now, so
            self._hand(conn, data)  # no answer of the door's comes after one of its own
            return
        if data.endswith(b"\n") and data.count(b"\n") == 1 and len(data) - 1 <= self.max_line:
            try:
                got = self.answer(data[:-1])
            except Exception:  # a bug: the daemon answers it, and logs why
                got = None
        if got is None:
            self._hand(conn, data)
            return
        reply, last = got
        try:
            conn.settimeout(SEND_WAIT)
            conn.sendall(reply)
        except OSError:
            conn.close()
            return
        self.answered += 1
        if last:
            conn.close()
        else:  # the client may ask again on it: the daemon reads what comes next
            self._hand(conn, b"")

    def _read_line(self, conn: socket.socket) -> tuple[bytes, bool]:
        """What the client sent within LINE_WAIT, up to its first newline or past
        `max_line`; and whether the connection broke (reset before a whole line)."""
        data = b""
        deadline = time.monotonic() + LINE_WAIT
        while b"\n" not in data and len(data) <= self.max_line:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                conn.settimeout(left)
                chunk = conn.recv(65536)
            except TimeoutError:
                break
            except OSError:
                return data, True
            if not chunk:
                break  # the client half-closed: the daemon sees that end too
            data += chunk
        return data, False

    def _hand(self, conn: socket.socket, data: bytes) -> None:
        with self._lock:
            adopt = self._adopt
            if adopt is None:
                self._waiting.append((conn, data))
        self.handed += 1
        if adopt is not None:
            adopt(conn, data)
