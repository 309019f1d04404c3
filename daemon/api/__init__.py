"""The layer under every door: typed functions that return data and raise typed errors.

The command line, the hooks, the MCP server and the fleet view call these and render
their results; no door drives another door (docs/design.md)."""
