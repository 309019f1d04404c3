"""Which file system a folder is on, from the mount table, and whether its change
events can be trusted there.

inotify (and FSEvents) only report what this kernel does. On WSL2's /mnt/c (drvfs over
9p) a watch is accepted and sees no write a Windows program makes; a network file
system (nfs, cifs/smb, sshfs) or any FUSE file system sees no write made elsewhere. A
folder on one of those is "untrusted": storyd answers from it only after a stat of the
files behind the answer, and polls it for new files.

    Table()                the mount table, read again at most every few seconds
      .mount_of(path)      the Mount a path is on (the longest mount point that holds
                           its real path), None where the table cannot be read
      .untrusted(path)     why a folder's events cannot be trusted (one line), or None
    parse_mountinfo(text)  Linux's /proc/self/mountinfo, as Mounts
    parse_mount(text)      macOS's and the BSDs' `mount` output, as Mounts

$STORYD_MOUNTINFO names a file read instead of /proc/self/mountinfo (in its format):
tests stand a folder on drvfs with it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import NamedTuple

__all__ = ["Mount", "Table", "parse_mount", "parse_mountinfo", "untrusted_type"]

MOUNTINFO = "/proc/self/mountinfo"
_REREAD_AFTER = 5.0  # seconds a read table is used before it is read again
# file systems whose writes may come from outside this kernel: no event for those
_REMOTE = frozenset((
    "9p", "drvfs", "virtiofs", "nfs", "nfs4", "cifs", "smb3", "smbfs", "sshfs", "afpfs",
    "webdav", "ncpfs", "ceph", "glusterfs", "lustre", "gpfs", "afs", "vboxsf", "vmhgfs",
    "prl_fs", "osxfuse", "macfuse", "fusefs", "fuse", "fuseblk",
))  # fmt: skip


class Mount(NamedTuple):
    """One line of the mount table."""

    point: str
    fstype: str
    source: str


def untrusted_type(fstype: str) -> bool:
    """Whether writes on a file system of this type may make no event here."""
    return fstype in _REMOTE or fstype.startswith(("fuse.", "fuse3."))


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (\\040 a space, \\011 a tab, \\012, \\134 a backslash)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """`ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER` lines."""
    found = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
            found.append(Mount(_unescape(fields[4]), fields[dash + 1], _unescape(fields[dash + 2])))
        except (ValueError, IndexError):
            continue  # not a mountinfo line
    return found


def parse_mount(text: str) -> list[Mount]:
    """`SOURCE on POINT (TYPE, OPTION...)` lines: what `mount` prints on macOS."""
    found = []
    for line in text.splitlines():
        source, on, rest = line.partition(" on ")
        point, paren, options = rest.rpartition(" (")
        if on and paren and options:
            found.append(Mount(point, options.split(",")[0].rstrip(")").strip(), source))
    return found


class Table:
    """The mount table, kept a few seconds (a mount made meanwhile shows after that)."""

    def __init__(self) -> None:
        self._mounts: list[Mount] | None = None
        self._read_at = -_REREAD_AFTER

    def mounts(self) -> list[Mount] | None:
        """Every mount, longest mount point first; None where there is no table."""
        now = time.monotonic()
        if now - self._read_at >= _REREAD_AFTER:
            self._read_at = now
            found = _read_table()
            self._mounts = (
                None if found is None else sorted(found, key=lambda m: -len(m.point))
            )
        return self._mounts

    def mount_of(self, path: str) -> Mount | None:
        """The mount the real path of `path` is on."""
        mounts = self.mounts()
        if not mounts:
            return None
        real = os.path.realpath(path)
        for mount in mounts:
            top = mount.point.rstrip("/")
            if real == mount.point or real.startswith(top + "/"):
                return mount
        return None

    def untrusted(self, path: str) -> str | None:
        """Why events under `path` cannot be trusted (one line), or None."""
        mount = self.mount_of(path)
        if mount is None or not untrusted_type(mount.fstype):
            return None
        return (
            f"on a {mount.fstype} mount ({mount.point}): writes made outside this "
            "kernel make no event, so answers are checked by stat and new files polled"
        )


def _read_table() -> list[Mount] | None:
    """The mount table: $STORYD_MOUNTINFO, /proc/self/mountinfo, else `mount`'s output."""
    given = os.environ.get("STORYD_MOUNTINFO")
    try:
        with open(given or MOUNTINFO, encoding="utf-8", errors="surrogateescape") as handle:
            return parse_mountinfo(handle.read())
    except OSError:
        if given or sys.platform.startswith("linux"):
            return None
    return _mount_output()


def _mount_output() -> list[Mount] | None:
    """`mount`'s table (macOS, the BSDs: no /proc), None when it cannot be run."""
    import subprocess

    from storyd.core.children import group

    program = next((p for p in ("/sbin/mount", "/usr/sbin/mount") if os.path.exists(p)), None)
    if program is None:
        return None
    try:
        done = subprocess.run(
            [program], capture_output=True, timeout=5, check=False, process_group=group()
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_mount(done.stdout.decode("utf-8", "surrogateescape"))
