"""`storyd install|uninstall --claude|--cursor|--vscode|--codex|--gemini`: storyd's hooks
and MCP server in each agent's own files, and exactly those taken out again.

    agent   hooks (project DIR / user)                     MCP server
    claude  .claude/settings.json / ~/.claude/settings.json .mcp.json / ~/.claude.json
    cursor  .cursor/hooks.json (version 1) / ~/.cursor/... .cursor/mcp.json / ~/.cursor/mcp.json
    vscode  .github/hooks/storyd.json / ~/.copilot/hooks/   .vscode/mcp.json (`servers`) /
                                                            ~/.config/Code/User/mcp.json
    codex   .codex/hooks.json / ~/.codex/hooks.json         .codex/config.toml / ~/.codex/
                                                            config.toml `[mcp_servers.storyd]`
    gemini  .gemini/settings.json / ~/.gemini/settings.json (hooks and `mcpServers`)

Each agent's session end (Claude Code's and Gemini's SessionEnd, Cursor's sessionEnd;
Codex and VS Code have none) runs `session-end`, which releases the session's claims.
A user install names this machine's storyd by absolute path. A project install writes
files meant to be committed, so it names `storyd` from PATH, guarded: a teammate without
storyd gets exit 0 and no output from every hook. A handler is storyd's when its
command runs a `storyd` executable's `hook <event>`; one the user moved to a narrower
matcher is updated where it is, never duplicated. docs/agents.md cites each agent's
reference for these shapes.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable

from storyd.agents import guarded
from storyd.agents.settings_file import SettingsFile, TomlFile
from storyd.core.errors import DataError

__all__ = ["AGENTS", "command", "installed", "ours", "plan"]

SERVER = "storyd"
GUARD = "command -v storyd-hook >/dev/null 2>&1 || exit 0; "
LAUNCHER = "storyd-hook"  # bin/storyd-hook: the daemon answers without a Python start
SUBS = ("session-start", "stop", "post-tool-use", "notification", "session-end")
_WRITERS = "Bash|Write|Edit|MultiEdit|NotebookEdit"


class Spec:
    """One agent: its files, how its hooks are laid out, its events."""

    def __init__(self, name: str, hooks: tuple[str, str], server: tuple[str, str],
                 layout: str, events: tuple[tuple[str, str | None, str, int], ...],
                 server_key: str = "mcpServers", stdio: bool = False) -> None:  # fmt: skip
        self.name = name
        self.hooks = hooks  # (project-relative, home-relative)
        self.server = server
        self.layout = layout  # grouped (Claude's), flat (Cursor's, VS Code's), gemini
        self.events = events  # (event, matcher, subcommand, timeout in seconds)
        self.server_key = server_key  # mcpServers, servers, or toml
        self.stdio = stdio  # the server entry says "type": "stdio"


AGENTS = {
    "claude": Spec("claude", (".claude/settings.json", ".claude/settings.json"),
                   (".mcp.json", ".claude.json"), "grouped", (
        ("SessionStart", None, "session-start", 10), ("Stop", None, "stop", 30),
        ("SubagentStop", None, "stop", 30), ("PostToolUse", _WRITERS, "post-tool-use", 10),
        ("PostToolUseFailure", _WRITERS, "post-tool-use", 10),  # a tool that exited non-zero
        ("Notification", None, "notification", 10),
        ("SessionEnd", None, "session-end", 10),  # releases the session's claims
    ), stdio=True),
    "cursor": Spec("cursor", (".cursor/hooks.json", ".cursor/hooks.json"),
                   (".cursor/mcp.json", ".cursor/mcp.json"), "flat", (
        ("sessionStart", None, "session-start", 10), ("stop", None, "stop", 30),
        ("afterFileEdit", None, "post-tool-use", 10),
        ("afterShellExecution", None, "post-tool-use", 10),
        ("sessionEnd", None, "session-end", 10),
    )),
    "vscode": Spec("vscode", (".github/hooks/storyd.json", ".copilot/hooks/storyd.json"),
                   (".vscode/mcp.json", ".config/Code/User/mcp.json"), "flat", (
        ("SessionStart", None, "session-start", 10), ("Stop", None, "stop", 30),
        ("PostToolUse", None, "post-tool-use", 10),
    ), server_key="servers", stdio=True),
    "codex": Spec("codex", (".codex/hooks.json", ".codex/hooks.json"),
                  (".codex/config.toml", ".codex/config.toml"), "grouped", (
        ("SessionStart", None, "session-start", 10), ("Stop", None, "stop", 30),
        ("PostToolUse", None, "post-tool-use", 10),
        ("PermissionRequest", None, "notification", 10),  # waits for the user's approval
    ), server_key="toml"),
    "gemini": Spec("gemini", (".gemini/settings.json", ".gemini/settings.json"),
                   (".gemini/settings.json", ".gemini/settings.json"), "gemini", (
        ("SessionStart", None, "session-start", 10), ("AfterAgent", None, "stop", 30),
        ("AfterTool", "run_shell_command|write_file|replace", "post-tool-use", 10),
        ("Notification", None, "notification", 10), ("SessionEnd", None, "session-end", 10),
    )),
}  # fmt: skip


def paths(spec: Spec, project: str | None) -> tuple[str, str]:
    """(the hooks file, the MCP server's file) of a project or the user."""
    if project is not None:
        base = os.path.realpath(project)
        return os.path.join(base, spec.hooks[0]), os.path.join(base, spec.server[0])
    home = os.path.expanduser("~")
    if spec.name == "codex" and os.environ.get("CODEX_HOME"):
        codex = os.environ["CODEX_HOME"]
        return os.path.join(codex, "hooks.json"), os.path.join(codex, "config.toml")
    if spec.name == "vscode" and sys.platform == "darwin":  # VS Code's user folder on macOS
        code = os.path.join(home, "Library", "Application Support", "Code", "User")
        return os.path.join(home, spec.hooks[1]), os.path.join(code, "mcp.json")
    return os.path.join(home, spec.hooks[1]), os.path.join(home, spec.server[1])


def command(storyd: str | None, sub: str, agent: str) -> str:
    """The hook command: the launcher beside `storyd` by absolute path (user; `storyd
    hook` itself where no launcher is installed), or guarded from PATH (None: project).
    Claude Code's carry no --agent: Cursor and VS Code run them too. Each is `exec`ed:
    the agents run it with `sh -c`, and dash (Debian's sh) forks for a command that
    bash would exec (0.5 ms of a hook, issue 31)."""
    flag = "" if agent == "claude" else f" --agent {agent}"
    if storyd is None:
        return f"{GUARD}exec {LAUNCHER} {sub}{flag}"
    launcher = os.path.join(os.path.dirname(storyd), LAUNCHER)
    if os.path.isfile(launcher) and os.access(launcher, os.X_OK):
        return f"exec {shlex.quote(launcher)} {sub}{flag}"
    return f"exec {shlex.quote(storyd)} hook {sub}{flag}"


def ours(handler: object) -> str | None:
    """The subcommand when this handler runs storyd's hook (`storyd-hook SUB`, or
    `storyd hook SUB` as written before the launcher), else None."""
    text = handler.get("command") if isinstance(handler, dict) else None
    if not isinstance(text, str):
        return None
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    for index in range(len(words) - 1):
        name = os.path.basename(words[index])
        if name == LAUNCHER:
            at = index + 1
        elif name == "storyd" and words[index + 1] == "hook":
            at = index + 2
        else:
            continue
        rest = words[at + 1:]
        if at < len(words) and words[at] in SUBS and (
            not rest or (len(rest) == 2 and rest[0] == "--agent")
        ):
            return words[at]
    return None


def _handler(spec: Spec, storyd: str | None, sub: str, timeout: int) -> dict[str, object]:
    run = command(storyd, sub, spec.name)
    if spec.layout == "gemini":
        return {"name": f"storyd-{sub}", "type": "command", "command": run,
                "timeout": timeout * 1000}  # fmt: skip
    if spec.name == "cursor":
        return {"command": run, "timeout": timeout}
    return {"type": "command", "command": run, "timeout": timeout}


def _lists(spec: Spec, groups: list[object]) -> list[list[object]]:
    """The handler lists of one event: each group's (grouped) or the event's own (flat)."""
    if spec.layout == "flat":
        return [groups]
    return [g["hooks"] for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)]


