"""Claude Code's task lists tied to their workspaces (issue 44): which list under
`~/.claude/tasks/` is whose, told across /compact and /clear.

Claude Code keeps a session's list in `~/.claude/tasks/<session id>/` (or
`<CLAUDE_CODE_TASK_LIST_ID>/`), outside the workspace; compaction and /clear start a new
session id, so a new, empty list, and the old one is orphaned (anthropics/claude-code
#54508, #26698). The session-start hook knows the session and its folder, so it ties
the list to the workspace, in storyd's private state:

    $XDG_STATE_HOME/storyd/claude-lists/<sha256(workspace)[:32]>.json   (mode 0600)
    {"workspace": W, "ties": [{"list", "session", "source", "at", "claude"}, ...]}

newest first; `claude` is Claude Code's folder as the hook saw it (CLAUDE_CONFIG_DIR,
else ~/.claude), so a daemon started without that variable reads the same lists

written as the session records are (storyd.api.sessions.write_private: the folder
opened without following a link, a new temporary file renamed over the record), at
most MAX_TIES per workspace, MAX_WORKSPACES records. `storyd status` (and `check`, the
MCP server, `top`'s list: storyd.api.units) shows each tied list that has tasks as a
unit of the workspace, with its current task, owners and dependencies, and the agent
teams working there (`teams/<team>/config.json`: the lead session tied to the
workspace, or a member whose `cwd` is in it) with their members. When a session starts
with no list of its own while an earlier session of the workspace left one with open
tasks, the new session is told in one line: the old list's id, its open tasks and its
current task. Earlier sessions storyd did not see are found only when provable: a
session whose transcript Claude Code filed in the same project folder as this
session's (`projects/<cwd's slug>/<session id>.jsonl`, the payload's transcript_path).

Nothing watches these folders: each answer reads the tied lists again, a stat of a
folder and a few small files each (storyd.core.formats.claude_lists' bounded reads).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from storyd.api.hooks.payload import Hook
    from storyd.core.model import Unit

__all__ = ["MAX_TIES", "STALE_AFTER", "handover", "load", "newest_change", "record_path",
           "session_start", "summaries", "tie", "tied_units", "with_lists"]

MAX_TIES = 32  # lists remembered per workspace, the newest kept
MAX_WORKSPACES = 512  # records kept, the least recently written dropped
_MAX_AGE = 90 * 86400.0  # a workspace's record untouched this long is dropped
_MAX_BYTES = 1 << 20
_TRANSCRIPTS = 64  # the newest transcripts of a project folder looked at
_SUBJECT_CHARS = 120
_SHOWN = 10
# a list whose newest task file changed longer ago than this is not handed over to a new
# session: work left that long is abandoned, not interrupted (a /compact or /clear hands
# over within minutes; a two-week holiday still does). It stays in `storyd status`.
STALE_AFTER = 14 * 86400.0


def record_path(workspace: str) -> str:
    """Where the ties of `workspace` are kept."""
    from storyd.core.digest import sha256_hex  # not hashlib (a hook's start-up)
    from storyd.core.paths import state_dir

    key = sha256_hex(workspace.encode("utf-8", "surrogatepass"))[:32]
    return os.path.join(state_dir(), "claude-lists", key + ".json")


def _tie_entry(value: object) -> dict[str, object] | None:
    from storyd.core.formats.claude_lists import plain

    if not isinstance(value, dict) or not plain(value.get("list")):
        return None
    session, source, at = value.get("session"), value.get("source"), value.get("at")
    home = value.get("claude")
    return {"list": value["list"], "session": session if isinstance(session, str) else None,
            "claude": home if isinstance(home, str) and os.path.isabs(home) else None,
            "source": source if isinstance(source, str) else None,
            "at": float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0}


def load(workspace: str) -> list[dict[str, object]]:
    """The lists tied to `workspace`, newest first (none: no record, unreadable, not ours)."""
    from storyd.core.jsonio import loads
    from storyd.core.regular import read_regular

    try:  # a FIFO, a device or more than _MAX_BYTES there: unreadable at once
        value = loads(read_regular(record_path(workspace), _MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(value, dict) or value.get("workspace") != workspace:
        return []
    ties = value.get("ties")
    found = [e for e in map(_tie_entry, ties if isinstance(ties, list) else []) if e is not None]
    return found[:MAX_TIES]


def tie(session: str, workspace: str, source: str | None) -> list[dict[str, object]]:
    """Tie this session's list to `workspace` (newest first); the ties before it."""
    from storyd.api.sessions import write_private
    from storyd.core.formats.claude_lists import config_dir, list_name
    from storyd.core.jsonio import dumps

    before = load(workspace)
    name = list_name(session)
    if name is None:
        return before
    entry = {"list": name, "session": session, "source": source, "at": time.time(),
             "claude": os.path.abspath(config_dir())}
    ties = [entry, *(t for t in before if t["list"] != name)][:MAX_TIES]
    write_private(record_path(workspace), dumps({"workspace": workspace, "ties": ties}),
                  keep=MAX_WORKSPACES, age=_MAX_AGE)
    return before


