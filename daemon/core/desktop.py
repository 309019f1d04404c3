"""The desktop notifier this machine has, chosen at run time, and the argv that shows
one notification with it: osascript on macOS, notify-send elsewhere (the other when
only it is on PATH). No shell: osascript runs a fixed `on run argv` handler and gets
the title and the text as arguments, so nothing in them is parsed as AppleScript.
"""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["desktop_argv", "desktop_tool"]

# shows its two arguments: the title and the text are never spliced into the script,
# whatever quotes, backslashes or newlines they hold
_APPLESCRIPT = (
    "on run argv",
    "display notification (item 2 of argv) with title (item 1 of argv)",
    "end run",
)


def desktop_tool(platform: str = sys.platform) -> str | None:
    """The desktop notifier on PATH: osascript first on macOS, notify-send first
    elsewhere; None when neither is there."""
    names = ("osascript", "notify-send") if platform == "darwin" else ("notify-send", "osascript")
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def desktop_argv(tool: str, title: str, body: str) -> list[str]:
    """The argv that shows one notification with `tool` (desktop_tool's)."""
    if os.path.basename(tool) == "osascript":
        script = [word for line in _APPLESCRIPT for word in ("-e", line)]
        return [tool, *script, title, body]
    return [tool, "--app-name=storyd", title, body]
