"""`storyd doctor`'s fleet lines: the extra installed, and how the daemon publishes."""

from __future__ import annotations

import importlib.util

from storyd.fleet.config import Fleet

__all__ = ["check_fleet"]


def check_fleet(fleet: Fleet, stats: dict[str, object] | None) -> list[tuple[str, str]]:
    """(level, text) lines: ok, warn or fail."""
    if importlib.util.find_spec("nats") is None:
        return [("fail", "[fleet] is set but nats-py is not installed: "
                         "pip install 'storyd[fleet]'")]
    state = (stats or {}).get("fleet")
    if stats is None:
        return [("warn", f"no daemon answers: nothing publishes to {fleet.url}")]
    if not isinstance(state, dict):
        return [("warn", "the daemon does not publish (started before [fleet] was set? "
                         "restart it)")]
    backlog = (f"backlog {state.get('backlog')}/{state.get('backlogSize')}, "
               f"dropped {state.get('dropped')}")
    if state.get("connected"):
        return [("ok", f"publishing to {state.get('url')} as {state.get('machine')} ({backlog})")]
    error = state.get("lastError") or "not connected yet"
    level = "warn" if not state.get("dropped") else "fail"
    return [(level, f"not publishing to {state.get('url')}: {error} ({backlog})")]
