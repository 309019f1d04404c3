"""nats.connect options from [fleet], and one clear line for what went wrong.

Imported only by the publisher's thread and the `storyd fleet` readers: it imports
`nats` (the optional extra).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors

if TYPE_CHECKING:
    from storyd.fleet.config import Fleet

__all__ = ["describe", "options"]


def options(fleet: Fleet, *, reconnect: bool, timeout: float = 2.0) -> dict[str, Any]:
    """Keyword arguments for `nats.connect` (credentials and TLS from their files)."""
    found: dict[str, Any] = {
        "servers": [u.strip() for u in fleet.url.split(",")],
        "name": f"storyd {fleet.machine}",
        "connect_timeout": timeout,
        "allow_reconnect": reconnect,
        # nats-py gives up on a first connect only after a positive number of attempts
        "max_reconnect_attempts": -1 if reconnect else 1,
        "reconnect_time_wait": 1 if reconnect else 0.1,
    }
    if fleet.credentials:
        found["user_credentials"] = fleet.credentials
    if fleet.nkey:
        found["nkeys_seed"] = fleet.nkey
    if fleet.tls_ca or fleet.tls_cert or fleet.url.startswith("tls://"):
        context = ssl.create_default_context(cafile=fleet.tls_ca)
        if fleet.tls_cert:
            context.load_cert_chain(fleet.tls_cert, fleet.tls_key)
        found["tls"] = context
    return found


def describe(exc: BaseException, fleet: Fleet) -> str:
    """One line saying what went wrong and what to do, without a traceback."""
    url = fleet.url
    if isinstance(exc, nats.errors.AuthorizationError) or "authoriz" in str(exc).lower():
        given = fleet.credentials or fleet.nkey
        what = f"the credentials in {given}" if given else "a connection without credentials"
        return f"{url} refused {what} (authorization violation): check fleet.credentials"
    if isinstance(exc, (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError,
                        nats.js.errors.NoStreamResponseError)):
        return f"{url} has no JetStream: start nats-server with -js (or enable jetstream)"
    if isinstance(exc, nats.js.errors.APIError):
        return f"{url}: JetStream refused: {exc.description or exc}"
    if isinstance(exc, (nats.errors.NoServersError, ConnectionRefusedError)):
        return f"cannot reach {url}: no server answers (connection refused or timed out)"
    if isinstance(exc, (nats.errors.UnexpectedEOF, nats.errors.StaleConnectionError,
                        nats.errors.ConnectionClosedError)):
        return f"lost the connection to {url}; reconnecting"
    if isinstance(exc, (nats.errors.TimeoutError, TimeoutError)):
        return f"{url} did not answer in time"
    if isinstance(exc, ssl.SSLError):
        return f"{url}: TLS failed: {exc.reason or exc}"
    if isinstance(exc, OSError):
        return f"cannot reach {url}: {exc.strerror or exc}"
    text = str(exc) or type(exc).__name__
    return f"{url}: {text}"
