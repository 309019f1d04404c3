"""`storyd reconcile`: write back what git proves, with a preview (the default) and an undo.

Exit codes: 0 nothing to change (or applied, or undone), 1 changes proposed (like
`git diff --exit-code`) or nothing to undo, 64 bad flags, 65 undo refused, 74 a write
failed (disk full, I/O error), 75 a writer held its lock past --lock-timeout, 77 a file
or folder is not writable (74 and 77 name the files written and not written). See
docs/reconcile.md.
"""

from __future__ import annotations

import json
import os
import sys

from storyd.cli.common import config_file, parse_prefixed
from storyd.core.errors import StorydError, UsageError
from storyd.core.flags import SWITCH, VALUE, text
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.reconcile.gather import Selection
    from storyd.api.reconcile.plan import Plan

__all__ = ["COMPLETE_WORDS", "FLAGS", "main", "render"]

USAGE = (
    "usage: storyd reconcile [--workspace DIR] [--epic-id E [--story-id S] | --state-file PATH "
    "[--unit U]] [--apply] [--only CODE,...] [--json] [--lock-timeout S] [--config FILE]\n"
    "                        [--quiet]\n"
    "       storyd reconcile --undo [--workspace DIR]"
)
FLAGS = {
    "workspace": VALUE,
    "epic-id": VALUE,
    "story-id": VALUE,
    "state-file": VALUE,
    "unit": VALUE,
    "apply": SWITCH,
    "undo": SWITCH,
    "only": VALUE,
    "json": SWITCH,
    "lock-timeout": VALUE,
    "config": VALUE,
    "quiet": SWITCH,
}


def COMPLETE_WORDS() -> dict[str, tuple[str, ...]]:  # read by completion.py
    """What `storyd completion` offers for values the usage cannot spell: --only's codes."""
    from storyd.api.reconcile.repairs import repair_codes

    return {"only": repair_codes()}


def _selection(flags: dict[str, object], workspace: str) -> Selection:
    """--epic-id alone is the whole epic: every story of its state file."""
    from storyd.api.reconcile.gather import Selection
    from storyd.core.ids import normalize_epic_id, normalize_story_id

    epic, story, state_file = (
        text(flags, "epic-id"),
        text(flags, "story-id"),
        text(flags, "state-file"),
    )
    unit = text(flags, "unit")
    if state_file is not None and (epic or story):
        raise UsageError(f"--state-file replaces --story-id and --epic-id\n{USAGE}")
    if story is not None and epic is None:
        raise UsageError(f"--story-id needs --epic-id\n{USAGE}")
    if unit is not None and state_file is None:
        raise UsageError(f"--unit goes with --state-file\n{USAGE}")
    if epic is not None and story is not None:
        return Selection(epic=normalize_epic_id(epic), story=normalize_story_id(story))
    if epic is not None:
        from storyd.core.formats.epic import epic_state_file

        epic = normalize_epic_id(epic)
        return Selection(epic=epic, state_file=epic_state_file(workspace, epic))
    return Selection(state_file=state_file, unit=unit)


def _only(flags: dict[str, object]) -> frozenset[str] | None:
    from storyd.api.reconcile.repairs import repair_codes

    given = text(flags, "only")
    if given is None:
        return None
    codes = frozenset(c.strip() for c in given.split(",") if c.strip())
    unknown = sorted(codes - set(repair_codes()))
    if unknown or not codes:
        known = ", ".join(repair_codes())
        raise UsageError(f"--only: unknown repair code(s) {', '.join(unknown)}; known: {known}")
    return codes


def _lock_timeout(flags: dict[str, object]) -> float:
    raw = text(flags, "lock-timeout")
    if raw is None:
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise UsageError(f"--lock-timeout must be a number of seconds from 0 to 3600\n{USAGE}")
    return value


def _evidence_text(item: dict[str, object]) -> str:
    if "commit" in item:
        return (
            f'commit {item["commit"]} "{item["subject"]}" patch-id {item["patchId"]} '
            f"committed {item['committedAt']}"
        )
    if "rewrittenFrom" in item:
        old = item["rewrittenFrom"]
        assert isinstance(old, dict)
        return f"rewritten from commit {old['commit']} (patch-id {old['patchId']})"
    if "journal" in item:
        return f"{item['journal']}:{item['line']}: {item['text']}"
    if "output" in item:
        return f"output {item['output']} status {item['status']!r} written {item['written']}"
    return ", ".join(f"{k} {v}" for k, v in item.items())


