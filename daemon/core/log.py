"""The daemon's log: one line per event on stderr, in the form its reader wants.

- stderr is systemd's journal (JOURNAL_STREAM names its device and inode): JSON lines,
  each prefixed `<N>` with the syslog priority of its level (debug 7, info 6, warning
  4, error 3), which journald strips and stores as PRIORITY, so `journalctl -p
  warning` finds the warnings;
- stderr is a terminal (`storyd serve` by hand): human-readable lines
  (`timestamp [level    ] event  key=value`), coloured unless NO_COLOR is set
  (non-empty) or TERM=dumb;
- anything else (a file, a pipe): JSON lines, one object each.

Each line is the event, `level`, a UTC ISO `timestamp`, the logger's name and the
call's keywords (`exception`: the traceback, for `.exception`). The API is structlog's
bound logger (`get(name).info("event", key=value)`, `.bind`), without structlog: its
import pulls in structlog.dev and rich, about 110 ms of the daemon's start-up and its
first answer (issue 43). systemd's journal keeps stderr, so no file handling is needed.
`storyd resume` never imports this module.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import orjson

from storyd.core.switches import CONFIG

__all__ = ["PRIORITIES", "Logger", "configure", "get", "to_journal"]

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
# syslog priorities (sd-daemon(3)): what journald files each level under
PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2, "exception": 3}
_COLOURS = {"debug": "\x1b[32m", "info": "\x1b[32m", "warning": "\x1b[33m",
            "error": "\x1b[31m", "critical": "\x1b[31m"}


def to_journal(fd: int = 2) -> bool:
    """Whether `fd` is the journal's stream: JOURNAL_STREAM is `<device>:<inode>` of it."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    if not device.isdigit() or not inode.isdigit():
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


def _timestamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def _json(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event, default=repr)


def _journal(event: dict[str, Any]) -> bytes:
    return b"<%d>" % PRIORITIES.get(str(event.get("level")), 6) + _json(event)


def _console(colours: bool) -> Any:
    def render(event: dict[str, Any]) -> bytes:
        stamp, level, name = event.pop("timestamp"), event.pop("level"), event.pop("event")
        trace = event.pop("exception", None)
        pairs = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                         for k, v in event.items())
        tag = f"[{level:<9}]"
        if colours:
            tag = f"[{_COLOURS.get(level, '')}{level:<9}\x1b[0m]"
        line = f"{stamp} {tag} {name:<30} {pairs}".rstrip()
        if trace:
            line += "\n" + str(trace)
        return line.encode("utf-8", "replace")
    return render


_LOCK = threading.Lock()  # one line at a time


def _form() -> tuple[int, Any]:
    """The level and renderer in force (switches.CONFIG: process-wide state's owner)."""
    return CONFIG.log_form or (_LEVELS["info"], _json)


def _emit(level: str, event: str, context: dict[str, Any], fields: dict[str, Any],
          trace: bool) -> None:
    least, render = _form()
    if _LEVELS[level] < least:
        return
    line: dict[str, Any] = {"event": event, **context, **fields, "level": level,
                            "timestamp": _timestamp()}
    if trace:
        import traceback  # only when an exception is logged

        line["exception"] = traceback.format_exc()
    text = render(line).decode("utf-8", "replace") + "\n"
    with _LOCK:
        _write(text)


def _write(text: str) -> None:
    """One line to stderr as it is now (a test's capture too); a closed stderr must
    never stop the daemon."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        return


class Logger:
    """A bound logger: `info("event", key=value)` writes one line with its context."""

    __slots__ = ("_context",)

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context

    def bind(self, **context: Any) -> Logger:
        """A logger whose lines carry these keywords too."""
        return Logger({**self._context, **context})

    def _log(self, level: str, event: str, fields: dict[str, Any], trace: bool = False) -> None:
        _emit(level, event, self._context, fields, trace)

    def debug(self, event: str, **fields: Any) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log("error", event, fields)

    def critical(self, event: str, **fields: Any) -> None:
        self._log("critical", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error line with the traceback being handled (`exception`)."""
        self._log("error", event, fields, trace=True)


def configure(level: str = "info") -> None:
    """Lines to stderr at `level` (debug, info, warning, error), in the reader's form."""
    render: Any = _json
    if to_journal():
        render = _journal
    elif sys.stderr.isatty():
        colours = not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        render = _console(bool(colours))
    CONFIG.log_form = (_LEVELS.get(level, _LEVELS["info"]), render)


def get(name: str) -> Logger:
    """A logger whose lines carry `logger: name`."""
    return Logger({"logger": name})
