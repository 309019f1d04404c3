"""`storyd serve`: run the daemon in the foreground (systemd runs it the same way)."""

from __future__ import annotations

import os
import sys

from daemon.errors import StorydError, UsageError
from daemon.flags import MANY, SWITCH, VALUE, parse

__all__ = ["main"]

USAGE = (
    "usage: storyd serve [--socket PATH] [--workspace DIR ...] [--config FILE]\n"
    "                    [--staleness git|mtime] [--log-level debug|info|warning|error]"
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


def _settings(flags: dict[str, object], cfg: object) -> object:
    from daemon.service import Settings

    limits = cfg.limits  # type: ignore[attr-defined]
    staleness = str(flags.get("staleness") or cfg.staleness)  # type: ignore[attr-defined]
    if staleness not in ("git", "mtime"):
        raise UsageError(f"invalid --staleness {staleness!r}: expected git or mtime\n{USAGE}")
    verify = flags.get("verify-interval")
    try:
        verify_interval = float(verify) if verify is not None else float(limits.verify_interval)  # type: ignore[arg-type]
    except ValueError:
        raise UsageError(f"invalid --verify-interval {verify!r}\n{USAGE}") from None
    return Settings(
        staleness=staleness,
        lock_timeout=limits.lock_timeout,
        max_workspaces=limits.max_workspaces,
        auto_watch=cfg.auto_watch and not flags.get("no-auto-watch"),  # type: ignore[attr-defined]
        max_line_bytes=limits.max_line_bytes,
        settle=limits.settle_ms / 1000,
        verify_interval=verify_interval,
        max_subscribers=limits.max_subscribers,
        subscriber_buffer=limits.subscriber_buffer,
    )


def _workspaces(flags: dict[str, object], cfg: object) -> list[str]:
    given = [os.path.abspath(str(w)) for w in flags.get("workspace", [])]  # type: ignore[attr-defined]
    return given + [w for w in cfg.workspaces if w not in given]  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    """Bind (or take systemd's socket), scan, signal READY, serve until SIGTERM."""
    try:
        flags = parse(argv, FLAGS, USAGE)
    except UsageError as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code
    from daemon import config, log

    log.configure(str(flags.get("log-level", "info")))
    logger = log.get("serve")
    config_file = str(flags.get("config") or "") or None
    try:
        cfg = config.load(config_file)
        settings = _settings(flags, cfg)
    except StorydError as exc:
        sys.stderr.write(f"storyd serve: {exc.message}\n")
        return exc.code
    from daemon.runtime import Runtime

    runtime = Runtime(settings, cfg, config_file, logger)  # type: ignore[arg-type]
    try:
        return runtime.run(str(flags.get("socket") or cfg.socket or ""), _workspaces(flags, cfg))  # type: ignore[attr-defined]
    except StorydError as exc:
        sys.stderr.write(f"storyd serve: {exc.message}\n")
        logger.error("serve_failed", error=exc.message, code=exc.code)
        return exc.code
