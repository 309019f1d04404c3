"""Where drift goes besides the socket: the log, the desktop, and a user hook command.

The engine calls `Sinks` on its refresher thread; the call only logs and enqueues.
A notifier thread gathers events for a short window and delivers one notification
per unit however many findings moved (git operations are already deferred until
they finish, so a 50-commit rebase is one recheck): `notify-send` when present
(else skipped with a single debug log), and the hook: an argv list from config, run
with no shell, the unit's events as JSON lines on stdin, under a timeout, failures
logged.

A workspace's first look (start-up, or a workspace watched later) reports what was
already there, not drift as it happens: its events are logged at debug level, and
when it ends one `first_look` line sums it up, with, at start-up, one desktop
notification if it found warnings or errors. The hook is not run for it (a restart
would otherwise run it once per unit with findings: thousands at 10,000 stories).
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from daemon.server import log

if TYPE_CHECKING:
    from daemon.config import Config
    from daemon.server.engine import Engine, FirstLook

__all__ = ["Sinks", "attach", "reconfigure"]

_KINDS = frozenset(("drift", "resolved"))
_WINDOW = 0.3
# the notifier's queue: a unit event with its line, a first look's summary, or the end
_Item: TypeAlias = "tuple[Mapping[str, object], bytes] | FirstLook | None"


class Sinks:
    """The log, desktop and hook sinks, with per-unit coalescing."""

    def __init__(
        self,
        *,
        log_events: bool = True,
        desktop: bool = True,
        hook: list[str] | None = None,
        hook_timeout: float = 10.0,
        window: float = _WINDOW,
    ) -> None:
        self.log_events = log_events
        self.desktop = desktop
        self.hook = hook
        self.hook_timeout = hook_timeout
        self.window = window
        self.log = log.get("notify")
        self.counters = {"delivered": 0, "hook_failures": 0}
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        # whether a workspace's first look is under way (engine.in_first_look)
        self.in_first_look: Callable[[str], bool] = lambda _workspace: False
        self._notify_send: str | None = shutil.which("notify-send") if desktop else None
        self._desktop_skip_logged = False
        self._thread = threading.Thread(target=self._run, name="storyd-notify", daemon=True)
        self._thread.start()

    def configure(
        self, *, log_events: bool, desktop: bool, hook: list[str] | None, hook_timeout: float
    ) -> None:
        """Apply a reloaded configuration."""
        self.log_events, self.desktop, self.hook, self.hook_timeout = (
            log_events,
            desktop,
            hook,
            hook_timeout,
        )
        self._notify_send = shutil.which("notify-send") if desktop else None

    def __call__(self, event: Mapping[str, object], line: bytes) -> None:
        if event["event"] not in _KINDS:
            return
        found_at_first_look = self.in_first_look(str(event["workspace"]))
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

    def first_look(self, found: FirstLook) -> None:
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

    def close(self) -> None:
        """Deliver what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=self.hook_timeout + 2)

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
            for unit_events in _by_unit(events).values():
                self._deliver(unit_events)

    def _deliver(self, events: list[tuple[Mapping[str, object], bytes]]) -> None:
        self.counters["delivered"] += 1
        first = events[0][0]
        if self.desktop:
            self._desktop(first, [e for e, _ in events])
        if self.hook:
            self._run_hook(first, b"".join(line for _, line in events))

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

    def _desktop_first_look(self, found: FirstLook) -> None:
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
        if self._notify_send is None:
            if not self._desktop_skip_logged:
                self._desktop_skip_logged = True
                self.log.debug("desktop_skipped", reason="notify-send not found on PATH")
            return False
        return True

    def _notify(self, title: str, body: str) -> None:
        assert self._notify_send is not None
        self._spawn("desktop", [self._notify_send, "--app-name=storyd", title, body], None)

    def _run_hook(self, first: Mapping[str, object], payload: bytes) -> None:
        assert self.hook is not None
        self._spawn("hook", list(self.hook), payload, unit=first["unit"])

    def _spawn(self, what: str, argv: list[str], payload: bytes | None, **context: object) -> None:
        started = time.perf_counter()
        try:
            done = subprocess.run(
                argv,
                input=payload or b"",
                capture_output=True,
                timeout=self.hook_timeout,
                check=False,
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
    """What [notify] sets, by the keyword names of `Sinks` and `Sinks.configure`."""

    log_events: bool
    desktop: bool
    hook: list[str] | None
    hook_timeout: float


def _settings(cfg: Config) -> _Settings:
    notify = cfg.notify
    return {
        "log_events": notify.log,
        "desktop": notify.desktop,
        "hook": notify.hook,
        "hook_timeout": notify.hook_timeout,
    }


def attach(engine: Engine, cfg: Config) -> Sinks:
    """Create the sinks from the configuration and register them with the engine."""
    sinks = Sinks(**_settings(cfg))
    sinks.in_first_look = engine.in_first_look
    engine.on_first_look = sinks.first_look
    engine.sinks.append(sinks)
    return sinks


def reconfigure(engine: Engine, cfg: Config) -> None:
    """Apply a reloaded configuration to the registered sinks."""
    for sink in engine.sinks:
        if isinstance(sink, Sinks):
            sink.configure(**_settings(cfg))
