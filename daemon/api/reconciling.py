"""`reconcile`: plan, apply and undo the write-back of what git proves, as the command
line and the MCP tools ask for it (the work itself is daemon/api/reconcile/).

Exit codes ride on the errors: 64 a bad selection or repair code, 65 undo refused, 74 a
write failed, 75 a writer held its lock, 77 not writable; `Reconciled.code` is 1 for a
preview that proposes changes (like `git diff --exit-code`).
"""

from __future__ import annotations

import os

from storyd.core.errors import StorydError, UsageError
from storyd.core.locking import DEFAULT_LOCK_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.api.reconcile.gather import Selection
    from storyd.api.reconcile.plan import Plan
    from storyd.api.reconcile.recovery import Recovered

__all__ = ["Fence", "Reconciled", "combination", "folder", "only_codes", "reconcile", "recover",
           "selection", "undo"]


class Fence:
    """Claims (daemon/api/claims.py) on what a write touches: `owner` writes; each unit
    another owner holds refuses it (Held, exit 75, naming the holder) unless `force`
    (logged as forced); the owner's own grants, seen when the fence is made, must still
    be current at the write. No claims database: nothing was ever claimed, nothing to
    check."""

    __slots__ = ("force", "owner", "start")

    def __init__(self, owner: str | None = None, force: bool = False) -> None:
        from storyd.api import claims

        self.owner = owner or claims.default_owner()
        self.force = force
        self.start: dict[tuple[str, str, str], int] | None = None

    def check(self, workspace: str, places: list[tuple[str, str]], what: str) -> None:
        """Before writing these (state file, unit) places ('' the whole file)."""
        from storyd.api.claims_fleet import configured
        from storyd.api.claims_path import ever_claimed

        if not places or not (ever_claimed() or configured()):
            return
        from storyd.api import claims

        if self.start is None:  # the grants the owner holds as the write begins
            held = claims.listing(workspace, owner=self.owner, abandoned=False)
            self.start = {c.place.key()[:3]: c.token for c in held}
        for state_file, unit in sorted(set(places)):
            token = self.start.get((workspace, state_file, unit))
            claims.fence(claims.Place(workspace, state_file, unit), self.owner, token,
                         force=self.force, what=what)  # fmt: skip


class Reconciled:
    """A plan, and whether it was written (`apply` asked and something changed)."""

    __slots__ = ("applied", "apply", "plan")

    def __init__(self, plan: Plan, apply: bool) -> None:
        self.plan = plan
        self.apply = apply
        self.applied = apply and plan.changed

    @property
    def code(self) -> int:
        """0 nothing to change or applied; 1 a preview proposing changes."""
        return 1 if not self.apply and self.plan.changed else 0

    def as_dict(self) -> dict[str, object]:
        """`storyd reconcile --json`'s object."""
        return {**self.plan.as_dict(), "applied": self.applied}


def folder(workspace: str) -> str:
    """The workspace's real path; a UsageError when it is not a folder."""
    path = os.path.realpath(workspace)
    if not os.path.isdir(path):
        raise UsageError(f"--workspace {path}: not a folder")
    return path


def selection(
    workspace: str,
    *,
    epic_id: str | None = None,
    story_id: str | None = None,
    state_file: str | None = None,
    unit: str | None = None,
) -> Selection:
    """Which units: a story of an epic, a whole epic (every story of its state file), a
    state file (optionally one unit), or everything. UsageError for a bad combination or
    id (the message names the flags, without the usage line)."""
    from storyd.api.reconcile.gather import Selection
    from storyd.core.ids import normalize_epic_id, normalize_story_id

    combination(epic_id, story_id, state_file, unit)
    if epic_id is not None and story_id is not None:
        return Selection(epic=normalize_epic_id(epic_id), story=normalize_story_id(story_id))
    if epic_id is not None:
        from storyd.core.formats.epic import epic_state_file

        epic = normalize_epic_id(epic_id)
        return Selection(epic=epic, state_file=epic_state_file(workspace, epic))
    return Selection(state_file=state_file, unit=unit)


