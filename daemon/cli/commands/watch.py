"""`storyd watch DIR ...`: ask the running daemon to watch workspaces (the socket's
`watch` op); it reads them before it answers, and prints how many units each holds.

The daemon's own rules hold: `limits.max_workspaces` refuses one over the cap (exit 64).
No daemon: exit 69. `storyd unwatch` is the reverse.
"""

from __future__ import annotations

import sys

from storyd.cli.common import seconds
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
    from storyd.api import watch
    from storyd.api.client import DaemonUnavailable

    folders, rest = _split(argv)
    flags = parse(rest, FLAGS, usage, about)
    given = flags.get("workspace")
    folders += [str(w) for w in given] if isinstance(given, list) else []
    if not folders:
        raise UsageError(f"name at least one workspace folder\n{usage}")
    timeout = seconds(text(flags, "timeout"), "60000")
    asked = watch.watch if op == "watch" else watch.unwatch
    failed = 0
    try:
        for answer in asked(folders, text(flags, "socket"), timeout):
            if answer.error is not None:
                sys.stderr.write(f"storyd {op}: {answer.folder}: {answer.error}\n")
                failed += 1
            elif op == "watch":
                print(f"watching {answer.workspace}: {answer.units} units")
            else:
                was = "" if answer.was else " (was not watched)"
                print(f"not watching {answer.workspace}{was}")
    except DaemonUnavailable as exc:
        sys.stderr.write(f"storyd {op}: no daemon answers ({exc})\n")  # as ping and stats
        return exc.code
    return 64 if failed else 0


def main(argv: list[str]) -> int:
    """Watch every folder named."""
    return run("watch", argv, USAGE)
