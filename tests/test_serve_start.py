"""`storyd serve`'s start (issue 43): the socket is taken first, private from its first
moment, and a query sent at once is answered right; detector plugins are imported only
after the socket serves, and still check every unit.

The plugin here is a real third-party distribution (a dist-info on PYTHONPATH, as pip
installs one) whose module, when imported, pings the daemon's socket and writes down
what it heard: a daemon that loaded it before serving would have no socket to answer.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from cli_harness import run_storyd_cli
from daemon_harness import BIN, DaemonProcess, daemon_env, wait_for
from epic_state_harness import write_epic
from test_registry import distribution

from storyd.core.registry import DETECTORS

EPIC = "0043"
STORY = "story-0043-0002"

PLUGIN = """
import json, os, socket

def _ping():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        try:
            sock.connect(os.environ["STORYD_SOCKET"])
            sock.sendall(b'{"op": "ping"}\\n')
            data = b""
            while not data.endswith(b"\\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return json.loads(data)
        except (OSError, ValueError) as exc:
            return {"refused": repr(exc)}

with open(os.environ["START_PLUGIN_LOG"], "a") as _log:
    _log.write(json.dumps({"imported": _ping()}) + "\\n")


class Late:
    name = "late-plugin"
    codes = ()

    def check(self, unit, context):
        with open(os.environ["START_PLUGIN_LOG"], "a") as log:
            log.write(json.dumps({"checked": unit.key}) + "\\n")
        return []


DETECTOR = Late()
"""


def _lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _epic(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    write_epic(
        workspace,
        EPIC,
        tasks={f"story-0043-000{i}": {"T1": {"status": "pending"}} for i in range(1, 4)},
    )
    return workspace


@pytest.mark.slow
def test_detector_plugins_are_imported_after_the_socket_serves(tmp_path: Path) -> None:
    workspace = _epic(tmp_path)
    site = tmp_path / "site"
    distribution(
        site,
        "late-plugin",
        {DETECTORS: [("late-plugin", "late_plugin:DETECTOR")]},
        {"late_plugin": PLUGIN},
    )
    root = tmp_path / "daemon"
    env = daemon_env(root, root / "run" / "storyd.sock")
    env["PYTHONPATH"] = str(site)
    env["START_PLUGIN_LOG"] = str(tmp_path / "plugin.log")
    daemon = DaemonProcess(root, workspaces=[workspace], env=env)
    try:
        daemon.start()  # warm: the detectors have checked every unit
        seen = _lines(tmp_path / "plugin.log")
        imported = [line["imported"] for line in seen if "imported" in line]
        assert len(imported) == 1, seen
        assert imported[0].get("pid") == daemon.pid, imported  # the socket answered it
        checked = {line["checked"] for line in seen if "checked" in line}
        assert STORY in checked, seen  # loaded late, the plugin still checks the units
        daemon.stop()
    finally:
        daemon.close()


@pytest.mark.slow
def test_a_query_at_the_first_moment_is_answered_right_on_a_private_socket(
    tmp_path: Path,
) -> None:
    workspace = _epic(tmp_path)
    root = tmp_path / "daemon"
    sock_path = root / "run" / "storyd.sock"
    env = daemon_env(root, sock_path)
    direct = subprocess.run(
        [str(BIN / "storyd"), "resume", "--direct", "--epic-id", EPIC, "--story-id", STORY,
         "--workspace", str(workspace)], env=env, capture_output=True, check=True,
    ).stdout  # fmt: skip
    daemon = DaemonProcess(root, workspaces=[workspace], env=env)
    try:
        daemon.spawn()
        wait_for(sock_path.exists, 10.0, "the socket to appear")
        modes = tuple(stat.S_IMODE(os.stat(p).st_mode) for p in (sock_path, sock_path.parent))
        assert modes == (0o600, 0o700), [oct(m) for m in modes]
        request = {"op": "resume", "workspace": str(workspace), "epic": EPIC, "story": STORY}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(10.0)
            client.connect(str(sock_path))  # at once: the daemon may still be importing
            client.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = client.recv(1 << 20)
                assert chunk, data
                data += chunk
        answer = json.loads(data)
        assert answer["ok"] is True, answer
        assert answer["envelope"] == json.loads(direct)
        daemon.stop()
    finally:
        daemon.close()


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--verify-interval", "0", "--verify-interval 0 is out of range: expected 0.1 to 3600"),
    ("--verify-interval", "-1", "--verify-interval -1 is out of range"),
    ("--verify-interval", "nan", "--verify-interval nan is out of range"),
    ("--verify-interval", "soon", "invalid --verify-interval 'soon'"),
    ("--log-level", "nope", "--log-level 'nope': expected one of debug, info, warning, error"),
])  # fmt: skip
def test_a_flag_out_of_range_is_refused_before_the_socket(
        tmp_path: Path, flag: str, value: str, said: str) -> None:
    """The flags hold the configuration file's ranges: `--verify-interval 0` once ran
    the verification tick in a loop, a whole core for ever."""
    sock = tmp_path / "run" / "storyd.sock"
    env = daemon_env(tmp_path, sock)
    done = run_storyd_cli("serve", "--socket", str(sock), flag, value, env=env, timeout=20)
    assert done.returncode == 64, done.stderr
    assert said in done.stderr.decode(), done.stderr
    assert b"Traceback" not in done.stderr
    assert not sock.exists()
