"""The history of a unit, read from the history database (history_db.py) with no daemon:
its versions, newest last, each with what changed, merged with its claims' log
(`timeline`); a picture of tasks done per version;
the `regressed` findings of units read here; `storyd doctor`'s lines. Accepting a
version is history_accept.py.

`versions` opens the database read-only and waits at most `busy` seconds for a lock
(LockTimeout, 75, says so).
"""

from __future__ import annotations

import os
import time

from storyd.api import history_db, history_marks
from storyd.core.errors import StorydError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.model import Finding, Unit

__all__ = [
    "Named",
    "doctor_lines",
    "lost_progress",
    "name_unit",
    "on_branch",
    "picture",
    "timeline",
    "timeline_lines",
    "versions",
]


class Named:
    """A unit as history keys it: workspace (real path), state file (relative), unit."""

    __slots__ = ("state_file", "unit", "workspace")

    def __init__(self, workspace: str, state_file: str, unit: str | None) -> None:
        self.workspace = workspace
        self.state_file = state_file
        self.unit = unit

    def key(self) -> tuple[str, str, str]:
        """The database's key (the unit must be known)."""
        assert self.unit is not None
        return (self.workspace, self.state_file, self.unit)


def name_unit(
    workspace: str,
    *,
    epic_id: str | None = None,
    story_id: str | None = None,
    state_file: str | None = None,
    unit: str | None = None,
) -> Named:
    """The unit `--epic-id/--story-id` or `--state-file [--unit]` name (core/target.py)."""
    from storyd.core import target
    from storyd.core.ids import normalize_epic_id, normalize_story_id

    path = os.path.realpath(workspace)
    if state_file is not None:
        if epic_id is not None or story_id is not None:
            raise UsageError("--state-file replaces --epic-id and --story-id")
        found = target.for_state_file(path, state_file, unit)
        return Named(path, found.relpath, found.key)
    if epic_id is None or story_id is None:
        raise UsageError("name a unit: --epic-id and --story-id, or --state-file [--unit]")
    if unit is not None:
        raise UsageError("--unit goes with --state-file")
    found = target.for_epic(path, normalize_epic_id(epic_id), normalize_story_id(story_id))
    return Named(path, found.relpath, found.key)


def _only_unit(conn: object, named: Named) -> Named:
    """A `--state-file` without `--unit`: the file's one unit in history."""
    if named.unit is not None:
        return named
    rows = conn.execute(  # type: ignore[attr-defined]
        "SELECT unit FROM units WHERE workspace=? AND state_file=?",
        (named.workspace, named.state_file),
    ).fetchall()
    if len(rows) != 1:
        names = ", ".join(r[0] for r in rows[:10]) or "none"
        msg = f"{named.state_file} has {len(rows)} units in history ({names}); name one with --unit"
        raise UsageError(msg)
    return Named(named.workspace, named.state_file, rows[0][0])


def versions(
    named: Named, since: float = 0.0, path: str | None = None, busy: float = 2.0
) -> list[dict[str, object]]:
    """The unit's versions, oldest first: version, at, clock, source, kind, done, total,
    changes (words), tasks ([id, status, bucket, sha, completedAt]) and the envelope."""
    conn = history_db.open_reader(path or history_db.configured_or_default(), busy)
    try:
        from storyd.api import history_store  # json and hashlib: not on the marks' path

        return history_store.versions(conn, _only_unit(conn, named).key(), since)
    finally:
        conn.close()


def timeline(named: Named, since: float = 0.0, path: str | None = None,
             busy: float = 2.0) -> list[dict[str, object]]:  # fmt: skip
    """The unit's versions and its claims' log (grants, renewals, expiries, releases,
    forced writes: storyd.api.claimview.unit_log) in time order, oldest first; a run of
    renewals by one grant is its last, with `count`. Without a history database, the
    claims' log alone (the error when there is none either)."""
    from storyd.api.claimview import unit_log

    try:
        found = versions(named, since, path, busy)
    except StorydError:
        claimed = unit_log(named.workspace, named.state_file, named.unit, since)
        if not claimed:
            raise
        return _runs(claimed)
    if not found and named.unit is None:
        return found
    claimed = unit_log(named.workspace, named.state_file, named.unit, since)
    merged = sorted(found + claimed, key=lambda e: float(e["at"]))  # type: ignore[arg-type]
    return _runs(merged)


def _runs(found: list[dict[str, object]]) -> list[dict[str, object]]:
    """Consecutive renewals of one grant as one entry: the last, with their `count`."""
    out: list[dict[str, object]] = []
    for entry in found:
        before = out[-1] if out else None
        grant = (entry.get("owner"), entry.get("token"), entry.get("task"))
        if (entry.get("claim") == "renewed" and before is not None
                and before.get("claim") == "renewed"
                and (before.get("owner"), before.get("token"), before.get("task")) == grant):
            out[-1] = {**entry, "count": int(before.get("count") or 1) + 1}  # type: ignore[call-overload]
            continue
        out.append(entry)
    return out


def timeline_lines(found: list[dict[str, object]], width: int = 30,
                   utc: bool = False) -> list[str]:  # fmt: skip
    """`picture`'s lines for the versions, one line for each claims' log entry."""
    from storyd.api.claimview import log_line

    lines = []
    for entry in found:
        if "claim" not in entry:
            lines += picture([entry], width, utc)
            continue
        at = float(entry["at"])  # type: ignore[arg-type]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at) if utc else time.localtime(at))
        times = f" ({entry['count']} times)" if entry.get("count") else ""
        lines.append(f"{'':>7} {when} {log_line(entry)}{times}")
    return lines


