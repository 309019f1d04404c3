"""Where drift goes besides the socket: the log, the desktop, and a user hook command.

The engine calls `Notifications` on its refresher thread; the call only logs and enqueues.
A notifier thread gathers events for a short window (a burst) and delivers them: a
desktop notification per unit however many findings moved (one per workspace when a
burst moves more than a few units; git operations are already deferred until they
finish, so a 50-commit rebase is one recheck), through the notifier this machine has
(chosen at run time: `osascript` on macOS, `notify-send` elsewhere, the other when only
it is on PATH; else skipped with a single debug log); and the hook, run once per workspace per burst
(like watchman's triggers): an argv list from config, no shell, in the workspace,
with STORYD_WORKSPACE, STORYD_CLOCK, STORYD_SOCKET and STORYD_EVENT set and the
events that pass its filters ([notify] hook_workspaces, hook_codes, hook_severities)
as JSON lines on stdin, under a timeout, failures logged.

A workspace's first look (start-up, or a workspace watched later) reports what was
already there, not drift as it happens: its events are logged at debug level, and
when it ends one `first_look` line sums it up, with, at start-up, one desktop
notification if it found warnings or errors. Its last look (unwatched, gone, expired)
is the same: its `resolved` events say storyd stopped looking, not that anything was
fixed, so they are logged at debug level and one `last_look` line sums them up. The
hook runs for neither (a restart or an unwatch would otherwise run it once per unit
with findings: thousands at 10,000 stories).
"""

from __future__ import annotations

import os
import queue
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from storyd.core import log
from storyd.core.children import group
from storyd.core.desktop import desktop_argv, desktop_tool
from storyd.core.worker import Worker

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.server.engine import Look

__all__ = ["Notifications", "settings_of"]

_KINDS = frozenset(("drift", "resolved"))
_WINDOW = 0.3
_UNITS_PER_BURST = 3  # a burst moving more units than this is one notification per workspace
# the notifier's queue: a unit event with its line, a first look's summary, or the end
_Item: TypeAlias = "tuple[Mapping[str, object], bytes] | Look | None"


