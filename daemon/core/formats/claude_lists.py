"""Claude Code's task lists outside the workspace: `~/.claude/tasks/<list id>/`.

A session's list lives in the folder named by CLAUDE_CODE_TASK_LIST_ID, else by its
session id, under Claude Code's configuration folder (CLAUDE_CONFIG_DIR, else
`~/.claude`); an agent team's list is named by its team (`teams/<team>/config.json`,
whose `leadSessionId` and members' `cwd` say where it works). Only a folder a session of
the workspace recorded is read (storyd.api.claude_ties). Claude Code writes these files,
but they are still hostile input: a list id is one plain name (no separator, not
hidden), the list folder is opened in `tasks/` without following a link (O_NOFOLLOW),
its names are listed up to MAX_NAMES and its task files opened in that folder without
following a link, regular files only, each bounded (claude_tasks.read_task_files) and at
most MAX_LIST_BYTES in all. The daemon does not watch these folders: each answer reads
the list again (a stat and a few small files).

Importing this module costs only `os` and `stat` (the session-start hook names folders
with it); the list's parse is imported when a list is read.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.model import Unit

__all__ = ["MAX_LIST_BYTES", "MAX_NAMES", "config_dir", "list_folder", "list_name",
           "read_list", "team_config", "team_of", "teams"]

MAX_NAMES = 10_000  # names listed in one folder; past this the folder is not Claude Code's
MAX_LIST_BYTES = 16 << 20  # one list's task files in all
MAX_TEAMS = 64  # team folders looked at
_MAX_CONFIG = 1 << 20  # a team's config.json
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def config_dir() -> str:
    """Claude Code's configuration folder."""
    return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def plain(name: object) -> bool:
    """Whether `name` can name one folder: a non-empty name, no separator, not hidden."""
    return (isinstance(name, str) and 0 < len(name) <= 200 and "/" not in name
            and "\\" not in name and "\0" not in name and not name.startswith("."))


def list_name(session: str | None) -> str | None:
    """The task list's id for this session: CLAUDE_CODE_TASK_LIST_ID first, else the
    session id; None when it cannot name one folder (empty, a path, hidden)."""
    name = os.environ.get("CLAUDE_CODE_TASK_LIST_ID") or session
    return name if plain(name) else None


def list_folder(session: str | None) -> str | None:
    """The task-list folder of this session (CLAUDE_CODE_TASK_LIST_ID first), or None
    when the id cannot name one folder (empty, a path, hidden)."""
    name = list_name(session)
    return None if name is None else os.path.join(config_dir(), "tasks", name)


def _open_below(parent: str, name: str) -> int:
    """A descriptor on the folder `name` in `parent`, never through a link (OSError)."""
    if not plain(name):
        raise FileNotFoundError(name)
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(name, _OPEN_DIR, dir_fd=pfd)
    finally:
        os.close(pfd)


def _names(dfd: int) -> list[str]:
    """At most MAX_NAMES names of the folder open as `dfd`."""
    found: list[str] = []
    with os.scandir(dfd) as entries:
        for entry in entries:
            found.append(entry.name)
            if len(found) >= MAX_NAMES:
                break
    return found


def team_of(folder: str) -> str | None:
    """The agent team whose list this folder (`<config>/tasks/<name>`) is:
    `<config>/teams/<name>/config.json` exists."""
    name = os.path.basename(folder)
    try:
        tfd = _open_below(os.path.join(os.path.dirname(os.path.dirname(folder)), "teams"), name)
    except OSError:
        return None
    try:
        return name if stat.S_ISREG(os.stat("config.json", dir_fd=tfd,
                                            follow_symlinks=False).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(tfd)


def team_config(team: str, home: str | None = None) -> dict[str, object] | None:
    """A team's `config.json` (in `home`, else config_dir()) as a JSON object (not
    through a link, at most 1 MiB), or None (absent, unreadable, not an object)."""
    from storyd.core.formats.claude_tasks import read_task_files
    from storyd.core.jsonio import loads

    try:
        tfd = _open_below(os.path.join(home or config_dir(), "teams"), team)
    except OSError:
        return None
    try:
        got = read_task_files(["config.json"], tfd, {}, limit=_MAX_CONFIG)
    finally:
        os.close(tfd)
    try:
        value = loads(got[0][1]) if got else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def teams(home: str | None = None) -> list[str]:
    """The agent teams' names in `home` (else config_dir()): at most MAX_TEAMS, plain
    names only, in name order."""
    try:
        fd = os.open(os.path.join(home or config_dir(), "teams"),
                     os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return sorted(n for n in _names(fd) if plain(n))[:MAX_TEAMS]
    except OSError:
        return []
    finally:
        os.close(fd)


def read_list(folder: str) -> Unit | None:
    """The list's unit, or None when the folder is absent, a link, or holds no task."""
    from storyd.core.formats.claude_tasks import read_task_files, task_names, unit_of

    parent, name = os.path.split(folder)
    try:
        lfd = _open_below(parent, name)
    except OSError:
        return None
    try:
        try:
            names = task_names(_names(lfd))
        except OSError:
            return None
        # no link followed out of the folder; Claude Code takes no lock
        files = read_task_files(names, lfd, {}, budget=MAX_LIST_BYTES)
    finally:
        os.close(lfd)
    if not files:
        return None
    unit = unit_of(files, folder, ordered=True)
    team = team_of(folder)
    if team is not None:
        unit.labels["team"] = team
    return unit
