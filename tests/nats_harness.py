"""A real `nats-server` for tests: JetStream on a free loopback port, a temporary store.

    NatsServer      one server process: start, stop (SIGTERM), start again on the
                    same port and store, as a machine's network would come and go
    nats_server     pytest fixture: a factory of NatsServer, all stopped at teardown
    fleet_config    the `[fleet]` table text for a machine
    NEEDS_NATS      skip marker: nats-server or nats-py missing (says which)
    free_port()     a loopback TCP port nothing listens on

Registered as a plugin by tests/conftest.py, so the fixture reaches every test module.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daemon_harness import wait_for

__all__ = ["NEEDS_NATS", "NatsServer", "fleet_config", "free_port"]

_MISSING = [
    what
    for what, ok in (
        ("nats-server (apt-get install nats-server)", shutil.which("nats-server")),
        ("nats-py (pip install 'storyd[fleet]')", importlib.util.find_spec("nats")),
    )
    if not ok
]
NEEDS_NATS = pytest.mark.skipif(bool(_MISSING), reason=f"needs {' and '.join(_MISSING)}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on just now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class NatsServer:
    """`nats-server [-js] -a 127.0.0.1 -p PORT -sd STORE` as a child process."""

    def __init__(self, root: Path, *, jetstream: bool = True, args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.store = root / f"nats-{self.port}"
        self.store.mkdir(parents=True, exist_ok=True)
        self.log = self.store / "server.log"
        self.jetstream = jetstream
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        argv = ["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store),
                *(["-js"] if self.jetstream else []), *self.args]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        wait_for(self._answers, 10, f"nats-server on port {self.port}")
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"nats-server exited {self.proc.returncode}:\n{self.log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
            return "Server is ready" in self.log.read_text(errors="replace")
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[Callable[..., NatsServer]]:
    """A factory: `nats_server(jetstream=True, args=())` -> a started NatsServer."""
    made: list[NatsServer] = []

    def make(*, jetstream: bool = True, args: tuple[str, ...] = ()) -> NatsServer:
        server = NatsServer(tmp_path, jetstream=jetstream, args=args)
        made.append(server)
        return server.start()

    yield make
    for server in made:
        server.stop()


def fleet_config(url: str, machine: str, *, heartbeat: float = 1.0, backlog: int = 10_000,
                 extra: str = "") -> str:
    """The `[fleet]` table of one machine."""
    return (f'[fleet]\nurl = "{url}"\nmachine = "{machine}"\nheartbeat = {heartbeat}\n'
            f"backlog = {backlog}\n{extra}")