def _merge_hooks(spec: Spec, file: SettingsFile, storyd: str | None) -> list[str]:
    hooks = file.table("hooks")
    if spec.name == "cursor":
        assert file.data is not None
        file.data.setdefault("version", 1)
    done: list[str] = []
    for event, matcher, sub, timeout in spec.events:
        handler = _handler(spec, storyd, sub, timeout)
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise DataError(f"{file.path}: hooks.{event} is not an array; fix it by hand")
        mine = [h for lst in _lists(spec, groups) for h in lst
                if ours(h) == sub and isinstance(h, dict)]
        if mine:
            if any(h != handler for h in mine):
                for h in mine:
                    h.clear()
                    h.update(handler)
                done.append(f"updated hooks.{event}: {handler['command']}")
            continue
        if spec.layout == "flat":
            groups.append(handler)
        else:
            group: dict[str, object] = {} if matcher is None else {"matcher": matcher}
            group["hooks"] = [handler]
            groups.append(group)
        where = f"hooks.{event}" + (f" [{matcher}]" if matcher else "")
        done.append(f"added {where}: {handler['command']}")
    return done


def _drop_hooks(spec: Spec, file: SettingsFile) -> list[str]:
    hooks = (file.data or {}).get("hooks")
    if not isinstance(hooks, dict):
        return []
    done = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        for lst in _lists(spec, groups):
            for handler in [h for h in lst if ours(h)]:
                lst.remove(handler)
                done.append(f"removed hooks.{event}: {handler['command']}")  # type: ignore[index]
        if spec.layout != "flat":
            groups[:] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
        if not groups:
            del hooks[event]
    if not hooks and done:
        del file.data["hooks"]  # type: ignore[union-attr]
        if spec.name == "cursor" and file.data == {"version": 1}:
            file.data.clear()
    return done