def render(plan: Plan) -> str:
    """The human preview: per file a unified diff, then per change its finding and evidence."""
    out = []
    for file in plan.files:
        out.append(file.diff())
        for repair in file.repairs:
            finding = repair.finding
            assert finding is not None
            what = (
                "restore from .bak"
                if repair.restore is not None
                else "; ".join(c.text() for c in repair.changes)
            )
            task = f" {repair.task}" if repair.task else ""
            out.append(f"# {finding.detector}/{finding.code} {repair.unit}{task}: {what}\n")
            out.append(f"#   finding: {finding.message}\n")
            out.extend(f"#   evidence: {_evidence_text(e)}\n" for e in repair.evidence)
    for left in plan.left:
        task = f" {left.finding.task}" if left.finding.task else ""
        out.append(
            f"# left alone: {left.state_file} {left.unit}{task} "
            f"{left.finding.detector}/{left.finding.code}: {left.reason}\n"
        )
    return "".join(out)


def _undo(workspace: str, lock_timeout: float) -> int:
    from storyd.api.reconcile.apply import undo_last
    from storyd.api.reconcile.failures import os_failure

    try:
        restored = undo_last(workspace, lock_timeout)
    except OSError as exc:  # the writes themselves report what they did (failures.py)
        raise os_failure(exc, "reconcile --undo") from None
    for path in restored:
        sys.stdout.write(f"restored {path}\n")
    sys.stdout.write(f"undone: {len(restored)} file(s) restored\n")
    return 0


def main(argv: list[str]) -> int:
    """Preview (exit 1 when changes are proposed), --apply, or --undo."""
    flags = parse_prefixed(argv, FLAGS, USAGE)
    workspace = os.path.realpath(text(flags, "workspace") or ".")
    if not os.path.isdir(workspace):
        raise UsageError(f"--workspace {workspace}: not a folder")
    lock_timeout = _lock_timeout(flags)
    if flags.get("undo"):
        extra = [
            f for f in ("apply", "only", "epic-id", "story-id", "state-file", "unit") if f in flags
        ]
        if extra:
            raise UsageError(f"--undo takes only --workspace and --lock-timeout\n{USAGE}")
        return _undo(workspace, lock_timeout)
    selection = _selection(flags, workspace)
    only = _only(flags)
    from storyd import config
    from storyd.api.reconcile import make_plan

    cfg = config.load(config_file(flags))

    def plan_now() -> Plan:
        return make_plan(workspace, selection, cfg, only, lock_timeout)

    from storyd.cli.terminal import Progress

    # the units are read and checked inside the plan (daemon/api/reconcile/gather.py): the
    # line says how long it has been working, not how far it has got
    with Progress("storyd reconcile: planning", quiet=bool(flags.get("quiet"))):
        if flags.get("apply"):
            from storyd.api.reconcile.apply import apply
            from storyd.api.reconcile.failures import os_failure

            try:
                plan = apply(workspace, plan_now, lock_timeout)
            except OSError as exc:  # the writes themselves report what they did (failures.py)
                raise os_failure(exc, "reconcile --apply") from None
            _tell_daemon(workspace, plan)
        else:
            plan = plan_now()
    if flags.get("json"):
        body = {**plan.as_dict(), "applied": bool(flags.get("apply")) and plan.changed}
        sys.stdout.write(json.dumps(body, ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(render(plan))
        if flags.get("apply"):
            sys.stdout.write(f"applied: {len(plan.files)} file(s) written; undo with --undo\n")
    if flags.get("apply"):
        return 0
    return 1 if plan.changed else 0


def _tell_daemon(workspace: str, plan: Plan) -> None:
    """After a CLI apply: let a running daemon emit `reconciled` (quietly skipped if none)."""
    if not plan.changed:
        return
    from storyd.api.client import Client, DaemonUnavailable

    try:
        with Client(None, timeout=1.0) as client:
            client.request("reconciled", workspace=workspace)
    except (DaemonUnavailable, OSError, StorydError):
        pass