def _transcript_sessions(transcript: str | None, session: str) -> list[str]:
    """Earlier sessions whose transcripts Claude Code filed in this session's project
    folder (`projects/<slug of the cwd>/<id>.jsonl`): the same folder, so the same
    workspace. The newest first; none unless the folder is under `projects/`."""
    from storyd.core.formats.claude_lists import config_dir, plain

    if not transcript:
        return []
    folder = os.path.dirname(transcript)
    projects = os.path.join(config_dir(), "projects")
    if os.path.dirname(folder) != projects or not plain(os.path.basename(folder)):
        return []
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        with os.scandir(fd) as entries:
            found = []
            for entry in entries:
                if entry.name.endswith(".jsonl") and plain(entry.name[:-6]):
                    found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name[:-6]))
                if len(found) >= 4 * _TRANSCRIPTS:
                    break
    except OSError:
        return []
    finally:
        os.close(fd)
    found.sort(reverse=True)
    return [s for _, s in found[:_TRANSCRIPTS] if s != session]


def _open(unit: Unit) -> int:
    return sum(1 for t in unit.tasks if not t.done)


def _current(unit: Unit) -> str:
    nxt = unit.next or {}
    if not nxt.get("task"):
        return "no task can start (every pending task waits on a blocker)"
    subject = " ".join(str(nxt.get("subject") or "").split())
    if len(subject) > _SUBJECT_CHARS:
        subject = subject[: _SUBJECT_CHARS - 3] + "..."
    state = "in progress" if nxt.get("inProgress") else "ready"  # the first one in progress
    owner = f", owner {nxt['owner']}" if nxt.get("owner") else ""
    return f"current task {nxt['task']} \"{subject}\" ({state}{owner})"


def handover(session: str, workspace: str, source: str | None,
             before: list[dict[str, object]], transcript: str | None = None) -> str | None:
    """The one line a new session is told when its own list is empty while an earlier
    session of the workspace left a list with open tasks; None otherwise."""
    from storyd.core.formats.claude_lists import list_folder, list_name, read_list

    name = list_name(session)
    own = list_folder(session)
    if name is None or own is None or read_list(own) is not None:
        return None  # a list of its own already (resumed, or a shared list id)
    base = os.path.dirname(own)
    seen = {name}
    tied = [str(t["list"]) for t in before]
    for list_id in [*tied, *_transcript_sessions(transcript, session)]:
        if list_id in seen:
            continue
        seen.add(list_id)
        folder = os.path.join(base, list_id)
        unit = read_list(folder)
        if unit is None or _open(unit) == 0 or time.time() - newest_change(folder) > STALE_AFTER:
            continue
        last = tied[:1] == [list_id]  # the session just before this one
        why = {"compact": "before /compact", "clear": "before /clear"}.get(str(source))
        why = why if why and last else "of an earlier session"
        found = "" if list_id in tied else " (found by its transcript in this project)"
        return (f"claude-tasks: this session's task list is empty; the list {why}, "
                f"{list_id}{found} ({unit.state_file}/), has {_open(unit)} open task(s) of "
                f"{len(unit.tasks)}; {_current(unit)}. Recreate the open tasks or read "
                "that folder to carry on (storyd status shows it).")
    return None


def session_start(hook: Hook, workspace: str) -> str | None:
    """Tie a Claude Code session's list to its workspace; the line telling it of an
    orphaned list (storyd.api.hooks.session_start calls this)."""
    if hook.agent != "claude" or hook.session is None:
        return None
    before = tie(hook.session, workspace, hook.source)
    return handover(hook.session, workspace, hook.source, before, hook.transcript)


