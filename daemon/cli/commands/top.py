"""`storyd top`: every watched unit on one screen, what needs a person first (errors,
warnings, work in progress, done), following the daemon's events.

The live view needs the `tui` extra (`pip install 'storyd[tui]'`, Textual). `--once`
prints one frame as plain text and exits: no escape sequences unless stdout is a
terminal (NO_COLOR, non-empty, turns colour off), the width of the terminal or
$COLUMNS (80 otherwise), every unit (`--height N` keeps the first N lines). It needs
no extra. When stdout is not a terminal, `storyd top` prints that frame too.
`--fleet` shows every machine's units from NATS (the fleet extra too), live: the view
follows the fleet's bucket and reconnects when the server comes back.

Keys in the live view: Enter a unit's detail, `r` preview its reconcile, `a` apply it
(asks first), `/` filter, `?` the keys, `q` quit.
"""

from __future__ import annotations

import os
import shutil
import sys

from storyd.cli.common import REPORT_FLAGS, parse_prefixed, report_units
from storyd.core.errors import StorydError, UsageError
from storyd.core.flags import SWITCH, VALUE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.fleet.feed import FleetFeed

__all__ = ["FLAGS", "main"]

USAGE = (
    "usage: storyd top [--once] [--height N] [--workspace DIR ...] [--in-flight] [--direct]\n"
    "                  [--config FILE] [--socket PATH] [--timeout MS] [--staleness git|mtime]\n"
    "       storyd top --fleet [--once] [--url URL] [--config FILE] [--height N] [--in-flight]"
)
FLAGS = {
    **{k: v for k, v in REPORT_FLAGS.items() if k != "quiet"},
    "once": SWITCH,
    "height": VALUE,
    "fleet": SWITCH,
    "url": VALUE,
}


def _height(flags: dict[str, object]) -> int | None:
    given = flags.get("height")
    if given is None:
        return None
    try:
        value = int(str(given))
    except ValueError:
        value = 0
    if value < 5:
        raise UsageError(f"--height: a number of lines, 5 or more, not {given!r}\n{USAGE}")
    return value


def _once(flags: dict[str, object]) -> int:
    from storyd.api.sessionlist import sessions_in_flight
    from storyd.api.topview import frame
    from storyd.cli.terminal import color_on

    height = _height(flags)
    flags["quiet"] = True  # a frame, not a progress line
    found = report_units(flags)
    from storyd.api.claimview import attach

    attach(found.units)
    if not found.units and not flags.get("workspace") and found.source == "direct":
        sys.stderr.write(
            "storyd top: no daemon answers and no --workspace was given: "
            "start one (storyd serve) or name a workspace\n"
        )
    width = shutil.get_terminal_size((80, 24)).columns
    sys.stdout.write(
        frame(
            found.units, width=width, height=height, color=color_on(sys.stdout),
            unreadable=found.unreadable, source=found.source, sessions=sessions_in_flight(),
        )
    )  # fmt: skip
    return 0


class Unavailable(StorydError):
    """The live view's extra is not installed."""

    code = 69
    name = "EX_UNAVAILABLE"


def _fleet_once(flags: dict[str, object]) -> int:
    """Every machine's units from NATS (storyd[fleet], the `[fleet]` url or --url)."""
    from storyd.api.topview import frame
    from storyd.cli.commands.fleet import _fleet, _reader
    from storyd.cli.terminal import color_on
    from storyd.fleet.feed import source_line

    height = _height(flags)
    reader = _reader()
    snap = reader.read_snapshot(_fleet(flags))  # type: ignore[attr-defined]
    shown = list(snap.units)
    if flags.get("in-flight"):
        shown = [u for u in shown if u.get("resumePoint") != "all-done"]
    for unit in shown:
        unit.setdefault("error", None)
    width = shutil.get_terminal_size((80, 24)).columns
    sys.stdout.write(frame(shown, width=width, height=height, color=color_on(sys.stdout),
                           source=source_line(len(snap.machines))))  # fmt: skip
    return 0


def _fleet_feed(flags: dict[str, object]) -> FleetFeed:
    """The live view's source for --fleet: every machine's units from the bucket."""
    from storyd.cli.commands.fleet import _fleet, _reader

    _reader()  # nats-py is there, else the pip line
    fleet = _fleet(flags)
    from storyd.fleet.feed import FleetFeed

    return FleetFeed(fleet)


def main(argv: list[str]) -> int:
    """One frame (`--once`, or stdout not a terminal), else the live view."""
    flags = parse_prefixed(argv, FLAGS, USAGE)
    live = not flags.get("once") and sys.stdout.isatty()
    if flags.get("fleet") and not live:
        return _fleet_once(flags)
    if flags.get("url") and not flags.get("fleet"):
        raise UsageError(f"--url goes with --fleet\n{USAGE}")
    if not live:
        return _once(flags)
    try:
        from storyd.tui.app import run
    except ImportError as exc:
        raise Unavailable(
            f"the live view needs the tui extra: pip install 'storyd[tui]' ({exc}); "
            "storyd top --once prints one frame without it"
        ) from None
    if flags.get("fleet"):
        return run(in_flight=bool(flags.get("in-flight")), feed=_fleet_feed(flags))
    given = flags.get("workspace")
    return run(
        workspaces=[os.path.realpath(str(w)) for w in given] if isinstance(given, list) else None,
        socket=str(flags["socket"]) if flags.get("socket") else None,
        in_flight=bool(flags.get("in-flight")),
    )
