"""`storyd install --claude` / `uninstall --claude` and `install --skill`, as processes in
a private HOME: merging into real settings files, idempotence, dry runs, and taking out
only what was put in; the skill's command answers as the seed skill does."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from agents_harness import AgentsEnv, demo_workspace, home_env, run_storyd
from cli_harness import BIN, STORYD, run_reference

EXISTING = """{
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "./lint.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-done"}]}]
    },
    "model": "opus",
    "env": {"NAME": "vålue"}
}
"""
MCP_EXISTING = '{"mcpServers": {"other": {"command": "other-server", "args": []}}}\n'


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return home_env(tmp_path)


storyd = run_storyd


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".claude").mkdir(parents=True)
    (folder / ".claude" / "settings.json").write_text(EXISTING, encoding="utf-8")
    (folder / ".mcp.json").write_text(MCP_EXISTING, encoding="utf-8")
    return folder


def _handlers(settings: dict[str, object], event: str) -> list[tuple[object, str]]:
    groups = settings["hooks"][event]  # type: ignore[index]
    return [(g.get("matcher"), h["command"]) for g in groups for h in g["hooks"]]


def test_install_merges_and_keeps_everything(env: dict[str, str], project: Path) -> None:
    done = storyd(env, "install", "--claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    settings_path = project / ".claude" / "settings.json"
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    original = json.loads(EXISTING)
    assert list(settings) == list(original)  # key order kept, nothing added at the top
    assert list(settings["hooks"]) == [
        "PostToolUse", "Stop", "SessionStart", "SubagentStop", "PostToolUseFailure",
        "Notification", "SessionEnd"]
    assert settings["permissions"] == original["permissions"]
    assert settings["env"] == {"NAME": "vålue"}
    assert '"vålue"' in settings_path.read_text(encoding="utf-8")  # not \u-escaped
    assert settings_path.read_text().splitlines()[1].startswith('    "permissions"')  # indent 4
    # a project's files are committed: no path of this machine, a guarded PATH name
    run = "command -v storyd-hook >/dev/null 2>&1 || exit 0; exec storyd-hook"
    assert str(BIN) not in settings_path.read_text() + (project / ".mcp.json").read_text()
    assert _handlers(settings, "PostToolUse") == [
        ("Bash", "./lint.sh"),
        ("Bash|Write|Edit|MultiEdit|NotebookEdit", f"{run} post-tool-use")]
    assert _handlers(settings, "Stop") == [(None, "notify-done"), (None, f"{run} stop")]
    assert _handlers(settings, "SubagentStop") == [(None, f"{run} stop")]
    assert _handlers(settings, "SessionStart") == [(None, f"{run} session-start")]  # fork too
    assert _handlers(settings, "Notification") == [(None, f"{run} notification")]  # all types
    assert _handlers(settings, "PostToolUseFailure") == [  # a tool that exited non-zero
        ("Bash|Write|Edit|MultiEdit|NotebookEdit", f"{run} post-tool-use")]
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert list(servers) == ["other", "storyd"]
    assert servers["storyd"] == {"type": "stdio", "command": "storyd", "args": ["mcp"]}
    lines = done.stdout.splitlines()
    assert f"{settings_path}: added hooks.Stop: {run} stop" in lines
    assert f"{project / '.mcp.json'}: added mcpServers.storyd: storyd mcp" in lines
    assert _handlers(settings, "SessionEnd") == [(None, f"{run} session-end")]  # claims back
    assert len(lines) == 8


def test_install_is_idempotent_and_dry_run_writes_nothing(env: dict[str, str],
                                                          project: Path) -> None:
    files = [project / ".claude" / "settings.json", project / ".mcp.json"]
    dry = storyd(env, "install", "--claude", "--project", str(project), "--dry-run")
    assert dry.returncode == 0
    assert [f.read_text() for f in files] == [EXISTING, MCP_EXISTING]
    assert all(": would: added " in line for line in dry.stdout.splitlines())
    storyd(env, "install", "--claude", "--project", str(project))
    first = [f.read_bytes() for f in files]
    again = storyd(env, "install", "--claude", "--project", str(project))
    assert [f.read_bytes() for f in files] == first
    assert again.stdout.splitlines() == [f"{f}: unchanged" for f in files]


def test_uninstall_takes_out_only_what_install_put_in(env: dict[str, str],
                                                      project: Path) -> None:
    storyd(env, "install", "--claude", "--project", str(project))
    dry = storyd(env, "uninstall", "--claude", "--project", str(project), "--dry-run")
    assert all(": would: removed " in line for line in dry.stdout.splitlines())
    done = storyd(env, "uninstall", "--claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings == json.loads(EXISTING)
    assert list(settings) == list(json.loads(EXISTING))
    assert json.loads((project / ".mcp.json").read_text()) == json.loads(MCP_EXISTING)
    again = storyd(env, "uninstall", "--claude", "--project", str(project))
    assert "removed" not in again.stdout


def test_a_server_named_storyd_that_is_not_ours_stays(env: dict[str, str],
                                                      project: Path) -> None:
    foreign = {"mcpServers": {"storyd": {"command": "/opt/x/storyd-proxy", "args": ["--x"]}}}
    (project / ".mcp.json").write_text(json.dumps(foreign))
    storyd(env, "uninstall", "--claude", "--project", str(project))
    assert json.loads((project / ".mcp.json").read_text()) == foreign


def test_user_scope_writes_the_home_files(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    (home / ".claude.json").write_text('{"numStartups": 3, "projects": {}}\n')
    done = storyd(env, "install", "--claude")
    assert done.returncode == 0, done.stderr
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert set(settings["hooks"]) == {
        "SessionStart", "Stop", "SubagentStop", "PostToolUse", "PostToolUseFailure",
        "Notification", "SessionEnd"}
    user = json.loads((home / ".claude.json").read_text())
    assert list(user) == ["numStartups", "projects", "mcpServers"]
    storyd(env, "uninstall", "--claude")
    assert json.loads((home / ".claude.json").read_text()) == {"numStartups": 3, "projects": {}}
    assert not (home / ".claude" / "settings.json").exists()  # it held only storyd's hooks


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"hooks": []}'])
def test_a_settings_file_it_cannot_merge_is_left_alone(env: dict[str, str], project: Path,
                                                       text: str) -> None:
    settings = project / ".claude" / "settings.json"
    settings.write_text(text)
    done = storyd(env, "install", "--claude", "--project", str(project))
    assert done.returncode == 65
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and str(settings) in done.stderr
    assert settings.read_text() == text
    assert (project / ".mcp.json").read_text() == MCP_EXISTING  # nothing written at all


def test_flags_that_do_not_go_together(env: dict[str, str], tmp_path: Path) -> None:
    assert storyd(env, "install", "--claude", "--enable").returncode == 64
    assert storyd(env, "install", "--project", str(tmp_path)).returncode == 64
    missing = storyd(env, "install", "--claude", "--project", str(tmp_path / "nope"))
    assert missing.returncode == 64 and "not a folder" in missing.stderr


@pytest.mark.slow
def test_the_skill_answers_as_the_seed_skill(env: dict[str, str], tmp_path: Path) -> None:
    """The SKILL.md's command, run as an agent runs it, prints the seed reference's bytes
    and exit codes (in the seed's mtime staleness rule); uninstall --skill removes it."""
    ws = demo_workspace(tmp_path)
    AgentsEnv(tmp_path).config(f"roots = [{str(tmp_path)!r}]\n", 'staleness = "mtime"\n')
    done = storyd(env, "install", "--skill", "--project", str(ws))
    assert done.returncode == 0, done.stderr
    path = ws / ".claude" / "skills" / "x-internal-story-resume" / "SKILL.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\nname: x-internal-story-resume\n")
    command = re.search(r"```bash\n(.+) \$ARGUMENTS\n```", text)
    assert command is not None
    assert command.group(1) == str(BIN / "storyd-resume")
    seed_env = dict(env, PATH=os.environ["PATH"])
    for args in (["--story-id", "story-0049-0013", "--epic-id", "0049"],
                 ["--story-id=story-0049-0014", "--epic-id=49"],
                 ["--story-id", "story-0049-0099", "--epic-id", "0049"],
                 ["--story-id", "story-0049-0013"]):
        ours = subprocess.run(["bash", "-c", f'{command.group(1)} "$@"', "skill", *args],
                              cwd=ws, env=env, capture_output=True, timeout=60, check=False)
        seed = run_reference(args, ws, seed_env)
        assert (ours.returncode, ours.stdout) == (seed.returncode, seed.stdout), args
    assert storyd(env, "install", "--skill", "--project", str(ws)).stdout.endswith(
        "unchanged\n")
    storyd(env, "uninstall", "--skill", "--project", str(ws))
    assert not path.exists()


