"""The shell fast paths (bin/storyd-resume, bin/storyd-hook) with BSD tools.

macOS's stand-ins: an `nc` that refuses -N as macOS's netcat does ("illegal option")
and otherwise half-closes at the end of its input like it, a `base64` that refuses -w
and never wraps (macOS's), and no `timeout` and no socat on PATH. With them the daemon
still answers both scripts without a Python start (a shadow `storyd` package on
PYTHONPATH fails loudly if one starts), byte for byte as the in-process commands.

busybox alone (its sh, base64, timeout and an nc without -U): the scripts fall back to
`storyd` and still print exactly what it prints.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, no_python, run_hook
from cli_harness import STORYD, run_storyd_cli
from daemon_harness import DaemonProcess

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
RESUME = ("--story-id", "story-0049-0013", "--epic-id", "0049")
HOST_TOOLS = ("id", "dirname", "readlink", "mktemp", "rm", "cat", "git")

MAC_NC = """#!/bin/sh
for arg; do
  case $arg in -N) echo "nc: illegal option -- N" >&2
                   echo "usage: nc [-46AacCDdEFhklMnOortUuvz] [-K tc] [-b boundif] ..." >&2
                   exit 1 ;; esac
done
exec {nc} -N "$@"
"""

MAC_BASE64 = f"""#!{sys.executable}
import base64, sys
args, decode = sys.argv[1:], False
while args:
    flag = args.pop(0)
    if flag in ("-d", "-D", "--decode"):
        decode = True
    elif flag in ("-b", "--break") and args:
        args.pop(0)
    else:
        sys.stderr.write(f"base64: invalid option -- {{flag.lstrip('-')[:1]}}\\n")
        sys.exit(64)
data = sys.stdin.buffer.read()
sys.stdout.buffer.write(base64.b64decode(data) if decode else base64.b64encode(data) + b"\\n")
"""


def _tools(folder: Path, names: tuple[str, ...]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        found = shutil.which(name)
        if found:
            (folder / name).symlink_to(found)
    return folder


def _script(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text)
    (folder / name).chmod(0o755)


@pytest.fixture
def mac_path(tmp_path: Path) -> str:
    """A PATH of macOS's nc and base64 stand-ins and a few host tools (no timeout, socat)."""
    nc = shutil.which("nc")
    if nc is None:
        pytest.skip("OpenBSD netcat (nc) is not installed: the stand-in wraps it")
    folder = _tools(tmp_path / "mactools", HOST_TOOLS)
    _script(folder, "nc", MAC_NC.format(nc=nc))
    _script(folder, "base64", MAC_BASE64)
    return str(folder)


@pytest.fixture
def busybox_path(tmp_path: Path) -> tuple[str, str]:
    """(busybox, a PATH of busybox's applets and git)."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed (apt package busybox)")
    folder = tmp_path / "busybox"
    folder.mkdir()
    listed = subprocess.run([busybox, "--list"], capture_output=True, text=True, timeout=30,
                            check=True).stdout.split()
    for applet in listed:
        (folder / applet).symlink_to(busybox)
    _tools(folder, ("git",))
    return busybox, str(folder)


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """The repository's two scripts beside a `storyd` (the venv's), as an install has them."""
    folder = tmp_path / "install-bin"
    folder.mkdir()
    for name in ("storyd-resume", "storyd-hook"):
        shutil.copy(REPO / "bin" / name, folder / name)
    (folder / "storyd").symlink_to(STORYD)
    return folder


@pytest.fixture
def up(tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess]
       ) -> tuple[Path, AgentsEnv, DaemonProcess]:
    """The demo workspace and a daemon watching it with the hooks' environment."""
    ws, agents = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    daemon = spawn_daemon([ws], start=False)
    daemon.env = agents.env
    daemon.start()
    return ws, agents, daemon


