"""`storyd unwatch DIR ...`: ask the running daemon to stop watching workspaces (the
socket's `unwatch` op). Their units leave the cache and subscribers get `removed`
events; the log sums each one up in one `last_look` line (no hook, no desktop
notification). No daemon: exit 69.
"""

from __future__ import annotations

from storyd.cli.commands.watch import FLAGS, run

__all__ = ["FLAGS", "USAGE", "main"]

USAGE = "usage: storyd unwatch DIR ... [--workspace DIR ...] [--socket PATH] [--timeout MS]"


def main(argv: list[str]) -> int:
    """Unwatch every folder named."""
    return run("unwatch", argv, USAGE)
