"""`storyd fleet status|events`: every machine's units and events, read from NATS.

status   units across all machines (the columns and bars of `status`, plus machine and
         age); a machine silent for three heartbeats is stale and listed apart; the
         same story in flight on two machines, or finished on one and open on another,
         is flagged first. --json prints {"machines", "units", "flags"}. --machine M
         reads only M's units (the flags then compare nothing across machines).
events   the event stream across machines, each event once: new ones as they come, or
         from --since (all, 30s, 10m, 2h, 7d, or an ISO time); --no-follow stops when
         no more are stored.

Both read the server named by [fleet] url in the configuration (or --url), with its
credentials and TLS settings; no storyd needs to run here. Needs the fleet extra:
pip install 'storyd[fleet]'. See docs/fleet.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import orjson

from storyd.core.errors import FlagError, SetupError, UsageError
from storyd.core.flags import HELP, SWITCH, VALUE, HelpRequested, parse

if TYPE_CHECKING:
    from storyd.fleet.config import Fleet

__all__ = ["SUBCOMMANDS", "main"]

USAGE = (
    "usage: storyd fleet status [--json] [--machine M] [--in-flight] [--config FILE] [--url URL]\n"
    "       storyd fleet events [--since WHEN] [--machine M] [--json] [--no-follow]\n"
    "                           [--config FILE] [--url URL]"
)
_COMMON = {"config": VALUE, "url": VALUE, "machine": VALUE, "json": SWITCH}
SUBCOMMANDS = {
    "status": {**_COMMON, "in-flight": SWITCH},
    "events": {**_COMMON, "since": VALUE, "no-follow": SWITCH},
}


def _fleet(flags: dict[str, object]) -> Fleet:
    from storyd import config
    from storyd.core.paths import config_path
    from storyd.fleet.config import Fleet

    cfg = config.load(str(flags["config"]) if flags.get("config") else None)
    fleet = cfg.fleet
    if flags.get("url"):
        url = str(flags["url"])
        if "@" in url.split("://", 1)[-1].split("/", 1)[0]:
            raise UsageError("--url: no user, password or token in the URL; use a creds file")
        fleet = Fleet(url=url) if fleet is None else _with_url(fleet, url)
    if fleet is None or not fleet.url:
        raise SetupError(
            f"no [fleet] url in {cfg.path or config_path()}: "
            "set one, or pass --url nats://HOST:PORT"
        )
    return fleet


def _with_url(fleet: Fleet, url: str) -> Fleet:
    from storyd.fleet.config import Fleet

    values = fleet.as_dict()
    values["url"] = url
    return Fleet(**values)  # type: ignore[arg-type]


def _reader() -> object:
    try:
        from storyd.fleet import reader
    except ImportError:
        raise SetupError("nats-py is not installed: pip install 'storyd[fleet]'") from None
    return reader


def _status(flags: dict[str, object]) -> int:
    from storyd.fleet import view

    reader = _reader()
    machine = str(flags["machine"]) if flags.get("machine") else None
    # with --machine only that machine's units are read: the cross-machine flags need all
    snap = reader.read_snapshot(_fleet(flags), machine)  # type: ignore[attr-defined]
    machines, shown = view.annotate(snap.machines, snap.units)
    found = view.flags(shown)
    if flags.get("in-flight"):
        shown = [u for u in shown if u.get("resumePoint") != "all-done"]
    if flags.get("json"):
        body = {"machines": machines, "units": shown, "flags": found}
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return 0
    color = (
        sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
    )
    sys.stdout.write(view.render(machines, shown, found, color))
    return 0


def _event_line(event: dict[str, object]) -> str:
    kind = str(event.get("event"))
    where = f"{event.get('machine')} {event.get('format')} {event.get('unit')}"
    finding = event.get("finding")
    if isinstance(finding, dict):
        detail = f"{finding.get('detector')}/{finding.get('code')}: {finding.get('message')}"
    elif kind == "changed":
        detail = f"{event.get('done')}/{event.get('total')} {event.get('resumePoint')}"
    else:
        detail = str(event.get("stateFile"))
    return f"{event.get('when')} {kind:<10} {where}  {detail}"


def _events(flags: dict[str, object]) -> int:
    reader = _reader()
    since = str(flags["since"]) if flags.get("since") else None
    events = reader.follow_events(  # type: ignore[attr-defined]
        _fleet(flags),
        since,
        machine=str(flags["machine"]) if flags.get("machine") else None,
        follow=not flags.get("no-follow"),
    )
    raw = bool(flags.get("json"))
    for event in events:
        sys.stdout.write((orjson.dumps(event).decode() if raw else _event_line(event)) + "\n")
        sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    """`status` or `events`."""
    if argv and argv[0] in HELP:
        raise HelpRequested(USAGE)
    if not argv or argv[0] not in SUBCOMMANDS:
        raise FlagError(USAGE)
    flags = parse(argv[1:], SUBCOMMANDS[argv[0]], USAGE)
    return _status(flags) if argv[0] == "status" else _events(flags)
