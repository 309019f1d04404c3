"""Real writers that race `storyd reconcile --apply`, one per writer convention.

Each writer is a child process that adds its mark to the state file's top-level
`writerMarks` list (a read-modify-write of the whole document), so a lost update is a
mark missing from the file afterwards:

    in-place         opens the file, waits for flock(2) LOCK_EX on that descriptor, reads
                     and rewrites through it (how `exec 9<>f; flock -x 9; ...` works)
    rename-locked    `flock -x FILE` (util-linux flock(1)) around: read the path, write a
                     temp file, rename it over the path (the seeds' `.tmp` → rename)
    rename-unlocked  read the path, write a temp file, rename it over the path, no lock

    start(convention, path, mark)   the writer's Popen (stderr piped: communicate())
    waiting_on_lock(pid)            whether a process is queued on a flock (/proc/locks)
    holds_open(pid, path)           whether a process has the file open (storyd polls
                                    its lock with LOCK_NB: it never shows as queued)
    marks(path)                     the marks in the file now
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

__all__ = ["CONVENTIONS", "holds_open", "marks", "start", "waiting_on_lock"]

CONVENTIONS = ("in-place", "rename-locked", "rename-unlocked")

_ADD = (
    "import json\n"
    "def add(data, mark):\n"
    "    doc = json.loads(data)\n"
    "    doc['writerMarks'] = doc.get('writerMarks', []) + [mark]\n"
    "    return (json.dumps(doc, indent=2, ensure_ascii=False) + '\\n').encode()\n"
)

_IN_PLACE = _ADD + (
    "import fcntl, os, sys\n"
    "path, mark = sys.argv[1], sys.argv[2]\n"
    "fd = os.open(path, os.O_RDWR)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.lseek(fd, 0, os.SEEK_SET)\n"
    "data = b''\n"
    "while chunk := os.read(fd, 1 << 16):\n"
    "    data += chunk\n"
    "new = add(data, mark)\n"
    "os.pwrite(fd, new, 0)\n"
    "os.ftruncate(fd, len(new))\n"
    "os.fsync(fd)\n"
    "os.close(fd)\n"
)

_RENAME = _ADD + (
    "import os, sys\n"
    "path, mark = sys.argv[1], sys.argv[2]\n"
    "with open(path, 'rb') as f:\n"
    "    new = add(f.read(), mark)\n"
    "tmp = f'{path}.{os.getpid()}.tmp'\n"
    "with open(tmp, 'wb') as f:\n"
    "    f.write(new)\n"
    "    f.flush()\n"
    "    os.fsync(f.fileno())\n"
    "os.replace(tmp, path)\n"
)


def start(convention: str, path: Path, mark: str) -> subprocess.Popen[bytes]:
    """A writer of `convention` adding `mark` to the file at `path`, started now."""
    if convention == "in-place":
        argv = [sys.executable, "-c", _IN_PLACE, str(path), mark]
    elif convention == "rename-locked":
        argv = ["flock", "-x", str(path), sys.executable, "-c", _RENAME, str(path), mark]
    elif convention == "rename-unlocked":
        argv = [sys.executable, "-c", _RENAME, str(path), mark]
    else:
        raise ValueError(f"unknown writer convention {convention!r}")
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def waiting_on_lock(pid: int) -> bool:
    """Whether process `pid` is queued on a flock(2) (a `->` line of /proc/locks)."""
    with open("/proc/locks", encoding="ascii") as f:
        return any("->" in line and f" {pid} " in line for line in f)


def holds_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has a descriptor on the file at `path` now."""
    target = path.stat()
    folder = Path(f"/proc/{pid}/fd")
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def marks(path: Path) -> list[str]:
    """The writers' marks the file holds now."""
    return list(json.loads(path.read_bytes()).get("writerMarks", []))