def _entry(spec: Spec, storyd: str | None) -> dict[str, object]:
    entry: dict[str, object] = {"type": "stdio"} if spec.stdio else {}
    entry.update(command=storyd or "storyd", args=["mcp"])
    return entry


def _our_server(entry: object) -> bool:
    return (isinstance(entry, dict) and entry.get("args") == ["mcp"]
            and os.path.basename(str(entry.get("command", ""))) == "storyd")  # fmt: skip


def _merge_server(spec: Spec, file: SettingsFile | TomlFile, storyd: str | None) -> list[str]:
    wanted = _entry(spec, storyd)
    if isinstance(file, TomlFile):
        old = file.server(SERVER)
        if old == {"command": wanted["command"], "args": ["mcp"]}:
            return []
        if old is not None and not _our_server(old):
            return [f"left mcp_servers.{SERVER} alone: it is not storyd's"]
        file.set_server(SERVER, str(wanted["command"]), ["mcp"])
        return [f"{'updated' if old else 'added'} mcp_servers.{SERVER}: {wanted['command']} mcp"]
    servers = file.table(spec.server_key)
    old = servers.get(SERVER)
    if old == wanted:
        return []
    if old is not None and not _our_server(old):
        return [f"left {spec.server_key}.{SERVER} alone: it is not storyd's"]
    servers[SERVER] = wanted
    verb = "updated" if old is not None else "added"
    return [f"{verb} {spec.server_key}.{SERVER}: {wanted['command']} mcp"]


def _drop_server(spec: Spec, file: SettingsFile | TomlFile) -> list[str]:
    if isinstance(file, TomlFile):
        if not _our_server(file.server(SERVER)) or not file.drop_server(SERVER):
            return []
        return [f"removed mcp_servers.{SERVER}"]
    servers = (file.data or {}).get(spec.server_key)
    if not isinstance(servers, dict) or not _our_server(servers.get(SERVER)):
        return []  # absent, or someone else's server named storyd
    del servers[SERVER]
    if not servers:
        del file.data[spec.server_key]  # type: ignore[union-attr]
    return [f"removed {spec.server_key}.{SERVER}"]


