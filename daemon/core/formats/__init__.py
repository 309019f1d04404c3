"""The registry of state-file formats: one adapter per convention.

Adapters register through the entry-point group `storyd.formats`; the built-ins are
listed there too. `builtin()` imports a built-in directly by name, which keeps
`storyd resume` from paying for entry-point discovery on its start-up path.
"""

from __future__ import annotations

from storyd.core.errors import UsageError
from storyd.core.formats.base import Adapter

__all__ = ["BUILTIN", "Adapter", "adapter_for", "all_adapters", "builtin"]

ENTRY_POINT_GROUP = "storyd.formats"
BUILTIN = {
    "epic": "storyd.core.formats.epic",
    "session": "storyd.core.formats.session",
    "issue-plan": "storyd.core.formats.issue_plan",
    "autodev": "storyd.core.formats.autodev",
    "checkpoint": "storyd.core.formats.checkpoint",
}
_loaded: dict[str, Adapter] = {}


def builtin(name: str) -> Adapter:
    """A built-in adapter by name."""
    if name not in _loaded:
        import sys

        try:
            __import__(BUILTIN[name])  # not importlib: it costs start-up time on the CLI path
        except KeyError:
            msg = f"unknown format {name!r}; supported: {', '.join(BUILTIN)}"
            raise UsageError(msg) from None
        _loaded[name] = sys.modules[BUILTIN[name]].ADAPTER
    return _loaded[name]


def _plugins() -> list[Adapter]:
    from importlib.metadata import entry_points

    adapters = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN:
            continue
        adapter = ep.load()
        if not isinstance(adapter, Adapter) or not adapter.name:
            msg = f"format plugin {ep.name!r} ({ep.value}) is not a named formats.Adapter"
            raise UsageError(msg)
        adapters.append(adapter)
    return adapters


def all_adapters(*, plugins: bool = True) -> list[Adapter]:
    """Every registered adapter: the built-ins, then plugins from the entry-point group."""
    adapters = []
    for name in BUILTIN:
        adapters.append(builtin(name))
    return adapters + (_plugins() if plugins else [])


def supported() -> str:
    """One line naming every supported convention, for error messages."""
    return "; ".join(f"{a.name}: {a.convention}" for a in all_adapters(plugins=False))


def adapter_for(relpath: str) -> Adapter:
    """The adapter whose state files include `relpath`, or a UsageError naming them all."""
    for adapter in all_adapters(plugins=False):
        if adapter.matches(relpath):
            return adapter
    for adapter in _plugins():
        if adapter.matches(relpath):
            return adapter
    msg = f"{relpath}: not a state file of any supported convention ({supported()})"
    raise UsageError(msg)
