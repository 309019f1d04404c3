"""[fleet]: where and as whom this machine publishes (docs/fleet.md lists every key).

The table's values and their check are storyd.config.fleet's (the configuration checks
a file without importing this package); here is what only the fleet knows: whether the
settings will work (the NATS client installed, the secret files private).
"""

from __future__ import annotations

import os

from storyd.config.fleet import BACKLOG, FLEET_KEYS, HEARTBEAT, Fleet, check, default_machine

__all__ = [
    "BACKLOG",
    "FLEET_KEYS",
    "HEARTBEAT",
    "Fleet",
    "check",
    "default_machine",
    "warnings",
]


def warnings(fleet: Fleet) -> list[tuple[str, str]]:
    """Valid settings that will not work as meant: (field, message) pairs."""
    import importlib.util

    found = []
    if importlib.util.find_spec("nats") is None:
        found.append(("fleet", "nats-py is not installed: pip install 'storyd[fleet]'"))
    for name in ("credentials", "nkey", "tls_ca", "tls_cert", "tls_key"):
        path = getattr(fleet, name)
        if path and not os.path.isfile(path):
            found.append((f"fleet.{name}", f"{path} is not a file"))
        elif path and name in ("credentials", "nkey", "tls_key") and os.stat(path).st_mode & 0o077:
            found.append((f"fleet.{name}", f"{path} holds a secret and other users may read it"))
    return found
