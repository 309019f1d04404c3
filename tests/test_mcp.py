"""`storyd mcp` driven by the MCP SDK's own stdio client (`mcp.client.stdio.stdio_client`
and `ClientSession`): list the tools, call each, and compare every answer's text with the
bytes the matching CLI command prints, with a real daemon and without one."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

import anyio
from agents_harness import AgentsEnv, demo_workspace
from cli_harness import STORYD
from daemon_harness import wait_for
from mcp import ClientSession, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_harness import ISSUE_STATE, TOOLS, WRITING, cli, session, text_of


@pytest.fixture
def own(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    return demo_workspace(tmp_path), AgentsEnv(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["daemon", "direct"])
def test_each_tool_answers_with_the_cli_bytes(spawn_daemon: Any, own: tuple[Path, AgentsEnv],
                                             tmp_path: Path, mode: str) -> None:
    ws, agents = own
    env = spawn_daemon([ws]).env if mode == "daemon" else agents.env
    calls = {
        "resume": ({"epic_id": "49", "story_id": "STORY-0049-0013"},
                   ["resume", "--epic-id", "49", "--story-id", "STORY-0049-0013"]),
        "resume-state-file": ({"state_file": ISSUE_STATE},
                              ["resume", "--state-file", ISSUE_STATE]),
        "status": ({}, ["status", "--in-flight", "--json", "--workspace", str(ws)]),
        "epic": ({"epic_id": "0049"}, ["epic", "--epic-id", "0049", "--json"]),
        "check": ({}, ["check", "--workspace", str(ws)]),
        "reconcile_preview": ({}, ["reconcile", "--json", "--workspace", str(ws)]),
    }

    async def work(client: ClientSession) -> dict[str, Any]:
        listed = await client.list_tools()
        answers: dict[str, Any] = {"tools": {t.name: t for t in listed.tools}}
        for label, (arguments, _) in calls.items():
            answers[label] = await client.call_tool(label.split("-")[0], arguments)
        answers["resources"] = await client.list_resources()
        answers["in-flight"] = await client.read_resource("storyd://in-flight")
        answers["unit"] = await client.read_resource("storyd://unit/story-0049-0013")
        return answers

    got = session(env, ws, tmp_path / "mcp.err", work)
    tools = got["tools"]
    assert set(tools) == TOOLS
    assert tools["reconcile_apply"].annotations.destructive_hint is True
    for name in TOOLS - WRITING:
        assert tools[name].annotations.read_only_hint is True, name
        assert tools[name].annotations.destructive_hint is False, name
    for label, (_, argv) in calls.items():
        result = got[label]
        assert result.is_error is False, (label, text_of(result))
        expected = cli(env, ws, *argv)
        assert expected.returncode in (0, 1), expected.stderr
        assert text_of(result).encode() == expected.stdout, label
        assert result.structured_content is not None
    envelope = got["resume"].structured_content
    assert envelope["envelope"]["resumePoint"] == "phase-2-task-4"
    codes = {f["code"] for f in envelope["findings"]}
    assert {"unrecorded", "unreachable"} <= codes  # the findings come with the envelope
    assert got["check"].structured_content["exitCode"] == 1
    assert {f["unit"] for f in got["check"].structured_content["findings"]} >= {
        "story-0049-0013", "wf-fleet-portal-001", "issue-42-geofencing"}
    assert got["reconcile_preview"].structured_content["changes"] is True
    uris = {str(r.uri) for r in got["resources"].resources}
    assert "storyd://in-flight" in uris
    assert got["in-flight"].contents[0].text == text_of(got["status"])
    # the unit's resource is the resume tool's structured answer: the envelope, its findings
    assert orjson.loads(got["unit"].contents[0].text) == got["resume"].structured_content
    # a preview changes nothing
    assert cli(env, ws, "reconcile", "--workspace", str(ws)).returncode == 1


@pytest.mark.slow
def test_reconcile_apply_writes_what_git_proves(own: tuple[Path, AgentsEnv],
                                                tmp_path: Path) -> None:
    ws, agents = own
    before = cli(agents.env, ws, "resume", "--epic-id", "0049", "--story-id", "story-0049-0013")
    assert orjson.loads(before.stdout)["resumePoint"] == "phase-2-task-4"

    async def work(client: ClientSession) -> Any:
        return await client.call_tool("reconcile_apply", {"epic_id": "0049",
                                                          "story_id": "story-0049-0013"})

    result = session(agents.env, ws, tmp_path / "mcp.err", work)
    assert result.is_error is False, text_of(result)
    assert result.structured_content["applied"] is True
    assert orjson.loads(text_of(result))["applied"] is True  # the CLI's --json bytes
    after = cli(agents.env, ws, "resume", "--epic-id", "0049", "--story-id", "story-0049-0013")
    assert orjson.loads(after.stdout)["resumePoint"] == "phase-2-task-5"
    undone = cli(agents.env, ws, "reconcile", "--undo", "--workspace", str(ws))
    assert undone.returncode == 0, undone.stderr  # the CLI's undo knows the MCP apply


@pytest.mark.slow
def test_errors_are_clear_tool_errors(own: tuple[Path, AgentsEnv], tmp_path: Path) -> None:
    ws, agents = own

    async def work(client: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {
            "unknown story": await client.call_tool(
                "resume", {"epic_id": "0049", "story_id": "story-0049-0099"}),
            "unknown unit": await client.call_tool(
                "resume", {"state_file": ISSUE_STATE, "unit": "nope"}),
            "state file outside": await client.call_tool(
                "resume", {"state_file": "../../etc/passwd"}),
            "outside the roots": await client.call_tool("status", {"workspace": "/"}),
            "bad epic id": await client.call_tool("epic", {"epic_id": "x"}),
            "no selection": await client.call_tool("resume", {}),
        }
        for bad in ("--help", "-x"):  # an id is a value, never a flag (issue 28)
            out[f"epic {bad}"] = await client.call_tool("epic", {"epic_id": bad})
            out[f"resume {bad}"] = await client.call_tool(
                "resume", {"epic_id": "0049", "story_id": bad})
            for tool in ("reconcile_preview", "reconcile_apply"):
                out[f"{tool} {bad}"] = await client.call_tool(tool, {"epic_id": bad})
                out[f"{tool} story {bad}"] = await client.call_tool(
                    tool, {"epic_id": "0049", "story_id": bad})
        try:
            await client.read_resource("storyd://unit/nope")
        except MCPError as exc:
            out["resource"] = str(exc)
        return out

    got = session(agents.env, ws, tmp_path / "mcp.err", work)
    expected = {
        "unknown story": "Story not in execution-state.json",
        "unknown unit": f"unit 'nope' not in {ISSUE_STATE}",
        "state file outside": "outside the workspace",
        "outside the roots": "outside [hooks] roots",
        "bad epic id": "epic",
        "no selection": "missing story_id",
    }
    for bad in ("--help", "-x"):
        expected[f"epic {bad}"] = f"invalid epic_id {bad!r}"
        expected[f"resume {bad}"] = f"invalid story_id {bad!r}"
        for tool in ("reconcile_preview", "reconcile_apply"):
            expected[f"{tool} {bad}"] = f"invalid epic_id {bad!r}"
            expected[f"{tool} story {bad}"] = f"invalid story_id {bad!r}"
    for label, words in expected.items():
        assert got[label].is_error is True, label
        assert words in text_of(got[label]), (label, text_of(got[label]))
        assert "Traceback" not in text_of(got[label])
    assert "unit 'nope' not found" in got["resource"]


def test_a_missing_extra_is_one_clear_line(tmp_path: Path) -> None:
    """Without the `mcp` package (a shadow package that fails to import stands in for
    its absence): exit 69 and the pip command."""
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named mcp')\n")
    env = AgentsEnv(tmp_path).env
    env["PYTHONPATH"] = str(shadow.parent)
    done = subprocess.run([STORYD, "mcp"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 69
    assert done.stdout == b""
    assert done.stderr.decode() == (
        "storyd mcp: the MCP server needs the mcp extra: pip install 'storyd[mcp]'\n")


@pytest.mark.slow
def test_a_listen_subscription_hears_the_daemons_changes(spawn_daemon: Any,
                                                         own: tuple[Path, AgentsEnv]) -> None:
    """`subscriptions/listen` on storyd://in-flight (the SDK's `Client.listen`, protocol
    2026-07-28): a state-file change the daemon sees arrives as ResourceUpdated."""
    from mcp import Client
    from mcp.shared.subscriptions import ResourceUpdated

    ws, _ = own
    daemon = spawn_daemon([ws])
    state = ws / "plans" / "epic-0049" / "execution-state.json"

    async def main() -> list[object]:
        params = StdioServerParameters(command=STORYD, args=["mcp"], env=daemon.env, cwd=str(ws))
        async with Client(params, mode="auto") as client:  # noqa: SIM117
            async with client.listen(resource_subscriptions=["storyd://in-flight"]) as sub:
                assert sub.honored.resource_subscriptions == ["storyd://in-flight"]
                await anyio.to_thread.run_sync(lambda: wait_for(
                    lambda: daemon.stats()["subscribers"] >= 1, 20,
                    "the MCP server to subscribe to the daemon"))
                data = state.read_bytes()
                state.write_bytes(data.replace(b'"PENDING"', b'"DONE"', 1))
                with anyio.fail_after(20):
                    async for event in sub:
                        return [event]
        return []

    events = anyio.run(main)
    assert events == [ResourceUpdated(uri="storyd://in-flight")]


@pytest.mark.slow
def test_a_good_citizen_schemas_prompt_and_resources(own: tuple[Path, AgentsEnv],
                                                      tmp_path: Path) -> None:
    """Every parameter described (`only` an enum of repair classes), descriptions without
    source indentation, the "where do I resume?" prompt, one resource per unit in flight,
    and the SDK's not-found error (-32602) for an unknown unit."""
    from mcp.shared.exceptions import MCPError as Error

    ws, agents = own

    async def work(client: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": await client.list_tools(),
                               "prompts": await client.list_prompts(),
                               "resources": await client.list_resources()}
        out["prompt"] = await client.get_prompt("where-do-i-resume", {})
        try:
            await client.read_resource("storyd://unit/nope")
        except Error as exc:
            out["code"] = exc.error.code
        out["unit"] = await client.read_resource("storyd://unit/fleet-portal")
        return out

    got = session(agents.env, ws, tmp_path / "mcp.err", work)
    for tool in got["tools"].tools:
        assert "\n" not in tool.description and "  " not in tool.description, tool.name
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), (tool.name, name)
    reconcile = next(t for t in got["tools"].tools if t.name == "reconcile_apply")
    only = reconcile.input_schema["properties"]["only"]
    items = next(s for s in only["anyOf"] if s.get("type") == "array")["items"]
    assert {"unrecorded", "state-not-updated"} <= set(items["enum"])
    assert [p.name for p in got["prompts"].prompts] == ["where-do-i-resume"]
    text = got["prompt"].messages[0].content.text
    assert "fleet-portal" in text and "resume" in text
    uris = {str(r.uri) for r in got["resources"].resources}
    assert {f"storyd://unit/{u}" for u in ("fleet-portal", "story-0049-0013",
                                            "issue-42-geofencing")} <= uris
    assert "storyd://unit/story-0049-0012" not in uris  # done: not in flight
    assert got["code"] == -32602
    assert '"resumePoint"' in got["unit"].contents[0].text


