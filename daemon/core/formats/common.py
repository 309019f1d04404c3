"""Parsing helpers shared by the session, issue-plan, autodev and checkpoint adapters.

Only what more than one adapter needs lives here: companion reads, artifact checks,
progress labels and the three-way resume point. The task and finding constructors,
which the epic adapter uses too, are in daemon/core/formats/base.py. This module imports
nothing heavier than the model, so every adapter stays cheap on `storyd resume`'s
start-up path.
"""

from __future__ import annotations

import os

from storyd.core.errors import StateFileMissing
from storyd.core.formats.base import Source, finding
from storyd.core.jsonio import decode_text
from storyd.core.model import DONE, Finding, Task

TYPE_CHECKING = False  # `typing` costs start-up time; see daemon/core/model.py
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ALL_DONE",
    "FRESH_START",
    "artifact_exists",
    "as_int",
    "local_candidates",
    "one_line",
    "progress",
    "progress_labels",
    "progress_text",
    "read_text",
    "resume_point",
    "status_counts",
    "stray_tmp",
    "string_list",
    "text_of",
]

FRESH_START = "fresh-start"
ALL_DONE = "all-done"


def as_int(value: object) -> int | None:
    """An integer from JSON or text (`3`, `"3"`), None for anything else (bools, `4.5`)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit():
            return int(text)
    return None


def string_list(value: object) -> list[str]:
    """The non-empty strings of a JSON array; anything else gives an empty list."""
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, str) and v.strip()]


def one_line(text: str, limit: int = 300) -> str:
    """Free text squeezed onto one line for a finding's message, cut at `limit` characters."""
    squeezed = " ".join(text.split())
    return squeezed if len(squeezed) <= limit else squeezed[: limit - 1] + "…"


def text_of(data: bytes) -> str:
    """A text file's content: UTF-8, or UTF-16/32 when a byte-order mark says so; bytes
    that do not decode become U+FFFD rather than an error."""
    try:
        return decode_text(data)
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


def read_text(source: Source, relpath: str) -> str | None:
    """A companion file's text, read under the writers' lock; None when it does not exist."""
    try:
        data = source.read(relpath)
    except StateFileMissing:
        return None
    return text_of(data)


def _drive(path: str) -> bool:
    """Whether a `/`-separated path starts with a Windows drive (`C:/`, `C:`)."""
    return len(path) > 1 and path[1] == ":" and path[0].isalpha() and path[2:3] in ("", "/")


def local_candidates(path: str) -> list[str]:
    """Where a path a writer recorded may be, read as POSIX paths.

    Windows separators become `/` (`memory\\reports\\x.json` is `memory/reports/x.json`).
    A drive-absolute path (`C:\\work\\proj\\memory\\x.json`) was absolute on the writer's
    machine: its tails, longest first (`work/proj/memory/x.json`, ..., `x.json`), are
    tried from the workspace, since the workspace's own path there is unknown.
    """
    if "\\" not in path and not _drive(path):
        return [path]
    posix = path.replace("\\", "/")
    if not _drive(posix):
        return [posix]
    parts = [p for p in posix[2:].split("/") if p]
    return ["/".join(parts[i:]) for i in range(len(parts))]


def artifact_exists(source: Source, path: str, *bases: str) -> bool:
    """Whether a referenced file exists: as given from the workspace, or under one of `bases`.

    Windows paths are read as local_candidates says. Absolute POSIX paths are taken as
    they are. Only existence is asked; nothing is read.
    """
    candidates = []
    for local in local_candidates(path):
        candidates += [local] if os.path.isabs(local) else [local, *(f"{b}/{local}" for b in bases)]
    return any(source.exists(c) for c in candidates)


def stray_tmp(source: Source, relpath: str) -> Finding | None:
    """A finding when `<relpath>.tmp` exists: an atomic write (.tmp, rename) was interrupted."""
    tmp = relpath + ".tmp"
    if not os.path.isfile(source.path(tmp)):
        return None
    name = relpath.rsplit("/", 1)[-1]
    message = (
        f"{tmp} exists: an atomic write was interrupted before its rename; "
        f"{name} may be one write behind"
    )
    return finding("stray-tmp", "warning", message)


def progress(tasks: Sequence[Task]) -> str:
    """`done/total (percent%)`, the percentage floored as the seeds' shell arithmetic does."""
    return progress_text(sum(1 for t in tasks if t.bucket == DONE), len(tasks))


def progress_text(done: int, total: int) -> str:
    """`done/total (percent%)` from the two counts (progress' text)."""
    percent = done * 100 // total if total else 0
    return f"{done}/{total} ({percent}%)"


def status_counts(tasks: Iterable[Task], vocabulary: Sequence[str]) -> dict[str, str]:
    """Labels counting tasks by lower-cased status; those outside `vocabulary` count as `other`."""
    counts = dict.fromkeys(vocabulary, 0)
    other = 0
    for task in tasks:
        lowered = task.status.lower()
        if lowered in counts:
            counts[lowered] += 1
        else:
            other += 1
    labels = {name: str(n) for name, n in counts.items()}
    if other:
        labels["other"] = str(other)
    return labels


def progress_labels(tasks: Sequence[Task], vocabulary: Sequence[str]) -> dict[str, str]:
    """`progress` and the per-status counts (`status_counts`), as a unit's labels."""
    return {"progress": progress(tasks), **status_counts(tasks, vocabulary)}


def resume_point(tasks: Sequence[Task], pointer: str | None, *, started: bool) -> str:
    """The shared three-way rule with a format-specific middle.

    all-done when there are tasks and every one is DONE; fresh-start when none is DONE
    and nothing has started; otherwise `pointer`, the format's own name for where to
    resume (fresh-start if the format has none).
    """
    if tasks and all(t.bucket == DONE for t in tasks):
        return ALL_DONE
    if not started and not any(t.bucket == DONE for t in tasks):
        return FRESH_START
    return pointer or FRESH_START
