"""Other distributions' entry points in storyd's groups, read from their files.

What `importlib.metadata.entry_points()` finds, without importing it: its import (email,
zipfile, csv, ...) and its scan of every installed distribution cost a hook or a direct
`storyd status` about 25 ms, more than the rest of their work. Here each `sys.path`
folder is listed once; a `NAME-VERSION.dist-info` (or `.egg-info`) folder's
`entry_points.txt` is read, and only a distribution with an entry in one of the groups
has its METADATA read (for its name and version). As importlib.metadata does, the first
distribution of a name on `sys.path` hides later ones, and folders are listed in the
order `os.listdir` gives.

Where importlib.metadata would find distributions this cannot see (a zip archive or an
`.egg` on `sys.path`, a finder on `sys.meta_path` with its own `find_distributions`),
`scan` answers None and the caller asks importlib.metadata itself.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["entries", "scan"]

_INFO = (".dist-info", ".egg-info")
_METADATA = ("METADATA", "PKG-INFO")


def _foreign_finders() -> bool:
    """Whether a finder other than the path finder can list distributions."""
    # importlib.machinery's own PathFinder, without importlib's import (with warnings:
    # 0.5 ms of every hook's start)
    from _frozen_importlib_external import PathFinder

    return any(
        finder is not PathFinder and callable(getattr(finder, "find_distributions", None))
        for finder in sys.meta_path
    )


def _key(folder_name: str) -> str:
    """The distribution's name as importlib.metadata compares them (PEP 503, `_`)."""
    name = folder_name.rpartition(".")[0].partition("-")[0].lower()
    for mark in "-.":
        name = name.replace(mark, "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


def _label(info: str) -> str:
    """`Name Version` from the distribution's METADATA headers ("?" when unreadable)."""
    fields: dict[str, str] = {}
    for file_name in _METADATA:
        try:
            with open(os.path.join(info, file_name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, sep, value = line.partition(":")
                    if sep and key in ("Name", "Version") and key not in fields:
                        fields[key] = value.strip()
        except OSError:
            continue
        break
    name = fields.get("Name") or "?"
    version = fields.get("Version")
    return f"{name} {version}" if version else name


def entries(text: str) -> list[tuple[str, str, str]]:
    """(group, name, value) of an entry_points.txt, in file order (comments and blanks
    skipped; an entry before any group header ignored)."""
    found: list[tuple[str, str, str]] = []
    group = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line[0] == "[" and line[-1] == "]":
            group = line[1:-1].strip()
        elif group is not None and "=" in line:
            name, _, value = line.partition("=")
            found.append((group, name.strip(), value.strip()))
    return found


def scan(groups: tuple[str, ...]) -> Iterable[tuple[str, str, str, str]] | None:
    """(group, name, value, "Name Version") for every installed distribution's entry in
    `groups`, in sys.path order; None where importlib.metadata must be asked instead."""
    if _foreign_finders():
        return None
    found: list[tuple[str, str, str, str]] = []
    seen: set[str] = set()
    for folder in sys.path:
        where = folder or "."
        if where.lower().endswith(".egg"):
            return None  # an egg on sys.path: importlib.metadata knows its EGG-INFO
        try:
            names = os.listdir(where)
        except NotADirectoryError:
            return None  # a zip archive on sys.path: importlib.metadata reads inside it
        except OSError:
            continue  # a folder that does not exist holds no distribution
        for child in names:
            low = child.lower()
            if not low.endswith(_INFO):
                continue
            key = _key(low)
            if key in seen:
                continue  # an earlier folder's distribution of this name hides this one
            seen.add(key)
            info = os.path.join(where, child)
            try:
                with open(os.path.join(info, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            wanted = [e for e in entries(text) if e[0] in groups]
            if wanted:
                label = _label(info)
                found.extend((group, name, value, label) for group, name, value in wanted)
    return found