def test_an_install_from_another_storyd_updates_in_place(env: dict[str, str]) -> None:
    """storyd reinstalled elsewhere (another venv, a path with a quote): the same entries
    get the new path, none is added twice; uninstall recognises either path as storyd's."""
    settings_path = Path(env["HOME"]) / ".claude" / "settings.json"
    settings_path.parent.mkdir()
    settings_path.write_text(EXISTING)
    storyd(env, "install", "--claude")
    old = shlex.quote("/old venv/it's/bin/storyd")
    moved = settings_path.read_text().replace(str(BIN / "storyd"),
                                              json.dumps(old)[1:-1])
    settings_path.write_text(moved)
    done = storyd(env, "install", "--claude")
    assert [line.split(": ", 1)[1].split(":")[0] for line in done.stdout.splitlines()] == [
        "updated hooks.SessionStart", "updated hooks.Stop", "updated hooks.SubagentStop",
        "updated hooks.PostToolUse", "updated hooks.PostToolUseFailure",
        "updated hooks.Notification", "updated hooks.SessionEnd", "unchanged"]
    settings = json.loads(settings_path.read_text())
    assert _handlers(settings, "Stop") == [(None, "notify-done"),
                                           (None, f"exec {BIN / 'storyd-hook'} stop")]
    settings_path.write_text(moved)
    storyd(env, "uninstall", "--claude")
    assert json.loads(settings_path.read_text()) == json.loads(EXISTING)


