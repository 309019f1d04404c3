"""The strings a big read's units keep, copied side by side while its parse lives.

A unit keeps strings its file's parse made: ids, shas, dates, labels. At 10,000 stories
those are ~110,000 strings made one by one amid the tree's ~450,000 objects, so nearly
every pymalloc pool the tree filled holds a few of them. Freed, the tree leaves those
pools (and their 1 MiB arenas) pinned: 30 MB of RSS kept for 21 MB of units, measured
in process (one parse of the 5.3 MB file, every unit built, the tree freed, glibc
trimmed). Copied while the tree still lives, the copies fill fresh pools side by side,
and the tree's arenas empty whole when it goes: 21 MB.

The seed's epic file is read a story at a time (storyd.core.jsonstream) and never makes
such a tree; this is for the big files parsed whole (other formats, other epic shapes).

`compact` runs inside a background read's offer (daemon/server/offered.py keeps the
tree alive until the offer ends), only on the units that read built (not those it
reused from the read before), and changes no value: every string is replaced by an
equal one, so a reader on another thread sees the same unit before and after.
"""

from __future__ import annotations

from collections.abc import Iterable

from storyd.core.model import Unit

__all__ = ["compact"]

_SEP = "\0"


def _strings(units: Iterable[Unit]) -> list[str]:
    """Every string the units keep that a parse may have made, in `_put_back`'s order."""
    found: list[str] = []
    add = found.append
    for unit in units:  # `type(...) is str` throughout: what a str subclass or a
        if type(unit.key) is str:  # stray value holds is left as it is, never joined
            add(unit.key)  # a label that is the key (a story's) takes the key's copy
        for task in unit.tasks:
            if type(task.id) is str:
                add(task.id)
            sha, when = task.commit_sha, task.completed_at
            if type(sha) is str:
                add(sha)
            if type(when) is str:
                add(when)
            if task.extra:
                found.extend(v for v in task.extra.values() if type(v) is str)
    return found


def _put_back(units: Iterable[Unit], copies: Iterable[str]) -> None:
    """Each string `_strings` found replaced by its copy, in the same order."""
    take = iter(copies).__next__
    for unit in units:
        key = unit.key
        if type(key) is str:
            unit.key = take()
            labels = unit.labels
            for name, value in labels.items():  # in place: no new dict; other labels
                if value is key:  # are the format's own strings (interned, formatted)
                    labels[name] = unit.key
        for task in unit.tasks:  # inline: a call per task is a tenth of the whole
            if type(task.id) is str:
                task.id = take()
            if type(task.commit_sha) is str:
                task.commit_sha = take()
            if type(task.completed_at) is str:
                task.completed_at = take()
            extra = task.extra
            if extra:  # never _NO_EXTRA, the shared empty one
                for field, held in extra.items():
                    if type(held) is str:
                        extra[field] = take()


def compact(units: list[Unit]) -> int:
    """Give the units fresh copies of their strings, made side by side; how many were
    copied (0 when a string holds a NUL: the units are then left as they are)."""
    found = _strings(units)
    if not found:
        return 0
    copies = _SEP.join(found).split(_SEP)  # one allocation after another, in C
    if len(copies) != len(found):
        return 0
    _put_back(units, copies)
    return len(copies)