class Notifications:
    """The log, desktop and hook sinks, with per-unit coalescing."""

    def __init__(
        self,
        *,
        log_events: bool = True,
        desktop: bool = True,
        hook: list[str] | None = None,
        hook_timeout: float = 10.0,
        hook_workspaces: list[str] | None = None,
        hook_codes: list[str] | None = None,
        hook_severities: list[str] | None = None,
        socket: str = "",
        window: float = _WINDOW,
        in_first_look: Callable[[str], bool] | None = None,
        in_last_look: Callable[[str], bool] | None = None,
    ) -> None:
        """Starts the delivery thread (storyd-notify). `in_first_look`/`in_last_look`
        say whether a workspace's events are its first look or its unwatch
        (Engine.in_first_look, Engine.in_last_look): found, not happening."""
        self.log_events = log_events
        self.desktop = desktop
        self.hook = hook
        self.hook_timeout = hook_timeout
        self.hook_filter = HookFilter(hook_workspaces, hook_codes, hook_severities)
        self.socket = socket
        self.window = window
        self.log = log.get("notify")
        self.counters = {"delivered": 0, "hook_failures": 0}
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self.in_first_look: Callable[[str], bool] = in_first_look or (lambda _workspace: False)
        self.in_last_look: Callable[[str], bool] = in_last_look or (lambda _workspace: False)
        self._notifier: str | None = desktop_tool() if desktop else None
        self._desktop_skip_logged = False
        self._thread = Worker("notify", body=self._run, waker=lambda: self._queue.put(None))
        self._thread.start()

    def configure(
        self,
        *,
        log_events: bool,
        desktop: bool,
        hook: list[str] | None,
        hook_timeout: float,
        hook_workspaces: list[str] | None = None,
        hook_codes: list[str] | None = None,
        hook_severities: list[str] | None = None,
    ) -> None:
        """Apply a reloaded configuration."""
        self.log_events, self.desktop, self.hook, self.hook_timeout = (
            log_events,
            desktop,
            hook,
            hook_timeout,
        )
        self.hook_filter = HookFilter(hook_workspaces, hook_codes, hook_severities)
        self._notifier = desktop_tool() if desktop else None

    def __call__(self, event: Mapping[str, object], line: bytes) -> None:
        if event["event"] not in _KINDS:
            return
        workspace = str(event["workspace"])
        found_at_first_look = self.in_first_look(workspace) or self.in_last_look(workspace)
        if self.log_events:
            finding = event.get("finding")
            if not isinstance(finding, dict):
                finding = {}
            emit = self.log.debug if found_at_first_look else self.log.info
            emit(
                str(event["event"]),
                workspace=event["workspace"],
                state_file=event["stateFile"],
                unit=event["unit"],
                generation=event["generation"],
                code=finding.get("code"),
                message=finding.get("message"),
            )
        if (self.desktop or self.hook) and not found_at_first_look:
            self._queue.put((event, line))

    def looked(self, found: Look) -> None:
        """A workspace's first or last look ended (the engine's `looks` listener)."""
        if found.last:
            self.last_look(found)
        else:
            self.first_look(found)

    def first_look(self, found: Look) -> None:
        """A workspace's first look ended: one log line, and at start-up one desktop
        notification when it found warnings or errors (a workspace watched later was
        asked for by someone who sees the answer)."""
        errors, warnings = found.severities.get("error", 0), found.severities.get("warning", 0)
        if self.log_events:
            self.log.info(
                "first_look",
                workspace=found.workspace,
                units=found.units,
                units_out_of_step=found.units_out_of_step,
                errors=errors,
                warnings=warnings,
                info=found.severities.get("info", 0),
                at_start=found.at_start,
            )
        if self.desktop and found.at_start and (errors or warnings):
            self._queue.put(found)

    def last_look(self, found: Look) -> None:
        """A workspace was removed (unwatched, gone or expired): one log line saying what
        it held; no desktop notification, no hook, no per-unit "back in sync"."""
        if self.log_events:
            self.log.info(
                "last_look",
                workspace=found.workspace,
                units=found.units,
                units_out_of_step=found.units_out_of_step,
                errors=found.severities.get("error", 0),
                warnings=found.severities.get("warning", 0),
                info=found.severities.get("info", 0),
            )

    def close(self) -> None:
        """Deliver what is queued, then stop the thread."""
        self._thread.close(timeout=self.hook_timeout + 2)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.window
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            events = []
            for item in batch:
                if isinstance(item, tuple):
                    events.append(item)
                else:
                    self._desktop_first_look(item)
            for workspace, ws_events in _by_workspace(events).items():
                self._deliver(workspace, ws_events)

    def _deliver(self, workspace: str, events: list[tuple[Mapping[str, object], bytes]]) -> None:
        """One workspace's burst: desktop notifications, then the hook once."""
        self.counters["delivered"] += 1
        if self.desktop:
            units = _by_unit(events)
            if len(units) > _UNITS_PER_BURST:
                self._desktop_burst(workspace, len(units), [e for e, _ in events])
            else:
                for unit_events in units.values():
                    self._desktop(unit_events[0][0], [e for e, _ in unit_events])
        if self.hook:
            chosen = [(e, line) for e, line in events if self.hook_filter.passes(e)]
            if chosen:
                self._run_hook(workspace, chosen)

    def _desktop(self, first: Mapping[str, object], events: list[Mapping[str, object]]) -> None:
        if not self._can_notify():
            return
        drift = sum(1 for e in events if e["event"] == "drift")
        resolved = len(events) - drift
        title = (
            f"storyd: {first['unit']} drifted from git"
            if drift
            else f"storyd: {first['unit']} back in sync"
        )
        lines = [f"{e['event']}: {_message(e)}" for e in events[:5]]
        if len(events) > 5:
            lines.append(f"… and {len(events) - 5} more ({drift} drift, {resolved} resolved)")
        self._notify(title, "\n".join(lines))

    def _desktop_burst(
        self, workspace: str, units: int, events: list[Mapping[str, object]]
    ) -> None:
        if not self._can_notify():
            return
        drift = sum(1 for e in events if e["event"] == "drift")
        resolved = len(events) - drift
        title = f"storyd: {units} units changed in {workspace}"
        counts = ", ".join(
            f"{n} {kind}" for n, kind in ((drift, "drift"), (resolved, "resolved")) if n
        )
        self._notify(title, f"{counts}. `storyd status` lists them.")

    def _desktop_first_look(self, found: Look) -> None:
        if not self._can_notify():
            return
        errors, warnings = found.severities.get("error", 0), found.severities.get("warning", 0)
        some = found.units_out_of_step
        title = f"storyd: {some} unit{'s' * (some != 1)} out of step in {found.workspace}"
        counts = " and ".join(
            _count(n, noun) for n, noun in ((errors, "error"), (warnings, "warning")) if n
        )
        body = (
            f"{counts} in {some} of {found.units} units, found when storyd began watching. "
            "`storyd status` lists them."
        )
        self._notify(title, body)

    def _can_notify(self) -> bool:
        if self._notifier is None:
            if not self._desktop_skip_logged:
                self._desktop_skip_logged = True
                self.log.debug("desktop_skipped",
                               reason="neither osascript nor notify-send is on PATH")
            return False
        return True

    def _notify(self, title: str, body: str) -> None:
        assert self._notifier is not None
        self._spawn("desktop", desktop_argv(self._notifier, title, body), None)

    def _run_hook(self, workspace: str, events: list[tuple[Mapping[str, object], bytes]]) -> None:
        """Run the hook once for a workspace's burst: in the workspace, the events on stdin."""
        assert self.hook is not None
        kinds = sorted({str(e["event"]) for e, _ in events})  # "drift" sorts before "resolved"
        newest = max(events, key=lambda pair: int(str(pair[0]["generation"])))[0]
        env = {
            **os.environ,
            "STORYD_WORKSPACE": workspace,
            "STORYD_CLOCK": str(newest["clock"]),
            "STORYD_SOCKET": self.socket,
            "STORYD_EVENT": ",".join(kinds),
        }
        payload = b"".join(line for _, line in events)
        units = len(_by_unit(events))
        self._spawn(
            "hook",
            list(self.hook),
            payload,
            cwd=workspace,
            env=env,
            workspace=workspace,
            events=len(events),
            units=units,
        )

    def _spawn(
        self,
        what: str,
        argv: list[str],
        payload: bytes | None,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        **context: object,
    ) -> None:
        started = time.perf_counter()
        try:
            done = subprocess.run(
                argv,
                input=payload or b"",
                capture_output=True,
                timeout=self.hook_timeout,
                check=False,
                cwd=cwd,
                env=env,
                process_group=group(),  # it ends with the daemon
            )
        except subprocess.TimeoutExpired:
            self.counters["hook_failures"] += 1
            self.log.warning(f"{what}_timeout", argv=argv, timeout=self.hook_timeout, **context)
            return
        except OSError as exc:
            self.counters["hook_failures"] += 1
            self.log.warning(f"{what}_failed", argv=argv, error=str(exc), **context)
            return
        duration = round((time.perf_counter() - started) * 1000, 3)
        if done.returncode != 0:
            self.counters["hook_failures"] += 1
            self.log.warning(
                f"{what}_failed",
                argv=argv,
                code=done.returncode,
                duration_ms=duration,
                stderr=done.stderr[-500:].decode("utf-8", "replace"),
                **context,
            )
        else:
            self.log.info(f"{what}_delivered", duration_ms=duration, **context)


