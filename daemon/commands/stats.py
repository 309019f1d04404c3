"""`storyd stats`: the daemon's counters as one JSON object."""

from __future__ import annotations

import sys

import orjson

from daemon.client import Client, DaemonUnavailable
from daemon.errors import UsageError
from daemon.flags import VALUE, parse

__all__ = ["main"]

USAGE = "usage: storyd stats [--socket PATH]"


def main(argv: list[str]) -> int:
    """Print the stats answer, pretty."""
    try:
        flags = parse(argv, {"socket": VALUE}, USAGE)
    except UsageError as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code
    try:
        with Client(flags.get("socket"), timeout=1.0) as client:  # type: ignore[arg-type]
            answer = client.request("stats")
    except DaemonUnavailable as exc:
        sys.stderr.write(f"{exc}\n")
        return 69
    sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0
