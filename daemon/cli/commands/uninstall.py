"""`storyd uninstall [--service]`: stop and disable the units when a user manager is
reachable, then remove the unit files and any enablement links left beside them. On
macOS (or with --launchd) it unloads the launchd agent (`launchctl bootout`) and removes
its plist; the log folder ~/Library/Logs/storyd stays.

`--claude`, `--cursor`, `--vscode`, `--codex`, `--gemini` (and `--skill`) instead take
out of that agent's files exactly what `storyd install` put in, and give a file storyd
left untouched since back as it was; see docs/agents.md.

Exit codes: 0 done (also when nothing was installed), 64 bad flags, 73 a file could not
be removed. A failing `systemctl` is reported and the files are still removed.
"""

from __future__ import annotations

import os
import sys

from storyd.cli.commands.install import (
    AGENT_FLAGS,
    SERVICE_FLAGS,
    UNITS,
    agent_loaded,
    chosen_agent_dir,
    chosen_unit_dir,
    run_commands,
    service_kind,
    systemctl,
    user_manager,
)
from storyd.core.flags import SWITCH, VALUE, parse

__all__ = ["main"]

USAGE = (
    "usage: storyd uninstall [--service] [--launchd|--systemd] [--unit-dir DIR]\n"
    f"       storyd uninstall {'|'.join('--' + a for a in AGENT_FLAGS)} ... "
    "[--project DIR] [--dry-run]"
)
FLAGS = {"unit-dir": VALUE, "project": VALUE, "dry-run": SWITCH,
         **dict.fromkeys((*SERVICE_FLAGS, *AGENT_FLAGS), SWITCH)}  # fmt: skip


def _enablement_links(unit_dir: str) -> list[str]:
    """Symlinks named after our units in <unit_dir>/*.wants and *.requires."""
    links = []
    try:
        folders = sorted(os.listdir(unit_dir))
    except OSError:
        return []
    for folder in folders:
        if not folder.endswith((".wants", ".requires")):
            continue
        for unit in UNITS:
            path = os.path.join(unit_dir, folder, unit)
            if os.path.islink(path):
                links.append(path)
    return links


def _remove(paths: list[str]) -> int:
    """Remove each file (saying so); 73 when one could not be removed, else 0."""
    code = 0
    for path in paths:
        if not os.path.lexists(path):
            print(f"absent: {path}")
            continue
        try:
            os.unlink(path)
        except OSError as exc:
            sys.stderr.write(f"storyd uninstall: cannot remove {path}: {exc.strerror}\n")
            code = 73
            continue
        print(f"removed: {path}")
    return code


def _uninstall_agent(flags: dict[str, object]) -> int:
    """Unload the launchd agent when launchctl has it, then remove its plist."""
    from storyd.cli import launchagent

    if launchagent.launchctl() is None:
        print("note: launchctl is not on PATH (not macOS?); nothing to unload")
    elif agent_loaded():
        if run_commands([launchagent.bootout()]) != 0:
            print("warn: launchctl could not unload the agent; removing the file anyway")
    else:
        print(f"note: {launchagent.LABEL} is not loaded; nothing to unload")
    return _remove([os.path.join(chosen_agent_dir(flags), f"{launchagent.LABEL}.plist")])


def main(argv: list[str]) -> int:
    """Stop, disable and remove the storyd user units."""
    flags = parse(argv, FLAGS, USAGE)
    if any(flags.get(agent) for agent in AGENT_FLAGS):
        from storyd.agents.setup import uninstall

        return uninstall(flags)
    if flags.get("project") or flags.get("dry-run"):
        from storyd.core.errors import UsageError

        raise UsageError(f"--project and --dry-run go with an agent's flag or --skill\n{USAGE}")
    if service_kind(flags) == "launchd":
        return _uninstall_agent(flags)
    unit_dir = chosen_unit_dir(flags)
    reachable, reason = user_manager()
    if reachable:
        if run_commands([systemctl("disable", "--now", *UNITS)]) != 0:
            print("warn: systemctl could not stop or disable the units; removing the files anyway")
    else:
        print(f"note: no systemd user manager is reachable ({reason}); nothing to stop")

    units = [os.path.join(unit_dir, unit) for unit in UNITS]
    code = _remove([*units, *_enablement_links(unit_dir)])
    if reachable:
        run_commands([systemctl("daemon-reload")])
    return code
