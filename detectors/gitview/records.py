"""What a GitView keeps and reads: a scanned commit, a tip's walk, `git patch-id` lines,
and the oldest-first trim of its small caches (plain dicts: no `collections` import on a
hook's start).
"""

from __future__ import annotations

from storyd.core.words import runs

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypeVar

    K = TypeVar("K")
    V = TypeVar("V")

__all__ = ["Commit", "Walk", "newest", "parse_patch_ids", "trim"]


class Commit:
    """One commit of a scan: its sha, committer time, message and (when asked) paths."""

    __slots__ = ("_words", "message", "paths", "sha", "time")

    def __init__(self, sha: str, time: int, message: str, paths: tuple[str, ...] = ()) -> None:
        self.sha = sha
        self.time = time
        self.message = message
        self.paths = paths
        self._words: frozenset[str] | None = None

    def words(self) -> frozenset[str]:
        """The message's maximal runs of word characters and hyphens (task ids, story ids),
        split once per commit: a scan's commits are shared by every unit of a tip."""
        if self._words is None:
            self._words = frozenset(runs(self.message))
        return self._words

    def __repr__(self) -> str:
        return f"Commit({self.sha[:12]!r}, {self.time})"


class Walk:
    """The commits reachable from one tip, as of `tip` (a full sha)."""

    __slots__ = ("complete", "reachable", "tip")

    def __init__(self, tip: str, reachable: set[str], complete: bool) -> None:
        self.tip = tip
        self.reachable = reachable
        self.complete = complete


def trim(cache: dict[K, V], size: int) -> None:
    """Drop a dict's oldest entries (the first inserted) down to `size`."""
    while len(cache) > size:
        del cache[next(iter(cache))]


def parse_patch_ids(out: str) -> dict[str, str]:
    """commit -> patch id, from `git patch-id` lines `<patch id> <commit>`, in order."""
    ids: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            ids[parts[1]] = parts[0]
    return ids


def newest(wanted: dict[str, str], candidates: Mapping[str, str | None]) -> dict[str, str]:
    """For each wanted commit, the newest candidate (they come newest first) with its
    patch id."""
    first: dict[str, str] = {}  # patch id -> its newest commit
    for commit, patch_id in candidates.items():
        if patch_id is not None:
            first.setdefault(patch_id, commit)
    return {s: first[p] for s, p in wanted.items() if p in first}
