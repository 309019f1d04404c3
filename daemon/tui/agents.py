"""The live view's sessions panel follows the hooks' records: an inotify watch of their
folder (watchdog, a dependency already), so a session that starts waiting for its user
shows within a moment, without a timer and without a unit changing. The claims column
follows the claims database the same way."""

from __future__ import annotations

import os
from collections.abc import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

__all__ = ["RecordsWatch", "claims_watch", "records_folder"]


def records_folder() -> str:
    """The folder of the hooks' per-session records (storyd.api.sessions)."""
    from storyd.api.sessions import record_path

    return os.path.dirname(record_path("x"))


def claims_watch(on_change: Callable[[], None]) -> RecordsWatch:
    """A watch of the claims database (storyd.api.claims_path): its file and its WAL."""
    from storyd.api.claims_path import claims_path

    path = claims_path()
    name = os.path.basename(path)
    return RecordsWatch(on_change, os.path.dirname(path) or ".", (name, name + "-wal"))


class _Handler(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[], None], names: tuple[str, ...] = ()) -> None:
        self.on_change = on_change
        self.names = names

    def on_any_event(self, event: FileSystemEvent) -> None:
        if self.names and os.path.basename(str(event.src_path)) not in self.names:
            return
        if event.event_type in ("created", "modified", "moved", "deleted", "closed"):
            self.on_change()


class RecordsWatch:
    """Calls `on_change()` (on watchdog's thread) when a record is written or touched;
    `stop()` ends it. A folder that cannot be made or watched: no calls, no error.
    `folder` and `names` watch other files: those names in that folder (the claims
    database and its write-ahead log: a grant, a renewal or a release shows at once)."""

    def __init__(self, on_change: Callable[[], None], folder: str | None = None,
                 names: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.on_change = on_change
        self.folder = folder
        self.names = names
        self._observer: Observer | None = None  # type: ignore[valid-type]

    def start(self) -> None:
        """Watch the records' folder (made, 0700, when it is not there yet)."""
        folder = self.folder or records_folder()
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            observer = Observer()
            observer.schedule(_Handler(self.on_change, self.names), folder, recursive=False)
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
