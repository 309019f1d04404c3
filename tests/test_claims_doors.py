"""Claims through every door (issue 45): the socket's ops and the MCP tools answer from
the same store as `storyd claim` run directly, and `claim-next` hands racing callers
different tasks in the producer's order."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from agents_harness import AgentsEnv, demo_workspace
from cli_harness import STORYD
from epic_state_harness import EPIC, STORY
from mcp_harness import session

UNIT = {"epicId": EPIC, "storyId": STORY}


@pytest.mark.slow
class TestSocket:
    """The daemon's ops and the direct command on one store."""

    def test_claim_next_then_direct_claim(self, store: Path, tmp_path: Path,
                                          spawn_daemon: Any) -> None:  # fmt: skip
        ws = demo_workspace(tmp_path)
        daemon = spawn_daemon([ws])
        first = daemon.request({"op": "claim-next", "workspace": str(ws), "owner": "a", **UNIT})
        second = daemon.request({"op": "claim-next", "workspace": str(ws), "owner": "b",
                                 **UNIT})  # fmt: skip
        assert first["ok"] and second["ok"], (first, second)
        assert first["task"] != second["task"]
        assert first["claim"]["token"] < second["claim"]["token"]  # type: ignore[index]
        direct = subprocess.run(
            [STORYD, "claim", "--workspace", str(ws), "--epic-id", EPIC, "--story-id", STORY,
             "--task", str(first["task"]), "--owner", "c"],
            env=daemon.env, capture_output=True, timeout=60, check=False)  # fmt: skip
        assert direct.returncode == 75 and b"held by a" in direct.stderr
        refused = daemon.request({"op": "claim", "workspace": str(ws), "owner": "c",
                                  "task": first["task"], **UNIT})  # fmt: skip
        assert refused["ok"] is False
        assert refused["error"]["code"] == 75  # type: ignore[index]
        listed = daemon.request({"op": "claims", "workspace": str(ws)})
        assert sorted(c["owner"] for c in listed["claims"]) == ["a", "b"]  # type: ignore[attr-defined]
        gone = daemon.request({"op": "release", "workspace": str(ws), "owner": "a",
                               "task": first["task"], **UNIT})  # fmt: skip
        assert gone["released"] is True


@pytest.mark.slow
class TestMcp:
    """The agent's tools."""

    def test_claim_next_and_claims(self, store: Path, tmp_path: Path) -> None:
        ws, env = demo_workspace(tmp_path), AgentsEnv(tmp_path)

        async def work(client: Any) -> tuple[Any, Any, Any]:
            one = await client.call_tool("claim_next", {"epic_id": EPIC, "story_id": STORY,
                                                        "owner": "s1"})  # fmt: skip
            held = await client.call_tool("claim", {"epic_id": EPIC, "story_id": STORY,
                                                    "owner": "s2"})  # fmt: skip
            listed = await client.call_tool("claims", {})
            return one, held, listed

        one, held, listed = session({**env.env, "STORYD_CLAIMS": str(store)}, ws,
                                    tmp_path / "mcp.err", work)  # fmt: skip
        assert one.is_error is False and one.structured_content["task"]
        assert held.is_error is True and "held by s1" in held.content[0].text
        owners = [c["owner"] for c in listed.structured_content["claims"]]
        assert owners == ["s1"]
