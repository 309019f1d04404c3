"""`storyd install --claude` / `storyd uninstall --claude`: merge storyd's hooks and MCP
server into Claude Code's settings, and take out exactly what was put in.

Files: with a project, `<DIR>/.claude/settings.json` (hooks) and `<DIR>/.mcp.json`
(the server); without, the user's `~/.claude/settings.json` and `~/.claude.json`
(`mcpServers`, the user scope). Existing entries and their key order stay as they are,
the file's indentation is kept, a second install changes nothing, and a handler is ours
when its command runs a `storyd` executable's `hook <event>`.
"""

from __future__ import annotations

import os
import re
import shlex

from storyd.core.errors import DataError, StorydError

__all__ = ["Change", "Target", "hook_entries", "install", "installed", "targets", "uninstall"]

SERVER = "storyd"
# (event, matcher, hook subcommand, timeout in seconds)
HOOKS = (
    ("SessionStart", "startup|resume|clear|compact", "session-start", 10),
    ("Stop", None, "stop", 30),
    ("SubagentStop", None, "stop", 30),
    ("PostToolUse", "Write|Edit|MultiEdit", "post-tool-use", 10),
)
_OURS = re.compile(r"^(?:'[^']*storyd'|\S*storyd) hook (?:session-start|stop|post-tool-use)$")


class Change:
    """One line of what an install or uninstall did (or would do) to one file."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


class Target:
    """A settings file and its parsed content (None: absent), with the indent it uses."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, object] | None = None
        self.indent = 2
        self.original: str | None = None

    def load(self) -> Target:
        import json

        try:
            with open(self.path, encoding="utf-8") as handle:
                self.original = handle.read()
        except FileNotFoundError:
            return self
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"{self.path}: cannot read: {exc}") from None
        if not self.original.strip():
            self.data = {}
            return self
        try:
            value = json.loads(self.original)
        except json.JSONDecodeError as exc:
            msg = f"{self.path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            raise DataError(msg) from None
        if not isinstance(value, dict):
            raise DataError(f"{self.path}: expected a JSON object at the top")
        self.data = value
        found = re.search(r"\n([ \t]+)\S", self.original)
        if found:
            self.indent = len(found.group(1).expandtabs(4)) or 2
        return self

    def text(self) -> str:
        import json

        return json.dumps(self.data, indent=self.indent, ensure_ascii=False) + "\n"

    def save(self) -> None:
        from storyd.api.reconcile.atomic import replace

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        replace(self.path, self.text().encode("utf-8"), hooked=False)


def targets(project: str | None) -> tuple[str, str]:
    """(the hooks' settings file, the MCP servers' file) for a project or the user."""
    if project is not None:
        base = os.path.realpath(project)
        return os.path.join(base, ".claude", "settings.json"), os.path.join(base, ".mcp.json")
    home = os.path.expanduser("~")
    return os.path.join(home, ".claude", "settings.json"), os.path.join(home, ".claude.json")


def _command(storyd: str, sub: str) -> str:
    return f"{shlex.quote(storyd)} hook {sub}"


def hook_entries(storyd: str) -> list[tuple[str, str | None, dict[str, object]]]:
    """(event, matcher, handler) for each hook storyd installs."""
    return [
        (event, matcher, {"type": "command", "command": _command(storyd, sub), "timeout": t})
        for event, matcher, sub, t in HOOKS
    ]


def _ours(handler: object) -> bool:
    return isinstance(handler, dict) and bool(_OURS.match(str(handler.get("command", ""))))


def _merge_hooks(target: Target, storyd: str) -> list[str]:
    data = target.data if target.data is not None else {}
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise DataError(f"{target.path}: \"hooks\" is not an object; fix it by hand")
    done: list[str] = []
    for event, matcher, handler in hook_entries(storyd):
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise DataError(f"{target.path}: hooks.{event} is not an array; fix it by hand")
        sub = str(handler["command"]).rsplit(" ", 1)[1]
        mine = [
            (g, h)
            for g in groups
            if isinstance(g, dict) and g.get("matcher") == matcher
            for h in g.get("hooks") or []
            if _ours(h) and str(h["command"]).endswith(f" hook {sub}")
        ]
        if mine:
            if all(h == handler for _, h in mine):
                continue
            for _, h in mine:
                h.clear()
                h.update(handler)
            done.append(f"updated hooks.{event}: {handler['command']}")
            continue
        group: dict[str, object] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [handler]
        groups.append(group)
        where = f"hooks.{event}" + (f" [{matcher}]" if matcher else "")
        done.append(f"added {where}: {handler['command']}")
    target.data = data
    return done


