"""The state-file formats: one adapter per convention, each an entry point of the group
`storyd.formats` (the built-ins too: daemon/entry_points.txt), held by the one registry
(storyd.core.registry).

    builtin(name)        one of storyd's own adapters: no scan of installed plugins, so
                         `storyd resume` pays for no importlib.metadata
    named(name)          any adapter by its format name, plugins too
    all_adapters()       storyd's own, then the plugins'
    adapter_for(relpath) the adapter whose state files include relpath; plugins are
                         scanned only when no built-in matches

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
    from storyd.core.registry import Entry

__all__ = ["Adapter", "adapter_for", "all_adapters", "builtin", "named", "supported"]


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


def adapter_for(relpath: str) -> Adapter:
    """The adapter whose state files include `relpath`, or a UsageError naming them all
    (and any format plugin that was skipped)."""
    from storyd.core import registry

    for adapter in all_adapters(plugins=False):
        if adapter.matches(relpath):
            return adapter
    for adapter in all_adapters():  # the built-ins again (cheap), then the plugins
        if adapter.matches(relpath):
            return adapter
    skipped = [p for p in registry.get().problems if p.startswith("format plugin ")]
    also = f"; {'; '.join(skipped)}" if skipped else ""
    msg = f"{relpath}: not a state file of any supported convention ({supported()}){also}"
    raise UsageError(msg)