def _triple(done: subprocess.CompletedProcess[bytes]) -> tuple[int, bytes, bytes]:
    return done.returncode, done.stdout, done.stderr


class TestMacTools:
    """The daemon answers both scripts through macOS's nc and base64, no Python started."""

    def test_resume(self, up: tuple[Path, AgentsEnv, DaemonProcess], installed: Path,
                    mac_path: str, tmp_path: Path) -> None:
        ws, agents, daemon = up
        want = run_storyd_cli("resume", "--direct", *RESUME, env=agents.env, cwd=ws)
        assert want.returncode == 0 and want.stdout
        env = no_python(dict(agents.env, PATH=mac_path), tmp_path)
        before = daemon.stats()["queries"]
        done = subprocess.run(["/bin/sh", str(installed / "storyd-resume"), "--timeout", "5000",
                               *RESUME], cwd=ws, env=env, capture_output=True, timeout=60,
                              check=False)  # fmt: skip
        assert b"SHADOW" not in done.stderr, "storyd-resume started Python"
        assert _triple(done) == _triple(want)
        assert daemon.stats()["queries"] == before + 1

    @pytest.mark.parametrize("padding", [0, 60_000])  # on the line; in a file of its own
    def test_hook(self, up: tuple[Path, AgentsEnv, DaemonProcess], installed: Path,
                  mac_path: str, tmp_path: Path, padding: int) -> None:
        ws, agents, _ = up
        payload = hook_payload("SessionStart", ws, source="startup", padding="x" * padding)
        want = run_hook("session-start", payload, agents.env)
        assert want.returncode == 0 and want.stdout
        env = no_python(dict(agents.env, PATH=mac_path, STORYD_HOOK_TIMEOUT_MS="10000"),
                         tmp_path)
        done = subprocess.run([str(installed / "storyd-hook"), "session-start"],
                              input=orjson.dumps(payload), env=env, cwd="/",
                              capture_output=True, timeout=60, check=False)  # fmt: skip
        assert b"SHADOW" not in done.stderr, "storyd-hook started Python"
        assert _triple(done) == _triple(want)
        assert not list(Path(env.get("TMPDIR", "/tmp")).glob("storyd-hook.*"))


class TestBusybox:
    """With busybox's tools (its nc has no -U) both scripts print what storyd prints."""

    def test_resume(self, up: tuple[Path, AgentsEnv, DaemonProcess], installed: Path,
                    busybox_path: tuple[str, str]) -> None:
        ws, agents, _ = up
        busybox, path = busybox_path
        want = run_storyd_cli("resume", "--direct", *RESUME, env=agents.env, cwd=ws)
        done = subprocess.run([busybox, "sh", str(installed / "storyd-resume"), *RESUME],
                              cwd=ws, env=dict(agents.env, PATH=path), capture_output=True,
                              timeout=60, check=False)  # fmt: skip
        assert _triple(done) == _triple(want)

    def test_hook(self, up: tuple[Path, AgentsEnv, DaemonProcess], installed: Path,
                  busybox_path: tuple[str, str]) -> None:
        ws, agents, _ = up
        busybox, path = busybox_path
        payload = hook_payload("SessionStart", ws, source="startup")
        want = run_hook("session-start", payload, agents.env)
        done = subprocess.run([busybox, "sh", str(installed / "storyd-hook"), "session-start"],
                              input=orjson.dumps(payload), env=dict(agents.env, PATH=path),
                              cwd="/", capture_output=True, timeout=60, check=False)  # fmt: skip
        assert _triple(done) == _triple(want)


def test_the_launchers_ask_nc_for_no_n_flag() -> None:
    """-N (OpenBSD's since 2017) is refused by macOS's nc: the daemon closes instead."""
    for name in ("storyd-resume", "storyd-hook"):
        code = [line for line in (REPO / "bin" / name).read_text().splitlines()
                if not line.lstrip().startswith("#")]  # fmt: skip
        assert not any("nc -U -N" in line for line in code), name
