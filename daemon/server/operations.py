"""Which git operation is under way in a workspace now, as an answer needs to know it.

A direct read says a git operation is under way (rebase, merge, cherry-pick, revert,
bisect stopped mid-way) the instant git leaves its marker, and runs no detector then
(storyd.core.gitstate.operation_findings). A cached answer must say the same at the
same instant, whatever the refresher has got round to: each answer looks here. The
look is one stat per marker the first time, then a `Proof` over the markers' paths
(`.git` and the markers in the git folder, a folder the change queue watches for the
stamp files): while no event touched them, the last look stands for one compare.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from storyd.core.gitstate import OPERATION_MARKERS, locate, operation_findings
from storyd.core.pipeline import signature
from storyd.server.store import Proof

if TYPE_CHECKING:
    from storyd.core.model import Finding
    from storyd.server.changes import Changes

__all__ = ["Operations"]

_KEPT = 4096  # workspaces remembered before the memo starts afresh


class Operations:
    """Each workspace's operation-in-progress finding (or none), looked at by stat and
    then vouched for by the change queue (`changes`; None: a stat every time)."""

    def __init__(self, changes: Changes | None) -> None:
        self.changes = changes
        self._known: dict[str, tuple[Proof, tuple[Finding, ...]]] = {}

    def findings(self, workspace: str) -> tuple[Finding, ...]:
        """What a direct read says about the workspace's git operation now: its
        operation-in-progress finding, or () when none is under way. Call
        `changes.drain()` first (as every query does)."""
        known = self._known.get(workspace)
        if known is not None and known[0].holds(self.changes):
            return known[1]
        changes = self.changes
        seq = changes.drain() if changes is not None else 0
        started = time.time_ns()
        deps = tuple((path, signature(path)) for path in _marker_paths(workspace))
        found = operation_findings(workspace)
        if len(self._known) >= _KEPT:
            self._known.clear()
        self._known[workspace] = (Proof(deps, seq, started), found)
        return found


def _marker_paths(workspace: str) -> list[str]:
    """The paths whose presence decides the answer: `.git`, then each marker (and, in
    a rebase-apply, `applying`: `git am` rather than a rebase)."""
    paths = [os.path.join(workspace, ".git")]
    where = locate(workspace)
    if where is not None:
        paths += [os.path.join(where.gitdir, marker) for marker in OPERATION_MARKERS]
        apply = os.path.join(where.gitdir, "rebase-apply")
        if os.path.isdir(apply):
            paths.append(os.path.join(apply, "applying"))
    return paths
