"""Another local user against storyd (issue 24, item 8), with a real second uid.

(a) the socket folder's preparation follows no symlink and chmods nothing not ours;
(b) a client trusts only a daemon of its own uid (SO_PEERCRED), else reads directly;
(c) a client of another uid that sends first still reads the refusal line (77).

The second user is made with useradd for the run (users_harness.other_user); without
root, these tests skip and say why.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from cli_harness import STORYD
from daemon_harness import DaemonProcess, daemon_env, wait_for
from epic_state_harness import write_epic
from users_harness import python_for_others

Spawn = Callable[..., DaemonProcess]
STORY = "story-0049-0001"
STORIES = {STORY: {"tasks": {"T1": {"status": "done", "commitSha": "a" * 40},
                             "T2": {"status": "pending"}}}}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    write_epic(path, "0049", STORIES)
    return path


def _serve_briefly(socket_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`storyd serve --socket PATH`, expected to refuse at once; killed if it serves."""
    proc = subprocess.Popen([STORYD, "serve", "--socket", str(socket_path)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, -9, out, "still serving after 15 s\n" + err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class TestSocketFolder:
    """(a) The folder a socket goes into is opened without following symlinks."""

    def test_a_planted_symlink_is_refused_and_its_target_left_alone(
            self, shared_dir: Path, tmp_path: Path, other_user: tuple[int, int]) -> None:
        target = shared_dir / "target"
        target.mkdir(mode=0o755)
        os.chmod(target, 0o755)
        link = shared_dir / "run"
        link.symlink_to(target)
        os.lchown(link, *other_user)  # planted by the other user
        done = _serve_briefly(link / "storyd.sock", daemon_env(tmp_path, link / "storyd.sock"))
        assert done.returncode == 64, done.stderr
        first = done.stderr.splitlines()[0]  # the message; then the log's JSON line
        assert first.startswith("storyd serve: socket folder ")
        assert "is a symlink; refusing to follow it" in first
        assert "Traceback" not in done.stderr
        assert stat.S_IMODE(os.stat(target).st_mode) == 0o755  # not chmod-ed to 0700
        assert sorted(os.listdir(target)) == []  # nothing bound or locked inside

    def test_a_sticky_shared_folder_is_refused_untouched(self, shared_dir: Path,
                                                           tmp_path: Path) -> None:
        sticky = shared_dir / "tmp"
        sticky.mkdir()
        os.chmod(sticky, 0o1777)  # like /tmp: ours (root's) but shared
        done = _serve_briefly(sticky / "storyd.sock", daemon_env(tmp_path, sticky / "x"))
        assert done.returncode == 64, done.stderr
        assert "shared sticky folder" in done.stderr
        assert stat.S_IMODE(os.stat(sticky).st_mode) == 0o1777
        assert os.listdir(sticky) == []

    def test_a_folder_of_another_user_is_refused_untouched(
            self, shared_dir: Path, tmp_path: Path, other_user: tuple[int, int]) -> None:
        theirs = shared_dir / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, *other_user)
        done = _serve_briefly(theirs / "storyd.sock", daemon_env(tmp_path, theirs / "x"))
        assert done.returncode == 64, done.stderr
        assert f"belongs to uid {other_user[0]}" in done.stderr
        assert stat.S_IMODE(os.stat(theirs).st_mode) == 0o755


    def test_a_folder_that_cannot_be_made_is_one_line(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("not a folder\n")
        sock = blocker / "run" / "storyd.sock"
        done = _serve_briefly(sock, daemon_env(tmp_path, sock))
        assert done.returncode == 64, done.stderr
        assert done.stderr.splitlines()[0].startswith(
            f"storyd serve: socket folder {blocker / 'run'} cannot be created: ")
        assert "Traceback" not in done.stderr


_FORGER = r"""
import os, socket, sys
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
os.chmod(path, 0o666)
srv.listen(16)
print("ready", flush=True)
forged = (b'{"ok":true,"envelope":{"forged":true},"findings":[],"source":"cache",'
          b'"generation":1,"clock":"x"}\nFORGED ENVELOPE\n=0 0.0.0\n')
while True:
    conn, _ = srv.accept()
    conn.settimeout(5)
    try:
        request = b""
        while b"\n" not in request:  # read the request, as a daemon would, then lie
            chunk = conn.recv(65536)
            if not chunk:
                break
            request += chunk
        conn.sendall(forged)
    except OSError:
        pass
    conn.close()
"""


@pytest.fixture
def forged_socket(shared_dir: Path, other_user: tuple[int, int]) -> Iterator[Path]:
    """A socket served by the other user, answering every connection with a forgery."""
    folder = shared_dir / "forged"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    os.chown(folder, *other_user)
    path = folder / "storyd.sock"
    uid, gid = other_user
    forger = subprocess.Popen([python_for_others(), "-I", "-c", _FORGER, str(path)], user=uid,
                              group=gid, extra_groups=[], stdout=subprocess.PIPE, cwd="/")
    try:
        assert forger.stdout is not None
        assert forger.stdout.readline() == b"ready\n"
        yield path
    finally:
        forger.kill()
        forger.wait(10)
        if forger.stdout is not None:
            forger.stdout.close()


class TestClientChecksServer:
    """(b) A daemon of another uid is not trusted: the client reads directly."""

    def test_storyd_resume_ignores_a_forged_answer(self, forged_socket: Path, ws: Path,
                                                   tmp_path: Path) -> None:
        env = daemon_env(tmp_path, forged_socket)
        args = ["resume", "--epic-id", "0049", "--story-id", STORY]
        direct = subprocess.run([STORYD, *args, "--direct"], env=env, cwd=ws,
                                capture_output=True, timeout=30, check=False)
        asked = subprocess.run([STORYD, *args, "--timeout", "5000"], env=env, cwd=ws,
                               capture_output=True, timeout=30, check=False)
        assert b"FORGED" not in asked.stdout
        assert (asked.returncode, asked.stdout) == (direct.returncode, direct.stdout)
        lines = asked.stderr.decode().splitlines()
        assert len(lines) == 1, asked.stderr
        assert lines[0].startswith(f"warn: {forged_socket} is served by uid ")
        assert "not using its answer" in lines[0]

    def test_the_python_client_falls_back_to_a_direct_read(
            self, forged_socket: Path, ws: Path, capfd: pytest.CaptureFixture[str]) -> None:
        from storyd.api.client import Client, DaemonUnavailable

        with Client(str(forged_socket), timeout=5) as client:
            answer = client.resume(str(ws), "0049", STORY)
            assert answer["source"] == "direct"
            assert "forged" not in orjson.dumps(answer).decode()
            with pytest.raises(DaemonUnavailable):
                client.ping()
        err = capfd.readouterr().err
        assert err.count("is served by uid") == 2, err


_SENDER = r"""
import json, os, socket, sys
path, size = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(path)
sent = "all"
try:
    s.sendall(b'{"op":"ping"}\n' * (size // 14 or 1))  # a client that speaks first
except OSError as exc:
    sent = f"errno {exc.errno}"
data, ending = b"", "eof"
try:
    while chunk := s.recv(65536):
        data += chunk
except OSError as exc:
    ending = f"errno {exc.errno}"
print(json.dumps({"sent": sent, "reply": data.decode(), "ending": ending}))
"""


@pytest.mark.slow
class TestRefusalArrives:
    """(c) The refusal line reaches a client of another uid that sends before it reads."""

    @pytest.mark.parametrize("size", [14, 1 << 20])
    def test_a_client_that_sends_first_reads_the_refusal(
            self, spawn_daemon: Spawn, shared_dir: Path, ws: Path,
            other_user: tuple[int, int], size: int) -> None:
        proc = spawn_daemon([ws], socket_path=shared_dir / "run" / "s.sock")
        os.chmod(proc.socket.parent, 0o711)
        os.chmod(proc.socket, 0o666)  # open the door so SO_PEERCRED decides
        uid, gid = other_user
        done = subprocess.run([python_for_others(), "-I", "-c", _SENDER, str(proc.socket),
                               str(size)], user=uid, group=gid, extra_groups=[],
                              capture_output=True, timeout=30, check=False, cwd="/")
        assert done.returncode == 0, done.stderr.decode()
        seen = orjson.loads(done.stdout)
        assert (seen["sent"], seen["ending"]) == ("all", "eof"), seen
        lines = seen["reply"].splitlines()
        assert len(lines) == 1, seen
        error = orjson.loads(lines[0])["error"]
        assert (error["code"], error["name"]) == (77, "EX_NOPERM")
        assert f"peer uid {uid}" in error["message"]
        wait_for(lambda: proc.stats()["refusedPeers"] == 1, message="the refusal counted")
        assert proc.request({"op": "ping"})["pid"] == proc.pid
