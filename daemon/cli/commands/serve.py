"""`storyd serve`: run the daemon in the foreground (systemd runs it the same way)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from storyd.cli.common import config_file
from storyd.core.errors import StorydError, UsageError
from storyd.core.flags import MANY, SWITCH, VALUE, parse, text
from storyd.core.storytime import MODES

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from storyd.config import Config
    from storyd.server.service import Settings

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


def _settings(flags: dict[str, object], cfg: Config) -> Settings:
    from storyd.server.service import Settings

    limits = cfg.limits
    staleness = str(flags.get("staleness") or cfg.staleness)
    if staleness not in MODES:
        expected = " or ".join(MODES)
        raise UsageError(f"invalid --staleness {staleness!r}: expected {expected}\n{USAGE}")
    verify = text(flags, "verify-interval")
    try:
        limits = limits.replace(verify_interval=float(verify)) if verify is not None else limits
    except ValueError:
        raise UsageError(f"invalid --verify-interval {verify!r}\n{USAGE}") from None
    auto_watch = cfg.auto_watch and not flags.get("no-auto-watch")
    return Settings(limits, staleness=staleness, auto_watch=auto_watch)


def _workspaces(flags: dict[str, object], cfg: Config) -> list[str]:
    listed = flags.get("workspace")
    given = [os.path.abspath(str(w)) for w in listed] if isinstance(listed, list) else []
    return given + [w for w in cfg.workspaces if w not in given]


def _serve(
    settings: Settings,
    cfg: Config,
    given: str | None,
    logger: FilteringBoundLogger,
    flags: dict[str, object],
) -> int:
    """Take the socket first, then import and build the daemon behind it (issue 43): a
    client's connect waits in the backlog meanwhile rather than being refused."""
    from storyd.server.bind import take_socket

    bound = take_socket(str(flags.get("socket") or cfg.socket or ""))
    try:
        from storyd.server.runtime import Runtime
    except BaseException:
        bound.close()
        raise
    return Runtime(settings, cfg, given, logger).run(bound, _workspaces(flags, cfg))


def main(argv: list[str]) -> int:
    """Bind (or take systemd's socket), scan, signal READY, serve until SIGTERM."""
    flags = parse(argv, FLAGS, USAGE)
    # The daemon's own git reads (status refreshes the index) must not take index.lock:
    # the watcher would see it as a git operation and recheck, forever.
    os.environ["GIT_OPTIONAL_LOCKS"] = "0"
    from storyd import config
    from storyd.core import log, registry

    log.configure(str(flags.get("log-level", "info")))
    logger = log.get("serve")
    registry.get().report(lambda problem: logger.warning("plugin_skipped", problem=problem))
    given = config_file(flags)
    cfg = config.load(given)
    settings = _settings(flags, cfg)
    try:
        code = _serve(settings, cfg, given, logger, flags)
    except StorydError as exc:  # printed here, before the log line that records it
        sys.stderr.write(f"storyd serve: {exc.message}\n")
        logger.error("serve_failed", error=exc.message, code=exc.code)
        return exc.code
    from storyd.server.service import exit_now

    exit_now(code)  # a worker stuck in a system call must not keep the process alive
    return code
