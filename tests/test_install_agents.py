"""`storyd install|uninstall --cursor|--vscode|--codex|--gemini` (and --claude's symlinks,
matchers and project files), as processes in a private HOME, on files that already hold
the user's own entries: the shapes each agent documents, and the user's file given back.

Shapes: Cursor's .cursor/hooks.json `{"version": 1, "hooks": {event: [{command}]}}` and
mcp.json `mcpServers` (https://cursor.com/docs/agent/hooks, https://cursor.com/docs/mcp);
VS Code's `.vscode/mcp.json` `servers` and hook files
(https://code.visualstudio.com/docs/copilot/customization/mcp-servers,
https://code.visualstudio.com/docs/agents/reference/hooks-reference); Codex's
`[mcp_servers.NAME]` in config.toml and hooks.json
(https://developers.openai.com/codex/mcp, https://developers.openai.com/codex/hooks);
Gemini CLI's settings.json `hooks` (timeouts in ms) and `mcpServers`
(https://geminicli.com/docs/hooks/reference, https://geminicli.com/docs/tools/mcp-server).
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from agents_harness import demo_workspace, home_env, hook_payload, run_storyd
from cli_harness import BIN, STORYD

CODEX_TOML = """# my codex setup
model = "o3"

[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-mcp"]  # keep this comment

[profiles.fast]
model = "gpt-5-mini"
"""
USER_JSON = {
    "cursor": ('.cursor/hooks.json', '{\n  "version": 1,\n  "hooks": {\n    "afterFileEdit": '
               '[{"command": "./fmt.sh"}]\n  }\n}\n'),
    "vscode": ('.config/Code/User/mcp.json', '{\n\t"servers": {\n\t\t"gh": {"type": "http", '
               '"url": "https://api.example"}\n\t},\n\t"inputs": []\n}\n'),
    "gemini": ('.gemini/settings.json', '{\n  "theme": "GitHub",\n  "hooks": {"AfterTool": '
               '[{"matcher": "write_file", "hooks": [{"type": "command", "command": "lint"}]}]}'
               '\n}\n'),
    "codex": ('.codex/config.toml', CODEX_TOML),
    "claude": ('.claude/settings.json', '{"model": "opus", "hooks": {"Stop": [{"hooks": '
               '[{"type": "command", "command": "notify-done"}]}]}}\n'),
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return home_env(tmp_path)


def storyd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = run_storyd(env, *args)
    assert done.returncode == 0, done.stderr
    return done


def _seed(home: Path, agent: str) -> tuple[Path, bytes]:
    rel, text = USER_JSON[agent]
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path, text.encode()


@pytest.mark.slow
@pytest.mark.parametrize("agent", list(USER_JSON))
def test_install_then_uninstall_gives_the_users_file_back(env: dict[str, str],
                                                          agent: str) -> None:
    home = Path(env["HOME"])
    path, before = _seed(home, agent)
    storyd(env, "install", f"--{agent}")
    assert path.read_bytes() != before
    again = storyd(env, "install", f"--{agent}")
    files = [line for line in again.stdout.splitlines() if "Codex runs no hook" not in line]
    assert all(line.endswith(": unchanged") for line in files), again.stdout
    storyd(env, "uninstall", f"--{agent}")
    assert path.read_bytes() == before  # byte for byte


def test_cursor_files(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    _seed(home, "cursor")
    storyd(env, "install", "--cursor")
    hooks = json.loads((home / ".cursor/hooks.json").read_text())
    assert hooks["version"] == 1
    exe = str(BIN / "storyd")
    assert hooks["hooks"]["afterFileEdit"] == [
        {"command": "./fmt.sh"}, {"command": f"exec {exe}-hook post-tool-use --agent cursor",
                                  "timeout": 10}]
    stops = [h["command"] for h in hooks["hooks"]["stop"]]
    assert stops == [f"exec {exe}-hook stop --agent cursor"]
    assert set(hooks["hooks"]) == {"afterFileEdit", "afterShellExecution", "sessionStart", "stop",
                                   "sessionEnd"}  # fmt: skip
    servers = json.loads((home / ".cursor/mcp.json").read_text())
    assert servers == {"mcpServers": {"storyd": {"command": exe, "args": ["mcp"]}}}
    storyd(env, "uninstall", "--cursor")
    assert not (home / ".cursor/mcp.json").exists()  # storyd created it


def test_vscode_files(env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    (project / ".vscode/mcp.json").write_text('{"servers": {"gh": {"url": "https://x"}}}')
    storyd(env, "install", "--vscode", "--project", str(project))
    servers = json.loads((project / ".vscode/mcp.json").read_text())["servers"]
    assert servers["storyd"] == {"type": "stdio", "command": "storyd", "args": ["mcp"]}
    hooks = json.loads((project / ".github/hooks/storyd.json").read_text())["hooks"]
    assert set(hooks) == {"SessionStart", "Stop", "PostToolUse"}  # VS Code's events
    assert hooks["Stop"][0]["command"].endswith("storyd-hook stop --agent vscode")


def test_codex_config_toml_keeps_the_users_tables(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    path, _ = _seed(home, "codex")
    storyd(env, "install", "--codex")
    text = path.read_text()
    data = tomllib.loads(text)  # valid TOML
    assert data["mcp_servers"]["storyd"] == {"command": str(BIN / "storyd"), "args": ["mcp"]}
    assert data["mcp_servers"]["docs"] == {"command": "npx", "args": ["-y", "docs-mcp"]}
    assert data["profiles"] == {"fast": {"model": "gpt-5-mini"}} and data["model"] == "o3"
    assert text.startswith(CODEX_TOML)  # the user's text untouched, storyd's table after
    hooks = json.loads((home / ".codex/hooks.json").read_text())["hooks"]
    launcher = BIN / "storyd-hook"
    assert hooks["Stop"][0]["hooks"][0]["command"] == f"exec {launcher} stop --agent codex"
    # the user edits their own table afterwards: uninstall keeps that, drops only storyd's
    path.write_text(text.replace('model = "gpt-5-mini"', 'model = "gpt-5"'))
    storyd(env, "uninstall", "--codex")
    after = tomllib.loads(path.read_text())
    assert "storyd" not in after["mcp_servers"]
    assert after["profiles"]["fast"]["model"] == "gpt-5"
    assert path.read_text() == CODEX_TOML.replace('model = "gpt-5-mini"', 'model = "gpt-5"')


def _doctor(env: dict[str, str], cwd: Path) -> list[str]:
    done = subprocess.run([STORYD, "doctor"], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stdout.splitlines() if line[5:].startswith("codex: ")]


@pytest.mark.slow
def test_codex_install_says_to_trust_the_hooks_and_doctor_checks_it(
        env: dict[str, str], tmp_path: Path) -> None:
    """Codex runs no hook until the user trusts it in /hooks, and records that trust in
    config.toml as `[hooks.state."<hooks.json>:<event>:<group>:<handler>"] trusted_hash`
    (https://developers.openai.com/codex/hooks, "Review and trust hooks";
    openai/codex codex-rs/hooks/src/engine/discovery.rs)."""
    home = Path(env["HOME"])
    hooks_path = home / ".codex/hooks.json"
    done = storyd(env, "install", "--codex")
    step = done.stdout.splitlines()[-1]
    assert step.startswith(f"{hooks_path}: Codex runs no hook until you trust it: start codex, "
                           "type /hooks and trust storyd's 4 new or changed hooks "
                           "(SessionStart, Stop, PostToolUse, PermissionRequest)"), step
    [shown, trust] = _doctor(env, tmp_path)
    assert shown.startswith("ok   codex:") and trust.startswith(f"warn codex: {hooks_path}: ")
    assert "trust storyd's 4 new or changed hooks" in trust
    # the user trusts three in /hooks and turns the PermissionRequest one off
    events = json.loads(hooks_path.read_text())["hooks"]
    labels = {"SessionStart": "session_start", "Stop": "stop",
              "PostToolUse": "post_tool_use", "PermissionRequest": "permission_request"}
    state = "".join(
        f'\n[hooks.state."{hooks_path}:{labels[event]}:0:0"]\n' +
        ("enabled = false\n" if event == "PermissionRequest" else
         'trusted_hash = "sha256:0123"\n')
        for event in events)  # fmt: skip
    config = home / ".codex/config.toml"
    config.write_text(config.read_text() + state)
    [_, trust] = _doctor(env, tmp_path)
    assert trust.endswith("turn on the ones you turned off in /hooks (PermissionRequest)"), trust
    assert "type /hooks and trust" not in trust
    config.write_text(config.read_text().replace("enabled = false", 'trusted_hash = "sha256:1"'))
    [_, trust] = _doctor(env, tmp_path)
    assert trust.startswith(f"ok   codex: {hooks_path}: Codex's config.toml trusts storyd's 4")
    again = storyd(env, "install", "--codex")  # all trusted: nothing left to say
    assert "Codex runs no hook" not in again.stdout


@pytest.mark.slow
def test_a_codex_project_install_asks_to_trust_the_project(env: dict[str, str],
                                                           tmp_path: Path) -> None:
    """A project's .codex/ is loaded only once Codex trusts the project."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    done = storyd(env, "install", "--codex", "--project", str(project))
    assert "trust this project when Codex asks" in done.stdout.splitlines()[-1]
    trust = _doctor(env, project)[-1]  # after the user's line and the project's
    assert trust.startswith(f"warn codex: {project}/.codex/hooks.json: ")
    assert "trust this project" in trust


def test_codex_refuses_an_invalid_toml(env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".codex/config.toml"
    path.parent.mkdir()
    path.write_text("[mcp_servers\n")
    done = subprocess.run([STORYD, "install", "--codex"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 65 and "not valid TOML" in done.stderr
    assert path.read_text() == "[mcp_servers\n"


def test_gemini_settings(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    path, _ = _seed(home, "gemini")
    storyd(env, "install", "--gemini")
    data = json.loads(path.read_text())
    assert data["theme"] == "GitHub"
    after_tool = data["hooks"]["AfterTool"]
    assert after_tool[0] == {"matcher": "write_file",
                             "hooks": [{"type": "command", "command": "lint"}]}
    mine = after_tool[1]["hooks"][0]
    assert mine["timeout"] == 10_000 and mine["name"] == "storyd-post-tool-use"  # ms
    assert data["hooks"]["AfterAgent"][0]["hooks"][0]["command"].endswith(
        "storyd-hook stop --agent gemini")
    assert data["hooks"]["Notification"][0]["hooks"][0]["command"].endswith(
        "storyd-hook notification --agent gemini")  # waiting for a tool permission
    assert data["mcpServers"]["storyd"]["args"] == ["mcp"]


def test_a_symlinked_settings_file_stays_a_symlink(env: dict[str, str],
                                                   tmp_path: Path) -> None:
    """A dotfile manager's link: the file it points to is edited, the link stays."""
    home = Path(env["HOME"])
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude-settings.json"
    target.write_text(USER_JSON["claude"][1])
    link = home / ".claude/settings.json"
    link.parent.mkdir()
    link.symlink_to(target)
    storyd(env, "install", "--claude")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "storyd-hook stop" in target.read_text()
    storyd(env, "uninstall", "--claude")
    assert link.is_symlink() and target.read_text() == USER_JSON["claude"][1]


def test_a_narrowed_matcher_is_respected(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    storyd(env, "install", "--claude")
    path = home / ".claude/settings.json"
    data = json.loads(path.read_text())
    data["hooks"]["PostToolUse"][0]["matcher"] = "Bash"
    path.write_text(json.dumps(data))
    storyd(env, "install", "--claude")
    again = json.loads(path.read_text())
    assert [g["matcher"] for g in again["hooks"]["PostToolUse"]] == ["Bash"]  # no duplicate


def test_uninstall_after_user_edits_drops_only_storyds(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    path, _ = _seed(home, "claude")
    storyd(env, "install", "--claude")
    data = json.loads(path.read_text())
    data["permissions"] = {"allow": ["Bash(ls)"]}
    path.write_text(json.dumps(data, indent=2))
    storyd(env, "uninstall", "--claude")
    assert json.loads(path.read_text()) == {
        "model": "opus", "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-done"}]}]}}


@pytest.mark.slow
def test_a_project_install_works_for_a_teammate_with_or_without_storyd(
        env: dict[str, str], tmp_path: Path) -> None:
    """The committed command, run by a shell as the agent runs it: without storyd on
    PATH it exits 0 silently; with it, it answers."""
    ws = demo_workspace(tmp_path)
    storyd(env, "install", "--claude", "--cursor", "--gemini", "--codex", "--project", str(ws))
    for shared in (".claude/settings.json", ".mcp.json", ".cursor/hooks.json",
                   ".cursor/mcp.json", ".gemini/settings.json", ".codex/hooks.json",
                   ".codex/config.toml"):
        assert str(BIN) not in (ws / shared).read_text(), shared
    hooks = json.loads((ws / ".claude/settings.json").read_text())["hooks"]
    start = hooks["SessionStart"][0]["hooks"][0]["command"]
    payload = json.dumps(hook_payload("SessionStart", ws, source="startup")).encode()
    bare = dict(env, PATH="/usr/bin:/bin")
    alone = subprocess.run(["/bin/sh", "-c", start], input=payload, env=bare, cwd=ws,
                           capture_output=True, timeout=60, check=False)
    assert (alone.returncode, alone.stdout, alone.stderr) == (0, b"", b"")
    with_it = subprocess.run(["/bin/sh", "-c", start], input=payload, env=env, cwd=ws,
                             capture_output=True, timeout=60, check=False)
    assert with_it.returncode == 0 and b"additionalContext" in with_it.stdout


@pytest.mark.slow
def test_doctor_says_why_a_hook_would_be_silent(env: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    done = subprocess.run([STORYD, "doctor"], env=env, cwd=empty, capture_output=True,
                          text=True, timeout=120, check=False)
    line = next(x for x in done.stdout.splitlines() if " hooks: " in x)
    assert line.startswith("warn hooks: a hook run in") and "no workspace at or above" in line
    (empty / ".git").mkdir()
    done = subprocess.run([STORYD, "doctor"], env=env, cwd=empty, capture_output=True,
                          text=True, timeout=120, check=False)
    line = next(x for x in done.stdout.splitlines() if " hooks: " in x)
    assert line == f"ok   hooks: a hook run in {empty} reads the workspace {empty}"
