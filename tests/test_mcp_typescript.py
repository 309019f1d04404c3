"""`storyd mcp` driven by the TypeScript SDK's client from npm (the client the MCP
Inspector is built on, protocol 2025-11-25): list the tools, call `resume` (the SDK
checks its structuredContent against the outputSchema with ajv), and hear
`notifications/resources/list_changed` when a unit finishes under a running daemon.

The SDK is installed once, pinned, into ~/.cache/storyd-tests/npm/ (under
$XDG_CACHE_HOME when set), and kept there; without node and npm, or when the install
fails, the test skips and says why.
"""

from __future__ import annotations

import fcntl
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace
from cli_harness import STORYD
from daemon_harness import wait_for
from mcp_harness import ISSUE_STATE, TOOLS

SDK = "@modelcontextprotocol/sdk"
PIN = "1.32.2"
CLIENT = Path(__file__).with_name("mcp_ts_client.cjs")
AMENDED = "story-0049-0013"


@pytest.fixture(scope="session")
def ts_sdk() -> tuple[str, Path]:
    """node, and the folder whose node_modules holds the pinned SDK."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the TypeScript SDK's client")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = cache / "storyd-tests" / "npm" / f"sdk-{PIN}"
    prefix.mkdir(parents=True, exist_ok=True)
    installed = prefix / "node_modules" / SDK / "package.json"
    with (prefix / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time
        if not installed.exists() or orjson.loads(installed.read_bytes())["version"] != PIN:
            (prefix / "package.json").write_text('{"private": true}\n')
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                 f"{SDK}@{PIN}"],
                capture_output=True, timeout=300, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
                pytest.skip(f"npm install {SDK}@{PIN} failed: {' '.join(tail)}")
    return node, prefix


class Lines:
    """The client's stdout, one JSON object a line, read on a thread."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.got: queue.Queue[bytes] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout
        self._thread = threading.Thread(target=lambda: [self.got.put(b) for b in out], daemon=True)
        self._thread.start()

    def next(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.got.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"the TypeScript client said nothing in {timeout:g} s")
        said: dict[str, Any] = orjson.loads(line)
        return said


@pytest.mark.slow
def test_the_typescript_client_lists_calls_and_hears_a_list_change(
    ts_sdk: tuple[str, Path], spawn_daemon: Any, tmp_path: Path
) -> None:
    node, prefix = ts_sdk
    ws = demo_workspace(tmp_path)
    AgentsEnv(tmp_path)  # the configuration allowing the workspace
    daemon = spawn_daemon([ws])
    arguments = orjson.dumps({"epic_id": "0049", "story_id": AMENDED}).decode()
    with (tmp_path / "ts.err").open("w") as err, subprocess.Popen(
        [node, str(CLIENT), str(prefix), arguments, STORYD, "mcp"],
        cwd=ws, env=daemon.env, stdout=subprocess.PIPE, stderr=err,
    ) as proc:  # fmt: skip
        _converse(proc, daemon, ws)
    assert "Traceback" not in (tmp_path / "ts.err").read_text()


def _converse(proc: subprocess.Popen[bytes], daemon: Any, ws: Path) -> None:
    """Read the client's ready line, finish a unit, read the change it heard."""
    try:
        lines = Lines(proc)
        ready = lines.next(60)
        assert ready["step"] == "ready", ready
        assert ready["protocol"] == "2025-11-25"
        assert ready["capabilities"]["resources"]["listChanged"] is True
        tools = {t["name"]: t["outputSchema"] for t in ready["tools"]}
        assert set(tools) == TOOLS
        assert all(schema is not None for schema in tools.values()), tools
        resumed = ready["resume"]
        assert resumed.get("isError") is not True, resumed
        assert resumed["structuredContent"]["envelope"]["resumePoint"] == "phase-2-task-4"
        unit = "storyd://unit/issue-42-geofencing"
        assert unit in ready["resources"]
        wait_for(lambda: daemon.stats()["subscribers"] >= 1, 20,
                 "the MCP server to subscribe to the daemon")  # fmt: skip
        state = ws / ISSUE_STATE
        data = orjson.loads(state.read_bytes())
        for task in data["tasks"]:
            task["status"] = "completed"
        state.write_bytes(orjson.dumps(data))
        changed = lines.next(40)
        assert changed["step"] == "changed", changed
        assert changed["error"] is None
        assert unit not in changed["resources"]
        assert f"storyd://unit/{AMENDED}" in changed["resources"]
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
