"""`storyd ping`: whether a daemon answers, with its version and pid (exit 69 if none)."""

from __future__ import annotations

import sys

from daemon.client import Client, DaemonUnavailable
from daemon.errors import UsageError
from daemon.flags import VALUE, parse
from daemon.paths import socket_path

__all__ = ["main"]

USAGE = "usage: storyd ping [--socket PATH]"


def main(argv: list[str]) -> int:
    """Print `ok: version pid socket`, or why no daemon answered."""
    try:
        flags = parse(argv, {"socket": VALUE}, USAGE)
    except UsageError as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code
    path = socket_path(flags.get("socket"))  # type: ignore[arg-type]
    try:
        with Client(path, timeout=1.0) as client:
            answer = client.ping()
    except DaemonUnavailable as exc:
        sys.stderr.write(f"{exc}\n")
        return 69
    sys.stdout.write(f"ok: storyd {answer.get('version')} pid {answer.get('pid')} on {path}\n")
    return 0
