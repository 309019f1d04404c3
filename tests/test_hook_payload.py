"""storyd.api.hooks.payload on each agent's documented hook input: which agent, which
folder, which session, which files, whether a stop may be held, and the answer's shape.

Samples follow each reference: Claude Code https://code.claude.com/docs/en/hooks;
Cursor https://cursor.com/docs/agent/hooks; VS Code
https://code.visualstudio.com/docs/agents/reference/hooks-reference; Gemini CLI
https://geminicli.com/docs/hooks/reference; Codex https://developers.openai.com/codex/hooks.
"""

from __future__ import annotations

import pytest

from storyd.api.hooks.payload import CONTEXT_LIMIT, answer, read, recognise

CLAUDE_BASH = {
    "session_id": "abc", "transcript_path": "/t.jsonl", "cwd": "/w", "permission_mode": "default",
    "hook_event_name": "PostToolUse", "tool_name": "Bash",
    "tool_input": {"command": "jq . s.json > t && mv t s.json"}, "tool_response": {},
}  # fmt: skip
CURSOR_EDIT = {
    "conversation_id": "c1", "generation_id": "g1", "hook_event_name": "afterFileEdit",
    "workspace_roots": ["/w"], "file_path": "/w/plans/x.json",
    "edits": [{"old_string": "a", "new_string": "b"}],
}  # fmt: skip
VSCODE_EDIT = {
    "timestamp": "2026-02-09T10:30:00.000Z", "cwd": "/w", "sessionId": "s9",
    "hookEventName": "PostToolUse", "tool_name": "editFiles", "tool_use_id": "t",
    "tool_input": {"filePath": "plans/x.json"},
}  # fmt: skip
GEMINI_AFTER_AGENT = {
    "session_id": "g", "transcript_path": "/t", "cwd": "/w", "hook_event_name": "AfterAgent",
    "timestamp": "2026-02-09T10:30:00Z", "prompt": "p", "prompt_response": "r",
    "stop_hook_active": False,
}  # fmt: skip


@pytest.mark.parametrize(("payload", "agent"), [
    (CLAUDE_BASH, "claude"), (CURSOR_EDIT, "cursor"), (VSCODE_EDIT, "vscode"),
    (GEMINI_AFTER_AGENT, "gemini"),
    ({**GEMINI_AFTER_AGENT, "hook_event_name": "SessionStart"}, "claude"),  # answered alike
])  # fmt: skip
def test_each_agent_is_recognised(payload: dict[str, object], agent: str) -> None:
    assert recognise(payload) == agent


def test_what_each_payload_says() -> None:
    claude = read(CLAUDE_BASH)
    assert (claude.folder, claude.session, claude.paths) == ("/w", "abc", [])
    cursor = read(CURSOR_EDIT)
    assert (cursor.folder, cursor.session, cursor.paths) == ("/w", "c1", ["/w/plans/x.json"])
    vscode = read(VSCODE_EDIT)
    assert (vscode.session, vscode.paths) == ("s9", ["/w/plans/x.json"])  # made absolute
    assert read(CLAUDE_BASH, "codex").agent == "codex"


@pytest.mark.parametrize(("fields", "continued", "quiet"), [
    ({"stop_hook_active": True}, True, False),
    ({"loop_count": 1, "status": "completed"}, True, False),
    ({"loop_count": 0, "status": "completed"}, False, False),
    ({"loop_count": 0, "status": "aborted"}, False, True),
    ({"permission_mode": "plan"}, False, True),
    ({"hook_event_name": "SubagentStop", "agent_type": "Explore"}, False, True),
    ({"hook_event_name": "SubagentStop", "agent_type": "general-purpose"}, False, False),
])  # fmt: skip
def test_when_a_stop_may_be_held(fields: dict[str, object], continued: bool,
                                 quiet: bool) -> None:
    hook = read({"session_id": "s", "cwd": "/w", "hook_event_name": "Stop", **fields})
    assert (hook.continued, hook.quiet) == (continued, quiet)


def test_each_agent_answers_in_its_own_shape() -> None:
    assert answer("cursor", "stop", "x") == {"followup_message": "x"}
    assert answer("cursor", "session-start", "x") == {"additional_context": "x"}
    assert answer("gemini", "stop", "x") == {"decision": "deny", "reason": "x"}
    assert answer("claude", "stop", "x") == {"decision": "block", "reason": "x"}
    assert answer("gemini", "post-tool-use", "x") == {
        "hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "x"}}
    assert answer("vscode", "session-start", "x") == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "x"}}
    long = answer("claude", "stop", "y" * 20_000)["reason"]
    assert isinstance(long, str) and len(long) == CONTEXT_LIMIT and long.endswith("...")


@pytest.mark.parametrize("bad", [
    {"cwd": 5}, {"workspace_roots": "not a list"}, {"workspace_roots": [None, 3]},
    {"tool_input": "a string"}, {"tool_input": {"files": "x"}}, {"cwd": "a\u0000b"},
    {"loop_count": True},
])  # fmt: skip
def test_odd_payloads_read_as_nothing(bad: dict[str, object]) -> None:
    hook = read(bad)
    assert hook.folder is None or "\0" not in hook.folder
    assert hook.paths == [] and hook.continued is False


@pytest.mark.parametrize(("data", "expected"), [
    (b'{"cwd": "/w", "n": 12345678901234567890}', {"cwd": "/w", "n": 12345678901234567890}),
    (b'\xef\xbb\xbf{"cwd": "/w\xc3\xa9"}', {"cwd": "/w\u00e9"}),  # a UTF-8 BOM is skipped
    (b' {"a": [1, 2.5, null, true]}\n', {"a": [1, 2.5, None, True]}),
    (b'{"a": NaN}', None),  # not JSON (json.loads would take it)
    (b'[1, 2]', None), (b'"text"', None), (b'', None), (b'{"a": 1} {}', None),
    (b'{"a": "\xff"}', None), (b'[' * 100_000 + b']' * 100_000, None),
])
def test_the_payload_is_read_as_json_or_not_at_all(data: bytes, expected: object) -> None:
    """The hooks read stdin with storyd.core.jsonio (json's own C scanner, without json's
    import): any object back as json would give it; anything else is None (silence)."""
    from storyd.api.hooks.hookio import parse_payload

    assert parse_payload(data) == expected
