"""`watch` and `unwatch`: ask the running daemon to watch workspaces, or to stop (the
socket's ops of those names). The daemon reads a workspace before it answers a watch;
its own rules hold (`limits.max_workspaces` refuses one over the cap).

No daemon: DaemonUnavailable (its `code` is 69), raised from the iteration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

__all__ = ["Watched", "unwatch", "watch"]


class Watched:
    """One folder's answer: the workspace and its unit count (watch), whether it was
    watched (unwatch), or the daemon's refusal (`error`, its message)."""

    __slots__ = ("error", "folder", "units", "was", "workspace")

    def __init__(self, folder: str, answer: dict[str, object]) -> None:
        self.folder = folder
        self.workspace = answer.get("workspace")
        self.units = answer.get("units")
        self.was = bool(answer.get("was"))
        self.error: object = None
        if not answer.get("ok"):
            error = answer.get("error")
            self.error = error.get("message") if isinstance(error, dict) else answer


def _ask(op: str, folders: list[str], socket: str | None, timeout: float) -> Iterator[Watched]:
    from storyd.api.client import Client

    with Client(socket, timeout=timeout) as client:
        for folder in folders:
            yield Watched(folder, client.request(op, workspace=os.path.abspath(folder)))


def watch(
    folders: list[str], socket: str | None = None, timeout: float = 60.0
) -> Iterator[Watched]:
    """Ask the daemon to watch each folder, one answer at a time."""
    return _ask("watch", folders, socket, timeout)


def unwatch(
    folders: list[str], socket: str | None = None, timeout: float = 60.0
) -> Iterator[Watched]:
    """Ask the daemon to stop watching each folder, one answer at a time."""
    return _ask("unwatch", folders, socket, timeout)
