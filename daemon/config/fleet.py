"""[fleet]: where and as whom this machine publishes (docs/fleet.md lists every key).

The table's values and their check live with the rest of the configuration, so that
checking a file asks nothing of the fleet's package; storyd.fleet.config re-exports them.
No secret is ever in the file: `credentials` names a NATS creds file (JWT and nkey
seed) and `nkey` an nkey seed file; a URL with a user, password or token is refused.
"""

from __future__ import annotations

import os
import re
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storyd.config.checker import Checker

__all__ = [
    "BACKLOG",
    "FLEET_KEYS",
    "HEARTBEAT",
    "Fleet",
    "check",
    "default_machine",
]

FLEET_KEYS = (
    "backlog",
    "credentials",
    "heartbeat",
    "machine",
    "nkey",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "url",
)
BACKLOG = (int, 10_000, 10, 10_000_000)  # events kept while the server is away
HEARTBEAT = (float, 30.0, 1.0, 3600.0)  # seconds between heartbeats
_MACHINE = r"[A-Za-z0-9_-]{1,64}"
_SCHEMES = ("nats", "tls", "ws", "wss")


def default_machine() -> str:
    """The host name, cut to what a NATS subject token and KV key may hold."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname().split(".")[0])[:64]
    return name or "localhost"


class Fleet:
    """The [fleet] table's values (paths absolute; None: not set)."""

    __slots__ = FLEET_KEYS

    def __init__(
        self,
        url: str = "",
        machine: str | None = None,
        credentials: str | None = None,
        nkey: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        backlog: int = int(BACKLOG[1]),
        heartbeat: float = HEARTBEAT[1],
    ) -> None:
        self.url = url
        self.machine = machine or default_machine()
        self.credentials = credentials
        self.nkey = nkey
        self.tls_ca = tls_ca
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.backlog = backlog
        self.heartbeat = heartbeat

    def as_dict(self) -> dict[str, object]:
        """The keys that are set, by name (what `config show` prints)."""
        values = {name: getattr(self, name) for name in FLEET_KEYS}
        return {k: v for k, v in values.items() if v is not None}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fleet) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Fleet({self.as_dict()!r})"


def _url(checker: Checker, value: object) -> str:
    from urllib.parse import urlsplit

    field = "fleet.url"
    if not isinstance(value, str) or not value:
        checker.problem(field, "expected a URL such as nats://host:4222")
        return ""
    for part in value.split(","):
        try:
            parsed = urlsplit(part.strip())
            parsed.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            checker.problem(field, f"{part!r} is not a URL: {exc}")
            return ""
        if parsed.scheme not in _SCHEMES or not parsed.hostname:
            schemes = ", ".join(f"{s}://" for s in _SCHEMES)
            checker.problem(field, f"{part!r} is not a server URL (expected {schemes}HOST:PORT)")
            return ""
        if parsed.username or parsed.password:
            checker.problem(
                field,
                "a user, password or token in the URL is a secret in the configuration "
                "file: use credentials = FILE (a NATS creds file) or nkey = FILE",
            )
            return ""
    return value


def _path(checker: Checker, name: str, value: object) -> str | None:
    field = f"fleet.{name}"
    if not isinstance(value, str) or not value:
        checker.problem(field, "expected a file path")
        return None
    return os.path.normpath(os.path.join(os.path.expanduser("~"), os.path.expanduser(value)))


def check(checker: Checker, table: dict[str, object]) -> Fleet:
    """The [fleet] table as Fleet, each problem recorded on the checker."""
    checker.unknown(table, FLEET_KEYS, "fleet.")
    fleet = Fleet()
    if "url" not in table:
        checker.problem("fleet", "url is required (the NATS server, e.g. nats://host:4222)")
    else:
        fleet.url = _url(checker, table["url"])
    if "machine" in table:
        machine = table["machine"]
        if isinstance(machine, str) and re.fullmatch(_MACHINE, machine):
            fleet.machine = machine
        else:
            checker.problem(
                "fleet.machine", "expected 1 to 64 letters, digits, '-' or '_' (a subject token)"
            )
    for name in ("credentials", "nkey", "tls_ca", "tls_cert", "tls_key"):
        if name in table:
            setattr(fleet, name, _path(checker, name, table[name]))
    if fleet.credentials and fleet.nkey:
        checker.problem("fleet.nkey", "give credentials or nkey, not both")
    if (fleet.tls_cert is None) != (fleet.tls_key is None):
        checker.problem("fleet.tls_cert", "tls_cert and tls_key go together")
    if "backlog" in table:
        fleet.backlog = int(checker.number("fleet.backlog", table["backlog"], BACKLOG))
    if "heartbeat" in table:
        fleet.heartbeat = checker.number("fleet.heartbeat", table["heartbeat"], HEARTBEAT)
    return fleet
