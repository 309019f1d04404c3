"""Raw Unix-socket clients for storyd's benchmarks: stdlib only, pre-encoded requests.

Nothing here imports the project. The load generator (`client_process`) runs in its own
process (multiprocessing), so that the clients' GIL never serialises the clients, and
it times each query with `time.perf_counter_ns` around bare `send`/`recv` calls on
request bytes encoded before the clock starts.

    resume_request(ws, epic, story) -> bytes      one NDJSON line
    ask(path, {"op": "ping"}) -> dict             one request on a fresh connection
    wait_for_ping(path, timeout, alive) -> dict   until the daemon answers (or dies)
    Connection(path)                              a persistent connection: roundtrip()
    LineReader(sock)                              lines with their arrival time (events)
    client_process(...)                           a multiprocessing target (see below)
"""

from __future__ import annotations

import json
import socket
import time
from array import array
from collections.abc import Callable

__all__ = [
    "Connection",
    "LineReader",
    "ask",
    "client_process",
    "encode",
    "resume_request",
    "wait_for_ping",
]

_AF_UNIX = socket.AF_UNIX
_STREAM = socket.SOCK_STREAM
_CHUNK = 1 << 16
OK_PREFIX = b'{"ok":true'


def encode(request: dict[str, object]) -> bytes:
    """One compact NDJSON line."""
    return json.dumps(request, separators=(",", ":")).encode() + b"\n"


def resume_request(workspace: str, epic: str, story: str) -> bytes:
    """The `resume` op for one epic story, as a line."""
    return encode({"op": "resume", "workspace": workspace, "epic": epic, "story": story})


def _read_line(sock: socket.socket) -> bytes:
    data = sock.recv(_CHUNK)
    while data and not data.endswith(b"\n"):
        more = sock.recv(_CHUNK)
        if not more:
            break
        data += more
    return data


def ask(path: str, request: dict[str, object], timeout: float = 10.0) -> dict[str, object]:
    """Send one request on a fresh connection and return the parsed answer."""
    sock = socket.socket(_AF_UNIX, _STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall(encode(request))
        return json.loads(_read_line(sock))
    finally:
        sock.close()


def wait_for_ping(path: str, timeout: float, alive: Callable[[], bool]) -> dict[str, object] | None:
    """Ping until the daemon answers; None when `alive()` turns false or time runs out.

    storyd binds its socket before the first scan and answers after it, so a ping
    that connects early simply waits in the listen backlog until the scan is done.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return None
        try:
            answer = ask(path, {"op": "ping"}, timeout=max(0.1, deadline - time.monotonic()))
        except (OSError, ValueError):
            time.sleep(0.05)
            continue
        if answer.get("ok"):
            return answer
        time.sleep(0.05)
    return None


class Connection:
    """A persistent connection: one request line out, one answer line back."""

    def __init__(self, path: str, timeout: float | None = 10.0) -> None:
        self.sock = socket.socket(_AF_UNIX, _STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)

    def roundtrip(self, request: bytes) -> bytes:
        """The answer line (with its newline) to one request line."""
        self.sock.sendall(request)
        return _read_line(self.sock)

    def ask(self, request: dict[str, object]) -> dict[str, object]:
        return json.loads(self.roundtrip(encode(request)))

    def close(self) -> None:
        self.sock.close()


class LineReader:
    """Reads newline-terminated lines from a socket, stamping when each one arrived."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.stamps: list[tuple[int, bytes]] = []

    def readline(self, timeout: float) -> tuple[int, bytes] | None:
        """(perf_counter_ns when its last byte arrived, line), or None on timeout.

        Lines that arrived in the same recv share its arrival time.
        """
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(_CHUNK)
            except TimeoutError:
                return None
            arrived = time.perf_counter_ns()
            if not chunk:
                msg = "the daemon closed the connection"
                raise ConnectionError(msg)
            self.buffer += chunk
            self.stamps.append((arrived, chunk))
        line, _, self.buffer = self.buffer.partition(b"\n")
        arrived = self.stamps[-1][0]
        if not self.buffer:
            self.stamps.clear()
        return arrived, line


def client_process(path: str, requests: list[bytes], persistent: bool, warmup: int,
                   duration_s: float, offset: int, barrier: object, pipe: object) -> None:
    """One load-generating client (a multiprocessing target).

    Warm up, wait on `barrier` with the other clients and the harness, then send
    `requests` round-robin from `offset` for `duration_s`, one at a time (no
    pipelining): on one connection (`persistent`) or on a fresh connection per query
    (connect, send, read the answer line, close). Sends back through `pipe`:
    (samples as array('q') bytes in ns, answers not starting with {"ok":true,
    start ns, end ns).
    """
    sock = None
    if persistent:
        sock = socket.socket(_AF_UNIX, _STREAM)
        sock.connect(path)
    for k in range(warmup):
        request = requests[(offset + k) % len(requests)]
        if sock is not None:
            sock.send(request)
            _read_line(sock)
        else:
            with socket.socket(_AF_UNIX, _STREAM) as fresh:
                fresh.connect(path)
                fresh.send(request)
                _read_line(fresh)
    barrier.wait()  # type: ignore[attr-defined]
    start = time.perf_counter_ns()
    stop = start + int(duration_s * 1e9)
    index = offset + warmup
    if sock is not None:
        samples, errors = _persistent_loop(sock, requests, index, stop)
        sock.close()
    else:
        samples, errors = _fresh_loop(path, requests, index, stop)
    pipe.send((samples.tobytes(), errors, start, time.perf_counter_ns()))  # type: ignore[attr-defined]
    pipe.close()  # type: ignore[attr-defined]


def _persistent_loop(sock: socket.socket, requests: list[bytes], index: int,
                     stop: int) -> tuple[array, int]:
    """Query on one connection until `stop`; (samples in ns, answers that were not ok)."""
    clock = time.perf_counter_ns
    count = len(requests)
    samples = array("q")
    append = samples.append
    errors = 0
    send, recv = sock.send, sock.recv
    while True:
        request = requests[index % count]
        index += 1
        began = clock()
        send(request)
        data = recv(_CHUNK)
        while data[-1:] != b"\n":
            more = recv(_CHUNK)
            if not more:
                break
            data += more
        ended = clock()
        append(ended - began)
        if data[:10] != OK_PREFIX:
            errors += 1
        if ended >= stop:
            return samples, errors


def _fresh_loop(path: str, requests: list[bytes], index: int, stop: int) -> tuple[array, int]:
    """Connect, query, close, until `stop`; (samples in ns, answers that were not ok)."""
    clock = time.perf_counter_ns
    count = len(requests)
    samples = array("q")
    append = samples.append
    errors = 0
    make = socket.socket
    while True:
        request = requests[index % count]
        index += 1
        began = clock()
        fresh = make(_AF_UNIX, _STREAM)
        fresh.connect(path)
        fresh.send(request)
        data = fresh.recv(_CHUNK)
        while data[-1:] != b"\n":
            more = fresh.recv(_CHUNK)
            if not more:
                break
            data += more
        fresh.close()
        ended = clock()
        append(ended - began)
        if data[:10] != OK_PREFIX:
            errors += 1
        if ended >= stop:
            return samples, errors
