"""Stand-ins for the drift notification sinks: a desktop notifier and a hook that record.

    fake_notify_send()   an executable `notify-send` that appends its argv to a file
    append_stdin_hook()  a hook command that appends what it reads on stdin to a file
    hook_calls()         what that hook recorded: one list of event lines per call
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

__all__ = ["append_stdin_hook", "fake_notify_send", "hook_calls"]


def fake_notify_send(folder: Path, record: Path) -> Path:
    """An executable `notify-send` in `folder` that appends its argv (as JSON) to `record`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "notify-send"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(record)!r}, 'a', encoding='utf-8') as out:\n"
        "    out.write(json.dumps(sys.argv[1:]) + '\\n')\n",
        encoding="utf-8")
    script.chmod(0o755)
    return script


def append_stdin_hook(script: Path, record: Path) -> list[str]:
    """A hook argv: this Python running a script that appends its stdin, then a separator
    line `--`, to `record`. One hook call is one block."""
    script.write_text(
        "import sys\n"
        "data = sys.stdin.buffer.read()\n"
        f"with open({str(record)!r}, 'ab') as out:\n"
        "    out.write(data + b'--\\n')\n",
        encoding="utf-8")
    return [sys.executable, str(script)]


def hook_calls(record: Path) -> list[list[dict[str, object]]]:
    """What `append_stdin_hook` recorded: one list of parsed event lines per call."""
    if not record.exists():
        return []
    calls: list[list[dict[str, object]]] = [[]]
    for raw in record.read_bytes().splitlines():
        if raw == b"--":
            calls.append([])
        else:
            calls[-1].append(orjson.loads(raw))
    return calls[:-1]
