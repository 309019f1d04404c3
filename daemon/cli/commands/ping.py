"""`storyd ping`: whether a daemon answers, with its version and pid (exit 69 if none)."""

from __future__ import annotations

import sys

from storyd.cli.common import SOCKET_ONLY, ask_once

__all__ = ["FLAGS", "main"]

USAGE = "usage: storyd ping [--socket PATH]"
FLAGS = SOCKET_ONLY


def main(argv: list[str]) -> int:
    """Print `ok: version pid socket`, or why no daemon answered."""
    path, answer = ask_once(argv, USAGE, "ping")
    if answer is None:
        return 69
    sys.stdout.write(f"ok: storyd {answer.get('version')} pid {answer.get('pid')} on {path}\n")
    return 0