def newest_change(folder: str) -> float:
    """When a task file of the list `folder` last changed (its newest mtime, the folder's
    own when it lists none; 0.0 when unreadable): lstat of at most MAX_NAMES names."""
    from storyd.core.formats.claude_lists import MAX_NAMES

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0.0
    try:
        newest = os.fstat(fd).st_mtime
        with os.scandir(fd) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_NAMES:
                    break
                if entry.name.endswith(".json"):
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    except OSError:
        return 0.0
    finally:
        os.close(fd)
    return newest


def _inside(path: object, workspace: str) -> bool:
    inside = workspace.rstrip("/") + "/"
    return isinstance(path, str) and (path == workspace or path.startswith(inside))


def _team_units(workspace: str, sessions: set[str], seen: set[str], home: str) -> list[Unit]:
    """The agent teams working in `workspace` (Claude Code's folder `home`): their lists,
    with members and the lead."""
    from storyd.core.formats.claude_lists import read_list, team_config, teams

    found = []
    for team in teams(home):
        if team in seen:
            continue
        config = team_config(team, home)
        if config is None:
            continue
        members = [m for m in config.get("members") or () if isinstance(m, dict)]  # type: ignore[attr-defined]
        lead = config.get("leadSessionId")
        if lead not in sessions and not any(_inside(m.get("cwd"), workspace) for m in members):
            continue
        unit = read_list(os.path.join(home, "tasks", team))
        if unit is None:
            continue
        names = [f"{m.get('name')} ({m.get('agentType') or 'agent'})" for m in members
                 if isinstance(m.get("name"), str)]
        unit.key = team
        unit.labels["team"] = team
        unit.labels["members"] = ", ".join(names[:_SHOWN]) + (
            f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
        if isinstance(lead, str):
            unit.labels["leadSession"] = lead
        found.append(unit)
        seen.add(team)
    return found


def tied_units(workspace: str) -> list[Unit]:
    """The task lists of `workspace`: each tied list that has tasks (newest tie first,
    labelled with its list id, session and how it began), then its agent teams' lists."""
    from storyd.core.formats.claude_lists import config_dir, read_list

    ties = load(workspace)
    here = config_dir()
    units: list[Unit] = []
    seen: set[str] = set()
    for entry in ties:
        list_id = str(entry["list"])
        if list_id in seen:
            continue
        seen.add(list_id)
        unit = read_list(os.path.join(str(entry["claude"] or here), "tasks", list_id))
        if unit is None:
            continue
        unit.key = list_id  # `storyd status` names the list, not the folder's generic key
        unit.labels["list"] = list_id
        if entry.get("session"):
            unit.labels["session"] = str(entry["session"])
        if entry.get("source"):
            unit.labels["began"] = str(entry["source"])
        units.append(unit)
    sessions = {str(t["session"]) for t in ties if t.get("session")}
    home = next((str(t["claude"]) for t in ties if t["claude"]), here)  # the newest tie's
    return units + _team_units(workspace, sessions, seen, home)


def summaries(workspace: str, *, in_flight: bool = False,
              detail: bool = True) -> list[dict[str, object]]:  # fmt: skip
    """The tied lists of `workspace` as unit summaries (the `list` answer's fields;
    `detail`: with their findings; `in_flight`: those with a task left)."""
    from storyd.api.summaries import unit_summary

    out: list[dict[str, object]] = []
    for unit in tied_units(workspace):
        if in_flight and unit.resume_point == "all-done":
            continue
        if unit.next and unit.next.get("task"):
            unit.labels["current"] = _current(unit).removeprefix("current task ")
        out.append(dict(unit_summary(workspace, unit, unit.resume_point, unit.findings, None,
                                     0, detail=detail)))
    return out


def with_lists(found: list[Any], workspaces: Iterable[str], *, in_flight: bool = False,
               detail: bool = True) -> list[Any]:  # fmt: skip
    """Unit summaries `found` with the task lists tied to `workspaces` and to the
    workspaces of `found`'s units added, in the `list` order (workspace, state file,
    unit): the one way every door adds them (storyd.api.units, the daemon's `list`
    op, the fleet's publisher)."""
    spaces = dict.fromkeys([*workspaces, *(str(u.get("workspace")) for u in found)])
    added = [s for ws in spaces for s in summaries(ws, in_flight=in_flight, detail=detail)]
    if not added:
        return found
    return sorted([*found, *added],
                  key=lambda u: (str(u["workspace"]), str(u["stateFile"]), str(u["unit"])))
