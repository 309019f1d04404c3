"""The kernel's record of writes, read on every query: read-your-writes without a stat.

A cached answer may be served only if none of the files it was read from changed since
the read. `stat` on every query tells, at one syscall a file (five for an answer that
asked git; 4-5 µs each on a virtual machine, half a C echo server's round trip). This
module asks once for all of them: storyd's own inotify instance watches the folders
the cache's answers depend on, and every query first drains its queue without blocking
(`drain`, one `read` that usually says EAGAIN) and marks what changed.

Why that is enough: Linux queues an inotify event inside the write, rename, unlink or
utime call itself (fsnotify, before the call returns), so a write that finished before
a query was sent is in the queue when the query drains it. Events are exact, with no
timestamps: no racy window. What is not covered falls back to `stat`: a folder that
could not be watched (the watch limit), a folder on a mount whose writes may come from
outside this kernel (WSL2's drvfs, network and FUSE file systems: storyd.core.mounts),
a dependency whose folder was first watched after the read began, and everything after
a queue overflow (until the next read).

This is watchman's and git's fsmonitor's sync, without the cookie file: their cookie
proves the daemon has seen every event up to now; here the query reads the queue
itself, so there is nothing to wait for.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
from collections import deque
from collections.abc import Collection

from storyd.core.mounts import Table

__all__ = ["Changes"]

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_MASK = (
    0x00000002  # IN_MODIFY
    | 0x00000004  # IN_ATTRIB (utime, chmod: a story file's mtime)
    | 0x00000008  # IN_CLOSE_WRITE
    | 0x00000040  # IN_MOVED_FROM
    | 0x00000080  # IN_MOVED_TO
    | 0x00000100  # IN_CREATE
    | 0x00000200  # IN_DELETE
    | 0x00000400  # IN_DELETE_SELF
    | 0x00000800  # IN_MOVE_SELF
    | 0x01000000  # IN_ONLYDIR
)
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_SELF = 0x00000400 | 0x00000800
_HEADER = struct.Struct("iIII")
_RECENT = 1024  # the last events kept in order, for `quiet_since`


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


class Changes:
    """storyd's own inotify queue: which watched files changed, in a sequence.

    `seq` counts drained events; `changed(path, since)` says whether `path` may have
    changed after `since` (a `drain()` result taken before the read). Thread-safe: the
    event loop drains on every query, the refresher and the pool before each read.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seq = 1
        self._overflow = 0  # events were lost up to this seq: everything may have changed
        self._dirty: dict[str, int] = {}  # absolute path -> seq of its last event
        self._folders: dict[str, tuple[int, int]] = {}  # folder -> (wd, seq it was watched)
        self._by_wd: dict[int, str] = {}
        # the last events (seq, path or folder + "/"), oldest first, and the newest seq
        # of those dropped from it: `quiet_since` sees every event after a seq it covers
        self._recent: deque[tuple[int, str]] = deque(maxlen=_RECENT)
        self._dropped = 0
        libc = _libc()
        self._libc = libc
        self.fd = -1
        if libc is not None:
            self.fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        # poll(0) says "nothing queued" in a fraction of a failing read's cost
        self._poll = select.poll()
        if self.fd >= 0:
            self._poll.register(self.fd, select.POLLIN)
        self.failed: set[str] = set()  # folders not watched: refused, or on an untrusted mount
        self._mounts = Table()

    @property
    def available(self) -> bool:
        """Whether the kernel gave an inotify instance (else every check is a stat)."""
        return self.fd >= 0

    def close(self) -> None:
        """Release the inotify instance."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def watch(self, folder: str) -> int | None:
        """Watch one folder (not its subfolders); the seq from which its events count,
        or None when it cannot be watched (its files are then checked by stat)."""
        with self._lock:
            known = self._folders.get(folder)
            if known is not None:
                return known[1]
            if self.fd < 0 or folder in self.failed or self._libc is None:
                return None
            if self._mounts.untrusted(folder) is not None:
                self.failed.add(folder)  # a watch there would vouch for what it never sees
                return None
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(folder), _MASK)
            if wd < 0:
                if ctypes.get_errno() not in (errno.ENOENT, errno.ENOTDIR):
                    self.failed.add(folder)  # ENOSPC (the watch limit), EACCES: say no more
                return None
            # a seq of its own: a mark taken before this watch (a read's, whose files in
            # this folder may have changed before it, with no event) is below it, so
            # `changed` says None (stat) for it, never False; later marks are covered
            self.seq += 1
            since = self.seq
            self._folders[folder] = (wd, since)
            self._by_wd[wd] = folder
            return since

    def watched_since(self, folder: str) -> int | None:
        """The seq from which a folder's events count, or None if it is not watched."""
        known = self._folders.get(folder)
        return known[1] if known is not None else None

    def drain(self) -> int:
        """Read every queued event (without waiting); the seq after them."""
        if self.fd < 0:
            return self.seq
        with self._lock:  # a poll object is not to be shared between threads unlocked
            if not self._poll.poll(0):
                return self.seq
            while True:
                try:
                    data = os.read(self.fd, 65536)
                except BlockingIOError:
                    return self.seq
                except OSError:
                    return self.seq
                self._apply(data)

    def _apply(self, data: bytes) -> None:
        offset = 0
        size = _HEADER.size
        while offset + size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            name = data[offset + size : offset + size + length].rstrip(b"\0")
            offset += size + length
            self.seq += 1
            if mask & _IN_Q_OVERFLOW:
                self._overflow = self.seq
                continue
            folder = self._by_wd.get(wd)
            if folder is None:
                continue
            if mask & (_SELF | _IN_IGNORED):  # the folder itself moved or went away
                self._mark(folder + "/")
                if mask & _IN_IGNORED:
                    self._folders.pop(folder, None)
                    self._by_wd.pop(wd, None)
                continue
            if not name:
                continue  # the folder's own attributes: no file in it changed
            self._mark(os.path.join(folder, os.fsdecode(name)))
        if len(self._dirty) > 65536:  # old marks no read predates; keep the newest half
            keep = sorted(self._dirty.items(), key=lambda kv: kv[1])[len(self._dirty) // 2 :]
            self._overflow = max(self._overflow, keep[0][1] - 1)
            self._dirty = dict(keep)

    def _mark(self, key: str) -> None:
        """Record the current event for `key` (a path, or a folder + "/")."""
        self._dirty[key] = self.seq
        recent = self._recent
        if len(recent) == _RECENT:
            self._dropped = recent[0][0]
        recent.append((self.seq, key))

    def quiet_since(self, folders: Collection[str], since: int) -> bool | None:
        """For a read of many files in few folders (a 10,000-story epic's story files):
        True when every folder was watched from before seq `since` and no event after
        it touched any of them (then `changed(path, since)` is False for each of their
        files), in one look per folder and per recent event; False when one is not
        watched from before it, or events were lost after it (`changed` would say
        None); None when an event after it came in one of them (ask `changed` per file)."""
        with self._lock:
            if self._overflow > since:
                return False
            known = self._folders
            for folder in folders:
                got = known.get(folder)
                if got is None or got[1] > since:
                    return False
            if self.seq <= since:
                return True
            if self._dropped > since:
                return None  # events after `since` left the recent ones
            for seq, key in reversed(self._recent):
                if seq <= since:
                    break
                if (key[:-1] if key[-1:] == "/" else os.path.dirname(key)) in folders:
                    return None
            return True

    def changed(self, path: str, since: int, folder: str | None = None) -> bool | None:
        """Whether `path` (in `folder`) may have changed after seq `since`; None when its
        folder is not watched from before `since` (the caller must stat it)."""
        if folder is None:
            folder = os.path.dirname(path)
        known = self._folders.get(folder)
        if known is None or known[1] > since or self._overflow > since:
            return None
        dirty = self._dirty
        return dirty.get(path, 0) > since or dirty.get(folder + "/", 0) > since
