"""Where the agents are: Claude Code hooks, the MCP server and their one-command setup.

    hookio          read a hook's JSON from stdin, find the workspace of a path, answer
    source          the one adapter over the daemon client, answers and the commands
    session_start   `storyd hook session-start`: the units in flight, as context
    stop            `storyd hook stop`: block a stop while a state file lags behind git
    post_tool_use   `storyd hook post-tool-use`: a state file the agent just broke
    mcp_server      `storyd mcp`: the MCP server (the optional `mcp` extra)
    mcp_events      the daemon's events as the MCP server's ResourceUpdated
    payload         every agent's hook input read into one Hook; each agent's answer
    selfpath        the absolute storyd a printed fix names
    installs        `storyd install --claude|--cursor|--vscode|--codex|--gemini`
    settings_file   an agent's JSON or TOML settings, edited and given back exactly
    skill           `storyd install --skill`: the seed skill's drop-in SKILL.md
    setup           the --claude and --skill branches of `storyd install` / `uninstall`

Nothing here is imported by `storyd resume`. See docs/agents.md.
"""