def combination(
    epic_id: str | None, story_id: str | None, state_file: str | None, unit: str | None
) -> None:
    """A UsageError when the selection's parts do not go together."""
    if state_file is not None and (epic_id or story_id):
        raise UsageError("--state-file replaces --story-id and --epic-id")
    if story_id is not None and epic_id is None:
        raise UsageError("--story-id needs --epic-id")
    if unit is not None and state_file is None:
        raise UsageError("--unit goes with --state-file")


def only_codes(given: str | None) -> frozenset[str] | None:
    """`--only a,b` as repair codes (None: every code); UsageError for an unknown one."""
    from storyd.api.reconcile.repairs import repair_codes

    if given is None:
        return None
    codes = frozenset(c.strip() for c in given.split(",") if c.strip())
    unknown = sorted(codes - set(repair_codes()))
    if unknown or not codes:
        known = ", ".join(repair_codes())
        raise UsageError(f"--only: unknown repair code(s) {', '.join(unknown)}; known: {known}")
    return codes


def reconcile(
    workspace: str,
    chosen: Selection,
    *,
    only: frozenset[str] | None = None,
    apply: bool = False,
    config: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    fence: Fence | None = None,
) -> Reconciled:
    """Plan the write-back for the chosen units of `workspace` (a folder's real path),
    and with `apply` write it (under the writers' lock, atomically, undo recorded) and
    tell a running daemon. `config` is the configuration file (SetupError when missing).
    `fence`: whose write it is (claims; default the user or agent session)."""
    from storyd import config as configuration
    from storyd.api.reconcile import make_plan
    from storyd.api.units import config_file

    cfg = configuration.load(config_file(config))

    def plan_now() -> Plan:
        return make_plan(workspace, chosen, cfg, only, lock_timeout)

    if not apply:
        return Reconciled(plan_now(), False)
    fenced = fence or Fence()

    def plan_fenced() -> Plan:  # checked at each (re)plan: as late as the write allows
        plan = plan_now()
        places = [(f.relpath, r.unit or "") for f in plan.files for r in f.repairs]
        places += [(f.relpath, "") for f in plan.files if not f.repairs]
        fenced.check(workspace, places, "reconcile --apply")
        return plan

    from storyd.api.reconcile.apply import apply as write
    from storyd.api.reconcile.failures import os_failure

    try:
        plan = write(workspace, plan_fenced, lock_timeout)
    except OSError as exc:  # the writes themselves report what they did (failures.py)
        raise os_failure(exc, "reconcile --apply") from None
    _tell_daemon(workspace, plan)
    return Reconciled(plan, True)


def undo(workspace: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
         fence: Fence | None = None) -> list[str]:  # fmt: skip
    """Put back the bytes of the last apply in `workspace`; the files restored. Refused
    (Held, 75) when another owner holds a unit of a file it would restore."""
    from storyd.api.reconcile import undo as records
    from storyd.api.reconcile.apply import undo_last
    from storyd.api.reconcile.failures import os_failure

    try:
        record, _ = records.load(workspace)
    except StorydError:
        record = None  # undo_last says why, in its own words
    if record is not None:
        (fence or Fence()).check(workspace, [(f.path, "") for f in record.files],
                                 "reconcile --undo")  # fmt: skip
    try:
        return undo_last(workspace, lock_timeout)
    except OSError as exc:  # the writes themselves report what they did (failures.py)
        raise os_failure(exc, "reconcile --undo") from None


def recover(workspace: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[Recovered]:
    """Finish the writes a killed reconcile left in `workspace` (a folder's real path),
    from storyd's own redo records; list the records not obeyed, and why."""
    from storyd.api.reconcile.failures import os_failure
    from storyd.api.reconcile.recovery import recover_workspace
    from storyd.core.formats import all_adapters
    from storyd.core.pipeline import find_state_files

    state_files = sorted(find_state_files(workspace, all_adapters()))
    try:
        return recover_workspace(workspace, state_files, lock_timeout)
    except OSError as exc:
        raise os_failure(exc, "reconcile --recover") from None


def _tell_daemon(workspace: str, plan: Plan) -> None:
    """After an apply: let a running daemon emit `reconciled` (quietly skipped if none)."""
    if not plan.changed:
        return
    from storyd.api.client import Client, DaemonUnavailable

    try:
        with Client(None, timeout=1.0) as client:
            client.request("reconciled", workspace=workspace)
    except (DaemonUnavailable, OSError, StorydError):
        pass
