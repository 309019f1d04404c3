"""`storyd mcp` as the MCP Inspector and the TypeScript SDK found it (issue 42, item 2),
driven by the Python SDK's stdio client at protocol 2025-11-25: list changes reach a
handshake-era client, `only: []` is refused as `--only ''` is, a unit's resource carries
its findings, the prompt names the state files that do not parse, echoed values are
capped, argument errors are one line naming the parameter, every tool declares the
`outputSchema` its results fit, and unknown names get -32602."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

import anyio
import jsonschema
from agents_harness import AgentsEnv, demo_workspace
from daemon_harness import wait_for
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_harness import ISSUE_STATE, TOOLS, cli, session, text_of
from mcp_types import ResourceListChangedNotification

MIB = "x" * (1 << 20)
LINE = 1024  # storyd.agents.mcp_boundary.LINE: no error text is longer
AMENDED = "story-0049-0013"  # its task 003's commit was amended away (storyd demo)


@pytest.fixture
def own(tmp_path: Path) -> tuple[Path, AgentsEnv]:
    return demo_workspace(tmp_path), AgentsEnv(tmp_path)


def finish_issue_42(ws: Path) -> None:
    """Mark every task of the issue-42 plan completed: the unit leaves the in-flight list."""
    state = ws / ISSUE_STATE
    data = orjson.loads(state.read_bytes())
    for task in data["tasks"]:
        task["status"] = "completed"
    state.write_bytes(orjson.dumps(data))


class TestListChanges:
    """A handshake-era client (2025-11-25) is told the list changes, and is told when."""

    @pytest.mark.slow
    @pytest.mark.parametrize("mode", ["daemon", "direct"])
    def test_a_handshake_client_hears_a_unit_finish(
        self, spawn_daemon: Any, own: tuple[Path, AgentsEnv], tmp_path: Path, mode: str
    ) -> None:
        """With a daemon the change arrives from its event stream; without one, from the
        next `status`. Either way as `notifications/resources/list_changed`."""
        ws, agents = own
        daemon = spawn_daemon([ws]) if mode == "daemon" else None
        env = daemon.env if daemon is not None else agents.env
        changed = anyio.Event()

        async def heard(message: Any) -> None:
            if isinstance(message, ResourceListChangedNotification):
                changed.set()

        async def work(client: ClientSession) -> dict[str, Any]:
            before = await client.list_resources()
            if daemon is not None:
                await anyio.to_thread.run_sync(lambda: wait_for(
                    lambda: daemon.stats()["subscribers"] >= 1, 20,
                    "the MCP server to subscribe to the daemon"))  # fmt: skip
            finish_issue_42(ws)
            if daemon is None:
                await client.call_tool("status", {})
            with anyio.fail_after(20):
                await changed.wait()
            return {"init": client.initialize_result, "before": before,
                    "after": await client.list_resources()}  # fmt: skip

        got = session(env, ws, tmp_path / "mcp.err", work, heard)
        assert got["init"].protocol_version == "2025-11-25"
        assert got["init"].capabilities.resources.list_changed is True
        unit = "storyd://unit/issue-42-geofencing"
        assert unit in {str(r.uri) for r in got["before"].resources}
        assert unit not in {str(r.uri) for r in got["after"].resources}


class TestEmptyOnly:
    """`only: []` is `--only ''`: refused in the command line's words, nothing written."""

    @pytest.mark.slow
    def test_an_empty_only_is_refused(self, own: tuple[Path, AgentsEnv], tmp_path: Path) -> None:
        ws, agents = own
        before = (ws / ISSUE_STATE).read_bytes()

        async def work(client: ClientSession) -> dict[str, Any]:
            return {tool: await client.call_tool(tool, {"only": []})
                    for tool in ("reconcile_preview", "reconcile_apply")}  # fmt: skip

        got = session(agents.env, ws, tmp_path / "mcp.err", work)
        said = cli(agents.env, ws, "reconcile", "--only", "", "--workspace", str(ws))
        assert said.returncode == 64
        words = said.stderr.decode().strip().removeprefix("storyd reconcile: --only: ")
        for tool, result in got.items():
            assert result.is_error is True, (tool, text_of(result))
            assert text_of(result) == f"only: {words}", tool
        assert (ws / ISSUE_STATE).read_bytes() == before  # nothing applied
        undo = cli(agents.env, ws, "reconcile", "--undo", "--workspace", str(ws))
        assert undo.returncode != 0  # and nothing to undo


