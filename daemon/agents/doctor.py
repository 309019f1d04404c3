"""The agents' lines of `storyd doctor`: what each agent has installed, and whether a hook
run in this folder would answer or stay silent, and why.

    hooks    this folder: the workspace a hook would read, or why it would say nothing
             (a folder owned by another user, outside `[hooks] roots`, no workspace
             marker, a broken configuration)
    claude, cursor, vscode, codex, gemini
             the user's files and this folder's project files: storyd's hooks and MCP
             server, whether the storyd they run is there (a project's guarded PATH
             name: whether `storyd` is on PATH), and the `mcp` extra; for Codex also
             whether its config.toml shows the hooks (and a project) trusted
             (storyd.agents.codex_trust): Codex skips an untrusted hook without a word
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from storyd.config import Config

__all__ = ["check_agents"]

Line = tuple[str, str, str]


def _hooks_here(cfg: Config | None, here: str) -> Line:
    from storyd.api.hooks import hookio

    if cfg is None:
        return ("warn", "hooks", "the configuration is broken: every hook stays silent "
                "until it loads (storyd config check)")  # fmt: skip
    found, why = hookio.explain(here, hookio.Trust(cfg))
    if found is None:
        return ("warn", "hooks", f"a hook run in {here} would stay silent: {why}")
    return ("ok", "hooks", f"a hook run in {here} reads the workspace {found}")


def _word(command: str) -> str | None:
    """The program a hook command runs as written: the launcher (`storyd-hook`), else
    the storyd before `hook`, else the first word."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    launchers = [w for w in words if os.path.basename(w) == "storyd-hook"]
    if launchers:
        return launchers[-1]
    index = words.index("hook") if "hook" in words else 0
    return (words[index - 1] if index else words[0]) if words else None


def _program(command: str) -> str | None:
    """The program a hook command runs: its path, or the PATH name's resolution."""
    import shutil

    program = _word(command)
    if program is None or os.path.isabs(program):
        return program
    return shutil.which(program)


def _agent(agent: str, project: str | None, extra: bool) -> Line | None:
    from storyd.agents.installs import installed
    from storyd.core.errors import StorydError

    try:
        path, commands, server = installed(agent, project)
    except StorydError as exc:
        return ("warn", agent, str(exc))
    if not commands and server is None:
        return None if project is not None else ("ok", agent, f"{path}: not set up")
    programs = {c: _program(c) for c in commands}
    if server is not None:
        programs[server] = server if os.path.isabs(server) else _program(server)
    gone = sorted({_word(c) or c for c, p in programs.items()
                   if p is None or not os.access(p, os.X_OK)})  # fmt: skip
    if gone:
        return ("warn", agent, f"{path}: storyd's entries run {', '.join(gone)}, which is not "
                f"there; run storyd install --{agent} again (or put storyd on PATH)")  # fmt: skip
    if server is not None and not extra:
        return ("warn", agent, "the MCP server is configured but the mcp extra is not "
                "installed: pip install 'storyd[mcp]'")  # fmt: skip
    where = "with the MCP server" if server else "without the MCP server"
    return ("ok", agent, f"{path}: {len(commands)} hooks {where}")


def _codex_trust(project: str | None) -> Line | None:
    """Whether Codex will run storyd's hooks here, as its config.toml shows."""
    from storyd.agents.codex_trust import read, step
    from storyd.core.errors import StorydError

    try:
        found = read(project)
    except StorydError as exc:
        return ("warn", "codex", str(exc))
    if not found.total:
        return None
    if found.runs:
        return ("ok", "codex", f"{found.hooks_path}: Codex's config.toml trusts storyd's "
                f"{found.total} hooks (one changed since shows in /hooks as modified)")  # fmt: skip
    return ("warn", "codex", f"{found.hooks_path}: {step(found)}")


def check_agents(cfg: Config | None, here: str) -> list[Line]:
    """(level, topic, text) lines: ok or warn."""
    import importlib.util

    from storyd.agents.installs import AGENTS

    extra = importlib.util.find_spec("mcp") is not None
    lines = [_hooks_here(cfg, here)]
    at_home = os.path.realpath(here) == os.path.realpath(os.path.expanduser("~"))
    for agent in AGENTS:
        for project in (None,) if at_home else (None, here):
            line = _agent(agent, project, extra)
            if line is not None:
                lines.append(line)
            trust = _codex_trust(project) if agent == "codex" and line is not None else None
            if trust is not None:
                lines.append(trust)
    return lines
