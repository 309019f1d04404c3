"""The state-file formats: one adapter per convention, each an entry point of the group
`storyd.formats` (the built-ins too: daemon/entry_points.txt), held by the one registry
(storyd.core.registry).

    builtin(name)        one of storyd's own adapters: no scan of installed plugins, so
                         `storyd resume` pays for no importlib.metadata
    named(name)          any adapter by its format name, plugins too
    all_adapters()       storyd's own, then the plugins'
    adapter_for(relpath) the adapter whose state files include relpath; plugins are
                         scanned only when no built-in matches
    claiming(relpath)    the adapters that may own relpath (a state file or a companion)
    state_files(ws)      every state file of storyd's own formats in a workspace

The last three load only the formats whose declared paths (storyd.core.formats.declared)
a path fits, and those that declare none: a hook that reads one epic file imports the
epic format alone.

A plugin whose object is not a named `Adapter`, whose name differs from its entry
point's, or whose name is taken is skipped and named in the registry's problems. The
registry is imported when first asked: the seed's own query (`--epic-id`) reads the epic
format's module directly (core/target.py) and never needs it.
"""

from __future__ import annotations

from storyd.core.errors import UsageError
from storyd.core.formats.base import Adapter

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Callable

    from storyd.core.registry import Entry

__all__ = [
    "Adapter", "adapter_for", "all_adapters", "builtin", "claiming", "named", "state_files",
    "supported",
]  # fmt: skip


def _check(candidate: object, entry: Entry) -> str | None:
    """Why a format plugin is refused, or None."""
    if not isinstance(candidate, Adapter) or not candidate.name:
        return "not a named storyd.core.formats.Adapter"
    if candidate.name != entry.name:
        return f"its adapter is named {candidate.name!r}, its entry point {entry.name!r}"
    return None


def _unknown(name: str) -> UsageError:
    from storyd.core import registry

    names = registry.get().names(registry.FORMATS, plugins=False)
    return UsageError(f"unknown format {name!r}; supported: {', '.join(names)}")


def builtin(name: str) -> Adapter:
    """One of storyd's own adapters by name."""
    from storyd.core import registry

    found = registry.get().one(registry.FORMATS, name, _check, plugins=False)
    if found is None:
        raise _unknown(name)
    return found  # type: ignore[return-value]


def named(name: str) -> Adapter:
    """An adapter by its format's name (a unit's `format`), plugins included."""
    from storyd.core import registry

    found = registry.get().one(registry.FORMATS, name, _check)
    if found is None:
        raise _unknown(name)
    return found  # type: ignore[return-value]


def all_adapters(*, plugins: bool = True) -> list[Adapter]:
    """Every registered adapter: storyd's own, then the plugins' (broken ones skipped)."""
    from storyd.core import registry

    return registry.get().load(registry.FORMATS, _check, plugins=plugins)  # type: ignore[return-value]


def supported() -> str:
    """One line naming every supported convention, for error messages."""
    return "; ".join(f"{a.name}: {a.convention}" for a in all_adapters(plugins=False))


def _loaded(wanted: Callable[[str], bool], *, plugins: bool) -> list[Adapter]:
    """The adapters whose format name `wanted` accepts, only those loaded."""
    from storyd.core import registry

    found = registry.get().load(registry.FORMATS, _check, plugins=plugins, wanted=wanted)
    return found  # type: ignore[return-value]


def adapter_for(relpath: str) -> Adapter:
    """The adapter whose state files include `relpath`, or a UsageError naming them all
    (and any format plugin that was skipped)."""
    from storyd.core import registry
    from storyd.core.formats.declared import may_hold

    def holding(plugins: bool) -> list[Adapter]:
        return _loaded(lambda name: may_hold(name, relpath, plugins=plugins), plugins=plugins)

    for plugins in (False, True):  # the built-ins, then (the built-ins again, cheap) plugins
        found = next((a for a in holding(plugins) if a.matches(relpath)), None)
        if found is not None:
            return found
    skipped = [p for p in registry.get().problems if p.startswith("format plugin ")]
    also = f"; {'; '.join(skipped)}" if skipped else ""
    msg = f"{relpath}: not a state file of any supported convention ({supported()}){also}"
    raise UsageError(msg)


def claiming(relpath: str, *, plugins: bool = True) -> list[Adapter]:
    """The adapters, in registry order, whose `owner` may map `relpath` (a state file or a
    companion) to a state file: only the formats whose declared paths it fits are loaded."""
    from storyd.core.formats.declared import may_own

    return _loaded(lambda name: may_own(name, relpath, plugins=plugins), plugins=plugins)


def state_files(workspace: str, known: Callable[[str], bool]) -> dict[str, Adapter | None]:
    """Every state file of storyd's own formats in the workspace, in `find` order, with
    its adapter; a file `known` accepts (it was one when last looked at, unchanged since)
    comes with None and does not load its format. What the formats' `find` finds: a
    format walks its declared roots and asks its adapter only about files that fit its
    patterns and are not known; one that declares nothing finds its files itself."""
    from storyd.core import registry
    from storyd.core.formats.base import Source, nameable, walk
    from storyd.core.formats.declared import declared, fits, leads

    plugins = registry.get()
    found: dict[str, Adapter | None] = {}
    for entry in plugins.entries(registry.FORMATS, plugins=False):
        paths = declared(entry.name, plugins=False)
        if paths is None:
            own = plugins.one(registry.FORMATS, entry.name, _check, plugins=False)
            if isinstance(own, Adapter):
                for relpath in own.find(Source(workspace)):
                    if nameable(relpath):  # storyd names its files in UTF-8
                        found.setdefault(relpath, own)
            continue
        patterns = paths["files"]

        def fitting(relpath: str, patterns: tuple[str, ...] = patterns) -> bool:
            return any(fits(p, relpath) for p in patterns)

        def entered(folder: str, patterns: tuple[str, ...] = patterns) -> bool:
            return any(leads(p, folder) for p in patterns)  # no file there can fit

        for relpath in walk(workspace, paths["roots"], fitting, entered):
            if relpath in found:
                continue
            if known(relpath):
                found[relpath] = None
                continue
            adapter = plugins.one(registry.FORMATS, entry.name, _check, plugins=False)
            if isinstance(adapter, Adapter) and adapter.matches(relpath):
                found[relpath] = adapter
    return found
