"""VS Code reads its user MCP file from its user folder: ~/Library/Application
Support/Code/User on macOS, ~/.config/Code/User on Linux
(https://code.visualstudio.com/docs/getstarted/settings#_settings-file-locations)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from storyd.agents.installs import AGENTS, paths


@pytest.mark.parametrize(("platform", "where"), [
    ("darwin", "Library/Application Support/Code/User/mcp.json"),
    ("linux", ".config/Code/User/mcp.json"),
])
def test_the_user_mcp_file_is_where_vs_code_reads_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      platform: str, where: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", platform)
    hooks, server = paths(AGENTS["vscode"], None)
    assert server == str(tmp_path / where)
    assert hooks == str(tmp_path / ".copilot/hooks/storyd.json")


def test_a_project_keeps_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert paths(AGENTS["vscode"], str(tmp_path))[1] == str(tmp_path.resolve() / ".vscode/mcp.json")
