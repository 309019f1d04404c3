"""`storyd reconcile`: write back what git proves, with a preview (the default) and an undo.

Exit codes: 0 nothing to change (or applied, or undone, or recovered), 1 changes
proposed (like `git diff --exit-code`), nothing to undo, or a redo record not obeyed
(--recover), 64 bad flags, 65 undo refused, 74 a write failed (disk full, I/O error), 75
a writer held its lock past --lock-timeout, or another owner holds a unit the write
touches (claims: the line names the holder; --force writes anyway and the claims' log
says so), 77 a file or folder is not writable (74 and 77 name the files written and not
written). --owner is whose write it is (default: $STORYD_OWNER, else the user). See
docs/reconcile.md and docs/claims.md.
"""

from __future__ import annotations

import json
import sys

from storyd.api.plantext import plan_text as render
from storyd.cli.common import parse_prefixed
from storyd.core.errors import UsageError
from storyd.core.flags import SWITCH, VALUE, text
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.reconcile.gather import Selection
    from storyd.api.reconciling import Fence

__all__ = ["COMPLETE_WORDS", "FLAGS", "main", "render"]

USAGE = (
    "usage: storyd reconcile [--workspace DIR] [--epic-id E [--story-id S] | --state-file PATH "
    "[--unit U]] [--apply] [--only CODE,...] [--json] [--lock-timeout S] [--config FILE]\n"
    "                        [--quiet] [--owner NAME] [--force]\n"
    "       storyd reconcile --undo [--workspace DIR] [--owner NAME] [--force]\n"
    "       storyd reconcile --recover [--workspace DIR] [--json]"
)
FLAGS = {
    "workspace": VALUE,
    "epic-id": VALUE,
    "story-id": VALUE,
    "state-file": VALUE,
    "unit": VALUE,
    "apply": SWITCH,
    "undo": SWITCH,
    "recover": SWITCH,
    "only": VALUE,
    "json": SWITCH,
    "lock-timeout": VALUE,
    "config": VALUE,
    "quiet": SWITCH,
    "owner": VALUE,
    "force": SWITCH,
}


def COMPLETE_WORDS() -> dict[str, tuple[str, ...]]:  # read by completion.py
    """What `storyd completion` offers for values the usage cannot spell: --only's codes."""
    from storyd.api.reconcile.repairs import repair_codes

    return {"only": repair_codes()}


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


def _fence(flags: dict[str, object]) -> Fence:
    from storyd.api.reconciling import Fence

    return Fence(text(flags, "owner"), bool(flags.get("force")))


def _undo(workspace: str, lock_timeout: float, fence: Fence) -> int:
    from storyd.api.reconciling import undo

    restored = undo(workspace, lock_timeout, fence)
    for path in restored:
        sys.stdout.write(f"restored {path}\n")
    sys.stdout.write(f"undone: {len(restored)} file(s) restored\n")
    return 0


def _recover(workspace: str, lock_timeout: float, as_json: bool) -> int:
    """Finish killed writes from storyd's own records: 0 when none is left pending, 1
    when a record was not obeyed (each listed, with why)."""
    from storyd.api.reconciling import recover

    done = recover(workspace, lock_timeout)
    if as_json:
        sys.stdout.write(json.dumps([d.as_dict() for d in done], ensure_ascii=False) + "\n")
    else:
        for item in done:
            sys.stdout.write(f"{item.relpath}: {item.outcome}\n")
        if not done:
            sys.stdout.write("recover: no interrupted reconcile write in this workspace\n")
    return 1 if any(d.outcome.startswith("ignored") for d in done) else 0


def _selection(flags: dict[str, object], workspace: str) -> Selection:
    """--epic-id alone is the whole epic: every story of its state file."""
    from storyd.api.reconciling import combination, selection

    parts = {
        "epic_id": text(flags, "epic-id"),
        "story_id": text(flags, "story-id"),
        "state_file": text(flags, "state-file"),
        "unit": text(flags, "unit"),
    }
    try:
        combination(**parts)
    except UsageError as exc:
        raise UsageError(f"{exc.message}\n{USAGE}") from None
    return selection(workspace, **parts)


def main(argv: list[str]) -> int:
    """Preview (exit 1 when changes are proposed), --apply, or --undo."""
    from storyd.api.reconciling import folder, only_codes, reconcile

    flags = parse_prefixed(argv, FLAGS, USAGE)
    workspace = folder(text(flags, "workspace") or ".")
    lock_timeout = _lock_timeout(flags)
    for alone in ("undo", "recover"):
        if not flags.get(alone):
            continue
        others = ("apply", "only", "epic-id", "story-id", "state-file", "unit",
                  "undo" if alone == "recover" else "recover")
        extra: list[str] = [f for f in others if f in flags]
        if alone == "recover":
            extra += [f for f in ("owner", "force") if f in flags]
        if extra:
            more = " (and --owner, --force)" if alone == "undo" else ""
            raise UsageError(f"--{alone} takes only --workspace and --lock-timeout{more}\n{USAGE}")
        if alone == "undo":
            return _undo(workspace, lock_timeout, _fence(flags))
        return _recover(workspace, lock_timeout, bool(flags.get("json")))
    chosen = _selection(flags, workspace)
    only = only_codes(text(flags, "only"))
    apply = bool(flags.get("apply"))
    from storyd.cli.terminal import Progress

    # the units are read and checked inside the plan (daemon/api/reconcile/gather.py): the
    # line says how long it has been working, not how far it has got
    with Progress("storyd reconcile: planning", quiet=bool(flags.get("quiet"))):
        done = reconcile(
            workspace, chosen, only=only, apply=apply, config=text(flags, "config"),
            lock_timeout=lock_timeout, fence=_fence(flags),
        )  # fmt: skip
    if flags.get("json"):
        sys.stdout.write(json.dumps(done.as_dict(), ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(render(done.plan))
        if apply:
            sys.stdout.write(f"applied: {len(done.plan.files)} file(s) written; undo with --undo\n")
    return done.code
