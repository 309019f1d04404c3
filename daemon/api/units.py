"""Every unit of some workspaces, with its findings: what `status`, `list` and `check`
show, and what the hooks and the MCP server read.

`units()` asks the daemon's `list` first; without a daemon (or with `direct`, or a
`staleness` of the caller's own) it scans the workspaces here (daemon/api/scan.py). A
workspace the daemon declines to watch (`auto_watch = false`, or its workspace cap
reached: the `watch` op's `auto` answer) is scanned here too, with a note; the daemon is
never made to watch against its configuration.

A door that shows a progress line passes `progress`: a factory of context managers
with `on` and a settable `count` (daemon/cli/terminal.py's Progress); here it is only
counted, never drawn.
"""

from __future__ import annotations

import os

from storyd.api.refusals import refusal

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["Progress", "Units", "units", "unreadable_of"]

if TYPE_CHECKING:
    Progress = Callable[[], Any]
    """Makes one progress line (a context manager with `on` and `count`)."""
else:
    Progress = object  # only annotations name it: at run time a stand-in, without `typing`


class _Silent:
    """No progress line: what a door without a terminal gets."""

    on = False
    count: int | None = None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class Units:
    """Unit summaries with their findings, where they came from (`daemon`, `direct` or
    `daemon+direct`), the daemon's clock, the state files that do not parse
    (`unreadable`: the `list` answer's entries, each with workspace, stateFile, format,
    error, since and units, the last good units still served), and the notes a door
    shows on stderr (a workspace the daemon declined, read here instead)."""

    __slots__ = ("clock", "notes", "source", "units", "unreadable")

    def __init__(
        self,
        units: list[dict[str, object]],
        source: str,
        clock: str | None,
        unreadable: list[dict[str, object]] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.units = units
        self.source = source
        self.clock = clock
        self.unreadable = unreadable or []
        self.notes = notes or []


def unreadable_of(payload: dict[str, object]) -> list[dict[str, object]]:
    """The `unreadable` entries of a `list` answer (none from a daemon that has none)."""
    found = payload.get("unreadable", [])
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def units(
    workspaces: list[str] | None = None,
    *,
    in_flight: bool = False,
    direct: bool = False,
    staleness: str | None = None,
    socket: str | None = None,
    timeout: float = 2.0,
    config: str | None = None,
    progress: Progress | None = None,
    codes: frozenset[str] | None = None,
    claude_lists: bool = True,
) -> Units:
    """The units of `workspaces` (None or empty: every workspace the daemon watches,
    else the current folder), from the daemon when one answers, else read here; with
    `claude_lists`, each workspace's Claude Code task lists outside it too, read here
    on every answer (storyd.api.claude_ties: the daemon does not watch them; a daemon
    whose answer says `claudeLists` has read them for its workspaces already).

    `timeout` (seconds) bounds each request to the daemon; `config` is the configuration
    file a direct read uses (SetupError when a named file does not exist); `codes`: the
    caller reads only findings of these codes, so a direct read runs only the detectors
    that declare one (the daemon's answer has them all). Raises StorydError (a UsageError
    for the daemon's refusal), never prints.
    """
    from storyd.core.paths import socket_path

    folders = [os.path.realpath(w) for w in workspaces or ()]
    make = progress or _Silent
    notes: list[str] = []
    # no socket file, no daemon: what connecting would say, without the client's import
    if not direct and not staleness and os.path.exists(socket_path(socket)):
        from storyd.api.client import Client, DaemonUnavailable

        try:
            with Client(socket, timeout=timeout) as client:
                found: list[dict[str, object]] = []
                broken: list[dict[str, object]] = []
                declined: list[str] = []
                clock = None
                tied = True  # the daemon's answers carry the tied lists (`claudeLists`)
                asked: list[str | None] = list(folders) if folders else [None]
                for ws in asked:
                    fields: dict[str, object] = {"detail": True, "inFlight": in_flight,
                                                 "claudeLists": claude_lists}
                    if ws is not None:
                        watched = _watch(socket, ws, timeout, make)
                        if not watched.get("ok"):
                            raise refusal(watched)
                        if watched.get("watching") is False:
                            notes.append(
                                f"note: the daemon does not watch {ws} "
                                f"({watched.get('reason')}); reading it directly"
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
                    tied = tied and answer.get("claudeLists") is True
                    broken.extend(unreadable_of(answer))
                    clock = str(answer.get("clock"))
            if not declined:
                got = Units(found, "daemon", clock, broken, notes)
                return got if tied else _lists(got, folders, in_flight, claude_lists)
            read, more = _scan(declined, config, staleness, in_flight, make, codes)
            source = "direct" if len(declined) == len(asked) else "daemon+direct"
            if tied:  # the daemon's answer has its workspaces' lists; these are read here
                read = _lists(Units(read, "direct", None), declined, in_flight, claude_lists).units
                return Units(_ordered(found + read), source, clock, broken + more, notes)
            got = Units(_ordered(found + read), source, clock, broken + more, notes)
            return _lists(got, folders, in_flight, claude_lists)
        except DaemonUnavailable:
            pass
    read, broken = _scan(folders or [os.getcwd()], config, staleness, in_flight, make, codes)
    return _lists(Units(read, "direct", None, broken, notes), folders or [os.path.realpath(".")],
                  in_flight, claude_lists)  # fmt: skip


def _lists(found: Units, folders: list[str], in_flight: bool, wanted: bool) -> Units:
    """`found` with the Claude Code task lists tied to its workspaces (those asked, and
    those its units are in) added, read here (storyd.api.claude_ties)."""
    if not wanted:
        return found
    from storyd.api.claude_ties import with_lists

    found.units = with_lists(found.units, folders, in_flight=in_flight)
    return found


def _watch(path: str | None, workspace: str, timeout: float, make: Progress) -> dict[str, object]:
    """Ask the daemon to watch `workspace` as a query would. Its first read of a large
    workspace takes seconds (17 s at 3,000 stories): the reply is awaited for up to 5
    minutes once a ping has shown the daemon alive, with the progress counting the
    units it has read (from `stats`, on a connection of its own)."""
    import threading

    from storyd.api.client import Client, DaemonUnavailable

    with Client(path, timeout=timeout) as quick:
        quick.request("ping")  # a stopped daemon fails here, in `timeout`

        def read_so_far() -> int:
            warm = quick.request("stats").get("warm")
            return int(warm.get("unitsRead", 0)) if isinstance(warm, dict) else 0

        base = read_so_far()
        with make() as progress:
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


def _ordered(summaries: list[dict[str, object]]) -> list[dict[str, object]]:
    """Unit summaries in the daemon's `list` order (workspace, state file, unit)."""
    return sorted(
        summaries, key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"]))
    )


def config_file(path: str | None) -> str | None:
    """`path` itself; a named file that does not exist is an error (78), not a silent
    fall back to the defaults."""
    if path is not None and not os.path.isfile(path):
        from storyd.core.errors import SetupError

        raise SetupError(f"--config {path}: no such file")
    return path


def _scan(
    targets: list[str],
    config: str | None,
    staleness: str | None,
    in_flight: bool,
    make: Progress,
    codes: frozenset[str] | None = None,
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Read the workspaces here, with the configured detectors: the unit summaries, and
    the state files that do not parse."""
    from storyd import config as configuration
    from storyd.api.scan import scan_workspaces

    cfg = configuration.load(config_file(config))
    with make() as progress:
        progress.count = 0

        def counted() -> None:
            progress.count = (progress.count or 0) + 1

        units, unreadable = scan_workspaces(
            targets, cfg, staleness or None, counted if progress.on else None,
            in_flight=in_flight, codes=codes,
        )  # fmt: skip
    summaries: list[dict[str, object]] = [dict(u) for u in units]
    if in_flight:
        summaries = [u for u in summaries if u["resumePoint"] != "all-done"]
    return _ordered(summaries), unreadable
