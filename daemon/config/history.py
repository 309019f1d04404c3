"""[history]: the history database's limits (daemon/api/history, docs/service.md).

enabled        bool    record every version of every unit (default true)
path           str     the database (default $XDG_STATE_HOME/storyd/history.sqlite3)
max_versions   int     versions kept per unit (its newest always stays)
max_age_days   float   versions older than this are dropped (0: never)
max_mb         int     the database's size bound: the oldest versions go first
prune_minutes  float   how often the writer prunes, in the background
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config.checker import Checker

__all__ = ["HISTORY_KEYS", "NUMBERS", "History", "check"]

# name: (type, default, lowest, highest)
NUMBERS: dict[str, tuple[type, float, float, float]] = {
    "max_versions": (int, 200, 1, 1_000_000),
    "max_age_days": (float, 180.0, 0.0, 36_500.0),
    "max_mb": (int, 512, 1, 1024 * 1024),
    "prune_minutes": (float, 10.0, 0.1, 1440.0),
}
HISTORY_KEYS = ("enabled", "path", *NUMBERS)


class History:
    """[history]'s values (defaults: NUMBERS)."""

    __slots__ = HISTORY_KEYS
    enabled: bool
    path: str | None
    max_versions: int
    max_age_days: float
    max_mb: int
    prune_minutes: float

    def __init__(self, enabled: bool = True, path: str | None = None, **numbers: float) -> None:
        self.enabled = enabled
        self.path = path
        for name, (kind, default, _, _) in NUMBERS.items():
            setattr(self, name, kind(numbers.get(name, default)))

    def as_dict(self) -> dict[str, object]:
        """The table as plain data (`storyd config show`)."""
        return {k: getattr(self, k) for k in HISTORY_KEYS}

    def __repr__(self) -> str:
        return "History(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in HISTORY_KEYS) + ")"


def database_of(table: History | None) -> str | None:
    """Where a daemon with this [history] table records (None: the table is off): its
    path, else $STORYD_HISTORY, else the state folder's (no table: the defaults)."""
    from storyd.core.paths import history_path

    if table is None:
        return history_path()
    return (table.path or history_path()) if table.enabled else None


def check(checker: Checker, table: dict[str, object]) -> History:
    """[history] as written, each problem told to `checker`."""
    import os

    checker.unknown(table, HISTORY_KEYS, "history.")
    enabled = checker.boolean("history.enabled", table.get("enabled", True), True)
    path = table.get("path")
    if path is not None and (not isinstance(path, str) or not path):
        checker.problem("history.path", "expected a non-empty string")
        path = None
    elif isinstance(path, str):
        # a relative path is the home folder's, as the daemon (run from home) reads it:
        # every process that reads the file finds the same database
        path = os.path.normpath(os.path.join(os.path.expanduser("~"), os.path.expanduser(path)))
    numbers = {
        name: checker.number(f"history.{name}", table[name], spec)
        for name, spec in NUMBERS.items()
        if name in table
    }
    return History(enabled, path, **numbers)
