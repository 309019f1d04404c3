"""Claude Code's task lists outside the workspace: `~/.claude/tasks/<list id>/`.

A session's list lives in the folder named by CLAUDE_CODE_TASK_LIST_ID, else by its
session id, under Claude Code's configuration folder (CLAUDE_CONFIG_DIR, else
`~/.claude`); an agent team's list is named by its team (`teams/<team>/config.json`).
Only a folder a session of the workspace recorded is read (storyd.api.sessions): the
folder itself must not be a link, its task files are opened without following a link
(O_NOFOLLOW) and only when regular files of bounded size (issue 39's rules).
The daemon does not watch these folders: each answer reads the list again.
"""

from __future__ import annotations

import os
import stat

from storyd.core.formats.claude_tasks import read_task_file, task_names, unit_of
from storyd.core.model import Unit

__all__ = ["config_dir", "list_folder", "read_list", "team_of"]


def config_dir() -> str:
    """Claude Code's configuration folder."""
    return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def list_folder(session: str | None) -> str | None:
    """The task-list folder of this session (CLAUDE_CODE_TASK_LIST_ID first), or None
    when the id cannot name one folder (empty, a path, hidden)."""
    name = os.environ.get("CLAUDE_CODE_TASK_LIST_ID") or session
    if not name or "/" in name or "\0" in name or name.startswith(".") or len(name) > 200:
        return None
    return os.path.join(config_dir(), "tasks", name)


def team_of(folder: str) -> str | None:
    """The agent team whose list this folder is (`teams/<name>/config.json` exists)."""
    name = os.path.basename(folder)
    config = os.path.join(config_dir(), "teams", name, "config.json")
    try:
        return name if stat.S_ISREG(os.lstat(config).st_mode) else None
    except OSError:
        return None


def read_list(folder: str) -> Unit | None:
    """The list's unit, or None when the folder is absent, a link, or holds no task."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
        names = task_names(os.listdir(folder))
    except OSError:
        return None
    files = []
    for name in names:
        try:
            data, _ = read_task_file(os.path.join(folder, name))
        except OSError:
            continue  # a link, a FIFO, too large, or gone since listed
        files.append((name, data))
    if not files:
        return None
    unit = unit_of(files, folder)
    team = team_of(folder)
    if team is not None:
        unit.labels["team"] = team
    return unit
