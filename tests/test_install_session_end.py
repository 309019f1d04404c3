"""`storyd install` puts each agent's session-end hook in (Claude Code's and Gemini CLI's
SessionEnd, Cursor's sessionEnd: issue 45, a session's end releases its claims) and
`storyd uninstall` takes it out; Codex and VS Code, which have no such event, get none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents_harness import home_env, run_storyd

from storyd.agents.installs import ours

# agent: (its hooks file under HOME, its session-end event or None)
FILES = {
    "claude": (".claude/settings.json", "SessionEnd"),
    "cursor": (".cursor/hooks.json", "sessionEnd"),
    "gemini": (".gemini/settings.json", "SessionEnd"),
    "codex": (".codex/hooks.json", None),
    "vscode": (".copilot/hooks/storyd.json", None),
}


def _handlers(hooks: dict[str, object], event: str) -> list[dict[str, object]]:
    groups = hooks.get(event, [])
    assert isinstance(groups, list)
    found: list[dict[str, object]] = []
    for group in groups:
        found.extend(group.get("hooks", [group]) if "command" not in group else [group])
    return found


@pytest.mark.slow
@pytest.mark.parametrize("agent", list(FILES))
def test_install_adds_session_end_and_uninstall_removes_it(tmp_path: Path, agent: str) -> None:
    env = home_env(tmp_path)
    relpath, event = FILES[agent]
    done = run_storyd(env, "install", f"--{agent}")
    assert done.returncode == 0, done.stderr
    hooks = json.loads((Path(env["HOME"]) / relpath).read_text())["hooks"]
    ended = {e: [ours(h) for h in _handlers(hooks, e)] for e in hooks}
    with_end = [e for e, subs in ended.items() if "session-end" in subs]
    assert with_end == ([event] if event else [])
    if event is not None:
        (handler,) = _handlers(hooks, event)
        flag = "" if agent == "claude" else f" --agent {agent}"
        assert str(handler["command"]).endswith(f" session-end{flag}")
        assert f"added hooks.{event}: " in done.stdout
    undone = run_storyd(env, "uninstall", f"--{agent}")
    assert undone.returncode == 0, undone.stderr
    left = Path(env["HOME"]) / relpath
    assert not left.exists() or "session-end" not in left.read_text()
