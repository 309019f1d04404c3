"""What the reporting commands share: flags, asking the daemon, reading directly.

Errors are raised, not printed: daemon/cli/main.py reports a StorydError as
`storyd <command>: <message>` and exits with its code.
"""

from __future__ import annotations

import os
import sys

from storyd.core.errors import FlagError, SetupError, UsageError
from storyd.core.flags import MANY, SWITCH, VALUE, parse, text

__all__ = [
    "REPORT_FLAGS",
    "SOCKET_ONLY",
    "Units",
    "ask_once",
    "config_file",
    "parse_prefixed",
    "refusal",
    "units",
    "unreadable_line",
    "unreadable_of",
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
    path = text(flags, "config")
    if path is not None and not os.path.isfile(path):
        raise SetupError(f"--config {path}: no such file")
    return path


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


def refusal(answer: dict[str, object]) -> UsageError:
    """The error to raise for a daemon's `ok: false` answer: its message, as a UsageError."""
    error = answer.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return UsageError(str(message))


class Units:
    """Unit summaries with their findings, where they came from, and the state files that
    do not parse (`unreadable`: the `list` answer's entries, each with workspace,
    stateFile, format, error, since and units, the last good units still served)."""

    def __init__(
        self,
        units: list[dict[str, object]],
        source: str,
        clock: str | None,
        unreadable: list[dict[str, object]] | None = None,
    ) -> None:
        self.units = units
        self.source = source
        self.clock = clock
        self.unreadable = unreadable or []


def unreadable_of(payload: dict[str, object]) -> list[dict[str, object]]:
    """The `unreadable` entries of a `list` answer (none from a daemon that has none)."""
    found = payload.get("unreadable", [])
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def unreadable_line(entry: dict[str, object], *, full_path: bool = False) -> str:
    """`UNREADABLE <stateFile>: <error>`, and the last good units still served."""
    where = str(entry.get("stateFile"))
    if full_path:
        where = f"{entry.get('workspace')}/{where}"
    line = f"UNREADABLE {where}: {entry.get('error')}"
    served = entry.get("units")
    if isinstance(served, int) and served:
        since = f" since {entry['since']}" if entry.get("since") else ""
        line += f" (serving {served} last good unit{'s' * (served != 1)}{since})"
    return line


def _workspaces(flags: dict[str, object]) -> list[str]:
    given = flags.get("workspace")
    return [os.path.realpath(str(w)) for w in given] if isinstance(given, list) else []


def _label() -> str:
    """`storyd <command>` for the progress line."""
    command = os.path.basename(sys.argv[1]) if len(sys.argv) > 1 else "report"
    return f"storyd {command}"


def _watch(path: str | None, workspace: str, timeout: float, quiet: bool) -> dict[str, object]:
    """Ask the daemon to watch `workspace` as a query would. Its first read of a large
    workspace takes seconds (17 s at 3,000 stories): the reply is awaited for up to 5
    minutes once a ping has shown the daemon alive, with a progress line counting the
    units it has read (from `stats`, on a connection of its own)."""
    import threading

    from storyd.api.client import Client, DaemonUnavailable
    from storyd.cli.terminal import Progress

    with Client(path, timeout=timeout) as quick:
        quick.request("ping")  # a stopped daemon fails here, in --timeout

        def read_so_far() -> int:
            warm = quick.request("stats").get("warm")
            return int(warm.get("unitsRead", 0)) if isinstance(warm, dict) else 0

        base = read_so_far()
        with Progress(_label(), quiet=quiet) as progress:
            stop = threading.Event()

            def poll() -> None:
                while not stop.wait(0.25):
                    try:
                        progress.count = max(0, read_so_far() - base)
                    except DaemonUnavailable:
                        return

            poller = threading.Thread(target=poll, name="storyd-watch-progress", daemon=True)
            if progress.on:
                poller.start()
            try:
                with Client(path, timeout=max(timeout, 300.0)) as slow:
                    return slow.request("watch", workspace=workspace, auto=True)
            finally:
                stop.set()
                if poller.is_alive():
                    poller.join(timeout=2)


def units(flags: dict[str, object]) -> Units:
    """Ask the daemon's `list`; without a daemon (or with --direct) scan the workspaces here.

    A workspace the daemon declines to watch (`auto_watch = false`, or its workspace cap
    reached: the `watch` op's `auto` answer) is scanned here too, with a note on stderr;
    the daemon is never made to watch against its configuration.
    """
    from storyd.api.client import Client, DaemonUnavailable

    workspaces = _workspaces(flags)
    in_flight = bool(flags.get("in-flight"))
    if not flags.get("direct") and not flags.get("staleness"):
        timeout = float(str(flags.get("timeout") or "2000")) / 1000
        try:
            with Client(text(flags, "socket"), timeout=timeout) as client:
                found: list[dict[str, object]] = []
                broken: list[dict[str, object]] = []
                declined: list[str] = []
                clock = None
                asked: list[str | None] = list(workspaces) if workspaces else [None]
                for ws in asked:
                    fields: dict[str, object] = {"detail": True, "inFlight": in_flight}
                    if ws is not None:
                        watched = _watch(
                            text(flags, "socket"), ws, timeout, bool(flags.get("quiet"))
                        )
                        if not watched.get("ok"):
                            raise refusal(watched)
                        if watched.get("watching") is False:
                            sys.stderr.write(
                                f"note: the daemon does not watch {ws} "
                                f"({watched.get('reason')}); reading it directly\n"
                            )
                            declined.append(ws)
                            continue
                        fields["workspace"] = ws
                    answer = client.request("list", **fields)
                    if not answer.get("ok"):
                        raise refusal(answer)
                    if isinstance(answer.get("warm"), dict):
                        raise DaemonUnavailable("the daemon's cache is still warming")
                    listed = answer["units"]
                    assert isinstance(listed, list), "the list op answers with a units array"
                    found.extend(listed)
                    broken.extend(unreadable_of(answer))
                    clock = str(answer.get("clock"))
            if not declined:
                return Units(found, "daemon", clock, broken)
            read, more = _scan(declined, flags, in_flight)
            source = "direct" if len(declined) == len(asked) else "daemon+direct"
            return Units(_ordered(found + read), source, clock, broken + more)
        except DaemonUnavailable:
            pass
    read, broken = _scan(workspaces or [os.getcwd()], flags, in_flight)
    return Units(read, "direct", None, broken)


def _ordered(summaries: list[dict[str, object]]) -> list[dict[str, object]]:
    """Unit summaries in the daemon's `list` order (workspace, state file, unit)."""
    return sorted(
        summaries, key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"]))
    )


def _scan(
    targets: list[str], flags: dict[str, object], in_flight: bool
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Read the workspaces here, with the configured detectors: the unit summaries, and
    the state files that do not parse."""
    from storyd import config
    from storyd.api.scan import scan_workspaces
    from storyd.cli.terminal import Progress

    cfg = config.load(config_file(flags))
    with Progress(_label(), quiet=bool(flags.get("quiet"))) as progress:
        progress.count = 0

        def counted() -> None:
            progress.count = (progress.count or 0) + 1

        staleness = str(flags.get("staleness") or "") or None
        units, unreadable = scan_workspaces(
            targets, cfg, staleness, counted if progress.on else None
        )
    summaries: list[dict[str, object]] = [dict(u) for u in units]
    if in_flight:
        summaries = [u for u in summaries if u["resumePoint"] != "all-done"]
    return _ordered(summaries), unreadable
