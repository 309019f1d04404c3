"""Where a format's files live, as it declares them: which formats a path can concern,
answered without importing them (a hook reads one file: it loads that file's format).

A format declares its paths in the entry-point group `storyd.format_paths`, under its
own name, as a mapping (storyd's own: storyd.core.formats.paths; docs/formats.md):

    roots       the folders its `find` walks (its adapter's `roots`)
    files       patterns every one of its state files fits
    companions  patterns every other file its `owner` maps to a state file fits (optional)

A pattern's `/`-separated segments are names, `*` (any one name) or, last, `**` (any
path below it). A format that declares nothing, or whose declaration is refused (named
in the registry's problems), is loaded whenever a path is asked about: as before.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.core.registry import Entry

__all__ = ["check", "declared", "fits", "leads", "may_hold", "may_own"]

_KEYS = ("roots", "files", "companions")


def _bad_pattern(pattern: object) -> str | None:
    """Why `pattern` is no pattern, or None."""
    if not isinstance(pattern, str) or not pattern or pattern.startswith("/"):
        return f"{pattern!r} is not a workspace-relative path"
    parts = pattern.split("/")
    for index, part in enumerate(parts):
        if not part or part in (".", ".."):
            return f"{pattern!r} has an empty, `.` or `..` segment"
        if "*" in part and part != "*" and not (part == "**" and index == len(parts) - 1):
            return f"{pattern!r}: `*` stands for a whole name, `**` only last"
    return None


def check(candidate: object, entry: Entry) -> str | None:
    """Why a format's declared paths are refused, or None."""
    del entry  # named by the registry in its message
    if not isinstance(candidate, dict) or not set(candidate) <= set(_KEYS):
        return f"not a mapping of {', '.join(_KEYS)}"
    for key in _KEYS:
        value = candidate.get(key, ())
        if not isinstance(value, tuple | list) or (key == "files" and not value):
            least = " (at least one)" if key == "files" else ""
            return f"{key}: expected a list of paths{least}"
        why = next((w for p in value if (w := _bad_pattern(p)) is not None), None)
        if why is not None:
            return f"{key}: {why}"
    return None


def fits(pattern: str, relpath: str) -> bool:
    """Whether a workspace-relative path fits a declared pattern."""
    want = pattern.split("/")
    have = relpath.split("/")
    if want[-1] == "**":  # one name or more below the rest
        head = want[:-1]
        if len(have) <= len(head):
            return False
        want, have = head, have[: len(head)]
    elif len(have) != len(want):
        return False
    return all(w == h or (w == "*" and h != "") for w, h in zip(want, have, strict=True))


def leads(pattern: str, folder: str) -> bool:
    """Whether a file below `folder` (workspace-relative) can fit `pattern`."""
    want = pattern.split("/")
    for index, name in enumerate(folder.split("/")):
        if want[index] == "**":
            return True
        if index >= len(want) - 1 or want[index] not in ("*", name):
            return False  # the pattern's folders are used up, or this one is not one
    return True


def declared(name: str, *, plugins: bool = True) -> dict[str, tuple[str, ...]] | None:
    """What the format `name` declares (roots, files, companions), or None."""
    from storyd.core import registry

    found = registry.get().one(registry.FORMAT_PATHS, name, check, plugins=plugins)
    if found is None:
        return None
    table: dict[str, list[str] | tuple[str, ...]] = found  # type: ignore[assignment]
    return {key: tuple(table.get(key, ())) for key in _KEYS}


def may_hold(name: str, relpath: str, *, plugins: bool = True) -> bool:
    """Whether `relpath` can be a state file of the format `name` (True: undeclared)."""
    paths = declared(name, plugins=plugins)
    return paths is None or any(fits(p, relpath) for p in paths["files"])


def may_own(name: str, relpath: str, *, plugins: bool = True) -> bool:
    """Whether the format `name` can own `relpath`, as a state file or a companion."""
    paths = declared(name, plugins=plugins)
    return paths is None or any(
        fits(p, relpath) for p in (*paths["files"], *paths["companions"])
    )
