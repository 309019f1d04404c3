"""`storyd events`: follow the daemon's event stream (changed, removed, drift, resolved)."""

from __future__ import annotations

import os
import sys
import time

import orjson

from daemon.client import Client, DaemonUnavailable
from daemon.commands.common import refusal
from daemon.flags import SWITCH, VALUE, parse, text

__all__ = ["format_event", "main"]

USAGE = "usage: storyd events [--workspace DIR] [--since CLOCK] [--json] [--socket PATH]"
FLAGS = {"workspace": VALUE, "since": VALUE, "json": SWITCH, "socket": VALUE}


def format_event(event: dict[str, object]) -> str:
    """One human-readable line for an event."""
    stamp = time.strftime("%H:%M:%S")
    kind = str(event.get("event"))
    where = f"{event.get('format')} {event.get('unit')}"
    if kind in ("drift", "resolved"):
        finding = event.get("finding")
        if not isinstance(finding, dict):
            finding = {}
        detail = f"{finding.get('detector')}/{finding.get('code')}: {finding.get('message')}"
    elif kind == "changed":
        detail = f"{event.get('done')}/{event.get('total')} {event.get('resumePoint')}"
    else:
        detail = str(event.get("stateFile"))
    return f"{stamp} {kind:<8} {where}  {detail}"


def main(argv: list[str]) -> int:
    """Subscribe and print until interrupted or the daemon goes away."""
    flags = parse(argv, FLAGS, USAGE)
    fields: dict[str, object] = {}
    if flags.get("workspace"):
        fields["workspace"] = os.path.realpath(str(flags["workspace"]))
    if flags.get("since"):
        fields["since"] = flags["since"]
    raw = bool(flags.get("json"))
    try:
        with Client(text(flags, "socket"), timeout=2.0) as client:
            stream = client.subscribe(**fields)
            first = next(stream)
            if not first.get("ok"):
                raise refusal(first)
            if raw:
                sys.stdout.write(orjson.dumps(first).decode() + "\n")
            else:
                fresh = (
                    " (fresh: replay impossible, full list follows)"
                    if first.get("freshInstance")
                    else ""
                )
                sys.stdout.write(f"subscribed at {first.get('clock')}{fresh}\n")
            sys.stdout.flush()
            for event in stream:
                sys.stdout.write(
                    (orjson.dumps(event).decode() if raw else format_event(event)) + "\n"
                )
                sys.stdout.flush()
    except DaemonUnavailable as exc:
        sys.stderr.write(f"storyd events: {exc}\n")
        return 69
    return 0
