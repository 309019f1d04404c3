"""What the reporting commands share: their flags, turned into calls of storyd.api.

Errors are raised, not printed: daemon/cli/__init__.py reports a StorydError as
`storyd <command>: <message>` and exits with its code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from storyd.core.errors import FlagError, UsageError
from storyd.core.flags import MANY, SWITCH, VALUE, parse, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.units import Units
    from storyd.cli.terminal import Progress

__all__ = [
    "REPORT_FLAGS",
    "SOCKET_ONLY",
    "ask_once",
    "config_file",
    "parse_prefixed",
    "progress_line",
    "report_units",
    "seconds",
]

REPORT_FLAGS = {
    "workspace": MANY,
    "socket": VALUE,
    "direct": SWITCH,
    "in-flight": SWITCH,
    "staleness": VALUE,
    "timeout": VALUE,
    "config": VALUE,
    "quiet": SWITCH,  # no progress line on stderr
}
SOCKET_ONLY = {"socket": VALUE}


def parse_prefixed(argv: list[str], spec: dict[str, str], usage: str) -> dict[str, object]:
    """`parse`, but a refused flag is printed after `storyd <command>: ` like other errors.

    The CLI prints a FlagError as it is; status, list, check and demo have always put the
    prefix before theirs too, so here it becomes a plain UsageError.
    """
    try:
        return parse(argv, spec, usage)
    except FlagError as exc:
        raise UsageError(exc.message) from None


def config_file(flags: dict[str, object]) -> str | None:
    """`--config FILE`, None when not given; a named file that does not exist is an error
    (78), not a silent fall back to the defaults."""
    from storyd.api.units import config_file as checked

    return checked(text(flags, "config"))


def ask_once(argv: list[str], usage: str, op: str) -> tuple[str, dict[str, object] | None]:
    """Parse `--socket` and send one `op` request (ping and stats).

    Returns the socket path and the answer; the answer is None, with the reason printed,
    when no daemon answered.
    """
    from storyd.api.client import Client, DaemonUnavailable
    from storyd.core.paths import socket_path

    flags = parse(argv, SOCKET_ONLY, usage)
    path = socket_path(text(flags, "socket"))
    try:
        with Client(path, timeout=1.0) as client:
            return path, client.request(op)
    except DaemonUnavailable as exc:
        sys.stderr.write(f"{exc}\n")
        return path, None


def report_units(flags: dict[str, object]) -> Units:
    """status, list and check: the REPORT_FLAGS as a `storyd.api.units.units` call, with
    the progress line on a terminal; the notes (a workspace the daemon declined) go to
    stderr before anything is printed."""
    from storyd.api.units import units

    given = flags.get("workspace")
    found = units(
        [str(w) for w in given] if isinstance(given, list) else None,
        in_flight=bool(flags.get("in-flight")),
        direct=bool(flags.get("direct")),
        staleness=str(flags.get("staleness") or "") or None,
        socket=text(flags, "socket"),
        timeout=seconds(text(flags, "timeout"), "2000"),
        config=text(flags, "config"),
        progress=progress_line(bool(flags.get("quiet"))),
    )
    for note in found.notes:
        sys.stderr.write(note + "\n")
    return found


def seconds(given: str | None, default: str) -> float:
    """`--timeout MS` in seconds (`default` when not given); a UsageError when it is not
    a number."""
    try:
        return float(given or default) / 1000
    except ValueError:
        raise UsageError(f"--timeout {given}: expected milliseconds") from None


def progress_line(quiet: bool) -> Callable[[], Progress]:
    """A factory of `storyd <command>` progress lines on stderr (daemon/cli/terminal.py)."""
    from storyd.cli.terminal import Progress

    command = os.path.basename(sys.argv[1]) if len(sys.argv) > 1 else "report"
    return lambda: Progress(f"storyd {command}", quiet=quiet)
