"""The daemon's side of reconcile (daemon/api/reconcile): the read-only `reconcile` op's plan,
auto-apply of the classes `[reconcile] auto` lists, and the `reconciled` event.

Auto-apply listens to the engine's events: a `drift` event whose finding code is listed
queues a reconcile of that unit's state file, restricted to the listed codes, on one
worker thread (never the loop, never the detector thread). When an apply lands, a
`reconciled` event goes to every sink (subscribers, notifications) with what was
written. A CLI `--apply` tells a running daemon through the `reconciled` op, which emits
the same event once it has seen the undo record of that apply.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from storyd.api.reconcile.gather import Selection
from storyd.api.reconcile.plan import Plan
from storyd.core import log
from storyd.core.errors import StorydError, UsageError
from storyd.core.worker import QueueWorker

if TYPE_CHECKING:
    from storyd.config import Config
    from storyd.server.engine import Engine

__all__ = [
    "AutoReconciler",
    "emit_reconciled",
    "plan_request",
    "reconciled_notice",
]


def emit_reconciled(
    engine: Engine, workspace: str, files: list[dict[str, object]], source: str
) -> None:
    """Send one `reconciled` event per written state file to the engine's sinks."""
    for item in files:
        repairs = item.get("repairs")
        units = (
            [r.get("unit") for r in repairs if isinstance(r, dict)]
            if isinstance(repairs, list)
            else []
        )
        event: dict[str, object] = {
            "event": "reconciled",
            "clock": "",  # set with the generation when published
            "generation": 0,
            "workspace": workspace,
            "stateFile": item.get("stateFile"),
            "unit": units[0] if units else None,
            "format": item.get("format"),
            "source": source,
            "repairs": repairs,
        }
        engine.log.publish_new(event)  # a generation of its own: `since` replays it


def plan_request(workspace: str, request: dict[str, object], cfg: Config) -> dict[str, object]:
    """The `reconcile` op: the plan for a watched workspace, as data; nothing is written."""
    from storyd.api.reconcile import make_plan
    from storyd.api.reconcile.repairs import repair_codes
    from storyd.core.ids import normalize_epic_id, normalize_story_id

    def text(name: str) -> str | None:
        value = request.get(name)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"{name} must be a string")
        return value

    epic, story = text("epicId"), text("storyId")
    if (epic is None) != (story is None):
        raise UsageError("epicId and storyId go together")
    if epic is not None and story is not None:
        selection = Selection(epic=normalize_epic_id(epic), story=normalize_story_id(story))
    else:
        selection = Selection(state_file=text("stateFile"), unit=text("unit"))
    only_raw = request.get("only")
    only = None
    if only_raw is not None:
        if not isinstance(only_raw, list) or not all(isinstance(c, str) for c in only_raw):
            raise UsageError("only must be an array of repair codes")
        unknown = sorted(set(only_raw) - set(repair_codes()))
        if unknown:
            raise UsageError(f"only: unknown repair code(s) {', '.join(unknown)}")
        only = frozenset(only_raw)
    plan = make_plan(workspace, selection, cfg, only, cfg.limits.lock_timeout)
    return plan.as_dict()


def reconciled_notice(engine: Engine, workspace: str) -> int:
    """The `reconciled` op: emit the event for the workspace's last recorded apply."""
    from storyd.api.reconcile import undo

    record, _ = undo.load(workspace)
    emit_reconciled(engine, workspace, record.summary, "cli")
    return len(record.summary)


class AutoReconciler:
    """Applies the configured classes when their findings appear, on its own thread
    (storyd-reconcile): never the loop's, never the detectors'. An event sink."""

    def __init__(self, engine: Engine, cfg: Config) -> None:
        """Starts the thread; `close` stops it after the queued jobs."""
        self.engine = engine
        self.cfg = cfg
        self.codes = frozenset(cfg.reconcile_auto)
        self.log = log.get("reconcile")
        self.pending: set[tuple[str, str]] = set()
        self.lock = threading.Lock()
        self.thread: QueueWorker[tuple[str, str]] = QueueWorker(
            "reconcile", self._job, self._failed
        )
        self.thread.start()

    def __call__(self, event: Mapping[str, object], line: bytes) -> None:
        """The engine sink: queue a reconcile for a drift whose code is configured."""
        if event.get("event") != "drift" or not self.codes:
            return
        finding = event.get("finding")
        code = finding.get("code") if isinstance(finding, dict) else None
        if code not in self.codes:
            return
        key = (str(event["workspace"]), str(event["stateFile"]))
        with self.lock:
            if key in self.pending:
                return
            self.pending.add(key)
        self.thread.put(key)

    def _job(self, job: tuple[str, str]) -> None:
        with self.lock:
            self.pending.discard(job)
        try:
            self.reconcile(*job)
        except (StorydError, OSError) as exc:
            if isinstance(exc, OSError):  # outside the writes, which say what they did
                from storyd.api.reconcile.failures import os_failure

                exc = os_failure(exc, "auto-apply")
            self.log.warning(
                "reconcile_failed", workspace=job[0], state_file=job[1], error=exc.message
            )

    def _failed(self, job: tuple[str, str], exc: Exception) -> None:
        """A bug: logged, and the thread goes on."""
        self.log.error("reconcile_error", error=str(exc), workspace=job[0], state_file=job[1])

    def reconcile(self, workspace: str, state_file: str) -> Plan:
        """Apply the configured classes to one state file; emit `reconciled` if written."""
        from storyd.api.reconcile import make_plan
        from storyd.api.reconcile.apply import apply

        selection = Selection(state_file=state_file)
        timeout = self.engine.options.lock_timeout  # the daemon's, as a reload left it

        def plan_now() -> Plan:
            return make_plan(workspace, selection, self.cfg, self.codes, timeout)

        if not os.path.exists(os.path.join(workspace, state_file)):
            return plan_now()
        plan = apply(workspace, plan_now, timeout)
        if plan.changed:
            self.log.info("reconciled", workspace=workspace, files=len(plan.files))
            emit_reconciled(self.engine, workspace, plan.summary(), "daemon")
        return plan

    def close(self) -> None:
        """Stop the worker after the queued jobs."""
        self.thread.close(timeout=10)
