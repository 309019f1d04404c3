"""Ask the daemon first; when it is absent, read the files directly. Same answer.

Two faces:
- `ask_cli()` speaks the `resume-cli` op for `storyd resume`. It imports only `_socket`
  so the CLI's start-up stays small, and returns None whenever the daemon cannot
  answer (no socket, refused, timeout, a torn reply): the caller then reads directly.
- `Client` is the Python API over the NDJSON protocol (docs/protocol.md).
"""

from __future__ import annotations

import os

from storyd import __version__
from storyd.core.jsonio import dumps
from storyd.core.switches import CONFIG

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Iterator

    from storyd.core.query import Output

__all__ = ["Client", "DaemonUnavailable", "ask_cli"]

def _debug(message: str) -> None:
    if os.environ.get("STORYD_LOG_LEVEL", "").lower() == "debug":
        os.write(2, f"debug: {message}\n".encode())


def _warn_version(version: str, path: str) -> None:
    warned = CONFIG.warned_versions  # once per version and process
    if version and version != __version__ and version not in warned:
        warned.add(version)
        os.write(
            2,
            f"warn: storyd daemon at {path} is {version}; this client is {__version__}\n".encode(),
        )


def _connect(path: str, timeout: float) -> _socket.socket:
    import _socket

    from storyd.core.paths import socket_path_problem

    problem = socket_path_problem(path)  # not a bare "AF_UNIX path too long"
    if problem is not None:
        raise ConnectionRefusedError(problem)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        from storyd.core.peercred import server_is_ours  # issue 24: trust only our own uid

        if not server_is_ours(sock, path):
            raise ConnectionRefusedError(f"{path} is served by another user")
    except BaseException:
        sock.close()
        raise
    return sock


def ask_cli(path: str, argv: list[str], cwd: str, timeout: float) -> Output | None:
    """The daemon's answer to `storyd resume ARGV` run in `cwd`, or None to fall back."""
    from storyd.core.query import Output

    if not os.path.exists(path):
        _debug(f"no socket at {path}; reading directly")
        return None
    if any("\udc80" <= c <= "\udcff" for arg in argv for c in arg):
        return None  # undecodable bytes in argv cannot cross JSON intact
    request = dumps({"op": "resume-cli", "argv": argv, "cwd": cwd}) + b"\n"
    try:
        sock = _connect(path, timeout)
        try:
            sock.sendall(request)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        finally:
            sock.close()
    except OSError as exc:
        _debug(f"daemon at {path} did not answer ({exc}); reading directly")
        return None
    lines = b"".join(chunks).split(b"\n")
    if len(lines) < 2 or lines[-1] != b"" or not lines[-2].startswith(b"="):
        _debug(f"daemon at {path} sent a torn reply; reading directly")
        return None
    code_text, _, version = lines[-2][1:].decode("utf-8", "replace").partition(" ")
    if not code_text.isdigit():
        return None
    _warn_version(version, path)
    stdout = b"".join(line + b"\n" for line in lines[:-2] if not line.startswith(b"!"))
    stderr = tuple(
        line[1:].decode("utf-8", "replace") for line in lines[:-2] if line.startswith(b"!")
    )
    return Output(int(code_text), stdout, stderr)


class DaemonUnavailable(ConnectionError):
    """No daemon answered at the socket (a command that needs one exits `code`,
    sysexits EX_UNAVAILABLE)."""

    code = 69


class Client:
    """A connection to the daemon speaking NDJSON; see docs/protocol.md for every op.

    `resume()` falls back to a direct locked read when the daemon is absent, and the
    answer has the same shape, with `source: "direct"`.
    """

    def __init__(self, socket_path: str | None = None, timeout: float = 0.05) -> None:
        from storyd.core.paths import socket_path as default_path

        self.path = default_path(socket_path)
        self.timeout = timeout
        self._sock: _socket.socket | None = None
        self._buffer = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection, if open."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _readline(self) -> bytes:
        assert self._sock is not None, "request() connects before reading"
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise DaemonUnavailable(f"daemon at {self.path} closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def request(self, op: str, **fields: object) -> dict[str, object]:
        """Send one request and return its answer (errors come back as `ok: false`)."""
        try:
            if self._sock is None:
                self._sock = _connect(self.path, self.timeout)
            import orjson  # after the connection: no daemon, no import (a hook's direct path)

            self._sock.sendall(orjson.dumps({"op": op, **fields}) + b"\n")
            answer: dict[str, object] = orjson.loads(self._readline())
        except OSError as exc:
            self.close()
            raise DaemonUnavailable(f"no daemon answered at {self.path}: {exc}") from exc
        if isinstance(answer, dict) and op == "ping":
            _warn_version(str(answer.get("version", "")), self.path)
        return answer

    def ping(self) -> dict[str, object]:
        """The daemon's version and pid."""
        return self.request("ping")

    def resume(
        self, workspace: str, epic: str | None = None, story: str | None = None, **fields: object
    ) -> dict[str, object]:
        """One unit's answer; a direct read (source "direct") when the daemon is absent."""
        workspace = os.path.abspath(workspace)
        if epic is not None:
            fields.update(epic=epic, story=story)
        try:
            return self.request("resume", workspace=workspace, **fields)
        except DaemonUnavailable as exc:
            _debug(f"{exc}; reading directly")
        return _direct_answer(workspace, fields)

    def subscribe(self, **fields: object) -> Iterator[dict[str, object]]:
        """Yield event lines until the connection closes. Blocks; no timeout."""
        import orjson

        first = self.request("subscribe", **fields)
        yield first
        assert self._sock is not None, "request() left the connection open"
        self._sock.settimeout(None)
        while True:
            try:
                yield orjson.loads(self._readline())
            except DaemonUnavailable:
                return


def _direct_answer(workspace: str, fields: dict[str, object]) -> dict[str, object]:
    """The daemon's `resume` answer, read here: the same request rules (`from_request`)
    and the same direct read as `storyd resume --direct --detail` (configured staleness,
    detectors), so the fallback cannot answer differently from the CLI's."""
    from storyd.api.answers import direct
    from storyd.core.errors import StorydError, name_of
    from storyd.core.jsonio import loads
    from storyd.core.query import from_request

    try:
        query = from_request(fields, workspace)
    except StorydError as exc:
        return {"ok": False, "error": {"code": exc.code, "name": exc.name, "message": exc.message}}
    lock_timeout = fields.get("lockTimeout")
    if isinstance(lock_timeout, int | float) and not isinstance(lock_timeout, bool):
        query.lock_timeout = float(lock_timeout)
    output = direct(query)
    if output.code != 0:
        message = output.stderr[-1] if output.stderr else "no answer"
        return {"ok": False, "error": {"code": output.code, "name": name_of(output.code),
                                       "message": message}}
    body = loads(output.stdout)
    return {"ok": True, **(body if isinstance(body, dict) else {})}