def on_branch(workspace: str, sha: str) -> bool:
    """Whether `sha` is still in HEAD's history: a sha replaced while the old one is
    still there was not rewritten by git (no rewrite evidence)."""
    import subprocess

    from storyd.core.children import group  # git ends with the daemon

    try:
        done = subprocess.run(
            ["git", "-C", workspace, "merge-base", "--is-ancestor", sha, "HEAD"],
            capture_output=True, timeout=10, check=False, process_group=group(),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def lost_progress(
    workspace: str,
    units: list[Unit],
    path: str | None = None,
    busy: float = 2.0,
    *,
    whole_files: bool = True,
) -> dict[tuple[str, str], tuple[Finding, ...]]:
    """The `regressed` findings of units read here (no daemon: status, check, reconcile,
    resume --detail), by state file and unit key, from the marks the recording daemon
    keeps; none when there is no database. `whole_files`: `units` are every unit of
    their files, so a unit gone with its progress can be told (else it is not)."""
    from storyd.api import history_lineage as lineage
    from storyd.api import history_rules as rules

    if path is None:
        from storyd.config.loader import history_database

        path = history_database()
    from storyd.core.formats.base import nameable

    if not units or path is None or not nameable(workspace) or not os.path.exists(path):
        return {}  # (a daemon never records a workspace it cannot name in UTF-8)
    try:
        conn = history_db.open_reader(path, busy)
    except StorydError:
        return {}
    found: dict[tuple[str, str], tuple[Finding, ...]] = {}
    gone: dict[str, tuple[Finding, ...]] = {}
    now = lineage.stamp(workspace)
    explained: dict[str, str | None] = {}  # per state file: why git explains its loss

    def why(state_file: str, before: lineage.Stamp | None) -> str | None:
        if state_file not in explained:
            explained[state_file] = ("git is writing the work tree" if lineage.busy(workspace)
                                     else lineage.explain(workspace, state_file, before, now))
        return explained[state_file]

    units = [u for u in units if nameable(u.state_file)]  # (never recorded: SQLite is UTF-8)
    try:
        for unit in units:
            key = (workspace, unit.state_file, unit.key)
            marks, before = history_marks.lineage_of(conn, key)
            lost = rules.lost(marks, unit, lambda sha: on_branch(workspace, sha))
            if not whole_files:
                gone[unit.state_file] = ()
            elif unit.state_file not in gone:  # units gone from the file, once per file
                present = frozenset(u.key for u in units if u.state_file == unit.state_file)
                held = history_marks.file_marks(conn, workspace, unit.state_file)
                gone[unit.state_file] = rules.gone_findings(held, present, _iso)
            extra = gone[unit.state_file]
            if (lost or extra) and why(unit.state_file, before or now) is not None:
                continue  # git moved the work tree: not a lost update
            if lost or extra:
                branch = lineage.branch(before or now)
                found[unit.state_file, unit.key] = (
                    rules.regressed_findings(lost, _iso, branch) + extra
                )
    finally:
        conn.close()
    return found


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def picture(found: list[dict[str, object]], width: int = 30, utc: bool = False) -> list[str]:
    """One line per version: when, a bar of tasks done, done/total, what changed."""
    lines = []
    for v in found:
        done, total = int(v["done"]), int(v["total"])  # type: ignore[call-overload]
        filled = round(width * done / total) if total else 0
        bar = "#" * filled + "." * (width - filled)
        at = float(v["at"])  # type: ignore[arg-type]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at) if utc else time.localtime(at))
        said = "; ".join(v["changes"]) or "no task changed"  # type: ignore[arg-type]
        tag = "" if v["source"] == "daemon" else f" [{v['source']}]"
        lines.append(
            f"{v['version']:>7} {when} [{bar}] {done:>3}/{total:<3} {v['kind']}{tag}: {said}"
        )
    return lines


def doctor_lines(
    enabled: bool, path: str | None, stats: dict[str, object] | None
) -> list[tuple[str, str]]:
    """`storyd doctor`'s history lines: (ok, warn or fail, text)."""
    path = path or history_db.default_path()
    if not enabled:
        return [("ok", "off ([history] enabled = false): lost updates are not found")]
    size = os.path.getsize(path) / 1e6 if os.path.exists(path) else None
    where = f"{path} ({size:.1f} MB)" if size is not None else f"{path} (not created yet)"
    if stats is None:
        return [("ok", f"database {where}; no daemon answers, so nothing records now")]
    state = stats.get("history")
    if not isinstance(state, dict):
        return [("warn", f"the daemon does not record into {where}: another daemon holds "
                 "its lock, or it could not be opened (its log says history_off)")]  # fmt: skip
    if not state.get("recording"):
        why = "the daemon's log says history_stopped; restart it once fixed"
        return [("fail", f"recording into {where} stopped after a write failed (a full "
                 f"disk?): {why}")]  # fmt: skip
    return [("ok", f"recording into {where}: {state.get('versions')} versions this run, "
             f"{state.get('queued')} queued")]  # fmt: skip
