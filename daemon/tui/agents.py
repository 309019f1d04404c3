"""The live view's sessions panel follows the hooks' records: an inotify watch of their
folder (watchdog, a dependency already), so a session that starts waiting for its user
shows within a moment, without a timer and without a unit changing."""

from __future__ import annotations

import os
from collections.abc import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

__all__ = ["RecordsWatch", "records_folder"]


def records_folder() -> str:
    """The folder of the hooks' per-session records (storyd.api.sessions)."""
    from storyd.api.sessions import record_path

    return os.path.dirname(record_path("x"))


class _Handler(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("created", "modified", "moved", "deleted", "closed"):
            self.on_change()


class RecordsWatch:
    """Calls `on_change()` (on watchdog's thread) when a record is written or touched;
    `stop()` ends it. A folder that cannot be made or watched: no calls, no error."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change
        self._observer: Observer | None = None  # type: ignore[valid-type]

    def start(self) -> None:
        """Watch the records' folder (made, 0700, when it is not there yet)."""
        folder = records_folder()
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            observer = Observer()
            observer.schedule(_Handler(self.on_change), folder, recursive=False)
            observer.daemon = True
            observer.start()
        except OSError:
            return
        self._observer = observer

    def stop(self) -> None:
        """Stop watching."""
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
