"""Whether progress a read lost is a lost update (the recorder's `regressed` findings):
the file read again (a writer, git's checkout or stash pop, may have been half way
through it) and the file's lineage (history_lineage.py: git moved the work tree)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from storyd.api import history_lineage as lineage
from storyd.api import history_rules as rules
from storyd.api.history import on_branch
from storyd.core import log

if TYPE_CHECKING:
    from storyd.core.model import Unit

__all__ = ["Moved", "gone_now", "lost_now"]


def _units_now(
    workspace: str, state_file: str, format: str | None, lock_timeout: float | None = None
) -> list[Unit] | None:
    """The file's units as it is now, read afresh (None: it cannot be read now, the
    writers' lock held past `lock_timeout` among the reasons; None: the default bound).
    Asked only when a read lost finished work (rare): a writer, git's checkout or stash
    pop among them, may have been half way through the file when it was read."""
    from storyd.core.errors import StorydError
    from storyd.core.formats import adapter_for, named
    from storyd.core.pipeline import Options, read_units

    options = Options() if lock_timeout is None else Options(lock_timeout)
    try:
        adapter = named(format) if format else adapter_for(state_file)
        return read_units(workspace, adapter, state_file, options)
    except (StorydError, OSError):
        return None


def lost_now(
    workspace: str,
    unit: Unit,
    marks: dict[str, rules.Mark],
    *,
    lock_timeout: float | None = None,
    unreadable: bool = True,
) -> bool:
    """Whether the file as it is now still loses what `unit`, read a moment ago, lost;
    `unreadable` when it cannot be read now (within `lock_timeout`): the installer
    judges the read that was made, a query's look (`Recorder.peek`) leaves it to it."""
    units = _units_now(workspace, unit.state_file, unit.format, lock_timeout)
    if units is None:
        return unreadable
    now = next((u for u in units if u.key == unit.key), None)
    return now is None or bool(rules.lost(marks, now, lambda sha: on_branch(workspace, sha)))


def gone_now(workspace: str, state_file: str, gone: set[str]) -> bool:
    """Whether the file as it is now still lacks some of the `gone` units."""
    units = _units_now(workspace, state_file, None)
    return units is None or bool(gone - {u.key for u in units})


class Moved:
    """One pass's state file: its lineage before the pass and now, and (asked once)
    why git explains what the version read now lost (history_lineage.explain)."""

    __slots__ = ("_why", "before", "file", "now", "quiet")

    def __init__(
        self,
        file: tuple[str, str],
        before: lineage.Stamp | None,
        now: lineage.Stamp | None,
        *,
        quiet: bool = False,
    ) -> None:
        self.file = file
        self.before = before
        self.now = now
        self.quiet = quiet  # a miss's look (`peek`): the pass that follows logs it
        self._why: str | bool | None = False  # False: not asked yet

    def busy(self) -> bool:
        """Whether git is writing the work tree now (asked afresh each time)."""
        return lineage.busy(self.file[0])

    def why(self) -> str | None:
        """Why git explains the loss, or None: then it is a lost update."""
        if self._why is False:
            self._why = lineage.explain(*self.file, self.before, self.now)
            if self._why is not None and not self.quiet:
                log.get("history").info("history_lineage", workspace=self.file[0],
                                        stateFile=self.file[1], why=self._why)  # fmt: skip
        return self._why  # type: ignore[return-value]

    def branch(self) -> str | None:
        """The branch the progress was seen on (its lineage's), None when detached."""
        return lineage.branch(self.before or self.now)
