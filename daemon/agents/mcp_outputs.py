"""The shapes of the MCP tools' structured results, declared as each tool's `outputSchema`.

Built on the socket's own shapes (storyd.core.wire: the envelope, a finding, a unit's
summary), so a tool cannot describe a finding differently from the daemon. The SDK
validates each result against its type before it is sent, and clients check it again
against the published schema (the Python SDK's `ClientSession`, the TypeScript SDK).
A shape lists the keys every answer has; an object may carry more (a format's labels
on a unit, a repair's evidence), so none forbids additional properties.

pydantic reads a `typing.TypedDict` only from Python 3.12 on; `portable` rebuilds one,
and every TypedDict inside it, with `typing_extensions.TypedDict`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import (
    Any,
    Literal,
    NotRequired,
    TypedDict,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

import typing_extensions

from storyd.core.wire import Envelope, FindingWire, UnitSummary

__all__ = ["CHECK", "EPIC", "RECONCILE", "RESUME", "STATUS", "portable"]


class NextTask(TypedDict):
    """The task a unit resumes at, and why (the seed's resume rule)."""

    task: str
    why: str
    status: str | None


class Resumed(TypedDict):
    """`storyd resume --detail`: the envelope, its findings, the next task (None when
    nothing is left), which path answered (`daemon` or `direct`) and the warnings."""

    envelope: Envelope
    findings: list[FindingWire]
    next: NextTask | None
    source: str
    warnings: list[str]


class Unreadable(TypedDict):
    """A state file that does not parse, and how many last good units are still served."""

    workspace: str
    stateFile: str
    format: str
    error: str
    since: NotRequired[str | None]
    units: NotRequired[int]


class Status(TypedDict):
    """`storyd status --in-flight --json`, and the exit code."""

    units: list[UnitSummary]
    source: str
    unreadable: list[Unreadable]
    exitCode: int


class UnitFinding(FindingWire):
    """A finding with the state file and unit it is about."""

    stateFile: str
    unit: str


class Checked(TypedDict):
    """`storyd check`: every unit's warnings and errors; exitCode 1 when there are any."""

    problems: int
    exitCode: int
    findings: list[UnitFinding]
    source: str


class Epic(TypedDict):
    """`storyd epic --json`: the stories reclassified, the ones executable next, the
    queued and blocked ones with why, the finished ones."""

    epic: str
    stateFile: str
    stories: list[dict[str, Any]]
    executable: list[str]
    queued: NotRequired[list[dict[str, Any]]]
    blocked: list[dict[str, Any]]
    finished: list[str]
    exitCode: int


class FileRepairs(TypedDict):
    """One state file's repairs (each with its finding and git's evidence) and its diff."""

    stateFile: str
    format: str
    repairs: list[dict[str, Any]]
    diff: str


class Reconciled(TypedDict):
    """`storyd reconcile --json`: the plan per state file, what is left alone and why,
    whether it was written."""

    workspace: str
    changes: bool
    files: list[FileRepairs]
    leftAlone: list[dict[str, Any]]
    applied: bool
    exitCode: int


@functools.cache
def portable(hint: Any) -> Any:
    """`hint` with each `typing.TypedDict` in it rebuilt as a `typing_extensions` one
    (the same keys, required or not); any other type as it is. A key's `NotRequired`
    is read from its annotation: below 3.12 `__required_keys__` misses it in a module
    with `from __future__ import annotations`."""
    if typing_extensions.is_typeddict(hint):
        fields: dict[str, Any] = {}
        for name, field in get_type_hints(hint, include_extras=True).items():
            optional = get_origin(field) is NotRequired or not hint.__total__
            kept = portable(get_args(field)[0] if get_origin(field) is NotRequired else field)
            fields[name] = NotRequired[kept] if optional else kept
        make = cast("Callable[[str, dict[str, Any]], Any]", typing_extensions.TypedDict)
        made = make(hint.__name__, fields)  # the functional form, with keys known at run time
        made.__doc__ = hint.__doc__
        return made
    args = get_args(hint)
    origin = get_origin(hint)
    if not args or origin is Literal:
        return hint
    parts = tuple(portable(a) for a in args)
    if origin in (Union, types.UnionType):
        return Union[parts]  # noqa: UP007 - a union of a runtime tuple has no | spelling
    return origin[parts]


RESUME = portable(Resumed)
STATUS = portable(Status)
CHECK = portable(Checked)
EPIC = portable(Epic)
RECONCILE = portable(Reconciled)