@pytest.mark.parametrize("written", ["launcher without exec", "storyd hook"])
def test_commands_an_older_install_wrote_are_replaced_in_place(env: dict[str, str],
                                                               written: str) -> None:
    """Commands from before `exec` (or from before the launcher) are storyd's: install
    replaces each in place, none twice, and uninstall takes them out."""
    settings_path = Path(env["HOME"]) / ".claude" / "settings.json"
    settings_path.parent.mkdir()
    settings_path.write_text(EXISTING)
    storyd(env, "install", "--claude")
    launcher = shlex.quote(str(BIN / "storyd-hook"))
    older = f"{launcher} " if written == "launcher without exec" else (
        f"{shlex.quote(str(BIN / 'storyd'))} hook ")
    text = settings_path.read_text().replace(json.dumps(f"exec {launcher} ")[1:-1],
                                             json.dumps(older)[1:-1])
    assert "exec " not in text
    settings_path.write_text(text)
    storyd(env, "install", "--claude")
    settings = json.loads(settings_path.read_text())
    assert _handlers(settings, "Stop") == [(None, "notify-done"),
                                           (None, f"exec {BIN / 'storyd-hook'} stop")]
    settings_path.write_text(text)
    storyd(env, "uninstall", "--claude")
    assert json.loads(settings_path.read_text()) == json.loads(EXISTING)


@pytest.mark.slow
def test_doctor_reports_the_claude_setup(env: dict[str, str], tmp_path: Path) -> None:
    home = Path(env["HOME"])
    settings = home / ".claude" / "settings.json"

    def claude_lines() -> list[str]:
        done = subprocess.run([STORYD, "doctor"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)
        assert "Traceback" not in done.stderr, done.stderr
        return [line for line in done.stdout.splitlines() if " claude: " in line]

    assert claude_lines() == [f"ok   claude: {settings}: not set up"]
    storyd(env, "install", "--claude")
    assert claude_lines() == [f"ok   claude: {settings}: 7 hooks with the MCP server"]
    settings.write_text(settings.read_text().replace(str(BIN / "storyd"), "/gone/bin/storyd"))
    assert claude_lines() == [
        f"warn claude: {settings}: storyd's entries run /gone/bin/storyd-hook, which is not "
        "there; "
        "run storyd install --claude again (or put storyd on PATH)"]
