"""The finding codes each of storyd's own detectors can raise, by entry-point name: read
without importing the detector (the stop hook runs only those that declare a code it
blocks on, and imports only them). Each built-in takes its `codes` from here; a
third-party detector declares its own `codes`, read once it is loaded.
"""

from __future__ import annotations

__all__ = ["CODES"]

CODES: dict[str, tuple[str, ...]] = {
    "commit-in-history": (
        "no-repository", "no-tip", "repository-corrupt", "git-error", "invalid-sha",
        "ambiguous", "missing", "not-a-commit", "unreachable", "squash-merged", "unknown",
    ),
    "staleness": ("stale",),
    "task-named": ("claimed-in-commit", "git-error", "named-in-commit"),
    "task-order": ("out-of-order",),
    "unrecorded-commit": ("git-error", "unrecorded", "in-progress-committed"),
}  # fmt: skip
