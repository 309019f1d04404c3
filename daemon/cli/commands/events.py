"""`storyd events`: follow the daemon's event stream (changed, removed, drift, resolved).

Each drift or resolved line shows its finding's severity, coloured on a terminal
(NO_COLOR, non-empty, turns colour off). When the daemon goes away (a restart, a
reload by systemd) the stream waits for it and subscribes again with `since` set to
the last clock seen, so nothing in between is lost; a new daemon cannot replay its
predecessor's events and answers with the full list of units instead (`fresh`).
`--once` ends at the first disconnection, exit 0, as 0.2 did. No daemon at the start:
exit 69.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import orjson

from storyd.api.client import Client, DaemonUnavailable
from storyd.api.refusals import refusal
from storyd.core.flags import SWITCH, VALUE, parse, text

__all__ = ["format_event", "main"]

USAGE = (
    "usage: storyd events [--workspace DIR] [--since CLOCK] [--json] [--once] [--socket PATH]"
)
FLAGS = {"workspace": VALUE, "since": VALUE, "json": SWITCH, "once": SWITCH, "socket": VALUE}
_TONES = {"error": "error", "warning": "warning", "info": "info", "resolved": "done",
          "removed": "dim"}  # an event's tone: its colour in storyd.api.render
_RETRY = (0.1, 0.2, 0.5, 1.0, 2.0)  # seconds between reconnection attempts, then 2 s


def _paint(text: str, tone: str | None, color: bool) -> str:
    from storyd.api.render import paint

    shade = _TONES.get(tone or "")
    return paint(text, shade, color) if shade else text


def format_event(event: dict[str, object], color: bool = False) -> str:
    """One human-readable line for an event: drift and resolved carry the severity."""
    stamp = time.strftime("%H:%M:%S")
    kind = str(event.get("event"))
    where = f"{event.get('format')} {event.get('unit')}"
    tone: str | None = None
    severity = ""
    if kind in ("drift", "resolved"):
        finding = event.get("finding")
        if not isinstance(finding, dict):
            finding = {}
        severity = str(finding.get("severity") or "")
        tone = severity if kind == "drift" else "resolved"
        detail = f"{finding.get('detector')}/{finding.get('code')}: {finding.get('message')}"
    elif kind == "changed":
        detail = f"{event.get('done')}/{event.get('total')} {event.get('resumePoint')}"
    else:
        detail = str(event.get("stateFile"))
        tone = "removed" if kind == "removed" else None
    head = f"{kind:<8} {severity:<7}" if severity else f"{kind:<16}"
    return f"{stamp} {_paint(head, tone, color)} {where}  {detail}"


def _subscribe(
    client: Client, fields: dict[str, object], raw: bool
) -> Iterator[dict[str, object]]:
    """Subscribe; print the answer; return the stream."""
    stream = client.subscribe(**fields)
    first = next(stream)
    if not first.get("ok"):
        raise refusal(first)
    if raw:
        sys.stdout.write(orjson.dumps(first).decode() + "\n")
    else:
        again = "resubscribed" if "since" in fields else "subscribed"
        fresh = (
            " (fresh: replay impossible, full list follows)" if first.get("freshInstance") else ""
        )
        sys.stdout.write(f"{again} at {first.get('clock')}{fresh}\n")
        units = first.get("units")
        if isinstance(units, list) and units and "since" in fields:
            sys.stdout.write(f"  {len(units)} units now (storyd status shows them)\n")
    sys.stdout.flush()
    if first.get("clock"):
        fields["since"] = first["clock"]
    return stream


def _follow(path: str | None, fields: dict[str, object], raw: bool, color: bool) -> None:
    """Print events until the connection ends (the caller decides whether to go on)."""
    with Client(path, timeout=2.0) as client:
        stream = _subscribe(client, fields, raw)
        try:
            for event in stream:
                sys.stdout.write(
                    (orjson.dumps(event).decode() if raw else format_event(event, color)) + "\n"
                )
                sys.stdout.flush()
                if event.get("clock"):
                    fields["since"] = event["clock"]
        except OSError:
            pass  # reset by a daemon that went away: as a closed stream


def _reconnect(path: str | None, fields: dict[str, object], raw: bool, color: bool) -> None:
    """Wait for a daemon again, forever (Ctrl-C ends it), then follow it."""
    attempt = 0
    while True:
        time.sleep(_RETRY[min(attempt, len(_RETRY) - 1)])
        attempt += 1
        try:
            _follow(path, fields, raw, color)
        except DaemonUnavailable:
            continue
        sys.stderr.write("storyd events: the daemon went away; waiting for it\n")
        sys.stderr.flush()
        attempt = 0


def main(argv: list[str]) -> int:
    """Subscribe and print until interrupted (or, with --once, the daemon goes away)."""
    from storyd.cli.terminal import color_on

    flags = parse(argv, FLAGS, USAGE)
    fields: dict[str, object] = {}
    if flags.get("workspace"):
        fields["workspace"] = os.path.realpath(str(flags["workspace"]))
    if flags.get("since"):
        fields["since"] = flags["since"]
    raw = bool(flags.get("json"))
    color = not raw and color_on(sys.stdout)
    path = text(flags, "socket")
    try:
        _follow(path, fields, raw, color)
    except DaemonUnavailable as exc:
        sys.stderr.write(f"storyd events: {exc}\n")
        return 69
    if flags.get("once"):
        return 0
    sys.stderr.write("storyd events: the daemon went away; waiting for it\n")
    sys.stderr.flush()
    _reconnect(path, fields, raw, color)
    return 0
