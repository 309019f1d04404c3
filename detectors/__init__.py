"""The detector plugin API: check each unit against what git (or anything else) says.

A detector is any object with a `name` and `check(unit, context) -> list[Finding]`, and
`codes`, the finding codes it can raise (reconcile repairs a code only from a detector
that declares it). Detectors are entry points of the group `storyd.detectors`, held by
the one registry (storyd.core.registry); the built-ins register there too, exactly as a
third-party plugin would (see docs/detectors.md).

    Detector (Protocol)          name, check(unit, context); optionally codes (defined
                                 in protocol.py, imported when first named)
    Context                      the workspace, this detector's options, the git view
    load(settings) -> [Detector] the installed ones, checked, minus `enabled = false`
    declared() -> {name: codes}  the codes each installed detector can raise
    unit_context(...)            a unit's Context

A unit is any format's unit of work (a story, a task list, a plan, a session): one
`storyd.core.model.Unit`. detectors/runner.py runs the detectors on one owner thread with
a time limit (git views are not thread-safe); a detector that raises or hangs
becomes an error finding.
"""

from __future__ import annotations

from storyd.core import registry, storytime
from storyd.core.model import OWN_DETECTORS

TYPE_CHECKING = False  # `typing` costs a hook's direct path start-up time (daemon/core/model.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from storyd.core.model import Unit
    from storyd.detectors.gitview import GitView
    from storyd.detectors.protocol import Detector

__all__ = [
    "ENTRY_POINT_GROUP",
    "RESERVED_NAMES",
    "Context",
    "Detector",
    "declared",
    "load",
    "unit_context",
]

ENTRY_POINT_GROUP = registry.DETECTORS
RESERVED_NAMES = OWN_DETECTORS  # a plugin may not take these names (daemon/core/model.py)
DEFAULT_TIME_LIMIT = 5.0
ONE_SHOT_KEY = "storyd.one-shot"  # in an inline Runner's thread state: views walk less


def __getattr__(name: str) -> object:
    """`Detector` (storyd.detectors.protocol), imported when first named: a Protocol
    needs `typing`, which a hook's direct path does without."""
    if name == "Detector":
        from storyd.detectors.protocol import Detector

        return Detector
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


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


def _check(candidate: object, entry: registry.Entry) -> str | None:
    """Why a detector plugin is refused, or None."""
    name = getattr(candidate, "name", None)
    if not isinstance(name, str) or not name:
        return "it has no `name` string"
    for what, taken in (("entry-point name", entry.name), ("name", name)):
        if taken in RESERVED_NAMES:
            return (
                f"the {what} {taken!r} is reserved for storyd's own findings "
                f"({', '.join(sorted(RESERVED_NAMES))}); choose another"
            )
    if not callable(getattr(candidate, "check", None)):
        return f"{name} has no callable `check(unit, context)`"
    codes = getattr(candidate, "codes", ())
    if not isinstance(codes, tuple | list | frozenset | set) or not all(
        isinstance(c, str) and c for c in codes
    ):
        return f"{name}'s `codes` is not a tuple of finding codes"
    return None


def load(settings: dict[str, dict[str, object]] | None = None,
         codes: frozenset[str] | None = None) -> list[Detector]:
    """Every installed detector by entry-point name, minus those configured `enabled =
    false` (not even imported); with `codes`, only those that declare one of them (a
    caller that reads no other finding: the stop hook; storyd's own others are not
    imported either, their codes are in detectors/codes.py). One that fails to import or is
    not a detector is skipped and named in the registry's problems."""
    settings = settings or {}
    found = []
    plugins = registry.get()
    own = plugins.names(ENTRY_POINT_GROUP, plugins=False)
    for name in sorted(plugins.names(ENTRY_POINT_GROUP)):
        if settings.get(name, {}).get("enabled", True) is False:
            continue
        if codes is not None and name in own and not codes & set(_own_codes(name)):
            continue  # storyd's own, declaring none of them: not even imported
        detector = plugins.one(ENTRY_POINT_GROUP, name, _check)
        if detector is not None and (codes is None or codes & set(getattr(detector, "codes", ()))):
            found.append(detector)
    return found  # type: ignore[return-value]


def _own_codes(name: str) -> tuple[str, ...]:
    """The codes one of storyd's own detectors declares (detectors/codes.py)."""
    from storyd.detectors.codes import CODES

    return CODES.get(name, ())


def declared() -> dict[str, frozenset[str]]:
    """Each installed detector's name and the finding codes it declares it can raise."""
    return {d.name: frozenset(getattr(d, "codes", ())) for d in load()}


def unit_context(
    workspace: str,
    unit: Unit,
    envelope: Mapping[str, object] | None,
    staleness: str,
    git: GitView | None = None,
) -> Context:
    """A unit's context: the unit's own branch as the tip when its format names one."""
    return Context(workspace, {}, git, envelope, tip=unit.branch, staleness=staleness)
