"""Every agent's hook input, read into one `Hook`, and each agent's own answer shape.

One command, `storyd hook EVENT`, serves five agents (docs/agents.md cites each one's
reference); which one sent the payload is read from the payload itself, or said by
`--agent`:

    claude  Claude Code: `cwd`, `hook_event_name`, `tool_input.file_path`,
            `stop_hook_active`, `permission_mode`, SubagentStop's `agent_type`
    codex   Codex CLI: Claude Code's shape (only `--agent codex` tells it apart)
    cursor  Cursor: `workspace_roots` instead of `cwd`, `conversation_id`, camelCase
            events (`afterFileEdit`, `afterShellExecution`, `stop`), a top-level
            `file_path`, stop's `loop_count`
    vscode  VS Code Copilot agent hooks: `hookEventName`, `sessionId`, `source: new`,
            `tool_input.filePath` (or `files`)
    gemini  Gemini CLI: its own events (`AfterAgent`, `AfterTool`, ...); its
            SessionStart is answered as Claude Code's, so it need not be told apart

Answers: Claude Code, Codex and VS Code read `hookSpecificOutput.additionalContext` (its
`hookEventName` the event's own: `PostToolUse`, Claude Code's `PostToolUseFailure`) and
`{"decision": "block", "reason"}`; Cursor reads `additional_context` and
`followup_message`; Gemini reads `hookSpecificOutput.additionalContext` (`AfterTool`) and
`{"decision": "deny", "reason"}`.
"""

from __future__ import annotations

import os

__all__ = ["AGENTS", "CONTEXT_LIMIT", "Hook", "answer", "cap", "read", "recognise"]

AGENTS = ("claude", "codex", "cursor", "vscode", "gemini")
CONTEXT_LIMIT = 10_000  # Claude Code (and the others) cut hook text longer than this
# events only Gemini CLI sends (its SessionStart looks like the others', answered alike)
_GEMINI_EVENTS = frozenset((
    "AfterAgent", "AfterTool", "BeforeAgent", "BeforeTool", "BeforeModel", "AfterModel",
    "BeforeToolSelection", "PreCompress",
))  # fmt: skip
_READ_ONLY_AGENTS = frozenset(("explore", "plan", "claude-code-guide", "statusline-setup"))
_PATH_KEYS = ("file_path", "filePath", "path", "notebook_path")


class Hook:
    """One hook call, whichever agent made it.

    agent       one of AGENTS
    folder      the folder the agent works in (`cwd`, else the first workspace root)
    session     the agent's session (conversation) id, or None
    paths       absolute paths the tool named (files written or edited)
    continued   this stop already led to one follow-up (stop_hook_active, loop_count)
    quiet       a stop that must never block: plan mode, a read-only subagent, an
                aborted turn
    name        the agent's own name of the event (`SubagentStop`, `Notification`), or None
    source      why a session started (`startup`, `resume`, `clear`, `compact`), or None
    transcript  the session's transcript file (`transcript_path`), or None
    """

    __slots__ = ("agent", "continued", "folder", "name", "paths", "quiet", "session", "source",
                 "transcript")

    def __init__(self, agent: str, folder: str | None, session: str | None,
                 paths: list[str], continued: bool, quiet: bool) -> None:  # fmt: skip
        self.agent = agent
        self.folder = folder
        self.session = session
        self.paths = paths
        self.continued = continued
        self.quiet = quiet
        self.name: str | None = None
        self.source: str | None = None
        self.transcript: str | None = None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value and "\0" not in value else None


def recognise(payload: dict[str, object]) -> str:
    """Which agent sent this payload (Codex cannot be told from Claude Code: `claude`)."""
    if "workspace_roots" in payload or "conversation_id" in payload or "cursor_version" in payload:
        return "cursor"
    if "hookEventName" in payload or "sessionId" in payload:
        return "vscode"
    if payload.get("hook_event_name") in _GEMINI_EVENTS:
        return "gemini"
    return "claude"


def _folder(payload: dict[str, object]) -> str | None:
    cwd = _text(payload.get("cwd"))
    if cwd is not None:
        return cwd
    roots = payload.get("workspace_roots")
    if isinstance(roots, list):
        return next((r for r in map(_text, roots) if r is not None), None)
    return None


def _paths(payload: dict[str, object], folder: str | None) -> list[str]:
    """Every file path the tool named, made absolute against the folder."""
    found: list[str] = []
    for where in (payload, payload.get("tool_input")):
        if isinstance(where, str):  # Cursor's MCP hooks send tool_input as a JSON string
            continue
        if not isinstance(where, dict):
            continue
        found.extend(p for k in _PATH_KEYS if (p := _text(where.get(k))) is not None)
        files = where.get("files")
        if isinstance(files, list):
            found.extend(p for p in map(_text, files) if p is not None)
    if folder is not None:
        found = [os.path.join(folder, p) for p in found]
    return [p for p in dict.fromkeys(found) if os.path.isabs(p)]


def _quiet(payload: dict[str, object]) -> bool:
    """A stop never held: plan mode, a read-only subagent, a turn the user aborted
    (Cursor's `status`)."""
    if payload.get("permission_mode") == "plan" or payload.get("status") in ("aborted", "error"):
        return True
    kind = payload.get("agent_type") or payload.get("subagent_type")
    return isinstance(kind, str) and kind.lower() in _READ_ONLY_AGENTS


def read(payload: dict[str, object], agent: str | None = None) -> Hook:
    """The payload as a Hook; `agent` (from --agent) overrides the recognition."""
    who = agent or recognise(payload)
    folder = _folder(payload)
    session = next(
        (s for k in ("session_id", "sessionId", "conversation_id")
         if (s := _text(payload.get(k))) is not None), None,
    )  # fmt: skip
    loops = payload.get("loop_count")
    continued = payload.get("stop_hook_active") is True or (
        isinstance(loops, int) and not isinstance(loops, bool) and loops > 0
    )
    hook = Hook(who, folder, session, _paths(payload, folder), continued, _quiet(payload))
    hook.name = _text(payload.get("hook_event_name")) or _text(payload.get("hookEventName"))
    hook.source = _text(payload.get("source"))
    hook.transcript = _text(payload.get("transcript_path"))
    return hook


def cap(text: str) -> str:
    """At most CONTEXT_LIMIT characters (the agents cut longer hook text)."""
    return text if len(text) <= CONTEXT_LIMIT else text[: CONTEXT_LIMIT - 3] + "..."


# after a tool, the answer repeats the event's own name (Claude Code's after a failed tool)
_AFTER_TOOL = frozenset(("PostToolUse", "PostToolUseFailure"))


def answer(agent: str, event: str, text: str, name: str | None = None) -> dict[str, object]:
    """The JSON object `agent` reads for `event` (session-start, stop, post-tool-use);
    `name` is the agent's own name of the event (Hook.name), which a post-tool-use
    answer repeats (`PostToolUseFailure` after a tool that failed)."""
    text = cap(text)
    if event == "stop":
        if agent == "cursor":
            return {"followup_message": text}
        return {"decision": "deny" if agent == "gemini" else "block", "reason": text}
    if agent == "cursor":
        return {"additional_context": text}
    if event == "session-start":
        own = "SessionStart"
    elif agent == "gemini":
        own = "AfterTool"
    else:
        own = name if name in _AFTER_TOOL else "PostToolUse"
    return {"hookSpecificOutput": {"hookEventName": own, "additionalContext": text}}
