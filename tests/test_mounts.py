"""Folders whose change events cannot be trusted (WSL2's /mnt/c over 9p, network and FUSE
mounts) are found from the mount table (storyd.core.mounts), and are answered right
at once after a write no inotify watch sees: a stat per answer, not the watch's word.

The WSL2 case is stood in for on Linux: $STORYD_MOUNTINFO names a mountinfo file that
puts the workspace on a 9p mount, and the state file is written through a shared
mmap with its descriptor still open (no IN_MODIFY, no IN_CLOSE_WRITE: as a Windows
program's write to /mnt/c, the kernel's watch never hears of it)."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import orjson
import pytest
from daemon_harness import DaemonProcess, wait_for, write_config
from epic_state_harness import epic_relpath, write_epic

from storyd.core import mounts

# in the layout WSL2's mountinfo (drvfs over 9p), a Linux host's (an NFS home, an sshfs
# mount) and macOS's `mount` print: written by hand, not captured on those systems
WSL2 = """\
61 66 8:32 / / rw,relatime - ext4 /dev/sdc rw,discard,errors=remount-ro,data=ordered
82 61 0:56 / /mnt/c rw,noatime - 9p C:\\134 rw,dirsync,aname=drvfs;path=C:\\;uid=1000;gid=1000;\
symlinkroot=/mnt/,mmap,access=client,msize=65536,trans=fd,rfd=5,wfd=5
83 61 0:57 / /mnt/wsl rw,relatime shared:1 - tmpfs none rw
90 61 0:60 / /mnt/my\\040drive rw,noatime - drvfs D:\\134 rw,uid=1000
"""
HOST = """\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 22 0:41 / /home rw,relatime shared:20 - nfs4 nas:/export/home rw,vers=4.2
41 40 0:42 / /home/me/remote rw,nosuid,nodev,relatime - fuse.sshfs me@box:/srv rw,user_id=1000
42 22 0:43 / /srv/local rw,relatime - xfs /dev/vdb rw
"""
MACOS = """\
/dev/disk3s1s1 on / (apfs, sealed, local, read-only, journaled)
devfs on /dev (devfs, local, nobrowse)
/dev/disk3s5 on /System/Volumes/Data (apfs, local, journaled, nobrowse, protect)
//me@nas._smb._tcp.local/share on /Volumes/share (smbfs, nodev, nosuid, mounted by me)
macfuse-sshfs on /Users/me/remote box (macfuse, nodev, nosuid, synchronous, mounted by me)
"""


def _table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> mounts.Table:
    info = tmp_path / "mountinfo"
    info.write_text(text, encoding="utf-8")
    monkeypatch.setenv("STORYD_MOUNTINFO", str(info))
    return mounts.Table()


class TestParse:
    """The two table formats, escapes and all."""

    def test_mountinfo(self) -> None:
        found = mounts.parse_mountinfo(WSL2)
        assert found[1] == mounts.Mount("/mnt/c", "9p", "C:\\")
        assert found[2].point == "/mnt/wsl"  # an optional field before the dash
        assert found[3] == mounts.Mount("/mnt/my drive", "drvfs", "D:\\")

    def test_mount_output(self) -> None:
        found = mounts.parse_mount(MACOS)
        assert mounts.Mount("/Volumes/share", "smbfs", "//me@nas._smb._tcp.local/share") in found
        assert found[-1].point == "/Users/me/remote box" and found[-1].fstype == "macfuse"

    def test_garbage_is_skipped(self) -> None:
        assert mounts.parse_mountinfo("nonsense\n\n1 2 3\n") == []
        assert mounts.parse_mount("nonsense\n") == []

    @pytest.mark.parametrize(
        ("fstype", "untrusted"),
        [("9p", True), ("drvfs", True), ("virtiofs", True), ("nfs4", True), ("cifs", True),
         ("smbfs", True), ("fuse.sshfs", True), ("fuse.rclone", True), ("fuseblk", True),
         ("macfuse", True), ("ext4", False), ("xfs", False), ("apfs", False),
         ("tmpfs", False), ("overlay", False), ("btrfs", False)],
    )  # fmt: skip
    def test_types(self, fstype: str, untrusted: bool) -> None:
        assert mounts.untrusted_type(fstype) is untrusted


class TestTable:
    """The longest mount point holding the folder's real path decides."""

    @pytest.mark.parametrize(
        ("path", "fstype"),
        [("/mnt/c/Users/me/ws", "9p"), ("/mnt/c", "9p"), ("/mnt/cc/ws", "ext4"),
         ("/mnt/wsl/x", "tmpfs"), ("/mnt/my drive/ws", "drvfs"), ("/home/me", "ext4")],
    )  # fmt: skip
    def test_wsl2(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str,
                  fstype: str) -> None:  # fmt: skip
        table = _table(monkeypatch, tmp_path, WSL2)
        found = table.mount_of(path)
        assert found is not None and found.fstype == fstype

    def test_network_and_fuse(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        table = _table(monkeypatch, tmp_path, HOST)
        assert "nfs4 mount (/home)" in (table.untrusted("/home/me/ws") or "")
        assert "fuse.sshfs mount (/home/me/remote)" in (table.untrusted("/home/me/remote/a") or "")
        assert table.untrusted("/srv/local/ws") is None

    def test_a_link_is_judged_by_its_target(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        real = tmp_path / "real"
        real.mkdir()
        (tmp_path / "link").symlink_to(real)
        table = _table(monkeypatch, tmp_path, f"1 0 0:1 / / rw - ext4 /dev/x rw\n"
                                              f"2 1 0:2 / {real} rw - 9p C: rw\n")  # fmt: skip
        assert table.untrusted(str(tmp_path / "link" / "ws")) is not None

    def test_no_table_trusts(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("STORYD_MOUNTINFO", str(tmp_path / "absent"))
        assert mounts.Table().untrusted("/mnt/c/ws") is None

    def test_this_machine(self) -> None:
        """The real /proc/self/mountinfo parses, and / is in it."""
        if not os.path.exists(mounts.MOUNTINFO):
            pytest.skip("no /proc/self/mountinfo on this system")
        found = mounts.Table().mount_of("/")
        assert found is not None and found.point == "/"


def _untrusted_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace the mount table puts on WSL2's drvfs (9p)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    info = tmp_path / "mountinfo"
    info.write_text(f"1 0 254:0 / / rw - ext4 /dev/vda rw\n"
                    f"2 1 0:56 / {ws} rw,noatime - 9p C:\\134 rw,aname=drvfs\n")  # fmt: skip
    monkeypatch.setenv("STORYD_MOUNTINFO", str(info))
    return ws


STORY = "story-0049-0013"
TASKS = {STORY: {"T1": {"status": "done", "commitSha": "aaa1"}, "T2": {"status": "pending"}}}


def _unseen_write(path: Path, old: bytes, new: bytes) -> int:
    """Replace `old` by `new` (as long) through a shared mmap: no inotify event. The
    descriptor is returned open (closing a file opened for writing is IN_CLOSE_WRITE)."""
    assert len(old) == len(new)
    fd = os.open(path, os.O_RDWR)
    with mmap.mmap(fd, 0) as view:
        at = view.find(old)
        assert at >= 0
        view[at : at + len(new)] = new
        view.flush()
    return fd


@pytest.mark.slow
def test_untrusted_folder_is_answered_right_within_a_second(
    spawn_daemon: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WSL2 defect: storyd trusted the watch and answered from its cache for ~2 s
    (the verification tick: 30 s here, so that only a stat per answer can be right)."""
    ws = _untrusted_ws(tmp_path, monkeypatch)
    state = write_epic(ws, "0049", tasks=TASKS)  # type: ignore[arg-type]
    write_config(tmp_path, "[limits]\nverify_interval = 30\n")
    proc: DaemonProcess = spawn_daemon([ws])  # type: ignore[operator]
    ask = {"op": "resume", "workspace": str(ws), "epic": "0049", "story": STORY}
    first = proc.request(ask)
    assert first["envelope"]["tasksPending"] == ["T2"]  # type: ignore[index]
    assert proc.request(ask)["source"] == "cache"
    assert "untrusted_mount" in proc.log_text()

    fd = _unseen_write(state, b'"status":"pending"', b'"status":"done"   ')
    try:
        written = time.monotonic()
        answer = wait_for(
            lambda: (a := proc.request(ask))["envelope"]["tasksPending"] == [] and a,  # type: ignore[index]
            timeout=1.0, message="the answer after a write no watch saw")  # fmt: skip
        assert time.monotonic() - written < 1.0
        assert orjson.loads(state.read_bytes())["stories"][STORY]["tasks"]["T2"]["status"] == "done"
        done = answer["envelope"]["tasksCompleted"]  # type: ignore[index]
        assert [task["id"] for task in done] == ["T1", "T2"]
    finally:
        os.close(fd)


def test_doctor_says_so(
    run_storyd: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`storyd doctor` names the mount and what storyd does about it."""
    ws = _untrusted_ws(tmp_path, monkeypatch)
    (ws / epic_relpath("0049")).parent.mkdir(parents=True)
    done = run_storyd("doctor", "--workspace", str(ws), env=dict(os.environ))  # type: ignore[operator]
    said = [line for line in done.stdout.decode().splitlines() if "9p mount" in line]
    assert len(said) == 1 and said[0].startswith(f"warn workspace {ws}:"), done.stdout.decode()
    assert "checked by stat" in said[0]
