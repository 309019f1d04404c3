"""A session's fleet claims in its hooks, when the daemon answers them (issue 45): with a
real `nats-server -js` and a real daemon whose [fleet] is that server, bin/storyd-hook's
post-tool-use renews the session's lease in the bucket (its expiry moves) and session-end
releases it; a write to a fleet unit's state file while another owner holds the current
grant is a `claim-lost` line (both tokens), and the session's stop blocks on it. The
hooks' own path (`storyd hook`) stays local-only: tests/test_claims_fleet.py holds that.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload
from cli_harness import BIN, STORYD
from daemon_harness import DaemonProcess
from epic_state_harness import EPIC, STATE, STORY
from nats_harness import NEEDS_NATS, NatsServer, fleet_config

REMOTE = "https://example.com/team/app.git"
SESSION = str(hook_payload("SessionStart", "/")["session_id"])
OWNER = f"session:{SESSION}"
TARGET = ("--epic-id", EPIC, "--story-id", STORY)

pytestmark = pytest.mark.slow


def storyd(env: dict[str, str], ws: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([STORYD, *args, "--workspace", str(ws)], env=env,
                          capture_output=True, timeout=60, check=False)  # fmt: skip


def launch(event: str, payload: dict[str, object],
           env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """bin/storyd-hook as the agent runs it (the daemon's `hook` op answers)."""
    return subprocess.run([str(BIN / "storyd-hook"), event], input=orjson.dumps(payload),
                          env=env, cwd="/", capture_output=True, timeout=60,
                          check=False)  # fmt: skip


def listed(env: dict[str, str], ws: Path) -> list[dict[str, object]]:
    done = storyd(env, ws, "claims", "--json")
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture
def fleet(tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess],
          ) -> tuple[Path, dict[str, str], DaemonProcess]:  # fmt: skip
    """A fleet unit (the demo workspace with a remote), a daemon of machine `alpha`
    answering its hooks, and the hooks' environment."""
    server = NatsServer(tmp_path).start()
    try:
        ws = demo_workspace(tmp_path)
        subprocess.run(["git", "-C", str(ws), "remote", "add", "origin", REMOTE], check=True)
        agents = AgentsEnv(tmp_path)
        agents.config(f"roots = [{str(tmp_path)!r}]\n", extra=fleet_config(server.url, "alpha"))
        daemon = spawn_daemon([ws], start=False)
        daemon.env = agents.env
        daemon.start()
        yield ws, agents.env, daemon
    finally:
        server.stop()


@NEEDS_NATS
def test_post_tool_use_renews_and_session_end_releases_the_sessions_fleet_lease(
    fleet: tuple[Path, dict[str, str], DaemonProcess],
) -> None:
    ws, env, _ = fleet
    made = storyd(env, ws, "claim", *TARGET, "--owner", OWNER, "--ttl", "60", "--json")
    assert made.returncode == 0, made.stderr
    [granted] = listed(env, ws)
    assert (granted["owner"], granted["granted"]) == (OWNER, granted["renewed"])
    edit = hook_payload("PostToolUse", ws, tool_name="Edit",
                        tool_input={"file_path": str(ws / "README.md")})  # fmt: skip
    done = launch("post-tool-use", edit, env)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), done.stderr
    [renewed] = listed(env, ws)
    assert renewed["token"] == granted["token"]  # a renewal keeps the grant
    assert str(renewed["expires"]) > str(granted["expires"]), (granted, renewed)
    assert renewed["granted"] == granted["granted"]
    end = launch("session-end", hook_payload("SessionEnd", ws, reason="other"), env)
    assert (end.returncode, end.stdout) == (0, b""), end.stderr
    assert listed(env, ws) == []


@NEEDS_NATS
def test_a_write_under_another_owners_fleet_grant_is_claim_lost_and_stop_blocks(
    fleet: tuple[Path, dict[str, str], DaemonProcess],
) -> None:
    ws, env, _ = fleet
    theirs = storyd(env, ws, "claim", *TARGET, "--owner", "alice", "--json")
    assert theirs.returncode == 0, theirs.stderr
    token = orjson.loads(theirs.stdout)["token"]
    launch("session-start", hook_payload("SessionStart", ws, source="startup"), env)
    edit = hook_payload("PostToolUse", ws, tool_name="Edit",
                        tool_input={"file_path": str(ws / STATE)})  # fmt: skip
    done = launch("post-tool-use", edit, env)
    told = done.stderr.decode()
    assert done.returncode == 2, told
    assert "storyd: claim-lost:" in told and f"while alice holds the current grant (token " \
        f"{token})" in told, told
    stop = launch("stop", hook_payload("Stop", ws, stop_hook_active=False), env)
    assert stop.returncode == 0, stop.stderr
    blocked = orjson.loads(stop.stdout)
    assert blocked["decision"] == "block" and "claim-lost" in str(blocked["reason"]), blocked
    # the session's own grant there: no finding (it holds the unit now, once alice let go)
    assert storyd(env, ws, "release", *TARGET, "--owner", "alice").returncode == 0
    mine = storyd(env, ws, "claim", *TARGET, "--owner", OWNER)
    assert mine.returncode == 0, mine.stderr
    again = launch("post-tool-use", edit, env)
    assert b"claim-lost" not in again.stderr, again.stderr


def test_without_fleet_or_claims_the_daemons_hooks_make_no_claims_database(
    tmp_path: Path, spawn_daemon: Callable[..., DaemonProcess],
) -> None:
    """The daemon's post-tool-use and session-end on a state file, with no [fleet] and
    nothing ever claimed: silent, and no claims database is made (its absence tells
    every hook that nothing was ever claimed)."""
    ws, agents = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    daemon = spawn_daemon([ws], start=False)
    daemon.env = agents.env
    daemon.start()
    edit = hook_payload("PostToolUse", ws, tool_name="Edit",
                        tool_input={"file_path": str(ws / STATE)})  # fmt: skip
    done = launch("post-tool-use", edit, agents.env)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr
    end = launch("session-end", hook_payload("SessionEnd", ws, reason="other"), agents.env)
    assert (end.returncode, end.stdout, end.stderr) == (0, b"", b"")
    assert daemon.request({"op": "ping"})["ok"]
    assert not (Path(agents.env["XDG_STATE_HOME"]) / "storyd" / "claims.sqlite3").exists()
