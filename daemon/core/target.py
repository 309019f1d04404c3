"""What a query names: the state file, its format's adapter, the unit, and the words of
"not there". The one place that works this out, for the daemon's cache and its misses,
the direct read, reconcile and every door.

A query names a unit one of two ways: the seed's `--epic-id`/`--story-id` (the epic
format, its folder found on disk or in the cache's list of files) or `--state-file`
with an optional `--unit` (any format, found by path; a file of one unit needs no key).
"""

from __future__ import annotations

from storyd.core.containment import resolve
from storyd.core.errors import StoryNotInState, UsageError
from storyd.core.pipeline import inside

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from storyd.core.formats.base import Adapter
    from storyd.core.model import Unit
    from storyd.core.query import Query

__all__ = [
    "STORY_MISSING", "Target", "current_unit", "for_epic", "for_query", "for_state_file",
    "resolve_state_file",
]

# the seed skill's own words for exit 2, byte for byte
STORY_MISSING = "Story not in execution-state.json"


class Target:
    """A state file (workspace-relative), the key of the unit in it (None: the file's
    only unit), the adapter's name, and the message when the unit is not there."""

    __slots__ = ("_adapter", "format", "key", "missing", "relpath")

    def __init__(self, relpath: str, key: str | None, missing: str, format: str | None,
                 adapter: Adapter | None = None) -> None:
        self.relpath = relpath
        self.key = key
        self.missing = missing
        self.format = format  # None: found by path when first asked (`adapter`)
        self._adapter = adapter

    @property
    def adapter(self) -> Adapter:
        """The format adapter that reads this state file."""
        if self._adapter is None:
            from storyd.core.formats import adapter_for, builtin

            self._adapter = (builtin(self.format) if self.format is not None
                             else adapter_for(self.relpath))
        return self._adapter

    def not_there(self) -> StoryNotInState:
        """The error for a unit the file does not hold (exit 2)."""
        return StoryNotInState(self.missing)

    def pick(self, units: list[Unit]) -> Unit:
        """The named unit among the file's units; with no key, the file's only one, or
        the one its format calls current (`current_unit`)."""
        if self.key is None:
            if len(units) == 1:
                return units[0]
            current = current_unit(units)
            if current is not None:
                return current
            names = ", ".join(u.key for u in units[:10]) or "none"
            msg = f"{self.relpath} holds {len(units)} units ({names}); name one with --unit"
            raise UsageError(msg)
        for unit in units:
            if unit.key == self.key:
                return unit
        raise self.not_there()


def current_unit(units: list[Unit]) -> Unit | None:
    """The unit a format marks current with the label `current: yes` (Task Master's
    `currentTag`), when exactly one is: the answer to a query that names no unit."""
    marked = [u for u in units if u.labels.get("current") == "yes"]
    return marked[0] if len(marked) == 1 else None


def for_epic(workspace: str, epic_id: str, story_id: str, relpath: str | None = None) -> Target:
    """The seed's query (ids already normalised): the epic's state file, found on disk
    (slugged folders too) unless the caller's cache already knows it as `relpath`. The
    seed's query is the epic format by definition (no plugin may take its name), so its
    adapter comes from the epic module itself, without the registry: one module less on
    `storyd resume`'s start-up path."""
    from storyd.core.formats import epic

    if relpath is None:
        relpath = epic.epic_state_file(workspace, epic_id)
    return Target(relpath, story_id, STORY_MISSING, "epic", epic.ADAPTER)


def for_state_file(workspace: str, state_file: str, unit: str | None, *,
                   lexical: bool = False) -> Target:
    """`--state-file` (and `--unit`): any format, found by path. `lexical`: trust the
    lexical rule alone (the daemon's cache holds only files whose read checked links)."""
    relpath = inside(workspace, state_file) if lexical else None
    if relpath is None:
        relpath = resolve_state_file(workspace, state_file)
    return Target(relpath, unit, f"unit {unit!r} not in {relpath}", None)


def for_query(workspace: str, query: Query) -> Target:
    """A query's target as the disk has it: its epic's story, or its state file's unit."""
    if query.state_file is None:
        return for_epic(workspace, str(query.epic), str(query.story))
    return for_state_file(workspace, query.state_file, query.unit)


def resolve_state_file(workspace: str, state_file: str) -> str:
    """A state file given as a path, made workspace-relative by the one rule
    (`pipeline.inside`), and not a link that leads out of the workspace or into git's
    folders (core/containment.py)."""
    if "\0" in state_file or "\0" in workspace:
        raise UsageError("a path may not contain a NUL byte")
    relpath = inside(workspace, state_file)
    if relpath is None:
        msg = f"{state_file}: outside the workspace {workspace}"
        raise UsageError(msg)
    resolve(workspace, relpath)  # Refused: a link out, or into git's folders
    return relpath
