"""The detector plugin API: check each unit against what git (or anything else) says.

A detector is any object with a `name` and `check(unit, context) -> list[Finding]`.
Detectors are found through the entry-point group `storyd.detectors`; the built-ins
register there too, exactly as a third-party plugin would (see docs/detectors.md).

    Detector (Protocol)          name, check(unit, context)
    Context                      the workspace, this detector's options, the git view
    load(config) -> [Detector]   entry points, validated, filtered by `enabled`
    unit_context(...)            a unit's Context

A unit is any format's unit of work (a story, a task list, a plan, a session): one
`storyd.core.model.Unit`. detectors/runner.py runs the detectors on one owner thread with
a time limit (GitPython objects are not thread-safe); a detector that raises or hangs
becomes an error finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from storyd.core import storytime
from storyd.core.errors import SetupError
from storyd.core.model import OWN_DETECTORS, Finding, Unit

if TYPE_CHECKING:
    from storyd.detectors.gitview import GitView

__all__ = [
    "ENTRY_POINT_GROUP",
    "RESERVED_NAMES",
    "Context",
    "Detector",
    "DetectorError",
    "load",
    "unit_context",
]

ENTRY_POINT_GROUP = "storyd.detectors"
RESERVED_NAMES = OWN_DETECTORS  # a plugin may not take these names (daemon/core/model.py)
DEFAULT_TIME_LIMIT = 5.0


class DetectorError(SetupError):
    """A detector plugin that cannot be loaded or is not a detector."""


@runtime_checkable
class Detector(Protocol):
    """Checks one unit; returns findings (an empty list when all is well)."""

    name: str

    def check(self, unit: Unit, context: Context) -> list[Finding]:
        """Findings about `unit`; may use `context.git`, never the socket or the cache."""
        ...


class Context:
    """What a detector may look at for one unit."""

    __slots__ = ("envelope", "git", "options", "staleness", "tip", "workspace")

    def __init__(
        self,
        workspace: str,
        options: dict[str, object],
        git: GitView | None,
        envelope: Mapping[str, object] | None,
        *,
        tip: str | None = None,
        staleness: str = storytime.DEFAULT_MODE,
    ) -> None:
        self.workspace = workspace
        self.options = options
        self.git = git
        self.envelope = envelope
        self.tip = tip
        self.staleness = staleness


def _validate(candidate: object, origin: str, entry_name: str) -> Detector:
    name = getattr(candidate, "name", None)
    if not isinstance(name, str) or not name:
        msg = f"detector plugin {origin} has no `name` string"
        raise DetectorError(msg)
    for what, taken in (("entry-point name", entry_name), ("name", name)):
        if taken in RESERVED_NAMES:
            msg = (
                f"detector plugin {origin}: the {what} {taken!r} is reserved for storyd's "
                f"own findings ({', '.join(sorted(RESERVED_NAMES))}); choose another"
            )
            raise DetectorError(msg)
    if not callable(getattr(candidate, "check", None)):
        msg = f"detector plugin {origin} ({name}) has no callable `check(unit, context)`"
        raise DetectorError(msg)
    return candidate  # type: ignore[return-value]


def load(settings: dict[str, dict[str, object]] | None = None) -> list[Detector]:
    """Every detector from the entry-point group, minus those configured `enabled = false`.

    A plugin that fails to import or is not a detector raises DetectorError naming it.
    """
    settings = settings or {}
    found: list[Detector] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if settings.get(ep.name, {}).get("enabled", True) is False:
            continue
        try:
            loaded = ep.load()
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            msg = f"detector plugin {ep.name} ({ep.value}) failed to load: {why}"
            raise DetectorError(msg) from exc
        found.append(_validate(loaded, f"{ep.name} ({ep.value})", ep.name))
    return found


def unit_context(
    workspace: str,
    unit: Unit,
    envelope: Mapping[str, object] | None,
    staleness: str,
    git: GitView | None = None,
) -> Context:
    """A unit's context: the unit's own branch as the tip when its format names one."""
    return Context(workspace, {}, git, envelope, tip=unit.branch, staleness=staleness)
