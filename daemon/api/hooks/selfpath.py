"""The storyd a hook's printed fix names: the one running now, by its absolute path.

An agent runs a printed command in its own shell, whose PATH may not hold a venv's or
pipx's `storyd` (`command not found`). The script that runs the hook does exist, and
its `#!` names its interpreter by absolute path, so it runs with PATH=/usr/bin:/bin.
"""

from __future__ import annotations

import os
import sys

__all__ = ["storyd_argv"]


def storyd_argv() -> list[str]:
    """The running storyd as argv: its script, else the one beside this interpreter or on
    PATH (absolute), else this interpreter with `-m storyd`."""
    from storyd.core.paths import storyd_executable

    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    named = os.path.basename(script).startswith("storyd")
    if named and os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    found = storyd_executable()
    if found is not None:
        return [found]
    return [sys.executable, "-m", "storyd"]