class TestUnitResource:
    """`storyd://unit/<id>` is the resume tool's answer: the envelope with its findings."""

    @pytest.mark.slow
    def test_an_amended_sha_is_served_with_its_warning(
        self, own: tuple[Path, AgentsEnv], tmp_path: Path
    ) -> None:
        ws, agents = own

        async def work(client: ClientSession) -> tuple[Any, Any]:
            read = await client.read_resource(f"storyd://unit/{AMENDED}")
            resumed = await client.call_tool("resume", {"epic_id": "0049", "story_id": AMENDED})
            return read, resumed

        read, resumed = session(agents.env, ws, tmp_path / "mcp.err", work)
        body = orjson.loads(read.contents[0].text)
        assert body == resumed.structured_content
        gone = body["envelope"]["tasksCompleted"][2]["commitSha"]
        warned = [f for f in body["findings"] if f["code"] == "unreachable"]
        assert [f["evidence"]["commit"] for f in warned] == [gone]
        assert warned[0]["severity"] == "warning"


class TestPrompt:
    """The prompt names the state files that do not parse, with no daemon to serve them."""

    @pytest.mark.slow
    def test_an_unreadable_state_file_is_named(
        self, own: tuple[Path, AgentsEnv], tmp_path: Path
    ) -> None:
        ws, agents = own
        (ws / ISSUE_STATE).write_text('{"tasks": [')  # cut short mid-write

        async def work(client: ClientSession) -> str:
            prompt = await client.get_prompt("where-do-i-resume", {})
            return str(prompt.messages[0].content.text)

        text = session(agents.env, ws, tmp_path / "mcp.err", work)
        assert f"UNREADABLE {ISSUE_STATE}: " in text
        assert "story-0049-0013" in text  # the readable units are still listed


class TestCappedEchoes:
    """A 1 MiB argument comes back cut, in every error that names it."""

    @pytest.mark.slow
    def test_a_mebibyte_argument_is_not_echoed_whole(
        self, own: tuple[Path, AgentsEnv], tmp_path: Path
    ) -> None:
        ws, agents = own
        calls = {
            "epic": ("epic", {"epic_id": MIB}),
            "resume story": ("resume", {"epic_id": "0049", "story_id": MIB}),
            "resume state file": ("resume", {"state_file": MIB}),
            "resume unit": ("resume", {"state_file": ISSUE_STATE, "unit": MIB}),
            "status workspace": ("status", {"workspace": MIB}),
            "reconcile epic": ("reconcile_preview", {"epic_id": MIB}),
            "unknown tool": (MIB, {}),
        }

        async def work(client: ClientSession) -> dict[str, str]:
            said: dict[str, str] = {}
            for label, (tool, arguments) in calls.items():
                try:
                    result = await client.call_tool(tool, arguments)
                except MCPError as exc:
                    said[label] = f"{exc.error.message} {orjson.dumps(exc.error.data).decode()}"
                else:
                    assert result.is_error is True, label
                    said[label] = text_of(result)
            for label, ask in (("resource", lambda: client.read_resource(f"storyd://unit/{MIB}")),
                               ("prompt", lambda: client.get_prompt(MIB, {}))):  # fmt: skip
                try:
                    await ask()
                except MCPError as exc:
                    said[label] = f"{exc.error.message} {orjson.dumps(exc.error.data).decode()}"
            return said

        said = session(agents.env, ws, tmp_path / "mcp.err", work)
        assert set(said) == {*calls, "resource", "prompt"}
        for label, text in said.items():
            assert len(text) <= 2 * LINE, (label, len(text))
            assert "x" * 300 not in text, label
            assert "more characters" in text, (label, text)
            assert "\n" not in text, label