class HookFilter:
    """Which events the hook sees: [notify] hook_workspaces (a workspace, or a folder
    holding it), hook_codes (finding codes) and hook_severities; an empty list or None
    lets every event through."""

    __slots__ = ("codes", "severities", "workspaces")

    def __init__(
        self,
        workspaces: list[str] | None = None,
        codes: list[str] | None = None,
        severities: list[str] | None = None,
    ) -> None:
        spelled = {os.path.normpath(w) for w in workspaces or ()}
        self.workspaces = tuple(spelled | {os.path.realpath(w) for w in spelled})
        self.codes = frozenset(codes or ())
        self.severities = frozenset(severities or ())

    def passes(self, event: Mapping[str, object]) -> bool:
        """Whether the hook gets this drift or resolved event."""
        if self.workspaces:
            where = str(event["workspace"])
            inside = (where == w or where.startswith(w.rstrip("/") + "/") for w in self.workspaces)
            if not any(inside):
                return False
        finding = event.get("finding")
        if not isinstance(finding, dict):
            finding = {}
        if self.codes and finding.get("code") not in self.codes:
            return False
        return not self.severities or finding.get("severity") in self.severities


def _by_workspace(
    batch: list[tuple[Mapping[str, object], bytes]],
) -> dict[str, list[tuple[Mapping[str, object], bytes]]]:
    grouped: dict[str, list[tuple[Mapping[str, object], bytes]]] = {}
    for event, line in batch:
        grouped.setdefault(str(event["workspace"]), []).append((event, line))
    return grouped


def _by_unit(
    batch: list[tuple[Mapping[str, object], bytes]],
) -> dict[tuple[object, ...], list[tuple[Mapping[str, object], bytes]]]:
    grouped: dict[tuple[object, ...], list[tuple[Mapping[str, object], bytes]]] = {}
    for event, line in batch:
        key = (event["workspace"], event["stateFile"], event["unit"])
        grouped.setdefault(key, []).append((event, line))
    return grouped


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _message(event: Mapping[str, object]) -> object:
    """The message of a drift or resolved event's finding."""
    finding = event["finding"]
    assert isinstance(finding, dict), "drift and resolved events carry a finding object"
    return finding["message"]


class _Settings(TypedDict):
    """What [notify] sets, by the keyword names of `Notifications` and `Notifications.configure`."""

    log_events: bool
    desktop: bool
    hook: list[str] | None
    hook_timeout: float
    hook_workspaces: list[str]
    hook_codes: list[str]
    hook_severities: list[str]


def settings_of(cfg: Config) -> _Settings:
    """The keyword arguments of `Notifications` and its `configure` that [notify] sets."""
    notify = cfg.notify
    return {
        "log_events": notify.log,
        "desktop": notify.desktop,
        "hook": notify.hook,
        "hook_timeout": notify.hook_timeout,
        "hook_workspaces": list(notify.hook_workspaces),
        "hook_codes": list(notify.hook_codes),
        "hook_severities": list(notify.hook_severities),
    }
