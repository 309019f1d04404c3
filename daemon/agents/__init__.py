"""Where the agents are: Claude Code hooks, the MCP server and their one-command setup.

    mcp_server      `storyd mcp`: the MCP server (the optional `mcp` extra)
    mcp_events      the daemon's events as the MCP server's ResourceUpdated
    installs        `storyd install --claude|--cursor|--vscode|--codex|--gemini`
    settings_file   an agent's JSON or TOML settings, edited and given back exactly
    skill           `storyd install --skill`: the seed skill's drop-in SKILL.md
    setup           the --claude and --skill branches of `storyd install` / `uninstall`

The hooks' answers are computed in storyd.api.hooks, under this door and the
daemon's `hook` op alike. Nothing here is imported by `storyd resume`. See docs/agents.md.
"""
