"""Reading the files of a format storyd never writes, cheaply, under Source.read's rules.

Backlog.md's config and task files, BMAD's sprint-status.yaml and story files are read by
the dozen for one unit, and storyd never writes them (their formats have no dialect).
Source.read resolves the workspace and the file's links (two realpath walks) and looks
for a redo record (the state folder's path, two lstats) on every read: most of the cost
of a small file. A `PlainReader`, made for one load, checks each folder once (an lstat
per step from the workspace); a file in a folder with no link on its way is opened
without following a link (O_NOFOLLOW), only when it is a regular file within the
state-file cap, under the writers' shared lock when none holds it exclusively, and
recorded in `source.seen` as Source.read records it. No redo record is looked for:
reconcile writes none of these files, so no record of storyd's can wait for one.
Anything else (a link, a folder reached through a link or holding `.git`, a linked
worktree, a FIFO, a held lock, a missing or over-large file) goes to Source.read, which
reads it or says why not.

    PlainReader(source).read(relpath, name, head)   the bytes (the first `head` when given)
"""

from __future__ import annotations

import fcntl
import os
import stat

from storyd.core.containment import Refused, git_dirs, resolve
from storyd.core.formats.base import Source
from storyd.core.switches import CONFIG

__all__ = ["PlainReader"]

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class PlainReader:
    """One load's reader: each folder checked once."""

    __slots__ = ("_plain", "source")

    def __init__(self, source: Source) -> None:
        self.source = source
        self._plain: dict[str, bool] = {}  # folder -> no link on its way, inside, not git's

    def read(self, relpath: str, name: str = "", head: int = 0) -> bytes:
        """The file's bytes (at most `head` of them when `head` is given)."""
        folder = os.path.dirname(relpath)
        plain = self._plain.get(folder)
        if plain is None:
            plain = self._plain[folder] = self._resolves_to_itself(folder)
        data = self._fast(relpath, head) if plain else None
        if data is None:
            data = self.source.read(relpath, name)
            return data[:head] if head else data
        return data

    def _resolves_to_itself(self, folder: str) -> bool:
        """Whether `folder` is reached from the workspace through folders alone (an
        lstat each): no link on the way, so a file in it opened without following a
        link is inside the workspace. A `.git` on the way, or a linked worktree's `.git`
        file (whose gitdir a folder might be), is left to the whole rule."""
        parts = folder.split("/") if folder else []
        if ".git" in parts or "" in parts or ".." in parts:
            return False
        here = self.source.workspace
        for part in parts:
            here = os.path.join(here, part)
            try:
                if not stat.S_ISDIR(os.lstat(here).st_mode):
                    return False
            except (OSError, ValueError):
                return False
        if not git_dirs(self.source.workspace):
            return True
        try:
            base, real = resolve(self.source.workspace, folder or ".")
        except Refused:
            return False
        return real == os.path.normpath(os.path.join(base, folder))

    def _fast(self, relpath: str, head: int) -> bytes | None:
        """The bytes read the cheap way, or None when Source.read must decide."""
        try:
            fd = os.open(self.source.path(relpath), _FLAGS)
        except (OSError, ValueError):
            return None
        try:
            st = os.fstat(fd)
            cap = CONFIG.max_state_bytes
            if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # a writer holds it: Source.read waits, within the timeout
            # one read of the size fstat gave (O_NONBLOCK does not apply to regular
            # files): a write after the fstat changes the signature, so it is read again
            want = min(head, st.st_size) if head else st.st_size
            data = os.read(fd, want) if want else b""
        finally:
            os.close(fd)
        self.source.seen[relpath] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                     st.st_ctime_ns)
        return data
