"""What changed in the cache, forwarded to the event log as unit events.

A changed entry is a `changed` event (the unit's summary after its identity), then a
`drift` for each finding it gained and a `resolved` for each it lost; a removed entry
is a `removed` event at a generation of its own, and a `resolved` for each of its
findings. The event log numbers, keeps and sends them (events.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storyd.core.model import Finding
    from storyd.core.wire import EventKind, UnitEvent
    from storyd.server.events import EventLog
    from storyd.server.store import Entry, Workspace

__all__ = ["Forwarder"]


class Forwarder:
    """Turns entry changes into unit events on `log`; `workspaces` says which
    workspaces have had their first look (a warm-up's first sight is not kept)."""

    def __init__(self, log: EventLog, workspaces: Mapping[str, Workspace]) -> None:
        self.log = log
        self.workspaces = workspaces

    def changed(self, entry: Entry, old: Entry | None) -> None:
        """An entry replaced `old` (None: a new unit)."""
        self._emit("changed", entry, entry.generation)
        before = set(old.findings) if old else set()
        after = set(entry.findings)
        for finding in entry.findings:
            if finding not in before:
                self._emit("drift", entry, entry.generation, finding)
        for finding in old.findings if old else ():
            if finding not in after:
                self._emit("resolved", entry, entry.generation, finding)

    def removed(self, entry: Entry) -> None:
        """An entry left the cache (its file, its workspace or its unit is gone)."""
        generation = self.log.advance()
        self._emit("removed", entry, generation)
        for finding in entry.findings:
            self._emit("resolved", entry, generation, finding)

    def _emit(
        self, kind: EventKind, entry: Entry, generation: int, finding: Finding | None = None
    ) -> None:
        event: UnitEvent = {
            "event": kind,
            "clock": "",
            "generation": generation,
            "workspace": entry.workspace,
            "stateFile": entry.state_file,
            "unit": entry.key,
            "format": entry.unit.format,
        }
        if kind == "changed":  # a changed event carries the unit's summary after its identity
            extra = {k: v for k, v in entry.summary().items() if k not in event}
            event.update(extra)  # type: ignore[typeddict-item]
        if finding is not None:
            event["finding"] = finding.as_dict()
        ws = self.workspaces.get(entry.workspace)
        # the start-up warm-up's first sight of every unit is not kept for replay
        self.log.publish(event, keep=ws is None or ws.checked)
