"""Issue 44's reach: one real corpus file (with its commit's companions) of each newer
convention (OpenSpec, Backlog.md, Codex ExecPlan, BMAD, GSD, Claude Code's task list) in
one workspace, through every door the older formats have: `storyd top --once`, the MCP
server (the MCP SDK's own client), `storyd history` over a real daemon, and the fleet
view (`storyd top --fleet --once` from a real nats-server). The corpora are read at run
time (../shared/corpus/realworld3 and realworld4); the tests skip when they are absent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import realworld3
import realworld4
from cli_harness import STORYD, run_storyd_cli
from daemon_harness import wait_for
from nats_harness import NEEDS_NATS, fleet_config

pytestmark = pytest.mark.slow

# format -> (state file, unit key, resume point) of the picks below, as `--direct` reads them
UNITS = {
    "openspec": ("openspec/changes/add-auto-fix-pr/tasks.md", "add-auto-fix-pr", "task-#46"),
    "backlog-md": ("backlog/config.yml", "backlog", "task-task-12"),
    "execplan": (".agent/execplans/multi-tenancy-orders.md", "multi-tenancy-orders", "task-#3"),
    "bmad": ("docs/sprint-status.yaml", "sprint",
             "task-4-8-end-to-end-onboarding-testing-and-polish"),
    "gsd": (".planning/STATE.md", "project", "task-phase-4"),
    "claude-tasks": (".claude/tasks/1.json", "tasks", "task-2"),
}


def _pick(corpus: Any, convention: str, repo: str, commit: str,
          suffix: str) -> dict[str, object]:  # fmt: skip
    [entry] = [e for e in corpus.entries(convention) if e["repo"] == repo
               and str(e["commit"]).startswith(commit) and str(e["path"]).endswith(suffix)]
    return entry


def corpus_workspace(ws: Path) -> Path:
    """The six real picks laid out in `ws`, each with its commit's companions."""
    realworld3.need_corpus()
    realworld4.need_corpus()
    r3, r4 = realworld3, realworld4
    r4.lay_out(_pick(r4, "openspec", "Codagent-AI/agent-validator", "0406cbdf",
                     "add-auto-fix-pr/tasks.md"), ws)
    r4.lay_out_commit(_pick(r4, "backlog-md", "8agana/surreal-mind", "", "config.yml"), ws)
    r4.lay_out_commit(_pick(r4, "bmad", "1987-Dmytro/Mail-Agent", "481b7f32",
                            "sprint-status.yaml"), ws)
    r4.lay_out_commit(_pick(r4, "gsd", "BectorVoom/cintx", "f2294c2d", "STATE.md"), ws)
    r3.lay_out(_pick(r3, "codex-execplan", "Avanade/CoreEx", "", ".md"), ws)
    for entry in r3.entries("claude-tasks"):
        if entry["repo"] == "FabianSperrle/time-tracker":
            r3.lay_out(entry, ws)
    return ws