class TestArgumentErrors:
    """An argument of the wrong type is one line naming the parameter, no pydantic."""

    @pytest.mark.slow
    def test_wrong_types_name_the_parameter(
        self, own: tuple[Path, AgentsEnv], tmp_path: Path
    ) -> None:
        ws, agents = own
        calls = {
            "argument epic_id: Input should be a valid string": ("epic", {"epic_id": 49}),
            "argument epic_id: Field required": ("epic", {}),
            "argument only: Input should be a valid list": ("reconcile_preview", {"only": "x"}),
            "argument only.0: Input should be ": ("reconcile_apply", {"only": ["nope"]}),
            "argument workspace: Input should be a valid string": ("check", {"workspace": []}),
        }

        async def work(client: ClientSession) -> dict[str, Any]:
            return {words: await client.call_tool(tool, arguments)
                    for words, (tool, arguments) in calls.items()}  # fmt: skip

        got = session(agents.env, ws, tmp_path / "mcp.err", work)
        for words, result in got.items():
            text = text_of(result)
            assert result.is_error is True, words
            assert text.startswith(words), text
            assert "\n" not in text and "pydantic" not in text and "http" not in text, text
            assert "validation error" not in text, text


class TestOutputSchemas:
    """Every tool declares an `outputSchema`, and its `structuredContent` fits it."""

    @pytest.mark.slow
    def test_each_result_validates_against_its_tools_schema(
        self, own: tuple[Path, AgentsEnv], tmp_path: Path
    ) -> None:
        ws, agents = own
        calls = {
            "resume": {"epic_id": "0049", "story_id": AMENDED},
            "status": {},
            "epic": {"epic_id": "0049"},
            "check": {},
            "reconcile_preview": {},
            "reconcile_apply": {"state_file": ISSUE_STATE},
            "claim": {"state_file": ISSUE_STATE, "owner": "a"},  # issue 45's four
            "claim_next": {"epic_id": "0049", "story_id": AMENDED, "owner": "a"},
            "release": {"state_file": ISSUE_STATE, "owner": "a"},
            "claims": {},
        }

        async def work(client: ClientSession) -> tuple[Any, dict[str, Any]]:
            listed = await client.list_tools()
            return listed, {name: await client.call_tool(name, arguments)
                            for name, arguments in calls.items()}  # fmt: skip

        listed, results = session(agents.env, ws, tmp_path / "mcp.err", work)
        schemas = {tool.name: tool.output_schema for tool in listed.tools}
        assert set(schemas) == TOOLS == set(results)
        for name, result in results.items():
            schema = schemas[name]
            assert schema is not None and schema["type"] == "object", name
            checker = jsonschema.Draft202012Validator
            checker.check_schema(schema)
            assert result.is_error is False, (name, text_of(result))
            checker(schema).validate(result.structured_content)
        # a schema that says something: a finding without its code would not fit
        broken = results["resume"].structured_content
        del broken["findings"][0]["code"]
        assert not jsonschema.Draft202012Validator(schemas["resume"]).is_valid(broken)


class TestUnknownNames:
    """Unknown prompts, prompt arguments, resources and tools: -32602 (invalid params)."""

    @pytest.mark.slow
    def test_the_spec_codes(self, own: tuple[Path, AgentsEnv], tmp_path: Path) -> None:
        ws, agents = own
        asks = {
            "prompt": lambda c: c.get_prompt("nope", {}),
            "prompt argument": lambda c: c.get_prompt("where-do-i-resume", {"folder": "."}),
            "resource": lambda c: c.read_resource("storyd://nope"),
            "unit": lambda c: c.read_resource("storyd://unit/nope"),
            "tool": lambda c: c.call_tool("nope", {}),
        }

        async def work(client: ClientSession) -> dict[str, Any]:
            errors: dict[str, Any] = {}
            for label, ask in asks.items():
                try:
                    await ask(client)
                except MCPError as exc:
                    errors[label] = exc.error
            return errors

        errors = session(agents.env, ws, tmp_path / "mcp.err", work)  # no traceback on stderr
        assert set(errors) == set(asks)
        for label, error in errors.items():
            assert error.code == -32602, (label, error)
            assert "\n" not in error.message
        assert errors["prompt"].message == "unknown prompt 'nope'"
        assert "'folder'" in errors["prompt argument"].message
        assert "workspace" in errors["prompt argument"].message
