"""What the kernel says about this process's inotify watches (Linux /proc).

    kernel_watches()   the inode numbers this process really watches (the `ino:` of the
                       `inotify wd:` lines of its inotify descriptors' fdinfo), None
                       where /proc cannot tell
    max_user_watches() fs.inotify.max_user_watches, None where it cannot be read

watchdog adds a recursive watch folder by folder and, when the kernel refuses one
(ENOSPC: max_user_watches), skips it silently: only the kernel knows what is watched.
"""

from __future__ import annotations

import os

__all__ = ["kernel_watches", "max_user_watches"]


def kernel_watches() -> set[int] | None:
    """The inode numbers of the folders this process's inotify watches are on now."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    inodes: set[int] = set()
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}", encoding="ascii", errors="replace") as info:
                for line in info:
                    if line.startswith("inotify wd:"):
                        inodes.add(int(line.split("ino:", 1)[1].split()[0], 16))
        except (OSError, IndexError, ValueError):
            continue  # closed meanwhile
    return inodes


def max_user_watches() -> int | None:
    """fs.inotify.max_user_watches."""
    try:
        with open("/proc/sys/fs/inotify/max_user_watches", encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None