def _top(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([STORYD, "top", "--once", *args], capture_output=True, text=True,
                          timeout=60, check=False, env={**env, "COLUMNS": "160"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "\033" not in done.stdout
    return done.stdout


def _row(frame: str, unit: str) -> str:
    [row] = [line for line in frame.splitlines() if f" {unit} " in line]
    return row


def test_top_once_shows_each_format(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    """Each unit on its own row with its resume point and its two ledgers' finding."""
    ws = corpus_workspace(tmp_path / "ws")
    frame = _top(isolated_env, "--direct", "--workspace", str(ws))
    assert "6 units in 1 workspace" in frame, frame
    for _state, unit, point in UNITS.values():
        assert point in _row(frame, unit), (unit, frame)
    assert "state-roadmap-disagree" in _row(frame, "project")  # GSD's two ledgers
    assert "status-disagrees" in _row(frame, "sprint")  # BMAD's


def _mcp_answers(env: dict[str, str], ws: Path, errlog: Path, names: list[str]) -> list[str]:
    """The resume tool per state file (the CLI's bytes), the in-flight status, and one
    resource per unit in flight holding the resume tool's answer: asserted here for each
    name, and the names so checked returned (the caller asserts they are all)."""
    from mcp_harness import cli, session, text_of

    async def work(client: Any) -> dict[str, Any]:
        got = {"status": await client.call_tool("status", {}),
               "resources": await client.list_resources()}
        for name in names:
            state, unit, _ = UNITS[name]
            got[name] = await client.call_tool("resume", {"state_file": state})
            got[f"{name}-unit"] = await client.read_resource(f"storyd://unit/{unit}")
        return got

    got = session(env, ws, errlog, work)
    uris = {str(r.uri) for r in got["resources"].resources}
    checked = []
    for name in names:
        state, unit, point = UNITS[name]
        result = got[name]
        assert result.is_error is False, (name, text_of(result))
        assert text_of(result).encode() == cli(env, ws, "resume", "--state-file", state).stdout
        assert result.structured_content["envelope"]["resumePoint"] == point, name
        assert f"storyd://unit/{unit}" in uris, name
        resource = json.loads(got[f"{name}-unit"].contents[0].text)
        assert resource["envelope"]["resumePoint"] == point, name
        assert f'"{unit}"' in text_of(got["status"]), name
        checked.append(name)
    return checked


@pytest.mark.parametrize("mode", ["daemon", "direct"])
def test_mcp_answers_each_format(spawn_daemon: Any, tmp_path: Path, mode: str) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")
    from agents_harness import AgentsEnv

    ws = corpus_workspace(tmp_path / "ws")
    env = spawn_daemon([ws]).env if mode == "daemon" else AgentsEnv(tmp_path).env
    names = [n for n in UNITS if n != "claude-tasks"]
    assert _mcp_answers(env, ws, tmp_path / "mcp.err", names) == names


def test_mcp_answers_a_claude_task_list(tmp_path: Path) -> None:
    """A Claude task list through MCP: its `next` carries `status` as every format's does
    (the resume tool's outputSchema requires it; without it the tool answered "argument
    next.status: Field required")."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")
    from agents_harness import AgentsEnv

    ws = corpus_workspace(tmp_path / "ws")
    checked = _mcp_answers(AgentsEnv(tmp_path).env, ws, tmp_path / "mcp.err", ["claude-tasks"])
    assert checked == ["claude-tasks"]


def test_history_keeps_each_formats_versions(spawn_daemon: Any, tmp_path: Path) -> None:
    """The daemon records each unit's first version; a change is a second one, with the
    tasks it ticked (OpenSpec's next real commit: 55/62 -> 62/62)."""
    ws = corpus_workspace(tmp_path / "ws")
    proc = spawn_daemon([ws])
    for state, _unit, _point in UNITS.values():  # read each once: its first version
        assert run_storyd_cli("resume", "--state-file", state, env=proc.env,
                              cwd=ws).returncode == 0  # fmt: skip

    def recorded() -> bool:
        history = proc.stats()["history"]
        return history["queued"] == 0  # type: ignore[index,no-any-return]

    wait_for(recorded, 20, "the history writer")
    for name, (state, _unit, _point) in UNITS.items():
        versions = _history(proc.env, ws, state)
        assert len(versions) == 1, (name, versions)
    later = _pick(realworld4, "openspec", "Codagent-AI/agent-validator", "33f88fa0",
                  "add-auto-fix-pr/tasks.md")
    realworld4.lay_out(later, ws)
    openspec = UNITS["openspec"][0]
    wait_for(lambda: len(_history(proc.env, ws, openspec)) == 2, 20,
             "OpenSpec's second version in the history")
    first, second = _history(proc.env, ws, openspec)
    assert "Traceback" not in json.dumps(second)
    assert first != second


def _history(env: dict[str, str], ws: Path, state: str) -> list[dict[str, object]]:
    done = run_storyd_cli("history", "--workspace", str(ws), "--state-file", state, "--json",
                          env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@NEEDS_NATS
def test_the_fleet_view_shows_each_format(tmp_path: Path, spawn_daemon: Any,
                                          nats_server: Any) -> None:  # fmt: skip
    """One machine publishing the six units to NATS; `top --fleet --once` shows each
    with its resume point (one machine's units go by their own names)."""
    server = nats_server()
    cfg = tmp_path / "alpha.toml"
    cfg.write_text("[notify]\ndesktop = false\n\n" + fleet_config(server.url, "alpha"))
    ws = corpus_workspace(tmp_path / "alpha" / "ws")
    spawn_daemon([ws], args=["--config", str(cfg)], socket_path=tmp_path / "alpha.sock")

    def frame() -> str | None:
        text = _top(dict(os.environ), "--fleet", "--url", server.url)
        return text if "6 units" in text else None

    text = wait_for(frame, 20, "the six units in the fleet frame")
    assert "storyd top (fleet, 1 machine" in text
    for _state, unit, point in UNITS.values():
        assert point in _row(text, unit), (unit, text)
