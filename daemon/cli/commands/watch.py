"""`storyd watch DIR ...`: ask the running daemon to watch workspaces (the socket's
`watch` op); it reads them before it answers, and prints how many units each holds.

The daemon's own rules hold: `limits.max_workspaces` refuses one over the cap (exit 64).
No daemon: exit 69. `storyd unwatch` is the reverse.
"""

from __future__ import annotations

import os
import sys

from storyd.core.errors import UsageError
from storyd.core.flags import HELP, MANY, VALUE, parse, text

__all__ = ["FLAGS", "USAGE", "main", "run"]

USAGE = "usage: storyd watch DIR ... [--workspace DIR ...] [--socket PATH] [--timeout MS]"
FLAGS = {"workspace": MANY, "socket": VALUE, "timeout": VALUE}


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """The positional folders, and the flags (each with its value) for `parse`."""
    folders: list[str] = []
    flags: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word.startswith("--") or word in HELP:
            flags.append(word)
            name = word[2:]
            if "=" not in name and FLAGS.get(name) in (VALUE, MANY) and index + 1 < len(argv):
                flags.append(argv[index + 1])
                index += 1
        else:
            folders.append(word)
        index += 1
    return folders, flags


def run(op: str, argv: list[str], usage: str, about: str | None = None) -> int:
    """Send `op` (watch or unwatch) for every folder named; print one line per folder."""
    from storyd.api.client import Client, DaemonUnavailable

    folders, rest = _split(argv)
    flags = parse(rest, FLAGS, usage, about)
    given = flags.get("workspace")
    folders += [str(w) for w in given] if isinstance(given, list) else []
    if not folders:
        raise UsageError(f"name at least one workspace folder\n{usage}")
    timeout = float(text(flags, "timeout") or "60000") / 1000
    failed = 0
    try:
        with Client(text(flags, "socket"), timeout=timeout) as client:
            for folder in folders:
                path = os.path.abspath(folder)
                answer = client.request(op, workspace=path)
                if not answer.get("ok"):
                    error = answer.get("error")
                    message = error.get("message") if isinstance(error, dict) else answer
                    sys.stderr.write(f"storyd {op}: {folder}: {message}\n")
                    failed += 1
                elif op == "watch":
                    print(f"watching {answer.get('workspace')}: {answer.get('units')} units")
                else:
                    was = "" if answer.get("was") else " (was not watched)"
                    print(f"not watching {answer.get('workspace')}{was}")
    except DaemonUnavailable as exc:
        sys.stderr.write(f"storyd {op}: no daemon answers ({exc})\n")  # as ping and stats
        return 69
    return 64 if failed else 0


def main(argv: list[str]) -> int:
    """Watch every folder named."""
    return run("watch", argv, USAGE)