@pytest.mark.slow
def test_a_unit_that_finishes_leaves_the_resource_list(spawn_daemon: Any,
                                                        own: tuple[Path, AgentsEnv]) -> None:
    """With the daemon: a unit whose last task is marked done stops being listed, and a
    listening client hears notifications/resources/list_changed."""
    from mcp import Client
    from mcp.shared.subscriptions import ResourcesListChanged

    ws, _ = own
    daemon = spawn_daemon([ws])
    state = ws / ".claude/plans/issue-42-geofencing/execution-state.json"

    async def main() -> tuple[set[str], list[object], set[str]]:
        params = StdioServerParameters(command=STORYD, args=["mcp"], env=daemon.env, cwd=str(ws))
        async with Client(params, mode="auto") as client:
            before = {str(r.uri) for r in (await client.list_resources()).resources}
            async with client.listen(resources_list_changed=True) as sub:
                await anyio.to_thread.run_sync(lambda: wait_for(
                    lambda: daemon.stats()["subscribers"] >= 1, 20,
                    "the MCP server to subscribe to the daemon"))
                data = orjson.loads(state.read_bytes())
                for task in data["tasks"]:
                    task["status"] = "completed"
                state.write_bytes(orjson.dumps(data))
                events: list[object] = []
                with anyio.fail_after(20):
                    async for event in sub:
                        events.append(event)
                        if isinstance(event, ResourcesListChanged):
                            break
            after = {str(r.uri) for r in (await client.list_resources()).resources}
        return before, events, after

    before, events, after = anyio.run(main)
    assert "storyd://unit/issue-42-geofencing" in before
    assert ResourcesListChanged() in events
    assert "storyd://unit/issue-42-geofencing" not in after
