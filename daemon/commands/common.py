"""What the reporting commands share: flags, asking the daemon, reading directly."""

from __future__ import annotations

import os
import sys

from daemon.errors import StorydError, UsageError
from daemon.flags import MANY, SWITCH, VALUE, parse

__all__ = ["REPORT_FLAGS", "Units", "fail", "parse_report_flags", "units"]

REPORT_FLAGS = {
    "workspace": MANY,
    "socket": VALUE,
    "direct": SWITCH,
    "json": SWITCH,
    "in-flight": SWITCH,
    "staleness": VALUE,
    "timeout": VALUE,
}


def fail(exc: StorydError, command: str) -> int:
    """Print a storyd error for a command and return its code."""
    sys.stderr.write(f"storyd {command}: {exc.message}\n")
    return exc.code


def parse_report_flags(
    argv: list[str], usage: str, extra: dict[str, str] | None = None
) -> dict[str, object]:
    """The shared flags of status, list and check."""
    return parse(argv, {**REPORT_FLAGS, **(extra or {})}, usage)


class Units:
    """Unit summaries with their findings, and where they came from."""

    def __init__(self, units: list[dict[str, object]], source: str, clock: str | None) -> None:
        self.units = units
        self.source = source
        self.clock = clock


def _workspaces(flags: dict[str, object]) -> list[str]:
    given = flags.get("workspace")
    return [os.path.realpath(str(w)) for w in given] if given else []  # type: ignore[attr-defined]


def units(flags: dict[str, object]) -> Units:
    """Ask the daemon's `list`; without a daemon (or with --direct) scan the workspaces here."""
    from daemon.client import Client, DaemonUnavailable

    workspaces = _workspaces(flags)
    in_flight = bool(flags.get("in-flight"))
    if not flags.get("direct") and not flags.get("staleness"):
        timeout = float(str(flags.get("timeout") or "2000")) / 1000
        try:
            with Client(flags.get("socket"), timeout=timeout) as client:  # type: ignore[arg-type]
                found: list[dict[str, object]] = []
                clock = None
                for ws in workspaces or [None]:
                    fields: dict[str, object] = {"detail": True, "inFlight": in_flight}
                    if ws is not None:
                        client.request("watch", workspace=ws)
                        fields["workspace"] = ws
                    answer = client.request("list", **fields)
                    if not answer.get("ok"):
                        error = answer.get("error") or {}
                        raise UsageError(str(error.get("message")))  # type: ignore[union-attr]
                    found.extend(answer["units"])  # type: ignore[arg-type]
                    clock = str(answer.get("clock"))
                return Units(found, "daemon", clock)
        except DaemonUnavailable:
            pass
    from daemon import config
    from daemon.wiring import scan_directly

    cfg = config.load()
    targets = workspaces or [os.getcwd()]
    entries = scan_directly(targets, cfg, str(flags.get("staleness") or "") or None)
    summaries = [e.summary(detail=True) for e in entries]
    if in_flight:
        summaries = [u for u in summaries if u["resumePoint"] != "all-done"]
    summaries.sort(key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"])))
    return Units(summaries, "direct", None)
