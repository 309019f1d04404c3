"""Claims in the agents' hooks (issue 45): post-tool-use renews the session's leases and
finds a `claim-lost` write; stop blocks on it once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest
from agents_harness import AgentsEnv, demo_workspace, hook_payload, run_hook
from cli_harness import STORYD
from epic_state_harness import EPIC, STATE, STORY

SESSION = hook_payload("SessionStart", "/")["session_id"]


def storyd(env: AgentsEnv, ws: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([STORYD, *args, "--workspace", str(ws)], env=env.env,
                          capture_output=True, timeout=60, check=False)  # fmt: skip


def written(ws: Path, path: Path) -> dict[str, object]:
    return hook_payload("PostToolUse", ws, tool_name="Write",
                        tool_input={"file_path": str(path), "content": "..."},
                        tool_response={"filePath": str(path), "success": True})  # fmt: skip


@pytest.fixture
def session(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    """The demo workspace and a session that began in it."""
    ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)
    begun = run_hook("session-start", hook_payload("SessionStart", ws, source="startup"),
                     env.env)  # fmt: skip
    assert begun.returncode == 0, begun.stderr
    return ws, env


@pytest.mark.slow
class TestHooks:
    """What the session is told, as Claude Code runs the hooks."""

    def test_write_under_another_owners_grant_is_claim_lost_and_holds_stop(
        self, session: tuple[Path, AgentsEnv]
    ) -> None:
        ws, env = session
        target = ("--epic-id", EPIC, "--story-id", STORY)
        assert storyd(env, ws, "claim", *target, "--owner", "alice").returncode == 0
        state = ws / STATE
        state.write_bytes(state.read_bytes().replace(b"}\n", b"} \n", 1))  # still valid
        told = run_hook("post-tool-use", written(ws, state), env.env)
        assert told.returncode == 2, told.stderr
        assert (f"storyd: claim-lost: {STATE} {STORY}: written by session:{SESSION} "
                "(token none) while alice holds the current grant (token 1)"
                ) in told.stderr.decode()  # fmt: skip
        stop = run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), env.env)
        reason = orjson.loads(stop.stdout)["reason"]
        assert "claims/claim-lost" in reason and "alice holds it" in reason
        again = run_hook("stop", hook_payload("Stop", ws, stop_hook_active=False), env.env)
        assert b"claim-lost" not in again.stdout  # held once per record

    def test_post_tool_use_renews_the_sessions_leases(
        self, session: tuple[Path, AgentsEnv]
    ) -> None:
        ws, env = session
        target = ("--epic-id", EPIC, "--story-id", STORY)
        mine = storyd(env, ws, "claim", *target, "--owner", f"session:{SESSION}", "--ttl",
                      "30", "--json")  # fmt: skip
        granted = orjson.loads(mine.stdout)
        state = ws / STATE
        run_hook("post-tool-use", written(ws, state), env.env)
        listed = orjson.loads(storyd(env, ws, "claims", "--json").stdout)
        assert listed["token"] == granted["token"]
        assert listed["renewed"] > listed["granted"]  # ISO times in UTC sort as text