def _files(spec: Spec, project: str | None) -> list[SettingsFile | TomlFile]:
    """The agent's files (one when hooks and server share it), each read and parsed."""
    hooks_path, server_path = paths(spec, project)
    hooks = SettingsFile(hooks_path, project).load()
    if server_path == hooks_path:
        return [hooks]
    kind = TomlFile if spec.server_key == "toml" else SettingsFile
    return [hooks, kind(server_path, project).load()]


def _empty(file: SettingsFile | TomlFile) -> bool:
    return not file.text().strip() if isinstance(file, TomlFile) else not file.data


Changer = Callable[[SettingsFile | TomlFile], list[str]]


def _changer(spec: Spec, index: int, count: int, storyd: str | None,
             installing: bool) -> Changer:  # fmt: skip
    """What install (or uninstall) does to the agent's `index`-th of `count` files."""

    def change(file: SettingsFile | TomlFile) -> list[str]:
        changes: list[str] = []
        if index == 0:
            assert isinstance(file, SettingsFile)
            changes += _merge_hooks(spec, file, storyd) if installing else _drop_hooks(spec, file)
        if index == count - 1:
            changes += _merge_server(spec, file, storyd) if installing else _drop_server(spec, file)
        return changes

    return change


def _computer(file: SettingsFile | TomlFile, change: Changer,
              installing: bool) -> guarded.Compute[guarded.Outcome]:  # fmt: skip
    """The file's edit as a function of its bytes (so it can be made again from a writer's)."""

    def compute(raw: bytes | None) -> tuple[bytes | None, guarded.Outcome]:
        file.parse(raw)
        exact, before = (False, None) if installing else file.recall()
        changes = change(file)
        if not changes or all(c.startswith("left ") for c in changes):
            return raw, guarded.Outcome(changes or ["unchanged"], changed=False)
        if exact:  # as storyd left it: the text before the first install, byte for byte
            what = "gave back the file as it was" if before is not None else "removed the file"
            data = None if before is None else before.encode("utf-8")
            return data, guarded.Outcome(changes, done=(what,), after=file.forget)
        if _empty(file):
            done = ("removed the file (nothing else was in it)",) if raw is not None else ()
            return None, guarded.Outcome(changes, done=done, after=file.forget)
        text = file.text()
        after = functools.partial(file.remember, text) if installing else None
        return text.encode("utf-8"), guarded.Outcome(changes, after=after)

    return compute


def plan(agent: str, storyd: str | None, project: str | None,
         installing: bool) -> list[guarded.Planned]:  # fmt: skip
    """The install (`storyd` None: a project install's PATH name) or uninstall of one
    agent, file by file, computed and checked; nothing written yet."""
    spec = AGENTS[agent]
    files = _files(spec, project)
    return [
        guarded.Planned(file.path, file.real, file.raw,
                        _computer(file, _changer(spec, i, len(files), storyd, installing),
                                  installing))
        for i, file in enumerate(files)
    ]  # fmt: skip


def installed(agent: str, project: str | None) -> tuple[str, list[str], str | None]:
    """(the hooks file, storyd's hook commands in it, the MCP server's command or None);
    empty when a file is absent or unreadable."""
    spec = AGENTS[agent]
    hooks_path = paths(spec, project)[0]
    try:
        files = _files(spec, project)
    except DataError:
        return hooks_path, [], None
    commands: list[str] = []
    hooks = (files[0].data or {}).get("hooks") if isinstance(files[0], SettingsFile) else None
    for groups in hooks.values() if isinstance(hooks, dict) else ():
        for lst in _lists(spec, groups) if isinstance(groups, list) else ():
            commands += [str(h["command"]) for h in lst if ours(h)]  # type: ignore[index]
    last = files[-1]
    if isinstance(last, TomlFile):
        entry = last.server(SERVER)
    else:
        table = (last.data or {}).get(spec.server_key)
        entry = table.get(SERVER) if isinstance(table, dict) else None
    server = str(entry["command"]) if _our_server(entry) else None  # type: ignore[index]
    return hooks_path, commands, server