def _server(storyd: str) -> dict[str, object]:
    return {"type": "stdio", "command": storyd, "args": ["mcp"]}


def _merge_server(target: Target, storyd: str) -> list[str]:
    data = target.data if target.data is not None else {}
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise DataError(f"{target.path}: \"mcpServers\" is not an object; fix it by hand")
    wanted = _server(storyd)
    target.data = data
    if servers.get(SERVER) == wanted:
        return []
    verb = "updated" if SERVER in servers else "added"
    servers[SERVER] = wanted
    return [f"{verb} mcpServers.{SERVER}: {storyd} mcp"]


def _finish(target: Target, changes: list[str], dry_run: bool) -> list[Change]:
    if not changes:
        return [Change(target.path, "unchanged")]
    prefix = "would: " if dry_run else ""
    if not dry_run:
        if target.data == {} and target.original is not None:
            os.unlink(target.path)
            changes.append("removed the file (nothing else was in it)")
        elif target.data != {}:
            try:
                target.save()
            except OSError as exc:
                raise StorydError(f"cannot write {target.path}: {exc.strerror}") from None
    return [Change(target.path, prefix + c) for c in changes]


def install(storyd: str, project: str | None, dry_run: bool) -> list[Change]:
    """Merge the hooks and the MCP server in; what changed, file by file."""
    settings, servers = targets(project)
    hooks_file, server_file = Target(settings).load(), Target(servers).load()
    hook_changes = _merge_hooks(hooks_file, storyd)
    server_changes = _merge_server(server_file, storyd)
    return _finish(hooks_file, hook_changes, dry_run) + _finish(
        server_file, server_changes, dry_run
    )


def _drop_hooks(target: Target) -> list[str]:
    data = target.data
    hooks = data.get("hooks") if data else None
    if not isinstance(hooks, dict):
        return []
    done = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        for group in list(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list):
                continue
            for handler in [h for h in handlers if _ours(h)]:
                handlers.remove(handler)
                done.append(f"removed hooks.{event}: {handler['command']}")
            if not handlers:
                groups.remove(group)
        if not groups:
            del hooks[event]
    if not hooks and done:
        del data["hooks"]  # type: ignore[union-attr]
    return done


def _drop_server(target: Target) -> list[str]:
    servers = target.data.get("mcpServers") if target.data else None
    if not isinstance(servers, dict):
        return []
    entry = servers.get(SERVER)
    if not isinstance(entry, dict) or entry.get("args") != ["mcp"]:
        return []  # someone else's server named storyd: not ours to remove
    if not re.search(r"storyd$", str(entry.get("command", ""))):
        return []
    del servers[SERVER]
    if not servers:
        del target.data["mcpServers"]  # type: ignore[union-attr]
    return [f"removed mcpServers.{SERVER}"]


def uninstall(project: str | None, dry_run: bool) -> list[Change]:
    """Take out what install put in (storyd's handlers and server entry), nothing else."""
    settings, servers = targets(project)
    hooks_file, server_file = Target(settings).load(), Target(servers).load()
    return _finish(hooks_file, _drop_hooks(hooks_file), dry_run) + _finish(
        server_file, _drop_server(server_file), dry_run
    )


def installed(project: str | None) -> tuple[str, list[str], str | None]:
    """(the settings file, the storyd hook commands it holds, the MCP server's command or
    None) for a project or the user; empty when a file is absent or unreadable."""
    settings, servers = targets(project)
    commands: list[str] = []
    server = None
    try:
        hooks_file, server_file = Target(settings).load(), Target(servers).load()
    except DataError:
        return settings, commands, server
    hooks = (hooks_file.data or {}).get("hooks")
    if isinstance(hooks, dict):
        for groups in hooks.values():
            for group in groups if isinstance(groups, list) else []:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                for handler in handlers if isinstance(handlers, list) else []:
                    if _ours(handler):
                        commands.append(str(handler["command"]))
    entries = (server_file.data or {}).get("mcpServers")
    entry = entries.get(SERVER) if isinstance(entries, dict) else None
    if isinstance(entry, dict) and entry.get("args") == ["mcp"]:
        server = str(entry.get("command"))
    return settings, commands, server
