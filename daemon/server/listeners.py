"""Listeners: callbacks attached while the daemon is assembled, frozen before it runs.

aiohttp's signals, for the same reason: every part that hears the engine's events (the
socket's subscribers, notifications, auto-reconcile, the fleet) is attached in one
place (`assembly.assemble`) and the list is frozen before a thread starts, so nothing
joins or leaves mid-run unseen and a thread iterating it never sees it change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Frozen", "Listeners"]

F = TypeVar("F", bound=Callable[..., None])


class Frozen(RuntimeError):
    """A listener attached after the daemon was assembled."""


class Listeners(Generic[F]):
    """An append-only list of callbacks until `freeze`; iterable from any thread."""

    __slots__ = ("_items", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._items: tuple[F, ...] | list[F] = []

    @property
    def frozen(self) -> bool:
        """Whether listeners can no longer be attached."""
        return isinstance(self._items, tuple)

    def append(self, listener: F) -> None:
        """Attach one listener (before `freeze`)."""
        if isinstance(self._items, tuple):
            raise Frozen(f"{self.name}: attach listeners before the daemon runs (assembly.py)")
        self._items.append(listener)

    def freeze(self) -> None:
        """No more listeners: from now on iterating takes no copy."""
        self._items = tuple(self._items)

    def __iter__(self) -> Iterator[F]:
        return iter(tuple(self._items))

    def __len__(self) -> int:
        return len(self._items)
