"""`storyd uninstall`: stop and disable the units when a user manager is reachable, then
remove the unit files and any enablement links left beside them.

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
    UNITS,
    chosen_unit_dir,
    run_commands,
    systemctl,
    user_manager,
)
from storyd.core.flags import SWITCH, VALUE, parse

__all__ = ["main"]

USAGE = (
    "usage: storyd uninstall [--unit-dir DIR]\n"
    f"       storyd uninstall {'|'.join('--' + a for a in AGENT_FLAGS)} ... "
    "[--project DIR] [--dry-run]"
)
FLAGS = {"unit-dir": VALUE, "project": VALUE, "dry-run": SWITCH,
         **dict.fromkeys(AGENT_FLAGS, SWITCH)}  # fmt: skip


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


def main(argv: list[str]) -> int:
    """Stop, disable and remove the storyd user units."""
    flags = parse(argv, FLAGS, USAGE)
    if any(flags.get(agent) for agent in AGENT_FLAGS):
        from storyd.agents.setup import uninstall

        return uninstall(flags)
    if flags.get("project") or flags.get("dry-run"):
        from storyd.core.errors import UsageError

        raise UsageError(f"--project and --dry-run go with an agent's flag or --skill\n{USAGE}")
    unit_dir = chosen_unit_dir(flags)
    reachable, reason = user_manager()
    if reachable:
        if run_commands([systemctl("disable", "--now", *UNITS)]) != 0:
            print("warn: systemctl could not stop or disable the units; removing the files anyway")
    else:
        print(f"note: no systemd user manager is reachable ({reason}); nothing to stop")

    code = 0
    for path in [*(os.path.join(unit_dir, unit) for unit in UNITS), *_enablement_links(unit_dir)]:
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
    if reachable:
        run_commands([systemctl("daemon-reload")])
    return code
