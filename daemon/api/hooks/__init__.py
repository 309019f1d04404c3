"""Every agent's hooks, computed below the doors that run them (docs/agents.md).

    answer          THE hook: (event, payload) -> the agent's answer and exit code
    payload         every agent's hook input read into one Hook; each agent's answer
    hookio          read a hook's JSON from stdin, find the workspace of a path
    source          the one adapter over the daemon client, answers and the commands
    session_start   session-start: the units in flight, as context
    stop            stop: hold a stop while a state file lags behind git
    post_tool_use   post-tool-use: a state file the agent just broke
    notification    notification: the agent waits for the user (recorded, not answered)
    selfpath        the absolute storyd a printed fix names

`storyd hook` (storyd.cli) and the daemon's `hook` op (storyd.server) both call
`answer.answer`; they differ only in where a workspace's units come from (the daemon's
`list` or a direct scan, or the daemon's own cache).
"""
