"""`storyd serve`: run the daemon in the foreground (systemd runs it the same way)."""

from __future__ import annotations

import os
import sys

from storyd.cli.common import config_file
from storyd.core.errors import StorydError, UsageError
from storyd.core.flags import MANY, SWITCH, VALUE, parse, text
from storyd.core.storytime import MODES

TYPE_CHECKING = False  # `typing` costs the early door's start-up (server/door.py)
if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from storyd.config import Config
    from storyd.config.values import Limits
    from storyd.server.bind import Bound
    from storyd.server.door import EarlyDoor
    from storyd.server.early import EarlyAnswers

__all__ = ["main"]

USAGE = (
    "usage: storyd serve [--socket PATH] [--workspace DIR ...] [--config FILE]\n"
    "                    [--staleness git|mtime] [--log-level debug|info|warning|error]\n"
    "                    [--verify-interval SECONDS] [--no-auto-watch]"
)
FLAGS = {
    "socket": VALUE,
    "workspace": MANY,
    "config": VALUE,
    "staleness": VALUE,
    "log-level": VALUE,
    "verify-interval": VALUE,
    "no-auto-watch": SWITCH,
}


def _staleness(flags: dict[str, object], cfg: Config) -> str:
    staleness = str(flags.get("staleness") or cfg.staleness)
    if staleness not in MODES:
        expected = " or ".join(MODES)
        raise UsageError(f"invalid --staleness {staleness!r}: expected {expected}\n{USAGE}")
    return staleness


def _limits(flags: dict[str, object], cfg: Config) -> Limits:
    """The configuration's limits, with --verify-interval within the range the
    configuration file allows (0 would spin a core on the verification tick)."""
    from storyd.config.values import LIMITS

    verify = text(flags, "verify-interval")
    if verify is None:
        return cfg.limits
    _, _, lowest, highest = LIMITS["verify_interval"]
    try:
        seconds = float(verify)
    except ValueError:
        raise UsageError(f"invalid --verify-interval {verify!r}\n{USAGE}") from None
    if not lowest <= seconds <= highest:  # (NaN too)
        msg = f"--verify-interval {verify} is out of range: expected {lowest:g} to {highest:g}"
        raise UsageError(f"{msg}\n{USAGE}")
    return cfg.limits.replace(verify_interval=seconds)


LEVELS = ("debug", "info", "warning", "error")


def _workspaces(flags: dict[str, object], cfg: Config) -> list[str]:
    listed = flags.get("workspace")
    given = [os.path.abspath(str(w)) for w in listed] if isinstance(listed, list) else []
    return given + [w for w in cfg.workspaces if w not in given]


def _open_door(bound: Bound, limits: Limits, staleness: str,
               cfg: Config) -> tuple[EarlyDoor, EarlyAnswers]:
    """The early door on the bound socket: it answers while the daemon is built."""
    from storyd.config.history import database_of
    from storyd.server.door import EarlyDoor
    from storyd.server.early import EarlyAnswers
    from storyd.server.lazydetect import Detectors

    early = EarlyAnswers(limits, staleness, Detectors(cfg, staleness), database_of(cfg.history))
    early.prepare()
    return EarlyDoor(bound.sock, early, limits.max_line_bytes).open(), early


def opened(flags: dict[str, object], cfg: Config) -> tuple[Bound, EarlyDoor, EarlyAnswers]:
    """The socket taken and the early door open on it, before anything the door does
    not need is imported: neither asyncio, structlog nor orjson, and on a socket that
    systemd or launchd hands over, neither fasteners nor typing
    (tests/test_door_bytes.py)."""
    from storyd.server.bind import take_socket

    staleness, limits = _staleness(flags, cfg), _limits(flags, cfg)  # usage errors first
    bound = take_socket(str(flags.get("socket") or cfg.socket or ""))
    try:
        door, early = _open_door(bound, limits, staleness, cfg)
    except BaseException:
        bound.close()
        raise
    return bound, door, early


def _serve(flags: dict[str, object], cfg: Config, given: str | None, level: str) -> int:
    """Take the socket and open the early door first, then import and build the daemon
    behind it (issue 43): a client's first questions are answered meanwhile."""
    staleness, limits = _staleness(flags, cfg), _limits(flags, cfg)
    bound, door, early = opened(flags, cfg)
    try:
        from storyd.core import registry
        from storyd.server.runtime import Runtime
        from storyd.server.service import Settings
    except BaseException:
        door.close(lambda sock, _data: sock.close())  # what it handed goes with the socket
        bound.close()
        raise
    logger = _logged(level)
    registry.get().report(lambda problem: logger.warning("plugin_skipped", problem=problem))
    auto_watch = cfg.auto_watch and not flags.get("no-auto-watch")
    settings = Settings(limits, staleness=staleness, auto_watch=auto_watch)
    runtime = Runtime(settings, cfg, given, logger)
    return runtime.run(bound, _workspaces(flags, cfg), door, early)


def main(argv: list[str]) -> int:
    """Bind (or take systemd's socket), scan, signal READY, serve until SIGTERM."""
    flags = parse(argv, FLAGS, USAGE)
    # The daemon's own git reads (status refreshes the index) must not take index.lock:
    # the watcher would see it as a git operation and recheck, forever.
    os.environ["GIT_OPTIONAL_LOCKS"] = "0"
    from storyd import config

    level = str(flags.get("log-level", "info"))
    if level not in LEVELS:
        sys.stderr.write(f"storyd serve: --log-level {level!r}: expected one of "
                         f"{', '.join(LEVELS)}\n{USAGE}")  # fmt: skip
        return UsageError.code
    given = config_file(flags)
    try:
        cfg = config.load(given)
        code = _serve(flags, cfg, given, level)
    except StorydError as exc:  # printed here, before the log line that records it
        sys.stderr.write(f"storyd serve: {exc.message}\n")
        _logged(level).error("serve_failed", error=exc.message, code=exc.code)
        return exc.code
    from storyd.server.service import exit_now

    exit_now(code)  # a worker stuck in a system call must not keep the process alive
    return code


def _logged(level: str) -> FilteringBoundLogger:
    """The serve logger, the log configured (structlog: imported once the door is open)."""
    from storyd.core import log

    log.configure(level)
    return log.get("serve")
